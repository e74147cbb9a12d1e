"""``dtype-bench scaling ROOT [--baseline ddp_fp32] [--out DIR]``: the analysis of multi-GPU runs
(seeds 003 and 004) from every ``result.json`` and ``rank{r}.jsonl`` under a folder: per-window
throughput (``throughput_table``), speed-up and efficiency of N devices against 1
(``scaling_table``), the summary against a baseline arm (``baseline_summary``) and bar charts.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from benchlib.core.argparser import ArgumentParser, existing_file
from benchlib.analysis.charts import FORMATS, save
from benchlib.core.blocks import replace_block
from benchlib.core.records import COMPLETED, json_safe, load_records, read_steps, records_frame, steps_file
from benchlib.core.runconfig import DistConfig, flatten

BASELINE_ARM = "ddp_fp32"
# Runs that trained every step (a short run's stalled or degraded status does not spoil its timings)
MEASURED = COMPLETED
EFFICIENCY_TARGET = 90.0
"""Issue 55's targets at 2 GPUs (GPT-2 124M, 12x1024 tokens per GPU, amp_bf16): DDP >= 90% scaling
efficiency, and tuned FSDP2 >= 80% of DDP's tokens/s (``vs_ddp_pct``)."""
FSDP2_VS_DDP_TARGET = 80.0
RUN_KEYS = ["scenario", "config", "strategy", "activation_checkpointing", "limit_all_gathers", "size",
            "batch_size", "seq_len", "grad_accum", "compile", "steps", "dist"]
"""What makes two runs the same setup but for the device count (``dist``: levers off their defaults)."""
LEVERS = ("bucket_cap_mb", "static_graph", "reshard", "prefetch", "local_shards", "mp", "compile_unit", "optimize_ddp")

# ---- Loading records and per-rank windows ----------------------------------------------------
def load_runs(root: str | Path):
    """One row per record under ``root`` with its arm, strategy, world size and dist/ metrics."""
    recs = load_records(root)
    if not recs:
        raise FileNotFoundError(f"no readable result.json under {root}")
    df = records_frame(recs)
    runs = [flatten(r["run"]) for r in recs]  # records before `dist` was a section: flat keys
    df["arm"] = [(r["run"].get("extra") or {}).get("arm") or _arm_of_path(r.get("_path")) or _arm_name(run)
                 for r, run in zip(recs, runs)]
    df["strategy"] = [run.get("dist.strategy", "single") for run in runs]
    df["limit_all_gathers"] = [run.get("dist.limit_all_gathers", True) for run in runs]
    df["nproc"] = [int(r["metrics"].get("dist/world_size") or run.get("dist.nproc", 1)) for r, run in zip(recs, runs)]
    df["dist"] = [_levers(r, run) for r, run in zip(recs, runs)]
    for k in RUN_KEYS:
        if k not in df:
            df[k] = df.get(f"run.{k}")
    return df.reset_index(drop=True)


def _levers(rec: dict, run: dict) -> str:
    """The tuning levers a run set away from their defaults, as ``key=value,...``."""
    default = DistConfig()
    return ",".join(f"{k}={run[f'dist.{k}']}" for k in LEVERS
                     if f"dist.{k}" in run and run[f"dist.{k}"] != getattr(default, k))


def _arm_of_path(path: str | None) -> str | None:
    """The arm of a record under ``runs/<arm>/<scenario>/<config>/seed<k>/`` (one cut off before its notes)."""
    parts = Path(path).parts if path else ()
    if "runs" in parts and len(parts) - parts.index("runs") == 6:
        return parts[parts.index("runs") + 1]
    return None


def _arm_name(run: dict) -> str:
    s = run.get("dist.strategy", "single")
    return "single" if s == "single" else f"{s}_{run.get('dist.nproc', 1)}"


def windows_frame(runs) -> pd.DataFrame:
    """Every rank's timed windows (``rank{r}.jsonl``) of the measured runs, with the run's arm."""
    rows = []
    for _, run in runs[runs["status"].isin(MEASURED)].iterrows():
        for f in sorted(Path(run["path"]).parent.glob("rank*.jsonl")):
            for line in f.read_text().splitlines():
                w = json.loads(line)
                if "window" in w:
                    rows.append({"arm": run["arm"], "config": run["config"], "seed": run["seed"],
                                 "nproc": run["nproc"], **w})
    return pd.DataFrame(rows)


def losses(path: str | Path) -> list[float]:
    f = steps_file(Path(path).parent)
    return [r["loss"] for r in read_steps(f) if "loss" in r] if f else []


# ---- Tables ----------------------------------------------------------------------------------
def throughput_table(windows) -> pd.DataFrame:
    """Per arm and dtype config, seed 003's way: time per window (mean over ranks) and tokens/s
    (summed), each run's first window left out where it has two or more; mean and std over the
    windows of every seed."""
    keys = ["arm", "config", "seed", "window"]
    w = windows.groupby(keys, sort=False).agg(nproc=("nproc", "first"), time_s=("time_s", "mean"),
                                              step_ms=("step_ms", "mean"), tokens_per_s=("tokens_per_s", "sum"))
    w = w.reset_index()
    run = w.groupby(["arm", "config", "seed"])["window"]
    w = w[(w["window"] != run.transform("min")) | (run.transform("size") < 2)]
    cols = ["time_s", "step_ms", "tokens_per_s"]
    g = w.groupby(["arm", "config"], sort=False)
    out = g.agg(nproc=("nproc", "first"), windows=("window", "size"), **{k: (k, "mean") for k in cols})
    out[[f"{k}_std" for k in cols]] = g[cols].std(ddof=1).fillna(0.0).to_numpy()
    return out.reset_index().astype({"nproc": int})


def scaling_table(runs) -> pd.DataFrame:
    """Speed-up and efficiency (tokens/s at N / (N x at 1), weak scaling) of each setup against its
    own 1-device run, else ``single`` on it; ``vs_single_pct`` against the plain single-device run
    whatever the strategy and levers. Means over seeds."""
    ok = runs[runs["status"].isin(MEASURED)].copy()
    if ok.empty:
        return pd.DataFrame()
    keys = [k for k in RUN_KEYS if k in ok]
    cols = {"dist/tokens_per_s": "tokens_per_s", "dist/tokens_per_s_std": "tokens_per_s_std",
            "dist/step_ms": "step_ms", "dist/step_ms_std": "step_ms_std",
            "dist/peak_allocated_gib_max": "gib_per_device", "dist/peak_rss_gib_max": "rss_gib_per_process",
            "quality/val_loss": "val_loss", "stability/final_train_loss": "final_train_loss"}
    for c in cols:
        if c not in ok:
            ok[c] = float("nan")
    # CPU runs: the process's peak resident memory stands for the device's
    ok["dist/peak_allocated_gib_max"] = ok["dist/peak_allocated_gib_max"].fillna(ok["memory"])
    agg = (ok.groupby(keys + ["arm", "nproc"], dropna=False)[list(cols)].mean(numeric_only=True)
           .rename(columns=cols).reset_index())
    agg["seeds"] = ok.groupby(keys + ["arm", "nproc"], dropna=False).size().values
    other = [k for k in keys if k != "strategy"]
    setup = [k for k in other if k != "dist"]
    one = agg[agg["nproc"] == 1]
    single = one[one["strategy"] == "single"]

    def first(rows, on, name):  # each setup's first 1-device run (a missing key matches a missing key)
        return rows.drop_duplicates(on)[on + ["tokens_per_s", "step_ms"]].assign(**{name: True}).rename(
            columns={"tokens_per_s": f"{name}_tps", "step_ms": f"{name}_ms"})
    t = (agg.merge(first(one, other + ["strategy"], "own"), on=other + ["strategy"], how="left")
         .merge(first(single, other, "one"), on=other, how="left")
         .merge(first(single, setup, "plain"), on=setup, how="left"))
    own = t["own"].eq(True)
    base_tps, base_ms = t["own_tps"].where(own, t["one_tps"]), t["own_ms"].where(own, t["one_ms"])
    has = (own | t["one"].eq(True)) & (base_tps > 0)
    t["baseline"] = (t["strategy"].where(own, "single") + " x1").where(has)
    t["speedup"] = (t["tokens_per_s"] / base_tps).where(has)
    t["efficiency_pct"] = 100 * t["speedup"] / t["nproc"]
    t["step_time_ratio"] = (t["step_ms"] / base_ms).where(has)
    t["vs_single_pct"] = (100 * t["tokens_per_s"] / (t["nproc"] * t["plain_tps"])).where(t["plain_tps"] > 0)
    # against DDP on as many GPUs, the setup otherwise the same (levers aside): FSDP2's target
    ddp = agg[agg["strategy"] == "ddp"].drop_duplicates(setup + ["nproc"])[setup + ["nproc", "tokens_per_s"]]
    t = t.merge(ddp.rename(columns={"tokens_per_s": "ddp_tps"}), on=setup + ["nproc"], how="left")
    t["vs_ddp_pct"] = (100 * t["tokens_per_s"] / t["ddp_tps"]).where((t["nproc"] > 1) & (t["ddp_tps"] > 0))
    table = t[list(agg.columns) + ["baseline", "speedup", "efficiency_pct", "step_time_ratio", "vs_single_pct",
                                   "vs_ddp_pct"]]
    return table.sort_values(["scenario", "config", "strategy", "nproc"]).reset_index(drop=True)


def baseline_summary(runs, windows=None, baseline: str = BASELINE_ARM) -> dict:
    """Seed 004's ``summary.json``: per arm (per ``arm/config`` where an arm ran several dtype configs),
    median tokens/s, final and best loss, memory per device, and speed-up and loss difference against
    the baseline arm of the same config (else the baseline arm's first). Without the baseline arm,
    the arm ``ddp`` stands in, else the first arm."""
    windows = windows if windows is not None else windows_frame(runs)
    several = runs.groupby("arm")["config"].nunique().gt(1).any()
    out: dict[str, dict] = {}
    for (arm, config), g in runs.groupby(["arm", "config"], sort=False):
        key = f"{arm}/{config}" if several else arm
        ok = g[g["status"].isin(MEASURED)]
        entry: dict[str, Any] = {"status": ", ".join(sorted(set(g["status"]))), "runs": len(g), "arm": arm,
                                 "strategy": g["strategy"].iloc[0], "nproc": int(g["nproc"].iloc[0]), "config": config}
        entry.update({k: bool(g[f"run.{k}"].iloc[0]) for k in ("activation_checkpointing", "limit_all_gathers")
                      if f"run.{k}" in g})
        if g["reason"].notna().any():
            entry["reason"] = g["reason"].dropna().iloc[0].strip().splitlines()[-1][:300]
        if len(ok):
            w = windows[(windows["arm"] == arm) & (windows["config"] == config)] if len(windows) else windows
            if len(w):
                summed = w.groupby(["seed", "window"])["tokens_per_s"].sum()
                entry["median_tokens_per_s"] = float(summed.median())
            curves = [losses(p) for p in ok["path"]]
            finals = [c[-1] for c in curves if c]
            bests = [min(v for v in c if math.isfinite(v)) for c in curves if any(math.isfinite(v) for v in c)]
            entry.update(final_loss=statistics.fmean(finals) if finals else None, best_loss=statistics.fmean(bests) if bests else None,
                         val_loss=float(ok["quality/val_loss"].mean()) if "quality/val_loss" in ok else None,
                         gib_per_device=json_safe(ok.get("dist/peak_allocated_gib_max", ok.get("memory")).mean()),
                         step_ms=json_safe(ok["dist/step_ms"].mean()) if "dist/step_ms" in ok else None)
        out[key] = entry
    by_arm = {(e["arm"], e["config"]): k for k, e in out.items()}
    first_of = {e["arm"]: k for k, e in reversed(list(out.items()))}
    base_arm = next((a for a in (baseline, "ddp") if a in first_of), next(iter(out.values()), {}).get("arm"))
    for k, e in out.items():
        base = out.get(by_arm.get((base_arm, e["config"])) or first_of.get(base_arm), {})
        e["baseline"] = f"{base.get('arm')}/{base.get('config')}" if several and base else base.get("arm")
        if e.get("median_tokens_per_s") and base.get("median_tokens_per_s"):
            e["speedup_vs_baseline"] = e["median_tokens_per_s"] / base["median_tokens_per_s"]
        if e.get("final_loss") is not None and base.get("final_loss") is not None:
            e["final_loss_minus_baseline"] = e["final_loss"] - base["final_loss"]
    return {"baseline": base_arm, "experiments": out}


# ---- Charts (Altair; written through charts.save) --------------------------------------------
def bar_chart(table, y: str, err: str | None, title: str, y_title: str, x: str = "arm",
              color: str = "strategy", rules: list[float] = ()):
    """One bar per row of a tidy table, +-1 std error bars, an optional target line."""
    d = table.dropna(subset=[y]).copy()
    if d.empty:
        return alt.Chart(pd.DataFrame({"t": [f"no data for {y}"]})).mark_text().encode(text="t:N")
    e = d[err].fillna(0) if err and err in d else 0
    d["lo"], d["hi"] = d[y] - e, d[y] + e
    order = list(d[x])
    base = alt.Chart(d).encode(x=alt.X(f"{x}:N", sort=order, title=None, axis=alt.Axis(labelAngle=-30)))
    bars = base.mark_bar().encode(y=alt.Y(f"{y}:Q", title=y_title),
                                  color=alt.Color(f"{color}:N", title=color) if color in d else alt.value("#4c78a8"),
                                  tooltip=[f"{x}:N", alt.Tooltip(f"{y}:Q", format=",.3~f")])
    layers = [bars]
    if err and err in d:
        layers.append(base.mark_errorbar().encode(y=alt.Y("lo:Q", title=y_title), y2="hi:Q"))
    layers.append(base.mark_text(dy=-8, fontSize=10).encode(y="hi:Q", text=alt.Text(f"{y}:Q", format=",.3~r")))
    if rules:
        layers.append(alt.Chart(pd.DataFrame({"r": list(rules)})).mark_rule(strokeDash=[4, 4], color="grey").encode(y="r:Q"))
    return alt.layer(*layers).properties(title=title, width=max(240, 46 * len(d)), height=260)


def grid_chart(scaling):
    """Strategy (arm) x dtype config: tokens/s per GPU against one plain GPU of the same config
    (colour and first line) and peak GiB per GPU (second line)."""
    d = scaling.dropna(subset=["vs_single_pct"]).copy()
    d["line1"] = d["vs_single_pct"].map("{:.0f}%".format)
    d["line2"] = d["gib_per_device"].map("{:.1f} GiB".format)
    order = list(dict.fromkeys(d.sort_values(["nproc", "strategy"])["arm"]))
    base = alt.Chart(d).encode(x=alt.X("arm:N", sort=order, title=None, axis=alt.Axis(labelAngle=-30, orient="top")),
                               y=alt.Y("config:N", title=None))
    cells = base.mark_rect().encode(
        color=alt.Color("vs_single_pct:Q", title="% of one GPU", scale=alt.Scale(scheme="blues", domain=[0, 100])),
        tooltip=["arm:N", "config:N", alt.Tooltip("tokens_per_s:Q", format=",.0f"),
                 alt.Tooltip("vs_single_pct:Q", format=".1f"), alt.Tooltip("gib_per_device:Q", format=".2f")])
    text = [base.mark_text(dy=dy, fontSize=10).encode(
        text=f"{k}:N", color=alt.condition("datum.vs_single_pct > 60", alt.value("white"), alt.value("black")))
        for dy, k in ((-6, "line1"), (7, "line2"))]
    return alt.layer(cells, *text).properties(
        title="Throughput per GPU as % of one plain GPU (same config), and peak GiB per GPU",
        width=max(300, 70 * len(order)), height=44 * d["config"].nunique())


def charts(seed003, scaling, summary: dict) -> dict:
    """Seed 003's and 004's bar charts, by file name."""
    out = {}
    if seed003 is not None and len(seed003):
        label = seed003["arm"] + (" (" + seed003["config"] + ")" if seed003["config"].nunique() > 1 else "")
        s3 = seed003.assign(strategy=seed003["arm"], arm=label)
        out["training_time_comparison"] = bar_chart(s3, "time_s", "time_s_std", "Training time per window (mean over ranks)",
                                                     "seconds per window", color="nproc")
        out["tokens_per_second_comparison"] = bar_chart(s3, "tokens_per_s", "tokens_per_s_std",
                                                        "Throughput (tokens/s summed over ranks)", "tokens/s", color="nproc")
    if scaling is not None and len(scaling):
        sc = scaling.assign(arm=scaling["arm"].astype(str) + " (" + scaling["config"] + ")")
        multi = sc[sc["nproc"] > 1]
        out["scaling_efficiency"] = bar_chart(multi, "efficiency_pct", None,
                                              f"Scaling efficiency vs 1 device (%); DDP's target {EFFICIENCY_TARGET:g}",
                                              "efficiency %", rules=[EFFICIENCY_TARGET])
        out["memory_per_device"] = bar_chart(sc, "gib_per_device", None, "Peak memory per device", "GiB")
        if scaling["config"].nunique() > 1:
            out["strategy_by_policy"] = grid_chart(scaling)
    exps = summary.get("experiments", {}) if summary else {}
    if exps:
        d = pd.DataFrame([{**e, "arm": a} for a, e in exps.items()])
        if "final_loss" in d:
            out["loss_vs_baseline"] = bar_chart(d, "final_loss", None, f"Final training loss (baseline {summary['baseline']})",
                                                "loss")
        if "median_tokens_per_s" in d:
            out["median_tokens_per_s"] = bar_chart(d, "median_tokens_per_s", None, "Median tokens/s (seed 004)", "tokens/s")
    return out


# ---- The whole analysis ----------------------------------------------------------------------
@dataclass
class Scaling:
    runs: Any
    windows: Any
    throughput: Any
    scaling: Any
    summary: dict
    charts: dict
    files: list


def analyze(root: str | Path, out_dir: str | Path | None = None, baseline: str = BASELINE_ARM,
            formats: tuple[str, ...] | None = None) -> Scaling:
    """Tables, ``summary.json``, ``scaling.csv`` and chart files for every record under ``root``."""
    formats = formats or FORMATS
    runs = load_runs(root)
    windows = windows_frame(runs)
    s3 = throughput_table(windows) if len(windows) else None
    sc = scaling_table(runs)
    summary = json_safe(baseline_summary(runs, windows, baseline))
    ch = charts(s3, sc, summary)
    out = Path(out_dir) if out_dir else Path(root) / "scaling"
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    files = [out / "summary.json"]
    for name, t in (("scaling", sc if len(sc) else None), ("seed003", s3)):
        if t is not None:
            t.to_csv(out / f"{name}.csv", index=False)
            files.append(out / f"{name}.csv")
    if formats:
        for name, chart in ch.items():
            files += save(chart, out / "plots" / name, formats)
    return Scaling(runs, windows, s3, sc, summary, ch, files)


SCALING_COLUMNS = ["scenario", "config", "arm", "strategy", "nproc", "tokens_per_s", "tokens_per_s_std", "step_ms",
                   "step_ms_std", "speedup", "efficiency_pct", "baseline", "vs_single_pct", "vs_ddp_pct", "gib_per_device",
                   "final_train_loss", "val_loss", "dist"]


def markdown_table(df) -> str:
    """A pipe table (what docs/multi_gpu.md shows), numbers to 4 significant digits."""
    def cell(v):
        if isinstance(v, float):
            return "" if v != v else f"{v:,.4g}"
        return "" if v is None else str(v)
    rows = [[cell(v) for v in r] for r in df.itertuples(index=False)]
    return "\n".join(["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def report(res: Scaling, markdown: bool = False) -> str:
    """The tables as text or Markdown: throughput per arm, scaling, and the summary (seed 004's)."""
    show = markdown_table if markdown else (lambda d: d.to_string(index=False))
    lines = []
    with pd.option_context("display.width", 220, "display.max_columns", 30, "display.float_format", "{:,.4g}".format):
        if res.throughput is not None:
            lines += ["throughput per arm, seed 003's way (first window excluded; time averaged, tokens/s summed over "
                      "ranks; mean and std over windows):", "", show(res.throughput), ""]
        if len(res.scaling):
            cols = [c for c in SCALING_COLUMNS if c in res.scaling]
            lines += ["scaling (N devices vs 1):", "", show(res.scaling[cols]), ""]
        exps = res.summary.get("experiments", {})
        if exps:
            d = pd.DataFrame([{**e, "arm": a} for a, e in exps.items()])
            cols = [c for c in ("arm", "status", "strategy", "nproc", "config", "median_tokens_per_s", "baseline", "speedup_vs_baseline",
                                "final_loss", "best_loss", "final_loss_minus_baseline", "gib_per_device") if c in d]
            lines += [f"summary against the baseline arm {res.summary['baseline']} (seed 004's format):", "",
                      show(d[cols]), ""]
    lines += [f"files: {', '.join(str(f) for f in res.files[:3])}" + (f" and {len(res.files) - 3} more" if len(res.files) > 3 else "")]
    return "\n".join(lines)


# ---- The multi-GPU findings (README) ---------------------------------------------------------
MULTI_GPU_MARKERS = ("<!-- multi-gpu:start -->", "<!-- multi-gpu:end -->")
GRID_ARMS = ("single", "ddp", "fsdp2", "fsdp1", "fsdp_manual")
SHARDED = ("fsdp2", "fsdp1", "fsdp_manual")


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{x:.0f}%"


def _recipe(root, runs) -> str:
    r, env = runs.iloc[0], load_records(root)[0]["env"]
    return (f"scenario {r['scenario']}, `{r['size']}` (GPT-2 124M shapes), {r['batch_size']} x {r['seq_len']} tokens per "
            f"GPU, {r['steps']} steps, beta2 {r.get('run.beta2', '-')}, compile {r['compile']}, "
            f"seed {', '.join(map(str, sorted(set(runs['seed']))))}; metric: tokens/s and peak GiB per GPU; "
            f"{env.get('device_count')}x {env.get('device_name')}, {env.get('cpu_model')} ({env.get('cpu_count')} cores), "
            f"torch {env.get('torch')}, commit {env.get('git_commit')}")


def multi_gpu_findings(strategies: str | Path, tuning: str | Path, audit: str | Path | None = None) -> str:
    """The README's multi-GPU findings from the strategy x policy study (``params/strategies.yaml``),
    the tuning study (``params/scaling.yaml``) and a parity audit's ``verdicts.csv``: every number and
    verdict computed from the committed records."""
    runs, truns = load_runs(strategies), load_runs(tuning)
    sc, tu = scaling_table(runs).set_index(["arm", "config"]), scaling_table(truns).set_index("arm")
    configs = list(dict.fromkeys(runs["config"]))
    cell = lambda a, c: sc.loc[(a, c)] if (a, c) in sc.index else None  # noqa: E731
    lines = [f"**Strategy x precision policy** ({_recipe(strategies, runs)}): per GPU, % of one plain GPU's tokens/s under "
             f"the same config, then peak GiB per GPU. Study `{Path(strategies).as_posix()}`.", "",
             "| policy | " + " | ".join(GRID_ARMS) + " |", "|---" * (len(GRID_ARMS) + 1) + "|"]
    for c in configs:
        cells = [(f"{_pct(r['vs_single_pct'])} · {r['gib_per_device']:.1f}" if r is not None else "-")
                 for r in (cell(a, c) for a in GRID_ARMS)]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines.append("")
    ddp = [cell("ddp", c)["vs_single_pct"] for c in configs if cell("ddp", c) is not None]
    best = {c: max((a for a in SHARDED if cell(a, c) is not None), key=lambda a: cell(a, c)["tokens_per_s"]) for c in configs}
    top = max(set(best.values()), key=list(best.values()).count)

    def lead(c):  # the best sharded run's tokens/s over the next one's, and the windows' largest relative std
        runs_c = sorted((cell(a, c) for a in SHARDED if cell(a, c) is not None), key=lambda r: -r["tokens_per_s"])
        return (runs_c[0]["tokens_per_s"] / runs_c[1]["tokens_per_s"] - 1,
                max(r["step_ms_std"] / r["step_ms"] for r in runs_c[:2]))
    clear = [c for c in configs if best[c] == top and lead(c)[0] > 2 * lead(c)[1]]
    lines += [f"- **DDP keeps {min(ddp):.0f}-{max(ddp):.0f}% of one GPU per GPU** under every policy here.",
              f"- **The fastest sharded strategy is `{top}`** under {list(best.values()).count(top)} of {len(configs)} "
              f"policies by mean tokens/s (one seed), by more than twice the timed windows' sd under {len(clear)}"
              + (f" ({', '.join(clear)})" if clear else "") + "; per policy, the best sharded run against DDP, then its "
              "lead over the next sharded strategy and the windows' sd: " + "; ".join(
                  f"{c} {best[c]} {_pct(cell(best[c], c)['vs_ddp_pct'])}, +{100 * lead(c)[0]:.0f}% (sd {100 * lead(c)[1]:.0f}%)"
                  for c in configs) + ".",
              "- **Sharding saves little memory at this size**: per GPU, DDP against the lightest sharded run, " + "; ".join(
                  f"{c} {cell('ddp', c)['gib_per_device']:.1f} -> {min(cell(a, c)['gib_per_device'] for a in SHARDED):.1f} GiB"
                  for c in configs) + " (activations, not weights and Adam's state, fill the GPU)."]
    for a in ("ddp", *SHARDED):  # activation checkpointing, amp_bf16
        on, off = cell(f"{a}_checkpoint", "amp_bf16"), cell(a, "amp_bf16")
        if on is not None and off is not None:
            lines.append(f"- **Checkpointing under `{a}`** (amp_bf16): step {off['step_ms']:.1f} -> {on['step_ms']:.1f} ms "
                         f"(+{100 * (on['step_ms'] / off['step_ms'] - 1):.0f}%), peak {off['gib_per_device']:.1f} -> "
                         f"{on['gib_per_device']:.1f} GiB per GPU.")
    for ck in ("", "_checkpoint"):  # FSDP1's limit_all_gathers
        on, off = cell(f"fsdp1{ck}", "amp_bf16"), cell(f"fsdp1{ck}_no_limit", "amp_bf16")
        if on is not None and off is not None:
            noise = 2 * max(on["step_ms_std"], off["step_ms_std"])
            lines.append(f"- **FSDP1's limit_all_gathers{' with checkpointing' if ck else ''}**: {on['step_ms']:.1f} ms on, "
                         f"{off['step_ms']:.1f} off: " + ("a difference within" if abs(on["step_ms"] - off["step_ms"]) <= noise
                                                          else f"{'on' if on['step_ms'] < off['step_ms'] else 'off'} is faster by more than")
                         + f" twice the windows' std ({noise:.1f} ms).")
    lines += ["", f"**Tuning DDP and FSDP2, compiled** ({_recipe(tuning, truns)}; study `{Path(tuning).as_posix()}`):", ""]
    d2, d1, s1 = (tu.loc[a] if a in tu.index else None for a in ("ddp_2", "ddp_1", "single"))
    if d2 is not None:
        lines.append(f"- **DDP on 2 GPUs: {d2['efficiency_pct']:.1f}% scaling efficiency** against DDP on one "
                     f"({'meets' if d2['efficiency_pct'] >= EFFICIENCY_TARGET else 'misses'} the {EFFICIENCY_TARGET:g}% "
                     f"target), {d2['vs_single_pct']:.1f}% against one plain GPU: DDP on one GPU alone takes "
                     f"{d1['step_ms']:.1f} ms a step where the plain step takes {s1['step_ms']:.1f}.")
    f2 = tu.loc["fsdp2_2"] if "fsdp2_2" in tu.index else None
    if f2 is not None:
        opt = truns.set_index("arm")["time/optimizer_ms"]
        lines.append(f"- **Tuned FSDP2 reaches {f2['vs_ddp_pct']:.0f}% of DDP's tokens/s** "
                     f"({'meets' if f2['vs_ddp_pct'] >= FSDP2_VS_DDP_TARGET else 'misses'} the {FSDP2_VS_DDP_TARGET:g}% target; "
                     f"levers: {f2['dist']}). Each lever's worth: " + "; ".join(
                         f"`{a}` {tu.loc[a]['tokens_per_s'] / f2['tokens_per_s']:.2f}x the tuned tokens/s, optimizer step "
                         f"{opt[a]:.1f} ms" for a in ("fsdp2_dtensor_2", "fsdp2_default_2") if a in tu.index)
                     + f" (tuned {opt['fsdp2_2']:.1f} ms).")
        if "fsdp2_1" in tu.index:
            lines.append(f"- **Where FSDP2's step goes**: on one GPU, with nothing to communicate, it takes "
                         f"{tu.loc['fsdp2_1']['step_ms']:.1f} ms against the plain {s1['step_ms']:.1f}, so most of the gap "
                         "to DDP is there without communication: work per block on the host (FSDP2's hooks, the copies "
                         "around each all-gather and reduce-scatter, one graph per block); no profile splits it further.")
    if all(cell("ddp", c)["tokens_per_s"] > cell(best[c], c)["tokens_per_s"] for c in configs):
        lines.append("- **At this size DDP is faster than every sharded strategy under every policy**: sharding pays "
                     "where a model's state does not fit one GPU, which no run here reaches.")
    if audit is not None and Path(audit, "verdicts.csv").is_file():
        v = pd.read_csv(Path(audit, "verdicts.csv"))
        v = v[v["verdict"] != "reference"]
        bad = v[v["verdict"] != "match"]
        where = ", ".join(f"{st} {n}" for st, n in bad.groupby("strategy").size().items())
        lines.append(f"- **Parity audit** (`{Path(audit).as_posix()}`): {int((v['verdict'] == 'match').sum())} of {len(v)} "
                     "(policy, strategy) pairs compute what one process does, dtype by dtype. The others (" + where
                     + ") differ in " + ", ".join(sorted({q.split(':')[0].strip() for d in bad["differences"].dropna()
                                                        for q in str(d).split(";")}))
                     + f"; their loss stays within {bad['loss_max_rel_diff'].max():.0e} of one process's over the audit's "
                     "steps, so only the dtypes show them.")
    lines += ["- One seed: throughput and memory are measured, a loss here is not a quality verdict. Compare numbers "
              "within one study: the host's CPU moves the host-bound steps (FSDP, compiled DDP) between machines."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "analyze":
        argv = argv[1:]
    p = ArgumentParser(prog="dtype-bench scaling", description="Scaling analysis of multi-GPU runs "
                       "(seeds 003, 004): tables, summary.json and charts from the records under a folder.")
    p.add_argument("root", help="The folder of the multi-GPU runs' records, e.g. executed/scaling.")
    p.add_argument("--baseline", default=BASELINE_ARM, help=f"Seed 004's baseline arm (default: {BASELINE_ARM}).")
    p.add_argument("--out", default=None, help="Output folder (default: ROOT/scaling).")
    p.add_argument("--formats", default="", help="Chart files to write: png, svg (default: svg).")
    p.add_argument("--markdown", action="store_true", help="Print the tables as markdown (docs/multi_gpu.md).")
    p.add_argument("--findings", nargs=2, metavar=("TUNING", "AUDIT"), help="Instead of the tables, the README's "
                   "multi-GPU findings: ROOT is the strategy x policy study, TUNING the DDP/FSDP2 tuning study, "
                   "AUDIT a parity audit's folder (its verdicts.csv).")
    p.add_argument("--readme", type=existing_file, help="With --findings: rewrite this file's block between "
                   f"{MULTI_GPU_MARKERS[0]} and {MULTI_GPU_MARKERS[1]} instead of printing.")
    ns = p.parse_args(argv)
    if ns.findings:
        body = multi_gpu_findings(ns.root, *ns.findings)
        if not ns.readme:
            print(body, end="")
            return 0
        path = Path(ns.readme)
        path.write_text(replace_block(path.read_text(), body, *MULTI_GPU_MARKERS))
        print(f"{path}: multi-GPU findings written")
        return 0
    res = analyze(ns.root, ns.out, ns.baseline, tuple(f for f in ns.formats.split(",") if f))
    print(report(res, markdown=ns.markdown))
    return 0
