"""``dtype-bench arms``: what one setting (an *arm*) costs or gains against a baseline setting,
from pairs of runs that agree on everything else.

    dtype-bench arms executed/h100/checkpointing --arm arm --metric step_ms         # baseline plain
    dtype-bench arms executed/h100/fp8_sizes --arm config --metric step_ms          # baseline amp_bf16
    dtype-bench arms executed/h100/serve --arm serve_mode --metric quality          # baseline trained
    dtype-bench arms executed/h100/inference_2026-11-24 --arm mode --metric forward_ms  # baseline fp32

``rows`` reads a folder: one row per training record (every metric, ``run.*``, ``arm``,
``tokens_per_step``, ``windows``, ``quality`` = the task's learned metric), per served precision
(``--arm serve_mode``), or per mode of an ``inference.json``. A value counts only where its run
completed or its mode ran, a speed only where the run had its GPU to itself; else NaN and ``note``
says why. ``pairs`` pairs each arm's row with the baseline arm's of the same pairing keys (a row
without a partner is refused): ``ratio`` with a delta-method interval on the log ratio where the
spread over timed windows is recorded. ``compare`` summarises per group and arm: the mean ratio
(a percentile bootstrap over two or more pairs, else the pair's own interval), ``change_pct`` =
100 x (ratio - 1) and ``speedup`` = 1 / ratio.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
from scipy import stats as sps

from benchlib.core.argparser import ArgumentParser
from benchlib.analysis.charts import chart_title, no_data_chart, renderer_available, save as save_chart
from benchlib.analysis.scaling import markdown_table
from benchlib.core.records import COMPLETED, describe_environment, last_line, load_records, records_frame
from benchlib.core.scenarios import get_scenario

CONF = 0.95
PAIR_KEYS = ("scenario", "config", "seed", "arm", "size", "weights", "tokens_per_step")
BASELINES = {"arm": "plain", "config": "amp_bf16", "serve_mode": "trained", "mode": "fp32"}  # per arm key
# ``quality`` per task: the learned metric (P@1 for multi-label: micro-F1 is 0 wherever no logit crosses 0)
TASK_METRIC = {"clm": "val_loss", "mlm": "val_loss", "multilabel": "p_at_1", "singlelabel": "accuracy"}


def _last_line(text) -> str:
    return last_line(str(text or ""))[:160]


def _quality(rec: dict, values: dict) -> float:
    v = values.get(f"quality/{TASK_METRIC[get_scenario(rec['scenario']).task]}")
    return math.nan if v is None else float(v)


def record_rows(records: list[dict]) -> pd.DataFrame:
    """One row per training record (``records_frame``'s columns and the ones of the module doc)."""
    df = records_frame(records)
    metrics = sorted(set().union(*(r["metrics"] for r in records)))
    df["arm"] = [(r["run"].get("extra") or {}).get("arm") for r in records]
    df["size"] = df["run.size"]
    df["tokens_per_step"] = df[["run.batch_size", "run.grad_accum", "run.seq_len"]].prod(axis=1, min_count=3)
    df["windows"] = [min(r["run"].get("timing_windows") or 1, r["metrics"].get("timed_steps") or 1) for r in records]
    df["quality"] = [_quality(r, r["metrics"]) for r in records]
    ok = df["status"].isin(COMPLETED)
    numbers = [c for c in dict.fromkeys(metrics + ["quality"]) if df[c].dtype.kind in "fiu"]
    df[numbers] = df[numbers].astype(float)
    df.loc[~ok, numbers] = np.nan
    df["note"] = [f"{r['status']}: {_last_line(r.get('reason'))}".rstrip(": ") if not good
                  else "shared its GPU: no speed metric" if shared else "" for r, good, shared in
                  zip(records, ok, df["shared_gpu"])]
    return df


def serve_rows(records: list[dict]) -> pd.DataFrame:
    """One row per record with a ``serve`` section and precision (``serve_mode``): ``trained``,
    the run's own evaluation, then each mode it was served in; ``quality`` its learned metric."""
    base = record_rows(records)[["scenario", "config", "seed", "arm", "size", "tokens_per_step", "status", "note"]]
    rows = []
    for rec, (_, b) in zip(records, base.iterrows()):
        if not rec.get("serve"):
            continue
        rows.append({**b, "serve_mode": "trained", "quality": _quality(rec, rec["metrics"])})
        for mode, s in rec["serve"].items():
            ok = s.get("status") == "ok"
            values = {f"quality/{k}": v for k, v in s.get("metrics", {}).items()}
            rows.append({**b, "serve_mode": mode, "status": s.get("status"),
                         "note": "" if ok else f"{s.get('status')}: {_last_line(s.get('reason'))}",
                         "quality": _quality(rec, values) if ok else math.nan})
    if not rows:
        raise ValueError("no record has a serve section: run the study with serve_modes (e.g. 'fp32,bf16,fp16')")
    return pd.DataFrame(rows)


def serving_arm(df: pd.DataFrame) -> str:
    """The column of ``rows(folder, "serve_mode")`` that names the serving precision: ``serve_mode``
    for a study run with ``serve_modes`` (baseline ``trained``, the run's own evaluation), ``mode``
    for ``dtype-bench infer``'s ``inference.json`` (baseline fp32 weights): ``BASELINES`` has both."""
    return "serve_mode" if "serve_mode" in df else "mode"


def inference_rows(paths: list[Path]) -> pd.DataFrame:
    """One row per mode of each ``inference.json`` (``dtype-bench infer``): one model served in
    several precisions; ``weights`` names it, ``memory`` is the mode's peak."""
    rows = []
    for f in paths:
        rec = json.loads(f.read_text())
        weights = str(rec.get("weights"))
        weights = "untrained" if weights.startswith("initialised") else "/".join(Path(weights).parts[-2:])
        for m in rec["modes"]:
            ok = m.get("status") == "ok"
            rows.append({"scenario": rec["run"]["scenario"], "size": rec["run"].get("size"), "weights": weights,
                         "mode": m["mode"], "status": m.get("status"), "note": "" if ok else _last_line(m.get("reason")),
                         **{k: (m.get(k) if ok else None) for k in ("forward_ms", "forward_ms_std", "throughput",
                                                                   "prefill_ms", "decode_ms_per_token")},
                         "memory": m.get("memory/peak_gib") if ok else None,
                         "quality": _quality(rec["run"], m) if ok else math.nan})
    return pd.DataFrame(rows).astype({"forward_ms": float, "memory": float})


def rows(folder: str | Path, arm: str = "arm") -> tuple[pd.DataFrame, str]:
    """The rows of ``folder`` for ``arm`` (module doc) and a caption of the runs' environment."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"no study folder {str(root)!r}")
    infer = sorted(root.rglob("inference.json"))
    if infer:
        return inference_rows(infer), describe_environment([json.loads(p.read_text()) for p in infer])
    records = load_records(root)
    if not records:
        raise FileNotFoundError(f"no readable result.json or inference.json under {str(root)!r}")
    df = serve_rows(records) if arm == "serve_mode" else record_rows(records)
    return df, describe_environment(records)


def _delta_interval(r: pd.Series, metric: str, ratio: float) -> tuple[float, float]:
    """The delta-method interval of ``ratio`` from both values' spread over timed windows."""
    rel = [(r[f"{metric}_std{s}"] / r[f"{metric}{s}"]) ** 2 / r[f"windows{s}"] for s in ("", "_base")]
    if not all(v > 0 for v in rel) or min(r["windows"], r["windows_base"]) < 2:  # v > 0 is False for NaN
        return math.nan, math.nan
    half = sps.norm.ppf(0.5 + CONF / 2) * math.sqrt(sum(rel))
    return ratio * math.exp(-half), ratio * math.exp(half)


def pairs(df: pd.DataFrame, arm: str, metric: str, baseline: str | None = None,
          pair: list[str] | None = None) -> pd.DataFrame:
    """One row per (non-baseline arm, pairing keys): both values, ``ratio`` and its interval."""
    baseline = baseline if baseline is not None else BASELINES.get(arm)
    for key in [arm, metric, *(pair or [])]:
        if key not in df:
            raise ValueError(f"no column {key!r} in the rows: use one of {', '.join(map(str, df.columns[:40]))}, ...")
    pair = [k for k in (pair or PAIR_KEYS) if k in df and k != arm]
    df = df[df[arm].notna()]
    arms = sorted(map(str, df[arm].unique()))
    if baseline is None or baseline not in arms:
        raise ValueError(f"no rows of the baseline {arm}={baseline!r}: the values are {', '.join(arms) or 'none'}")
    key = lambda r: ", ".join(f"{k}={r[k]}" for k in pair)  # noqa: E731
    dup = df[df.duplicated(pair + [arm], keep=False)]
    if len(dup):
        raise ValueError(f"{len(dup)} rows for {arm}={dup[arm].iloc[0]}, {key(dup.iloc[0])}: give the keys that "
                         "tell them apart (--pair)")
    extra = [c for c in (f"{metric}_std", "windows") if c in df]
    cols = pair + [metric, "status", "note", *extra]
    merged = df[df[arm] != baseline].merge(df.loc[df[arm] == baseline, cols], on=pair, how="left",
                                           suffixes=("", "_base"), indicator=True)
    missing = merged[merged["_merge"] == "left_only"]
    if len(missing):
        raise ValueError(f"no {arm}={baseline} row to pair with {arm}={missing[arm].iloc[0]}, {key(missing.iloc[0])}")
    out = merged[pair + [arm, metric, f"{metric}_base", "status", "status_base", *extra,
                         *(f"{c}_base" for c in extra)]].copy()
    out["ratio"] = merged[metric] / merged[f"{metric}_base"]
    ci = ([_delta_interval(r, metric, r["ratio"]) for _, r in out.iterrows()] if len(extra) == 2
          else [(math.nan, math.nan)] * len(out))
    out["ratio_lo"], out["ratio_hi"] = (np.array(ci, dtype=float).reshape(-1, 2).T if len(out) else ([], []))
    out["note"] = [n or (f"{baseline}: {nb}" if nb else "") for n, nb in zip(merged["note"], merged["note_base"])]
    return out.reset_index(drop=True)


def compare(df: pd.DataFrame, arm: str, metric: str, baseline: str | None = None, pair: list[str] | None = None,
            by: list[str] | None = None) -> pd.DataFrame:
    """Per group of ``by`` and arm: pairs, mean ratio with its interval, change in %, speed-up."""
    p = pairs(df, arm, metric, baseline, pair)
    keys = [k for k in (pair or PAIR_KEYS) if k in df and k != arm]
    by = by if by is not None else [k for k in keys if k not in ("seed", "tokens_per_step")]
    if set(by) - set(keys):
        raise ValueError(f"--by {', '.join(sorted(set(by) - set(keys)))}: a group key must be a pairing key "
                         f"({', '.join(keys)})")
    out = []
    for group, g in p.groupby(by + [arm], sort=False, dropna=False):
        r = g["ratio"].dropna().to_numpy()
        lo = hi = math.nan
        if len(r) >= 2 and np.ptp(r) > 0:
            ci = sps.bootstrap((r,), np.mean, confidence_level=CONF, n_resamples=2000, method="percentile",
                               random_state=0).confidence_interval
            lo, hi = ci.low, ci.high
        elif len(r) == 1:  # the one pair's interval over its timed windows
            lo, hi = g.loc[g["ratio"].notna(), ["ratio_lo", "ratio_hi"]].iloc[0]
        ratio = r.mean() if len(r) else math.nan
        out.append({**dict(zip(by + [arm], group)), "pairs": len(r), "ratio": ratio, "ratio_lo": lo, "ratio_hi": hi,
                    "change_pct": 100 * (ratio - 1), "change_pct_min": 100 * (r.min() - 1) if len(r) else math.nan,
                    "change_pct_max": 100 * (r.max() - 1) if len(r) else math.nan, "speedup": 1 / ratio,
                    "note": "; ".join(dict.fromkeys(n for n in g["note"] if n))})
    return pd.DataFrame(out)


def break_evens(summary: pd.DataFrame, arm: str, along: str, order: list[str]) -> dict[str, str]:
    """Per arm (and other group keys, where they take several values): the smallest value of
    ``along`` (in ``order``) from which every larger one measured has a speed-up > 1, in one
    sentence naming the values measured; values without a speed-up are named, not guessed."""
    rest = [k for k in summary.columns[:list(summary.columns).index("pairs")] if k not in (arm, along)]
    several = [k for k in rest if summary[k].nunique(dropna=False) > 1]
    out = {}
    for keys, g in summary.groupby([arm] + rest, sort=False, dropna=False):
        label = str(keys[0]) + (f" ({', '.join(f'{k}={v}' for k, v in zip(rest, keys[1:]) if k in several)})"
                                if several else "")
        sp = dict(zip(g[along], g["speedup"]))
        measured = [s for s in order if s in sp and math.isfinite(sp[s])]
        size = next((s for i, s in enumerate(measured) if all(sp[t] > 1 for t in measured[i:])), None)
        top = f", {sp[measured[-1]]:.2f}x at {measured[-1]}" if size and size != measured[-1] else ""
        text = (f"pays from {size} ({sp[size]:.2f}x there{top})" if size else
                f"pays at none of the sizes measured ({', '.join(measured)})" if measured else "no size measured")
        missing = [s for s in g[along] if s not in measured]
        out[label] = text + (f"; no speed-up at {', '.join(missing)}" if missing else "")
    return out


def chart(summary: pd.DataFrame, arm: str, metric: str, baseline: str, environment: str = "") -> alt.Chart:
    """Per group (rows, in the summary's order) and arm (colour): the mean ratio to the
    baseline with its interval, a rule at 1 (no change)."""
    title = f"{metric} of each {arm} against {baseline}: ratio per group"
    d = summary[summary["ratio"].notna()].copy()
    if d.empty:
        return no_data_chart(f"no pair with a {metric} on both sides", title)
    groups = [c for c in d.columns[:list(d.columns).index("pairs")] if c != arm]
    d["group"] = d[groups].astype(str).agg(" / ".join, axis=1) if groups else "all"
    y = alt.Y("group:N", sort=list(dict.fromkeys(d["group"])), title=" / ".join(groups) or None)
    lo, hi = (f([1.0, *d["ratio"], *d["ratio_lo"].dropna(), *d["ratio_hi"].dropna()]) for f in (min, max))
    domain = [lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo)]  # 1 (no change) always inside
    base = alt.Chart(d).encode(y=y, color=alt.Color(f"{arm}:N", title=arm))
    points = base.mark_point(filled=True, size=70).encode(
        x=alt.X("ratio:Q", title=f"{metric}: {arm} / {baseline}", scale=alt.Scale(domain=domain, nice=False)),
        tooltip=["group:N", f"{arm}:N", "pairs:Q", alt.Tooltip("ratio:Q", format=".3f"),
                 alt.Tooltip("change_pct:Q", format="+.1f"), "note:N"])
    bars = base.transform_filter("isValid(datum.ratio_lo)").mark_rule().encode(
        x=alt.X("ratio_lo:Q", scale=alt.Scale(domain=domain, nice=False)), x2="ratio_hi:Q")
    one = alt.Chart(pd.DataFrame({"x": [1.0]})).mark_rule(strokeDash=[4, 4], color="grey").encode(
        x=alt.X("x:Q", scale=alt.Scale(domain=domain, nice=False)))
    subtitle = [s for s in (environment,) if s] + [
        f"points: mean over pairs of the ratio; bars: {CONF:.0%} interval (bootstrap over pairs, or over one "
        "pair's timed windows)"]
    return (bars + points + one).properties(width=360, height=max(60, 18 * len(d)),
                                            title=chart_title(title, subtitle))


def save(folder: str | Path, stem: str, table: pd.DataFrame, chart_: alt.TopLevelMixin | None = None,
         caption: str = "") -> list[Path]:
    """``stem.csv`` and ``stem.md`` (``caption`` above the table) in ``folder``, and the chart's
    Vega-Lite spec (a PNG too where vl-convert is installed)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{stem}.csv", index=False)
    (out / f"{stem}.md").write_text((f"{caption}\n\n" if caption else "") + markdown_table(table) + "\n")
    files = [out / f"{stem}.csv", out / f"{stem}.md"]
    if chart_ is not None:
        (out / f"{stem}.vl.json").write_text(chart_.to_json())
        files += [out / f"{stem}.vl.json"] + (save_chart(chart_, out / stem, ("png",)) if renderer_available() else [])
    return files


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="dtype-bench arms", description="What one setting (an arm) costs or gains against a "
                       "baseline, paired run by run; the module's doc says how.")
    p.add_argument("folder", help="A study folder, or a folder of inference.json files.")
    p.add_argument("--arm", required=True, help="The column whose values are the arms (arm, config, serve_mode, mode, "
                                                "run.activation_checkpointing, ...).")
    p.add_argument("--metric", required=True, help="The column compared (step_ms, memory, quality, forward_ms, ...).")
    p.add_argument("--baseline", default=None, help=f"The arm the others are compared with (default: {BASELINES}).")
    p.add_argument("--pair", default=None, help=f"Comma-separated pairing keys (default: those of {PAIR_KEYS} present).")
    p.add_argument("--by", default=None, help="Comma-separated group keys (default: the pairing keys less seed).")
    p.add_argument("--out", default=None, help="Write arms.csv/.md, arms_pairs.csv/.md and the chart here (default: print the tables only).")
    ns = p.parse_args(sys.argv[1:] if argv is None else argv)
    split = lambda s: None if s is None else [k for k in s.split(",") if k]  # noqa: E731
    df, env = rows(ns.folder, ns.arm)
    baseline = ns.baseline if ns.baseline is not None else BASELINES.get(ns.arm)
    summ = compare(df, ns.arm, ns.metric, baseline, split(ns.pair), split(ns.by))
    print(env + "\n\n" + markdown_table(summ))
    if ns.out:
        files = save(ns.out, "arms", summ, chart(summ, ns.arm, ns.metric, baseline, env), env)
        files += save(ns.out, "arms_pairs", pairs(df, ns.arm, ns.metric, baseline, split(ns.pair)), caption=env)
        print("files: " + ", ".join(map(str, files)))
    return 0
