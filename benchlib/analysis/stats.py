"""The statistics every answer of the analysis shares: the decision rules (``Rules``: CI level,
bootstrap size, seeds needed, margins, evidence gates) and the bootstrap over seeds.
Per-seed values of a metric come from ``tables.seed_values``; ``flips``, ``hypotheses`` and
``recommend`` resample them here."""
from __future__ import annotations

from dataclasses import dataclass

import math

import numpy as np
from scipy import stats as sps

REFERENCE_CONFIGS = ("fp32_baseline", "fp32_tf32_matmul", "amp_bf16")


@dataclass(frozen=True)
class Rules:
    conf: float = 0.95
    """CI level, and the bootstrap share a flip's reversed order must reach."""
    n_boot: int = 2000
    min_seeds: int = 2
    """Fewer ok seeds per cell: noise cannot be estimated -> no flip, verdict inconclusive."""
    seed: int = 0
    """rng seed of the bootstrap: the same data give the same numbers."""
    min_size_pct: float = 1.0
    """A flip's smaller gap must also reach this (% of the pair's mean): near-deterministic
    metrics (memory, GPU throughput) otherwise 'flip' on differences nobody would act on."""
    margin_quality_pct: float = 0.5
    """Quality effects whose whole CI lies inside +-this (%) count as no effect (rejected): the
    same 0.5% below which ``equivalent_pct`` calls a quality gap practically equivalent. With 0
    (until 2026-11-24) a quality hypothesis could never be rejected for want of an effect, only
    when the opposite held: a bootstrap CI of a continuous effect never shrinks to [0, 0]."""
    untested_gap_pct: float = 2.0
    """Where too few seeds leave the noise unknown, a quality gap to the scenario's reference
    larger than this (% of the reference) still makes a config unsafe: one seed cannot call 9.4 nats
    against 4.3 noise. 2% of a language model's loss is ~0.09 nats at 4.3."""
    equivalent_pct: float = 0.5
    """A quality gap to the scenario's reference below this (% of it) is practically equivalent:
    no reason to avoid a config even where the bootstrap calls the gap real. On A of the
    reference study (4,000 steps, 3 seeds) bf16_pure was 0.06% of val loss behind the scenario's
    best with bootstrap support 100%, and 'avoid bf16_pure' is not what anyone should read from that."""
    margin_rate: float = 0.0
    """Divergence-rate differences inside +-this count as no difference."""
    margin_speedup: float = 0.0
    """Speed-up differences (x fp32) inside +-this count as no difference."""
    reference_configs: tuple = REFERENCE_CONFIGS
    """A scenario's reference: the first of these with a finished run. The scenario is learned
    when every finished reference run beat the trivial predictor; a run is degraded when its
    quality ends ``degraded_vs_reference_pct`` worse than the reference's run of its seed."""
    degraded_vs_reference_pct: float = 5.0
    """% of the reference run's quality (loss, F1, accuracy, P@k alike) beyond which a run of
    the same scenario and seed is degraded: never safe, fastest or on a frontier."""

    def describe(self) -> str:
        return (f"unpaired percentile bootstrap over seeds: each (scenario, config) resampled with replacement "
                f"{self.n_boot} times (rng seed {self.seed}); CIs are central {self.conf:.0%} intervals; a "
                f"reversal of a, b between scenarios s, t is a flip when a beats b on s and b beats a on t in >= "
                f"{self.conf:.0%} of resamples jointly, with >= {self.min_seeds} ok seeds per config and scenario "
                f"and the smaller gap >= {self.min_size_pct}% of the pair's mean, no multiple-comparison correction. "
                f"Safety compares each config with the scenario's reference (first of "
                f"{', '.join(self.reference_configs)} with >= {self.min_seeds} ok seeds), one-sided, Holm-corrected "
                f"over the scenario's configs; it needs >= {self.min_seeds} ok seeds of the config and of the "
                f"reference: with fewer a config is not tested (safe = null) unless it failed or trails the "
                f"reference by more than {self.untested_gap_pct:g}%, which makes it unsafe; a gap below "
                f"{self.equivalent_pct:g}% of the reference is practically equivalent (safe) even where the "
                f"bootstrap calls it real. Evidence gates: a scenario is learned when "
                f"every finished run of its reference (first of {', '.join(self.reference_configs)}) beat the "
                f"trivial predictor; otherwise, or without recorded baselines, its quality enters no rank, flip, "
                f"verdict or recommendation; a run whose quality ends more than {self.degraded_vs_reference_pct:g}% "
                f"worse than the reference's run of its seed is degraded (never safe, fastest or on a frontier); "
                f"a degenerate micro-F1 is replaced by P@1 (else val loss).")


def bootstrap_means(values: dict, n_boot: int, rng: np.random.Generator) -> dict:
    """``n_boot`` resampled means per key (keys in sorted order: reproducible)."""
    return {k: np.asarray(values[k], float)[rng.integers(0, len(values[k]), (n_boot, len(values[k])))].mean(axis=1)
            for k in sorted(values)}


def ratio_interval(num: dict, den: dict, conf: float = 0.95) -> tuple[float, float]:
    """Interval of ``num["ms_per_step"] / den["ms_per_step"]`` (two runs' median timed windows) by
    the delta method on the log ratio: each step time's standard error is its std over the timed
    windows / sqrt(windows). (NaN, NaN) where either run has fewer than 2 windows or no spread."""
    rel = [(x["ms_std"] / x["ms_per_step"]) ** 2 / x["windows"] for x in (num, den)]
    if not all(v > 0 for v in rel) or min(num["windows"], den["windows"]) < 2:  # v > 0 is False for NaN
        return math.nan, math.nan
    ratio = num["ms_per_step"] / den["ms_per_step"]
    half = sps.norm.ppf(0.5 + conf / 2) * math.sqrt(sum(rel))
    return ratio * math.exp(-half), ratio * math.exp(half)
