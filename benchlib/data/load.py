"""``load_task_data``: the data a run trains and evaluates on, from ``run.data``: the embedded
synthetic corpora (``embedded``), a hub dataset or local files (``files``)."""
from __future__ import annotations

import time

from benchlib.core.runconfig import RunConfig, resolved
from benchlib.data import embedded, files
from benchlib.data.tasks import TaskData


def load_task_data(run: RunConfig) -> TaskData:
    """Data for ``run.scenario`` from ``run.data`` (see the module docstring)."""
    if run.seq_len is None or run.vocab_size is None or run.num_labels is None:
        run = resolved(run)
    scn = run.scn
    if run.seq_len < (3 if scn.arch == "roberta" else 2):
        raise ValueError(f"seq_len={run.seq_len} is too short for scenario {scn.id}")
    t0 = time.perf_counter()
    if run.data == "synthetic":
        data = embedded.load(run)
    else:
        data = files.load_lm(run) if scn.is_lm else files.load_cls(run)  # hub and local files
    data.meta.setdefault("build_s", round(time.perf_counter() - t0, 3))
    return data
