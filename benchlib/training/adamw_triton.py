"""The GPU path of ``adamw.AdamW``: one Triton kernel launch per parameter group and dtype mix.

A launch reads a table with one row per tensor (addresses of weight, moments and step, length,
index of its first element in the group) and a list of blocks (tensor row, first element), so it
covers every tensor of the group; each element's weight, gradient and moments are read once and
written once (the memory-traffic floor of an AdamW step). The gradients' addresses sit in their
own column, re-sent only when autograd allocates new ones; uploads go through pinned memory
without waiting on the device. The arithmetic is ``adamw_reference.reference_update``'s, compiled
without fused multiply-adds and with IEEE division and square root: the two agree to the bit.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from benchlib.training.adamw_reference import HASH_MUL, SALT, group_offsets, local, reference_update

BLOCK = 2048
NUM_WARPS = 4
_TL = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


HASH_MUL_0 = tl.constexpr(HASH_MUL[0])
HASH_MUL_1 = tl.constexpr(HASH_MUL[1])
SALT_M = tl.constexpr(SALT["exp_avg"])
SALT_V = tl.constexpr(SALT["exp_avg_sq"])
# the interpreter (TRITON_INTERPRET=1) runs the kernel on CPU tensors: the tests' check that the
# kernel computes the reference's function
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _mix32(x):  # adamw_reference.mix32 in uint32 arithmetic
    x = x ^ (x >> 16)
    x = x * HASH_MUL_0
    x = x ^ (x >> 15)
    x = x * HASH_MUL_1
    return x ^ (x >> 16)


@triton.jit
def _store_as(x, D: tl.constexpr):
    """fp32 -> D by round-to-nearest-even. For bf16 it is spelled out on the bits (the interpreter
    truncates in its conversion; the GPU's conversion gives the same bits)."""
    if D == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return tl.where(x != x, x, bits.to(tl.float32, bitcast=True)).to(D)
    else:
        return x.to(D)


@triton.jit
def _round_stochastic(x, index, key):
    """adamw_reference.stochastic_round_to_bf16 up to the bf16 conversion (then exact): the
    stream ``key``'s 16 random bits added below bf16's bits, which are kept."""
    noise = _mix32(index ^ key) >> 16
    bits = (x.to(tl.uint32, bitcast=True) + noise) & 0xFFFF0000
    return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))  # NaN stays NaN


@triton.jit(do_not_specialize=["seed"])
def _adamw_kernel(table, grads, blocks, lr_ptr, betas64, seed, beta1, beta2, one_minus_beta1, one_minus_beta2,
                  eps, weight_decay,
                  P: tl.constexpr, G: tl.constexpr, M: tl.constexpr, V: tl.constexpr,
                  STOCHASTIC: tl.constexpr, SR_M: tl.constexpr, SR_V: tl.constexpr, ALIGNED: tl.constexpr,
                  BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    t = tl.load(blocks + 2 * pid)
    start = tl.load(blocks + 2 * pid + 1)
    row = table + t * 6  # p, m, v, step addresses, length, first index
    p_ptr = tl.load(row).to(tl.pointer_type(P))
    m_ptr = tl.load(row + 1).to(tl.pointer_type(M))
    v_ptr = tl.load(row + 2).to(tl.pointer_type(V))
    s_ptr = tl.load(row + 3).to(tl.pointer_type(tl.float32))
    n = tl.load(row + 4)
    base = tl.load(row + 5)
    g_ptr = tl.load(grads + t).to(tl.pointer_type(G))
    if ALIGNED:  # every address 16-byte aligned and every length a multiple of 16: vector loads
        p_ptr = tl.multiple_of(p_ptr, 16)
        g_ptr = tl.multiple_of(g_ptr, 16)
        m_ptr = tl.multiple_of(m_ptr, 16)
        v_ptr = tl.multiple_of(v_ptr, 16)
        n = tl.multiple_of(n, 16)
    start = tl.multiple_of(start, BLOCK)
    offs = start + tl.arange(0, BLOCK)
    mask = offs < n

    step = tl.load(s_ptr)
    e = step.to(tl.int32)
    r1 = tl.cast(1.0, tl.float64)  # adamw_reference._powers: square-and-multiply in fp64
    r2 = r1
    x1 = tl.load(betas64)  # fp64 betas from memory (a float argument is fp32)
    x2 = tl.load(betas64 + 1)
    while e > 0:  # as many rounds as the step has bits
        bit = (e & 1) != 0
        r1 = tl.where(bit, r1 * x1, r1)
        r2 = tl.where(bit, r2 * x2, r2)
        x1 = x1 * x1
        x2 = x2 * x2
        e = e >> 1
    c1 = (1.0 - r1).to(tl.float32)
    c2 = tl.sqrt_rn((1.0 - r2).to(tl.float32))
    lr = tl.load(lr_ptr)
    step_size = tl.div_rn(lr, c1)
    decay = 1.0 - lr * weight_decay

    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    m = tl.load(m_ptr + offs, mask=mask).to(tl.float32)
    v = tl.load(v_ptr + offs, mask=mask).to(tl.float32)
    p = tl.load(p_ptr + offs, mask=mask).to(tl.float32)
    m = m * beta1 + g * one_minus_beta1
    v = v * beta2 + (g * g) * one_minus_beta2
    denom = tl.div_rn(tl.sqrt_rn(v), c2) + eps
    p = p * decay - tl.div_rn(m, denom) * step_size
    # stochastic rounding (adamw_reference.random_bits16): the step's key, salted per moment
    key = _mix32(_mix32(step.to(tl.uint32)) ^ seed.to(tl.uint32))
    index = (base + offs).to(tl.uint32)
    if SR_M:
        m = _round_stochastic(m, index, _mix32(key ^ SALT_M))
    if SR_V:
        v = _round_stochastic(v, index, _mix32(key ^ SALT_V))
    if STOCHASTIC:
        p = _round_stochastic(p, index, key)
    tl.store(m_ptr + offs, _store_as(m, M), mask=mask)
    tl.store(v_ptr + offs, _store_as(v, V), mask=mask)
    tl.store(p_ptr + offs, _store_as(p, P), mask=mask)


def _ptr(t: torch.Tensor) -> int:
    return local(t).data_ptr()


class _Bucket:
    """The tensors of one group that share one dtype mix and alignment: one launch."""

    def __init__(self, key, params, states, bases, device):
        self.key, self.params = key, params
        rows = [[_ptr(p), _ptr(st["exp_avg"]), _ptr(st["exp_avg_sq"]), st["step"].data_ptr(), local(p).numel(), b]
                for p, st, b in zip(params, states, bases)]
        table = torch.tensor(rows, dtype=torch.int64).reshape(-1)
        n = torch.tensor([r[4] for r in rows], dtype=torch.int64)
        per = (n + BLOCK - 1) // BLOCK
        t = torch.repeat_interleave(torch.arange(len(rows)), per)
        first = torch.cumsum(per, 0) - per
        blocks = torch.stack([t, (torch.arange(len(t)) - first[t]) * BLOCK], 1).reshape(-1)
        self.n_blocks = len(t)
        self.meta = _upload(torch.cat([table, blocks]), device)
        self.table, self.blocks = self.meta[:table.numel()], self.meta[table.numel():]
        self.grads = torch.empty(len(rows), dtype=torch.int64, device=device)
        self.grad_ptrs: list[int] = []

    def grad_addresses(self) -> list[int]:
        return [local(p.grad).data_ptr() for p in self.params]

    def set_grads(self, ptrs: list[int]) -> None:
        if ptrs != self.grad_ptrs:
            self.grads.copy_(_pinned(torch.tensor(ptrs, dtype=torch.int64)), non_blocking=True)
            self.grad_ptrs = ptrs


def _upload(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on the device without a host sync (pinned memory; torch's pinned-memory
    allocator keeps the buffer until the copy has run)."""
    return _pinned(host).to(device, non_blocking=True)


def _pinned(host: torch.Tensor) -> torch.Tensor:
    return host.pin_memory() if torch.cuda.is_available() else host.clone()


def _aligned(ptrs: list[int]) -> bool:
    return all(a % 16 == 0 for a in ptrs)


class Launcher:
    """Per group: the buckets, rebuilt when the group's parameters with gradients change or the
    optimizer's state is replaced (``invalidate``: new states, ``load_state_dict``). A weight's
    storage replaced behind the optimizer's back (``p.data = ...``) needs ``invalidate`` too."""

    def __init__(self):
        self._groups: dict[int, tuple] = {}
        self._betas: dict[tuple, torch.Tensor] = {}

    def invalidate(self) -> None:
        self._groups.clear()

    def _build(self, group, params, states) -> list[_Bucket]:
        bases = group_offsets(group)
        by_key: dict = {}
        slow = []
        for p, st in zip(params, states):
            ts = [local(x) for x in (p, p.grad, st["exp_avg"], st["exp_avg_sq"])]
            if not all(x.dtype in _TL and x.is_contiguous() for x in ts) or (ts[0].device.type != "cuda"
                                                                              and not INTERPRET):
                slow.append((p, st, bases[id(p)]))
                continue
            key = tuple(x.dtype for x in ts) + (_aligned([x.data_ptr() for x in ts]) and ts[0].numel() % 16 == 0,)
            by_key.setdefault(key, []).append((p, st, bases[id(p)]))
        device = params[0].device
        buckets = [_Bucket(k, [e[0] for e in v], [e[1] for e in v], [e[2] for e in v], device)
                   for k, v in by_key.items()]
        return buckets, slow

    def step(self, gi: int, group: dict, params: list, states: list) -> None:
        sig = tuple(map(id, params))
        cached = self._groups.get(gi)
        if cached is None or cached[0] != sig:
            cached = self._groups[gi] = (sig, *self._build(group, params, states))
        _, buckets, slow = cached
        b1, b2 = group["betas"]
        betas64 = self._betas.get((b1, b2))
        if betas64 is None:
            betas64 = self._betas[(b1, b2)] = _upload(torch.tensor([b1, b2], dtype=torch.float64), params[0].device)
        for b in buckets:
            gptrs = b.grad_addresses()
            if b.key[-1] and not _aligned(gptrs):  # a new gradient off 16 bytes: rebuild
                self._groups.pop(gi)
                return self.step(gi, group, params, states)
            b.set_grads(gptrs)
            P, G, M, V, aligned = b.key
            moments = group.get("moment_rounding", "nearest") == "stochastic"
            _adamw_kernel[(b.n_blocks,)](
                b.table, b.grads, b.blocks, group["lr"], betas64, group["seed"], b1, b2, 1 - b1, 1 - b2,
                group["eps"], group["weight_decay"], P=_TL[P], G=_TL[G], M=_TL[M], V=_TL[V],
                STOCHASTIC=group["rounding"] == "stochastic" and P == torch.bfloat16,
                SR_M=moments and M == torch.bfloat16, SR_V=moments and V == torch.bfloat16, ALIGNED=aligned,
                BLOCK=BLOCK, num_warps=NUM_WARPS, enable_fp_fusion=False)
        for p, st, base in slow:  # odd dtypes, strides or devices: the reference, per tensor
            reference_update(p, st, group, base)
