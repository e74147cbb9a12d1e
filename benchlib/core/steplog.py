"""Per-step training values without per-step host syncs.

Every step writes its loss and gradient norm into a device buffer. Every ``log_every`` steps the
new slice and the log step's extras (max |grad|, max |logit|, loss scale, ``training.forensics``'
counters) are copied to pinned host memory *without blocking* and read one interval later: logging
never stalls the GPU, and divergence is noticed at most two intervals late (the record names the
exact step). ``finish`` drains the last copy.
"""
from __future__ import annotations

import json
import math
import time
from typing import Callable, TextIO

import numpy as np
import pandas as pd
import torch

DIVERGE_WINDOW = 5
"""Divergence needs the median of this many consecutive steps above the limit (or a non-finite loss)."""


class StepLog:
    def __init__(self, steps: int, device: torch.device, rows: TextIO, diverge_ratio: float,
                 reduce_mean_: Callable[[torch.Tensor], None] = lambda t: None):
        self.device, self.rows, self.ratio = device, rows, diverge_ratio
        self.buf = torch.zeros(2, steps, device=device)  # loss, grad_norm
        self.reduce_mean_ = reduce_mean_  # the global batch's loss under data parallelism
        self.losses: list[float] = []
        self.grad_norms: list[float] = []
        self.initial_loss: float | None = None
        self.diverged_step: int | None = None
        self.max_grad = 0.0
        self.max_logit = 0.0
        self.extra_rows: list[dict] = []
        """The extras of every logged step (the last row of each interval), with its step."""
        self._logged = 0  # steps already handed to a copy
        self._pending = None
        self._t_flush = time.perf_counter()

    def record(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        self.buf[0, step] = loss
        self.buf[1, step] = grad_norm

    def flush(self, step: int, lr: float, extras: dict[str, torch.Tensor | float | None]) -> None:
        """Start copying steps up to ``step`` (inclusive) and process the previous copy."""
        a, b = self._logged, step + 1
        # host time per step over the interval: the host runs at most a few steps ahead of
        # the device, so over an interval this tracks device time without a sync
        now = time.perf_counter()
        ms = 1000 * (now - self._t_flush) / (b - a)
        self._t_flush = now
        self.reduce_mean_(self.buf[0, a:b])
        names = [k for k, v in extras.items() if v is not None]
        vals = [v.detach().float().reshape(()) if torch.is_tensor(v)
                else torch.tensor(float(v), device=self.device) for v in (extras[k] for k in names)]
        dev = torch.cat([self.buf[:, a:b].reshape(-1), torch.stack(vals) if vals else self.buf.new_zeros(0)])
        if self.device.type == "cuda":
            host = torch.empty(dev.shape, dtype=dev.dtype, pin_memory=True)
            host.copy_(dev, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
        else:
            host, ev = dev.clone(), None
        self._process()
        self._pending = (a, b, host, ev, names, lr, ms)
        self._logged = b

    def finish(self) -> None:
        self._process()

    def _process(self) -> None:
        if self._pending is None:
            return
        a, b, host, ev, names, lr, ms = self._pending
        self._pending = None
        if ev is not None:
            ev.synchronize()  # finished long ago: this does not wait
        vals = host.tolist()
        n = b - a
        losses, gns, extra = vals[:n], vals[n:2 * n], dict(zip(names, vals[2 * n:]))
        extra["lr"] = lr
        extra["interval_ms_per_step"] = ms
        for i, (lv, gv) in enumerate(zip(losses, gns)):
            row = {"step": a + i, "loss": lv, "grad_norm": gv}
            if i == n - 1:
                row.update(extra, nonfinite_steps=self.nonfinite_steps + sum(not math.isfinite(g) for g in gns))
            self.rows.write(json.dumps(row) + "\n")
        self.rows.flush()
        self.losses += losses
        self.grad_norms += gns
        self.extra_rows.append({"step": b - 1, **extra})
        self.max_grad = max([self.max_grad] + [g for g in gns if math.isfinite(g)])
        ml = extra.get("max_logit")
        if ml is not None and math.isfinite(ml):
            self.max_logit = max(self.max_logit, ml)
        if self.initial_loss is None and self.losses:
            self.initial_loss = self.losses[0]  # the weights as initialised, before any update
        if self.diverged_step is None:
            self.diverged_step = first_divergence(self.losses, self.initial_loss, self.ratio)

    def state(self) -> dict:
        """What was logged so far, for a saved training state (``resume``): drains the pending
        copy (one sync), so call it at a log step, after ``flush``."""
        self._process()
        return {"losses": self.losses, "grad_norms": self.grad_norms, "initial_loss": self.initial_loss,
                "diverged_step": self.diverged_step, "max_grad": self.max_grad, "max_logit": self.max_logit,
                "extra_rows": self.extra_rows, "logged": self._logged}

    def restore(self, state: dict) -> None:
        """Continue a saved log: the next ``flush`` copies the steps after the saved ones."""
        for k in ("losses", "grad_norms", "initial_loss", "diverged_step", "max_grad", "max_logit", "extra_rows"):
            setattr(self, k, state[k])
        self._logged = state["logged"]
        self._t_flush = time.perf_counter()

    @property
    def nonfinite_steps(self) -> int:
        return sum(not math.isfinite(g) for g in self.grad_norms)


def first_divergence(losses: list[float], initial: float | None, ratio: float,
                     window: int = DIVERGE_WINDOW) -> int | None:
    """First step whose loss is non-finite, or where the median loss of the ``window`` steps
    ending there exceeds ``ratio`` x ``initial``, the step-0 loss (then: the window's first step
    above it). One heavy batch is not a divergence: fine-tuning D (batch 8, a head starting at the
    label prior), one batch's BCE reached 3.6x the step-0 loss in a healthy run, while no run's
    5-step median passed 1.9x. The step-0 loss is the one loss before any update: a mean over
    later steps would take in a blow-up at step 1. With ``initial`` None only a non-finite loss
    counts."""
    x = np.asarray(losses, float)
    bad = np.flatnonzero(~np.isfinite(x))
    first = int(bad[0]) if len(bad) else None
    if initial is not None and math.isfinite(initial) and len(x):
        limit = ratio * initial
        med = pd.Series(x).rolling(window, min_periods=min(3, window)).median().to_numpy()
        over = np.flatnonzero(med > limit)
        if len(over):
            end = int(over[0])
            lo = max(0, end - window + 1)
            high = lo + int(np.argmax(x[lo:end + 1] > limit))
            first = high if first is None else min(first, high)
    return first
