"""Where the sweep's runs execute side by side: one slot per concurrent run, each pinned to its
GPU(s) through ``CUDA_VISIBLE_DEVICES``, and a loop that runs every item in a free slot.

``--runs-per-gpu N`` gives each GPU N slots: for quality-only runs of small models that leave
most of a GPU idle. Such runs time each other, so their records say so (``sweep.runs_per_gpu``,
``benchlib.core.records``) and the analysis blanks their speed.
"""
from __future__ import annotations

import os
import queue
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable

_REFUSED = object()  # what run_all's task returns for an item that ``admit`` refused


def visible_gpus() -> list[str]:
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return [g.strip() for g in cvd.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import torch
        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


def slots_for(jobs: int, gpus: list[str], per_run: int = 1, runs_per_gpu: int = 1) -> list[dict]:
    """At most ``jobs`` slots: ``per_run`` GPUs each (a multi-process arm needs as many as its
    ``dist.nproc``), ``runs_per_gpu`` slots on each GPU, filled GPU by GPU before a second run
    goes onto any (2 GPUs, 2 runs each: 0, 1, 0, 1). On CPU a single slot, since side-by-side
    CPU runs would only measure each other."""
    groups = [gpus[i:i + per_run] for i in range(0, len(gpus) - per_run + 1, per_run)] if gpus else []
    slots = [{"CUDA_VISIBLE_DEVICES": ",".join(g)} for _ in range(runs_per_gpu) for g in groups][:jobs]
    return slots if len(slots) > 1 else [{}]


CPU_THREAD_VARS = ("OMP_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS")
"""What ``cpu_share`` sets: torch's CPU threads and Inductor's compile workers. Unset, each of
N runs side by side may take every core for both, and their fixed costs wait on each other."""


def cpu_share(n_slots: int, cpus: int | None = None) -> dict:
    """Environment for each of ``n_slots`` runs on one host: the cores split evenly between them
    (at least one each). Nothing with one slot, and no variable the user has set."""
    if n_slots <= 1:
        return {}
    n = max(1, (cpus or os.cpu_count() or 1) // n_slots)
    return {k: str(n) for k in CPU_THREAD_VARS if k not in os.environ}


def gpu_sharing(slots: list[dict]) -> int:
    """The most slots on one GPU: how many runs may share a GPU at once (1: none do)."""
    per_gpu = Counter(g for s in slots for g in s.get("CUDA_VISIBLE_DEVICES", "").split(",") if g)
    return max(per_gpu.values(), default=1)


def run_all(items: list, slots: list[dict], fn: Callable, on_start: Callable = lambda i, s: None,
            on_done: Callable = lambda i, r: None, admit: Callable = lambda i: True,
            stop: threading.Event | None = None) -> None:
    """Run ``fn(item, slot)`` for every item, in order, at most one at a time per slot. An item
    that ``admit`` refuses when its turn comes (a time budget spent) is not run, nor reported.
    ``stop`` is set when the loop ends by an exception (Ctrl-C), for an ``admit`` that waits."""
    free: queue.Queue = queue.Queue()
    for s in slots:
        free.put(s)

    def task(item):
        slot = free.get()
        try:
            if not admit(item):
                return item, _REFUSED
            on_start(item, slot)
            return item, fn(item, slot)
        finally:
            free.put(slot)

    def done(item, result):
        if result is not _REFUSED:
            on_done(item, result)

    if len(slots) == 1:
        for item in items:
            done(*task(item))
        return
    pool = ThreadPoolExecutor(len(slots))
    try:
        for f in as_completed([pool.submit(task, i) for i in items]):
            done(*f.result())
    except BaseException:
        if stop is not None:
            stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
