"""``dtype-bench fp8-sizes``: where float8 training pays end to end, from a study's records.

    dtype-bench fp8-sizes executed/h100/fp8_sizes [--out DIR]

The study (``params/fp8_sizes.yaml``) trains amp_bf16 and the float8 configs at several GPT-2
sizes on one GPU. Per (size, config): status, ms/step, tokens/s, MFU, peak memory, the body's
Linear layers from the record's ``model.matmuls`` and their training FLOPs per step, and the
speed-up over amp_bf16 of the same size: amp_bf16's step time / the config's (> 1: float8 is
faster). A speed-up needs both runs to have trained every step (``COMPLETED``), been timed and
trained the same tokens per step; otherwise it is NaN and ``note`` says why. Its 95% interval
comes from the delta method on the log ratio, each step time's standard error being its
std over the timed windows / sqrt(windows) (the median window stands in for the mean).

The break-even size of a float8 config is the smallest size from which every larger size
measured has a speed-up > 1: a config that wins at large but loses at xl has not paid from
large. Sizes without a speed-up are named, not guessed.

A study arm named after its size (``xl: {size: xl}``) runs the size's default micro-batch; an
arm with any other name (``xl_16k: {size: xl, batch_size: 16, ...}``) is a series of its own:
float8's gain grows with the tokens of each matmul, so a larger micro-batch is a different
question, answered beside the default one (its own speed-ups against amp_bf16 of the same arm,
its own break-even). ``fp8-shapes`` answers the same
question per matmul shape, from kernel times.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import pandas as pd

from benchlib.analysis.charts import chart_title, no_data_chart
from benchlib.analysis.outputs import judged_speed_runs, study_records, write_outputs
from benchlib.analysis.scaling import markdown_table
from benchlib.analysis.stats import ratio_interval
from benchlib.core.records import COMPLETED, describe_environment
from benchlib.core.sizes import SHAPES

BASELINE = "amp_bf16"
SIZE_ORDER = list(SHAPES["gpt2"])  # tiny < small < base < medium < large < xl
CONF = 0.95
TITLE = "Float8 speed-up over amp_bf16 per GPT-2 size"
DEFAULT_SERIES = "default"
"""The series of the arms named after their size: the size's default micro-batch."""


def _series(run: dict) -> str:
    """The arm a run belongs to, when it is not simply its size at the default micro-batch."""
    arm = (run.get("extra") or {}).get("arm")
    return DEFAULT_SERIES if arm in (None, run.get("size")) else str(arm)


def _where(size: str, series: str) -> str:
    return size if series == DEFAULT_SERIES else f"{size} ({series})"


def _last_line(text) -> str:
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""


def _num(v) -> float:
    """A metric as a float: NaN where the record has none (None: not measured)."""
    return math.nan if v is None else float(v)


def _row(rec: dict, size_matmuls: dict[str, list]) -> dict:
    """One record's columns: what it measured and its Linear layers (a run that stopped before
    building its model has them from another run of its size: they do not depend on the config)."""
    m, run, model = rec["metrics"], rec["run"], rec.get("model") or {}
    matmuls = model.get("matmuls") or size_matmuls.get(run["size"]) or []
    shape = [run.get(k) for k in ("batch_size", "grad_accum", "seq_len")]
    tokens = math.prod(shape) if all(shape) else None  # a run refused before its defaults were filled has none
    linear_per_token = 6 * sum(s["in"] * s["out"] * s["count"] for s in matmuls)  # forward 2, backward 4
    step_ms, fpt = _num(m.get("step_ms")), _num(m.get("flops_per_token"))
    timed = rec["status"] in COMPLETED and step_ms > 0  # False for NaN
    return {"size": run["size"], "series": _series(run), "config": rec["config"], "status": rec["status"],
            "reason": _last_line(rec.get("reason")), "parameters": _num(model.get("parameters")),
            "micro_batch": shape[0], "grad_accum": shape[1], "seq_len": shape[2], "tokens_per_step": tokens,
            "ms_per_step": step_ms if timed else math.nan,
            "ms_std": _num(m.get("step_ms_std")) if timed else math.nan,
            "windows": min(run.get("timing_windows") or 1, m.get("timed_steps") or 1),
            "tokens_per_s": _num(m.get("tokens_per_s")), "mfu_pct": _num(m.get("mfu_pct")),
            "peak_gib": _num(m.get("memory")), "linear_shapes": len(matmuls),
            "linear_layers": sum(s["count"] for s in matmuls),
            "fp8_layers": sum(s["count"] for s in matmuls if s.get("fp8")),
            "linear_tflop_per_step": linear_per_token * tokens / 1e12 if matmuls and tokens else math.nan,
            "linear_flops_pct": 100 * linear_per_token / fpt if matmuls and fpt > 0 else math.nan,
            "matmuls": matmuls}


def _speedup(r: pd.Series, base: pd.Series | None) -> tuple[float, float, float, str]:
    """(speed-up, interval low, high, note) of one row against amp_bf16's row of its size and series."""
    nan = math.nan
    if r["status"] not in COMPLETED:
        return nan, nan, nan, f"{r['config']} {r['status']}" + (f": {r['reason']}" if r["reason"] else "")
    if math.isnan(r["ms_per_step"]):
        return nan, nan, nan, f"{r['config']}: no timed steps"
    where = _where(r["size"], r["series"])
    if base is None:
        return nan, nan, nan, f"no {BASELINE} run at {where}"
    if base["status"] not in COMPLETED:
        return nan, nan, nan, f"{BASELINE} at {where}: {base['status']}"
    if math.isnan(base["ms_per_step"]):
        return nan, nan, nan, f"{BASELINE} at {where}: no timed steps"
    if r["tokens_per_step"] != base["tokens_per_step"]:
        return nan, nan, nan, (f"{r['tokens_per_step']} tokens per step against {BASELINE}'s "
                               f"{base['tokens_per_step']}: step times do not compare")
    ratio = base["ms_per_step"] / r["ms_per_step"]
    if r["config"] == BASELINE:
        return ratio, nan, nan, "the reference"
    lo, hi = ratio_interval(base, r, CONF)
    return ratio, lo, hi, "" if math.isfinite(lo) else "no spread over timed windows: no interval"


def size_table(records: list[dict]) -> pd.DataFrame:
    """One row per (size, series, config), sizes in order, the default micro-batch first
    within a size, amp_bf16 first within a series."""
    if not records:
        raise ValueError("no records to analyse")
    scenarios = sorted({r["scenario"] for r in records})
    if len(scenarios) > 1:
        raise ValueError(f"records of scenarios {', '.join(scenarios)}: fp8-sizes compares one scenario's sizes")
    matmuls = {r["run"]["size"]: r["model"]["matmuls"] for r in records if (r.get("model") or {}).get("matmuls")}
    df = pd.DataFrame([_row(r, matmuls) for r in records])
    dup = df[df.duplicated(["size", "series", "config"], keep=False)]
    if len(dup):
        raise ValueError(f"{len(dup)} records for {_where(dup['size'].iloc[0], dup['series'].iloc[0])}/"
                         f"{dup['config'].iloc[0]} (several seeds, or arms of one size with the same name): "
                         "fp8-sizes compares one run per size, arm and config")
    df["_s"] = df["size"].map({s: i for i, s in enumerate(SIZE_ORDER)}).fillna(len(SIZE_ORDER))
    df["_d"] = (df["series"] != DEFAULT_SERIES).astype(int)
    df["_c"] = (df["config"] != BASELINE).astype(int)
    df = df.sort_values(["_s", "_d", "series", "_c", "config"]).drop(columns=["_s", "_d", "_c"]).reset_index(drop=True)
    bases = {(r["size"], r["series"]): r for _, r in df[df["config"] == BASELINE].iterrows()}
    cols = ["speedup", "speedup_lo", "speedup_hi", "note"]
    df[cols] = pd.DataFrame([_speedup(r, bases.get((r["size"], r["series"]))) for _, r in df.iterrows()],
                            columns=cols)
    return df


def break_even(speedups: dict[str, float]) -> str | None:
    """The smallest size whose speed-up and every larger measured size's are > 1, else None.
    Sizes without a (finite) speed-up are left out."""
    measured = [s for s in SIZE_ORDER if s in speedups and math.isfinite(speedups[s])]
    for i, size in enumerate(measured):
        if all(speedups[t] > 1 for t in measured[i:]):
            return size
    return None


def break_evens(table: pd.DataFrame) -> dict[str, str]:
    """Per float8 config (and series other than the default micro-batch: ``config (arm)``), its
    break-even in one sentence that names the sizes measured."""
    out = {}
    for (config, series), g in table[table["config"] != BASELINE].groupby(["config", "series"], sort=False):
        if series != DEFAULT_SERIES:
            config = f"{config} ({series})"
        sp = dict(zip(g["size"], g["speedup"]))
        measured = [s for s in SIZE_ORDER if s in sp and math.isfinite(sp[s])]
        size = break_even(sp)
        top = f", {sp[measured[-1]]:.2f}x at {measured[-1]}" if size and size != measured[-1] else ""
        text = (f"pays from {size} ({sp[size]:.2f}x there{top})" if size else
                f"pays at none of the sizes measured ({', '.join(measured)})" if measured else "no size measured")
        missing = [s for s in g["size"] if s not in measured]
        out[config] = text + (f"; no speed-up at {', '.join(missing)}" if missing else "")
    return out


def failed_runs(table: pd.DataFrame) -> list[str]:
    """``size/config (status)`` of every run that did not train every step."""
    bad = table[~table["status"].isin(COMPLETED)]
    return [f"{_where(r['size'], r['series'])}/{r['config']} ({r['status']})" for _, r in bad.iterrows()]


def _size_label(size: str, params: float) -> str:
    if not params > 0:  # not recorded (NaN)
        return size
    return f"{size} ({params / 1e9:.2f}B)" if params >= 1e9 else f"{size} ({params / 1e6:.0f}M)"


def speedup_chart(table: pd.DataFrame) -> alt.Chart:
    """Speed-up per size (ordinal, small to large), one line per float8 config, 95% intervals,
    a rule at 1 (as fast as amp_bf16); the break-evens in the title, failed runs under it."""
    bes = break_evens(table)
    title = [TITLE] + [f"{c}: {t}" for c, t in bes.items()]
    failed = failed_runs(table)
    subtitle = [f"failed: {', '.join(failed)}"] if failed else []
    subtitle.append(f"amp_bf16's step time / the config's, one run each; bars: {CONF:.0%} interval over timed windows")
    mb = table.drop_duplicates(["size", "series"])
    subtitle.append("tokens per micro-batch (the M of each Linear matmul): " + ", ".join(
        f"{_where(r['size'], r['series'])} {r['micro_batch'] * r['seq_len']:,}" for _, r in mb.iterrows()
        if r["micro_batch"] and r["seq_len"]))
    d = table[(table["config"] != BASELINE) & table["speedup"].notna()].copy()
    if d.empty:
        return no_data_chart("no float8 run has a speed-up: " + "; ".join(bes.values() or ["no float8 runs"]), TITLE)
    d["size_label"] = [_size_label(s, p) for s, p in zip(d["size"], d["parameters"])]
    order = list(dict.fromkeys(d["size_label"]))
    x = alt.X("size_label:O", sort=order, title="GPT-2 size (parameters)", axis=alt.Axis(labelAngle=0))
    enc = {"x": x, "color": alt.Color("config:N", title="float8 config")}
    if d["series"].nunique() > 1:  # a larger micro-batch is a line of its own, dashed
        enc["strokeDash"] = alt.StrokeDash("series:N", title="micro-batch",
                                           sort=[DEFAULT_SERIES] + sorted(set(d["series"]) - {DEFAULT_SERIES}))
    base = alt.Chart(d).encode(**enc)
    lo = float(pd.concat([d["speedup"], d["speedup_lo"]]).min())
    hi = float(pd.concat([d["speedup"], d["speedup_hi"]]).max())
    domain = [math.floor(20 * min(lo, 1.0)) / 20 - 0.05, math.ceil(20 * max(hi, 1.0)) / 20 + 0.05]  # 1.0 always inside
    line = base.mark_line(point=True).encode(
        y=alt.Y("speedup:Q", title="speed-up over amp_bf16 (x)", scale=alt.Scale(domain=domain, nice=False)),
        tooltip=["size:N", "series:N", "config:N", "micro_batch:Q", alt.Tooltip("speedup:Q", format=".3f"),
                 alt.Tooltip("ms_per_step:Q", format=".1f")])
    err = base.transform_filter("isValid(datum.speedup_lo)").mark_errorbar(ticks={"size": 10}).encode(
        y=alt.Y("speedup_lo:Q", title="speed-up over amp_bf16 (x)"), y2="speedup_hi:Q")
    one = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 4], color="grey").encode(y="y:Q")
    return (line + err + one).properties(width=360, height=260, title=chart_title(title, subtitle))


TABLE_COLUMNS = ["size", "series", "config", "status", "ms_per_step", "ms_std", "speedup", "speedup_lo", "speedup_hi",
                 "tokens_per_s", "mfu_pct", "peak_gib", "micro_batch", "grad_accum", "linear_shapes", "fp8_layers",
                 "linear_tflop_per_step", "linear_flops_pct", "note"]


def markdown(table: pd.DataFrame, records: list[dict], name: str = "") -> str:
    lines = [f"# Where FP8 pays{f': {name}' if name else ''}", "", describe_environment(records), "",
             "Break-even (the smallest size from which every larger size measured is faster in float8):", ""]
    lines += [f"- {c}: {t}" for c, t in break_evens(table).items()] or ["- no float8 runs"]
    failed = failed_runs(table)
    lines += ["", f"Failed runs: {', '.join(failed)}." if failed else "Every run trained every step."]
    lines += judged_speed_runs(table["status"])
    lines += ["",
              f"speedup = {BASELINE}'s ms/step / the config's, with its {CONF:.0%} interval (delta method over the "
              "timed windows); linear_tflop_per_step = 6 x in x out x layers x tokens per step over the body's Linear "
              "layers; linear_flops_pct = their share of the model's training FLOPs.", "",
              markdown_table(table[TABLE_COLUMNS]), "", "Linear shapes per size (in -> out x layers; model.matmuls):", ""]
    for (size, series), g in table.groupby(["size", "series"], sort=False):
        mm = g["matmuls"].iloc[0]
        lines.append(f"- {_where(size, series)} (M = {g['micro_batch'].iloc[0]} x {g['seq_len'].iloc[0]} tokens per "
                     "micro-batch): "
                     + (", ".join(f"{s['in']}->{s['out']} x{s['count']}" for s in mm) or "not recorded"))
    return "\n".join(lines) + "\n"


@dataclass
class Fp8Sizes:
    table: pd.DataFrame
    chart: alt.Chart
    markdown: str
    files: list


def analyze(study_dir: str | Path, out_dir: str | Path | None = None) -> Fp8Sizes:
    """The table (``fp8_sizes.csv``), the Markdown (``fp8_sizes.md``) and the chart (its
    Vega-Lite spec, and PNG where vl-convert is installed) of the records under ``study_dir``,
    written to ``out_dir`` (default ``study_dir/fp8``)."""
    root, records = study_records(study_dir)
    table = size_table(records)
    chart = speedup_chart(table)
    md = markdown(table, records, root.name)
    files = write_outputs(Path(out_dir) if out_dir else root / "fp8", "fp8_sizes", table.drop(columns=["matmuls"]),
                          md, chart, "fp8_speedup")
    return Fp8Sizes(table, chart, md, files)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dtype-bench fp8-sizes", description=__doc__.splitlines()[0])
    p.add_argument("study_dir", help="the records of params/fp8_sizes.yaml, e.g. executed/h100/fp8_sizes")
    p.add_argument("--out", default=None, help="output folder (default STUDY_DIR/fp8)")
    ns = p.parse_args(sys.argv[1:] if argv is None else argv)
    res = analyze(ns.study_dir, ns.out)
    print(res.markdown)
    print("files: " + ", ".join(str(f) for f in res.files))
    return 0
