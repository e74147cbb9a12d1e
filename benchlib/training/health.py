"""Failures that are not crashes, judged from a run's per-step losses (pure functions, tested
on constructed curves):

* **diverged** (``steplog.first_divergence``): a non-finite loss, or a 5-step median loss above
  ``diverge_ratio`` x the initial loss (step 0's);
* **degraded**: the smoothed loss rises ``HealthRules.rise`` above its running minimum and stays
  there to the end for a sustained stretch: fp16 without loss scaling (A, 300 steps: loss bottoms
  at 7.9 at step 49, then climbs to 9.2). Excursions that recover before the end are not;
* **stalled**: the run did not clearly beat its trivial baseline (``baselines.evidence``); it
  stalled where its smoothed loss first came within ``plateau`` of its lowest value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class HealthRules:
    rise: float = 0.10
    """Degraded: the smoothed loss sits this fraction above its running minimum..."""
    sustain: float = 0.10
    """...for this fraction of the run's steps in a row..."""
    min_sustain_steps: int = 10
    """...and at least this many steps."""
    smooth: float = 0.10
    """Rolling-median window as a fraction of the steps (at least 5 steps): per-batch noise
    of small classification batches is far larger than a trend (with 5%, D's BCE at B=8
    wandered 10% above its running minimum in a healthy run of the H200 quick study)."""
    plateau: float = 0.01
    """Stalled: the step from which the smoothed loss stayed within this fraction of its minimum."""


def smoothed(losses: list[float] | np.ndarray, rules: HealthRules = HealthRules()) -> np.ndarray:
    """Centred rolling median (pandas) of the finite losses; non-finite steps stay NaN."""
    x = pd.Series(np.asarray(losses, float)).where(lambda s: np.isfinite(s))
    w = max(5, int(round(rules.smooth * len(x))))
    return x.rolling(w, center=True, min_periods=1).median().to_numpy()


def degradation(losses: list[float] | np.ndarray, rules: HealthRules = HealthRules()) -> tuple[int, int] | None:
    """(start, crossed) when the run *ends* degraded (smoothed loss above its running minimum by
    ``rules.rise`` for the last sustained stretch): the step of the minimum it rose from and the
    first step of that stretch. Else None."""
    s = smoothed(losses, rules)
    if len(s) == 0 or not np.isfinite(s).any():
        return None
    finite = np.where(np.isfinite(s), s, np.inf)
    run_min = np.fmin.accumulate(finite)
    above = np.isfinite(s) & (s > run_min + rules.rise * np.abs(run_min))
    need = max(rules.min_sustain_steps, int(math.ceil(rules.sustain * len(s))))
    below = np.flatnonzero(~above)
    crossed = int(below[-1]) + 1 if len(below) else 0
    if len(s) - crossed < need:
        return None
    return int(np.argmin(finite[:crossed + 1])), crossed


def degraded_step(losses: list[float] | np.ndarray, rules: HealthRules = HealthRules()) -> int | None:
    """Step where a sustained rise began (see ``degradation``), or None."""
    d = degradation(losses, rules)
    return d[0] if d else None


def plateau_step(losses: list[float] | np.ndarray, rules: HealthRules = HealthRules()) -> int | None:
    """First step whose smoothed loss is within ``rules.plateau`` of the run's lowest."""
    s = smoothed(losses, rules)
    if len(s) == 0 or not np.isfinite(s).any():
        return None
    lo = np.nanmin(s)
    return int(np.flatnonzero(np.isfinite(s) & (s <= lo + rules.plateau * abs(lo)))[0])


def verdict(losses: list[float], diverged_at: int | None, beats_baseline: bool | None,
            rules: HealthRules = HealthRules()) -> tuple[str, str | None, dict]:
    """(status, reason, metrics) of a finished run: diverged, else degraded (it learned, then lost
    it: a run that ends above its own best loss has not stalled, even where it ends worse than
    its trivial baseline), else stalled (never for ``beats_baseline`` None), else ok."""
    deg = degradation(losses, rules)
    stall = plateau_step(losses, rules) if beats_baseline is False else None
    m = {"stability/degraded_step": deg[0] if deg else None, "stability/stalled_step": stall}
    if diverged_at is not None:
        return "diverged", None, m
    if deg is not None:
        s = smoothed(losses, rules)
        rise = np.nanmax(s[deg[1]:]) / s[deg[0]] if s[deg[0]] > 0 else float("nan")
        return "degraded", (f"training loss rose from its minimum at step {deg[0]} to over {rules.rise:.0%} above it "
                            f"by step {deg[1]}, and stayed there (smoothed, up to {rise:.3g}x the minimum)"
                            + ("; it ends worse than its trivial baseline" if beats_baseline is False else "")), m
    if beats_baseline is False:
        return "stalled", (f"did not clearly beat the trivial baseline; training loss stopped improving "
                           f"at step {stall}"), m
    return "ok", None, m
