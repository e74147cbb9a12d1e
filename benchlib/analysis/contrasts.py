"""Each config's quality against its scenario's reference (``reference_contrasts``): the gap in %
of the reference's quality (positive = worse), paired by seed where the cells share
``Rules.min_seeds`` seeds, its CI and p-values (one corrected family per scenario), and the verdict:
``degraded`` (beyond seed noise and ``Rules.min_effect_pct``), ``safe`` (the CI's worse end below
that minimum effect), ``inconclusive`` (neither), ``not tested`` (too few seeds), ``reference``.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from benchlib.analysis.stats import Rules, adjust, boot_p, bootstrap, exact_p, piece, seeds

COLUMNS = ["scenario", "config", "reference", "metric", "n_config", "n_reference", "n_paired", "paired", "gap_pct",
           "ci_low", "ci_high", "p", "p_adj", "p_exact", "min_effect_pct", "verdict", "reason"]


def contrast(x: pd.Series, ref: pd.Series, sign: int, rules: Rules) -> dict:
    """The gap of per-seed values ``x`` to ``ref`` (indexed by seed), % of the reference, > 0 worse."""
    x, ref = x.dropna(), ref.dropna()
    shared = sorted(set(x.index) & set(ref.index))
    out = {"n_config": len(x), "n_reference": len(ref), "n_paired": len(shared), "paired": None, "gap_pct": math.nan,
           "ci_low": math.nan, "ci_high": math.nan, "p": math.nan, "p_exact": math.nan}
    base = abs((ref[shared] if len(shared) >= rules.min_seeds else ref).mean())
    p = piece({(0, "x"): x, (0, "ref"): ref}, 0, "x", "ref", lambda xv, rv, r: 100 * sign * (rv - xv) / base,
              rules) if base != 0 else None
    if p is None:
        return out
    point, lo, hi, dist = bootstrap(p.samples, lambda *v, axis=-1: p.value(*(np.mean(a, axis=axis) for a in v)), rules)
    out.update(paired=p.paired, gap_pct=point, ci_low=lo, ci_high=hi, p=boot_p(dist, point),
               p_exact=exact_p(p.samples[0], rules) if p.paired else math.nan)
    return out


def reference_contrasts(runs: pd.DataFrame, rules: Rules) -> pd.DataFrame:
    """Per (scenario, config) of ``runs`` (those whose quality counts): the contrast with the
    scenario's reference and its verdict."""
    rows = []
    for s, d in runs.groupby("scenario"):
        vals = {c: g.set_index("seed")["quality"].dropna() for c, g in d.groupby("config")}
        ref = next((c for c in rules.reference_configs if len(vals.get(c, ())) >= rules.min_seeds), None)
        metric, sign = d["quality_name"].iloc[0], int(d["q_sign"].iloc[0])
        m = rules.min_effect_pct(metric)
        for c, v in vals.items():
            row = {"scenario": s, "config": c, "reference": ref, "metric": metric, "min_effect_pct": m,
                   "p_adj": math.nan, "verdict": "not tested"}
            if ref is None:
                row.update(n_config=len(v), reason=f"not tested: no reference config "
                           f"({', '.join(rules.reference_configs)}) has >= {rules.min_seeds} counted seeds on {s}")
            elif c == ref:
                row.update(n_config=len(v), n_reference=len(v), verdict="reference",
                           reason=f"the reference of {s} ({seeds(len(v))})")
            else:
                row.update(contrast(v, vals[ref], sign, rules))
                if row["paired"] is None:
                    row["reason"] = (f"not tested: {seeds(len(v))} of {c} and {len(vals[ref])} of the reference {ref} "
                                     f"({row['n_paired']} shared): needs >= {rules.min_seeds} of both to measure the "
                                     f"seed noise")
            rows.append(row)
    out = pd.DataFrame(rows, columns=COLUMNS)
    for s, g in out.groupby("scenario"):
        tested = g[g["p"].notna()]
        for i, p in adjust(dict(zip(tested.index, tested["p"])), rules).items():
            out.at[i, "p_adj"] = p
            out.at[i, "verdict"], out.at[i, "reason"] = _verdict(out.loc[i], rules)
    return out


def _verdict(r: pd.Series, rules: Rules) -> tuple[str, str]:
    """The verdict of one tested contrast, and its reason in words."""
    gap, lo, hi, m = r["gap_pct"], r["ci_low"], r["ci_high"], r["min_effect_pct"]
    how = (f"paired over {int(r['n_paired'])} seeds" if r["paired"] else
           f"unpaired: {int(r['n_config'])} and {int(r['n_reference'])} seeds, {int(r['n_paired'])} shared")
    side = "worse than" if gap >= 0 else "better than"
    exact = f", exact sign-flip p {r['p_exact']:.2g}" if r["paired"] else ""
    text = (f"{abs(gap):.2f}% {side} the reference {r['reference']} (CI of the gap [{lo:.2f}, {hi:.2f}]%, {how}; "
            f"{rules.multitest} p {r['p_adj']:.2g}{exact})")
    beyond = r["p_adj"] < 1 - rules.conf
    if beyond and gap > m:
        return "degraded", f"{text}: beyond seed noise and the {m:g}% minimum effect"
    if hi < m:
        return "safe", (f"{text}: no degradation of {m:g}% or more is compatible with the seeds"
                         + (" (a real but smaller gap)" if beyond and gap > 0 else ""))
    return "inconclusive", (f"{text}: the seeds allow a gap of {m:g}% or more but do not show one beyond seed "
                            f"noise and the minimum effect")
