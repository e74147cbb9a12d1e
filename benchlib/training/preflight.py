"""What is checked before a run builds anything: refusals a user can act on at once, each one
line naming the problem and what to do (``refusal``: device, checkpoint, seq_len, local data
files; ``out_problem``: the output folder). A refused run reads no data and builds no model.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from benchlib.core.runconfig import RunConfig
from benchlib.data.tasks import BadDataError, DataUnavailableError
from benchlib.training.checkpoints import ARCH_NAME, CheckpointError, checkpoint_config, max_positions

MAX_SCRATCH_POSITIONS = 8192
"""Longest sequence for a model trained from scratch (its position table grows with seq_len):
beyond it attention's memory (quadratic in T) and the LM validation pool (1024 windows of T
tokens) no longer fit a benchmark; a checkpoint's limit is its own."""


def refusal(cfg: RunConfig) -> str | None:
    """Why ``cfg`` (resolved) cannot start as asked (one line), or None."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        return "device='cuda' but no CUDA GPU is visible here: use device=cpu (or auto, which takes a GPU when there is one)"
    limit, whose = MAX_SCRATCH_POSITIONS, f"a {cfg.size} {ARCH_NAME[cfg.scn.arch]} trained from scratch"
    if cfg.model_name_or_path:
        try:
            config, native = checkpoint_config(cfg.scn.arch, cfg.model_name_or_path, cfg.scenario, cfg.scn.task)
        except CheckpointError as e:
            return str(e)
        if config is not None:
            limit = max_positions(config)
            whose = f"checkpoint {cfg.model_name_or_path!r} ({config.get('model_type')})"
        if cfg.save_model and not native:
            return (f"save_model saves GPT-2 and RoBERTa checkpoints; {cfg.model_name_or_path!r} is a "
                    f"{config.get('model_type')!r} model: run without save_model")
    if limit is not None and cfg.seq_len > limit:
        return f"seq_len={cfg.seq_len} exceeds the {limit} positions of {whose}: use seq_len {limit} or less"
    from benchlib.data.files import check_local  # real-data code, imported only for real data
    try:
        check_local(cfg)
    except (BadDataError, DataUnavailableError) as e:
        return str(e)
    return None


def out_problem(path: str | os.PathLike, name: str = "out_dir") -> str | None:
    """Why nothing can be written to the folder ``path`` (one line naming it as ``name``), or
    None. Creates the folder."""
    p = Path(path).expanduser()
    for q in (p, *p.parents):  # a file anywhere on the way: say which
        if q.exists() and not q.is_dir():
            return f"{name} {str(path)!r}: {str(q)!r} is a file, not a folder: give a folder"
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=p):
            pass
    except OSError as e:
        return f"{name} {str(path)!r}: cannot write there ({e.strerror or e}): give a writable folder"
    return None
