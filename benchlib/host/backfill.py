"""Give records written before the trivial baselines existed what the evidence gates need.

``dtype-bench backfill DIR`` rebuilds each old record's synthetic data (the data seed is
fixed, so it is the same corpus), scores the trivial predictor on the run's own evaluation set
(its first ``batch_size * eval_batches`` sequences, as evaluated then), and adds the
``baseline/*`` fields and ``quality/beats_baseline``. Old records hold no per-example values,
so the decision uses the relative margin of ``baselines.LearnedRule`` alone (no standard
error), and the record says so under ``backfill``. The status is re-judged from the run's
``steps.jsonl`` by ``health.verdict`` (a run recorded ``ok`` may become ``degraded`` or
``stalled``); the old status is kept. Records with real data, or that already carry a
baseline, are left alone.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchlib.training.baselines import BASELINE_NAME, LEARNED_METRIC, LearnedRule, evaluate_baseline
from benchlib.training.health import verdict
from benchlib.core.records import TRAINED, read_steps, steps_file, write_record
from benchlib.core.runconfig import RunConfig, resolved


def _losses(folder: Path) -> list[float]:
    path = steps_file(folder)
    return [r["loss"] for r in read_steps(path) if "loss" in r] if path else []


def backfill_record(path: Path, rule: LearnedRule = LearnedRule()) -> str:
    """Backfill one ``result.json`` in place; returns what was done, in a few words."""
    from benchlib.data import load as datamod
    rec = json.loads(path.read_text())
    m = rec.get("metrics", {})
    if "baseline/name" in m:
        return "has a baseline already"
    if rec.get("status") not in TRAINED:
        return f"status {rec.get('status')}: nothing to compare"
    run = {k: v for k, v in rec["run"].items() if k in RunConfig.keys()}
    if run.get("data", "synthetic") != "synthetic":
        return "real data: not rebuilt"
    cfg = resolved(RunConfig.from_dict({**run, "device": "cpu", "out_dir": None}))
    task = cfg.scn.task
    data = datamod.load_task_data(cfg)
    val = data.val_batches(cfg.batch_size, cfg.eval_batches or 8, "cpu")
    base, _ = evaluate_baseline(data, val)
    name, higher = LEARNED_METRIC[task]
    model_value = m.get(f"quality/{name}")
    gain = None if model_value is None else (model_value - base[name]) * (1 if higher else -1)
    need = rule.min_rel_gain * abs(base[name])
    beats = None if gain is None else bool(gain > need)
    m.update({f"baseline/{k}": v for k, v in base.items()})
    m.update({"baseline/name": BASELINE_NAME[task],
              "baseline/quality": base.get(cfg.scn.quality), "quality/learned_metric": name,
              "quality/n_eval": len(next(iter(val[0].values()))) * len(val) if val else 0,
              "quality/baseline_gain": gain, "quality/baseline_gain_needed": need, "quality/beats_baseline": beats})
    diverged = m.get("stability/diverged_step")
    status, reason, health = verdict(_losses(path.parent), diverged, beats)
    m.update(health)
    was = rec["status"]
    if was != "diverged":
        rec["status"], rec["reason"] = status, reason
    rec["backfill"] = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "status_was": was,
                       "note": ("baseline scored on the run's own evaluation set; beats_baseline by the relative "
                                f"margin alone ({rule.min_rel_gain:.0%} of the baseline): the record holds no "
                                "per-example values for a standard error")}
    write_record(path.parent, rec)
    return f"{name} {model_value:.4g} vs {m['baseline/name']} {base[name]:.4g}: {rec['status']} (was {was})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dtype-bench backfill", description=__doc__.splitlines()[0])
    ap.add_argument("root", help="a study folder: every result.json below it")
    a = ap.parse_args(argv)
    paths = sorted(Path(a.root).rglob("result.json"))
    if not paths:
        print(f"dtype-bench backfill: no result.json under {a.root}", file=sys.stderr)
        return 2
    for p in paths:
        print(f"{p}: {backfill_record(p)}", flush=True)
    return 0
