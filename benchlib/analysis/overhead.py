"""``dtype-bench overhead``: where a study's GPU time went, from its records: the training steps
against everything else a run costs, per scenario.

    dtype-bench overhead executed/h100/reference [--out DIR]

Each run's wall time as the sweep measured it (``sweep.wall_s``: notebook or process included)
splits into parts, from the record's ``time/*`` metrics (``training.loop``):

    start        the sweep's wall less the run's own (``wall_s``): kernel or process start,
                 imports before the run, the notebook's charts after it
    data         building the data (``time/data_s``)
    model        building the model, its imports included (``time/model_s``)
    setup_other  the rest of setup: moving to the device, optimizer, compile wrapper
    first_step   the first optimizer step: compilation, autotuning, CUDA graph capture
    evaluation   every evaluation, in the loop and at the end (``time/eval_s``)
    steps        the training loop's wall after the first step, less every evaluation
                 (``time/train_s`` - first step - ``time/eval_s``; an evaluation after the
                 loop makes it slightly short). Not the record's ``time/steps_s``, which
                 before commit 2d14fe5 was the median timed window x the steps: under twelve
                 runs sharing a GPU it counted 149 s of a 404-s loop.
    rest         the run's own wall after the loop: final evaluation bookkeeping, saving,
                 serving, writing the record

The parts add up to the sweep's wall of the run.
The steps' share of the summed walls is the study's efficiency before scheduling: what the
sweep prints (``study efficiency``) also counts GPU slots left idle. Runs whose record has no
sweep timing (run outside a sweep, or before it was recorded) are left out and counted.
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
from benchlib.analysis.outputs import study_records, write_outputs
from benchlib.analysis.scaling import markdown_table
from benchlib.core.records import describe_environment
from benchlib.core.timing import STEPS_SHARE_TARGET

PARTS = ["start", "data", "model", "setup_other", "first_step", "evaluation", "steps", "rest"]
TARGET_PCT = 100 * STEPS_SHARE_TARGET


def _num(v) -> float:
    return math.nan if v is None else float(v)


def run_parts(rec: dict) -> dict | None:
    """Seconds of each part of ``PARTS`` for one record; None when the sweep did not time it."""
    s, m = rec.get("sweep") or {}, rec.get("metrics") or {}
    wall, own = _num(s.get("wall_s")), _num(rec.get("wall_s"))
    if not wall > 0 or not own > 0:
        return None
    setup, data, model, train = (_num(m.get(f"time/{k}_s")) for k in ("setup", "data", "model", "train"))
    if math.isnan(setup) or math.isnan(train):
        return None
    first, evals = (0.0 if math.isnan(v) else v for v in (_num(m.get("time/first_step_s")), _num(m.get("time/eval_s"))))
    data, model = (0.0 if math.isnan(v) else v for v in (data, model))
    parts = {"start": wall - own, "data": data, "model": model, "setup_other": setup - data - model,
             "first_step": first, "evaluation": evals, "steps": max(0.0, train - first - evals),
             "rest": own - setup - train}
    return {"scenario": rec["scenario"], "config": rec.get("config"), "seed": rec.get("seed"),
            "notebook": bool(s.get("notebook", True)), "runs_per_gpu": s.get("runs_per_gpu") or 1,
            "compile_cache": m.get("compile/cache"),
            "wall_s": wall, **parts}


def parts_table(records: list[dict]) -> tuple[pd.DataFrame, int]:
    """One row per timed run, and the number of records left out for want of sweep timing."""
    rows = [r for r in (run_parts(rec) for rec in records) if r is not None]
    return pd.DataFrame(rows), len(records) - len(rows)


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per scenario, and for the whole study (``all``): runs, summed wall, and each part's share
    of it in %, the steps' share last; a part's median seconds per run beside it."""
    out = []
    for name, g in [*runs.groupby("scenario"), ("all", runs)]:
        total = g["wall_s"].sum()
        row = {"scenario": name, "runs": len(g), "wall_s": total, "median_wall_s": g["wall_s"].median()}
        for p in PARTS:
            row[f"{p}_pct"] = 100 * g[p].sum() / total
        for p in PARTS:
            row[f"{p}_median_s"] = g[p].median()
        out.append(row)
    return pd.DataFrame(out)


def chart(summ: pd.DataFrame, environment: str = "") -> alt.Chart:
    """One stacked bar per scenario (and the study): the share of its summed run wall per part,
    the steps in a strong colour and the overheads in pale ones; a rule at the 70% target."""
    title = "Where the study's GPU time went: training steps against each run's overhead"
    if summ.empty:
        return no_data_chart("no run with sweep timing", title)
    long = summ.melt(id_vars=["scenario", "runs"], value_vars=[f"{p}_pct" for p in PARTS],
                     var_name="part", value_name="pct")
    long["part"] = long["part"].str.removesuffix("_pct")
    order = ["steps"] + [p for p in PARTS if p != "steps"]
    long["order"] = long["part"].map({p: i for i, p in enumerate(order)})
    colors = ["#1f77b4", "#c7c7c7", "#ffbb78", "#dbdb8d", "#98df8a", "#ff9896", "#c5b0d5", "#f7b6d2"]
    bars = alt.Chart(long).mark_bar().encode(
        y=alt.Y("scenario:N", sort=list(summ["scenario"]), title=None),
        x=alt.X("pct:Q", title="share of the summed run wall (%)", scale=alt.Scale(domain=[0, 100])),
        color=alt.Color("part:N", sort=order, scale=alt.Scale(domain=order, range=colors), title="part"),
        order=alt.Order("order:Q"),
        tooltip=["scenario:N", "runs:Q", "part:N", alt.Tooltip("pct:Q", format=".1f")])
    target = alt.Chart(pd.DataFrame({"x": [TARGET_PCT]})).mark_rule(strokeDash=[4, 4], color="black").encode(x="x:Q")
    subtitle = [s for s in (environment,) if s] + [
        f"each run's wall as the sweep timed it, split by its record's time/* metrics; dashed: the {TARGET_PCT:.0f}% "
        "target for the steps (left, dark blue)"]
    return (bars + target).properties(width=460, height=24 * len(summ), title=chart_title([title], subtitle))


def first_step_by_cache(runs: pd.DataFrame) -> str:
    """The first step (where compilation is) of runs whose graphs all came from torch.compile's
    on-disk cache against runs that compiled them ("" when no record says, as before the
    ``compile/*`` metrics)."""
    known = runs.dropna(subset=["compile_cache"]) if "compile_cache" in runs else runs.iloc[:0]
    if known.empty:
        return ""
    parts = [f"{state} {len(g)} run(s), median {g['first_step'].median():.1f} s ({100 * g['first_step'].sum() / runs['wall_s'].sum():.0f}% "
             "of the summed wall)" for state, g in known.groupby("compile_cache")]
    return ("First step by torch.compile's cache (`compile/cache`: hit = every graph loaded from the cache folder, "
            "miss = every graph compiled): " + "; ".join(parts) + ".")


def markdown(summ: pd.DataFrame, runs: pd.DataFrame, records: list[dict], left_out: int, name: str = "") -> str:
    allrow = summ[summ["scenario"] == "all"].iloc[0] if len(summ) else None
    lines = [f"# Where the GPU time went{f': {name}' if name else ''}", "", describe_environment(records), ""]
    if allrow is not None:
        lines += [f"Training steps took **{allrow['steps_pct']:.0f}%** of the {allrow['runs']:.0f} runs' summed wall "
                  f"({allrow['wall_s'] / 3600:.2f} h; target {TARGET_PCT:.0f}%). The largest overheads: "
                  + ", ".join(f"{p} {allrow[f'{p}_pct']:.0f}%" for p in
                              sorted((p for p in PARTS if p != "steps"), key=lambda p: -allrow[f"{p}_pct"])[:3]) + "."]
    if left_out:
        lines.append(f"{left_out} record(s) without the sweep's timing are left out.")
    cached = first_step_by_cache(runs)
    if cached:
        lines += ["", cached]
    lines += ["", "Parts (`dtype-bench overhead --help`): start = the sweep's wall less the run's own (kernel or "
              "process start, imports, the notebook's charts); first_step = compilation and the first step; steps = "
              "the loop's wall after it less every evaluation; rest = after the loop (saving, serving, writing). "
              "Shares in % of the summed wall; medians in seconds per run.", "",
              markdown_table(summ.round(2))]
    return "\n".join(lines) + "\n"


@dataclass
class Overhead:
    runs: pd.DataFrame
    summary: pd.DataFrame
    chart: alt.Chart
    markdown: str
    files: list


def analyze(study_dir: str | Path, out_dir: str | Path | None = None) -> Overhead:
    """``overhead.csv`` (per scenario), ``overhead_runs.csv``, ``overhead.md`` and the chart of the
    records under ``study_dir``, in ``out_dir`` (default ``study_dir/overhead``)."""
    root, records = study_records(study_dir)
    runs, left_out = parts_table(records)
    if runs.empty:
        raise ValueError(f"none of the {len(records)} records under {str(root)!r} has the sweep's timing "
                         "(sweep.wall_s): run the study with dtype-bench sweep")
    summ = summary(runs)
    out = Path(out_dir) if out_dir else root / "overhead"
    c = chart(summ, describe_environment(records, brief=True))
    md = markdown(summ, runs, records, left_out, root.name)
    files = write_outputs(out, "overhead", summ, md, c)
    runs.to_csv(out / "overhead_runs.csv", index=False)
    return Overhead(runs, summ, c, md, files + [out / "overhead_runs.csv"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dtype-bench overhead", description=__doc__.splitlines()[0])
    p.add_argument("study_dir", help="a study folder written by dtype-bench sweep, e.g. executed/h100/reference")
    p.add_argument("--out", default=None, help="output folder (default STUDY_DIR/overhead)")
    ns = p.parse_args(sys.argv[1:] if argv is None else argv)
    res = analyze(ns.study_dir, ns.out)
    print(res.markdown)
    print("files: " + ", ".join(str(f) for f in res.files))
    return 0
