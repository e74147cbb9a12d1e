"""The runs of a study that keep no notebook (the seeds outside its ``notebook_seeds:``), run by
the sweep one (arm, scenario, config) cell at a time in one Python process:

    python -m benchlib.study.cellrun CELL.json

``CELL.json`` lists the cell's runs: each one's settings (``params``), its folder (``out_dir``)
and what the sweep adds to its record's ``sweep`` entry. The process trains them one after
another with the function a training notebook calls (``benchlib.training.loop.run``, which
resets the compiler and the memory counters between runs), so each writes the record and the
step log its notebook would have, while the interpreter start, the imports and the notebook
kernel are paid once per cell instead of once per run. Each run's output (warnings, a
traceback; no progress bar) goes to its ``run.log``; its record gets its ``sweep`` entry as
soon as it ends, so a process stopped midway (a time budget's Ctrl-C, a crash) keeps the runs
it finished. A run that ends in ``error`` ends the process (exit ``STOP_AFTER_ERROR``): a
failed CUDA context would fail the runs after it, so the sweep starts the rest in a new
process (``runner.execute_cell``).
"""
from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path


def run_cell(spec: dict) -> int:
    """Train the runs of ``spec`` in order; 0 when all ran, ``STOP_AFTER_ERROR`` after one that
    ended in error (the others stay for a new process)."""
    from benchlib.core import env as envmod
    from benchlib.core.records import read_record, write_json_atomic
    from benchlib.study.runner import RUN_LOG, STOP_AFTER_ERROR, sweep_timing
    from benchlib.training.loop import run

    first = True
    for job in spec["runs"]:
        out = Path(job["out_dir"])
        out.mkdir(parents=True, exist_ok=True)
        # the first run's wall time includes the interpreter's start and imports, as a notebook's does
        t0 = time.perf_counter() - ((envmod.process_age_s() or 0.0) if first else 0.0)
        first = False
        with open(out / RUN_LOG, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            rec = run(job["params"], out_dir=out, progress=False)  # a bar's redraws would fill the log
        if not rec.get("_path"):  # refused and a finished record kept: nothing ran
            continue
        rec = read_record(rec["_path"])
        rec["sweep"] = {**sweep_timing(rec, time.perf_counter() - t0), "notebook": False, **job.get("sweep", {})}
        write_json_atomic(out / "result.json", rec)
        print(f"{rec['run_id']}: {rec['status']} in {rec['sweep']['wall_s']:.1f} s", flush=True)
        if rec["status"] == "error":
            return STOP_AFTER_ERROR
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m benchlib.study.cellrun CELL.json", file=sys.stderr)
        return 2
    return run_cell(json.loads(Path(args[0]).read_text()))


if __name__ == "__main__":
    sys.exit(main())
