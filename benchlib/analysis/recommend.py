"""Which config to use, three ways over one verdict. ``safety``: where each config is safe, three-valued,
True only where measured seed noise rules out a degradation that matters against the scenario's
reference, paired by seed (``contrasts``; not against the best of ~16 noisy means, biased upward);
one failed run suffices to fail. ``recommendations``: one study's numbers (seed 000), the rules over
``safety`` that name its fastest config safe everywhere, the choice per task and what to avoid.
Only candidates are ever picked (controls and ablations are judged, never picked); configs identical
for speed and memory (``cost_hash``) tie, the first in registry order speaking for them; nothing is
safe without measured noise where quality is established. ``pick``: the project's default, the
answer's, across studies and beta2 arms (``Arm``), by a rule a reader can check: a quality study's
verdicts at each beta2 measured and a speed study's throughput and memory.

The rule (``rule_text``, printed under the answer table):

1. **Safe at every beta2.** A candidate qualifies where, in every arm, it is ``safe`` (or the
   reference) on every scenario whose quality entered verdicts there, was tested on at least one,
   and is nowhere failed, degraded or worse.
2. **Fastest by scenario wins.** Between two that qualify, ``a`` is faster than ``b`` when its
   throughput (x fp32, the speed study's, each config's runs alone on a GPU) is at least
   ``Rules.min_size_pct`` % higher, and higher beyond its seeds' noise (a one-sided t-test at
   ``Rules.alpha``, paired by seed where a seed's two runs shared a GPU, else Welch's), on more
   of the speed study's scenarios than ``b``'s is on ``a``; equal counts
   go to the one lighter in peak memory by that much on more scenarios; else they tie and both are
   named. No mean over scenarios or GPUs breaks a tie.
3. **Else provisional.** Where nothing qualifies, the fastest candidate that is nowhere failed,
   degraded or worse at any beta2, and nowhere measured a loss at or beyond the minimum effect (a
   cell no number of seeds could show safe at its recipe: ``beyond``), is named as provisional, with
   the cells where it is not shown safe and the faster ones left out for their measured loss; a
   config the speed study did not time is never "fastest".
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from benchlib.analysis.gates import by_reason
from benchlib.analysis.stats import Rules
from benchlib.analysis.contrasts import CHECKPOINT_COLUMNS, TESTED
from benchlib.analysis.tables import (config_order, gated, groups, label, seed_series, unhealthy,
                                     why_not_established)
from benchlib.core.dtypes import REGISTRY

PICK, NO_PICK = "fastest safe in this study: ", "no pick in this study: "
"""How a study's own recommendation opens: the project's default is the answer's across its studies
and beta2 arms (``pick``, ``executed/ANSWER.md``), never one study's."""
HARD_FAILURES = ("diverged", "oom", "error")  # failures without any quality reference
COLUMNS = ["scenario", "config", "role", "runs", "ok", "reference", "best", "gap_pct", "ci_low", "ci_high", "p_adj",
           "p_exact", "n_paired", "paired", "tested", "verdict", "safe", "reason", "metric2", "judged2", "gap2_pct",
           "ci2_low", "ci2_high", "verdict2", *CHECKPOINT_COLUMNS]


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
               **{col: k.get(col) for col in ("metric2", "judged2", "gap2_pct", "ci2_low", "ci2_high", "verdict2",
                                              *CHECKPOINT_COLUMNS)},
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


def candidates(saf: pd.DataFrame) -> set:
    """The configs of a safety frame that may be recommended (without a role column: the registry's)."""
    if "role" in saf:
        return set(saf.loc[saf["role"].fillna("candidate").eq("candidate"), "config"])
    return {c for c in saf["config"] if c not in REGISTRY or REGISTRY[c].role == "candidate"}


def cost_alias(df: pd.DataFrame) -> dict[str, str]:
    """config -> the first config in registry order identical to it for speed and memory everywhere."""
    if "cost_hash" not in df:
        return {}
    key = {c: tuple(sorted({(s, h) for s, h in zip(g["scenario"], g["cost_hash"])}))
           for c, g in df.groupby("config")}
    first: dict = {}
    return {c: first.setdefault(key[c], c) for c in config_order(key)}


def recommendations(df: pd.DataFrame, stats: pd.DataFrame, rules: Rules = Rules()) -> tuple[dict, pd.DataFrame]:
    """Lines over ``safety`` and the safety frame (``recommended`` marks each scenario's pick):
    ``universal`` = configs safe on every scenario, fastest first (the first is this study's pick; the
    leanest named for memory-bound work), or why there is none; ``per_task[s]`` = the
    fastest safe config on s and configs to avoid there; ``lm_specific`` / ``cls_specific`` = safe
    on one group, unsafe on the other; ``avoid`` = safe nowhere. Every line carries its numbers."""
    df = gated(df, rules)
    saf = safety(df, rules)
    saf["recommended"] = False
    cand = candidates(saf)
    alias = cost_alias(df)
    scns = sorted(saf["scenario"].unique())
    est = [s for s in scns if df.loc[df["scenario"] == s, "quality_established"].iloc[0]]
    why_not = {s: why_not_established(df, s) for s in scns if s not in est}
    piv = _pivots(stats)
    mine = saf[saf["config"].isin(cand)]
    safe = {c: set(g.loc[g["safe"].eq(True), "scenario"]) for c, g in mine.groupby("config")}
    unsafe = {c: set(g.loc[g["safe"].eq(False), "scenario"]) for c, g in mine.groupby("config")}
    speed_order = functools.partial(_speed_order, piv, alias=alias)  # (configs, on=None): fastest first
    numbers = functools.partial(_numbers, piv)  # (config, on): speed and memory vs fp32 in words
    untested = mine[mine["safe"].isna() & mine["scenario"].isin(est)]
    short = (f"{len(untested)} of {int(mine['scenario'].isin(est).sum())} (scenario, candidate) cells are not shown "
             f"safe ({', '.join(f'{n} {v}' for v, n in untested['verdict'].value_counts().items())}: too few seeds, or "
             f"seeds that allow a degradation of the minimum effect)") if len(untested) else ""
    rec = {"universal": [], "lm_specific": [], "cls_specific": [], "per_task": {}, "avoid": []}
    universal = speed_order([c for c, ss in safe.items() if set(scns) <= ss]) if est and not why_not else []
    every = (f"safe on all {len(scns)} scenarios ({', '.join(scns)}: every run healthy, and no quality loss "
             f"against the reference (fp32 where it ran) of the minimum effect or more is compatible with the seeds)")
    # a default is the fastest of them: without a speed measurement there is none to name
    timed = bool(universal) and bool(piv["throughput_rank"].loc[universal].notna().any(axis=None))
    if universal and not timed:
        rec["universal"].append(f"{NO_PICK}{len(universal)} configs are safe on every scenario and this "
                                f"study measured no speed to choose between them (runs shared a GPU); the "
                                f"speed study does")
    for i, c in enumerate(universal):
        rec["universal"].append(f"{PICK if i == 0 and timed else ''}{c} - {every}; {numbers(c, scns)}")
    if len(universal) > 1:
        lean = min(universal, key=lambda c: piv["memory_rank"].loc[c].mean())
        if lean != universal[0] or not timed:
            rec["universal"].append(f"memory-bound: {lean} - lowest memory of the universally safe configs; "
                                    f"{numbers(lean, scns)}")
    if not universal:
        why = ([f"quality not established on {', '.join(why_not)} ("
                + by_reason(why_not) + ")"] if why_not else [])
        why += [short] if short else []
        rec["universal"].append(NO_PICK + ("; ".join(why) or "no config is safe on every scenario"))
        # shown safe by a test: a scenario's reference passes without one, and is not named here
        tested = {c: ss for c, ss in ((c, set(g.loc[g["verdict"].eq("safe"), "scenario"]))
                                      for c, g in mine.groupby("config")) if ss}
        on_est = speed_order([c for c, ss in tested.items() if est and set(est) <= ss])
        if why_not and on_est:
            rec["universal"].append(f"safe on every scenario whose quality is established ({', '.join(est)}): "
                                    + "; ".join(f"{c} ({numbers(c, est)})" for c in on_est))
        elif tested:
            most = max(tested, key=lambda c: (len(tested[c]), -piv["throughput_rank"].loc[c].mean()))
            rec["universal"].append(f"safe on the most scenarios: {most} ({len(tested[most])}/{len(scns)}: "
                                    f"{', '.join(sorted(tested[most]))})")
    default = universal[0] if universal and timed else None
    for s in scns:
        if s not in est:
            rec["per_task"][s] = [f"{s}: no recommendation: quality not established ({why_not[s]})"]
            continue
        here = mine[mine["scenario"] == s].set_index("config")
        lines = []
        fast = speed_order([c for c in here.index if here.loc[c, "safe"] is True], on=[s])
        if fast:
            c = fast[0]
            saf.loc[(saf["scenario"] == s) & (saf["config"] == c), "recommended"] = True
            g = piv["quality_gain"].loc[c, s]
            timed = piv["throughput_rank"].loc[fast, [s]].notna().any(axis=None)
            lines.append(f"{s}: {'fastest' if timed else 'a'} safe config {c} ({numbers(c, [s])}"
                         + (f", {label(df.attrs['quality_metric'][s]['name'])} {round(g, 2) + 0.0:+.2f}% vs fp32"
                            if pd.notna(g) else "") + ")"
                         + ("" if c == default else f"; differs from this study's pick {default}" if default else ""))
        else:
            unknown = here.loc[here["safe"].isna(), "verdict"].value_counts()
            lines.append(f"{s}: no candidate config is shown safe" + (
                f" ({int(unknown.sum())} not known: {', '.join(f'{n} {v}' for v, n in unknown.items())})"
                if len(unknown) else ""))
        for c in here.index[here["safe"].eq(False)]:
            if safe.get(c):
                lines.append(f"{s}: avoid {c} - {here.loc[c, 'reason']} (safe on {', '.join(sorted(safe[c]))})")
        rec["per_task"][s] = lines
    g = groups(scns)
    for name, own, other in (("lm_specific", g["lm"], g["cls"]), ("cls_specific", g["cls"], g["lm"])):
        for c in speed_order([c for c, ss in safe.items() if own and other and set(own) <= ss
                              and unsafe.get(c, set()) & set(other)]):
            bad = mine[(mine["config"] == c) & mine["safe"].eq(False) & mine["scenario"].isin(other)]
            why = by_reason(dict(zip(bad["scenario"], bad["reason"])))
            rec[name].append(f"{c} - safe on {'LM' if name == 'lm_specific' else 'classification'} "
                             f"({', '.join(own)}) but not on {why}; {numbers(c, own)}")
    for c in sorted(c for c in unsafe if unsafe[c] and not safe.get(c)):
        bad = mine[(mine["config"] == c) & mine["safe"].eq(False)]
        why = by_reason(dict(zip(bad["scenario"], bad["reason"])))
        rec["avoid"].append(f"{c} - safe on no scenario; unsafe on {why}")
    return rec, saf


def _speed_order(piv: dict, cs, on=None, alias: dict | None = None) -> list:
    """Fastest first by mean throughput rank over ``on`` (default all); a config with a speed
    ``alias`` takes its rank and follows it; equal mean ranks go by the geometric mean of the
    throughput ratio to fp32 (a rank says nothing of how much faster), then by order in ``cs``."""
    ranks = piv["throughput_rank"] if on is None else piv["throughput_rank"][on]
    rel = piv["throughput_rel"] if on is None else piv["throughput_rel"].reindex(columns=on)
    alias = alias or {}

    def key(c):
        a = alias.get(c, c)
        a = a if a in ranks.index else c
        r = rel.loc[a].dropna() if a in rel.index else pd.Series(dtype=float)
        geo = float(np.exp(np.log(r[r > 0]).mean())) if (r > 0).any() else 0.0
        return ranks.loc[a].mean(), a != c, -geo
    return sorted(cs, key=key)


def _numbers(piv: dict, c: str, on) -> str:
    """A config's speed and memory vs fp32 over the scenarios ``on``, in words."""
    t, m = piv["throughput_rel"].loc[c, on].dropna(), piv["memory_rel"].loc[c, on].dropna()
    if len(t):
        spread = f"; {t.min():.2f}-{t.max():.2f}x" if t.max() - t.min() >= 0.01 else ""
        out = f"throughput {np.exp(np.log(t).mean()):.2f}x fp32" + (
            f" (geo-mean over {', '.join(t.index)}{spread})" if len(t) > 1 else f" on {t.index[0]}")
        return out + (f", memory {np.exp(np.log(m).mean()):.2f}x fp32" if len(m) else "")
    rank = piv["throughput_rank"].loc[c, on].mean()
    return ("speed not measured in this study" if pd.isna(rank) else f"mean throughput rank {rank:.1f}")


def recommended_configs(saf: pd.DataFrame) -> dict[str, str]:
    """Scenario -> the config ``recommendations`` picked there (its safety frame's ``recommended``)."""
    if "recommended" not in saf:
        return {}
    rows = saf[saf["recommended"].eq(True)]
    return dict(zip(rows["scenario"], rows["config"]))


def _pivots(stats: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """config x scenario tables of throughput/memory rank, ratio to fp32, and quality gain."""
    def p(metric, col):
        return stats[stats["metric"] == metric].pivot(index="config", columns="scenario", values=col)
    return {"throughput_rank": p("throughput", "rank"), "memory_rank": p("memory", "rank"),
            "throughput_rel": p("throughput", "rel"), "memory_rel": p("memory", "rel"),
            "quality_gain": p("quality", "gain_pct")}


# ---- the answer's default, across studies and beta2 arms -----------------------------------
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


def faster(stats: pd.DataFrame, a: str, b: str, pct: float, alpha: float = Rules.alpha,
           per_seed: pd.DataFrame | None = None) -> int:
    """+1 where ``a`` is faster than ``b`` by rule 2 (module docstring), -1 where ``b`` is, 0 a tie.
    A scenario counts for one side where its mean is ``pct`` % better and, where both have seeds'
    spreads (``std``, ``n`` >= 2), the difference is beyond seed noise (``beyond_noise``)."""
    for metric, better in (("throughput", 1), ("memory", -1)):
        t = _table(stats, metric).reindex(index=[a, b])
        ratio = (t.loc[a] / t.loc[b]).dropna() ** better
        wins = sum(r >= 1 + pct / 100 and beyond_noise(stats, metric, s, a, b, alpha, per_seed)
                   for s, r in ratio.items())
        losses = sum(r <= 1 / (1 + pct / 100) and beyond_noise(stats, metric, s, b, a, alpha, per_seed)
                     for s, r in ratio.items())
        if wins != losses:
            return 1 if wins > losses else -1
    return 0


def paired_seeds(per_seed: pd.DataFrame | None, metric: str, scenario: str, a: str, b: str) -> pd.DataFrame:
    """seed -> (a's, b's) ``metric`` on ``scenario``, for the seeds whose two runs ran on one GPU
    (``per_seed``: scenario, config, seed, gpu and the metrics, a run a row); empty without."""
    if per_seed is None or per_seed.empty:
        return pd.DataFrame(columns=[a, b])
    rows = per_seed[(per_seed["scenario"] == scenario) & per_seed["config"].isin([a, b]) & per_seed["gpu"].notna()]
    wide = rows.pivot_table(index="seed", columns="config", values=[metric, "gpu"], aggfunc="first")
    if metric not in wide or not {a, b} <= set(wide[metric].columns):
        return pd.DataFrame(columns=[a, b])
    same = wide["gpu"][a] == wide["gpu"][b]
    return wide[metric].loc[same, [a, b]].dropna().astype(float)


def beyond_noise(stats: pd.DataFrame, metric: str, scenario: str, better: str, worse: str, alpha: float,
                 per_seed: pd.DataFrame | None = None) -> bool:
    """Whether ``better`` beats ``worse`` on ``metric`` on ``scenario`` beyond the seeds' noise: a
    one-sided t-test at ``alpha``, paired by seed (on the per-seed differences) where at least two seeds
    ran both configs on one GPU (``paired_seeds``: the GPU-to-GPU difference then cancels), else
    Welch's on the seeds' mean, sd and count (``ttest_ind_from_stats``); True where a side has no
    spread to test (one seed, or none recorded): the gap alone decides there, as before."""
    from scipy import stats as st
    sign = 1 if metric == "throughput" else -1  # more tokens/s, fewer GiB
    pairs = paired_seeds(per_seed, metric, scenario, better, worse)
    if len(pairs) >= 2:
        d = sign * (pairs[better] - pairs[worse])  # per seed; ttest_1samp on it is ttest_rel
        if d.std() == 0:
            return bool(d.mean() > 0)
        return bool(st.ttest_1samp(d, 0.0, alternative="greater").pvalue < alpha)
    rows = stats[(stats["metric"] == metric) & (stats["scenario"] == scenario)].set_index("config")
    need = {"mean", "std", "n"}
    if not need <= set(rows.columns) or better not in rows.index or worse not in rows.index:
        return True
    x, y = rows.loc[better], rows.loc[worse]
    if any(pd.isna(v) for v in (x["std"], y["std"], x["n"], y["n"])) or min(x["n"], y["n"]) < 2:
        return True
    if x["std"] == 0 and y["std"] == 0:
        return x["mean"] != y["mean"]
    p = st.ttest_ind_from_stats(sign * x["mean"], x["std"], int(x["n"]), sign * y["mean"], y["std"], int(y["n"]),
                                equal_var=False, alternative="greater").pvalue
    return bool(p < alpha)


def fastest(stats: pd.DataFrame, configs: list[str], pct: float,
            per_seed: pd.DataFrame | None = None) -> tuple[list[str], list[str]]:
    """(the configs no other of ``configs`` is faster than, by ``faster``; those not timed on every
    scenario of the speed study)."""
    timed = _table(stats, "throughput").reindex(index=configs)
    missing = [c for c in configs if timed.loc[c].isna().any()]
    pool = [c for c in configs if c not in missing]
    top = [c for c in pool if not any(faster(stats, d, c, pct, per_seed=per_seed) > 0 for d in pool if d != c)]
    return config_order(top), missing


def pick(arms: list[Arm], stats: pd.DataFrame | None, rules: Rules = Rules(),
         beyond: dict[str, list[str]] | None = None, per_seed: pd.DataFrame | None = None) -> dict:
    """``kind`` (default / tie / provisional / none), ``configs`` (the pick, several on a tie),
    ``sentence`` (Markdown, bold), ``per_arm`` (beta2 label -> the candidates qualifying there) and
    ``rule`` (``RULE``'s text with this answer's arms and speed scenarios). ``beyond``: config -> the
    cells ("beta2 0.999 on A") where its measured loss is at or beyond the minimum effect, which
    keep it from being provisional (rule 3)."""
    refs = set().union(*(set(a.cells.loc[a.cells["verdict"] == "reference", "config"]) for a in arms))
    cands = config_order(set().union(*(set(a.cells["config"]) for a in arms)) - refs)  # a reference is no pick
    per_arm = {a.label: [c for c in cands if a.qualifies(c)] for a in arms}
    every = [c for c in cands if all(a.qualifies(c) for a in arms)]
    on = sorted(stats.loc[stats["metric"] == "throughput", "scenario"].unique()) if stats is not None else []
    out = {"per_arm": per_arm, "rule": rule_text(arms, on, rules), "configs": [], "kind": "none"}
    where = ", ".join(f"{a.label}: {', '.join(a.established()) or 'none'}" for a in arms)
    if every and stats is not None:
        top, missing = fastest(stats, every, rules.min_size_pct, per_seed)
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
    beyond = {c: v for c, v in (beyond or {}).items() if v}
    unbroken = [c for c in cands if not any(a.broken(c) for a in arms)]
    ok = [c for c in unbroken if c not in beyond]
    top, missing = fastest(stats, ok, rules.min_size_pct, per_seed) if stats is not None else ([], ok)
    gaps = {c: "; ".join(f"at {a.label} on {', '.join(a.not_shown(c))}" for a in arms if a.not_shown(c)) for c in top}
    # the candidates left out for a measured loss that would otherwise have been as fast or faster
    left = [c for c in unbroken if c in beyond and stats is not None and top
            and not any(faster(stats, t, c, rules.min_size_pct, per_seed=per_seed) > 0 for t in top)]
    if top:
        out.update(kind="provisional", configs=top)
        out["sentence"] = (f"**No default under the rules**: no candidate is shown safe on every scenario that entered "
                           f"verdicts at every beta2 measured ({where}; safe everywhere {shown}). **Provisional: "
                           + " and ".join(top) + "**, the fastest candidate that nowhere failed, degraded or came "
                           "out worse, nor measured a loss at or beyond the minimum effect; "
                           + "; ".join(f"{c} is not shown safe {g}" for c, g in gaps.items())
                           + "".join(f"; {c}, not slower, is left out: its measured loss reaches the minimum effect "
                                     f"at {', '.join(beyond[c])}" for c in left) + ".")
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
            f"noise (one-sided t-test at {rules.alpha:g}: paired by seed where a seed's two runs shared a GPU, else "
            f"Welch's), on more of the speed studies' "
            f"scenarios ({', '.join(on) or 'none'}) than the other way round; equal counts go to the one >= "
            f"{rules.min_size_pct:g}% lighter in peak memory (by the same test) on more scenarios; otherwise both are named. No mean over "
            f"scenarios or GPUs breaks a tie. With no such candidate, the fastest one never failed, degraded or worse, "
            f"and nowhere with a measured loss at or beyond the minimum effect, is named as provisional, with where "
            f"it is not shown safe.")
