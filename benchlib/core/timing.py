"""Timed windows that never stall the training step.

After ``warmup`` steps the remaining steps are cut into windows. On CUDA each window edge is a
recorded event (no host sync), all read once at the end; evaluation inside a window is paused
out. Energy is NVML's total-energy counter, read (with a sync) at the start and end of the timed
region and around pauses. The optimizer step (gradients ready to weights updated: unscale, clip,
step, the scaler's update) is bracketed the same way (``optimizer``): on the GPU that is the
stream's time from the end of backward to the last update kernel, gaps waiting for host launches
included. ``cudagraphs`` captures forward and backward only, so the optimizer step is timed alike.
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass, field

import torch

OPTIMIZER_MARKS_PER_WINDOW = 256
"""Optimizer steps timed per window at most (its first ones): enough for a mean, while a run of
100k steps does not hold 100k CUDA events."""

STEPS_SHARE_TARGET = 0.7
"""The reference study's efficiency target: at least 70% of its GPU time in training steps
(the sweep's print, ``benchlib.analysis.overhead``)."""

from benchlib.core.env import EnergyMeter


class _Clock:
    """A mark in time: a CUDA event on GPU, perf_counter on CPU (where ops are synchronous)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1000.0 if self.cuda else b - a


@dataclass
class _Window:
    start: object
    end: object = None
    steps: int = 0
    pauses: list = field(default_factory=list)
    optimizer: list = field(default_factory=list)  # (start, end) marks of the optimizer steps timed


class WindowTimer:
    def __init__(self, device: torch.device, warmup: int, total: int, windows: int):
        self.device, self.warmup = device, warmup
        self.size = max(1, math.ceil(max(1, total - warmup) / windows))
        self.clock = _Clock(device)
        self.energy = EnergyMeter(device)
        self.joules = 0.0
        self._e0 = None
        self._windows: list[_Window] = []
        self._open: _Window | None = None
        self.done: list[tuple[int, float]] = []  # (steps, seconds) per window, filled by finish()
        self.optimizer_done: list[tuple[int, float]] = []  # (optimizer steps timed, their seconds), per window

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def before_step(self, step: int) -> None:
        if step == self.warmup:
            self._sync()  # once: the timed region starts with an idle device
            self._e0 = self.energy.read_j()
            self._open = _Window(self.clock.mark())

    def after_step(self, step: int) -> None:
        w = self._open
        if w is None:
            return
        w.steps += 1
        if w.steps == self.size:
            w.end = self.clock.mark()
            self._windows.append(w)
            self._open = _Window(w.end)

    @contextlib.contextmanager
    def pause(self):
        """Leaves what runs inside (an evaluation, a saved state) out of the open window's time
        and energy."""
        w = self._open
        if w is None:
            yield
            return
        a = self.clock.mark()
        self._sync()
        e0 = self.energy.read_j()
        try:
            yield
        finally:
            self._sync()
            e = self.energy.read_j()
            if e is not None and e0 is not None:
                self.joules -= e - e0
            w.pauses.append((a, self.clock.mark()))

    @contextlib.contextmanager
    def optimizer(self, timed: bool = True):
        """Brackets one optimizer step; it counts where ``timed`` and a window is open, up to
        ``OPTIMIZER_MARKS_PER_WINDOW`` per window, and not where the step raised."""
        w = self._open
        if not (timed and w is not None and len(w.optimizer) < OPTIMIZER_MARKS_PER_WINDOW):
            yield
            return
        a = self.clock.mark()
        yield
        w.optimizer.append((a, self.clock.mark()))

    def optimizer_metrics(self) -> dict:
        """``time/optimizer_ms``: the optimizer step's mean time per timed step, median over the
        windows; ``time/optimizer_share``: its share of the window's mean step time, median
        over the windows. None where no optimizer step was timed (every timed step logged)."""
        pairs = [(1000 * s / n, (s / n) / (ws / steps)) for (n, s), (steps, ws) in zip(self.optimizer_done, self.done)
                 if n and ws > 0]
        if not pairs:
            return {"time/optimizer_ms": None, "time/optimizer_share": None}
        return {"time/optimizer_ms": statistics.median(ms for ms, _ in pairs),
                "time/optimizer_share": statistics.median(sh for _, sh in pairs)}

    def finish(self) -> None:
        """Close the last window, sync once, and turn marks into (steps, seconds)."""
        w = self._open
        if w is not None and w.steps:
            w.end = self.clock.mark()
            self._windows.append(w)
        self._open = None
        if not self._windows:
            return
        self._sync()
        e = self.energy.read_j()
        if e is not None and self._e0 is not None:
            self.joules += e - self._e0
        for w in self._windows:
            s = self.clock.seconds(w.start, w.end) - sum(self.clock.seconds(a, b) for a, b in w.pauses)
            self.done.append((w.steps, s))
            self.optimizer_done.append((len(w.optimizer), sum(self.clock.seconds(a, b) for a, b in w.optimizer)))


# ---- seed 003's aggregation of timed windows over ranks ---------------------------------
def aggregate_windows(rows: list[dict]) -> dict:
    """Per-rank, per-window rows -> seed 003's numbers.

    For each window: ``time_s`` and ``step_ms`` averaged over ranks, ``tokens_per_s`` and
    ``samples_per_s`` summed over ranks. The first window is excluded when there are two or
    more; then mean and (sample) std over the remaining windows.
    """
    by_window: dict[int, list[dict]] = {}
    for r in rows:
        by_window.setdefault(r["window"], []).append(r)
    windows = sorted(by_window)[1:] if len(by_window) >= 2 else sorted(by_window)
    if not windows:
        return {}
    out: dict[str, float] = {"windows": len(windows)}
    for key, over_ranks in (("time_s", statistics.fmean), ("step_ms", statistics.fmean), ("tokens_per_s", sum), ("samples_per_s", sum)):
        per_window = [over_ranks([r[key] for r in by_window[w]]) for w in windows]
        out[key] = statistics.fmean(per_window)
        out[f"{key}_std"] = statistics.stdev(per_window) if len(per_window) > 1 else 0.0
    return out
