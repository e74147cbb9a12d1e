"""Seed 004's manual FSDP: a small, readable reference of fully sharded data parallelism.

Every rank keeps 1/world of each parameter (rows of dim 0, padded to a multiple of world)
and the optimizer steps only those shards. A *unit* is a module whose parameters are
gathered together: each transformer block, and the root (embeddings, final norm, head).

    forward of a unit:   all_gather_into_tensor(shards) -> full weights -> module forward
    backward of a unit:  full-weight gradients -> reduce_scatter_tensor -> shard gradients (mean)

The two collectives are the forward and backward of one autograd function (``_Gather``),
so autograd runs the reduce-scatter when the unit's backward is done. The gathered weights
are put in the module in place of its parameters for the duration of the call and the shards
put back after, so the module's own code (Hugging Face's blocks) runs unchanged.

What it leaves out, on purpose (the official FSDP does these; docs/multi_gpu.md measures
the difference):
  * no overlap: each all-gather runs when its unit starts, each reduce-scatter when its
    backward ends; nothing is prefetched;
  * resharding after forward comes from activation checkpointing: with it each block
    re-gathers its weights in backward (ZeRO-3 memory); without it the gathered weights
    of a block live until its backward (like ``reshard_after_forward=False``);
  * gradients are reduce-scattered on every micro-batch (no ``no_sync``), summing into the
    shard gradients.
"""
from __future__ import annotations

import functools
import math
import warnings
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

# torch 2.13 marks these two names deprecated in favour of *_single; seed 004 names them, and
# they are the same collectives
warnings.filterwarnings("ignore", message=r".*(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated",
                        category=FutureWarning)


class ShardedUnit:
    """The parameters of one module (not those of nested units), sharded across the group."""

    def __init__(self, module: nn.Module, group=None, param_dtype: torch.dtype | None = None,
                 reduce_dtype: torch.dtype | None = None, skip: set[int] = frozenset()):
        self.module, self.group = module, group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.param_dtype, self.reduce_dtype = param_dtype, reduce_dtype
        # each distinct parameter with every (module, name) that refers to it: a tied weight
        # (GPT-2's embedding and LM head) is one parameter in two places
        places: dict[int, list[tuple[nn.Module, str]]] = {}
        params: dict[int, nn.Parameter] = {}
        for mod in module.modules():
            for name, p in mod.named_parameters(recurse=False):
                if id(p) in skip or getattr(p, "_fsdp_shard", False):
                    continue  # owned by a nested unit
                places.setdefault(id(p), []).append((mod, name))
                params[id(p)] = p
        self.places = list(places.values())
        self.shapes = [p.shape for p in params.values()]
        self.shards: list[nn.Parameter] = []
        for p, where in zip(params.values(), self.places):
            shard = nn.Parameter(self._shard_of(p.detach()), requires_grad=p.requires_grad)
            shard._fsdp_shard = True
            self.shards.append(shard)
            for mod, name in where:  # the shard takes the parameter's place (and name)
                mod._parameters[name] = shard
        self.rows = [self._rows(s) for s in self.shapes]
        self.numels = [s.numel() for s in self.shards]
        self.active = False

    # ---- layout: rows of dim 0, padded so that every rank holds the same number ----
    def _rows(self, shape: torch.Size) -> int:
        return math.ceil((shape[0] if len(shape) else 1) / self.world)

    def _shard_of(self, full: torch.Tensor) -> torch.Tensor:
        full = full.reshape(-1) if full.dim() == 0 else full
        per = self._rows(full.shape)
        padded = full.new_zeros(per * self.world, *full.shape[1:])
        padded[:full.shape[0]] = full
        return padded[self.rank * per:(self.rank + 1) * per].clone()

    # ---- the two collectives -------------------------------------------------------
    def all_gather(self, shards: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        """Every rank's shards -> the full parameters (in ``param_dtype`` when set)."""
        dt = self.param_dtype or shards[0].dtype
        flat = torch.cat([s.detach().to(dt).reshape(-1) for s in shards])
        out = flat.new_empty(self.world * flat.numel())
        dist.all_gather_into_tensor(out, flat, group=self.group)
        out = out.view(self.world, -1)  # row r: rank r's shards, one after another
        full, off = [], 0
        for shape, rows, n in zip(self.shapes, self.rows, self.numels):
            piece = out[:, off:off + n].reshape(self.world * rows, *shape[1:])  # copy: a strided slice
            full.append(piece[:shape[0] if len(shape) else 1].view(shape))
            off += n
        return full

    def reduce_scatter(self, grads: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        """Full-parameter gradients of every rank -> this rank's shard of their mean."""
        dt = self.reduce_dtype or grads[0].dtype
        pieces = []
        for g, shape, rows in zip(grads, self.shapes, self.rows):
            g = g.reshape(-1) if g.dim() == 0 else g
            padded = g.new_zeros(self.world * rows, *g.shape[1:], dtype=dt)
            padded[:g.shape[0]] = g
            pieces.append(padded.view(self.world, -1))
        flat = torch.cat(pieces, dim=1).div_(self.world)  # row r: what rank r keeps; pre-divided
        out = flat.new_empty(flat.shape[1])
        dist.reduce_scatter_tensor(out, flat.reshape(-1), op=dist.ReduceOp.SUM, group=self.group)
        shard_grads, off = [], 0
        for s, n in zip(self.shards, self.numels):
            shard_grads.append(out[off:off + n].view(s.shape).to(s.dtype))
            off += n
        return shard_grads

    # ---- running the module with its full weights ----------------------------------
    def _install(self, tensors) -> None:
        for t, where in zip(tensors, self.places):
            for mod, name in where:
                mod._parameters[name] = t

    def run(self, fn: Callable, *args, **kwargs):
        if self.active:  # re-entered (the root's forward calls its logits): already gathered
            return fn(*args, **kwargs)
        full = _Gather.apply(self, *self.shards)
        self._install(full)
        self.active = True
        try:
            return fn(*args, **kwargs)
        finally:
            self._install(self.shards)
            self.active = False


class _Gather(torch.autograd.Function):
    """forward: all-gather the shards; backward: reduce-scatter the gradients."""

    @staticmethod
    def forward(ctx, unit: ShardedUnit, *shards: torch.Tensor):
        ctx.unit = unit
        return tuple(unit.all_gather(shards))

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        return (None, *ctx.unit.reduce_scatter(grads))


def _wrap_method(module: nn.Module, name: str, unit: ShardedUnit, checkpointed: bool,
                 compiled: bool = False) -> None:
    """``module.<name>`` now runs through ``unit.run`` (an instance attribute shadows the
    class's method); with ``checkpointed`` the gather is inside the checkpoint, so backward
    re-gathers the weights instead of keeping them."""
    orig = getattr(module, name)
    inner = torch.compile(orig) if compiled else orig

    @functools.wraps(orig)
    def call(*args, **kwargs):
        if checkpointed and torch.is_grad_enabled():
            return checkpoint(unit.run, inner, *args, use_reentrant=False, **kwargs)
        return unit.run(inner, *args, **kwargs)

    setattr(module, name, call)


def shard_model(model: nn.Module, blocks: list[nn.Module], param_dtype: torch.dtype | None = None,
                reduce_dtype: torch.dtype | None = None, checkpoint: bool = False,
                compile_blocks: bool = False, group=None) -> list[ShardedUnit]:
    """Shard ``model`` in place: one unit per block, then the root (everything else).

    ``model.forward`` and ``model.logits`` then gather the root's weights; each block's
    forward gathers its own. With ``checkpoint`` the blocks are activation-checkpointed here,
    around the gather (Hugging Face's own per-block checkpointing is switched off).
    """
    if checkpoint and hasattr(model, "backbone"):
        model.backbone.gradient_checkpointing_disable()
    units = []
    for block in blocks:
        unit = ShardedUnit(block, group, param_dtype, reduce_dtype)
        _wrap_method(block, "forward", unit, checkpointed=checkpoint, compiled=compile_blocks)
        units.append(unit)
    root = ShardedUnit(model, group, param_dtype, reduce_dtype)
    for name in ("forward", "logits"):
        if hasattr(model, name):
            _wrap_method(model, name, root, checkpointed=False)
    units.append(root)
    return units


def clip_grad_norm_(params: list[torch.Tensor], max_norm: float, group=None) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` over sharded gradients: squared shard norms are
    summed across ranks (padding rows hold zero gradient), then every shard is scaled."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    sq = torch.stack([g.float().pow(2).sum() for g in grads]).sum()
    dist.all_reduce(sq, op=dist.ReduceOp.SUM, group=group)
    total = sq.sqrt()
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, coef.to(grads[0].dtype) if len({g.dtype for g in grads}) == 1 else coef)
    return total
