"""Shared test settings and the papermill helper of the notebook and sweep tests."""
import os
import subprocess
import sys
from pathlib import Path

import torch

# Tiny models on a small CI box: one intra-op thread. With several threads per op, each
# tiny kernel pays an OpenMP barrier, and under load a barrier costs a scheduler slice.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")  # for subprocesses (papermill kernels, torchrun ranks)

REPO = Path(__file__).resolve().parent.parent

# Statuses of a run that trained every step without diverging. A few steps of a tiny model
# rarely beat the trivial baseline clearly (stalled): plumbing tests accept these, and tests
# of learning ask for "ok".
COMPLETED = ("ok", "degraded", "stalled")


def papermill(*args: str, cwd: Path | str = REPO) -> subprocess.CompletedProcess:
    """The plain ``papermill`` command, as a user types it; benchlib importable from any cwd."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "papermill", *args, "--no-progress-bar"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
