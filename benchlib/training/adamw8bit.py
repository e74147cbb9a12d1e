"""bitsandbytes' 8-bit AdamW (block-wise quantised moments), stepped without its per-parameter waits.

bitsandbytes' ``Optimizer8bit.step`` calls ``torch.cuda.synchronize()`` after every parameter (its
paged state needs it; device state does not): ~150 host waits per GPT-2 step. ``AdamW8bit`` is
bitsandbytes' own optimizer (same state, same kernels, same arguments, so the same numbers); only
how the step is driven differs (``step_mode``): ``"bnb"``, bitsandbytes' step as released, or
``"direct"``, the CUDA launchers bitsandbytes' operators call, each parameter's ``ctypes``
arguments prepared once (a few microseconds of host time per parameter instead of ~45;
docs/bench/optimizer_step_2026-11-25). The waits are skipped only where unneeded: state not
paged, on CUDA, work issued on the default stream (where bitsandbytes launches); elsewhere the
step is bitsandbytes' own. Step count and lr reach the kernels as host values: no CUDA graph.
"""
from __future__ import annotations

import ctypes as ct

import bitsandbytes as bnb
import torch

STEP_MODES = ("bnb", "direct")


class AdamW8bit(bnb.optim.AdamW8bit):
    def __init__(self, params, *args, step_mode: str = "direct", **kwargs):
        if step_mode not in STEP_MODES:
            raise ValueError(f"step_mode={step_mode!r}: use one of {', '.join(STEP_MODES)}")
        super().__init__(params, *args, **kwargs)
        self.step_mode = step_mode
        self._configs: dict[tuple[int, int], dict] = {}
        self._calls: dict[int, tuple] = {}

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self._calls.clear()  # new state tensors: new addresses

    def _waits_needed(self) -> bool:
        p = next((p for g in self.param_groups for p in g["params"]), None)
        if self.is_paged or p is None or p.device.type != "cuda":
            return True
        return torch.cuda.current_stream(p.device).cuda_stream != 0  # bitsandbytes launches on stream 0

    @torch.no_grad()
    def step(self, closure=None):
        if self.step_mode == "bnb" or self._waits_needed():
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self.initialized:
            self.check_overrides()
            self.to_gpu()
            self.initialized = True
        with torch.cuda.device(self.param_groups[0]["params"][0].device):
            self._direct_step()
        return loss

    def _direct_step(self) -> None:
        for gindex, group in enumerate(self.param_groups):
            for pindex, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                if len(self.state[p]) == 0:
                    self.init_state(group, p, gindex, pindex)
                if not (p.is_contiguous() and p.grad.is_contiguous()):
                    self.update_step(group, p, gindex, pindex)
                    continue
                call = self._calls.get(id(p))
                if call is None or call[0] != p.data_ptr():
                    call = self._calls[id(p)] = self._prepare(group, p, gindex, pindex)
                _, fn, eight_bit, before, after = call
                state = self.state[p]
                state["step"] += 1
                step, lr, g = ct.c_int32(state["step"]), ct.c_float(group["lr"]), ct.c_void_p(p.grad.data_ptr())
                if eight_bit:  # bitsandbytes' _optimizer_update_8bit_blockwise_impl, argument for argument
                    fn(before[0], g, *before[1:], step, lr, *after)
                else:  # _optimizer_update_32bit_impl
                    fn(g, *before, step, lr, *after)

    def _prepare(self, group: dict, p: torch.Tensor, gindex: int, pindex: int) -> tuple:
        """The launcher and its fixed ctypes arguments, as bitsandbytes' CUDA operators build them."""
        from bitsandbytes.backends.cuda.ops import str2optimizer8bit_blockwise, str2optimizer32bit
        config = self._configs.get((gindex, pindex)) or self.get_config(gindex, pindex, group)
        self._configs[(gindex, pindex)] = config
        if config["max_unorm"] > 0.0:
            raise ValueError("AdamW8bit step_mode='direct' is for max_unorm=0 (bitsandbytes' default)")
        st = self.state[p]
        b = config["betas"]
        f = ct.c_float
        ptr = lambda t: None if t is None else ct.c_void_p(t.data_ptr())  # noqa: E731 - bitsandbytes' get_ptr
        which = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[p.grad.dtype]
        betas = (f(b[0]), f(b[1]), f(b[2] if len(b) >= 3 else 0.0), f(config["alpha"]))
        if st["state1"].dtype == torch.uint8:
            fn = str2optimizer8bit_blockwise[self.optimizer_name][which]
            before = (ptr(p), ptr(st["state1"]), ptr(st["state2"]), *betas, f(config["eps"]))
            after = (ptr(st["qmap1"]), ptr(st["qmap2"]), ptr(st["absmax1"]), ptr(st["absmax2"]),
                     f(config["weight_decay"]), f(1.0), ct.c_bool(config["skip_zeros"]), ct.c_int32(p.numel()))
            return p.data_ptr(), fn, True, before, after
        fn = str2optimizer32bit[self.optimizer_name][which]
        before = (ptr(p), ptr(st["state1"]), ptr(st["state2"]), None, f(0.0), f(0.0), *betas, f(config["eps"]),
                  f(config["weight_decay"]))
        after = (f(1.0), ct.c_bool(config["skip_zeros"]), ct.c_int32(p.numel()))
        return p.data_ptr(), fn, False, before, after
