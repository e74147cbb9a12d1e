"""Calibration tables: how far a recipe gets each scenario, against its trivial baseline and
its target, and what a run of it costs on the GPU.

``dtype-bench calibration DIR`` reads every run folder under DIR (``result.json``, or its line
in DIR's records table once compacted, and ``steps.jsonl`` or ``steps.jsonl.gz``; a run cut off
before its record still gives its curve)
and prints one row per run: the recipe (learning rate, batch, steps, starting checkpoint),
the learned metric at each evaluation, the trivial baseline, whether the targets below are met,
and the cost (median step time, wall time of the whole run). ``docs/calibration.md`` is written
from it.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from benchlib.training.baselines import LEARNED_METRIC
from benchlib.core.scenarios import get_scenario

TARGETS = {
    "clm": "val loss within 0.5 nats of the floor",
    "mlm": "val loss within 0.5 nats of the floor",
    "multilabel": "micro-F1 >= 0.4 and P@1 >= 3x label frequency",
    "singlelabel": "accuracy >= 3x majority class",
}
"""The quality a scenario's reference config should reach on the embedded synthetic data."""


def meets_target(task: str, m: dict) -> bool | None:
    """Whether a record's metrics meet ``TARGETS[task]`` (None: a needed number is missing)."""
    try:
        if task in ("clm", "mlm"):
            return m["quality/val_loss"] - m["quality/loss_floor"] <= 0.5
        if task == "multilabel":
            return m["quality/micro_f1"] >= 0.4 and m["quality/p_at_1"] >= 3 * m["baseline/p_at_1"]
        return m["quality/accuracy"] >= 3 * m["baseline/accuracy"]
    except (KeyError, TypeError):
        return None


def _steps(folder: Path) -> list[dict]:
    from benchlib.core.records import read_steps, steps_file
    path = steps_file(folder)
    return read_steps(path) if path else []


def read_run(folder: Path, rec: dict | None = None) -> dict | None:
    """One row: the record's recipe, outcome and cost (``rec``, by default the folder's
    ``result.json``), and the evaluation curve of its steps log."""
    rec_path = folder / "result.json"
    rec = rec or (json.loads(rec_path.read_text()) if rec_path.exists() else None)
    rows = _steps(folder)
    if rec is None and not rows:
        return None
    run = (rec or {}).get("run", {})
    scn = get_scenario(rec["scenario"] if rec else folder.name[0])
    metric, _ = LEARNED_METRIC[scn.task]
    curve = {r["step"] + 1: r["eval"].get(metric) for r in rows if "eval" in r}
    m = (rec or {}).get("metrics", {})
    ckpt = (rec or {}).get("pretrained") or {}
    return {
        "run": folder.name, "scenario": scn.id, "config": (rec or {}).get("config"),
        "status": rec["status"] if rec else "cut off (no record)",
        "lr": run.get("lr"), "batch": run.get("batch_size"), "steps": run.get("steps"),
        "init": (None if rec is None else (ckpt.get("checkpoint") or {}).get("run_id")
                 or ("checkpoint" if ckpt else "scratch")),
        "metric": metric, "curve": curve, "baseline": m.get(f"baseline/{metric}"),
        "floor": m.get("quality/loss_floor"), "micro_f1": m.get("quality/micro_f1"),
        "target": TARGETS[scn.task], "target_met": meets_target(scn.task, m) if rec else None,
        "step_ms": m.get("step_ms"), "wall_s": (rec or {}).get("wall_s"),
    }


def calibration_table(root: str | Path) -> pd.DataFrame:
    """Every run folder under ``root`` (sorted by scenario, then name)."""
    from benchlib.core.records import STEPS_TABLE, load_records, read_steps_table
    records = {Path(r["_path"]).parent: r for r in load_records(root)}  # result.json files or a compacted table
    table = Path(root) / STEPS_TABLE  # a compacted folder: a run cut off before its record is a log there
    logged = {Path(root) / run for run in read_steps_table(table)} if table.exists() else set()
    folders = sorted({p for p in Path(root).iterdir() if p.is_dir()} | set(records) | logged)
    rows = [r for p in folders if (r := read_run(p, records.get(p)))]
    if not rows:
        raise FileNotFoundError(f"no run folders with result.json or steps.jsonl under {root}")
    return pd.DataFrame(rows).sort_values(["scenario", "run"], kind="stable").reset_index(drop=True)


def to_markdown(df: pd.DataFrame) -> str:
    def curve(c: dict) -> str:
        return ", ".join(f"{s}: {v:.3g}" for s, v in c.items() if v is not None) or "-"

    def num(v, fmt="{:.3g}"):
        return "-" if v is None or v != v else fmt.format(v)
    lines = ["| run | scn | lr | batch | steps | init | status | metric at eval steps | baseline | floor | micro-F1 "
             "| target met | ms/step | run wall s |", "|" + "---|" * 14]
    for r in df.itertuples():
        lines.append(f"| {r.run} | {r.scenario} | {num(r.lr, '{:g}')} | {num(r.batch, '{:g}')} | "
                     f"{num(r.steps, '{:g}')} | {r.init or '-'} | {r.status} | {r.metric}: {curve(r.curve)} | "
                     f"{num(r.baseline)} | {num(r.floor)} | {num(r.micro_f1)} | "
                     f"{'-' if r.target_met is None else 'yes' if r.target_met else 'no'} | "
                     f"{num(r.step_ms, '{:.1f}')} | {num(r.wall_s, '{:.0f}')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dtype-bench calibration", description=__doc__.splitlines()[0])
    ap.add_argument("root", help="folder of run folders (each with result.json and/or steps.jsonl[.gz])")
    a = ap.parse_args(argv)
    try:
        print(to_markdown(calibration_table(a.root)))
    except FileNotFoundError as e:
        print(f"dtype-bench calibration: {e}", file=sys.stderr)
        return 2
    return 0
