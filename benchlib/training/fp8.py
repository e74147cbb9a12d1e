"""FP8 training through torchao's float8 Linear (seed 001's extension "FP8 on H100"): the body's
Linear layers whose dimensions are multiples of 16 are converted; the head keeps the config's
head precision. ``linear_shapes`` lists the body's matmuls for every run's record.
"""
from __future__ import annotations

import re
from collections import Counter

import torch.nn as nn


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
