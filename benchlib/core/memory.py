"""Bytes held by tensors, as this process holds them: a sharded tensor (a DTensor of FSDP2)
counts its local shard only, so the same numbers serve one GPU and one rank of several."""
from __future__ import annotations

from typing import Iterable

import torch


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """This process's part of ``t``: a DTensor's local shard, any other tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the (distinct) tensors' local parts."""
    seen, n = set(), 0
    for t in tensors:
        if id(t) in seen:
            continue
        seen.add(id(t))
        loc = local_tensor(t)
        n += loc.numel() * loc.element_size()
    return n


def optimizer_state_bytes(opt: torch.optim.Optimizer) -> int:
    """Bytes of an optimizer's state tensors (moments, quantisation scales; not step counters)."""
    return tensor_bytes(v for state in opt.state.values() for v in state.values() if torch.is_tensor(v) and v.dim() > 0)
