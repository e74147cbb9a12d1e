"""Where a precision breaks, measured at the logged steps: what the gradients look like to
fp16, and how many weights an optimizer step actually moved.

* ``grad_zero_frac``: gradient elements exactly 0 (underflowed, or never touched: embedding
  rows of tokens absent from the batch are 0 in every precision);
* ``grad_fp16_subnormal_frac``: 0 < |g| < 6.1e-5, fp16's smallest normal: in fp16 these keep
  fewer than 10 bits of mantissa (a value on its way to underflow);
* ``grad_fp16_flush_frac``: 0 < |g| < 2^-25, half fp16's smallest subnormal: values that become
  0 once stored in fp16 (0 by construction where the gradients are fp16 already: read it as the
  what-if for fp32 and bf16 gradients);
* ``grad_nonfinite_frac``: inf / nan elements;
* ``update_unchanged_frac``: weights the optimizer step left bit-identical. An update smaller
  than half a unit in the last place of its weight rounds away (bf16 weights with
  round-to-nearest at fine-tuning learning rates); with fp32 weights it is ~0.

Gradients are read *as backward produced them*, before unscaling: with a loss scale they are
the scaled values, which is what fp16 had to represent. All fractions are over a fixed strided
sample of every tensor's elements (at most ``MAX_SAMPLE`` in all), gathered with one ``cat``,
so a logged step costs a few kernels and a few MB, not a pass over every tensor, and the peak
memory the run reports is not moved by the measurement.
"""
from __future__ import annotations

import torch

FP16_TINY = float(torch.finfo(torch.float16).tiny)  # 2^-14: smallest normal
FP16_FLUSH = 2.0 ** -25                               # half the smallest subnormal 2^-24
MAX_SAMPLE = 1 << 22
_STRIDES = (1, 3, 7, 13, 31, 61, 127, 251, 509, 1021)
"""Odd strides (primes): a stride that divides a row length would sample the same columns of
every row."""


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t  # DTensor shards (FSDP2): this rank's part


def pick_stride(numel: int, max_sample: int = MAX_SAMPLE) -> int:
    """The smallest stride in ``_STRIDES`` that keeps the sample within ``max_sample``."""
    for s in _STRIDES:
        if -(-numel // s) <= max_sample:
            return s
    return _STRIDES[-1]


def sample(tensors: list[torch.Tensor], stride: int) -> torch.Tensor:
    """Every ``stride``-th element of each tensor, concatenated (a new tensor)."""
    return torch.cat([_local(t).detach().reshape(-1)[::stride] for t in tensors])


class Forensics:
    """Counters for one run's parameters; every method returns device tensors (no host sync)
    for ``StepLog.flush`` to copy with the rest of a logged step."""

    KEYS = ("grad_zero_frac", "grad_fp16_subnormal_frac", "grad_fp16_flush_frac", "grad_nonfinite_frac",
            "update_unchanged_frac")

    def __init__(self, params: list[torch.nn.Parameter], max_sample: int = MAX_SAMPLE):
        self.params = params
        self.stride = pick_stride(sum(_local(p).numel() for p in params), max_sample)
        self._before: torch.Tensor | None = None

    def gradients(self) -> dict[str, torch.Tensor]:
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return {}
        g = sample(grads, self.stride).float()
        a = g.abs()
        nz = a > 0
        return {"grad_zero_frac": (a == 0).float().mean(),
                "grad_fp16_subnormal_frac": (nz & (a < FP16_TINY)).float().mean(),
                "grad_fp16_flush_frac": (nz & (a < FP16_FLUSH)).float().mean(),
                "grad_nonfinite_frac": (~torch.isfinite(g)).float().mean()}

    def before_step(self) -> None:
        self._before = sample(self.params, self.stride)

    def after_step(self) -> dict[str, torch.Tensor]:
        if self._before is None:
            return {}
        same = (sample(self.params, self.stride) == self._before).float().mean()
        self._before = None
        return {"update_unchanged_frac": same}
