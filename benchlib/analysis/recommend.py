"""Recommendations from one study's numbers (seed 000): the rules over ``safety.safety`` that name
its fastest config safe everywhere, the choice per task and what to avoid (``recommendations``). The
project's default is the answer's, across studies and beta2 arms (``pick``). Only candidates are ever picked (controls and
ablations are judged, never picked); configs identical for speed and memory (``cost_hash``) tie,
the first in registry order speaking for them; nothing is safe without measured noise where
quality is established.
"""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from benchlib.analysis.safety import safety  # noqa: F401 - re-exported: recommend.safety is the old name
from benchlib.analysis.gates import by_reason
from benchlib.analysis.stats import Rules
from benchlib.analysis.tables import config_order, gated, groups, label, why_not_established
from benchlib.core.dtypes import REGISTRY


PICK, NO_PICK = "fastest safe in this study: ", "no pick in this study: "
"""How a study's own recommendation opens: the project's default is the answer's across its studies
and beta2 arms (``pick``, ``executed/ANSWER.md``), never one study's."""


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
        on_est = speed_order([c for c, ss in safe.items() if est and set(est) <= ss])
        if why_not and on_est:
            rec["universal"].append(f"safe on every scenario whose quality is established ({', '.join(est)}): "
                                    + "; ".join(f"{c} ({numbers(c, est)})" for c in on_est))
        elif safe and any(safe.values()):
            most = max((c for c in safe if safe[c]),
                       key=lambda c: (len(safe[c]), -piv["throughput_rank"].loc[c].mean()))
            rec["universal"].append(f"safe on the most scenarios: {most} ({len(safe[most])}/{len(scns)}: "
                                    f"{', '.join(sorted(safe[most]))})")
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
