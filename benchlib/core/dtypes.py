"""Dtype configurations as data.

Each configuration is a frozen dataclass in ``REGISTRY``; the training step reads
its fields and never branches on a configuration's *name*.  Names follow seed 001
(the 12-row table) and seed 002 (``fp32_true``, static loss scaling for
``fp16_naive``); ``fp16_naive_noscale`` is seed 001's unscaled stability test.
"""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Literal, Optional

import torch

DtypeName = Literal["fp32", "bf16", "fp16"]
TORCH_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class DtypeConfig:
    name: str
    description: str
    param_dtype: DtypeName = "fp32"
    """dtype the model's weights (and so the optimizer's states) are stored in."""
    autocast_dtype: Optional[DtypeName] = None
    """torch.autocast dtype for the forward pass, or None for no autocast."""
    loss_scaling: Literal["none", "dynamic", "static"] = "none"
    """dynamic = torch.amp.GradScaler (skips overflowing steps); static = multiply the
    loss by ``loss_scale`` before backward and divide the grads after, no skipping."""
    loss_scale: float = 1.0
    optimizer: Literal["adamw", "adamw8bit"] = "adamw"
    """adamw = torch AdamW (fused where the device allows); adamw8bit = bitsandbytes AdamW8bit."""
    update_rounding: Literal["nearest", "stochastic"] = "nearest"
    """How low-precision weights absorb an update: round-to-nearest loses updates smaller
    than half the dtype's spacing; stochastic rounding keeps them in expectation (sr_adamw.py)."""
    head_dtype: Optional[DtypeName] = None
    """dtype of the output head's weights and compute with autocast off; None = like the body."""
    compile: bool = True
    """torch.compile the model on CUDA (seed 001: every config but the ablation compiles)."""
    tf32: bool = True
    """allow TF32 tensor cores for fp32 matmuls and cuDNN convolutions."""
    adam_eps: float = 1e-8
    """Adam's epsilon. One value for every config by default, so that configs differ only in
    precision; a config that changes it says so in its name (``fp16_naive_eps1e4``)."""
    fp8: Literal["none", "tensorwise", "rowwise"] = "none"
    """torchao float8 training of the body's Linear layers (Hopper and newer)."""

    def __post_init__(self) -> None:
        # eps is applied in fp32 arithmetic by every optimizer here (fused AdamW's opmath, the
        # stochastic-rounding AdamW, bitsandbytes), so 1e-8 is valid for fp16 weights too. What
        # fp16 weights do lose is their fp16 second-moment state: g^2 under ~6e-8 is stored as 0.
        if not self.adam_eps > 0:
            raise ValueError(f"{self.name}: adam_eps must be > 0, got {self.adam_eps}")
        if self.loss_scaling == "dynamic" and self.param_dtype != "fp32":
            raise ValueError(f"{self.name}: GradScaler needs fp32 master weights; use static scaling")

    @property
    def torch_param_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.param_dtype]

    @property
    def compute_dtype(self) -> str:
        """The dtype most matmuls run in: used to pick the precision-matched peak FLOPs."""
        if self.fp8 != "none":
            return "fp8"
        if self.autocast_dtype:
            return self.autocast_dtype
        if self.param_dtype == "fp32":
            return "tf32" if self.tf32 else "fp32"
        return self.param_dtype

    def requirements(self) -> list[str]:
        req = []
        if "bf16" in (self.param_dtype, self.autocast_dtype, self.head_dtype):
            req.append("bf16")
        if self.optimizer == "adamw8bit":
            req.append("bitsandbytes")
        if self.fp8 != "none":
            req.append("fp8")
        return req

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _c(**kw) -> DtypeConfig:
    return DtypeConfig(**kw)


_CONFIGS = [
    _c(name="fp32_baseline", description="True fp32 reference: fp32 weights and compute, TF32 off",
       tf32=False),
    _c(name="fp32_tf32_matmul", description="fp32 weights, fp32 matmuls on TF32 tensor cores", tf32=True),
    _c(name="amp_fp16", description="fp32 weights, fp16 autocast, dynamic GradScaler",
       autocast_dtype="fp16", loss_scaling="dynamic", loss_scale=2.0**16),
    _c(name="amp_bf16", description="fp32 weights, bf16 autocast, no scaler (modern default)",
       autocast_dtype="bf16"),
    _c(name="bf16_pure", description="bf16 weights and compute, stochastic-rounding AdamW update",
       param_dtype="bf16", update_rounding="stochastic"),
    _c(name="bf16_naive", description="bf16 weights and compute, round-to-nearest update (small updates lost)",
       param_dtype="bf16"),
    _c(name="fp16_naive", description="fp16 weights and compute, static loss scale 1024",
       param_dtype="fp16", loss_scaling="static", loss_scale=1024.0),
    _c(name="fp16_naive_noscale", description="fp16 weights and compute, no loss scaling (stability test)",
       param_dtype="fp16", loss_scaling="static", loss_scale=1.0),
    # the control for Adam's eps: fp16 weights keep Adam's second moment in fp16, where a g^2
    # below ~6e-8 is stored as 0; eps 1e-4 bounds the step that follows. Measured on A (base,
    # 600 steps, H100): amp_bf16 3.42, amp_bf16 with eps 1e-4 4.06, fp16_naive with eps 1e-4
    # 4.04 - so an fp16 gap measured with eps 1e-4 is the eps, not fp16. Compare this config
    # with fp16_naive (same eps as everyone) to see what eps does for fp16 weights.
    _c(name="fp16_naive_eps1e4", description="fp16_naive with Adam eps 1e-4 (the eps control)",
       param_dtype="fp16", loss_scaling="static", loss_scale=1024.0, adam_eps=1e-4),
    _c(name="amp_bf16_eps1e4", description="amp_bf16 with Adam eps 1e-4 (the eps control)",
       autocast_dtype="bf16", adam_eps=1e-4),
    _c(name="amp_fp16_8bit_adam", description="amp_fp16 with bitsandbytes 8-bit AdamW",
       autocast_dtype="fp16", loss_scaling="dynamic", loss_scale=2.0**16, optimizer="adamw8bit"),
    _c(name="amp_bf16_8bit_adam", description="amp_bf16 with bitsandbytes 8-bit AdamW",
       autocast_dtype="bf16", optimizer="adamw8bit"),
    _c(name="bf16_no_compile", description="bf16_pure without torch.compile (compile ablation)",
       param_dtype="bf16", update_rounding="stochastic", compile=False),
    _c(name="amp_bf16_fp32_head", description="bf16 autocast body, output head in fp32 with autocast off",
       autocast_dtype="bf16", head_dtype="fp32"),
    _c(name="bf16_body_fp32_head", description="bf16 body (stochastic rounding), fp32 head weights and compute",
       param_dtype="bf16", update_rounding="stochastic", head_dtype="fp32"),
    _c(name="amp_bf16_fp8", description="amp_bf16 with torchao float8 (tensorwise) Linear layers",
       autocast_dtype="bf16", fp8="tensorwise"),
    _c(name="amp_bf16_fp8_rowwise", description="amp_bf16 with torchao float8 (rowwise) Linear layers",
       autocast_dtype="bf16", fp8="rowwise"),
]

REGISTRY: dict[str, DtypeConfig] = {c.name: c for c in _CONFIGS}
ALIASES: dict[str, str] = {"fp32_true": "fp32_baseline"}

# Seed 001's twelve rows (+ the unscaled fp16 test): the default set of a study (`configs: seed001`).
FULL_MATRIX = ["fp32_baseline", "amp_fp16", "amp_bf16", "bf16_pure", "fp16_naive", "bf16_naive",
           "amp_fp16_8bit_adam", "amp_bf16_8bit_adam", "bf16_no_compile", "fp32_tf32_matmul",
           "amp_bf16_fp32_head", "bf16_body_fp32_head", "fp16_naive_noscale"]
# Seed 002's core six (`configs: seed002`).
CORE_SIX = ["fp32_true", "amp_fp16", "amp_bf16", "bf16_pure", "fp16_naive", "amp_bf16_8bit_adam"]


class UnknownNameError(ValueError):
    """A name that is not in a registry; the message lists the valid names and the closest."""


def closest(name: str, valid: list[str]) -> str:
    match = difflib.get_close_matches(name, valid, n=1, cutoff=0.0)
    return f" Did you mean {match[0]!r}?" if match else ""


def get_config(name: str) -> DtypeConfig:
    key = ALIASES.get(name, name)
    if key not in REGISTRY:
        valid = list(REGISTRY) + list(ALIASES)
        raise UnknownNameError(f"unknown dtype config {name!r}.{closest(name, valid)} "
                               f"Valid: {', '.join(valid)}")
    return REGISTRY[key]


@dataclass(frozen=True)
class InferMode:
    """An inference precision, data as a dtype configuration is: the dtype a trained model's
    weights are cast to for serving and the autocast dtype around its forward."""
    name: str
    weights: DtypeName
    autocast: Optional[DtypeName] = None


INFER_MODES = {m.name: m for m in [
    InferMode("fp32", "fp32"),
    InferMode("autocast_bf16", "fp32", "bf16"),
    InferMode("autocast_fp16", "fp32", "fp16"),
    InferMode("bf16", "bf16"),
    InferMode("fp16", "fp16"),
]}


def get_mode(name: str) -> InferMode:
    if name not in INFER_MODES:
        raise UnknownNameError(f"unknown inference mode {name!r}: use one of {', '.join(INFER_MODES)}")
    return INFER_MODES[name]


def config_table() -> "pandas.DataFrame":  # noqa: F821
    import pandas as pd
    rows = []
    for c in REGISTRY.values():
        rows.append({"name": c.name, "params": c.param_dtype, "autocast": c.autocast_dtype or "-",
                     "scaling": c.loss_scaling if c.loss_scaling != "static" else f"static x{c.loss_scale:g}",
                     "optimizer": c.optimizer, "update": c.update_rounding, "head": c.head_dtype or "body",
                     "compile": c.compile, "tf32": c.tf32, "eps": c.adam_eps, "fp8": c.fp8,
                     "description": c.description})
    return pd.DataFrame(rows).set_index("name")
