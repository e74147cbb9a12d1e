"""Where a precision breaks, measured at the logged steps: what the gradients look like to fp16,
what the optimizer stored, and how much of the update the weights received. Each counter's
definition is its ``records.METRICS`` entry (``forensics/*``); what the names hide:

* ``grad_zero_frac`` counts gradients never touched too (rows of absent tokens);
  ``grad_fp16_flush_frac`` is 0 by construction where the gradients are fp16 already;
* a stored ``exp_avg_sq`` of 0 leaves the second moment no history: only eps bounds the step;
* a stored ``exp_avg_sq`` that a step should shrink (g^2 < v) but leaves bit-identical is stuck:
  bf16 rounded to nearest at beta2 0.999, where (1 - beta2) v is below half a bf16 ulp;
* stochastic rounding leaves as many weights unchanged as round-to-nearest, so
  ``update_unchanged_frac`` cannot tell them apart; ``update_lost_frac`` can. Neither is defined
  for 8-bit states, amsgrad or maximize; both are NaN on a step the optimizer skipped.

``grad_*`` read the gradients as backward made them (scaled); the update counters read them
unscaled and clipped, as the step does. Fractions are over a fixed strided sample of each tensor
(at most ``MAX_SAMPLE`` elements): a logged step costs a few kernels, other steps nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from benchlib.core.memory import local_tensor as _local

FP16_TINY = float(torch.finfo(torch.float16).tiny)  # 2^-14: smallest normal
FP16_FLUSH = 2.0 ** -25                               # half the smallest subnormal 2^-24
MAX_SAMPLE = 1 << 22
_STRIDES = (1, 3, 7, 13, 31, 61, 127, 251, 509, 1021)
"""Odd strides (primes): a stride that divides a row length would sample the same columns of
every row."""
GROUP_LABELS = ("decay", "no_decay")
"""A parameter group is ``decay`` when its weight_decay > 0 (matrices: ``precision.param_groups``),
else ``no_decay`` (biases, norms); groups that share a label are pooled."""


def pick_stride(numel: int, max_sample: int = MAX_SAMPLE) -> int:
    """The smallest stride in ``_STRIDES`` that keeps the sample within ``max_sample``."""
    for s in _STRIDES:
        if -(-numel // s) <= max_sample:
            return s
    return _STRIDES[-1]


def sample(tensors: list[torch.Tensor], stride: int) -> torch.Tensor:
    """Every ``stride``-th element of each tensor, concatenated (a new tensor)."""
    return torch.cat([_local(t).detach().reshape(-1)[::stride] for t in tensors])


def _state_sample(params: list, state, key: str, stride: int) -> torch.Tensor | None:
    """The sampled optimizer state ``key`` of ``params`` (zeros for a parameter without state
    yet: the step initialises it to 0), aligned with ``sample(params, stride)``; None when a
    parameter's state lacks ``key`` or holds it in a non-float format (8-bit)."""
    parts = []
    for p in params:
        st = state[p] if p in state else {}  # torch keeps a defaultdict: no entry created
        if not st:
            parts.append(_local(p).new_zeros(len(range(0, _local(p).numel(), stride)), dtype=torch.float32))
            continue
        t = st.get(key)
        if not torch.is_tensor(t) or not t.is_floating_point() or _local(t).numel() != _local(p).numel():
            return None
        parts.append(_local(t).detach().reshape(-1)[::stride].float())
    return torch.cat(parts)


def _float_moments(params: list, state) -> bool:
    """Whether the optimizer keeps AdamW's moments under torch's names, as floats, for every
    parameter (checked after a step: before the first one there is no state to tell)."""
    return all(p in state and all(torch.is_tensor(t := state[p].get(k)) and t.is_floating_point()
                                  for k in ("exp_avg", "exp_avg_sq")) for p in params)


def _step_count(group: dict, p, state):
    """The step count the optimizer keeps for ``p`` (torch: per parameter; a tensor or a
    number), 0 for a parameter it never stepped, None where it keeps none we can find."""
    st = state[p] if p in state else {}
    if "step" in st:
        return st["step"]
    if "step" in group:
        return group["step"]
    return 0 if not st else None


def _snapshot(count):
    return count.detach().clone() if torch.is_tensor(count) else count


def _changed(before, after):
    """Whether the optimizer took the step: its step count moved. A device bool where the
    count lives on the GPU (no host sync), else a Python bool; True where no count is kept."""
    if before is None or after is None:
        return True
    if torch.is_tensor(after) and after.device.type != "cpu":
        return after != before
    return float(after) != float(before)


def _when(x: torch.Tensor, taken) -> torch.Tensor:
    """``x`` where the step was taken, NaN where it was skipped."""
    if taken is True:
        return x
    if taken is False:
        return torch.full_like(x, math.nan)
    return torch.where(taken, x, torch.full_like(x, math.nan))


def intended_update(group: dict, params: list, state, stride: int, weights: torch.Tensor) -> torch.Tensor | None:
    """AdamW's update of the sampled ``weights`` in fp32, from the stored moments before the
    step, the (unscaled, clipped) gradients and the group's hyper-parameters (lr a float or a
    tensor): -lr*wd*w - lr * m_hat / (sqrt(v_hat) + eps). None where it cannot be stated."""
    if any(k not in group for k in ("lr", "betas", "eps", "weight_decay")) or group.get("amsgrad") \
            or group.get("maximize"):
        return None
    count = _step_count(group, params[0], state)
    m0 = _state_sample(params, state, "exp_avg", stride)
    v0 = _state_sample(params, state, "exp_avg_sq", stride)
    if count is None or m0 is None or v0 is None:
        return None
    t = (count.detach().float() if torch.is_tensor(count) else float(count)) + 1
    b1, b2 = (float(b) for b in group["betas"])
    g = sample([p.grad for p in params], stride).float()
    m, v = m0.mul_(b1).add_(g, alpha=1 - b1), v0.mul_(b2).addcmul_(g, g, value=1 - b2)
    del g
    lr = group["lr"].detach().float() if torch.is_tensor(group["lr"]) else float(group["lr"])
    # in place on the samples: a logged step holds a few fp32 copies of the sample, not more
    denom = v.div_(1 - b2 ** t).sqrt_().add_(float(group["eps"]))
    step = m.div_(1 - b1 ** t).div_(denom).mul_(lr)
    return weights.to(torch.float32, copy=True).mul_(-(lr * float(group["weight_decay"]))).sub_(step)


def _decays(g: torch.Tensor, v: torch.Tensor | None) -> torch.Tensor | None:
    """Where this step's gradient makes exact AdamW shrink the stored second moment: g^2 < v,
    i.e. v * beta2 + (1 - beta2) g^2 < v (fp32, as the step computes g^2); None without ``v``."""
    if v is None:
        return None
    g = g.float()
    return g * g < v


def _ratio(pairs: list[tuple]) -> torch.Tensor:
    return sum(a for a, _ in pairs) / sum(b for _, b in pairs)


@dataclass
class _Taken:
    """One parameter group's sample before the step."""
    label: str
    group: dict
    params: list
    weights: torch.Tensor            # sampled weights, in their own dtype
    intended: torch.Tensor | None    # fp32
    live: torch.Tensor               # gradient finite and != 0 (the second-moment counter's denominator)
    count: object                    # the optimizer's step count before the step
    v: torch.Tensor | None = None    # sampled second moment before the step (fp32), None: not a float state
    decays: torch.Tensor | None = None  # g^2 < v: exact arithmetic shrinks v (the stuck counter's denominator)


class Forensics:
    """Counters for one run's parameters (the update counters: and its optimizer), as device tensors
    (no host sync). ``before_step`` after unscaling and clipping, ``after_step`` right after the
    optimizer step, both before the gradients are zeroed."""

    KEYS = ("grad_zero_frac", "grad_fp16_subnormal_frac", "grad_fp16_flush_frac", "grad_nonfinite_frac",
            "update_unchanged_frac", "exp_avg_sq_zero_frac", "exp_avg_sq_stuck_frac", "update_lost_frac",
            *(f"update_lost_frac_{g}" for g in GROUP_LABELS))

    def __init__(self, params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer | None = None,
                 max_sample: int = MAX_SAMPLE):
        self.params = params
        self.optimizer = optimizer
        self.stride = pick_stride(sum(_local(p).numel() for p in params), max_sample)
        self._taken: list[_Taken] | None = None

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

    def _groups(self) -> list[tuple[str, dict, list]]:
        if self.optimizer is None:  # the weights alone: update_unchanged_frac only
            return [("all", {}, [p for p in self.params if p.grad is not None])]
        return [("decay" if g.get("weight_decay", 0) > 0 else "no_decay", g,
                 [p for p in g["params"] if p.grad is not None]) for g in self.optimizer.param_groups]

    def before_step(self) -> None:
        state = self.optimizer.state if self.optimizer is not None else {}
        self._taken = []
        for label, group, ps in self._groups():
            if not ps:
                continue
            w = sample(ps, self.stride)
            g = sample([p.grad for p in ps], self.stride)
            known = self.optimizer is not None
            intended = intended_update(group, ps, state, self.stride, w) if known else None
            v = _state_sample(ps, state, "exp_avg_sq", self.stride) if known else None
            self._taken.append(_Taken(label, group, ps, w, intended, torch.isfinite(g) & (g != 0),
                                      _snapshot(_step_count(group, ps[0], state)) if known else None,
                                      v, _decays(g, v)))

    def after_step(self) -> dict[str, torch.Tensor]:
        if not self._taken:
            return {}
        state = self.optimizer.state if self.optimizer is not None else {}
        same, zeros, stuck, lost = [], [], [], {}  # (numerator, denominator) pairs, per group
        for t in self._taken:
            after = sample(t.params, self.stride)
            taken = _changed(t.count, _step_count(t.group, t.params[0], state) if self.optimizer is not None else None)
            same.append((_when((after == t.weights).sum().float(), taken), after.numel()))
            if t.intended is not None and _float_moments(t.params, state):
                applied = after.float() - t.weights.float()
                num = _when(((t.intended - applied) * t.intended.sign()).sum(), taken)
                lost.setdefault(t.label, []).append((num, t.intended.abs().sum()))
            v = _state_sample(t.params, state, "exp_avg_sq", self.stride) if self.optimizer is not None else None
            if v is not None:
                zeros.append((_when(((v == 0) & t.live).sum().float(), taken), t.live.sum()))
            if v is not None and t.v is not None:
                stuck.append((_when(((v == t.v) & t.decays).sum().float(), taken), t.decays.sum()))
        self._taken = None
        out = {"update_unchanged_frac": _ratio(same)}
        if zeros:
            out["exp_avg_sq_zero_frac"] = _ratio(zeros)
        if stuck:
            out["exp_avg_sq_stuck_frac"] = _ratio(stuck)  # 0/0 = NaN where no sampled v should shrink
        if lost:
            out["update_lost_frac"] = _ratio([p for ps in lost.values() for p in ps])
            out.update({f"update_lost_frac_{label}": _ratio(ps) for label, ps in lost.items()})
        return out

    @classmethod
    def summary(cls, rows: list[dict]) -> dict:
        """Mean and max over the logged steps of each counter (NaN steps left out). Where the
        run logged counters but one was never defined (the second moment of 8-bit states, the
        update of an optimizer that is not AdamW), its summary is None: not measured."""
        out = {}
        logged = any(k in r for r in rows for k in cls.KEYS)
        for k in cls.KEYS:
            v = [r[k] for r in rows if r.get(k) is not None and math.isfinite(r[k])]
            if v:
                out[f"forensics/{k}_mean"] = sum(v) / len(v)
                out[f"forensics/{k}_max"] = max(v)
            elif logged and not k.startswith("grad_"):
                out[f"forensics/{k}_mean"] = out[f"forensics/{k}_max"] = None
        return out
