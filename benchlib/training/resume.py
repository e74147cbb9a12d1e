"""A run's training state on disk, so that a run stopped part-way continues where it was.

With ``state_every`` N > 0, a single-process run writes ``<out_dir>/state.pt`` atomically after
every N-th step: model, optimizer, loss scaler, random generators, the step log (``steps.jsonl``'s
lines included) and the loop's clocks. Started again with the same settings and ``out_dir`` (a
sweep's resume), the run loads it, draws past the batches it used and goes on from the next step;
its record says so under ``resumed``. A state saved under other settings is not loaded (the record
says why). Under a sweep's time budget the run also saves once just before the deadline
(``STATE_BY_ENV``). The file is removed once the record is written. Speed is measured over the steps
after the resumption; the step log and the quality cover the whole run.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import torch

from benchlib.core.records import atomic_file, write_json_atomic
from benchlib.core.runconfig import RunConfig

STATE_FILE = "state.pt"
STEP_FILE = "state.json"
"""Beside the state: the step it holds and the run's steps, readable without loading the state (a
sweep's time budget costs a resumed run by the steps it has left)."""

STATE_BY_ENV = "DTYPE_BENCH_STATE_BY"
"""A ``time.time()`` a sweep under a time budget hands its runs (its deadline less a lead): a run
that saves its state saves it once more at its first logged step past then, so the deadline's cut
loses the steps after that save, not up to ``state_every`` of them."""


def state_by() -> float | None:
    """``STATE_BY_ENV`` as a time, or None where unset or not a number."""
    try:
        return float(os.environ[STATE_BY_ENV])
    except (KeyError, ValueError):
        return None


# settings that change nothing a step computes: a state saved under other values still fits
_NOT_TRAINING = ("out_dir", "extra", "state_every", "judge_quality", "eval_every", "eval_batches", "forensics",
                 "cache_dir", "timing_warmup", "timing_windows", "on_divergence")


def fingerprint(cfg: RunConfig) -> str:
    """A digest of the settings a training step depends on (not where the run writes, how often
    it saves or evaluates)."""
    flat = {k: v for k, v in cfg.flat().items() if k not in _NOT_TRAINING}
    return hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()[:16]


def save(out: Path, cfg: RunConfig, step: int, model: torch.nn.Module, opt, scaler, log_state: dict, rows: str,
         loop: dict, steps_s: float | None = None) -> float:
    """Write the state after ``step`` (completed); returns the seconds it took. ``log_state`` is
    ``StepLog.state()`` and ``rows`` is ``steps.jsonl`` so far; ``loop`` the loop's clocks;
    ``steps_s``: this process's seconds in training steps so far, which ``STEP_FILE`` keeps with the
    save's ``date``, so a sweep whose deadline cut the run counts the steps it kept (``cut_steps_s``)."""
    t0 = time.perf_counter()
    state = {"fingerprint": fingerprint(cfg), "run_id": cfg.run_id, "step": step, "date": time.time(),
             "model": model.state_dict(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict(),
             "rng": {"cpu": torch.get_rng_state(),
                     "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
             "log": log_state, "rows": rows, "loop": loop}
    with atomic_file(out / STATE_FILE) as tmp:
        torch.save(state, tmp)
    write_json_atomic(out / STEP_FILE, {"step": step, "steps": cfg.steps, "run_id": cfg.run_id, "date": state["date"],
                                        "steps_s": steps_s})
    return time.perf_counter() - t0


def saved_step(out: Path) -> dict | None:
    """What ``STEP_FILE`` says of the state saved in ``out`` (``step``, ``steps``, ``run_id``), or
    None where no state is there."""
    try:
        s = json.loads((Path(out) / STEP_FILE).read_text())
        return s if (Path(out) / STATE_FILE).is_file() and isinstance(s, dict) and "step" in s else None
    except (OSError, ValueError):
        return None


def resume_problem(out: Path, cfg: RunConfig) -> str | None:
    """Why a run of ``cfg`` cannot continue the state saved in ``out`` (one line), or None. That
    its other settings fit is known when the state loads (``load``); its run and length are here."""
    s = saved_step(out)
    if s is None:
        return (f"{out} holds no saved state ({STATE_FILE}: a run saves one every state_every steps), so there "
                f"is nothing to continue")
    if not cfg.state_every:
        return f"give the run's state_every too: only a run that saves its state loads the one in {out}"
    if (s.get("run_id"), s.get("steps")) != (cfg.run_id, cfg.steps):
        return (f"the state in {out} is of {s.get('run_id')}, {s.get('steps')} steps; this command runs "
                f"{cfg.run_id}, {cfg.steps} steps: give the settings it was started with")
    return None


def saved_share(out: Path, run_id: str, steps: int) -> float:
    """The share of its ``steps`` a run's saved state already holds (``STEP_FILE``, written with
    the state by a run of that id and length); 0 without one. Whether the state fits the run's
    other settings is known only when the run loads it (``load``): a guess for a time budget."""
    try:
        s = json.loads((Path(out) / STEP_FILE).read_text())
        if s.get("run_id") != run_id or int(s["steps"]) != int(steps) or not (Path(out) / STATE_FILE).exists():
            return 0.0
        return min(max((int(s["step"]) + 1) / int(steps), 0.0), 1.0)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError):
        return 0.0


def load(out: Path, cfg: RunConfig) -> tuple[dict | None, str | None]:
    """The state saved in ``out`` for these settings, or None and, where a file was there but
    is not used, why (written under other settings, unreadable)."""
    path = out / STATE_FILE
    if not path.exists():
        return None, None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file: start over, say why
        return None, f"{path} could not be read ({type(e).__name__}: {str(e)[:120]}): started from step 0"
    if state.get("fingerprint") != fingerprint(cfg):
        return None, (f"{path} was saved by {state.get('run_id')!r} under other settings: started from step 0 "
                      f"(the file is replaced at the first save)")
    return state, None


def restore(state: dict, model: torch.nn.Module, opt, scaler) -> None:
    """Put the saved model, optimizer, scaler and random generators back."""
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng"]["cpu"])
    if state["rng"]["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])


def clear(out: Path) -> None:
    """The state and any write of it a kill interrupted (``records.atomic_file``'s temporary)."""
    for path in (out / STATE_FILE, out / STEP_FILE, *out.glob(f".{STATE_FILE}.*.tmp"),
                 *out.glob(f".{STEP_FILE}.*.tmp")):
        path.unlink(missing_ok=True)
