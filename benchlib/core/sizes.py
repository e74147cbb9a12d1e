"""Model sizes: the transformer shape of each (architecture, size) and the batch a run of it
takes by default.

``tiny`` and ``small`` are benchmark shapes (CPU seconds, a quick GPU run); the others are the
published models' (Radford et al. 2019, Table 2; Liu et al. 2019): GPT-2 124M (``base``), 355M,
774M and 1.5B, RoBERTa-base and -large. The larger sizes keep ``base``'s tokens or sequences
per optimizer step, reached with a smaller micro-batch and more accumulation where the estimate
below says ``base``'s does not fit an 80 GB GPU: a size changes the model, never the batch the
optimiser sees, and every dtype configuration of one size runs the same micro-batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Size = Literal["tiny", "small", "base", "medium", "large", "xl"]


@dataclass(frozen=True)
class Shape:
    layers: int
    heads: int
    width: int


SHAPES: dict[str, dict[str, Shape]] = {
    "gpt2": {"tiny": Shape(2, 2, 64), "small": Shape(4, 4, 256), "base": Shape(12, 12, 768),
             "medium": Shape(24, 16, 1024), "large": Shape(36, 20, 1280), "xl": Shape(48, 25, 1600)},
    "roberta": {"tiny": Shape(2, 2, 64), "small": Shape(4, 4, 256), "base": Shape(12, 12, 768),
                "large": Shape(24, 16, 1024)},
}


def shape(arch: str, size: str) -> Shape:
    """The shape of ``size`` for ``arch``; a size the architecture was not released in is
    refused in one line naming the sizes it has."""
    sizes = SHAPES[arch]
    if size not in sizes:
        raise ValueError(f"size={size!r} does not exist for {arch}: use one of {', '.join(sizes)}")
    return sizes[size]


SYNTH_NUM_LABELS = {"tiny": 128, "small": 2000, "base": 4271}
"""Labels of the synthetic classification data per size: EUR-Lex 57k's 4,271 EuroVoc labels at
base; tiny's 256-token vocabulary holds one signature token per label and as many background tokens."""

LARGE_SIZES = ("medium", "large", "xl")
"""Sizes beyond ``base``: their data (vocabulary, labels, synthetic corpus) and sequence length
are ``base``'s, only the model grows."""

# ---- the memory estimate behind the default micro-batch -------------------------------------
GPU_BYTES = 80e9  # the GPU the defaults are chosen for: H100 / A100 80GB
BUDGET_FRACTION = 0.5
"""Share of the GPU the estimate may fill. The other half covers what the estimate leaves out:
eager element-wise intermediates (GPT-2's tanh GELU keeps several 4*width tensors per token
without torch.compile), the allocator's fragmentation, cuBLAS and compile workspaces, the
validation pass."""
STATE_BYTES_PER_PARAM = 16
"""fp32 weights (4) + fp32 gradients (4) + Adam's two moments (8): the fp32 and AMP configs,
the largest of the dtype configurations (bf16 weights and 8-bit Adam need less)."""
ACT_BYTES_PER_TOKEN_LAYER_WIDTH = 68
"""Activations kept for backward per token, layer and unit of width: 34 bytes with 16-bit
activations and attention scores never stored (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", eq. 1 without its 5as/h term, since SDPA's fused
kernels keep no T x T scores), doubled for fp32 activations (the fp32 configs): the worst case,
so one micro-batch serves every dtype configuration."""
LOGIT_BYTES = 12
"""Per token and vocabulary entry of an LM head: logits, their fp32 copy and gradient, 4 bytes each."""


def estimate_train_bytes(s: Shape, vocab: int, batch: int, seq_len: int, lm: bool) -> float:
    """Estimated peak training memory in bytes (an estimate, not a measurement):

        params x 16                                    weights, gradients, Adam (fp32)
      + batch x seq_len x layers x width x 68          activations kept for backward
      + batch x seq_len x vocab x 12                   LM logits and their gradient (LM only)

    with params = vocab x width + layers x (12 x width^2 + 13 x width) (GPT-2's and RoBERTa's
    blocks alike; positions and norms are a rounding error here).
    """
    params = vocab * s.width + s.layers * (12 * s.width ** 2 + 13 * s.width)
    tokens = batch * seq_len
    act = tokens * s.layers * s.width * ACT_BYTES_PER_TOKEN_LAYER_WIDTH
    logits = tokens * vocab * LOGIT_BYTES if lm else 0
    return params * STATE_BYTES_PER_PARAM + act + logits


def micro_batch(s: Shape, vocab: int, batch: int, seq_len: int, lm: bool) -> tuple[int, int]:
    """(micro-batch, accumulation steps) with micro-batch x steps = ``batch``: the largest
    divisor of ``batch`` whose estimate fits ``BUDGET_FRACTION`` of the GPU (at least 1)."""
    budget = GPU_BYTES * BUDGET_FRACTION
    for mb in sorted((d for d in range(1, batch + 1) if batch % d == 0), reverse=True):
        if estimate_train_bytes(s, vocab, mb, seq_len, lm) <= budget:
            return mb, batch // mb
    return 1, batch
