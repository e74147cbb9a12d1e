"""Shared test settings, the papermill helper of the notebook and sweep tests, a fake papermill for
sweep tests and a fake Slurm."""
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch


# A suite started in the background of a shell without job control (`make test &`, nohup) inherits
# SIGINT ignored, and so would every child it starts: the tests of Ctrl-C would then test nothing.
# Python's own handler here; children get the default again at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# Tiny models on a small CI box: one intra-op thread. With several threads per op, each
# tiny kernel pays an OpenMP barrier, and under load a barrier costs a scheduler slice.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")  # for subprocesses (papermill kernels, torchrun ranks)

REPO = Path(__file__).resolve().parent.parent

SLOW_FILES = {
    # each launches processes: papermill kernels, sweeps, torchrun ranks, Slurm jobs, a browser
    "test_sweep.py", "test_cluster.py", "test_arms.py", "test_pretrain_phases.py", "test_study_analysis.py",
    "test_notebooks.py", "test_distributed.py", "test_browser.py", "test_cellrun.py", "test_compile_cache.py",
    "test_user_errors.py", "test_separation.py", "test_smoke.py",
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    """The `slow` tier: tests that start other processes or train for minutes. `make test` (CI)
    runs every tier; `make test-fast` (`pytest -m "not slow"`) the rest, for a quick loop."""
    for item in items:
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
        # `make test` spreads the suite over the cores with pytest-xdist (--dist loadgroup): a file's
        # tests stay on one worker (its module fixtures run once), and every test of the session's
        # smoke study shares one worker, so that study runs once
        item.add_marker(pytest.mark.xdist_group("smoke_study" if "smoke_study" in item.fixturenames
                                                else item.path.name))

@pytest.fixture(scope="session")
def smoke_study(tmp_path_factory):
    """params/smoke.yaml executed once for the whole session, end to end (analysis notebooks and
    HTML included): (exit status, its study folder, what it printed). Tests that change the
    study work on a copy of the folder."""
    from dtype_bench.study import sweep
    root = tmp_path_factory.mktemp("executed")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = sweep.main([str(REPO / "params" / "smoke.yaml"), "--out", str(root)])
    return rc, root / "smoke", out.getvalue()


# Statuses of a run that trained every step without diverging. A few steps of a tiny model
# rarely beat the trivial baseline clearly (stalled): plumbing tests accept these, and tests
# of learning ask for "ok".
COMPLETED = ("ok", "degraded", "stalled")


def line_with(text: str, *facts: str) -> str:
    """The first line of ``text`` that holds every fact (a key, a number, a path, a verdict word),
    in whatever wording and order: tests check what a message says, not its prose."""
    lines = [line for line in text.splitlines() if all(f in line for f in facts)]
    assert lines, f"no one line holds all of {facts}:\n{text[-3000:]}"
    return lines[0]


def papermill(*args: str, cwd: Path | str = REPO) -> subprocess.CompletedProcess:
    """The plain ``papermill`` command, as a user types it; benchlib importable from any cwd."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "papermill", *args, "--no-progress-bar"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def fake_slurm(monkeypatch) -> list:
    """submitit's SlurmExecutor replaced by a recorder; returns the list of what was submitted:
    ("array", function name, parameters, [argument tuple per task]) or ("job", command,
    parameters, [arguments]). Job ids count up from 41 like Slurm's."""
    submitit = pytest.importorskip("submitit")
    calls: list = []

    class FakeSlurm:
        def __init__(self, folder):
            self.params, self.n = {}, 40 + len(calls)

        def update_parameters(self, **kw):
            self.params = dict(kw)

        def _job(self, job_id):
            return type("Job", (), {"job_id": job_id, "done": lambda self, force_check=False: True})()

        def map_array(self, fn, *args):
            self.n += 1
            calls.append(("array", fn.__name__, dict(self.params), list(zip(*args))))
            return [self._job(f"{self.n}_{k}") for k in range(len(args[0]))]

        def submit(self, fn, *args):
            self.n += 1
            calls.append(("job", getattr(fn, "command", None), dict(self.params), [args]))
            return self._job(str(self.n))

    monkeypatch.setattr(submitit, "SlurmExecutor", FakeSlurm)
    return calls


def fake_papermill(study_path, root, outcomes, calls, clock):
    """runner.execute stand-in: writes the run's record (status from ``outcomes``, default ok)
    and, as training does, for a pretrain run that trained (ok, degraded, stalled or diverged),
    a checkpoint directory."""
    from benchlib.core.records import write_json_atomic
    from dtype_bench.study import runner
    from benchlib.study.studyfile import load_study
    from benchlib.training.checkpoints import META_FILE

    by_out = {i.out_dir.resolve(): i for i in runner.plan(load_study(study_path), root)}

    def execute(cmd, env, log, timeout=None):
        out = Path(runner.injected(cmd)["out_dir"]).resolve()
        item = by_out[out]
        calls.append(item.run_id)
        clock[0] += 1
        rec = runner.error_record(item.spec, out, None)
        rec["status"] = outcomes.get(item.run_id, "ok")
        rec["reason"] = {"error": "RuntimeError: boom in pretraining",
                         "stalled": "did not clearly beat the trivial baseline; training loss stopped improving at step 2",
                         "diverged": "loss non-finite or > 3.0x initial at step 2; stopped after 3 steps"
                         }.get(rec["status"])
        rec["env"]["date"] = f"2030-01-01T00:00:{clock[0]:02d}+00:00"
        if item.stage == "pretrain" and rec["status"] in ("ok", "degraded", "stalled", "diverged"):
            (out / "model").mkdir(parents=True, exist_ok=True)
            for f in ("config.json", "model.safetensors"):
                (out / "model" / f).write_text("{}")
            (out / "model" / META_FILE).write_text(json.dumps({"run_id": item.run_id, "date": rec["env"]["date"]}))
        write_json_atomic(out / "result.json", rec)
        return 0
    return execute
