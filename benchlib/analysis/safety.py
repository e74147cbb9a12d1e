"""Where each config is safe (``safety``): three-valued, True only where measured seed noise rules
out a degradation that matters against the scenario's reference, paired by seed (``contrasts``;
not against the best of ~16 noisy means, biased upward); one failed run suffices to fail.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from benchlib.analysis.contrasts import TESTED
from benchlib.analysis.stats import Rules
from benchlib.analysis.tables import gated, seed_series, unhealthy, why_not_established

HARD_FAILURES = ("diverged", "oom", "error")  # failures without any quality reference
COLUMNS = ["scenario", "config", "role", "runs", "ok", "reference", "best", "gap_pct", "ci_low", "ci_high", "p_adj",
           "p_exact", "n_paired", "paired", "tested", "verdict", "safe", "reason", "metric2", "judged2", "gap2_pct",
           "ci2_low", "ci2_high", "verdict2"]


def safety(df: pd.DataFrame, rules: Rules = Rules()) -> pd.DataFrame:
    """Per (scenario, config): ``verdict`` and ``safe``: ``failed`` / ``degraded`` (False), ``safe`` /
    ``reference`` (True), ``inconclusive`` / ``not tested`` / ``untestable`` (None); the contrast's
    ``gap_pct`` (> 0 worse), CI and p-values; ``best`` (for reading) and ``ok`` (healthy runs).
    Cells whose runs were all skipped are left out."""
    df = gated(df, rules)
    con = {(r["scenario"], r["config"]): r for r in df.attrs.get("contrasts", [])}
    shown = {(r["scenario"], r["config"]): r for r in df.attrs.get("contrasts_for_reading", [])}
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
               **{col: k.get(col) for col in ("metric2", "judged2", "gap2_pct", "ci2_low", "ci2_high", "verdict2")},
               "paired": k.get("paired"), "tested": k.get("verdict") in TESTED,
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
            # what was measured there, for reading beside the verdict (it enters none)
            row.update({col: shown.get((s, c), {}).get(col, np.nan) for col in ("gap_pct", "ci_low", "ci_high",
                                                                                 "gap2_pct", "ci2_low", "ci2_high")})
            row["metric2"] = shown.get((s, c), {}).get("metric2")
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
