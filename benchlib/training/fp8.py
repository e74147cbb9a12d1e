"""FP8 training through torchao's float8 Linear (seed 001's extension "FP8 on H100").

Only the body's Linear layers whose dimensions are multiples of 16 are converted (the
float8 matmul needs them); the output head keeps the config's head precision.
"""
from __future__ import annotations

import torch.nn as nn


def convert_fp8(model: nn.Module, recipe: str) -> int:
    """Swap eligible Linear layers of ``model.backbone`` for float8 training; returns how many."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = Float8LinearConfig.from_recipe_name(recipe)
    converted = []

    def eligible(mod: nn.Module, fqn: str) -> bool:
        ok = isinstance(mod, nn.Linear) and mod.in_features % 16 == 0 and mod.out_features % 16 == 0
        if ok:
            converted.append(fqn)
        return ok

    convert_to_float8_training(model.backbone, config=config, module_filter_fn=eligible)
    return len(converted)
