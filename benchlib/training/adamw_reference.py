"""The reference implementation of ``adamw.AdamW``'s update, in plain torch: the CPU path, the
fallback where Triton is missing, and the ground truth of the tests and of the GPU benchmark.

Every operation is an IEEE fp32 operation on its own (no fused multiply-add), the square roots
correctly rounded, so that the Triton kernel (``adamw_triton``), compiled the same way, gives the
same bits, stochastic rounding included.
"""
from __future__ import annotations

from itertools import accumulate

import torch

from benchlib.core.memory import local_tensor as local

_M32 = 0xFFFFFFFF
# multipliers of the 32-bit integer hash "lowbias32" (C. Wellons, hash-prospector): each
# output bit depends on every input bit, so consecutive indices give unrelated bits
HASH_MUL = (0x7FEB352D, 0x846CA68B)
# a key per stream of stochastic rounding: the weight's (0: the bits every earlier run drew) and
# each moment's, hashed into the step's key so that the three draws of an element are independent
SALT = {"param": 0, "exp_avg": 0x1B873593, "exp_avg_sq": 0x5BD1E995}


def group_offsets(group: dict) -> dict[int, int]:
    """id(parameter) -> the index of its first element in its group (this rank's shards): the
    stochastic rounding's counter."""
    starts = accumulate((local(p).numel() for p in group["params"]), initial=0)
    return {id(p): start for p, start in zip(group["params"], starts)}


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for int64 tensors holding uint32 values, without int64 overflow."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _M32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 of uint32 values held in int64 (the Triton kernel computes it in uint32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, HASH_MUL[0])
    x = x ^ (x >> 15)
    x = _mul32(x, HASH_MUL[1])
    return x ^ (x >> 16)


def random_bits16(seed: int, step: torch.Tensor, index: torch.Tensor, salt: int = 0) -> torch.Tensor:
    """16 random bits (int64 in [0, 2^16)) for each element index at this step; a non-zero
    ``salt`` (``SALT``) draws another stream, independent of the weight's."""
    key = mix32((mix32(step.to(torch.int64) & _M32) ^ seed) & _M32)
    if salt:
        key = mix32(key ^ salt)
    return mix32((index & _M32) ^ key) >> 16


def stochastic_round_to_bf16(x: torch.Tensor, bits16: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16, rounding away from zero with probability (dropped low 16 bits) / 2^16.

    bf16 is the top half of fp32: add the random bits to the half that is dropped and truncate.
    The sign is untouched (negative values round symmetrically), representable values never
    move, and NaN stays NaN."""
    bits = x.float().view(torch.int32).to(torch.int64) & _M32
    out = (bits + bits16) & 0xFFFF0000
    out = torch.where(out >= 2**31, out - 2**32, out).to(torch.int32).view(torch.float32)
    return torch.where(torch.isnan(x), x.float(), out).to(torch.bfloat16)


def _powers(b1: float, b2: float, step: torch.Tensor) -> tuple:
    """(b1^step, b2^step) in fp64 by square-and-multiply over the step's 32 bits: the kernel
    does the same multiplications, so both get the same bits (libraries' pow differ in the last
    place). A CPU step is read on the host; a device step stays there (no sync)."""
    if step.device.type == "cpu":
        e, r1, r2, x1, x2 = int(step), 1.0, 1.0, float(b1), float(b2)
        while e > 0:
            if e & 1:
                r1, r2 = r1 * x1, r2 * x2
            x1, x2, e = x1 * x1, x2 * x2, e >> 1
        return r1, r2
    e = step.to(torch.int64)
    r1 = r2 = torch.ones((), dtype=torch.float64, device=step.device)
    x1, x2 = (torch.tensor(float(b), dtype=torch.float64, device=step.device) for b in (b1, b2))
    for i in range(32):
        bit = ((e >> i) & 1) != 0
        r1, r2 = torch.where(bit, r1 * x1, r1), torch.where(bit, r2 * x2, r2)
        x1, x2 = x1 * x1, x2 * x2
    return r1, r2


def bias_corrections(b1: float, b2: float, step: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 (1 - b1^step, sqrt(1 - b2^step)), the powers taken in fp64: in fp32, 1 - 0.999 is
    off by 1.3e-5 relative (0.999 is not an fp32 value)."""
    r1, r2 = _powers(b1, b2, step)
    c1 = torch.as_tensor(1 - r1, dtype=torch.float64).to(device=step.device, dtype=torch.float32)
    c2 = _sqrt(torch.as_tensor(1 - r2, dtype=torch.float64).to(device=step.device, dtype=torch.float32))
    return c1, c2


def _sqrt(x: torch.Tensor) -> torch.Tensor:
    """The correctly rounded fp32 square root, taken through fp64 (exact for fp32 inputs): some
    CPU builds of torch compute fp32 sqrt to within an ulp only."""
    return x.double().sqrt().float()


def reference_update(param: torch.Tensor, state: dict, group: dict, base: int) -> None:
    """One parameter's update in place (this rank's shard; ``state["step"]`` already counts this
    step); ``base`` is the index of its first element in its group (``group_offsets``). bf16
    storage is written stochastically where the group says (``rounding``: the weight,
    ``moment_rounding``: the moments), each stream with its own bits; all else to nearest."""
    p, g, m, v = (local(t) for t in (param, param.grad, state["exp_avg"], state["exp_avg_sq"]))
    step, lr = state["step"], group["lr"]
    b1, b2 = group["betas"]
    g32, m32, v32, p32 = g.float(), m.float(), v.float(), p.float()
    m32 = m32 * b1 + g32 * (1 - b1)
    v32 = v32 * b2 + (g32 * g32) * (1 - b2)
    c1, c2 = bias_corrections(b1, b2, step)
    lr = lr.float()
    p32 = p32 * (1 - lr * group["weight_decay"]) - (m32 / (_sqrt(v32) / c2 + group["eps"])) * (lr / c1)
    moments = group.get("moment_rounding", "nearest")
    _write(m, m32, moments, group["seed"], step, base, SALT["exp_avg"])
    _write(v, v32, moments, group["seed"], step, base, SALT["exp_avg_sq"])
    _write(p, p32, group["rounding"], group["seed"], step, base, SALT["param"])


def _write(dst: torch.Tensor, x32: torch.Tensor, rounding: str, seed: int, step: torch.Tensor, base: int,
           salt: int) -> None:
    """fp32 ``x32`` into ``dst``: stochastically where ``dst`` is bf16 and ``rounding`` says so,
    else fp32 exactly and bf16 / fp16 by round-to-nearest-even."""
    if dst.dtype == torch.bfloat16 and rounding == "stochastic":
        index = base + torch.arange(dst.numel(), device=dst.device).view(dst.shape)
        dst.copy_(stochastic_round_to_bf16(x32, random_bits16(seed, step, index, salt)))
    else:
        dst.copy_(x32)
