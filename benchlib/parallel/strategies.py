"""How each multi-process strategy wraps the model and adapts the training step's hooks: DDP,
FSDP2 (``fully_shard``), FSDP1 and seed 004's manual FSDP, with the mixed-precision policy derived
from the dtype config (``mp_dtypes``). The ``Strategy`` interface and the process group are in
``group``; ``setup`` gives this process its strategy object.
"""
from __future__ import annotations

import contextlib
import os
from typing import Callable

import torch
import torch.nn as nn

from benchlib.core.runconfig import ConfigError, DistConfig, RunConfig
from benchlib.parallel.group import ProcessGroupStrategy, Strategy


# ---- mixed precision and the FSDP units -------------------------------------------------
def mp_dtypes(dtype, settings: DistConfig) -> tuple[torch.dtype | None, torch.dtype | None]:
    """(param_dtype, reduce_dtype) for FSDP mixed precision: AMP configs gather in the autocast
    dtype and reduce in fp32 (the optimizer steps fp32 shards); an fp32 head (one dtype per group)
    or ``mp=autocast`` keeps fp32; other configs (None, None) gather and reduce in storage dtype."""
    from benchlib.core.dtypes import TORCH_DTYPES
    if (dtype.autocast_dtype and dtype.param_dtype == "fp32" and not dtype.head_dtype
            and settings.mp == "policy"):
        return TORCH_DTYPES[dtype.autocast_dtype], torch.float32
    return None, None


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """GPT-2's ``backbone.h[i]`` / RoBERTa's ``backbone.encoder.layer[i]``: the FSDP units. A
    backbone of another family (a fine-tuned BERT, GPT-Neo, ...): its longest ModuleList."""
    bb = model.backbone
    if hasattr(bb, "h"):
        return list(bb.h)
    if hasattr(bb, "encoder") and hasattr(bb.encoder, "layer"):
        return list(bb.encoder.layer)
    return list(max((m for m in bb.modules() if isinstance(m, nn.ModuleList)), key=len, default=[]))


def compile_blocks(model: nn.Module) -> None:
    """``dist.compile_unit=blocks``: each transformer block and the loss (the vocabulary-wide cross
    entropy, which eager would run unfused) compile on their own; the strategy's hooks run
    eagerly between them, with no graph break inside a compiled region."""
    for b in transformer_blocks(model):
        b.compile()
    model.loss = torch.compile(model.loss)


# ---- strategies ----------------------------------------------------------------------
class DDPStrategy(ProcessGroupStrategy):
    name = "ddp"

    @property
    def static_graph(self) -> bool:
        # DDP's static graph and no_sync() do not mix (the reducer asserts): off with accumulation
        return self.settings.static_graph and self.cfg.grad_accum == 1

    def extra_info(self):
        return {"static_graph": self.static_graph}

    def wrap(self, model, compile=False):
        from torch.nn.parallel import DistributedDataParallel as DDP
        s = self.settings
        if compile:
            torch._dynamo.config.optimize_ddp = s.optimize_ddp
            # the python reducer only works with the backward traced by compiled autograd
            torch._dynamo.config.compiled_autograd = s.optimize_ddp == "python_reducer"
            if s.compile_unit == "blocks":
                compile_blocks(model)
        self.ddp = DDP(model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                       bucket_cap_mb=s.bucket_cap_mb, gradient_as_bucket_view=True,
                       static_graph=self.static_graph)
        self._no_sync = _PersistentNoSync(self.ddp.no_sync)
        self.step_model = self._compile(self.ddp, compile and s.compile_unit == "model")
        return self.step_model

    def set_grad_sync(self, step_model, sync):
        self._no_sync.set(sync)
    # grads are identical on every rank after the all-reduce: the local clip is the global one


class ShardedStrategy(ProcessGroupStrategy):
    """A strategy that shards the weights: its record names the mixed-precision dtypes."""

    def extra_info(self):
        p, r = mp_dtypes(self.cfg.dtype, self.settings)
        return {"param_dtype": str(p).replace("torch.", "") if p else None,
                "reduce_dtype": str(r).replace("torch.", "") if r else None}


class FSDP2Strategy(ShardedStrategy):
    name = "fsdp2"

    def wrap(self, model, compile=False):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        s = self.settings
        mesh = init_device_mesh(self.device.type, (self.world,))
        mp = dict(zip(("param_dtype", "reduce_dtype"), mp_dtypes(self.cfg.dtype, s)))
        blocks = transformer_blocks(model)
        if compile and s.compile_unit == "blocks":
            compile_blocks(model)
        for i, b in enumerate(blocks):
            reshard = s.reshard == "all" or (s.reshard == "all_but_last" and i < len(blocks) - 1)
            fully_shard(b, mesh=mesh, reshard_after_forward=reshard, mp_policy=MixedPrecisionPolicy(**mp))
        # the root holds embeddings, the (tied) head and final norm: used first in forward and
        # last in backward, so it never reshards in between; the batch (float labels) is not cast
        fully_shard(model, mesh=mesh, reshard_after_forward=False,
                    mp_policy=MixedPrecisionPolicy(**mp, cast_forward_inputs=False))
        if s.prefetch > 0:
            for i, b in enumerate(blocks):
                b.set_modules_to_forward_prefetch(blocks[i + 1:i + 1 + s.prefetch])
                b.set_modules_to_backward_prefetch(blocks[max(0, i - s.prefetch):i][::-1])
        self.root = model
        _route_method(model, model, "logits")
        self.step_model = self._compile(model, compile and s.compile_unit == "model")
        return self.step_model

    def set_grad_sync(self, step_model, sync):
        self.root.set_requires_gradient_sync(sync)

    def regroup(self, opt):
        """``dist.local_shards``: the optimizer steps each DTensor parameter's local shard, the
        tensor FSDP2's all-gathers read (``_local_tensor``: ``to_local()`` makes a new view per call)."""
        self._shards = []
        if self.settings.local_shards:
            for g in opt.param_groups:
                self._shards += [(p, p._local_tensor) for p in g["params"]]
                g["params"] = [p._local_tensor for p in g["params"]]
        return opt

    def stepped(self, params):
        local = {id(p): loc for p, loc in self._shards}
        return [local.get(id(p), p) for p in params]

    def loss_scaler(self, scaler):
        # local shards are plain tensors: their inf checks must agree across ranks (DTensor grads'
        # checks are reduced by DTensor itself)
        return _sharded_scaler(self, scaler) if self.settings.local_shards else scaler

    def before_optimizer(self):
        # the reduced gradient shards move to the local tensors; the DTensors keep none, so the
        # next backward makes new ones rather than adding into gradients zero_grad never saw
        for p, loc in self._shards:
            loc.grad = None if p.grad is None else p.grad._local_tensor
            p.grad = None

    def clip_grad_norm_(self, params, max_norm):
        if self._shards:  # plain local shards: this rank's squares, summed over the ranks
            return _clip_local_shards(params, max_norm, self.dist)
        # DTensor grads: the norm is reduced over every shard, and its global value returned
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def _clip_local_shards(params, max_norm: float, dist) -> torch.Tensor:
    """``clip_grad_norm_`` over gradients sharded across the ranks as plain tensors: the 2-norm of
    the whole gradient (each shard's norm in fp32, squared and summed over ranks), then every shard
    scaled by ``min(1, max_norm / (norm + 1e-6))`` as torch's clip does."""
    grads = [p.grad for p in params if p.grad is not None and p.grad.numel()]
    sq = (torch.stack([n.float() for n in torch._foreach_norm(grads, 2.0)]).square().sum() if grads
          else torch.zeros((), device=params[0].device))
    dist.all_reduce(sq, op=dist.ReduceOp.SUM)
    norm = sq.sqrt()
    if grads and max_norm != float("inf"):
        torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm


def _sharded_scaler(strategy: ProcessGroupStrategy, scaler):
    """``loss_scaler`` of FSDP1 and manual FSDP: dynamic loss scaling over sharded gradients
    (ShardedGradScaler all-reduces the inf check, so every rank skips or takes the same step)."""
    if scaler.grad_scaler is not None:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        class Scaler(ShardedGradScaler):
            """Its inf flags 0-dim, as GradScaler's are: torch's fused AdamW subtracts the flag from its
            0-dim step counters in place, where ShardedGradScaler's (1,)-shaped one fails to broadcast
            (pytorch/pytorch#140514). A view, so the all-reduce of the flag still reaches the step."""

            def _unscale_grads_(self, *args, **kwargs):
                return {d: t.view(()) for d, t in super()._unscale_grads_(*args, **kwargs).items()}
        scaler.grad_scaler = Scaler(strategy.device.type, init_scale=strategy.cfg.dtype.loss_scale)
    return scaler


class FSDP1Strategy(ShardedStrategy):
    name = "fsdp1"

    def extra_info(self):
        return {**super().extra_info(), "limit_all_gathers": self.cfg.dist.limit_all_gathers}

    def wrap(self, model, compile=False):
        from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        param_dtype, reduce_dtype = mp_dtypes(self.cfg.dtype, self.settings)
        mp = (MixedPrecision(param_dtype=param_dtype, reduce_dtype=reduce_dtype, cast_root_forward_inputs=False)
              if param_dtype else None)
        # use_orig_params keeps the Parameter objects (flattened to 1-D shards): remember
        # which were matrices for the weight-decay groups
        self._decay = {id(p) for p in model.parameters() if p.dim() >= 2}
        self.fsdp = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({type(transformer_blocks(model)[0])}),
                         mixed_precision=mp, sharding_strategy=ShardingStrategy.FULL_SHARD,
                         device_id=self.device, limit_all_gathers=self.cfg.dist.limit_all_gathers,
                         use_orig_params=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
                         forward_prefetch=self.settings.prefetch > 0)
        self._no_sync = _PersistentNoSync(self.fsdp.no_sync)
        _route_method(self.fsdp, model, "logits")
        self.step_model = self._compile(self.fsdp, compile)
        return self.step_model

    def regroup(self, opt):
        """Move the (now 1-D) shards of matrices back into the weight-decay group."""
        wd = next((g for g in opt.param_groups if g.get("weight_decay", 0) > 0), None)
        for g in opt.param_groups:
            if wd is not None and g is not wd:
                wd["params"] += [p for p in g["params"] if id(p) in self._decay]
                g["params"] = [p for p in g["params"] if id(p) not in self._decay]
        return opt

    loss_scaler = _sharded_scaler

    def set_grad_sync(self, step_model, sync):
        self._no_sync.set(sync)

    def clip_grad_norm_(self, params, max_norm):
        return self.fsdp.clip_grad_norm_(max_norm)


class ManualFSDPStrategy(ShardedStrategy):
    name = "fsdp_manual"

    def wrap(self, model, compile=False):
        from benchlib.parallel.fsdp_manual import shard_model
        param_dtype, reduce_dtype = mp_dtypes(self.cfg.dtype, self.settings)
        self.units = shard_model(model, transformer_blocks(model), param_dtype=param_dtype,
                                 reduce_dtype=reduce_dtype, checkpoint=self.cfg.activation_checkpointing,
                                 compile_blocks=compile)
        self.step_model = model
        return model

    loss_scaler = _sharded_scaler

    def clip_grad_norm_(self, params, max_norm):
        from benchlib.parallel.fsdp_manual import clip_grad_norm_
        return clip_grad_norm_(params, max_norm)


STRATEGY_CLASSES = {"ddp": DDPStrategy, "fsdp2": FSDP2Strategy, "fsdp1": FSDP1Strategy,
                    "fsdp_manual": ManualFSDPStrategy}


# ---- helpers -------------------------------------------------------------------------
class _PersistentNoSync:
    """A DDP / FSDP1 ``no_sync()`` context held open across forward *and* backward of the
    micro-batches that accumulate, and closed before the last one's forward."""

    def __init__(self, factory: Callable[[], contextlib.AbstractContextManager]):
        self.factory, self.ctx = factory, None

    def set(self, sync: bool) -> None:
        if not sync and self.ctx is None:
            self.ctx = self.factory()
            self.ctx.__enter__()
        elif sync and self.ctx is not None:
            self.ctx.__exit__(None, None, None)
            self.ctx = None


def _route_method(wrapper: Callable, module: nn.Module, name: str) -> None:
    """Make ``module.<name>(...)`` (evaluation's ``logits``) run inside ``wrapper``'s forward,
    so that a wrapper which gathers parameters around ``forward`` gathers them for it too.
    Inside a forward already (training: forward -> logits) the method runs as is."""
    orig = getattr(module, name)
    depth = [0]

    def enter(mod, args):
        depth[0] += 1

    def leave(mod, args, output):
        depth[0] -= 1

    module.register_forward_pre_hook(enter)
    module.register_forward_hook(leave, always_call=True)

    def routed(*args, **kwargs):
        if depth[0]:
            return orig(*args, **kwargs)
        module.forward = orig
        try:
            return wrapper(*args, **kwargs)
        finally:
            del module.forward

    setattr(module, name, routed)


def setup(cfg: RunConfig, device: torch.device) -> Strategy:
    """The strategy object for this process (joining the process group where there is one)."""
    world_env = int(os.environ.get("WORLD_SIZE", 1))
    if cfg.dist.strategy == "single":
        if world_env > 1:
            raise ConfigError(f"strategy=single under torchrun with WORLD_SIZE={world_env}: every process would "
                              f"train alone; use --dist.strategy ddp|fsdp2|fsdp1|fsdp_manual")
        return Strategy()
    return STRATEGY_CLASSES[cfg.dist.strategy](cfg, device)
