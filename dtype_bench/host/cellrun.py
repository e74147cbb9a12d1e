"""The runs of a study that keep no notebook (the seeds outside its ``notebook_seeds:``), run by
the sweep one (arm, scenario, config) cell at a time in one Python process:

    python -m dtype_bench.host.cellrun CELL.json

``CELL.json`` lists each run's ``run_config`` and what the sweep adds to its ``sweep`` entry. The
process trains them in turn with what a training notebook calls (``training.loop.run``), so each
writes the files its notebook would have, its output in ``run.log``, its ``sweep`` entry as soon
as it ends. A run that ends in ``error`` ends the process (``STOP_AFTER_ERROR``); the sweep
starts the rest in a new one. Under a time budget the spec holds its ``deadline``: a run after
the first starts only if the one before it, with the budget's margin, would still end in time;
otherwise the process stops (``STOP_FOR_DEADLINE``) and the rest wait for the next call. With
``carry_over`` (another call on this host follows) a run that saves its state starts where the
time left covers the last run's fixed cost and ``CARRY_MIN_S`` of steps: the deadline cuts it
after its save, and the next call resumes it. The process's first run paid once for its start, data
and compilation: the next is expected without them (``_warm``).
"""
from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from pathlib import Path

from benchlib.core.records import read_record
from benchlib.training.resume import saved_share
from dtype_bench.host.budget import CARRY_MIN_S, MARGIN, STATE_LEAD_S
from dtype_bench.study.runner import (Item, clear, error_record, execute_argv, kernel_env, loaded, log_tail, readable,
                                   recorded_here, run_config, sigint_once, sweep_says, sweep_timing)


def run_cell(spec: dict) -> int:
    """Train the runs of ``spec`` in order; 0 when all ran, ``STOP_AFTER_ERROR`` after one that
    ended in error (the others stay for a new process)."""
    from benchlib.core import env as envmod
    from benchlib.training.loop import run

    first, last, deadline = True, None, spec.get("deadline")
    warm = False  # a run has finished in this process: its start, data and compilation are paid
    for k, job in enumerate(spec["runs"]):
        if deadline is not None and last is not None and not _starts(job, last, deadline, spec.get("carry_over")):
            print(f"time budget: {len(spec['runs']) - k} run(s) left for the next call (the last took {last[0]:.0f} s, "
                  f"{max(deadline - time.time(), 0):.0f} s are left)", flush=True)
            return STOP_FOR_DEADLINE
        out = Path(job["run_config"]["out_dir"])
        out.mkdir(parents=True, exist_ok=True)
        # the first run's wall time includes the interpreter's start and imports, as a notebook's does
        t0 = time.perf_counter() - ((envmod.process_age_s() or 0.0) if first else 0.0)
        first = False
        with open(out / RUN_LOG, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            rec = run(job["run_config"], out_dir=out, progress=False)  # a bar's redraws would fill the log
        if not rec.get("_path"):  # refused and a finished record kept: nothing ran
            continue
        rec = read_record(rec["_path"])
        rec = sweep_says(out, rec, sweep={**sweep_timing(rec, time.perf_counter() - t0), "notebook": False,
                                          **job.get("sweep", {})})
        print(f"{rec['run_id']}: {rec['status']} in {rec['sweep']['wall_s']:.1f} s", flush=True)
        last, warm = _warm(rec, cold=not warm), True
        if rec["status"] == "error":
            return STOP_AFTER_ERROR
    return 0


def _warm(rec: dict, cold: bool) -> tuple[float, float | None, int | None]:
    """(wall, fixed) seconds to expect of the next run in this process from ``rec``'s, and the steps
    ``rec``'s run trained for them (a resumed run: those after its saved state): as they were, or
    for the process's first run (``cold``) less what it paid once for the process, the start, the
    data (its tokenised cache built) and a compilation its cache missed (``COLD_PARTS``), which the
    next seed of the cell finds done (on an H200: 300 s -> 211 s, fixed 135 s -> 49 s). The budget's
    ``MARGIN`` covers the small part of them a warm run repeats."""
    wall, fixed = rec["sweep"]["wall_s"], rec["sweep"].get("fixed_s")
    ran = (rec.get("run") or {}).get("steps")
    ran = ran - ((rec.get("resumed") or {}).get("from_step") or 0) if ran else None
    if not cold:
        return wall, fixed, ran
    m = rec.get("metrics", {})
    once = sum(float(m.get(k) or 0.0) for k in COLD_PARTS if k != "time/first_step_s" or m.get("compile/cache") == "miss")
    once = min(once, fixed if fixed is not None else wall)
    return wall - once, None if fixed is None else fixed - once, ran


COLD_PARTS = ("time/startup_s", "time/data_s", "time/first_step_s")


def _steps_left(rc: dict) -> float | None:
    """The steps a run of ``rc`` (a job's ``run_config``) still has to train: all of them, less
    those a state it saved holds (``resume.saved_share``, as the sweep's budget reads it)."""
    steps = rc.get("steps")
    if not steps or not rc.get("state_every") or not rc.get("out_dir"):
        return steps
    run_id = f"{rc.get('scenario')}/{rc.get('config')}/seed{rc.get('seed')}"
    return steps * (1 - saved_share(Path(rc["out_dir"]), run_id, steps))


def _starts(job: dict, last: tuple, deadline: float, carry_over: bool) -> bool:
    """Whether ``job`` may start before ``deadline``, after a run of ``last`` (wall, fixed seconds,
    steps trained): where a run like it, scaled to the steps ``job`` has left, would end in time
    (a resumed run's few steps do not price a whole one), or, under ``carry_over`` for a run that
    saves its state, where its fixed cost, the save's lead and ``CARRY_MIN_S`` of steps fit."""
    left = deadline - time.time()
    wall, fixed, ran = last
    steps = _steps_left(job["run_config"])
    if fixed is not None and ran and steps:
        wall = fixed + (wall - fixed) * steps / ran
    if MARGIN[0] * wall + MARGIN[1] <= left:
        return True
    saves = bool(job["run_config"].get("state_every"))
    return bool(carry_over and saves and MARGIN[0] * (fixed or wall) + MARGIN[1] + STATE_LEAD_S + CARRY_MIN_S <= left)


CELL_LOG = "cell.log"
RUN_LOG = "run.log"
"""A run's own output (warnings, a traceback) when it runs in a cell's process (``cellrun``)."""
STOP_AFTER_ERROR = 3
"""A cell's process exits with this after a run that ended in error (its record written): a
failed CUDA context would fail the runs after it, so they start in a new process."""
STOP_FOR_DEADLINE = 4
"""A cell's process exits with this when its next run would not end before the budget's
deadline: the runs left have no record and wait for the next call."""


def execute_cell(items: list[Item], slot: dict, timeout: int | None = None,
                 sweep_extra: dict | None = None, deadline: float | None = None,
                 carry_over: bool = False) -> list[tuple[Item, dict]]:
    """Train ``items`` (runs without a notebook) one after another in one process
    (this module's ``main``) and return their records. When that process ends early (a run
    in error, a crash), the first run without a record gets an ``error`` record from the logs,
    and the rest go on in a new process; when it stops for ``deadline`` (``time.time()``), the
    rest are left without a record (``carry_over``: ``run_cell``). ``timeout`` is per run."""
    import tempfile

    done: list[tuple[Item, dict]] = []
    pending = list(items)
    while pending:
        for item in pending:
            clear(item.out_dir)
        spec = {"runs": [{"run_config": run_config(i), "sweep": {**loaded(i), **(sweep_extra or {})}} for i in pending],
                "deadline": deadline, "carry_over": carry_over}
        log = pending[0].out_dir / CELL_LOG
        with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="dtype-bench-cell-", delete=False) as f:
            json.dump(spec, f)
        t0 = time.perf_counter()
        try:
            rc = execute_argv([sys.executable, "-m", "dtype_bench.host.cellrun", f.name], kernel_env(slot), log,
                              timeout * len(pending) if timeout else None)
        finally:
            Path(f.name).unlink(missing_ok=True)
        ran = [i for i in pending if recorded_here(i) and "sweep" in readable(i)]  # finished or error, by cellrun
        done += [(i, read_record(i.result)) for i in ran]
        rest = [i for i in pending if i not in ran]
        if rc == -signal.SIGINT:
            raise KeyboardInterrupt
        if not rest or rc == STOP_FOR_DEADLINE:
            break
        if rc == STOP_AFTER_ERROR and ran:  # a run ended in error, recorded: the rest in a fresh process
            pending = rest
            continue
        failed, pending = rest[0], rest[1:]
        how = f"killed by {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.valid_signals() else f"exit {rc}"
        rec = error_record(failed.spec, failed.out_dir, f"the cell's process ended ({how}) before this run finished:\n"
                                                        f"{log_tail(failed.out_dir / RUN_LOG)}\n{log_tail(log, 8)}")
        sweep = {**sweep_timing(rec, time.perf_counter() - t0), "notebook": False, **loaded(failed), **(sweep_extra or {})}
        done.append((failed, sweep_says(failed.out_dir, rec, False, sweep=sweep)))
    return done


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m dtype_bench.host.cellrun CELL.json", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, sigint_once)  # the terminal's Ctrl-C and the sweep's forwarded one stop it once
    return run_cell(json.loads(Path(args[0]).read_text()))


if __name__ == "__main__":
    sys.exit(main())
