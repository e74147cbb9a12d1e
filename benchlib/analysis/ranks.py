"""Stage 2 of seed 000's analysis: ``config_stats`` (means, ranks and gains vs fp32 per scenario,
config and metric), ``rank_correlations``, ``group_ranks`` and the metrics' directions (``sign``)."""
from __future__ import annotations

from itertools import combinations
from typing import Iterable

import numpy as np
import pandas as pd
from scipy import stats as sps

from benchlib.analysis.gates import FAILED, gated, quality_runs, speed_runs
from benchlib.analysis.stats import rng_kw
from benchlib.core.scenarios import SCENARIOS

HEADLINE = ("throughput", "memory", "quality")
BASELINE = "fp32_baseline"
STATUS_COLS = {"ok": "n_ok", "diverged": "n_diverged", "degraded": "n_degraded", "stalled": "n_stalled",
               "oom": "n_oom", "error": "n_error", "skipped": "n_skipped"}


def sign(df: pd.DataFrame, metric: str, scenario: str) -> int:
    """+1 where higher is better: throughput +1, memory -1, quality from the records."""
    if metric != "quality":
        return -1 if metric == "memory" else 1
    signs = df.attrs.get("q_sign") or df.groupby("scenario")["q_sign"].first().to_dict()
    if scenario in signs:
        return int(signs[scenario])
    return 1 if SCENARIOS[scenario].higher_is_better else -1


def config_stats(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (scenario, config, metric): ``mean``, ``std``, ``n`` over the runs that count,
    status counts, ``n_failed``, ``established`` (quality judged), ``ranked`` (quality ranked: its
    configs told apart), ``rank`` (1 = best; on quality a config with only failed runs ranks last),
    ``rel`` (ratio to fp32_baseline) and ``gain_pct`` (> 0 = better)."""
    df = gated(df)
    rows = []
    speed, qual = speed_runs(df), quality_runs(df)
    for (s, c), g in df.groupby(["scenario", "config"]):
        counts = {col: int((g["status"] == st).sum()) for st, col in STATUS_COLS.items()}
        for m in HEADLINE:
            v = g.loc[(qual if m == "quality" else speed)[g.index], m].dropna()
            rows.append({"scenario": s, "config": c, "metric": m, "mean": v.mean() if len(v) else np.nan,
                         "std": v.std(ddof=1) if len(v) > 1 else np.nan, "n": len(v), "n_runs": len(g),
                         "sign": sign(df, m, s), **counts, "n_failed": int(g["health"].isin(FAILED).sum()),
                         "established": bool(g["quality_established"].iloc[0]) if m == "quality" else True,
                         "ranked": bool(g["quality_ranked"].iloc[0]) if m == "quality" else True})
    st = pd.DataFrame(rows)
    st["score"] = st["mean"] * st["sign"]
    st["rank"] = st.groupby(["scenario", "metric"])["score"].rank(ascending=False, method="min")
    st.loc[~st["ranked"], "rank"] = np.nan  # configs not told apart: their quality order is seed noise
    last = (st["metric"] == "quality") & st["mean"].isna() & (st["n_failed"] > 0) & st["ranked"]
    n_ranked = st[st["metric"] == "quality"].groupby("scenario")["rank"].count()
    st.loc[last, "rank"] = st.loc[last, "scenario"].map(n_ranked).astype(float) + 1
    ref = st.set_index(["scenario", "metric"]).index.map(
        st[st["config"] == BASELINE].set_index(["scenario", "metric"])["mean"].to_dict())
    ref = np.asarray(ref, float)
    st["rel"] = st["mean"] / ref
    st["gain_pct"] = 100 * st["sign"] * (st["mean"] - ref) / np.abs(ref)
    return st


def groups(scenarios: Iterable[str]) -> dict[str, list[str]]:
    """Seed 000's two experiments: language modelling (A, B) and classification (C-F)."""
    s = sorted(set(scenarios))
    return {"lm": [x for x in s if SCENARIOS[x].is_lm], "cls": [x for x in s if not SCENARIOS[x].is_lm]}


def spearman(a: pd.Series, b: pd.Series, n_perm: int = 20000, seed: int = 0) -> tuple[float, float, int]:
    """Spearman's rho over the entries present in both and a two-sided permutation p-value, exact
    for n <= 8 (spearmanr's t-approximation says p = 0 for a perfect order of 3 configs)."""
    both = a.notna() & b.notna()
    x, y, n = a[both].to_numpy(float), b[both].to_numpy(float), int(both.sum())
    if n < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return np.nan, np.nan, n
    rho = float(sps.spearmanr(x, y).statistic)
    ry = sps.rankdata(y) - (n + 1) / 2

    def pearson_of_ranks(v, axis=-1):  # Spearman's rho of the permuted ranks, vectorised
        v = v - v.mean(axis=axis, keepdims=True)
        return (v @ ry) / (np.linalg.norm(v, axis=axis) * np.linalg.norm(ry))
    res = sps.permutation_test((sps.rankdata(x),), pearson_of_ranks, permutation_type="pairings", vectorized=True,
                               n_resamples=np.inf if n <= 8 else n_perm, **rng_kw(sps.permutation_test, seed))
    return rho, float(res.pvalue), n


def rank_correlations(stats: pd.DataFrame) -> pd.DataFrame:
    """``spearman`` of the configs' ranks between every pair of scenarios and, as ``LM``/``CLS``,
    the two groups' mean ranks, per metric."""
    rows = []
    for m in HEADLINE:
        piv = stats[stats["metric"] == m].pivot(index="config", columns="scenario", values="rank")
        for a, b in combinations(piv.columns, 2):
            rho, p, n = spearman(piv[a], piv[b])
            rows.append({"metric": m, "a": a, "b": b, "rho": rho, "p": p, "n_configs": n})
        g = groups(piv.columns)
        if g["lm"] and g["cls"]:
            rho, p, n = spearman(piv[g["lm"]].mean(axis=1), piv[g["cls"]].mean(axis=1))
            rows.append({"metric": m, "a": "LM", "b": "CLS", "rho": rho, "p": p, "n_configs": n})
    return pd.DataFrame(rows, columns=["metric", "a", "b", "rho", "p", "n_configs"])


def group_ranks(stats: pd.DataFrame) -> pd.DataFrame:
    """Per (metric, group, config): mean rank over the group's scenarios and its rank."""
    rows = []
    for m in HEADLINE:
        piv = stats[stats["metric"] == m].pivot(index="config", columns="scenario", values="rank")
        for name, scns in groups(piv.columns).items():
            if scns:
                mr = piv[scns].mean(axis=1)
                rows += [{"metric": m, "group": name, "config": c, "mean_rank": v, "rank": r}
                         for c, v, r in zip(mr.index, mr, mr.rank(method="min"))]
    return pd.DataFrame(rows, columns=["metric", "group", "config", "mean_rank", "rank"])


