"""Did a run's compilation come from torch.compile's on-disk caches (``TORCHINDUCTOR_CACHE_DIR``)?
Counted per run (``counters`` before, ``metrics(before)`` after), so a study's fixed cost splits
into runs that compiled and runs that loaded. The cache keys hold the torch and Triton versions
and the GPU, not the host: ``dtype-bench sweep --compile_cache DIR`` shares one folder.

Each run compiles into a subfolder per autocast dtype (``by_autocast``): torch 2.11's AOTAutograd
cache key says whether autocast is on, not in which dtype (pytorch/pytorch PR 181564; 2.13 keys
it), so an ``amp_bf16`` run could load the joint graph an ``amp_fp16`` run compiled and compute in
fp16, unscaled (seen on an H100: 30% of its gradients exactly zero at step 0, and the run failed).
"""
from __future__ import annotations

import os

from benchlib.core.env import COMPILE_CACHE_ENV

_KEYS = {  # record metric -> (dynamo counter group, counter)
    "compile/graph_cache_hits": ("inductor", "fxgraph_cache_hit"),
    "compile/graph_cache_misses": ("inductor", "fxgraph_cache_miss"),
    "compile/autograd_cache_hits": ("aot_autograd", "autograd_cache_hit"),
    "compile/autograd_cache_misses": ("aot_autograd", "autograd_cache_miss"),
}


def by_autocast(autocast: str | None) -> str:
    """Point torch.compile's caches (``TORCHINDUCTOR_CACHE_DIR``) at ``<folder>/autocast-<dtype>``
    (``autocast-off`` without autocast) for the rest of this process, and return that folder.
    ``<folder>`` is the one set (the sweep's ``--compile_cache``, else torch's default); a second
    run in the process keys from it again, not from the first run's subfolder."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    now = os.path.abspath(os.environ.get(COMPILE_CACHE_ENV) or default_cache_dir())
    base = os.path.dirname(now) if os.path.basename(now).startswith("autocast-") else now
    folder = os.path.join(base, f"autocast-{autocast or 'off'}")
    os.environ[COMPILE_CACHE_ENV] = folder
    return folder


def counters() -> dict[str, int]:
    """The process's cache counters now (they only grow: ``torch._dynamo.reset`` keeps them)."""
    from torch._dynamo.utils import counters as c
    return {k: int(c[group][name]) for k, (group, name) in _KEYS.items()}


def metrics(before: dict[str, int]) -> dict:
    """This run's cache hits and misses since ``before``, and ``compile/cache`` = "hit" when
    every compiled graph came from the cache, "miss" when none did, "partial" between, None when
    nothing was compiled. The folder is in the record's environment (``env.compile_cache_dir``)."""
    now = counters()
    out: dict = {k: now[k] - before.get(k, 0) for k in _KEYS}
    hits, misses = out["compile/graph_cache_hits"], out["compile/graph_cache_misses"]
    out["compile/cache"] = (None if hits + misses == 0 else "hit" if misses == 0
                            else "miss" if hits == 0 else "partial")
    return out
