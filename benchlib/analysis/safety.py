"""Where each config is safe (``safety``): three-valued, True only where measured seed noise says
no degradation that matters is compatible with the seeds. A config is judged against its
scenario's reference paired by seed (``contrasts``), not against the best of ~16 noisy means (a
best biased upward finds gaps that are not there); failing needs less evidence than safety (one
diverged or stalled run). Every role is judged; only candidates are ever recommended.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from benchlib.analysis.stats import Rules
from benchlib.analysis.tables import gated, seed_series, unhealthy, why_not_established

HARD_FAILURES = ("diverged", "oom", "error")
"""Run outcomes that are failures without any quality reference."""
COLUMNS = ["scenario", "config", "role", "runs", "ok", "reference", "best", "gap_pct", "ci_low", "ci_high", "p_adj",
           "p_exact", "n_paired", "paired", "tested", "verdict", "safe", "reason"]


def safety(df: pd.DataFrame, rules: Rules = Rules()) -> pd.DataFrame:
    """Per (scenario, config): ``verdict`` and ``safe`` (True / False / None = not known):
    ``failed`` (False: a run diverged, stalled, degraded in training, ran out of memory or
    failed), ``degraded`` (False: the paired gap to the reference is beyond seed noise and the
    minimum effect), ``safe`` and ``reference`` (True), ``inconclusive`` and ``not tested``
    (None: the seeds allow a gap that matters but do not show one; too few seeds),
    ``untestable`` (None: the scenario's quality is not established). ``gap_pct`` (positive:
    worse), its CI, ``p_adj`` (corrected over the scenario's configs) and ``p_exact`` (sign-flip
    test) come from the contrast; ``best`` names the scenario's best for reading; ``ok`` counts
    the healthy runs. Cells whose runs were all skipped (the hardware cannot run the config) are
    left out."""
    df = gated(df, rules)
    con = {(r["scenario"], r["config"]): r for r in df.attrs.get("contrasts", [])}
    q = seed_series(df, "quality")
    rows = []
    for (s, c), g in df.groupby(["scenario", "config"]):
        g = g[g["status"] != "skipped"]
        if g.empty:
            continue
        seeded = {cc: v.mean() for (ss, cc), v in q.items() if ss == s and len(v) >= rules.min_seeds}
        k = con.get((s, c), {})
        row = {"scenario": s, "config": c, "role": g["role"].iloc[0] if "role" in g else "candidate", "runs": len(g),
               "ok": int((g["health"] == "ok").sum()), "reference": k.get("reference"),
               "best": max(seeded, key=seeded.get) if seeded else None,
               **{col: k.get(col, np.nan) for col in ("gap_pct", "ci_low", "ci_high", "p_adj", "p_exact", "n_paired")},
               "paired": k.get("paired"), "tested": k.get("verdict") in ("safe", "degraded", "inconclusive"),
               "verdict": "not tested", "safe": None}
        bad = unhealthy(g)
        learned = g["learned"].iloc[0] is True
        # a run whose loss went non-finite (or the process broke) failed whatever the reference
        # learned; stalled or degraded mean something only against a reference that learned
        hard = unhealthy(g[g["health"].isin(HARD_FAILURES) | (g["health"] == "ok")])
        if not g["quality_established"].iloc[0] and hard and not (learned and bad):
            row.update(safe=False, verdict="failed", reason=hard)
        elif not g["quality_established"].iloc[0] and not (learned and bad):
            row.update(verdict="untestable", reason=f"not tested: quality not established on {s} "
                       f"({why_not_established(df, s)})" + (f"; runs: {bad}" if bad else ""))
        elif bad:
            row.update(safe=False, verdict="degraded" if k.get("verdict") == "degraded" else "failed", reason=bad)
        elif not k:
            row["reason"] = "not tested: no quality value"
        else:
            v = k["verdict"]
            row.update(verdict=v, reason=k["reason"], safe={"reference": True, "safe": True}.get(v))
        rows.append(row)
    out = pd.DataFrame(rows, columns=COLUMNS)
    out["safe"] = out["safe"].astype(object)
    return out
