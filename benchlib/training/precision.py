"""Everything the dtype config changes in a training step besides the model's dtypes:
global TF32 flags, loss scaling, the optimizer (torch's fused AdamW, ``adamw.AdamW`` for
moments or rounding torch's cannot express, bitsandbytes' 8-bit AdamW) and FP8 training through
torchao's float8 Linear (seed 001's extension "FP8 on H100": the body's Linear layers whose
dimensions are multiples of 16 are converted, the head keeps the config's head precision;
``linear_shapes`` lists the body's matmuls for every run's record)."""
from __future__ import annotations

import math
import re
from collections import Counter

import torch
import torch.nn as nn

from benchlib.core.dtypes import TORCH_DTYPES, DtypeConfig


def set_matmul_flags(dtype: DtypeConfig) -> None:
    """seed 002: fp32_true disables TF32 for matmul and cuDNN; other configs allow it."""
    torch.backends.cuda.matmul.allow_tf32 = dtype.tf32
    torch.backends.cudnn.allow_tf32 = dtype.tf32
    torch.set_float32_matmul_precision("high" if dtype.tf32 else "highest")


class LossScaler:
    """One interface over the loss-scaling modes: none; static (loss x S before backward, grads / S
    after, the step applied even when they overflowed: seed 002's fp16_naive); dynamic
    (torch.amp.GradScaler: grows the scale, halves it and skips the step on overflow)."""

    def __init__(self, dtype: DtypeConfig, device: torch.device):
        self.mode = dtype.loss_scaling
        self.static = float(dtype.loss_scale)
        self.grad_scaler = None
        if self.mode == "dynamic":
            self.grad_scaler = torch.amp.GradScaler(device.type, init_scale=dtype.loss_scale)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        if self.grad_scaler is not None:
            return self.grad_scaler.scale(loss)
        if self.mode == "static" and self.static != 1.0:
            return loss * self.static
        return loss

    def unscale_(self, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> None:
        if self.grad_scaler is not None:
            self.grad_scaler.unscale_(optimizer)
        elif self.mode == "static" and self.static != 1.0:
            grads = [p.grad for p in params if p.grad is not None]
            torch._foreach_mul_(grads, 1.0 / self.static)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.grad_scaler is not None:
            self.grad_scaler.step(optimizer)
            self.grad_scaler.update()
        else:
            optimizer.step()

    def state_dict(self) -> dict:
        return self.grad_scaler.state_dict() if self.grad_scaler is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.grad_scaler is not None and state:
            self.grad_scaler.load_state_dict(state)

    def current_scale(self) -> torch.Tensor | float:
        """The scale as a device tensor (dynamic) or a float; reading it never syncs."""
        if self.grad_scaler is not None:
            return self.grad_scaler._scale if self.grad_scaler._scale is not None else self.grad_scaler._init_scale
        return self.static if self.mode == "static" else 1.0


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices, not biases or norms (nanoGPT's rule: dim >= 2)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


ADAMW8BIT_STEP = "direct"
"""How bitsandbytes' AdamW8bit is stepped (``adamw8bit.STEP_MODES``): the fastest measured on GPT-2
124M's shapes (docs/bench/optimizer_step_2026-11-25); every mode computes the same numbers."""


def uses_torch_adamw(model: torch.nn.Module, dtype: DtypeConfig) -> bool:
    """Whether torch's fused AdamW does what ``dtype`` says: moments stored in each weight's own
    dtype, rounded to nearest, and round-to-nearest weights. It is then used (it is torch's
    behaviour, and fastest)."""
    if dtype.update_rounding != "nearest" or dtype.moment_rounding != "nearest":
        return False
    for name in (dtype.exp_avg_dtype, dtype.exp_avg_sq_dtype):
        if name is not None and any(p.dtype != TORCH_DTYPES[name] for p in model.parameters() if p.requires_grad):
            return False
    return True


def build_optimizer(model: torch.nn.Module, dtype: DtypeConfig, lr: float, weight_decay: float,
                    beta2: float, device: torch.device) -> torch.optim.Optimizer:
    """The optimizer a configuration names: bitsandbytes' 8-bit AdamW; torch's fused AdamW where it
    does what the configuration says (``uses_torch_adamw``); else ``adamw.AdamW``."""
    groups = param_groups(model, weight_decay)
    betas = (0.9, beta2)
    if dtype.optimizer == "adamw8bit":
        from benchlib.training.adamw8bit import AdamW8bit
        # states of tensors under 4096 elements stay 32-bit (bitsandbytes' min_8bit_size)
        return AdamW8bit(groups, lr=lr, betas=betas, eps=dtype.adam_eps, step_mode=ADAMW8BIT_STEP)
    if uses_torch_adamw(model, dtype):
        # fused on every device (CPU included): eps and the update in fp32 arithmetic whatever the
        # weights' dtype, so a config means the same numerics on the CPU as on the GPU
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=dtype.adam_eps, fused=True)
    from benchlib.training.adamw import AdamW
    return AdamW(groups, lr=lr, betas=betas, eps=dtype.adam_eps, exp_avg_dtype=dtype.exp_avg_dtype,
                 exp_avg_sq_dtype=dtype.exp_avg_sq_dtype, rounding=dtype.update_rounding,
                 moment_rounding=dtype.moment_rounding)


def lr_at(step: int, base_lr: float, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warm-up to ``base_lr`` then cosine decay to ``min_ratio * base_lr``."""
    if step < warmup:
        return base_lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


# ---- FP8 ----------------------------------------------------------------------------------
def _eligible(in_features: int, out_features: int) -> bool:
    return in_features % 16 == 0 and out_features % 16 == 0  # what the float8 matmul needs


def convert_fp8(model: nn.Module, recipe: str) -> None:
    """Swap the eligible Linear layers of ``model.backbone`` for float8 training."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    convert_to_float8_training(model.backbone, config=Float8LinearConfig.from_recipe_name(recipe),
                               module_filter_fn=lambda mod, fqn: isinstance(mod, nn.Linear)
                               and _eligible(mod.in_features, mod.out_features))


def linear_shapes(backbone: nn.Module) -> list[dict]:
    """The backbone's Linear layers grouped by (in, out): ``name`` is the first layer's path
    with layer numbers as ``*``, ``count`` how many layers share the shape, ``fp8`` whether
    float8 conversion takes them. Read before conversion (a float8 layer is still a Linear)."""
    groups: dict[tuple[int, int], str] = {}
    counts: Counter = Counter()
    for fqn, mod in backbone.named_modules():
        if isinstance(mod, nn.Linear):
            key = (mod.in_features, mod.out_features)
            groups.setdefault(key, re.sub(r"\.\d+\.", ".*.", fqn))
            counts[key] += 1
    return [{"name": groups[k], "in": k[0], "out": k[1], "count": counts[k],
             "fp8": _eligible(*k)} for k in groups]
