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

from itertools import combinations

import numpy as np
import pandas as pd

from benchlib.analysis.stats import Rules, bootstrap_means
from benchlib.analysis.tables import HEADLINE, gated, seed_values, trained_runs
from benchlib.core.scenarios import SCENARIOS


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

