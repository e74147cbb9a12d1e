"""Each config's quality against its scenario's reference (``reference_contrasts``): the gap in %
of the reference's quality (positive = worse), paired by seed where the cells share
``Rules.min_seeds`` seeds, its t-interval and one-sided tests, and the verdict (``judge``):

* ``safe``: non-inferior: the one-sided (1 - alpha) upper bound of the gap is below the minimum
  effect (the worse-side test of TOST; the printed interval is the two-sided 1 - 2 alpha one, whose
  upper end is that bound);
* ``degraded``: the one-sided (1 - alpha) lower bound is above the minimum effect (Holm over the
  scenario's configs): a loss that matters, shown;
* ``worse``: neither, but the lower bound is above 0 (Holm): worse beyond seed noise, by less than
  shown to matter;
* ``inconclusive``: none of these; ``not tested`` (too few seeds); ``reference``.

A t-interval, not a bootstrap: with three seeds a percentile bootstrap's "95%" interval is the
min-max of three differences and covers the mean about 75% of the time. The t-interval keeps its
level at any number of seeds where the seed-to-seed spread is roughly normal
(``tests/test_contrast_rule.py`` simulates it). A multi-label scenario is judged on micro- and
macro-F1 together (safe only where safe on both; degraded where degraded on either); a single-label
one reports macro-F1 beside its accuracy (``SECOND_METRIC``).
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from benchlib.analysis.stats import Rules, adjust, exact_p, label, seeds
from benchlib.core.scenarios import SCENARIOS

CHECKPOINT_COLUMNS = ("n_checkpoints", "p_checkpoint", "checkpoint_gaps", "p2_checkpoint", "checkpoint2_gaps")
"""``checkpoint_blocks`` on the first and the second metric, carried from contrasts to the evidence."""
COLUMNS = ["scenario", "config", "reference", "metric", "n_config", "n_reference", "n_paired", "paired", "gap_pct",
           "se_pct", "df", "ci_low", "ci_high", "p_worse", "p_degraded", "p_safe", "p_adj", "p_degraded_adj", "p_exact",
           "min_effect_pct", "verdict", "reason", "metric2", "judged2", "gap2_pct", "ci2_low", "ci2_high", "verdict2",
           *CHECKPOINT_COLUMNS]
VERDICTS = ("reference", "safe", "worse", "inconclusive", "degraded", "not tested")
TESTED = ("safe", "worse", "inconclusive", "degraded")
SECOND_METRIC = {"multilabel": ("macro_f1", True), "singlelabel": ("macro_f1", False)}
"""task -> (the second metric, whether it enters the verdict). Micro-F1 and accuracy are dominated
by frequent labels; macro-F1 weighs every label alike and is where a precision loss on rare labels
shows (issue 53: -7% macro-F1 inside micro-F1's noise)."""


def contrast(x: pd.Series, ref: pd.Series, sign: int, rules: Rules, exact: bool = True,
             blocks: pd.Series | None = None) -> dict:
    """The gap of per-seed values ``x`` to ``ref`` (indexed by seed), % of the reference's mean, > 0
    worse: paired by seed over the shared seeds where there are ``rules.min_seeds``, else Welch's
    unpaired comparison where both have that many; the point gap alone below that, over the shared
    seeds where there are any (a config with seeds 0-1 against a reference with 0-2 would otherwise
    carry seed 2's draw of the reference into its gap). ``ci_low`` /
    ``ci_high``: the two-sided (1 - 2 alpha) t-interval; ``p_worse`` / ``p_degraded`` /
    ``p_safe``: one-sided t-tests of gap <= 0, gap <= m and gap >= m (m: ``min_effect_pct``
    of the caller, filled in by ``tests``); ``exact``: also the sign-flip test's p (``p_exact``);
    ``blocks`` (seed -> the pretrain checkpoint its pair fine-tuned from): ``checkpoint_blocks``."""
    x, ref = x.dropna(), ref.dropna()
    shared = sorted(set(x.index) & set(ref.index))
    out = {"n_config": len(x), "n_reference": len(ref), "n_paired": len(shared), "paired": None, "gap_pct": math.nan,
           "se_pct": math.nan, "df": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p_exact": math.nan}
    enough = max(rules.min_seeds, 2)  # an interval needs two values' spread
    paired = len(shared) >= enough
    base = abs((ref[shared] if paired else ref).mean()) if len(ref) else 0.0
    if base == 0 or not len(x):
        return out
    scale = 100 * sign / base
    if paired:
        d = (ref[shared].to_numpy(float) - x[shared].to_numpy(float)) * scale
        gap, se, df = float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d))), len(d) - 1
        out["p_exact"] = exact_p(d, rules) if exact else math.nan
        if blocks is not None:
            out.update(checkpoint_blocks(pd.Series(d, index=shared), blocks))
    elif len(x) >= enough and len(ref) >= enough:
        vx, vr = x.var(ddof=1) * scale ** 2 / len(x), ref.var(ddof=1) * scale ** 2 / len(ref)
        gap, se = float((ref.mean() - x.mean()) * scale), float(math.sqrt(vx + vr))
        df = (vx + vr) ** 2 / (vx ** 2 / (len(x) - 1) + vr ** 2 / (len(ref) - 1)) if vx + vr > 0 else math.inf
    else:  # a point estimate, no noise measured: over the shared seeds where any, so seed effects cancel
        if shared:
            x, ref = x[shared], ref[shared]
        if ref.mean() != 0:
            out["gap_pct"] = float((ref.mean() - x.mean()) * 100 * sign / abs(ref.mean()))
        return out
    half = _t(rules, df) * se
    out.update(paired=paired, gap_pct=gap, se_pct=se, df=float(df), ci_low=gap - half, ci_high=gap + half)
    return out


def checkpoint_blocks(d: pd.Series, blocks: pd.Series) -> dict:
    """Whether the per-seed gaps ``d`` (indexed by seed) differ between the pretrain checkpoints
    their pairs fine-tuned from (``blocks``: seed -> checkpoint): one-way ANOVA
    (``scipy.stats.f_oneway``) over the checkpoints with two or more seeds, where there are two such.
    The t-interval treats seeds as exchangeable; where the gap depends on the checkpoint, a verdict
    holds for these checkpoints, not for the pretraining recipe that made them.
    ``checkpoint_gaps``: each checkpoint's mean quality change (-gap: negative = worse) and seeds, in the
    order they were made."""
    b = blocks.reindex(d.index)
    groups = [(k, g.to_numpy(float)) for k, g in d[b.notna()].groupby(b[b.notna()], sort=True)]
    out = {"n_checkpoints": len(groups), "p_checkpoint": math.nan,
           "checkpoint_gaps": " / ".join(f"{-v.mean():+.2f} ({len(v)})" for _, v in groups) if len(groups) > 1 else ""}
    tested = [v for _, v in groups if len(v) >= 2]
    if len(tested) >= 2:
        with np.errstate(all="ignore"):
            p = float(sps.f_oneway(*tested).pvalue)
        out["p_checkpoint"] = p if np.isfinite(p) else float(len({round(v.mean(), 12) for v in tested}) == 1)
    return out


@functools.lru_cache(maxsize=256)
def _t(rules: Rules, df: float) -> float:
    return float(sps.t.ppf(1 - rules.alpha, df)) if np.isfinite(df) else float(sps.norm.ppf(1 - rules.alpha))


POWER = 0.8  # the chance a planned number of seeds shows a truly non-inferior cell safe
MOST_SEEDS = 100  # beyond this a plan says "more than": the cell is not worth deciding by seeds
PLAN_UPPER = 0.8  # the cautious plan: gap and spread at their one-sided 80% upper confidence bounds


def seeds_to_show_safe(gap: float, lo: float, hi: float, n: int, margin: float, rules: Rules = Rules(),
                       power: float = POWER, upper: float | None = None) -> int | None:
    """Seeds a paired cell needs for the one-sided (1 - alpha) t-bound of its gap (% of the
    reference, > 0 worse) to fall below ``margin`` with probability ``power``, were the true gap and
    the per-seed spread those measured (``gap``, and the spread behind the two-sided 1 - 2 alpha
    interval ``lo``-``hi`` over ``n`` seeds): statsmodels' power of a one-sample t-test. With
    ``upper`` (``PLAN_UPPER``), were they at their one-sided ``upper`` confidence bounds instead (the
    gap's t-bound, the spread's chi-square bound): a few seeds' measured gap near the margin is
    optimistic, and the plan from it too (docs/journal.md, 2026-11-29). None where the gap planned
    from is at or beyond the margin (no number of seeds shows that safe) or there is no interval;
    ``MOST_SEEDS + 1`` where more than ``MOST_SEEDS`` would be needed."""
    from statsmodels.stats.power import TTestPower
    if n < 2 or not all(np.isfinite(v) for v in (gap, lo, hi)) or gap >= margin:
        return None
    sd = (hi - lo) / 2 / _t(rules, n - 1) * math.sqrt(n)
    if upper is not None:
        gap += float(sps.t.ppf(upper, n - 1)) * sd / math.sqrt(n)
        sd *= math.sqrt((n - 1) / float(sps.chi2.ppf(1 - upper, n - 1)))
        if gap >= margin:
            return None
    if sd <= 0:
        return n
    power_at = functools.partial(TTestPower().power, effect_size=(margin - gap) / sd, alpha=rules.alpha,
                                 alternative="larger")
    return next((k for k in range(2, MOST_SEEDS + 1) if power_at(nobs=k) >= power), MOST_SEEDS + 1)


def tests(c: dict, m: float) -> dict:
    """One-sided p-values of a contrast against 0 and the minimum effect ``m``: ``p_worse`` (gap <= 0),
    ``p_degraded`` (gap <= m) and ``p_safe`` (gap >= m). A contrast without spread (every seed's
    difference the same) decides by its point gap."""
    gap, se, df = c.get("gap_pct"), c.get("se_pct"), c.get("df")
    if c.get("paired") is None or not np.isfinite(gap):
        return {"p_worse": math.nan, "p_degraded": math.nan, "p_safe": math.nan}
    if not se > 0:
        return {"p_worse": float(gap <= 0), "p_degraded": float(gap <= m), "p_safe": float(gap >= m)}
    df = df if np.isfinite(df) else 1e9
    return {"p_worse": float(sps.t.sf(gap / se, df)), "p_degraded": float(sps.t.sf((gap - m) / se, df)),
            "p_safe": float(sps.t.cdf((gap - m) / se, df))}


def judge(p_safe: float, p_degraded_adj: float, p_worse_adj: float, rules: Rules) -> str:
    """The verdict of one tested contrast (module docstring) from its one-sided p-values."""
    if p_degraded_adj < rules.alpha:
        return "degraded"
    if p_safe < rules.alpha:
        return "safe"
    if p_worse_adj < rules.alpha:
        return "worse"
    return "inconclusive"


def combine(verdicts: list[str]) -> str:
    """One verdict over the metrics a scenario is judged on: degraded on any, safe on all, worse on
    any, else inconclusive."""
    if "degraded" in verdicts:
        return "degraded"
    if all(v == "safe" for v in verdicts):
        return "safe"
    return "worse" if "worse" in verdicts else "inconclusive"


def _metrics(d: pd.DataFrame) -> list[tuple[str, str, int, bool]]:
    """(label, column, sign, judged) of each metric a scenario's contrasts are computed on: its
    quality, then ``SECOND_METRIC`` where its records carry it and the quality is the task's own
    headline (a stand-in P@1 or val loss gets no second metric)."""
    s = d["scenario"].iloc[0]
    name, sign = d["quality_name"].iloc[0], int(d["q_sign"].iloc[0])
    out = [(name, "quality", sign, True)]
    task = SCENARIOS[s].task if s in SCENARIOS else None
    second = SECOND_METRIC.get(task)
    col = f"quality/{second[0]}" if second else None
    if second and name in ("micro_f1", "accuracy") and col in d and d[col].notna().any():
        out.append((second[0], col, 1, second[1]))
    return out


def reference_contrasts(runs: pd.DataFrame, rules: Rules) -> pd.DataFrame:
    """Per (scenario, config) of ``runs`` (those whose quality counts): the contrast with the
    scenario's reference on each of its metrics, and the verdict."""
    rows = []
    for s, d in runs.groupby("scenario"):
        vals = {c: g.set_index("seed")["quality"].dropna() for c, g in d.groupby("config")}
        ref = next((c for c in rules.reference_configs if len(vals.get(c, ())) >= rules.min_seeds), None)
        metrics = _metrics(d)
        m = rules.min_effect_pct(metrics[0][0])
        part = []
        for c in vals:
            row = {"scenario": s, "config": c, "reference": ref, "metric": metrics[0][0], "min_effect_pct": m,
                   "p_adj": math.nan, "p_degraded_adj": math.nan, "verdict": "not tested"}
            if ref is None:
                row.update(n_config=len(vals[c]), reason=f"not tested: no reference config "
                           f"({', '.join(rules.reference_configs)}) has >= {rules.min_seeds} counted seeds on {s}")
            elif c == ref:
                row.update(n_config=len(vals[c]), n_reference=len(vals[c]), verdict="reference",
                           reason=f"the reference of {s} ({seeds(len(vals[c]))})")
            else:
                per = [_one(d, c, ref, col, sign, rules) for _, col, sign, _ in metrics]
                row.update({k: v for k, v in per[0].items()})
                if len(metrics) > 1:
                    row.update(metric2=metrics[1][0], judged2=metrics[1][3], gap2_pct=per[1]["gap_pct"],
                               ci2_low=per[1]["ci_low"], ci2_high=per[1]["ci_high"], _second=per[1],
                               p2_checkpoint=per[1].get("p_checkpoint", math.nan),
                               checkpoint2_gaps=per[1].get("checkpoint_gaps", ""))
                if row["paired"] is None:
                    row["reason"] = (f"not tested: {seeds(len(vals[c]))} of {c} and {len(vals[ref])} of the reference "
                                     f"{ref} ({row['n_paired']} shared): needs >= {rules.min_seeds} of both to measure "
                                     f"the seed noise")
            part.append(row)
        _decide(part, metrics, m, rules)
        rows += part
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out


def _one(d: pd.DataFrame, c: str, ref: str, col: str, sign: int, rules: Rules) -> dict:
    """``contrast`` of config ``c`` with ``ref`` on one metric column of a scenario's runs, with the
    checkpoint each seed's reference run fine-tuned from (``pretrained.date``) where runs record one."""
    v = {k: g.set_index("seed")[col].dropna() for k, g in d[d["config"].isin([c, ref])].groupby("config")}
    blocks = None
    if "pretrained.date" in d:
        r = d[(d["config"] == ref) & d["pretrained.date"].notna()]
        blocks = r.drop_duplicates("seed").set_index("seed")["pretrained.date"] if len(r) else None
    return contrast(v.get(c, pd.Series(dtype=float)), v.get(ref, pd.Series(dtype=float)), sign, rules,
                    blocks=blocks)


def _decide(rows: list[dict], metrics: list, m: float, rules: Rules) -> None:
    """The verdicts of one scenario's tested rows: each metric's one-sided tests (Holm over the
    configs for worse and degraded, per metric), then ``combine`` over the judged metrics."""
    tested = [r for r in rows if r.get("paired") is not None]
    per_metric = []
    for k, (name, _, _, judged) in enumerate(metrics):
        cs = [r if k == 0 else r.get("_second", {}) for r in tested]
        ps = [tests(c, m) for c in cs]
        worse = adjust({i: p["p_worse"] for i, p in enumerate(ps)}, rules)
        deg = adjust({i: p["p_degraded"] for i, p in enumerate(ps)}, rules)
        verdicts = [judge(p["p_safe"], deg[i], worse[i], rules) if np.isfinite(c.get("gap_pct", math.nan)) and
                    c.get("paired") is not None else "not tested" for i, (p, c) in enumerate(zip(ps, cs))]
        per_metric.append((name, judged, cs, ps, worse, deg, verdicts))
    for i, r in enumerate(tested):
        name, _, cs, ps, worse, deg, verdicts = per_metric[0]
        r.update(ps[i], p_adj=worse[i], p_degraded_adj=deg[i])
        judged = [pm[6][i] for pm in per_metric if pm[1] and pm[6][i] != "not tested"]
        r["verdict"] = combine(judged)
        r["reason"] = "; ".join(_words(pm[0], pm[2][i], pm[3][i], pm[5][i], pm[4][i], pm[6][i], pm[1], r, m, rules)
                                for pm in per_metric if pm[6][i] != "not tested")
        if len(per_metric) > 1:
            r["verdict2"] = per_metric[1][6][i]
        r.pop("_second", None)
    for r in rows:
        r.pop("_second", None)


def _words(metric: str, c: dict, p: dict, p_deg: float, p_worse: float, verdict: str, judged: bool, r: dict,
           m: float, rules: Rules) -> str:
    """One metric's contrast and verdict in words."""
    gap, lo, hi = c["gap_pct"], c["ci_low"], c["ci_high"]
    how = (f"paired over {int(c['n_paired'])} seeds" if c["paired"] else
           f"unpaired: {int(c['n_config'])} and {int(c['n_reference'])} seeds, {int(c['n_paired'])} shared")
    side = "worse than" if gap >= 0 else "better than"
    exact = f", exact sign-flip p {c['p_exact']:.2g}" if c["paired"] and np.isfinite(c.get("p_exact", math.nan)) else ""
    level = 1 - 2 * rules.alpha
    text = (f"{label(metric)}: {abs(gap):.2f}% {side} the reference {r['reference']} ({level:.0%} t-interval of the "
            f"gap [{lo:.2f}, {hi:.2f}]%, {how}; {rules.multitest} one-sided p {p_worse:.2g} (worse), {p_deg:.2g} "
            f"(worse by >= {m:g}%){exact})")
    what = {"degraded": f"degraded: the gap exceeds the {m:g}% minimum effect beyond seed noise",
            "safe": f"safe: no loss of {m:g}% or more is compatible with the seeds (non-inferiority, one-sided "
                    f"{1 - rules.alpha:.0%})" + (" - a real but smaller gap" if p_worse < rules.alpha else ""),
            "worse": f"worse beyond seed noise, by less than the seeds show to reach the {m:g}% minimum effect",
            "inconclusive": f"inconclusive: the seeds allow a loss of {m:g}% or more but do not show one"}[verdict]
    return f"{text}: {what}" + ("" if judged else " (reported, not judged)")
