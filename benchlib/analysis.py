"""A study's result records -> tables (seed 000's analysis plan).

Stage 1, per experiment (scenario): ``summarize`` (the summary CSV: a row per seed and a
``mean`` row per config, relative to ``fp32_baseline``, ranks, Pareto frontiers) and
``loss_curves``. Stage 2, across experiments: ``config_stats`` (one tidy table of means, ranks
and gains vs fp32), ``rank_correlations`` (Spearman, scipy) and ``group_ranks``, assembled
with the flips (``flips``), verdicts (``hypotheses``) and recommendations (``recommend``) into
``comparison.json`` by ``analysis_cli.compare``. Charts are in ``charts``.

Only ``ok`` runs count for throughput, memory and quality; ``diverged`` runs count for
stability and are marked on curves; other statuses are counted. Writing the files, the CLI
(``dtype-bench analyze`` / ``compare``) and the notebook runner are in ``analysis_cli``.
"""
from __future__ import annotations

import math
from itertools import combinations, permutations
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
from scipy import stats as sps

from .configs import ALIASES, REGISTRY
from .records import METRICS, load_records, read_steps, records_frame
from .scenarios import SCENARIOS

HEADLINE = ("throughput", "memory", "quality")
BASELINE = "fp32_baseline"
STATUS_COLS = {"ok": "n_ok", "diverged": "n_diverged", "oom": "n_oom", "error": "n_error",
               "skipped": "n_skipped"}
EXTRA_QUALITY = [k for k in METRICS if k.startswith("quality/")]
SUMMARY_COLS = ["config", "seed", "throughput", "throughput_std", "memory", "memory_std", "quality",
                "quality_std", "n_seeds", "status", "n_runs", *STATUS_COLS.values(),
                "throughput_rel", "memory_rel", "quality_rel", "quality_delta", "rank_throughput",
                "rank_memory", "rank_quality", "pareto_throughput", "pareto_memory", "diverged_step",
                "quality_name", "quality_higher_is_better", "throughput_unit"]


# ---- loading ------------------------------------------------------------------------------
def study_frame(records: Iterable[dict]) -> pd.DataFrame:
    """``records_frame`` normalised for analysis: canonical config names (``fp32_true`` ->
    ``fp32_baseline``), numeric headline columns, ``q_sign`` (+1 when higher quality is better),
    and one row per (scenario, config, seed): a run recorded twice keeps the later one (record
    date, then path)."""
    records = list(records)
    df = records_frame(records)
    if df.empty:
        raise FileNotFoundError("no result records")
    df["date"] = [str(r.get("env", {}).get("date") or "") for r in records]
    df["config"] = df["config"].map(lambda c: ALIASES.get(c, c))
    num = [*HEADLINE, "throughput_std", "tokens_per_s", "stability/diverged_step", "run.steps",
           *EXTRA_QUALITY]
    for col in num:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df else np.nan
    for col in ("quality_name", "throughput_unit", "quality_higher_is_better"):
        if col not in df:
            df[col] = None
    fallback = df["scenario"].map(lambda s: SCENARIOS[s].higher_is_better if s in SCENARIOS else True)
    hib = df["quality_higher_is_better"].where(df["quality_higher_is_better"].notna(), fallback)
    df["q_sign"] = np.where(hib.astype(bool), 1, -1)
    df = df.sort_values(["date", "path"], na_position="first").drop_duplicates(["scenario", "config", "seed"],
                                                                                keep="last")
    df = df.sort_values(["scenario", "config", "seed"]).reset_index(drop=True)
    df.attrs["q_sign"] = df.groupby("scenario")["q_sign"].first().astype(int).to_dict()
    return df


def load_study(*roots: str | Path) -> pd.DataFrame:
    """Every readable ``result.json`` under the roots, as ``study_frame``."""
    recs = [r for root in roots for r in load_records(root)]
    if not recs:
        raise FileNotFoundError(f"no readable result.json under {', '.join(map(str, roots))}")
    return study_frame(recs)


def resolve_study_dir(path: str | Path) -> Path:
    """A study folder as given, else relative to the repository root (notebooks run by
    papermill may start in ``notebooks/`` or in the output folder)."""
    p = Path(path).expanduser()
    for cand in (p, Path(__file__).resolve().parents[1] / p):
        if cand.is_dir():
            return cand.resolve()
    raise FileNotFoundError(f"study folder {path!r} not found")


def config_order(configs: Iterable[str]) -> list[str]:
    """Registry order (seed 001's table first), then unknown names alphabetically."""
    s = set(configs)
    known = [c for c in REGISTRY if c in s]
    return known + sorted(s - set(known))


def status_table(df: pd.DataFrame) -> pd.DataFrame:
    """Runs per scenario x status."""
    t = df.pivot_table(index="scenario", columns="status", values="run_id", aggfunc="count", fill_value=0)
    return t.reindex(columns=[s for s in STATUS_COLS if s in t.columns])


def sign(df: pd.DataFrame, metric: str, scenario: str) -> int:
    """+1 where higher is better: throughput +1, memory -1, quality from the records."""
    if metric != "quality":
        return -1 if metric == "memory" else 1
    signs = df.attrs.get("q_sign") or df.groupby("scenario")["q_sign"].first().to_dict()
    if scenario in signs:
        return int(signs[scenario])
    return 1 if SCENARIOS[scenario].higher_is_better else -1


# ---- stage 1: one experiment ---------------------------------------------------------------
def pareto_front(x: Iterable[float], y: Iterable[float]) -> np.ndarray:
    """True where (x, y) is not dominated, both axes higher-is-better (negate the others).
    A point is dominated by one at least as good on both axes and better on one; NaN is never
    on the front."""
    x, y = np.asarray(list(x), float), np.asarray(list(y), float)
    ok = np.isfinite(x) & np.isfinite(y)
    front = np.zeros(len(x), bool)
    for i in np.flatnonzero(ok):
        dom = ok & (x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))
        front[i] = not dom.any()
    return front


def summarize(df: pd.DataFrame, scenario: str) -> pd.DataFrame:
    """Seed 000's summary CSV for one scenario: a row per run (``seed`` = its number) and a
    ``mean`` row per config (mean and std over ok seeds; ``n_seeds`` = ok seeds), status counts,
    each headline metric relative to fp32_baseline (``*_rel`` = ratio, ``quality_delta`` =
    difference), ranks (1 = best, direction-aware) and Pareto flags on the mean rows, and the
    scenario's other quality metrics (``val_loss``, ``macro_f1``, ...) in their own columns.
    On a seed row, ``throughput_std`` is the run's own std over its timed windows."""
    d = df[df["scenario"] == scenario]
    if d.empty:
        raise ValueError(f"no records for scenario {scenario!r}")
    extra = [k for k in EXTRA_QUALITY if d[k].notna().any()]
    rows = []
    for cfg in config_order(d["config"].unique()):
        g = d[d["config"] == cfg].sort_values("seed")
        ok = g[g["status"] == "ok"]
        for _, r in g.iterrows():
            rows.append({"config": cfg, "seed": str(int(r["seed"])), "status": r["status"],
                         "n_seeds": int(r["status"] == "ok"), "diverged_step": r["stability/diverged_step"],
                         **{m: r[m] for m in HEADLINE}, "throughput_std": r["throughput_std"],
                         **{k.split("/", 1)[1]: r[k] for k in extra}})
        mean = {"config": cfg, "seed": "mean", "n_seeds": len(ok), "n_runs": len(g),
                "status": ",".join(f"{n}x{s}" for s, n in g["status"].value_counts().items()),
                "diverged_step": g["stability/diverged_step"].median()}
        for m in [*HEADLINE, *extra]:
            name = m.split("/", 1)[-1]
            mean[name] = ok[m].mean() if len(ok) else np.nan
            if m in HEADLINE:
                mean[f"{m}_std"] = ok[m].std(ddof=1) if len(ok) > 1 else np.nan
        mean.update({col: int((g["status"] == s).sum()) for s, col in STATUS_COLS.items()})
        rows.append(mean)
    out = pd.DataFrame(rows)
    out["quality_name"] = d["quality_name"].dropna().iloc[0] if d["quality_name"].notna().any() else None
    out["throughput_unit"] = d["throughput_unit"].dropna().iloc[0] if d["throughput_unit"].notna().any() else None
    out["quality_higher_is_better"] = sign(df, "quality", scenario) > 0
    is_mean = out["seed"] == "mean"
    base = out[is_mean & (out["config"] == BASELINE)]
    for m in HEADLINE:
        ref = base[m].iloc[0] if len(base) else np.nan
        out[f"{m}_rel"] = out[m] / ref
        if m == "quality":
            out["quality_delta"] = out[m] - ref
    mean_rows = out[is_mean]
    for m in HEADLINE:
        out.loc[is_mean, f"rank_{m}"] = (mean_rows[m] * sign(df, m, scenario)).rank(ascending=False, method="min")
    q = mean_rows["quality"] * sign(df, "quality", scenario)
    for col, x in (("pareto_throughput", mean_rows["throughput"]), ("pareto_memory", -mean_rows["memory"])):
        out[col] = pd.Series(pd.NA, index=out.index, dtype="boolean")
        out.loc[is_mean, col] = pareto_front(x, q)
    cols = [c for c in SUMMARY_COLS if c in out] + [c for c in out if c not in SUMMARY_COLS]
    return out[cols]


def _run_curve(path: str) -> tuple[np.ndarray, np.ndarray] | None:
    p = Path(path).with_name("steps.jsonl") if path else None
    if p is None or not p.exists():
        return None
    rows = [r for r in read_steps(p) if "loss" in r]
    if not rows:
        return None
    loss = np.array([np.nan if r["loss"] is None else r["loss"] for r in rows], float)
    return np.array([r["step"] for r in rows]), loss


def loss_curves(df: pd.DataFrame, max_points: int = 120, cap_ratio: float = 3.0
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training loss from each run's ``steps.jsonl`` (ok and diverged runs), aggregated for
    charting: steps binned to at most ``max_points`` per scenario, then per (scenario, config,
    step) the mean, min and max over seeds (``loss``, ``loss_lo``, ``loss_hi``, ``n_runs``).
    Losses above ``cap_ratio`` x the scenario's median initial loss, and non-finite ones, are
    drawn at that cap so a divergence shows as a jump to the ceiling. Second frame: one row per
    diverged run at its divergence step."""
    runs = []
    for _, r in df[df["status"].isin(["ok", "diverged"])].iterrows():
        c = _run_curve(r["path"])
        if c is not None:
            runs.append((r, *c))
    cols = ["scenario", "config", "step", "loss", "loss_lo", "loss_hi", "n_runs", "cap"]
    if not runs:
        return pd.DataFrame(columns=cols), pd.DataFrame(columns=["scenario", "config", "seed", "step", "loss"])
    parts, marks = [], []
    for scn in sorted({r["scenario"] for r, _, _ in runs}):
        mine = [(r, s, l) for r, s, l in runs if r["scenario"] == scn]
        first = [l[np.isfinite(l)][0] for _, _, l in mine if np.isfinite(l).any()]
        cap = cap_ratio * float(np.median(first)) if first else np.inf
        width = max(1, math.ceil((max(int(s.max()) for _, s, _ in mine) + 1) / max_points))
        for r, steps, loss in mine:
            capped = np.where(np.isfinite(loss), np.minimum(loss, cap), cap)
            b = pd.DataFrame({"step": steps // width * width, "loss": capped}).groupby("step").mean()
            parts.append(b.reset_index().assign(scenario=scn, config=r["config"], seed=r["seed"], cap=cap))
            ds = r["stability/diverged_step"]
            if r["status"] == "diverged" and pd.notna(ds):
                at = capped[steps == int(ds)]
                marks.append({"scenario": scn, "config": r["config"], "seed": int(r["seed"]),
                              "step": int(ds), "loss": float(at[0]) if len(at) else cap})
    long = pd.concat(parts)
    curves = long.groupby(["scenario", "config", "step"]).agg(
        loss=("loss", "mean"), loss_lo=("loss", "min"), loss_hi=("loss", "max"),
        n_runs=("loss", "size"), cap=("cap", "first")).reset_index()
    return curves[cols], pd.DataFrame(marks, columns=["scenario", "config", "seed", "step", "loss"])


def describe_experiment(summary: pd.DataFrame, scenario: str) -> str:
    """Markdown sentences derived from a summary (no hand-written findings)."""
    m = summary[summary["seed"] == "mean"]
    q = m["quality_name"].iloc[0] or "quality"
    lines = [f"**Scenario {scenario}** ({len(m)} configs, {int(m['n_runs'].sum())} runs; "
             f"quality = {q}, {'higher' if m['quality_higher_is_better'].iloc[0] else 'lower'} is better)."]
    for col, what in (("pareto_throughput", "throughput-quality"), ("pareto_memory", "memory-quality")):
        front = m.loc[m[col].fillna(False).astype(bool), "config"].tolist()
        lines.append(f"- {what} Pareto frontier: {', '.join(front) or 'none (no ok runs)'}.")
    for metric, what in (("throughput", "fastest"), ("quality", "best quality")):
        r = m.dropna(subset=[f"rank_{metric}"])
        if len(r):
            top = r[r[f"rank_{metric}"] == r[f"rank_{metric}"].min()]
            rel = top[f"{metric}_rel"].iloc[0]
            lines.append(f"- {what}: {', '.join(top['config'])}"
                         + (f" ({rel:.3g}x fp32_baseline)" if pd.notna(rel) else "") + ".")
    bad = m[m["n_ok"] < m["n_runs"]]
    for _, r in bad.iterrows():
        lines.append(f"- {r['config']}: {r['status']}" + (f" (median divergence step {r['diverged_step']:.0f})"
                                                            if pd.notna(r["diverged_step"]) else "") + ".")
    return "\n".join(lines)


# ---- stage 2: across experiments -----------------------------------------------------------
def config_stats(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (scenario, config, metric): ``mean``, ``std``, ``n`` over ok seeds, status
    counts, ``rank`` (1 = best; on quality a config with no ok run but a diverged one ranks
    last), ``rel`` (ratio to fp32_baseline) and ``gain_pct`` (% vs fp32_baseline, > 0 = better)."""
    rows = []
    for (s, c), g in df.groupby(["scenario", "config"]):
        ok = g[g["status"] == "ok"]
        counts = {col: int((g["status"] == st).sum()) for st, col in STATUS_COLS.items()}
        for m in HEADLINE:
            v = ok[m].dropna()
            rows.append({"scenario": s, "config": c, "metric": m, "mean": v.mean() if len(v) else np.nan,
                         "std": v.std(ddof=1) if len(v) > 1 else np.nan, "n": len(v), "n_runs": len(g),
                         "sign": sign(df, m, s), **counts})
    st = pd.DataFrame(rows)
    st["score"] = st["mean"] * st["sign"]
    st["rank"] = st.groupby(["scenario", "metric"])["score"].rank(ascending=False, method="min")
    last = (st["metric"] == "quality") & st["mean"].isna() & (st["n_diverged"] > 0)
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
    """Spearman's rho (scipy.stats.spearmanr) over the entries present in both, and a two-sided
    permutation p-value: exact over all n! pairings for n <= 8 configs, else ``n_perm`` random
    pairings. (spearmanr's own t-approximation says p = 0 for a perfect order of 3 configs.)"""
    both = a.notna() & b.notna()
    x, y, n = a[both].to_numpy(float), b[both].to_numpy(float), int(both.sum())
    if n < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return np.nan, np.nan, n
    rho = float(sps.spearmanr(x, y).statistic)
    rx, ry = sps.rankdata(x) - (n + 1) / 2, sps.rankdata(y)
    perms = (np.array(list(permutations(ry))) if n <= 8 else
             np.random.default_rng(seed).permuted(np.tile(ry, (n_perm, 1)), axis=1))
    perms = perms - perms.mean(axis=1, keepdims=True)
    r = perms @ rx / (np.linalg.norm(perms, axis=1) * np.linalg.norm(rx))
    p = float(np.mean(np.abs(r) >= abs(rho) - 1e-12))
    return rho, p if n <= 8 else (p * n_perm + 1) / (n_perm + 1), n


def rank_correlations(stats: pd.DataFrame) -> pd.DataFrame:
    """Spearman rho (``spearman``: scipy's rho, permutation p-value) of the configs' ranks between
    every pair of scenarios and, as ``LM``/``CLS``, between the two groups' mean ranks; per
    metric, over the configs ranked in both (>= 3 needed)."""
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
    """Per (metric, group, config): mean rank over the group's scenarios and its rank (seed
    000's ``lm_quality_rank`` / ``cls_quality_rank``)."""
    rows = []
    for m in HEADLINE:
        piv = stats[stats["metric"] == m].pivot(index="config", columns="scenario", values="rank")
        for name, scns in groups(piv.columns).items():
            if scns:
                mr = piv[scns].mean(axis=1)
                rows += [{"metric": m, "group": name, "config": c, "mean_rank": v, "rank": r}
                         for c, v, r in zip(mr.index, mr, mr.rank(method="min"))]
    return pd.DataFrame(rows, columns=["metric", "group", "config", "mean_rank", "rank"])


def __getattr__(name: str):
    """``main_analyze`` / ``main_compare`` by their old address; they live in ``analysis_cli``,
    which imports this module, so they are fetched on first use rather than imported here."""
    if name in ("main_analyze", "main_compare"):
        from . import analysis_cli
        return getattr(analysis_cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
