"""Recommendations from a study's numbers (seed 000): where each config is safe (``safety``:
every run ok, quality within seed noise of the best, by the bootstrap of ``flips.Rules``) and
the rules over it that name a default, the choice per task and what to avoid
(``recommendations``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .analysis import groups
from .flips import Rules, bootstrap_means, seed_values


def safety(df: pd.DataFrame, rules: Rules = Rules()) -> pd.DataFrame:
    """Per (scenario, config): ``safe`` when every run is ok and the quality is not worse than
    the scenario's best config beyond seed noise: the bootstrap share of resamples where the
    best is better stays < conf. With < min_seeds ok seeds on either side the noise cannot be
    estimated (``tested`` = False): then a config is unsafe when it failed or its quality is
    more than ``rules.untested_gap_pct`` % below the best, and safe "as far as known" otherwise.
    Cells whose runs were all skipped (the hardware cannot run the config) are left out."""
    q = seed_values(df, "quality")
    boot = bootstrap_means({k: v for k, v in q.items() if len(v) >= rules.min_seeds}, rules.n_boot,
                           np.random.default_rng(rules.seed + 2))
    rows = []
    for (s, c), g in df.groupby(["scenario", "config"]):
        if (g["status"] == "skipped").all():
            continue
        means = {cc: v.mean() for (ss, cc), v in q.items() if ss == s}
        best = max(means, key=means.get) if means else None
        row = {"scenario": s, "config": c, "runs": len(g), "ok": int((g["status"] == "ok").sum()), "best": best,
               "gap_pct": np.nan, "support": np.nan, "tested": False, "safe": False}
        if row["ok"] < len(g):
            bad = g.loc[g["status"] != "ok", "status"].value_counts()
            steps = g["stability/diverged_step"].dropna()
            row["reason"] = ", ".join(f"{k} {v}/{len(g)}" for k, v in bad.items()) + (
                f" (median divergence step {steps.median():.0f})" if len(steps) else "")
        elif (s, c) not in q:
            row["reason"] = "no quality value"
        else:
            # relative to the best; undefined when the best scores 0 (e.g. every config's F1 is
            # still 0 early in training): then no config is called worse on a percentage
            row["gap_pct"] = gap = (100 * (means[best] - means[c]) / abs(means[best]) if means[best] != 0
                                    else 0.0 if means[c] == means[best] else np.nan)
            row["tested"] = c == best or ((s, c) in boot and (s, best) in boot)
            if c != best and row["tested"]:
                row["support"] = float(np.mean(boot[s, best] > boot[s, c]))
            worse = row["support"] >= rules.conf
            far = not row["tested"] and gap > rules.untested_gap_pct  # NaN gap compares False
            row["safe"] = not (worse or far)
            row["reason"] = (f"quality {gap:.2f}% below the best ({best}), bootstrap support {row['support']:.0%}"
                             if worse else
                             f"quality {gap:.2f}% below the best ({best}), more than the {rules.untested_gap_pct:g}% "
                             f"allowed while the noise is not estimated (< {rules.min_seeds} ok seeds)"
                             if far else "safe" if row["tested"] else
                             f"safe as far as known: quality noise not estimated (< {rules.min_seeds} ok seeds)")
        rows.append(row)
    return pd.DataFrame(rows, columns=["scenario", "config", "runs", "ok", "best", "gap_pct", "support", "tested",
                                       "safe", "reason"])


def recommendations(df: pd.DataFrame, stats: pd.DataFrame, rules: Rules = Rules()) -> tuple[dict, pd.DataFrame]:
    """Rules over ``safety``: ``universal`` = configs safe on every scenario of the study,
    fastest first (mean throughput rank); the first is the default, and the lowest-memory one
    is named for memory-bound work. ``per_task[s]`` = the fastest safe config on s, and configs
    unsafe on s that are safe elsewhere. ``lm_specific`` / ``cls_specific`` = safe on every LM
    (classification) scenario but not on every classification (LM) one. ``avoid`` = safe nowhere.
    Every line carries its numbers (speed and memory vs fp32_baseline, or ranks)."""
    saf = safety(df, rules)
    scns = sorted(saf["scenario"].unique())
    piv = _pivots(stats)
    safe = {c: set(g.loc[g["safe"], "scenario"]) for c, g in saf.groupby("config")}
    def speed_order(cs, on=None):
        """Fastest first: by the mean throughput rank over the scenarios ``on`` (default all)."""
        ranks = piv["throughput_rank"] if on is None else piv["throughput_rank"][on]
        return sorted(cs, key=lambda c: ranks.loc[c].mean())

    def numbers(c, on):
        t, m = piv["throughput_rel"].loc[c, on].dropna(), piv["memory_rel"].loc[c, on].dropna()
        if len(t):
            spread = f"; {t.min():.2f}-{t.max():.2f}x" if t.max() - t.min() >= 0.01 else ""
            out = f"throughput {np.exp(np.log(t).mean()):.2f}x fp32" + (
                f" (geo-mean over {', '.join(t.index)}{spread})" if len(t) > 1 else f" on {t.index[0]}")
            return out + (f", memory {np.exp(np.log(m).mean()):.2f}x fp32" if len(m) else "")
        return f"mean throughput rank {piv['throughput_rank'].loc[c, on].mean():.1f}"

    def caveat(c, on):
        u = sorted(saf.loc[(saf["config"] == c) & saf["scenario"].isin(on) & ~saf["tested"].astype(bool), "scenario"])
        return f" [quality noise not estimated on {', '.join(u)}: < {rules.min_seeds} ok seeds]" if u else ""

    universal = speed_order([c for c, ss in safe.items() if set(scns) <= ss])
    rec = {"universal": [], "lm_specific": [], "cls_specific": [], "per_task": {}, "avoid": []}
    every = f"safe on all {len(scns)} scenarios ({', '.join(scns)}: every run ok, quality within seed noise of the best)"
    for i, c in enumerate(universal):
        rec["universal"].append(f"{'default: ' if i == 0 else ''}{c} - {every}; {numbers(c, scns)}{caveat(c, scns)}")
    if len(universal) > 1:
        lean = min(universal, key=lambda c: piv["memory_rank"].loc[c].mean())
        if lean != universal[0]:
            rec["universal"].append(f"memory-bound: {lean} - lowest memory of the universally safe configs; "
                                    f"{numbers(lean, scns)}")
    if not universal and safe:
        most = max(safe, key=lambda c: (len(safe[c]), -piv["throughput_rank"].loc[c].mean()))
        rec["universal"].append(f"no config is safe on every scenario; safe on the most: {most} "
                                f"({len(safe[most])}/{len(scns)}: {', '.join(sorted(safe[most]))})")
    default = universal[0] if universal else None
    for s in scns:
        here = saf[saf["scenario"] == s].set_index("config")
        lines = []
        fast = speed_order([c for c in here.index if here.loc[c, "safe"]], on=[s])
        if fast:
            c = fast[0]
            g = piv["quality_gain"].loc[c, s]
            lines.append(f"{s}: fastest safe config {c} ({numbers(c, [s])}"
                         + (f", quality {round(g, 2) + 0.0:+.2f}% vs fp32" if pd.notna(g) else "") + ")"
                         + ("" if c == default else f"; differs from the default {default}" if default else "")
                         + caveat(c, [s]))
        for c in here.index[~here["safe"].astype(bool)]:
            if safe.get(c):
                lines.append(f"{s}: avoid {c} - {here.loc[c, 'reason']} (safe on {', '.join(sorted(safe[c]))})")
        rec["per_task"][s] = lines
    g = groups(scns)
    for name, mine, other in (("lm_specific", g["lm"], g["cls"]), ("cls_specific", g["cls"], g["lm"])):
        for c in speed_order([c for c, ss in safe.items() if mine and other and set(mine) <= ss
                              and not set(other) <= ss]):
            why = _reasons(saf[(saf["config"] == c) & ~saf["safe"].astype(bool) & saf["scenario"].isin(other)])
            rec[name].append(f"{c} - safe on {'LM' if name == 'lm_specific' else 'classification'} "
                             f"({', '.join(mine)}) but not on {why}; {numbers(c, mine)}")
    for c in sorted(set(saf["config"]) - {c for c, ss in safe.items() if ss}):
        why = _reasons(saf[saf["config"] == c])
        rec["avoid"].append(f"{c} - safe on no scenario ({why})")
    return rec, saf


def _reasons(rows: pd.DataFrame) -> str:
    """'C, D: <reason>; E: <other reason>' - scenarios sharing a reason named once."""
    by = rows.groupby("reason", sort=False)["scenario"].apply(lambda x: ", ".join(sorted(x)))
    return "; ".join(f"{scns}: {reason}" for reason, scns in by.items())


def _pivots(stats: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """config x scenario tables of throughput/memory rank, ratio to fp32, and quality gain."""
    def p(metric, col):
        return stats[stats["metric"] == metric].pivot(index="config", columns="scenario", values=col)
    return {"throughput_rank": p("throughput", "rank"), "memory_rank": p("memory", "rank"),
            "throughput_rel": p("throughput", "rel"), "memory_rel": p("memory", "rel"),
            "quality_gain": p("quality", "gain_pct")}
