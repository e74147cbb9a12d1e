"""Recommendations from a study's numbers (seed 000): where each config is safe (``safety``:
three-valued, True only where measured seed noise says so) and the rules over it that name a
default, the choice per task and what to avoid (``recommendations``).

Nothing is called safe, and no default is named, without measured noise: that takes
>= ``Rules.min_seeds`` ok seeds of the config and of the scenario's reference config, in a scenario
whose quality is established (its reference learned: ``analysis.learned_scenarios``). Failure
needs less evidence than safety: one diverged, degraded or stalled run, or a quality gap to the
reference beyond ``Rules.untested_gap_pct``, makes a config unsafe from one seed. A config is
judged against the scenario's reference config (fp32_baseline), not its best: the best of ~16
noisy means is biased upward, and 'worse than the best' then finds gaps that are not there.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from benchlib.analysis.tables import gated, groups, label, unhealthy, why_not_established
from benchlib.analysis.stats import Rules, bootstrap_means
from benchlib.analysis.tables import seed_values


def _seeds(n: int) -> str:
    return "one seed" if n == 1 else f"{n} seeds"


def holm(p: dict) -> dict:
    """Holm-Bonferroni adjusted p-values of a family of tests (key -> p), each the smallest
    family-wise level at which step-down Holm rejects it. (scipy has Benjamini-Hochberg only.)"""
    keys = sorted(p, key=p.get)
    m, out, run = len(keys), {}, 0.0
    for i, k in enumerate(keys):
        run = max(run, min(1.0, (m - i) * p[k]))
        out[k] = run
    return out


def _anchor(means: dict, q: dict, s: str, rules: Rules) -> tuple[str | None, str | None]:
    """(reference, best) of scenario ``s``. The reference, against which a config's quality is
    judged, is the first of ``rules.reference_configs`` with >= min_seeds ok seeds (else with
    any): fixed before the data are seen. The best, shown beside it, is the best of the configs
    with >= min_seeds ok seeds where there are any."""
    seeded = {c: m for c, m in means.items() if len(q[s, c]) >= rules.min_seeds} or means
    best = max(seeded, key=seeded.get) if seeded else None
    ref = (next((c for c in rules.reference_configs if c in seeded and len(q[s, c]) >= rules.min_seeds), None)
           or next((c for c in rules.reference_configs if c in means), None) or best)
    return ref, best


def safety(df: pd.DataFrame, rules: Rules = Rules()) -> pd.DataFrame:
    """Per (scenario, config): ``safe`` = True, False or None (not tested). False when a run is
    not healthy (diverged, degraded, stalled, oom, error: ``analysis`` health), or the quality
    is worse than the scenario's reference config (fp32_baseline: ``_anchor``) beyond seed
    noise and beyond ``rules.equivalent_pct``, or, where the noise is not measured, more than
    ``rules.untested_gap_pct`` % below the reference. Beyond seed noise: the bootstrap share
    of resamples where the reference is better (``support``), Holm-corrected over the
    scenario's configs (``support_adj`` = 1 - Holm's adjusted p), reaches ``rules.conf``.
    Judged against the best of ~16 noisy 3-seed means instead, the maximum's upward bias called
    configs 'worse' on gaps three seeds cannot tell from noise (the reference study named
    amp_bf16 'avoid' on E for 0.69%; against fp32 it is 0.15% and within noise).
    True only when ``tested``: both the config and the reference have >= min_seeds ok seeds
    and the test does not call it worse. None otherwise: one seed, or a scenario whose quality
    is not established (there even a failed run says nothing about the config: nothing
    learned). ``gap_pct`` is the gap to the reference (positive: worse); ``best`` names the
    scenario's best for reading. ``ok`` counts the healthy runs. Cells whose runs were all
    skipped (the hardware cannot run the config) are left out."""
    df = gated(df, rules)
    q = seed_values(df, "quality")
    boot = bootstrap_means({k: v for k, v in q.items() if len(v) >= rules.min_seeds}, rules.n_boot,
                           np.random.default_rng(rules.seed + 2))
    gate = {s: why_not_established(df, s) for s in df["scenario"].unique()}
    rows = []
    for (s, c), g in df.groupby(["scenario", "config"]):
        g = g[g["status"] != "skipped"]
        if g.empty:
            continue
        means = {cc: v.mean() for (ss, cc), v in q.items() if ss == s}
        ref, best = _anchor(means, q, s, rules)
        row = {"scenario": s, "config": c, "runs": len(g), "ok": int((g["health"] == "ok").sum()),
               "reference": ref, "best": best, "gap_pct": np.nan, "support": np.nan, "support_adj": np.nan,
               "tested": False, "safe": None}
        bad = unhealthy(g)
        if (s, c) in q:
            # relative to the reference; undefined when it scores 0: then no config is called
            # worse on a percentage
            row["gap_pct"] = gap = (100 * (means[ref] - means[c]) / abs(means[ref]) if means[ref] != 0
                                    else 0.0 if means[c] == means[ref] else np.nan)
        if not g["quality_established"].iloc[0]:  # the scenario's failure, not the config's
            row["reason"] = f"not tested: quality not established on {s} ({gate[s]})" + (
                f"; runs: {bad}" if bad else "")
        elif bad:
            row.update(safe=False, reason=bad)
        elif (s, c) not in q:
            row["reason"] = "not tested: no quality value"
        else:
            n_c, n_r = len(q[s, c]), len(q[s, ref])
            row["tested"] = (s, c) in boot and (s, ref) in boot
            if row["tested"]:
                if c != ref:
                    row["support"] = float(np.mean(boot[s, ref] > boot[s, c]))
                else:
                    row.update(safe=True, reason=f"the reference of {s} ({_seeds(n_c)})")
            elif gap > rules.untested_gap_pct:  # NaN gap compares False
                row["safe"] = False
                row["reason"] = (f"quality {gap:.2f}% below the reference ({ref}), more than the "
                                 f"{rules.untested_gap_pct:g}% allowed while the noise is not estimated "
                                 f"(< {rules.min_seeds} ok seeds)")
            else:
                what = (f"the reference ({c}) is ahead of the others by more than noise" if c == ref else
                        f"{c} ({abs(gap):.2f}% {'below' if gap >= 0 else 'above'} the reference, {ref}) is "
                        f"within noise of it")
                row["reason"] = (f"not tested: {_seeds(min(n_c, n_r))}: cannot tell whether {what}; needs >= "
                                 f"{rules.min_seeds} ok seeds of both (has {n_c}"
                                 + ("" if c == ref else f" and {n_r}") + ")")
        rows.append(row)
    out = pd.DataFrame(rows, columns=["scenario", "config", "runs", "ok", "reference", "best", "gap_pct", "support",
                                      "support_adj", "tested", "safe", "reason"])
    out["safe"] = out["safe"].astype(object)
    for s, g in out[out["tested"] & out["support"].notna()].groupby("scenario"):
        adj = holm({i: 1.0 - g.loc[i, "support"] for i in g.index})
        for i, p in adj.items():
            gap, sup, ref = out.loc[i, "gap_pct"], out.loc[i, "support"], out.loc[i, "reference"]
            out.at[i, "support_adj"] = sa = 1.0 - p
            real = sa >= rules.conf
            worse = real and gap >= rules.equivalent_pct
            out.at[i, "safe"] = not worse
            n = f"support {sup:.0%}, {sa:.0%} Holm-corrected over {len(g)} configs"
            out.at[i, "reason"] = (
                f"quality {gap:.2f}% below the reference ({ref}), beyond seed noise (bootstrap {n})" if worse else
                f"equivalent to the reference ({ref}): {gap:.2f}% below it (bootstrap {n}), inside the "
                f"{rules.equivalent_pct:g}% equivalence margin" if real else
                f"within seed noise of the reference ({ref}): {abs(gap):.2f}% {'below' if gap >= 0 else 'above'} it, "
                f"bootstrap {n} < {rules.conf:.0%}")
    return out


def recommendations(df: pd.DataFrame, stats: pd.DataFrame, rules: Rules = Rules()) -> tuple[dict, pd.DataFrame]:
    """Rules over ``safety`` (``safe`` True = tested safe): ``universal`` = configs safe on
    every scenario of the study, fastest first (mean throughput rank); the first is the
    default, and the lowest-memory one is named for memory-bound work. No default when a
    scenario's quality is not established or no config is tested safe everywhere: the line
    says why and what evidence is missing. ``per_task[s]`` = the fastest safe config on s, and
    configs unsafe on s that are safe elsewhere (the safety frame returned beside the lines
    marks that config ``recommended``: ``recommended_configs``). ``lm_specific`` / ``cls_specific`` = safe on
    every LM (classification) scenario but unsafe on a classification (LM) one. ``avoid`` =
    unsafe somewhere and safe nowhere. Every line carries its numbers (speed and memory vs
    fp32_baseline, or ranks)."""
    df = gated(df, rules)
    saf = safety(df, rules)
    saf["recommended"] = False
    scns = sorted(saf["scenario"].unique())
    est = [s for s in scns if df.loc[df["scenario"] == s, "quality_established"].iloc[0]]
    why_not = {s: why_not_established(df, s) for s in scns if s not in est}
    piv = _pivots(stats)
    safe = {c: set(g.loc[g["safe"].eq(True), "scenario"]) for c, g in saf.groupby("config")}
    unsafe = {c: set(g.loc[g["safe"].eq(False), "scenario"]) for c, g in saf.groupby("config")}

    def speed_order(cs, on=None):
        return _speed_order(piv, cs, on)

    def numbers(c, on):
        return _numbers(piv, c, on)

    untested = saf[saf["safe"].isna() & saf["scenario"].isin(est)]
    short = (f"{len(untested)} of {int(saf['scenario'].isin(est).sum())} (scenario, config) cells are not tested "
             f"(fewer than {rules.min_seeds} ok seeds of the config or of the reference: cannot tell whether they are "
             f"within seed noise; needs >= {rules.min_seeds})") if len(untested) else ""
    rec = {"universal": [], "lm_specific": [], "cls_specific": [], "per_task": {}, "avoid": []}
    universal = speed_order([c for c, ss in safe.items() if set(scns) <= ss]) if est and not why_not else []
    every = (f"safe on all {len(scns)} scenarios ({', '.join(scns)}: every run healthy, quality not below the "
             f"reference (fp32 where it ran) beyond seed noise and the {rules.equivalent_pct:g}% margin)")
    # a default is the fastest of them: without a speed measurement there is none to name
    timed = bool(universal) and bool(piv["throughput_rank"].loc[universal].notna().any(axis=None))
    if universal and not timed:
        rec["universal"].append(f"no default yet: {len(universal)} configs are safe on every scenario and this "
                                f"study measured no speed to choose between them (runs shared a GPU); the "
                                f"speed study does")
    for i, c in enumerate(universal):
        rec["universal"].append(f"{'default: ' if i == 0 and timed else ''}{c} - {every}; {numbers(c, scns)}")
    if len(universal) > 1:
        lean = min(universal, key=lambda c: piv["memory_rank"].loc[c].mean())
        if lean != universal[0] or not timed:
            rec["universal"].append(f"memory-bound: {lean} - lowest memory of the universally safe configs; "
                                    f"{numbers(lean, scns)}")
    if not universal:
        why = ([f"quality not established on {', '.join(why_not)} ("
                + "; ".join(f"{s}: {r}" for s, r in why_not.items()) + ")"] if why_not else [])
        why += [short] if short else []
        rec["universal"].append("no default: " + ("; ".join(why) or "no config is safe on every scenario"))
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
        here = saf[saf["scenario"] == s].set_index("config")
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
                         + ("" if c == default else f"; differs from the default {default}" if default else ""))
        else:
            n = int(here["safe"].isna().sum())
            lines.append(f"{s}: no config is tested safe" + (
                f" ({n} not tested: fewer than {rules.min_seeds} ok seeds of the config or of the reference; needs >= "
                f"{rules.min_seeds} to tell a config from seed noise)" if n else ""))
        for c in here.index[here["safe"].eq(False)]:
            if safe.get(c):
                lines.append(f"{s}: avoid {c} - {here.loc[c, 'reason']} (safe on {', '.join(sorted(safe[c]))})")
        rec["per_task"][s] = lines
    g = groups(scns)
    for name, mine, other in (("lm_specific", g["lm"], g["cls"]), ("cls_specific", g["cls"], g["lm"])):
        for c in speed_order([c for c, ss in safe.items() if mine and other and set(mine) <= ss
                              and unsafe.get(c, set()) & set(other)]):
            why = _reasons(saf[(saf["config"] == c) & saf["safe"].eq(False) & saf["scenario"].isin(other)])
            rec[name].append(f"{c} - safe on {'LM' if name == 'lm_specific' else 'classification'} "
                             f"({', '.join(mine)}) but not on {why}; {numbers(c, mine)}")
    for c in sorted(c for c in unsafe if unsafe[c] and not safe.get(c)):
        why = _reasons(saf[(saf["config"] == c) & saf["safe"].eq(False)])
        rec["avoid"].append(f"{c} - safe on no scenario; unsafe on {why}")
    return rec, saf


def _speed_order(piv: dict, cs, on=None) -> list:
    """Fastest first: by the mean throughput rank over the scenarios ``on`` (default all)."""
    ranks = piv["throughput_rank"] if on is None else piv["throughput_rank"][on]
    return sorted(cs, key=lambda c: ranks.loc[c].mean())


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


def _ties(piv: dict, order: list, on, pct: float, stats: pd.DataFrame | None = None) -> str:
    """'; as fast within 1% or seed noise: b (8.10x), c (8.08x)' for the configs after
    ``order[0]`` whose geo-mean throughput over ``on`` is within ``pct`` % of its
    (``Rules.min_size_pct``: the speed difference below which nobody would choose between them)
    or within the seed noise of the gap (``_speed_noise_pct``, from ``stats``); '' when none is."""
    rel = piv["throughput_rel"].reindex(index=order, columns=on)
    geo = np.exp(np.log(rel).mean(axis=1))
    best = order[0]
    noise = {c: _speed_noise_pct(stats, on, best, c) for c in order[1:]} if stats is not None else {}
    near = [c for c in order[1:] if 100 * (1 - geo[c] / geo[best]) <= max(pct, noise.get(c) or 0.0)]
    unknown = ("; seed noise not estimated yet (no config with 2 runs)"
               if noise and not any(noise.values()) and {"std", "n"} <= set(stats.columns) else "")
    if not near:
        return unknown
    told = "" if not any(noise.get(c) for c in near) else " or seed noise"
    return f"; as fast within {pct:g}%{told}: " + ", ".join(f"{c} ({geo[c]:.2f}x)" for c in near) + unknown


def _speed_noise_pct(stats: pd.DataFrame, on, a: str, b: str) -> float | None:
    """The seed noise of the throughput gap between configs ``a`` and ``b`` over scenarios ``on``,
    in %: 1.96 standard errors of the mean log-throughput difference, with each config's number
    of runs there and each scenario's seed-to-seed spread taken as the larger of the median
    coefficient of variation of its configs with two or more runs (one config's two seeds say
    little alone) and the root mean square of ``a``'s and ``b``'s own (a config whose seeds ran
    on two hosts can spread far more: A's amp_bf16 by 3.3% where the median is 0.4%). None
    where no scenario has such configs."""
    need = {"scenario", "config", "metric", "mean", "std", "n"}
    if not need <= set(stats.columns):
        return None
    t = stats[(stats["metric"] == "throughput") & stats["scenario"].isin(on)]
    var = 0.0
    for s in on:
        here = t[t["scenario"] == s]
        spread = here[(here["n"] >= 2) & (here["mean"] > 0)]
        if spread.empty:
            return None
        cvs = (spread["std"] / spread["mean"]).set_axis(spread["config"])
        own = [cvs[c] for c in (a, b) if c in cvs.index]
        cv = max(float(cvs.median()), float(np.sqrt(np.mean(np.square(own)))) if own else 0.0)
        n = here.set_index("config")["n"]
        if a not in n or b not in n:
            return None
        var += cv ** 2 * (1 / n[a] + 1 / n[b])
    return 100 * 1.96 * float(np.sqrt(var)) / len(on)


def default_across(saf: pd.DataFrame, speed_stats: pd.DataFrame, speed_study: str = "the speed study",
                   rules: Rules = Rules()) -> list[str]:
    """The default of a quality study whose runs measured no speed, from a speed study: the
    configs ``saf`` (the quality study's safety frame: ``comparison.json``'s
    ``recommendation_evidence``) calls safe on every scenario, fastest first by their mean
    throughput rank over the speed study's scenarios (``config_stats``); the first is the
    default, as ``recommendations`` names it within one study. None is named while one of
    them has no throughput on a scenario of the speed study: an order over part of the
    scenarios would favour the configs measured where every config is fast."""
    scns = sorted(saf["scenario"].unique())
    tested = saf.groupby("config")["safe"].apply(lambda x: bool(x.eq(True).all()) and len(x) == len(scns))
    universal = sorted(tested.index[tested])
    if not universal:
        return []
    piv = _pivots(speed_stats)
    on = sorted(speed_stats["scenario"].unique())
    ranks = piv["throughput_rank"].reindex(index=universal, columns=on)
    missing = {c: [s for s in on if pd.isna(ranks.loc[c, s])] for c in universal}
    missing = {c: ss for c, ss in missing.items() if ss}
    if missing:
        return [f"no default yet: {len(universal)} configs are safe on every scenario; {speed_study} has measured "
                f"{len(universal) - len(missing)} of them on each of {', '.join(on)} (its scenarios with records); "
                f"missing: "
                + "; ".join(f"{c} on {', '.join(ss)}" for c, ss in sorted(missing.items()))]
    order = _speed_order(piv, universal, on)
    lines = [f"{'default: ' if i == 0 else ''}{c} - safe on all {len(scns)} scenarios; {speed_study}: "
             f"{_numbers(piv, c, on)}, mean throughput rank {ranks.loc[c].mean():.1f}"
             + (_ties(piv, order, on, rules.min_size_pct, speed_stats) if i == 0 else "") for i, c in enumerate(order)]
    lean = min(order, key=lambda c: piv["memory_rank"].reindex(index=order, columns=on).loc[c].mean())
    if lean != order[0]:
        lines.append(f"memory-bound: {lean} - lowest memory of the universally safe configs; "
                     f"{speed_study}: {_numbers(piv, lean, on)}")
    return lines


def fastest_safe_across(saf: pd.DataFrame, speed_stats: pd.DataFrame, speed_study: str = "the speed study",
                        rules: Rules = Rules()) -> dict:
    """Scenario -> the per-task line of ``recommendations`` across two studies: on each scenario
    the speed study measured, the fastest there of the configs ``saf`` calls safe on it (none
    while one of them has no throughput there)."""
    piv = _pivots(speed_stats)
    out = {}
    for s in sorted(set(saf["scenario"]) & set(speed_stats["scenario"])):
        safe = sorted(saf.loc[(saf["scenario"] == s) & saf["safe"].eq(True), "config"])
        if not safe:
            continue
        ranks = piv["throughput_rank"].reindex(index=safe, columns=[s])[s]
        if ranks.isna().any():
            out[s] = (f"{s}: fastest safe config not known yet: {speed_study} has not measured "
                      f"{', '.join(ranks.index[ranks.isna()])} on {s}")
        else:
            order = list(ranks.sort_values().index)
            out[s] = (f"{s}: fastest safe config {order[0]} ({speed_study}: {_numbers(piv, order[0], [s])}"
                      f"{_ties(piv, order, [s], rules.min_size_pct, speed_stats)})")
    return out


def recommended_configs(saf: pd.DataFrame) -> dict[str, str]:
    """Scenario -> the config ``recommendations`` names for it (the fastest tested-safe one),
    from the safety frame it returns; scenarios with no recommendation are left out."""
    if "recommended" not in saf:
        return {}
    rows = saf[saf["recommended"].eq(True)]
    return dict(zip(rows["scenario"], rows["config"]))


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
