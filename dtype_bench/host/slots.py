"""Where the sweep's runs execute side by side: one slot per concurrent run, each pinned to its
GPU(s) through ``CUDA_VISIBLE_DEVICES`` (``--runs_per_gpu N``: N slots per GPU, whose runs' records
say so, ``sweep.runs_per_gpu``), and a loop that runs every item in a free slot.
"""
from __future__ import annotations

import os
import queue
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable

from dtype_bench.study.runner import CPUS_ENV, RUNNING, format_cpus, interrupt

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
    """At most ``jobs`` slots of ``per_run`` GPUs each, ``runs_per_gpu`` per GPU, filled GPU by GPU
    (2 GPUs, 2 runs each: 0, 1, 0, 1); on CPU a single slot."""
    groups = [gpus[i:i + per_run] for i in range(0, len(gpus) - per_run + 1, per_run)] if gpus else []
    slots = [{"CUDA_VISIBLE_DEVICES": ",".join(g)} for _ in range(runs_per_gpu) for g in groups][:jobs]
    return slots if len(slots) > 1 else [{}]


CPU_THREAD_VARS = ("OMP_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS")
"""What ``cpu_share`` sets, so that runs side by side do not each take every core."""


def cpu_share(n_slots: int, cpus: int | None = None) -> dict:
    """Environment for each of ``n_slots`` runs: the cores split evenly (no variable the user set)."""
    if n_slots <= 1:
        return {}
    n = max(1, (cpus or os.cpu_count() or 1) // n_slots)
    return {k: str(n) for k in CPU_THREAD_VARS if k not in os.environ}


def pin_slots(slots: list[dict], cores: list[int]) -> list[dict]:
    """Each slot its own contiguous share of ``cores`` (``CPUS_ENV``) and thread counts to match."""
    if len(cores) < len(slots):
        raise ValueError(f"--cpus: {len(cores)} core(s) for {len(slots)} runs side by side; give at least one each")
    n = len(cores) // len(slots)
    return [{**s, CPUS_ENV: format_cpus(cores[i * n:(i + 1) * n]),
             **{k: str(n) for k in CPU_THREAD_VARS if k not in os.environ}} for i, s in enumerate(slots)]


def gpu_sharing(slots: list[dict]) -> int:
    """The most slots on one GPU: how many runs may share a GPU at once (1: none do)."""
    per_gpu = Counter(g for s in slots for g in s.get("CUDA_VISIBLE_DEVICES", "").split(",") if g)
    return max(per_gpu.values(), default=1)


def run_all(items: list, slots: list[dict], fn: Callable, on_start: Callable = lambda i, s: None,
            on_done: Callable = lambda i, r: None, admit: Callable = lambda i: True,
            stop: threading.Event | None = None, key: Callable | None = None,
            lane_order: Callable[[int, list], list] = lambda k, lane: lane,
            slot_of: Callable | None = None) -> None:
    """Run ``fn(item, slot)`` for every item ``admit`` lets through, in order, one per slot at a
    time; ``stop`` is set when the loop ends by an exception, for an ``admit`` that waits. With
    ``key``, the items of one key run in one slot, one after another, keys dealt to the slots in
    the order they first appear, or to slot ``slot_of(key) % len(slots)`` (``sweep --seed_per_gpu``: a
    seed's configs timed on one GPU, its slot the same whichever runs are left), and slot ``k``'s
    items in the order ``lane_order(k, items)``."""
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
        if key is None:
            jobs = [pool.submit(task, i) for i in items]
        else:  # a lane per slot, each run as a one-slot sweep
            keys = list(dict.fromkeys(key(i) for i in items))
            slot = slot_of or keys.index
            lanes = [lane_order(k, [i for i in items if slot(key(i)) % len(slots) == k]) for k in range(len(slots))]
            jobs = [pool.submit(run_all, lane, [s], fn, on_start, on_done, admit, stop) for lane, s in zip(lanes, slots)]
        for f in as_completed(jobs):
            if key is None:
                done(*f.result())
            else:
                f.result()
    except BaseException as e:
        if stop is not None:
            stop.set()
        if isinstance(e, KeyboardInterrupt):  # the slots' threads wait on children that a SIGINT
            interrupt(RUNNING)                 # sent to this process alone never reached
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
