"""Where a study's GPU time went: each run's wall time as the sweep measured it (``sweep.wall_s``)
split into parts from the record's ``time/*`` metrics, adding up to that wall:

    start        the sweep's wall less the run's own: process start, imports, the notebook's charts
    data, model  building the data and the model (``time/data_s``, ``time/model_s``)
    setup_other  the rest of setup: moving to the device, optimizer, compile wrapper
    first_step   the first optimizer step: compilation, autotuning, CUDA graph capture
    evaluation   every evaluation, the final one after the loop included (``time/eval_s``)
    state        writing the training state every ``state_every`` steps (``time/state_s``)
    steps        the loop's wall after the first step, less its evaluations and saved states
    rest         the run's own wall after the loop, less the final evaluation: saving, the record

The final evaluation runs after the loop, so it is in ``time/eval_s`` but not in
``time/train_s``: records since 2026-11-26 say its time (``time/final_eval_s``); for older ones
it is taken as ``time/eval_s`` over the number of evaluations (each reads the same validation
pool). ``summary``'s ``steps_pct`` is the study's efficiency before scheduling; runs without the
sweep's timing are left out and counted.
"""
from __future__ import annotations

import math

import pandas as pd

from benchlib.core.timing import STEPS_SHARE_TARGET

PARTS = ["start", "data", "model", "setup_other", "first_step", "evaluation", "state", "steps", "rest"]


def _num(v) -> float:
    return math.nan if v is None else float(v)


def run_parts(rec: dict) -> dict | None:
    """Seconds of each part of ``PARTS`` for one record; None when the sweep did not time it."""
    s, m = rec.get("sweep") or {}, rec.get("metrics") or {}
    wall, own = _num(s.get("wall_s")), _num(rec.get("wall_s"))
    if not wall > 0 or not own > 0:
        return None
    setup, train = _num(m.get("time/setup_s")), _num(m.get("time/train_s"))
    if math.isnan(setup) or math.isnan(train):
        return None
    data, model, first, evals, state = (_zero(m.get(f"time/{k}_s")) for k in ("data", "model", "first_step", "eval", "state"))
    after = own - setup - train  # the run's wall after the loop: the final evaluation is in it
    final = min(evals, max(0.0, after), _final_eval_s(rec, evals))
    parts = {"start": wall - own, "data": data, "model": model, "setup_other": setup - data - model,
             "first_step": first, "evaluation": evals, "state": state,
             "steps": max(0.0, train - first - (evals - final) - state), "rest": after - final}
    return {"scenario": rec["scenario"], "config": rec.get("config"), "seed": rec.get("seed"),
            "notebook": bool(s.get("notebook", True)), "runs_per_gpu": s.get("runs_per_gpu") or 1,
            "compile_cache": m.get("compile/cache"),
            "wall_s": wall, **parts}


def _zero(v) -> float:
    return 0.0 if v is None or math.isnan(float(v)) else float(v)


def _final_eval_s(rec: dict, evals: float) -> float:
    """The final evaluation's seconds: the record's ``time/final_eval_s``, else ``evals`` shared
    evenly over the evaluations the run made (every ``eval_every`` steps before the last, and
    the final one) in this process."""
    m, run = rec.get("metrics") or {}, rec.get("run") or {}
    if m.get("time/final_eval_s") is not None:
        return float(m["time/final_eval_s"])
    steps, every = run.get("steps") or 0, run.get("eval_every") or 0
    done = m.get("stability/diverged_step")
    done = steps if done is None else min(steps, int(done) + 1)
    start = ((rec.get("resumed") or {}).get("from_step") or 0)  # a resumed run's process evaluates after it
    in_loop = sum(1 for k in range(every, steps, every) if start < k <= done) if every else 0
    return evals / (in_loop + 1)


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
        row.update({f"{p}_pct": 100 * g[p].sum() / total for p in PARTS})
        row.update({f"{p}_median_s": g[p].median() for p in PARTS})
        out.append(row)
    return pd.DataFrame(out)


def where_it_went(records: list[dict]) -> str:
    """Per scenario and for all runs: each part's share (``PARTS``, steps first) of the runs'
    summed wall in %, as a small table; '' where no record carries the sweep's timing."""
    runs, _ = parts_table(records)
    if runs.empty:
        return ""
    sm = summary(runs).set_index("scenario")
    parts = ["steps", *(p for p in PARTS if p != "steps")]
    table = sm[[f"{p}_pct" for p in parts]].round().astype(int).set_axis(parts, axis=1)
    table.insert(0, "runs", sm["runs"])
    return "where the runs' time went (% of their summed wall):\n" + table.rename_axis(None).to_string()


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


def efficiency_line(name: str, records: list[dict], target: float = STEPS_SHARE_TARGET) -> str:
    """One study's efficiency as the Findings print it: the share of its runs' summed wall in
    training steps (``summary``'s ``steps_pct``), per scenario in brackets, and whether it meets
    ``target``; '' where no record carries the sweep's timing. Runs that shared a GPU each count
    their own wall, so this is the share of the slots' time, not of one GPU's."""
    runs, left = parts_table(records)
    if runs.empty:
        return ""
    sm = summary(runs).set_index("scenario")["steps_pct"]
    each = ", ".join(f"{s} {_pct(v, target)}" for s, v in sm.drop("all").items())
    shown, met = _pct(sm["all"], target), sm["all"] >= 100 * target
    return (f"`{name}` {shown}% ({each}){'' if met else ', below'}"
            + (f"; {left} record(s) without timing left out" if left else ""))


def _pct(v: float, target: float) -> str:
    """A share in % without decimals, but never rounded across ``target`` (69.96 is 69.9, not 70)."""
    return f"{v:.0f}" if (round(v) >= 100 * target) == (v >= 100 * target) else f"{math.floor(10 * v) / 10:.1f}"
