"""The statistics every answer shares: the decision rules (``Rules``), the resampling (scipy's
``bootstrap`` and ``permutation_test``), the multiplicity correction (statsmodels) and a scenario's
rank reliability. Seeds are shared across configs (one data order and initialisation), so two
configs on one scenario are paired by seed (``piece``); cells that share too few seeds are
compared unpaired, each resampled on its own, and the result says so.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

REFERENCE_CONFIGS = ("fp32_baseline", "fp32_tf32_matmul", "amp_bf16")


SIZE_RATIO = 1.5
"""Two models whose parameter counts differ by more than this factor differ in size too: a contrast
between them decides no architecture claim (a 16-bit speedup grows with width; precision
sensitivity may change with size)."""


@dataclass(frozen=True)
class Rules:
    conf: float = 0.95
    """Level of the bootstrap CIs of hypotheses and flips; 1 - conf is the family-wise error rate of
    each multiplicity-corrected family."""
    alpha: float = 0.05
    """One-sided error rate of each (scenario, config) verdict (``contrasts``): safe when the
    one-sided 1 - alpha t upper bound of the quality gap is below the minimum effect (a degradation
    that matters is then called safe at most alpha of the time), degraded when the lower bound is
    above it (Holm over the scenario's configs); the answer prints the two-sided 1 - 2 alpha interval."""
    n_boot: int = 2000
    """Resamples of every bootstrap (scipy.stats.bootstrap, percentile intervals)."""
    min_seeds: int = 3
    """Fewer values per (scenario, config): no contrast, flip or verdict from the cell (2 seeds give
    a bootstrap 3 distinct resamples, and fall on one side of 0 half the time by chance)."""
    seed: int = 0
    """rng seed of the resampling: the same data give the same numbers."""
    multitest: str = "holm"
    """multipletests method over the configs against a scenario's reference, and a metric's reversals."""
    min_size_pct: float = 1.0
    """A flip's smaller gap must also reach this (% of the pair's mean): memory and GPU throughput
    would otherwise 'flip' on differences nobody would act on."""
    margin_quality_pct: float = 0.5
    """Quality hypotheses: a CI inside +-this (%) is no effect (rejected); a bootstrap CI never
    shrinks to [0, 0]."""
    margin_rate: float = 0.0
    """Divergence-rate differences inside +-this count as no difference."""
    margin_speedup: float = 0.0
    """Speed-up differences (x fp32) inside +-this count as no difference."""
    reference_configs: tuple = REFERENCE_CONFIGS
    """A scenario's reference: the first with a finished run (learned gate), with >= min_seeds
    counted seeds (contrasts)."""
    min_gap_closed: float = 0.5
    """Learned gate where the metric's floor is known (synthetic data): the share of the gap from
    the trivial baseline to the floor a run must close (B of the reference study closed 9%: a
    plateau, not a language model)."""
    min_gain_without_floor: float = 0.25
    """Learned gate where no floor is known (real data): the share of the gap from the trivial
    baseline to the metric's ideal value (0 for a loss, 1 for a score) a run must close; a
    real-text model at 3.54 nats passes against any unigram baseline above 4.72 nats."""
    max_overfit_pct: float = 2.0
    """Learned gate on a loss: a reference run whose final validation loss lies more than this (%)
    above the lowest of its evaluations has overfit its data (many passes over a small corpus).
    Its end-of-run quality then measures how fast each config memorises, not what its precision
    costs, so the scenario enters no quality rank or verdict; its runs' stability still counts."""
    min_rank_reliability: float = 0.5
    """Configs are told apart when the leave-one-seed-out Spearman correlation of the candidates'
    rankings reaches this (below, rho^2 < 0.25: ranks would read seed noise)."""
    min_reliability_configs: int = 4
    """Fewer candidates with the scenario's seeds: the rank reliability is not measured."""
    control_detect_factor: float = 2.0
    """A scenario whose configs cannot be told apart is judged only where a control is degraded
    with the near end of its CI at least this many times the minimum effect: an unmistakable
    defect, which a 3-seed bootstrap CI (too narrow with so few seeds) cannot fake."""
    min_effect_loss_pct: float = 0.5
    """The smallest quality effect that matters on a loss (% of the reference's): 0.012 nats on A
    of the reference study. A config is degraded only beyond seed noise and this."""
    min_effect_score_pct: float = 1.0
    """The smallest quality effect that matters on a score (% of the reference's): about one
    standard error of an accuracy of 0.78 on 2,048 examples."""
    flip_size: str | None = "base"
    """Speed and memory flips only from runs at this size, the speed study's (a memory order at
    `small` reversed at `base`); None: any size."""
    min_flip_seeds_speed: int = 3
    """A speed or memory flip needs this many seeds per cell measured on one identified host (speed)
    or one GPU model and software stack (memory)."""

    def min_effect_pct(self, metric: str | None) -> float:
        """The minimum effect that matters for a quality metric (a loss's or a score's)."""
        return self.min_effect_loss_pct if is_loss(metric) else self.min_effect_score_pct

    def describe(self) -> str:
        level = 1 - 2 * self.alpha
        return (
            f"Seeds are shared across configs, so a config's quality gap to its scenario's reference (first of "
            f"{', '.join(self.reference_configs)} with >= {self.min_seeds} counted seeds; in % of the reference's "
            f"mean, positive = worse) is paired by seed, a t-interval over the per-seed differences (Welch's "
            f"unpaired interval where the seeds are not shared, and the verdict says so). Verdicts (one-sided tests "
            f"at alpha = {self.alpha:g}, the printed interval the two-sided {level:.0%} one): safe when the upper "
            f"bound is below the minimum effect ({self.min_effect_loss_pct:g}% of a loss, {self.min_effect_score_pct:g}% "
            f"of a score): non-inferiority, the worse side of TOST, so a config whose true loss is the minimum effect "
            f"or more is called safe at most {self.alpha:.0%} of the time; degraded when the lower bound is above the "
            f"minimum effect, worse when it is above 0 only ({self.multitest} over the configs of a scenario for both); "
            f"otherwise inconclusive. Multi-label scenarios are judged on micro- and macro-F1 together (safe on both, "
            f"degraded on either); single-label ones report macro-F1 beside accuracy. An exact sign-flip test "
            f"(scipy.stats.permutation_test) is reported beside each paired contrast. Hypotheses and flips: "
            f"scipy.stats.bootstrap (paired, percentile, {self.n_boot} resamples, rng seed {self.seed}), central "
            f"{self.conf:.0%} CIs, pooled over scenarios. A flip of a, b between scenarios s, t: a beats b on s and b "
            f"beats a on t, both orders beyond seed noise (bootstrap of the smaller paired gap, corrected over the "
            f"metric's reversals) and the smaller gap >= {self.min_size_pct}% of the pair's mean; candidates only, "
            f"configs identical by construction for the metric counted once; speed and memory flips only from runs at "
            f"size {self.flip_size or 'any'} with >= {self.min_flip_seeds_speed} seeds per cell, speed on one identified "
            f"host, memory on one GPU model and software stack (peak memory does not move with the host). "
            f"Evidence gates: a scenario is learned when every finished run of its reference closed >= "
            f"{self.min_gap_closed:.0%} of the gap between the trivial baseline and the metric's floor (or, with no "
            f"floor known, >= {self.min_gain_without_floor:.0%} of the gap to the metric's ideal value) and beat the "
            f"baseline; a run that closed less is stalled. Its configs are told apart when the leave-one-seed-out "
            f"Spearman correlation of its viable candidates' rankings (those neither failed nor degraded there) reaches "
            f"{self.min_rank_reliability:g} (not measured with fewer than {self.min_reliability_configs} of them or 2 "
            f"shared seeds). A scenario that did not learn enters no quality rank, flip, verdict or recommendation; one "
            f"whose viable candidates are not told apart detects broken configs only: it enters no quality rank or "
            f"flip, and verdicts against the reference only where a control (a config built with one defect) is "
            f"degraded there by at least {self.control_detect_factor:g}x the minimum effect (its interval's near end). "
            f"A verdict is untestable where both arms sit at the same ceiling or floor (divergence rates 1 and 1: the "
            f"mean ln step of divergence is compared instead; 0 and 0: nothing to compare) or where every scenario it "
            f"needs is gated out. Effects averaged over scenarios treat the scenarios as fixed: a CI measures seed "
            f"noise, not the choice of tasks. A degenerate micro-F1 is replaced by P@1 (else val loss).")


LOSSES = ("val_loss", "loss", "perplexity")
IDEAL = {"val_loss": 0.0, "loss": 0.0, "accuracy": 1.0, "p_at_1": 1.0, "p_at_3": 1.0, "p_at_5": 1.0,
         "micro_f1": 1.0, "macro_f1": 1.0}  # the best value a learned metric can take on any data


LABELS = {"val_loss": "val loss", "p_at_1": "P@1", "p_at_3": "P@3", "p_at_5": "P@5", "micro_f1": "micro-F1",
          "macro_f1": "macro-F1", "accuracy": "accuracy", "unigram": "unigram",
          "label_frequency": "label-frequency", "majority_class": "majority-class"}


def label(name) -> str:
    """A metric or baseline name as written in sentences: ``p_at_1`` -> ``P@1``."""
    return LABELS.get(name, str(name))


def is_loss(metric: str | None) -> bool:
    return str(metric) in LOSSES


def seeds(n: int, zero: str = "no seed") -> str:
    return {0: zero, 1: "one seed"}.get(n, f"{n} seeds")


# ---- resampling ----------------------------------------------------------------------------
def rng_kw(fn: Callable, seed: int) -> dict:
    """scipy's generator argument of ``fn`` (``rng`` from scipy 1.15, ``random_state`` before)."""
    name = "rng" if "rng" in inspect.signature(fn).parameters else "random_state"
    return {name: np.random.default_rng(seed)}


def bootstrap(samples: Sequence[np.ndarray], statistic: Callable, rules: Rules, paired: bool = False
              ) -> tuple[float, float, float, np.ndarray]:
    """(point, ci_low, ci_high, distribution) of a vectorised ``statistic(*samples, axis=-1)`` by
    scipy's percentile bootstrap; ``paired``: one seed per position, drawn together."""
    samples = [np.asarray(s, float) for s in samples]
    point = float(statistic(*samples, axis=-1))
    if all(np.ptp(s) == 0 for s in samples):  # nothing to resample: the distribution is the point
        return point, point, point, np.full(rules.n_boot, point)
    res = sps.bootstrap(samples, statistic, n_resamples=rules.n_boot, vectorized=True, paired=paired, axis=-1,
                        confidence_level=rules.conf, method="percentile", **rng_kw(sps.bootstrap, rules.seed))
    return point, float(res.confidence_interval.low), float(res.confidence_interval.high), res.bootstrap_distribution


@dataclass
class Piece:
    """One scenario's contribution to a unit: ``samples`` (per-seed Series) and ``value``, which
    maps their means (arrays over resamples) to the piece's value."""
    samples: list
    value: Callable
    paired: bool | None  # None: one config, nothing to pair


def piece(cells: dict, s: str, x: str, ref: str | None, f: Callable, rules: Rules) -> Piece | None:
    """Config ``x`` on ``s``: ``f(mean of x)``; with ``ref``, ``f(x, ref, ref's values)`` per shared
    seed (paired, >= min_seeds shared), else on the two means. None: a cell short of seeds."""
    a = cells.get((s, x), pd.Series(dtype=float))
    if ref is None:
        return Piece([a], lambda m: f(m), None) if len(a) >= rules.min_seeds else None
    r = cells.get((s, ref), pd.Series(dtype=float))
    shared = sorted(set(a.index) & set(r.index))
    if len(shared) >= rules.min_seeds:
        return Piece([f(a[shared].to_numpy(float), r[shared].to_numpy(float), r[shared])], lambda m: m, True)
    if len(a) >= rules.min_seeds and len(r) >= rules.min_seeds:
        return Piece([a, r], lambda ma, mr: f(ma, mr, r), False)
    return None


def exact_p(diffs: np.ndarray, rules: Rules) -> float:
    """Two-sided p-value of paired differences by a sign-flip permutation test."""
    d = np.asarray(diffs, float)
    if len(d) < 2 or np.all(d == 0):
        return 1.0 if len(d) >= 2 else math.nan
    res = sps.permutation_test((d, np.zeros_like(d)), lambda x, y, axis=-1: np.mean(x - y, axis=axis),
                               permutation_type="samples", vectorized=True, n_resamples=rules.n_boot,
                               **rng_kw(sps.permutation_test, rules.seed))
    return float(res.pvalue)


def rate_difference_ci(k1: int, n1: int, k2: int, n2: int, rules: Rules) -> tuple[float, float, float]:
    """(k1/n1 - k2/n2, lo, hi): Newcombe's hybrid score interval (statsmodels) for a difference of
    two shares of runs. A bootstrap of all-or-nothing arms (3/3 against 0/16) collapses to a point,
    [1, 1], as if three runs had measured the rate exactly; this interval, [0.41, 1.0] there,
    keeps the width so few runs leave."""
    from statsmodels.stats.proportion import confint_proportions_2indep
    lo, hi = confint_proportions_2indep(k1, n1, k2, n2, method="newcomb", compare="diff", alpha=1 - rules.conf)
    return float(k1 / n1 - k2 / n2), float(lo), float(hi)


def adjust(pvalues: dict, rules: Rules) -> dict:
    """Multiplicity-corrected p-values (key -> p) by ``rules.multitest``; NaN left out of the family."""
    keys = [k for k, p in pvalues.items() if np.isfinite(p)]
    if not keys:
        return {k: math.nan for k in pvalues}
    from statsmodels.stats.multitest import multipletests
    adj = multipletests([pvalues[k] for k in keys], alpha=1 - rules.conf, method=rules.multitest)[1]
    out = {k: math.nan for k in pvalues}
    out.update({k: float(p) for k, p in zip(keys, adj)})
    return out


def rank_reliability(values: pd.DataFrame, min_configs: int = 4) -> tuple[float, int, int]:
    """(reliability, configs, seeds) of a config x seed quality table (higher is better): the mean
    over seeds of the Spearman correlation of that seed's ranking with the others' mean ranking,
    over the seeds half the configs have; NaN under ``min_configs`` configs, 2 seeds, or a tie."""
    if values.empty:
        return math.nan, 0, 0
    seeds = [c for c in values.columns if values[c].notna().sum() * 2 >= len(values)]
    t = values[seeds].dropna()
    if len(t) < min_configs or len(seeds) < 2:
        return math.nan, len(t), len(seeds)
    rhos = []
    for k in seeds:
        rest = t[[j for j in seeds if j != k]].mean(axis=1)
        if t[k].nunique() < 2 or rest.nunique() < 2:
            return math.nan, len(t), len(seeds)
        rhos.append(sps.spearmanr(t[k], rest).statistic)
    return float(np.mean(rhos)), len(t), len(seeds)
