"""FP8 training through torchao's float8 Linear (seed 001's extension "FP8 on H100"): the body's
Linear layers whose dimensions are multiples of 16 are converted; the head keeps the config's
head precision. ``linear_shapes`` lists the body's matmuls for every run's record.
"""
from __future__ import annotations

import re
from collections import Counter

import torch.nn as nn


def fp8_eligible(mod: nn.Module) -> bool:
    return isinstance(mod, nn.Linear) and mod.in_features % 16 == 0 and mod.out_features % 16 == 0


def convert_fp8(model: nn.Module, recipe: str) -> int:
    """Swap eligible Linear layers of ``model.backbone`` for float8 training; returns how many."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = Float8LinearConfig.from_recipe_name(recipe)
    converted = []

    def eligible(mod: nn.Module, fqn: str) -> bool:
        ok = fp8_eligible(mod)
        if ok:
            converted.append(fqn)
        return ok

    convert_to_float8_training(model.backbone, config=config, module_filter_fn=eligible)
    return len(converted)


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
             "fp8": k[0] % 16 == 0 and k[1] % 16 == 0} for k in groups]
