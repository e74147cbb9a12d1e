"""AdamW whose moments' storage and rounding and whose weights' rounding are settings, as a
DtypeConfig says (``exp_avg_dtype``, ``exp_avg_sq_dtype``, ``moment_rounding``, ``update_rounding``):
fp16 weights with fp32 moments (``fp16_naive``), bf16 weights rounded stochastically (``bf16_pure``),
bf16 moments rounded stochastically (``bf16_pure_sr_moments``); torch's AdamW keeps the moments in
each weight's dtype and rounds to nearest.

* the arithmetic is fp32 whatever is stored (``adamw_reference.reference_update``: each operation
  rounded on its own, no fused multiply-add, the bias corrections' powers in fp64); the moments
  are written exactly (fp32), to nearest or stochastically (bf16; fp16 to nearest only), the
  weight likewise. One group may hold weights of several dtypes;
* the state has torch's names (``exp_avg``, ``exp_avg_sq``, ``step`` per parameter; ``lr`` a 0-dim
  device tensor filled in place by the schedule, so a changing lr never recompiles nor syncs), so
  forensics and resume read it as torch's;
* stochastic rounding draws its bits from a counter-based hash of (group seed, step, element
  index), salted per stream (weight, each moment): no random state to save, a resumed run draws
  what it would have, replicas round alike.

On CUDA one Triton kernel per group and dtype mix (``adamw_triton``) computes the same function as
the plain-torch reference, to the bit; without Triton CUDA falls back to the reference (slow).
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch

from benchlib.training.adamw_reference import group_offsets, reference_update

STORAGE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ROUNDING = ("nearest", "stochastic")


class AdamW(torch.optim.Optimizer):
    """AdamW with ``exp_avg_dtype`` / ``exp_avg_sq_dtype`` ("fp32", "bf16", "fp16"; None: the weight's
    dtype), ``rounding`` ("nearest", or "stochastic" for bf16 weights), ``moment_rounding`` (likewise,
    for moments stored in bf16; fp32 ones are exact, fp16 ones refused), ``impl`` ("auto": Triton on
    CUDA where it imports; "reference"; "triton") and ``seed`` (stochastic rounding's base seed,
    default the one ``torch.manual_seed`` set; each group gets its own)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, exp_avg_dtype: Optional[str] = None,
                 exp_avg_sq_dtype: Optional[str] = None, rounding: str = "nearest", impl: str = "auto",
                 seed: Optional[int] = None, moment_rounding: str = "nearest"):
        for name, d in (("exp_avg_dtype", exp_avg_dtype), ("exp_avg_sq_dtype", exp_avg_sq_dtype)):
            if d is not None and d not in STORAGE:
                raise ValueError(f"{name}={d!r}: use one of {', '.join(STORAGE)} or None (8-bit moments are "
                                 f"bitsandbytes' AdamW8bit, optimizer 'adamw8bit')")
        for name, r in (("rounding", rounding), ("moment_rounding", moment_rounding)):
            if r not in ROUNDING:
                raise ValueError(f"{name}={r!r}: use one of {', '.join(ROUNDING)}")
        if impl not in ("auto", "reference", "triton"):
            raise ValueError(f"impl={impl!r}: use auto, reference or triton")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      exp_avg_dtype=exp_avg_dtype, exp_avg_sq_dtype=exp_avg_sq_dtype,
                                      rounding=rounding, moment_rounding=moment_rounding, seed=None))
        params = [p for g in self.param_groups for p in g["params"]]
        if rounding == "stochastic" and any(p.dtype == torch.float16 for p in params):
            raise ValueError("stochastic rounding is implemented for bf16 weights (fp32 weights are updated "
                             "exactly); this model has fp16 weights")
        self._check_moment_rounding()
        device = params[0].device
        # the seed torch.manual_seed set: the same on every rank of a data-parallel run, so that
        # replicas round alike, and no draw from torch's generator (other streams stay as they were)
        base_seed = torch.initial_seed() if seed is None else seed
        for i, g in enumerate(self.param_groups):
            # a tensor, filled in place by the schedule: neither a recompile nor a host sync
            g["lr"] = torch.tensor(float(g["lr"]), dtype=torch.float32, device=device)
            g["seed"] = (base_seed + 7919 * i) % (2**31 - 1)
        self._kernel = None
        if impl == "triton" or (impl == "auto" and device.type == "cuda"):
            try:
                from benchlib.training.adamw_triton import Launcher
                self._kernel = Launcher()
            except ImportError:  # triton not installed
                if impl == "triton":
                    raise ImportError("AdamW(impl='triton') needs the triton package") from None
                warnings.warn("triton is not installed: AdamW runs its plain-torch reference on CUDA, one "
                              "tensor at a time (correct, slow)", stacklevel=2)

    def _check_moment_rounding(self) -> None:
        """Stochastic rounding of moments is bf16's (the kernel's bit trick): refuse fp16 storage."""
        for g in self.param_groups:
            if g["moment_rounding"] != "stochastic":
                continue
            for key in ("exp_avg", "exp_avg_sq"):
                if any(self.storage_dtype(g, key, p) == torch.float16 for p in g["params"]):
                    raise ValueError(f"moment_rounding='stochastic' is implemented for bf16 moments (fp32 ones "
                                     f"are stored exactly); this model's {key} would be stored in fp16")

    @property
    def impl(self) -> str:
        return "reference" if self._kernel is None else "triton"

    def _init_state(self, p: torch.Tensor, group: dict) -> dict:
        st = self.state[p]
        st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
        for key in ("exp_avg", "exp_avg_sq"):
            st[key] = torch.zeros_like(p, dtype=self.storage_dtype(group, key, p), memory_format=torch.preserve_format)
        if self._kernel is not None:
            self._kernel.invalidate()
        return st

    @staticmethod
    def storage_dtype(group: dict, key: str, p: torch.Tensor) -> torch.dtype:
        name = group[key + "_dtype"]
        return p.dtype if name is None else STORAGE[name]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for gi, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            states = [self.state[p] or self._init_state(p, group) for p in params]
            torch._foreach_add_([st["step"] for st in states], 1.0)
            if self._kernel is not None:
                self._kernel.step(gi, group, params, states)
                continue
            bases = group_offsets(group)
            for p, st in zip(params, states):
                reference_update(p, st, group, bases[id(p)])
        return loss

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's, then the stored dtypes put back: torch casts every floating state to its
        weight's dtype (fp32 moments of fp16 weights would come back fp16, rounded), and leaves
        ``step`` and a saved ``lr`` where they were saved (the CPU, with ``map_location``)."""
        saved = state_dict["state"]
        before = [{k: v for k, v in g.items() if k != "params"} for g in self.param_groups]
        super().load_state_dict(state_dict)
        for group, settings, saved_group in zip(self.param_groups, before, state_dict["param_groups"]):
            for k, v in settings.items():  # a state saved before a setting existed keeps today's
                group.setdefault(k, v)
            device = settings["lr"].device
            group["lr"] = torch.as_tensor(saved_group["lr"], dtype=torch.float32).to(device).clone()
            for i, p in zip(saved_group["params"], group["params"]):
                if i not in saved:
                    continue
                st = self.state[p]
                for key in ("exp_avg", "exp_avg_sq"):
                    st[key] = saved[i][key].to(device=p.device, dtype=self.storage_dtype(group, key, p))
                # (a state saved with one step count per group has it in the group)
                step = saved[i].get("step", saved_group.get("step"))
                st["step"] = torch.as_tensor(step, dtype=torch.float32).to(p.device).clone()
            group.pop("step", None)
        if self._kernel is not None:
            self._kernel.invalidate()
