"""Flips beyond seed noise (seed 000): pairs of configs whose order reverses between two
scenarios (``order_reversals``), configs that diverge on one scenario but not on another
(``stability_flips``), and seed 000's ``flips`` entries built from both (``flip_entries``).

Noise is judged by one method everywhere, here and in ``hypotheses`` and ``recommend``
(``Rules``): an unpaired percentile bootstrap over seeds, each (scenario, config) cell
resampled with replacement on its own (``seed_values``, ``bootstrap_means``). The runs that
count are the evidence gates' (``analysis``): throughput and memory from runs that finished,
quality only from scenarios whose quality is established (the reference learned) and runs
that did not fail for quality; stability reads the runs that trained in learned scenarios.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd

from .analysis import HEADLINE, MEASURED, REFERENCE_CONFIGS, gated, quality_runs, sign, speed_runs
from .scenarios import SCENARIOS


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
    margin_quality_pct: float = 0.0
    """Quality effects inside +-this (%) count as no effect (rejected)."""
    untested_gap_pct: float = 2.0
    """Where too few seeds leave the noise unknown, a quality gap to the scenario's best larger
    than this (% of the best) still makes a config unsafe: one seed cannot call 9.4 nats
    against 4.3 noise. 2% of a language model's loss is ~0.09 nats at 4.3."""
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
                f"and the smaller gap >= {self.min_size_pct}% of the pair's mean; no multiple-comparison correction. "
                f"Safety needs >= {self.min_seeds} ok seeds of the config and of the best config: with fewer a "
                f"config is not tested (safe = null) unless it failed or trails the best by more than "
                f"{self.untested_gap_pct:g}%, which makes it unsafe. Evidence gates: a scenario is learned when "
                f"every finished run of its reference (first of {', '.join(self.reference_configs)}) beat the "
                f"trivial predictor; otherwise, or without recorded baselines, its quality enters no rank, flip, "
                f"verdict or recommendation; a run whose quality ends more than {self.degraded_vs_reference_pct:g}% "
                f"worse than the reference's run of its seed is degraded (never safe, fastest or on a frontier); "
                f"a degenerate micro-F1 is replaced by P@1 (else val loss).")


# ---- cells and the bootstrap ---------------------------------------------------------------
def trained_runs(df: pd.DataFrame) -> pd.Series:
    """Runs that count for stability: those that trained (finished or diverged) in learned
    scenarios."""
    return df["status"].isin([*MEASURED, "diverged"]) & df["learned"].eq(True)


def seed_values(df: pd.DataFrame, metric: str, oriented: bool = True) -> dict[tuple[str, str], np.ndarray]:
    """Finite per-seed values of ``metric`` per (scenario, config) from the runs that count for
    it (``analysis.quality_runs`` for quality, ``speed_runs`` otherwise); times ``sign`` when
    ``oriented`` (higher is better everywhere). ``metric="diverged"``: 1/0 per run that trained
    (``trained_runs``)."""
    df = gated(df)
    if metric == "diverged":
        d = df[trained_runs(df)]
        return {k: (g["status"] == "diverged").to_numpy(float) for k, g in d.groupby(["scenario", "config"])}
    out = {}
    for (s, c), g in df[quality_runs(df) if metric == "quality" else speed_runs(df)].groupby(["scenario", "config"]):
        v = g[metric].to_numpy(float)
        v = v[np.isfinite(v)]
        if len(v):
            out[(s, c)] = v * (sign(df, metric, s) if oriented else 1)
    return out


def bootstrap_means(values: dict, n_boot: int, rng: np.random.Generator) -> dict:
    """``n_boot`` resampled means per key (keys in sorted order: reproducible)."""
    return {k: np.asarray(values[k], float)[rng.integers(0, len(values[k]), (n_boot, len(values[k])))].mean(axis=1)
            for k in sorted(values)}



# ---- flips ---------------------------------------------------------------------------------
def order_reversals(df: pd.DataFrame, rules: Rules = Rules()) -> pd.DataFrame:
    """Every pair of configs whose order (by mean over ok seeds) reverses between two
    scenarios, per metric: ``better_on`` (s) where ``config`` beats ``other`` and ``worse_on``
    (t) where it trails; gaps in % of the pair's mean on each; ``support`` = bootstrap share of
    resamples where both orders hold (NaN if < min_seeds); ``significant`` per ``rules``."""
    df = gated(df, rules)
    rng = np.random.default_rng(rules.seed)
    rows = []
    for m in HEADLINE:
        vals = seed_values(df, m)
        boot = bootstrap_means({k: v for k, v in vals.items() if len(v) >= rules.min_seeds}, rules.n_boot, rng)
        scns = sorted({s for s, _ in vals})
        for s, t in combinations(scns, 2):
            common = sorted({c for x, c in vals if x == s} & {c for x, c in vals if x == t})
            for a, b in combinations(common, 2):
                mu = {k: vals[k].mean() for k in [(s, a), (s, b), (t, a), (t, b)]}
                ds, dt = mu[s, a] - mu[s, b], mu[t, a] - mu[t, b]
                if ds * dt >= 0:
                    continue
                if ds < 0:  # orient: `config` is the one better on `better_on`
                    a, b, ds, dt = b, a, -ds, -dt
                size_s = 100 * ds / ((abs(mu[s, a]) + abs(mu[s, b])) / 2)
                size_t = 100 * -dt / ((abs(mu[t, a]) + abs(mu[t, b])) / 2)
                keys = [(s, a), (s, b), (t, a), (t, b)]
                support = (float(np.mean((boot[s, a] > boot[s, b]) & (boot[t, a] < boot[t, b])))
                           if all(k in boot for k in keys) else np.nan)
                size = min(size_s, size_t)
                rows.append({"metric": m, "config": a, "other": b, "better_on": s, "worse_on": t,
                             "gap_better_pct": size_s, "gap_worse_pct": size_t, "size_pct": size,
                             "n_seeds": min(len(vals[k]) for k in keys), "support": support,
                             "significant": bool(support >= rules.conf and size >= rules.min_size_pct)})
    cols = ["metric", "config", "other", "better_on", "worse_on", "gap_better_pct", "gap_worse_pct",
            "size_pct", "n_seeds", "support", "significant"]
    return pd.DataFrame(rows, columns=cols)


def stability_flips(df: pd.DataFrame, rules: Rules = Rules()) -> pd.DataFrame:
    """Configs that diverge more often on one scenario than on another, beyond seed noise:
    divergence indicator per run that trained in a learned scenario (``trained_runs``), same
    bootstrap as ``order_reversals``; ``support`` = share of resamples where the rate on
    ``diverges_on`` exceeds ``stable_on``."""
    df = gated(df, rules)
    d = df[trained_runs(df)]
    rates = {(c, s): v for (s, c), v in seed_values(df, "diverged").items()}
    boot = bootstrap_means({k: v for k, v in rates.items() if len(v) >= rules.min_seeds}, rules.n_boot,
                           np.random.default_rng(rules.seed + 1))
    rows = []
    for cfg in sorted({c for c, _ in rates}):
        scns = sorted(s for c, s in rates if c == cfg)
        for s, t in combinations(scns, 2):
            rs, rt = rates[cfg, s].mean(), rates[cfg, t].mean()
            if rs == rt:
                continue
            if rs < rt:
                s, t, rs, rt = t, s, rt, rs
            testable = (cfg, s) in boot and (cfg, t) in boot
            support = float(np.mean(boot[cfg, s] > boot[cfg, t])) if testable else np.nan
            steps = d[(d["config"] == cfg) & (d["scenario"] == s)]["stability/diverged_step"].dropna()
            rows.append({"metric": "quality", "config": cfg, "diverges_on": s, "stable_on": t,
                         "diverged_on": f"{int(rates[cfg, s].sum())}/{len(rates[cfg, s])}",
                         "diverged_off": f"{int(rates[cfg, t].sum())}/{len(rates[cfg, t])}",
                         "rate_gap": rs - rt, "median_step": steps.median() if len(steps) else np.nan,
                         "support": support, "significant": bool(support >= rules.conf)})
    cols = ["metric", "config", "diverges_on", "stable_on", "diverged_on", "diverged_off", "rate_gap",
            "median_step", "support", "significant"]
    return pd.DataFrame(rows, columns=cols)


def _pattern(better: set, worse: set) -> str:
    """Name the split when the scenarios a config wins on and loses on fall into two groups."""
    for what, key in (("task", lambda s: "LM" if SCENARIOS[s].is_lm else "classification"),
                      ("architecture", lambda s: "GPT-2" if SCENARIOS[s].arch == "gpt2" else "RoBERTa")):
        b, w = {key(s) for s in better}, {key(s) for s in worse}
        if len(b) == 1 and len(w) == 1 and b != w:
            return f"; better on {b.pop()} than on {w.pop()} ({what})"
    return ""


def flip_entries(stats: pd.DataFrame, reversals: pd.DataFrame, stability: pd.DataFrame,
                 group_ranks: pd.DataFrame) -> list[dict]:
    """Seed 000's ``flips``: one entry per (config, metric) in a significant reversal or
    stability flip, with its rank per scenario, LM/CLS group ranks, the evidence, and an
    interpretation generated from that evidence."""
    sig = reversals[reversals["significant"].astype(bool)]
    stab = stability[stability["significant"].astype(bool)]
    keys = sorted({(r.metric, r.config) for r in sig.itertuples()} | {(r.metric, r.other) for r in sig.itertuples()}
                  | {(r.metric, r.config) for r in stab.itertuples()})
    out = []
    for metric, cfg in keys:
        rk = stats[(stats["metric"] == metric) & (stats["config"] == cfg)].set_index("scenario")["rank"].dropna()
        e = {"config": cfg, "metric": metric, "ranks": {s: int(v) for s, v in rk.items()},
             "rank_change": int(rk.max() - rk.min()) if len(rk) else None}
        for g in ("lm", "cls"):
            r = group_ranks[(group_ranks["metric"] == metric) & (group_ranks["group"] == g)
                            & (group_ranks["config"] == cfg)]["rank"]
            e[f"{g}_{metric}_rank"] = int(r.iloc[0]) if len(r) and pd.notna(r.iloc[0]) else None
        rev = []
        for r in sig[(sig["metric"] == metric) & ((sig["config"] == cfg) | (sig["other"] == cfg))].itertuples():
            mine = r.config == cfg  # phrase every reversal from this config's side
            rev.append({"vs": r.other if mine else r.config, "better_on": r.better_on if mine else r.worse_on,
                        "worse_on": r.worse_on if mine else r.better_on,
                        "gap_better_pct": r.gap_better_pct if mine else r.gap_worse_pct,
                        "gap_worse_pct": r.gap_worse_pct if mine else r.gap_better_pct,
                        "size_pct": r.size_pct, "support": r.support, "n_seeds": int(r.n_seeds)})
        st = [{k: getattr(r, k) for k in ("diverges_on", "stable_on", "diverged_on", "diverged_off",
                                          "median_step", "support")}
              for r in stab[(stab["metric"] == metric) & (stab["config"] == cfg)].itertuples()]
        e["reversals"], e["stability"] = rev, st
        e["interpretation"] = _interpret(cfg, metric, rev, st)
        out.append(e)
    return out


def _interpret(cfg: str, metric: str, rev: list[dict], st: list[dict]) -> str:
    parts = []
    if rev:
        top = max(rev, key=lambda r: r["size_pct"])
        parts.append(f"{cfg} beats {top['vs']} on {metric} by {top['gap_better_pct']:.1f}% on {top['better_on']} "
                     f"but trails it by {top['gap_worse_pct']:.1f}% on {top['worse_on']} (bootstrap support "
                     f"{top['support']:.0%}, {top['n_seeds']} seeds); {len(rev)} reversal(s) beyond seed noise"
                     + _pattern({r["better_on"] for r in rev}, {r["worse_on"] for r in rev}))
    if st:
        top = max(st, key=lambda r: r["support"])
        step = f", median step {top['median_step']:.0f}" if pd.notna(top["median_step"]) else ""
        parts.append(f"{cfg} diverged in {top['diverged_on']} runs on {top['diverges_on']}{step} but in "
                     f"{top['diverged_off']} on {top['stable_on']}"
                     + _pattern({r["stable_on"] for r in st}, {r["diverges_on"] for r in st}))
    return ". ".join(parts) + "."

