"""Initial weights built once. A from-scratch model's initial weights depend only on its
configuration and the CPU random state before it is built (``models.build_model`` builds on the
CPU in fp32); initialising GPT-2 124M takes ~12 s of a GPU host's CPU, loading it ~1 s.
``initialised`` keeps each built module under the run's ``cache_dir`` with the random state after
building and restores both, so a run draws the same numbers either way; the most recently used
entries are kept up to ``MAX_BYTES``.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn

from benchlib.core.records import atomic_file

MAX_BYTES = 24 << 30
"""Entries beyond this many bytes in all, least recently used first, are deleted (GPT-2 124M:
0.5 GB an entry; 1.5B: 6 GB)."""


def key(what: str) -> str:
    """The entry of a module described by ``what`` (its class and configuration) built from the
    current CPU random state, with the library versions that build it."""
    import transformers
    h = hashlib.sha256(f"{what}|torch {torch.__version__}|transformers {transformers.__version__}".encode())
    h.update(torch.get_rng_state().numpy().tobytes())
    return h.hexdigest()[:32]


def initialised(make: Callable[[], nn.Module], what: str, cache: str | os.PathLike | None,
                seen: dict | None = None) -> nn.Module:
    """``make()``, or the module it built before from the same random state (``cache`` None:
    always ``make()``). An unreadable entry is built again and replaced. ``seen`` gets
    ``cached`` (whether the module came from the cache; None without one) for the record."""
    seen = {} if seen is None else seen
    seen["cached"] = None
    if cache is None:
        return make()
    folder = Path(cache).expanduser()
    path = folder / f"{key(what)}.pt"
    with contextlib.suppress(Exception):  # none yet, or a torn or foreign file: build again
        saved = torch.load(path, weights_only=False)
        torch.set_rng_state(saved["rng_after"])
        os.utime(path)  # recently used
        seen["cached"] = True
        return saved["module"]
    seen["cached"] = False
    module = make()
    with contextlib.suppress(OSError):  # a full or read-only disk costs the next run the build, nothing else
        with atomic_file(path) as tmp:  # runs building the same entry at once: the last complete one stays
            torch.save({"module": module, "rng_after": torch.get_rng_state(), "what": what}, tmp)
        prune(folder)
    return module


def prune(folder: Path, max_bytes: int = MAX_BYTES) -> None:
    """Delete the least recently used entries until the rest fit in ``max_bytes`` (the newest
    always stays)."""
    entries = sorted(folder.glob("*.pt"), key=lambda p: p.stat().st_mtime, reverse=True)
    total = 0
    for i, p in enumerate(entries):
        total += p.stat().st_size
        if i and total > max_bytes:
            p.unlink(missing_ok=True)
