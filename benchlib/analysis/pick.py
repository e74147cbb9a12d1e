"""The default, by a rule a reader can check (``pick``), over the answer's arms: a quality study's
verdicts at each beta2 measured (``Arm``) and a speed study's throughput and memory.

The rule (``RULE``, printed under the answer table):

1. **Safe at every beta2.** A candidate qualifies where, in every arm, it is ``safe`` (or the
   reference) on every scenario whose quality entered verdicts there, was tested on at least one,
   and is nowhere failed, degraded or worse.
2. **Fastest by scenario wins.** Between two that qualify, ``a`` is faster than ``b`` when its
   throughput (x fp32, the speed study's, each config's runs alone on a GPU) is at least
   ``Rules.min_size_pct`` % higher, and higher beyond its seeds' noise (a one-sided Welch t-test at
   ``Rules.alpha``), on more of the speed study's scenarios than ``b``'s is on ``a``; equal counts
   go to the one lighter in peak memory by that much on more scenarios; else they tie and both are
   named. No mean over scenarios or GPUs breaks a tie.
3. **Else provisional.** Where nothing qualifies, the fastest candidate that is nowhere failed,
   degraded or worse at any beta2 is named as provisional, with the cells where it is not shown
   safe; a config the speed study did not time is never "fastest".
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from benchlib.analysis.stats import Rules
from benchlib.analysis.tables import config_order

BROKEN = ("failed", "degraded", "worse")
PASS = ("safe", "reference")
ENTERED = ("safe", "degraded", "worse", "inconclusive", "reference")  # quality entered verdicts there


@dataclass
class Arm:
    """One beta2's verdicts: ``cells`` (``answer.cells``: scenario, config, verdict, ...)."""
    name: str
    beta2: float
    cells: pd.DataFrame
    recipe: dict

    @property
    def label(self) -> str:
        return f"beta2 {self.beta2:g}"

    def established(self) -> list[str]:
        return sorted(set(self.cells.loc[self.cells["verdict"].isin(ENTERED), "scenario"]))

    def qualifies(self, config: str) -> bool:
        g = self.cells[self.cells["config"] == config]
        on = g[g["scenario"].isin(self.established())]
        return len(on) > 0 and set(on["verdict"]) <= set(PASS) and not g["verdict"].isin(BROKEN).any() \
            and set(on["scenario"]) == set(self.established())

    def broken(self, config: str) -> list[str]:
        g = self.cells[(self.cells["config"] == config) & self.cells["verdict"].isin(BROKEN)]
        return [f"{s} {v}" for s, v in zip(g["scenario"], g["verdict"])]

    def not_shown(self, config: str) -> list[str]:
        """The established scenarios where ``config`` is not shown safe here, and how (or not run)."""
        g = self.cells[self.cells["config"] == config].set_index("scenario")["verdict"]
        return [f"{s} ({g.get(s, 'not run')})" for s in self.established() if g.get(s) not in PASS]


def _table(stats: pd.DataFrame, metric: str) -> pd.DataFrame:
    """config x scenario of a metric's mean over seeds (a ratio of two is the same against any
    reference, and needs none)."""
    t = stats[stats["metric"] == metric]
    col = "mean" if "mean" in t and t["mean"].notna().any() else "rel"
    return t.pivot(index="config", columns="scenario", values=col)


def faster(stats: pd.DataFrame, a: str, b: str, pct: float, alpha: float = Rules.alpha) -> int:
    """+1 where ``a`` is faster than ``b`` by rule 2 (module docstring), -1 where ``b`` is, 0 a tie.
    A scenario counts for one side where its mean is ``pct`` % better and, where both have seeds'
    spreads (``std``, ``n`` >= 2), the difference is beyond seed noise (``beyond_noise``)."""
    for metric, better in (("throughput", 1), ("memory", -1)):
        t = _table(stats, metric).reindex(index=[a, b])
        ratio = (t.loc[a] / t.loc[b]).dropna() ** better
        wins = sum(r >= 1 + pct / 100 and beyond_noise(stats, metric, s, a, b, alpha) for s, r in ratio.items())
        losses = sum(r <= 1 / (1 + pct / 100) and beyond_noise(stats, metric, s, b, a, alpha) for s, r in ratio.items())
        if wins != losses:
            return 1 if wins > losses else -1
    return 0


def beyond_noise(stats: pd.DataFrame, metric: str, scenario: str, better: str, worse: str, alpha: float) -> bool:
    """Whether ``better`` beats ``worse`` on ``metric`` on ``scenario`` beyond the seeds' noise: a
    one-sided Welch t-test on the seeds' mean, sd and count (scipy's ``ttest_ind_from_stats``) at
    ``alpha``; True where a side has no spread to test (one seed, or none recorded): the gap alone
    decides there, as before."""
    from scipy import stats as st
    rows = stats[(stats["metric"] == metric) & (stats["scenario"] == scenario)].set_index("config")
    need = {"mean", "std", "n"}
    if not need <= set(rows.columns) or better not in rows.index or worse not in rows.index:
        return True
    x, y = rows.loc[better], rows.loc[worse]
    if any(pd.isna(v) for v in (x["std"], y["std"], x["n"], y["n"])) or min(x["n"], y["n"]) < 2:
        return True
    if x["std"] == 0 and y["std"] == 0:
        return x["mean"] != y["mean"]
    sign = 1 if metric == "throughput" else -1  # more tokens/s, fewer GiB
    p = st.ttest_ind_from_stats(sign * x["mean"], x["std"], int(x["n"]), sign * y["mean"], y["std"], int(y["n"]),
                                equal_var=False, alternative="greater").pvalue
    return bool(p < alpha)


def fastest(stats: pd.DataFrame, configs: list[str], pct: float) -> tuple[list[str], list[str]]:
    """(the configs no other of ``configs`` is faster than, by ``faster``; those not timed on every
    scenario of the speed study)."""
    timed = _table(stats, "throughput").reindex(index=configs)
    missing = [c for c in configs if timed.loc[c].isna().any()]
    pool = [c for c in configs if c not in missing]
    top = [c for c in pool if not any(faster(stats, d, c, pct) > 0 for d in pool if d != c)]
    return config_order(top), missing


def pick(arms: list[Arm], stats: pd.DataFrame | None, rules: Rules = Rules()) -> dict:
    """``kind`` (default / tie / provisional / none), ``configs`` (the pick, several on a tie),
    ``sentence`` (Markdown, bold), ``per_arm`` (beta2 label -> the candidates qualifying there) and
    ``rule`` (``RULE``'s text with this answer's arms and speed scenarios)."""
    refs = set().union(*(set(a.cells.loc[a.cells["verdict"] == "reference", "config"]) for a in arms))
    cands = config_order(set().union(*(set(a.cells["config"]) for a in arms)) - refs)  # a reference is no pick
    per_arm = {a.label: [c for c in cands if a.qualifies(c)] for a in arms}
    every = [c for c in cands if all(a.qualifies(c) for a in arms)]
    on = sorted(stats.loc[stats["metric"] == "throughput", "scenario"].unique()) if stats is not None else []
    out = {"per_arm": per_arm, "rule": rule_text(arms, on, rules), "configs": [], "kind": "none"}
    where = ", ".join(f"{a.label}: {', '.join(a.established()) or 'none'}" for a in arms)
    if every and stats is not None:
        top, missing = fastest(stats, every, rules.min_size_pct)
        if not top:
            out["sentence"] = (f"**No default yet**: {', '.join(every)} shown safe everywhere ({where}), but the speed "
                               f"study has not timed {', '.join(missing)} on each of {', '.join(on)}.")
            return out
        if top:
            out.update(kind="default" if len(top) == 1 else "tie", configs=top)
            out["sentence"] = (f"**Default: {' and '.join(top)}**" + (" (tied by the rule)" if len(top) > 1 else "")
                               + f" - shown safe on every scenario that entered verdicts ({where})"
                               + (f"; not timed: {', '.join(missing)}" if missing else "") + ".")
            return out
    shown = "; ".join(f"at {k}: {', '.join(v) or 'none'}" for k, v in per_arm.items())
    ok = [c for c in cands if not any(a.broken(c) for a in arms)]
    top, missing = fastest(stats, ok, rules.min_size_pct) if stats is not None else ([], ok)
    gaps = {c: "; ".join(f"at {a.label} on {', '.join(a.not_shown(c))}" for a in arms if a.not_shown(c)) for c in top}
    if top:
        out.update(kind="provisional", configs=top)
        out["sentence"] = (f"**No default under the rules**: no candidate is shown safe on every scenario that entered "
                           f"verdicts at every beta2 measured ({where}; safe everywhere {shown}). **Provisional: "
                           + " and ".join(top) + "**, the fastest candidate that nowhere failed, degraded or came "
                           "out worse; " + "; ".join(f"{c} is not shown safe {g}" for c, g in gaps.items()) + ".")
    else:
        out["sentence"] = (f"**No default**: no candidate is shown safe everywhere ({shown}), and none timed by the "
                           f"speed study is free of failures" + (f" (not timed: {', '.join(missing)})" if missing else "")
                           + ".")
    return out


def rule_text(arms: list[Arm], on: list[str], rules: Rules) -> str:
    """The rule in one paragraph, with this answer's arms and the speed study's scenarios."""
    return (f"**The rule.** A default is a candidate shown safe (its loss against the reference below the "
            f"minimum effect at a one-sided {1 - rules.alpha:.0%} t-bound: {rules.min_effect_loss_pct:g}% of a loss, "
            f"{rules.min_effect_score_pct:g}% of a score) on every scenario whose quality entered verdicts, at every "
            f"beta2 measured ({', '.join(a.label for a in arms)}), and nowhere failed, degraded or worse. Among those, "
            f"a is faster than b when its throughput is >= {rules.min_size_pct:g}% higher, and higher beyond the seeds' "
            f"noise (one-sided Welch t-test at {rules.alpha:g}), on more of the speed studies' "
            f"scenarios ({', '.join(on) or 'none'}) than the other way round; equal counts go to the one >= "
            f"{rules.min_size_pct:g}% lighter in peak memory (by the same test) on more scenarios; otherwise both are named. No mean over "
            f"scenarios or GPUs breaks a tie. With no such candidate, the fastest one never failed, degraded or worse "
            f"is named as provisional, with where it is not shown safe.")


def speed_multipliers(stats: pd.DataFrame, against: tuple[str, ...]) -> pd.DataFrame:
    """Per (scenario, config): throughput as a multiple of each config in ``against`` on that scenario."""
    t = stats[stats["metric"] == "throughput"].pivot(index="config", columns="scenario", values="mean")
    rows = []
    for c in t.index:
        for s in t.columns:
            rows.append({"scenario": s, "config": c, **{f"x_{a}": (t.loc[c, s] / t.loc[a, s]
                                                                     if a in t.index else np.nan) for a in against}})
    return pd.DataFrame(rows)
