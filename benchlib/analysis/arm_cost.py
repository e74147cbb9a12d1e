"""``dtype-bench arm-cost``: what a setting laid over a study's matrix (an arm, e.g. activation
checkpointing) costs each dtype configuration, in step time and in peak memory.

    dtype-bench arm-cost executed/h100/checkpointing [--baseline plain] [--out DIR]

Each run of an arm is paired with the baseline arm's run of the same (scenario, config, seed).
Per pair: ``time_ratio`` = the arm's ms/step / the baseline's (> 1: the arm is slower) with its
95% interval (delta method over the timed windows, as ``fp8-sizes``), ``time_cost_pct`` =
100 x (time_ratio - 1), ``memory_ratio`` = the arm's peak memory / the baseline's and
``memory_saved_pct`` = 100 x (1 - memory_ratio). A pair needs both runs to have trained every
step (``COMPLETED``), been timed and trained the same tokens per step; otherwise its ratios are
NaN and ``note`` says why. Study: ``params/checkpointing.yaml``.
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

BASELINE_ARM = "plain"
CONF = 0.95
KEYS = ["scenario", "config", "seed"]
TABLE_COLUMNS = ["scenario", "config", "seed", "arm", "status", "ms_per_step", "ms_std", "time_ratio",
                 "time_ratio_lo", "time_ratio_hi", "time_cost_pct", "peak_gib", "memory_ratio", "memory_saved_pct",
                 "tokens_per_s", "mfu_pct", "note"]


def _num(v) -> float:
    return math.nan if v is None else float(v)


def _row(rec: dict) -> dict:
    m, run = rec["metrics"], rec["run"]
    step_ms = _num(m.get("step_ms"))
    timed = rec["status"] in COMPLETED and step_ms > 0  # False for NaN
    shape = [run.get(k) for k in ("batch_size", "grad_accum", "seq_len")]
    reason = [ln for ln in str(rec.get("reason") or "").splitlines() if ln.strip()]
    return {"scenario": rec["scenario"], "config": rec["config"], "seed": rec["seed"],
            "arm": (run.get("extra") or {}).get("arm"), "status": rec["status"],
            "reason": reason[-1].strip()[:160] if reason else "",
            "ms_per_step": step_ms if timed else math.nan, "ms_std": _num(m.get("step_ms_std")) if timed else math.nan,
            "windows": min(run.get("timing_windows") or 1, m.get("timed_steps") or 1),
            "tokens_per_step": math.prod(shape) if all(shape) else None,
            "peak_gib": _num(m.get("memory")), "tokens_per_s": _num(m.get("tokens_per_s")),
            "mfu_pct": _num(m.get("mfu_pct"))}


def _pair(r: pd.Series, base: pd.Series | None, baseline: str) -> dict:
    nan = math.nan
    out = dict.fromkeys(["time_ratio", "time_ratio_lo", "time_ratio_hi", "memory_ratio"], nan)
    if r["arm"] == baseline:
        return {**out, "time_ratio": 1.0, "memory_ratio": 1.0, "note": "the baseline arm"}
    problem = (f"{r['arm']}: {r['status']}" + (f": {r['reason']}" if r["reason"] else "")
               if r["status"] not in COMPLETED else
               f"no {baseline} run of this scenario, config and seed" if base is None else
               f"{baseline}: {base['status']}" if base["status"] not in COMPLETED else
               (f"{r['tokens_per_step']} tokens per step against {baseline}'s {base['tokens_per_step']}: "
                "step times do not compare") if r["tokens_per_step"] != base["tokens_per_step"] else "")
    if problem:
        return {**out, "note": problem}
    if base["peak_gib"] > 0:
        out["memory_ratio"] = r["peak_gib"] / base["peak_gib"]
    if not (r["ms_per_step"] > 0 and base["ms_per_step"] > 0):
        return {**out, "note": "no timed steps"}
    lo, hi = ratio_interval(r, base, CONF)
    return {**out, "time_ratio": r["ms_per_step"] / base["ms_per_step"], "time_ratio_lo": lo, "time_ratio_hi": hi,
            "note": "" if math.isfinite(lo) else "no spread over timed windows: no interval"}


def cost_table(records: list[dict], baseline: str = BASELINE_ARM) -> pd.DataFrame:
    """One row per run, the baseline arm's first within each (scenario, config, seed)."""
    if not records:
        raise ValueError("no records to analyse")
    df = pd.DataFrame([_row(r) for r in records])
    arms = sorted({a for a in df["arm"] if a})
    if baseline not in arms:
        raise ValueError(f"no runs of the baseline arm {baseline!r}; the arms found are "
                         f"{', '.join(arms) or 'none (a study without arms:)'}: pass --baseline")
    dup = df[df.duplicated(KEYS + ["arm"], keep=False)]
    if len(dup):
        raise ValueError(f"{len(dup)} records for {'/'.join(str(dup[k].iloc[0]) for k in KEYS)} in arm "
                         f"{dup['arm'].iloc[0]}: several studies in one folder?")
    df["_b"] = (df["arm"] != baseline).astype(int)
    df = df.sort_values(KEYS + ["_b", "arm"]).drop(columns="_b").reset_index(drop=True)
    bases = {tuple(r[k] for k in KEYS): r for _, r in df[df["arm"] == baseline].iterrows()}
    paired = pd.DataFrame([_pair(r, bases.get(tuple(r[k] for k in KEYS)), baseline) for _, r in df.iterrows()])
    df = pd.concat([df, paired], axis=1)
    df["time_cost_pct"] = 100 * (df["time_ratio"] - 1)
    df["memory_saved_pct"] = 100 * (1 - df["memory_ratio"])
    return df


def cost_chart(table: pd.DataFrame, baseline: str = BASELINE_ARM, environment: str = "") -> alt.Chart:
    """Per arm, one point per (scenario, config, seed): step-time cost (x, with its interval)
    against peak memory saved (y); a rule at no cost."""
    title = f"What each arm costs against {baseline!r}, per dtype configuration"
    d = table[(table["arm"] != baseline) & table["time_ratio"].notna()].copy()
    if d.empty:
        return no_data_chart("no arm run pairs with a timed baseline run", title)
    d["cost_lo"], d["cost_hi"] = 100 * (d["time_ratio_lo"] - 1), 100 * (d["time_ratio_hi"] - 1)
    subtitle = [s for s in (environment,) if s] + [
        f"x: 100 x (the arm's ms/step / {baseline}'s - 1), bars {CONF:.0%} interval over timed windows; "
        f"y: 100 x (1 - the arm's peak memory / {baseline}'s)"]
    base = alt.Chart().encode(color=alt.Color("config:N", title="dtype config"),
                               y=alt.Y("memory_saved_pct:Q", title="peak memory saved (%)"))
    points = base.mark_point(filled=True, size=70).encode(
        x=alt.X("time_cost_pct:Q", title="step-time cost (%)"), shape=alt.Shape("scenario:N", title="scenario"),
        tooltip=KEYS + ["arm:N", alt.Tooltip("time_cost_pct:Q", format=".1f"),
                        alt.Tooltip("memory_saved_pct:Q", format=".1f"), alt.Tooltip("peak_gib:Q", format=".2f")])
    bars = base.transform_filter("isValid(datum.cost_lo)").mark_rule().encode(x="cost_lo:Q", x2="cost_hi:Q")
    zero = alt.Chart().mark_rule(strokeDash=[4, 4], color="grey").encode(x=alt.datum(0))
    layer = alt.layer(bars, points, zero, data=d).properties(width=320, height=240)
    chart = layer.facet(column=alt.Column("arm:N", title=None)) if d["arm"].nunique() > 1 else layer
    return chart.properties(title=chart_title([title], subtitle))


def markdown(table: pd.DataFrame, records: list[dict], baseline: str, name: str = "") -> str:
    failed = table[~table["status"].isin(COMPLETED)]
    lines = [f"# What each arm costs{f': {name}' if name else ''}", "", describe_environment(records), "",
             f"Against the arm {baseline!r}, run by run (same scenario, config and seed): time_ratio = the arm's "
             f"ms/step / the baseline's with its {CONF:.0%} interval (delta method over the timed windows), "
             "time_cost_pct = 100 x (time_ratio - 1), memory_saved_pct = 100 x (1 - the arm's peak memory / the "
             "baseline's).", "",
             ("Failed runs: " + ", ".join(f"{r['arm']}/{r['scenario']}/{r['config']}/seed{r['seed']} ({r['status']})"
                                          for _, r in failed.iterrows()) + ".") if len(failed)
             else "Every run trained every step.", *judged_speed_runs(table["status"]), "",
             markdown_table(table[TABLE_COLUMNS])]
    return "\n".join(lines) + "\n"


@dataclass
class ArmCost:
    table: pd.DataFrame
    chart: alt.Chart
    markdown: str
    files: list


def analyze(study_dir: str | Path, baseline: str = BASELINE_ARM, out_dir: str | Path | None = None) -> ArmCost:
    """``arm_cost.csv``, ``arm_cost.md`` and the chart (Vega-Lite spec, PNG where vl-convert is
    installed) of the records under ``study_dir``, in ``out_dir`` (default ``study_dir/arm_cost``)."""
    root, records = study_records(study_dir)
    table = cost_table(records, baseline)
    chart = cost_chart(table, baseline, describe_environment(records))
    md = markdown(table, records, baseline, root.name)
    files = write_outputs(Path(out_dir) if out_dir else root / "arm_cost", "arm_cost", table, md, chart)
    return ArmCost(table, chart, md, files)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dtype-bench arm-cost", description=__doc__.splitlines()[0])
    p.add_argument("study_dir", help="a study with arms: records, e.g. executed/h100/checkpointing")
    p.add_argument("--baseline", default=BASELINE_ARM, help=f"the arm the others are compared with ({BASELINE_ARM})")
    p.add_argument("--out", default=None, help="output folder (default STUDY_DIR/arm_cost)")
    ns = p.parse_args(sys.argv[1:] if argv is None else argv)
    res = analyze(ns.study_dir, ns.baseline, ns.out)
    print(res.markdown)
    print("files: " + ", ".join(str(f) for f in res.files))
    return 0
