"""An interruption of the sweep reaches its runs: a SIGINT sent to the sweep alone (``timeout -s
INT``, ``kill -INT``, a scheduler), not typed at its terminal, used to leave every child training
to its end while the sweep waited for it (an H100 job overran its limit so, 2026-11-26)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from dtype_bench.host import slots
from dtype_bench.study import runner
try:
    from dtype_bench.study.sweep import sigterm_interrupts
except ImportError:
    sigterm_interrupts = None

SLEEPER = "import time; time.sleep(60)"  # a run that would go on long after the test


def _sigint_me_once_running(n: int) -> threading.Thread:
    """SIGINT to this process alone once ``n`` children run (as ``timeout -s INT`` sends it)."""
    def poke():
        deadline = time.monotonic() + 30
        while len(runner.RUNNING) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)
    t = threading.Thread(target=poke, daemon=True)
    t.start()
    return t


def test_a_sigint_to_the_sweep_alone_stops_the_runs_side_by_side(tmp_path):
    rcs = []

    def fn(i, slot):
        rcs.append(runner.execute_argv([sys.executable, "-c", SLEEPER], dict(os.environ), tmp_path / f"{i}.log"))
        return rcs[-1]

    _sigint_me_once_running(2)
    with pytest.raises(KeyboardInterrupt):
        slots.run_all([0, 1], slots.slots_for(2, ["0", "1"]), fn)
    assert rcs == [-signal.SIGINT, -signal.SIGINT]  # both interrupted, neither slept its 60 s out
    assert not runner.RUNNING


def test_a_sigint_to_the_sweep_alone_reaches_the_run_of_its_one_slot(tmp_path):
    log = tmp_path / "run.log"
    _sigint_me_once_running(1)
    with pytest.raises(KeyboardInterrupt):
        runner.execute_argv([sys.executable, "-c", SLEEPER], dict(os.environ), log)
    assert "KeyboardInterrupt" in log.read_text()  # the child was stopped by Ctrl-C, not killed


def test_a_run_stops_once_when_ctrl_c_reaches_it_twice():
    """A Ctrl-C typed at a terminal reaches the sweep's whole process group and the sweep passes it
    on too: the run's second SIGINT must not break the cleanup the first one started."""
    child = ("import os, signal, time\n"
             "from dtype_bench.study.runner import sigint_once\n"
             "signal.signal(signal.SIGINT, sigint_once)\n"
             "try:\n"
             "    os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
             "except KeyboardInterrupt:\n"
             "    os.kill(os.getpid(), signal.SIGINT); time.sleep(0.2)\n"
             "    print('cleaned up')\n")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert "cleaned up" in out.stdout, out.stderr
    papermill_like = runner.PAPERMILL_MAIN.split("sys.argv[0]")[0] + (
        "\ntry:\n    os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\nexcept KeyboardInterrupt:\n"
        "    os.kill(os.getpid(), signal.SIGINT); time.sleep(0.2); print('cleaned up')\n")
    out = subprocess.run([sys.executable, "-c", "import os, time\n" + papermill_like], capture_output=True, text=True,
                         timeout=60)
    assert "cleaned up" in out.stdout, out.stderr


def test_sigterm_stops_the_runs_as_ctrl_c_does_while_they_go():
    restore = sigterm_interrupts()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    finally:
        restore()
    assert signal.getsignal(signal.SIGTERM) is not signal.default_int_handler


def test_a_run_interrupted_after_its_training_is_no_failed_config_and_runs_again(tmp_path):
    """Ctrl-C between the training's record and the notebook's end leaves an ``error`` record: the
    next sweep runs it again, and an analysis of the study meanwhile (--analysis_only) must not read
    it as its config failing."""
    from benchlib.core.records import load_records, write_json_atomic
    from dtype_bench.study import sweep
    from benchlib.study.studyfile import load_study
    path, root = tmp_path / "s.yaml", tmp_path / "executed"
    path.write_text("study: s\nscenarios: [A]\nconfigs: [fp32_baseline, amp_bf16]\nseeds: [0]\nsize: tiny\n"
                    "steps: 10\ndevice: cpu\n")
    items = sweep.plan(load_study(path), root)
    for item in items:
        rec = runner.error_record(item.spec, item.out_dir, None)
        rec.update(status="ok", sweep={"wall_s": 1.0})
        write_json_atomic(item.result, rec)
    runner._mark_interrupted(items[1])
    assert [r["config"] for r in load_records(root)] == [items[0].spec.cfg.config]
    assert runner.run_state(items[1])[0] == "error" and runner.run_state(items[0])[0] == "done:ok"
