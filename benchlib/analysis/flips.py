"""Flips beyond seed noise (seed 000): config pairs whose order reverses between two scenarios
(``order_reversals``), configs that diverge on one scenario but not another (``stability_flips``),
and seed 000's ``flips`` entries from both (``flip_entries``: one per pair, never its mirror).

Only candidates flip; configs identical by construction for the metric (``cost_hash`` for speed
and memory, ``definition_hash`` for quality) count once; quality only where it is established;
speed and memory only at ``Rules.flip_size`` with ``Rules.min_flip_seeds_speed`` seeds per cell,
speed on one identified host, memory on one GPU model and software stack (``tables.stack_of``: peak
memory does not move with the host). The smaller of the two gaps (paired by seed where possible) is
bootstrapped, its share of resamples <= 0 is the p-value, corrected over a metric's reversals.
"""
from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pandas as pd

from benchlib.analysis.stats import SIZE_RATIO, Rules, adjust, bootstrap, piece
from benchlib.analysis.tables import HEADLINE, config_order, gated, quality_runs, seed_series, speed_runs, trained_runs
from benchlib.core.scenarios import SCENARIOS

REVERSAL_COLS = ["metric", "config", "other", "better_on", "worse_on", "gap_better_pct", "gap_worse_pct", "size_pct",
                 "n_seeds", "paired", "host", "support", "p", "p_adj", "significant", "note"]


def _classes(df: pd.DataFrame, metric: str) -> dict[tuple[str, str], str]:
    """(scenario, config) -> what makes two configs identical by construction for ``metric``."""
    col = "definition_hash" if metric == "quality" else "cost_hash"
    if col not in df:
        return {}
    return {k: "|".join(sorted(map(str, set(g[col].dropna())))) or k[1] for k, g in df.groupby(["scenario", "config"])}


def _sized(df: pd.DataFrame, runs: pd.Series, rules: Rules) -> pd.Series:
    """``runs`` at ``rules.flip_size`` (all of them where it is None)."""
    if rules.flip_size is None:
        return runs
    return runs & (df["run.size"].eq(rules.flip_size) if "run.size" in df else False)


WHERE = {"throughput": ("host", "one identified host"), "memory": ("stack", "one GPU model and software stack")}
"""Where a speed or memory flip's four cells must all be measured: the ``study_frame`` column, in words."""


def _speed_cells(df: pd.DataFrame, metric: str, runs: pd.Series) -> dict[str, dict]:
    """host (throughput) or stack (memory) -> the per-seed cells of ``metric`` from ``runs``
    measured there; runs where it is unknown are in none."""
    col = WHERE[metric][0]
    places = sorted(df.loc[runs, col].dropna().unique()) if col in df else []
    return {h: seed_series(df, metric, runs=runs & df[col].eq(h)) for h in places}


def _gap(mean_a: float, mean_b: float) -> float:
    return 100 / ((abs(mean_a) + abs(mean_b)) / 2)


def _support_p(dist) -> dict:
    """Share of resamples above 0, and the p-value: the share at or below it (>= 1 / (B + 1))."""
    dist = np.asarray(dist, float)
    return {"support": float(np.mean(dist > 0)), "p": float(max(np.mean(dist <= 0), 1 / (len(dist) + 1)))}


def _correct(out: pd.DataFrame, rules: Rules, min_size: float | None = None) -> pd.DataFrame:
    """``p_adj`` over the family of ``out``'s rows and ``significant`` (and ``size_pct`` >= ``min_size``)."""
    for i, p in adjust(dict(zip(out.index, out["p"])), rules).items():
        out.at[i, "p_adj"] = p
        out.at[i, "significant"] = bool(p < 1 - rules.conf and (min_size is None or out.at[i, "size_pct"] >= min_size))
    out["significant"] = out["significant"].astype(bool)
    return out


def _reversal(cells: dict, a: str, b: str, s: str, t: str, rules: Rules) -> dict | None:
    """The two gaps (a over b on s, b over a on t, % of the pair's mean) and the bootstrap of the
    smaller one; None where a cell has fewer than min_seeds values."""
    ks, kt = _gap(cells[s, a].mean(), cells[s, b].mean()), _gap(cells[t, a].mean(), cells[t, b].mean())
    ps = piece(cells, s, a, b, lambda av, bv, _: ks * (av - bv), rules)
    pt = piece(cells, t, a, b, lambda av, bv, _: kt * (bv - av), rules)
    if ps is None or pt is None:
        return None
    n = len(ps.samples)

    def smaller(*x, axis=-1):
        m = [np.mean(v, axis=axis) for v in x]
        return np.minimum(ps.value(*m[:n]), pt.value(*m[n:]))
    dist = bootstrap([*ps.samples, *pt.samples], smaller, rules)[3]
    return {**_support_p(dist), "paired": bool(ps.paired and pt.paired)}


def order_reversals(df: pd.DataFrame, rules: Rules = Rules()) -> pd.DataFrame:
    """Every candidate pair whose order (by mean) reverses between two scenarios, per metric:
    ``config`` beats ``other`` on ``better_on`` and trails it on ``worse_on``, the gaps in % of the
    pair's mean, ``support``, ``p``, ``p_adj``, ``significant``; ``note``: why one is not tested."""
    df = gated(df, rules)
    cand = set(df.loc[df["role"].eq("candidate"), "config"])  # the gates give every run a role
    rows = []
    for m in HEADLINE:
        classes = _classes(df, m)
        if m == "quality":
            runs = quality_runs(df) & df["quality_ranked"]  # an order that is seed noise flips nothing
            by_host = {None: seed_series(df, m, runs=runs)}
        else:
            runs = _sized(df, speed_runs(df), rules)
            by_host = _speed_cells(df, m, runs)
        means = {k: v.mean() for k, v in seed_series(df, m, runs=runs).items() if k[1] in cand}
        scns = sorted({s for s, _ in means})
        for s, t in combinations(scns, 2):
            common = [c for c in config_order({c for x, c in means if x == s} & {c for x, c in means if x == t})]
            first: dict = {}
            for c in common:  # identical by construction on both scenarios: the first one speaks for all
                first.setdefault((classes.get((s, c), c), classes.get((t, c), c)), c)
            for a, b in combinations(list(first.values()), 2):
                if classes.get((s, a), a) == classes.get((s, b), b) or classes.get((t, a), a) == classes.get((t, b), b):
                    continue  # identical by construction on one of them: any order there is noise
                ds, dt = means[s, a] - means[s, b], means[t, a] - means[t, b]
                if ds * dt >= 0:
                    continue
                if ds < 0:  # orient: `config` is the one better on `better_on`
                    a, b = b, a
                size_s = _gap(means[s, a], means[s, b]) * (means[s, a] - means[s, b])
                size_t = _gap(means[t, a], means[t, b]) * (means[t, b] - means[t, a])
                row = {"metric": m, "config": a, "other": b, "better_on": s, "worse_on": t, "gap_better_pct": size_s,
                       "gap_worse_pct": size_t, "size_pct": min(size_s, size_t), "n_seeds": 0, "paired": None,
                       "host": None, "support": math.nan, "p": math.nan, "p_adj": math.nan, "significant": False,
                       "note": ""}
                for host, cells in by_host.items():
                    keys = [(s, a), (s, b), (t, a), (t, b)]
                    need = rules.min_seeds if m == "quality" else max(rules.min_seeds, rules.min_flip_seeds_speed)
                    if all(len(cells.get(k, ())) >= need for k in keys):
                        r = _reversal(cells, a, b, s, t, rules)
                        if r:
                            row.update(r, host=host, n_seeds=min(len(cells[k]) for k in keys))
                            break
                else:
                    row["note"] = (f"not tested: fewer than {rules.min_seeds} counted seeds in a cell" if m == "quality"
                                   else f"not tested: needs >= {rules.min_flip_seeds_speed} seeds per cell measured on "
                                        f"{WHERE[m][1]} at size {rules.flip_size or 'any'}")
                rows.append(row)
    out = pd.DataFrame(rows, columns=REVERSAL_COLS)
    fam = [_correct(g.copy(), rules, rules.min_size_pct) for _, g in out.groupby("metric")]
    return pd.concat(fam).loc[out.index] if fam else _correct(out, rules)


def stability_flips(df: pd.DataFrame, rules: Rules = Rules()) -> pd.DataFrame:
    """Configs that diverge more often on one scenario than another beyond seed noise (runs that
    trained in learned scenarios; the rate difference bootstrapped, each scenario's runs on their
    own). Every config is listed; only candidates become flips (``flip_entries``)."""
    df = gated(df, rules)
    d = df[trained_runs(df)]
    rates = {(c, s): v for (s, c), v in seed_series(df, "diverged").items()}
    rows = []
    for cfg in sorted({c for c, _ in rates}):
        scns = sorted(s for c, s in rates if c == cfg)
        for s, t in combinations(scns, 2):
            rs, rt = rates[cfg, s].mean(), rates[cfg, t].mean()
            if rs == rt:
                continue
            if rs < rt:
                s, t, rs, rt = t, s, rt, rs
            test = {"support": math.nan, "p": math.nan}
            if min(len(rates[cfg, s]), len(rates[cfg, t])) >= rules.min_seeds:
                diff = lambda x, y, axis=-1: np.mean(x, axis=axis) - np.mean(y, axis=axis)  # noqa: E731
                test = _support_p(bootstrap([rates[cfg, s], rates[cfg, t]], diff, rules)[3])
            steps = d[(d["config"] == cfg) & (d["scenario"] == s)]["stability/diverged_step"].dropna()
            rows.append({"metric": "quality", "config": cfg, "diverges_on": s, "stable_on": t,
                         "diverged_on": f"{int(rates[cfg, s].sum())}/{len(rates[cfg, s])}",
                         "diverged_off": f"{int(rates[cfg, t].sum())}/{len(rates[cfg, t])}",
                         "rate_gap": rs - rt, "median_step": steps.median() if len(steps) else np.nan,
                         **test, "p_adj": math.nan, "significant": False})
    cols = ["metric", "config", "diverges_on", "stable_on", "diverged_on", "diverged_off", "rate_gap",
            "median_step", "support", "p", "p_adj", "significant"]
    return _correct(pd.DataFrame(rows, columns=cols), rules)


ARCH_NAMES = {"gpt2": "GPT-2", "roberta": "RoBERTa", "bert": "BERT"}


def scenario_models(df: pd.DataFrame) -> dict[str, tuple[str, float]]:
    """Each scenario's (model type, parameters) from its records, where one model ran there."""
    if "model.type" not in df or "model.parameters" not in df:
        return {}
    out = {}
    for s, g in df.groupby("scenario"):
        types, n = g["model.type"].dropna().unique(), g["model.parameters"].median()
        if len(types) == 1 and np.isfinite(n) and n > 0:
            out[s] = (str(types[0]), float(n))
    return out


def _pattern(better: set, worse: set, models: dict | None = None) -> str:
    """Name the split when the scenarios a config wins on and loses on fall into two groups; where
    the two sides' models (``scenario_models``) differ in size too, or in model for a task split,
    say so: such a split decides no claim about the task or the architecture alone."""
    models = models or {}
    arch = lambda s: models[s][0] if s in models else ("gpt2" if SCENARIOS[s].arch == "gpt2" else "roberta")  # noqa: E731
    for what, key in (("task", lambda s: "LM" if SCENARIOS[s].is_lm else "classification"),
                      ("architecture", lambda s: ARCH_NAMES.get(arch(s), arch(s)))):
        b, w = {key(s) for s in better}, {key(s) for s in worse}
        if len(b) == 1 and len(w) == 1 and b != w:
            return f"; better on {b.pop()} than on {w.pop()} ({what}{_confound(what, better, worse, models)})"
    return ""


def _confound(what: str, better: set, worse: set, models: dict) -> str:
    """'' where the split's two sides ran one model (a task split) or models of one size (an
    architecture split), else what else differs, with the models."""
    if not all(s in models for s in better | worse):
        return ""
    sides = [{models[s] for s in side} for side in (better, worse)]
    sizes = [n for side in sides for _, n in side]
    one_size = max(sizes) <= SIZE_RATIO * min(sizes)  # a task head on one backbone is one model
    if one_size and (what == "architecture" or len({t for side in sides for t, _ in side}) == 1):
        return ""
    named = " vs ".join(", ".join(f"{ARCH_NAMES.get(t, t)} {n / 1e6:.1f}M" for t, n in sorted(side)) for side in sides)
    return f"; {'the model' if what == 'task' else 'size'} differs too: {named}, confounded"


def _ranks(stats: pd.DataFrame, group_ranks: pd.DataFrame, metric: str, cfg: str) -> dict:
    rk = stats[(stats["metric"] == metric) & (stats["config"] == cfg)].set_index("scenario")["rank"].dropna()
    e = {"ranks": {s: int(v) for s, v in rk.items()}, "rank_change": int(rk.max() - rk.min()) if len(rk) else None}
    for g in ("lm", "cls"):
        r = group_ranks[(group_ranks["metric"] == metric) & (group_ranks["group"] == g)
                        & (group_ranks["config"] == cfg)]["rank"]
        e[f"{g}_{metric}_rank"] = int(r.iloc[0]) if len(r) and pd.notna(r.iloc[0]) else None
    return e


def flip_entries(stats: pd.DataFrame, reversals: pd.DataFrame, stability: pd.DataFrame,
                 group_ranks: pd.DataFrame, candidates: set | None = None, models: dict | None = None) -> list[dict]:
    """Seed 000's ``flips``: one entry per (metric, config pair) with a significant reversal and one
    per config with a significant stability flip, each with its evidence, ranks and a generated
    interpretation; ``candidates``: the configs that may appear (default: all)."""
    ok = (lambda c: True) if candidates is None else (lambda c: c in candidates)  # noqa: E731
    sig = reversals[reversals["significant"].astype(bool)]
    out = []
    for (metric, pair), g in sig.groupby([sig["metric"], sig.apply(lambda r: tuple(sorted((r["config"], r["other"]))),
                                                                   axis=1)], sort=True):
        if not (ok(pair[0]) and ok(pair[1])):
            continue
        first = g.sort_values(["better_on", "worse_on"]).iloc[0]
        cfg, other = first["config"], first["other"]
        rev = []
        for r in g.itertuples():
            mine = r.config == cfg  # every reversal from cfg's side: no mirror line
            rev.append({"better_on": r.better_on if mine else r.worse_on, "worse_on": r.worse_on if mine else r.better_on,
                        "gap_better_pct": r.gap_better_pct if mine else r.gap_worse_pct,
                        "gap_worse_pct": r.gap_worse_pct if mine else r.gap_better_pct, "size_pct": r.size_pct,
                        "support": r.support, "p_adj": r.p_adj, "n_seeds": int(r.n_seeds), "paired": r.paired,
                        "host": r.host})
        e = {"kind": "reversal", "config": cfg, "other": other, "metric": metric, **_ranks(stats, group_ranks, metric, cfg),
             "other_ranks": _ranks(stats, group_ranks, metric, other)["ranks"],
             "better_on": sorted({r["better_on"] for r in rev}), "worse_on": sorted({r["worse_on"] for r in rev}),
             "reversals": rev, "stability": []}
        e["interpretation"] = _interpret_reversal(cfg, other, metric, rev, models)
        out.append(e)
    stab = stability[stability["significant"].astype(bool)]
    for cfg, g in stab.groupby("config", sort=True):
        if not ok(cfg):
            continue
        st = [{k: getattr(r, k) for k in ("diverges_on", "stable_on", "diverged_on", "diverged_off", "median_step",
                                          "support", "p_adj")} for r in g.itertuples()]
        e = {"kind": "stability", "config": cfg, "metric": "quality", **_ranks(stats, group_ranks, "quality", cfg),
             "reversals": [], "stability": st}
        e["interpretation"] = _interpret_stability(cfg, st, models)
        out.append(e)
    return out


def _interpret_reversal(cfg: str, other: str, metric: str, rev: list[dict], models: dict | None = None) -> str:
    top = max(rev, key=lambda r: r["size_pct"])
    how = "paired by seed" if all(r["paired"] for r in rev) else "not all paired by seed"
    on = f", {WHERE[metric][1].replace('identified ', '')}" if metric in WHERE else ""
    better, worse = sorted({r["better_on"] for r in rev}), sorted({r["worse_on"] for r in rev})
    return (f"{cfg} beats {other} on {metric} on {', '.join(better)} but trails it on {', '.join(worse)} (largest "
            f"smaller gap: {top['gap_better_pct']:.1f}% on {top['better_on']} against {top['gap_worse_pct']:.1f}% on "
            f"{top['worse_on']}; {len(rev)} scenario pair(s) beyond seed noise, corrected p <= "
            f"{max(r['p_adj'] for r in rev):.2g}, {min(r['n_seeds'] for r in rev)} seeds, {how}{on})"
            + _pattern(set(better), set(worse), models) + ".")


def _interpret_stability(cfg: str, st: list[dict], models: dict | None = None) -> str:
    top = min(st, key=lambda r: r["p_adj"])
    step = f", median step {top['median_step']:.0f}" if pd.notna(top["median_step"]) else ""
    return (f"{cfg} diverged in {top['diverged_on']} runs on {top['diverges_on']}{step} but in {top['diverged_off']} "
            f"on {top['stable_on']}" + _pattern({r["stable_on"] for r in st}, {r["diverges_on"] for r in st}, models) + ".")
