"""Claims from a study's numbers, each by an explicit, parameterised rule: flips beyond seed
noise, verdicts on seed 001's H1-H4 and seed 002's three hypotheses, and recommendations.

Noise is judged by one method everywhere (``Rules``): an unpaired percentile bootstrap over
seeds, each (scenario, config) cell resampled with replacement on its own. An effect's CI is
the central ``conf`` interval of the effect over the resamples, and a verdict reads it
(``decide``):

- ``inconclusive`` when a needed (scenario, config) has fewer than ``min_seeds`` runs, or the
  CI is undefined;
- ``rejected`` when the CI lies inside [-margin, +margin] (no effect worth the name) or
  entirely below 0 (the opposite holds);
- ``supported`` when the CI lies entirely above 0 (or, for a claim that two things merely
  differ, entirely on either side);
- ``inconclusive`` otherwise (the CI straddles 0).

Only ok runs enter throughput, memory and quality; stability rules read ok and diverged runs.
Each verdict function's docstring is its rule and is copied into ``comparison.json``.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from itertools import combinations, product
from typing import Callable

import numpy as np
import pandas as pd

from .analysis import BASELINE, HEADLINE, groups, sign
from .scenarios import SCENARIOS

# seed 002 compares the architectures on matched tasks: (GPT-2, RoBERTa) scenario pairs
ARCH_PAIRS = (("A", "B"), ("C", "D"), ("E", "F"))
LOW_PRECISION = ("amp_fp16", "amp_bf16", "bf16_pure", "bf16_naive", "fp16_naive")


@dataclass(frozen=True)
class Rules:
    conf: float = 0.95
    """CI level, and the bootstrap share a flip's reversed order must reach."""
    n_boot: int = 2000
    min_seeds: int = 2
    """Fewer ok seeds per cell: noise cannot be estimated -> no flip, verdict inconclusive."""
    seed: int = 0
    """rng seed of the bootstrap: the same data give the same numbers."""
    min_size_pct: float = 1.0
    """A flip's smaller gap must also reach this (% of the pair's mean): near-deterministic
    metrics (memory, GPU throughput) otherwise 'flip' on differences nobody would act on."""
    margin_quality_pct: float = 0.0
    """Quality effects inside +-this (%) count as no effect (rejected)."""
    margin_rate: float = 0.0
    """Divergence-rate differences inside +-this count as no difference."""
    margin_speedup: float = 0.0
    """Speed-up differences (x fp32) inside +-this count as no difference."""

    def describe(self) -> str:
        return (f"unpaired percentile bootstrap over seeds: each (scenario, config) resampled with replacement "
                f"{self.n_boot} times (rng seed {self.seed}); CIs are central {self.conf:.0%} intervals; a "
                f"reversal of a, b between scenarios s, t is a flip when a beats b on s and b beats a on t in >= "
                f"{self.conf:.0%} of resamples jointly, with >= {self.min_seeds} ok seeds per config and scenario "
                f"and the smaller gap >= {self.min_size_pct}% of the pair's mean; no multiple-comparison correction.")


# ---- cells and the bootstrap ---------------------------------------------------------------
def seed_values(df: pd.DataFrame, metric: str, oriented: bool = True) -> dict[tuple[str, str], np.ndarray]:
    """Finite per-seed values of ``metric`` from ok runs per (scenario, config); times ``sign``
    when ``oriented`` (higher is better everywhere). ``metric="diverged"``: 1/0 per ok or
    diverged run."""
    if metric == "diverged":
        d = df[df["status"].isin(["ok", "diverged"])]
        return {k: (g["status"] == "diverged").to_numpy(float) for k, g in d.groupby(["scenario", "config"])}
    out = {}
    for (s, c), g in df[df["status"] == "ok"].groupby(["scenario", "config"]):
        v = g[metric].to_numpy(float)
        v = v[np.isfinite(v)]
        if len(v):
            out[(s, c)] = v * (sign(df, metric, s) if oriented else 1)
    return out


def bootstrap_means(values: dict, n_boot: int, rng: np.random.Generator) -> dict:
    """``n_boot`` resampled means per key (keys in sorted order: reproducible)."""
    return {k: np.asarray(values[k], float)[rng.integers(0, len(values[k]), (n_boot, len(values[k])))].mean(axis=1)
            for k in sorted(values)}


def _ci(cells: dict, keys: list, fn: Callable, rules: Rules) -> tuple[float, float, float]:
    """Point estimate and bootstrap CI of ``fn`` (vectorised over a dict of cell means)."""
    point = float(fn({k: cells[k].mean() for k in keys}))
    b = np.asarray(fn(bootstrap_means({k: cells[k] for k in keys}, rules.n_boot, np.random.default_rng(rules.seed))))
    lo, hi = np.nanpercentile(b, [50 * (1 - rules.conf), 50 * (1 + rules.conf)])
    return point, float(lo), float(hi)


def _gain(m, x, ref, s, sgn):
    """Quality (or any) gain of x over ref on scenario s, % of ref, > 0 = x better."""
    return 100 * sgn * (m[s, x] - m[s, ref]) / np.abs(m[s, ref])


def decide(lo: float, hi: float, margin: float = 0.0, two_sided: bool = False) -> tuple[str, str]:
    """The verdict of a CI (see the module docstring)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "inconclusive", "no confidence interval"
    ci = f"CI [{lo:.4g}, {hi:.4g}]"
    if -margin <= lo and hi <= margin:
        return "rejected", f"{ci} inside +-{margin:g}: no effect"
    if lo > 0 or (two_sided and hi < 0):
        return "supported", f"{ci} excludes 0"
    if hi < 0:
        return "rejected", f"{ci} below 0: the opposite holds"
    return "inconclusive", f"{ci} includes 0"


def _result(fn: Callable, claim: str, verdict: str, reason: str, effect: dict | None = None,
            evidence: dict | None = None) -> dict:
    return {"claim": claim, "rule": inspect.getdoc(fn), "verdict": verdict, "reason": reason,
            "effect": effect, "evidence": evidence or {}}


def _effect(name: str, unit: str, est: float, lo: float, hi: float, rules: Rules) -> dict:
    return {"name": name, "unit": unit, "estimate": est, "ci_low": lo, "ci_high": hi, "conf": rules.conf}


# ---- flips ---------------------------------------------------------------------------------
def order_reversals(df: pd.DataFrame, rules: Rules = Rules()) -> pd.DataFrame:
    """Every pair of configs whose order (by mean over ok seeds) reverses between two
    scenarios, per metric: ``better_on`` (s) where ``config`` beats ``other`` and ``worse_on``
    (t) where it trails; gaps in % of the pair's mean on each; ``support`` = bootstrap share of
    resamples where both orders hold (NaN if < min_seeds); ``significant`` per ``rules``."""
    rng = np.random.default_rng(rules.seed)
    rows = []
    for m in HEADLINE:
        vals = seed_values(df, m)
        boot = bootstrap_means({k: v for k, v in vals.items() if len(v) >= rules.min_seeds}, rules.n_boot, rng)
        scns = sorted({s for s, _ in vals})
        for s, t in combinations(scns, 2):
            common = sorted({c for x, c in vals if x == s} & {c for x, c in vals if x == t})
            for a, b in combinations(common, 2):
                mu = {k: vals[k].mean() for k in [(s, a), (s, b), (t, a), (t, b)]}
                ds, dt = mu[s, a] - mu[s, b], mu[t, a] - mu[t, b]
                if ds * dt >= 0:
                    continue
                if ds < 0:  # orient: `config` is the one better on `better_on`
                    a, b, ds, dt = b, a, -ds, -dt
                size_s = 100 * ds / ((abs(mu[s, a]) + abs(mu[s, b])) / 2)
                size_t = 100 * -dt / ((abs(mu[t, a]) + abs(mu[t, b])) / 2)
                keys = [(s, a), (s, b), (t, a), (t, b)]
                support = (float(np.mean((boot[s, a] > boot[s, b]) & (boot[t, a] < boot[t, b])))
                           if all(k in boot for k in keys) else np.nan)
                size = min(size_s, size_t)
                rows.append({"metric": m, "config": a, "other": b, "better_on": s, "worse_on": t,
                             "gap_better_pct": size_s, "gap_worse_pct": size_t, "size_pct": size,
                             "n_seeds": min(len(vals[k]) for k in keys), "support": support,
                             "significant": bool(support >= rules.conf and size >= rules.min_size_pct)})
    cols = ["metric", "config", "other", "better_on", "worse_on", "gap_better_pct", "gap_worse_pct",
            "size_pct", "n_seeds", "support", "significant"]
    return pd.DataFrame(rows, columns=cols)


def stability_flips(df: pd.DataFrame, rules: Rules = Rules()) -> pd.DataFrame:
    """Configs that diverge more often on one scenario than on another, beyond seed noise:
    divergence indicator per run (ok or diverged runs), same bootstrap as ``order_reversals``;
    ``support`` = share of resamples where the rate on ``diverges_on`` exceeds ``stable_on``."""
    d = df[df["status"].isin(["ok", "diverged"])]
    rates = {(c, s): v for (s, c), v in seed_values(df, "diverged").items()}
    boot = bootstrap_means({k: v for k, v in rates.items() if len(v) >= rules.min_seeds}, rules.n_boot,
                           np.random.default_rng(rules.seed + 1))
    rows = []
    for cfg in sorted({c for c, _ in rates}):
        scns = sorted(s for c, s in rates if c == cfg)
        for s, t in combinations(scns, 2):
            rs, rt = rates[cfg, s].mean(), rates[cfg, t].mean()
            if rs == rt:
                continue
            if rs < rt:
                s, t, rs, rt = t, s, rt, rs
            testable = (cfg, s) in boot and (cfg, t) in boot
            support = float(np.mean(boot[cfg, s] > boot[cfg, t])) if testable else np.nan
            steps = d[(d["config"] == cfg) & (d["scenario"] == s)]["stability/diverged_step"].dropna()
            rows.append({"metric": "quality", "config": cfg, "diverges_on": s, "stable_on": t,
                         "diverged_on": f"{int(rates[cfg, s].sum())}/{len(rates[cfg, s])}",
                         "diverged_off": f"{int(rates[cfg, t].sum())}/{len(rates[cfg, t])}",
                         "rate_gap": rs - rt, "median_step": steps.median() if len(steps) else np.nan,
                         "support": support, "significant": bool(support >= rules.conf)})
    cols = ["metric", "config", "diverges_on", "stable_on", "diverged_on", "diverged_off", "rate_gap",
            "median_step", "support", "significant"]
    return pd.DataFrame(rows, columns=cols)


def _pattern(better: set, worse: set) -> str:
    """Name the split when the scenarios a config wins on and loses on fall into two groups."""
    for what, key in (("task", lambda s: "LM" if SCENARIOS[s].is_lm else "classification"),
                      ("architecture", lambda s: "GPT-2" if SCENARIOS[s].arch == "gpt2" else "RoBERTa")):
        b, w = {key(s) for s in better}, {key(s) for s in worse}
        if len(b) == 1 and len(w) == 1 and b != w:
            return f"; better on {b.pop()} than on {w.pop()} ({what})"
    return ""


def flip_entries(stats: pd.DataFrame, reversals: pd.DataFrame, stability: pd.DataFrame,
                 group_ranks: pd.DataFrame) -> list[dict]:
    """Seed 000's ``flips``: one entry per (config, metric) in a significant reversal or
    stability flip, with its rank per scenario, LM/CLS group ranks, the evidence, and an
    interpretation generated from that evidence."""
    sig = reversals[reversals["significant"].astype(bool)]
    stab = stability[stability["significant"].astype(bool)]
    keys = sorted({(r.metric, r.config) for r in sig.itertuples()} | {(r.metric, r.other) for r in sig.itertuples()}
                  | {(r.metric, r.config) for r in stab.itertuples()})
    out = []
    for metric, cfg in keys:
        rk = stats[(stats["metric"] == metric) & (stats["config"] == cfg)].set_index("scenario")["rank"].dropna()
        e = {"config": cfg, "metric": metric, "ranks": {s: int(v) for s, v in rk.items()},
             "rank_change": int(rk.max() - rk.min()) if len(rk) else None}
        for g in ("lm", "cls"):
            r = group_ranks[(group_ranks["metric"] == metric) & (group_ranks["group"] == g)
                            & (group_ranks["config"] == cfg)]["rank"]
            e[f"{g}_{metric}_rank"] = int(r.iloc[0]) if len(r) and pd.notna(r.iloc[0]) else None
        rev = []
        for r in sig[(sig["metric"] == metric) & ((sig["config"] == cfg) | (sig["other"] == cfg))].itertuples():
            mine = r.config == cfg  # phrase every reversal from this config's side
            rev.append({"vs": r.other if mine else r.config, "better_on": r.better_on if mine else r.worse_on,
                        "worse_on": r.worse_on if mine else r.better_on,
                        "gap_better_pct": r.gap_better_pct if mine else r.gap_worse_pct,
                        "gap_worse_pct": r.gap_worse_pct if mine else r.gap_better_pct,
                        "size_pct": r.size_pct, "support": r.support, "n_seeds": int(r.n_seeds)})
        st = [{k: getattr(r, k) for k in ("diverges_on", "stable_on", "diverged_on", "diverged_off",
                                          "median_step", "support")}
              for r in stab[(stab["metric"] == metric) & (stab["config"] == cfg)].itertuples()]
        e["reversals"], e["stability"] = rev, st
        e["interpretation"] = _interpret(cfg, metric, rev, st)
        out.append(e)
    return out


def _interpret(cfg: str, metric: str, rev: list[dict], st: list[dict]) -> str:
    parts = []
    if rev:
        top = max(rev, key=lambda r: r["size_pct"])
        parts.append(f"{cfg} beats {top['vs']} on {metric} by {top['gap_better_pct']:.1f}% on {top['better_on']} "
                     f"but trails it by {top['gap_worse_pct']:.1f}% on {top['worse_on']} (bootstrap support "
                     f"{top['support']:.0%}, {top['n_seeds']} seeds); {len(rev)} reversal(s) beyond seed noise"
                     + _pattern({r["better_on"] for r in rev}, {r["worse_on"] for r in rev}))
    if st:
        top = max(st, key=lambda r: r["support"])
        step = f", median step {top['median_step']:.0f}" if pd.notna(top["median_step"]) else ""
        parts.append(f"{cfg} diverged in {top['diverged_on']} runs on {top['diverges_on']}{step} but in "
                     f"{top['diverged_off']} on {top['stable_on']}"
                     + _pattern({r["stable_on"] for r in st}, {r["diverges_on"] for r in st}))
    return ". ".join(parts) + "."


# ---- hypotheses ----------------------------------------------------------------------------
def _contrast(cells: dict, plus: dict, minus: dict, value: Callable, rules: Rules):
    """CI of mean(value over the usable ``plus`` units) - mean(over the usable ``minus``
    units); with ``minus`` empty, of the plain mean. A unit (a scenario, or a scenario pair)
    names the cells it needs and is usable when each has >= min_seeds values. Returns
    (point, lo, hi) or None when a side has no usable unit, and the evidence."""
    ev, used = {}, {}
    for side, units in (("plus", plus), ("minus", minus)):
        ok = {u: ks for u, ks in units.items() if all(len(cells.get(k, ())) >= rules.min_seeds for k in ks)}
        miss = sorted({f"{s}/{c} ({len(cells.get((s, c), ()))} seeds)" for u, ks in units.items() if u not in ok
                       for s, c in ks if len(cells.get((s, c), ())) < rules.min_seeds})
        used[side] = ok
        ev[side] = {"used": list(ok), "missing": miss}
    keys = sorted({k for side in used.values() for ks in side.values() for k in ks})
    m = {k: cells[k].mean() for k in keys}
    for side in used:
        ev[side]["values"] = {u: float(value(m, u)) for u in used[side]}
    if not used["plus"] or (minus and not used["minus"]):
        return None, ev

    def fn(mm):
        out = np.mean([value(mm, u) for u in used["plus"]], axis=0)
        return out - np.mean([value(mm, u) for u in used["minus"]], axis=0) if minus else out
    return _ci(cells, keys, fn, rules), ev


def _verdict_of(fn, claim, ci, ev, name, unit, rules, margin=0.0, two_sided=False, why_missing="") -> dict:
    if ci is None:
        return _result(fn, claim, "inconclusive", why_missing or "not enough data: see evidence.missing",
                       evidence=ev)
    verdict, reason = decide(ci[1], ci[2], margin, two_sided)
    return _result(fn, claim, verdict, reason, _effect(name, unit, *ci, rules), ev)


def _scn(kind: str) -> list[str]:
    """Scenario ids of a kind: 'lm', 'cls', or a task ('multilabel', 'singlelabel')."""
    pick = {"lm": lambda x: x.is_lm, "cls": lambda x: not x.is_lm}.get(kind, lambda x: x.task == kind)
    return [s for s, x in SCENARIOS.items() if pick(x)]


def h1_output_head(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 001 H1, output-layer precision. Effect: quality gain of amp_bf16_fp32_head over
    amp_bf16 in % of amp_bf16's quality (> 0 = the fp32 head is better), averaged over the
    classification scenarios C-F where both configs have >= min_seeds ok seeds; the same over
    the LM scenarios A, B is the control. supported: the classification CI is above 0 (and
    outside +-margin_quality_pct) and the LM CI is not above 0. rejected: the classification CI
    is below 0 or inside the margin, or the LM CI is above 0 too (not classification-specific).
    inconclusive: otherwise, or no usable classification or LM scenario."""
    claim = "amp_bf16_fp32_head beats amp_bf16 on classification but not on LM"
    x, ref = "amp_bf16_fp32_head", "amp_bf16"
    cells = seed_values(df, "quality", oriented=False)
    value = lambda m, s: _gain(m, x, ref, s, sign(df, "quality", s))  # noqa: E731
    cls, ev = _contrast(cells, {s: [(s, x), (s, ref)] for s in _scn("cls")}, {}, value, rules)
    lm, ev_lm = _contrast(cells, {s: [(s, x), (s, ref)] for s in _scn("lm")}, {}, value, rules)
    ev = {"cls": ev["plus"], "lm": ev_lm["plus"],
          "lm_effect": _effect("LM quality gain", "%", *lm, rules) if lm else None}
    res = _verdict_of(h1_output_head, claim, cls, ev, "classification quality gain of the fp32 head", "%",
                      rules, rules.margin_quality_pct)
    if res["verdict"] == "supported":
        if lm is None:
            res.update(verdict="inconclusive", reason=res["reason"] + "; no usable LM scenario for the control")
        elif lm[1] > 0:
            res.update(verdict="rejected", reason=res["reason"] + f"; but the LM CI [{lm[1]:.4g}, {lm[2]:.4g}] "
                       "is above 0 too: the gain is not classification-specific")
        else:
            res["reason"] += f"; LM CI [{lm[1]:.4g}, {lm[2]:.4g}] not above 0"
    return res


def divergence_table(df: pd.DataFrame, configs=("fp16_naive", "fp16_naive_noscale")) -> pd.DataFrame:
    """Per config x scenario: runs that trained (ok or diverged), how many diverged and at which
    steps, or that none did in N steps (seed 001 H2: 'track when/if loss explodes')."""
    rows = []
    d = df[df["config"].isin(configs) & df["status"].isin(["ok", "diverged"])]
    for (c, s), g in d.groupby(["config", "scenario"]):
        steps = sorted(int(v) for v in g.loc[g["status"] == "diverged", "stability/diverged_step"].dropna())
        n, k = len(g), int((g["status"] == "diverged").sum())
        trained = int(g["run.steps"].max()) if g["run.steps"].notna().any() else None
        rows.append({"config": c, "scenario": s, "runs": n, "diverged": k, "diverged_steps": steps,
                     "median_step": float(np.median(steps)) if steps else None, "train_steps": trained,
                     "summary": (f"diverged in {k}/{n} runs at step(s) {', '.join(map(str, steps))}" if k else
                                 f"did not diverge in {n} run(s) of {trained} steps")})
    return pd.DataFrame(rows, columns=["config", "scenario", "runs", "diverged", "diverged_steps", "median_step",
                                       "train_steps", "summary"])


def h2_stability(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 001 H2, stability. Config: fp16_naive_noscale (seed 001's fp16 without loss
    scaling), or fp16_naive (static scale 1024) when the study has no noscale runs. Effect:
    divergence rate (share of ok + diverged runs that diverged) on LM (A, B) minus on
    classification (C-F), each the mean over its scenarios with >= min_seeds runs. supported:
    the CI excludes 0 in either direction (classification hides or amplifies it); rejected: the
    CI is inside +-margin_rate (same behaviour); inconclusive: otherwise or a group without
    data. The evidence gives, per task, the step at which fp16_naive and fp16_naive_noscale
    diverged or that they did not."""
    cfg = "fp16_naive_noscale" if (df["config"] == "fp16_naive_noscale").any() else "fp16_naive"
    claim = f"{cfg} diverges at a different rate on classification than on LM"
    cells = seed_values(df, "diverged")
    ci, ev = _contrast(cells, {s: [(s, cfg)] for s in _scn("lm")}, {s: [(s, cfg)] for s in _scn("cls")},
                       lambda m, s: m[s, cfg], rules)
    ev = {"config": cfg, "lm": ev["plus"], "cls": ev["minus"],
          "divergence": divergence_table(df).to_dict(orient="records")}
    return _verdict_of(h2_stability, claim, ci, ev, "divergence rate LM - classification", "share of runs",
                       rules, rules.margin_rate, two_sided=True)


def h3_8bit_adam(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 001 H3, 8-bit Adam. Degradation: quality loss of amp_bf16_8bit_adam vs amp_bf16 in %
    of amp_bf16's quality (> 0 = 8-bit is worse). Effect: mean degradation on classification
    (C-F) minus on LM (A, B). supported: CI above 0 (8-bit Adam hurts classification more);
    rejected: CI below 0 or inside +-margin_quality_pct; inconclusive: otherwise or a group
    without data. Evidence adds the memory saving per task."""
    claim = "amp_bf16_8bit_adam degrades quality more on classification than on LM"
    x, ref = "amp_bf16_8bit_adam", "amp_bf16"
    cells = seed_values(df, "quality", oriented=False)
    ci, ev = _contrast(cells, {s: [(s, x), (s, ref)] for s in _scn("cls")},
                       {s: [(s, x), (s, ref)] for s in _scn("lm")},
                       lambda m, s: -_gain(m, x, ref, s, sign(df, "quality", s)), rules)
    mem = {k: v.mean() for k, v in seed_values(df, "memory", oriented=False).items()}
    saving = {s: 100 * (1 - mem[s, x] / mem[s, ref]) for s in sorted({s for s, _ in mem})
              if (s, x) in mem and (s, ref) in mem}
    ev = {"cls": ev["plus"], "lm": ev["minus"], "memory_saving_pct": saving}
    return _verdict_of(h3_8bit_adam, claim, ci, ev, "degradation classification - LM", "% of quality",
                       rules, rules.margin_quality_pct)


def _fronts(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pareto fronts of (B, n) arrays, both higher-is-better, vectorised over B."""
    xi, yi, xj, yj = x[:, :, None], y[:, :, None], x[:, None, :], y[:, None, :]
    return ~((xj >= xi) & (yj >= yi) & ((xj > xi) | (yj > yi))).any(axis=2)


def h4_frontier(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 001 H4, the throughput-memory frontier shifts between tasks. Frontier per scenario
    (throughput higher, memory lower is better) over the configs with >= min_seeds ok seeds on
    every scenario present. Effect: mean Jaccard distance (1 - |A and B| / |A or B|) between the
    frontiers of each LM x classification scenario pair; the bootstrap resamples each cell's
    runs (throughput and memory together). supported: CI above 0; rejected: CI = [0, 0] (the
    same frontier in nearly every resample); inconclusive: otherwise, or no LM or no
    classification scenario, or < 2 shared configs."""
    claim = "the throughput-memory Pareto frontier differs between LM and classification"
    ok = df[df["status"] == "ok"].dropna(subset=["throughput", "memory"])
    cells = {k: g[["throughput", "memory"]].to_numpy(float) for k, g in ok.groupby(["scenario", "config"])}
    g = groups(ok["scenario"].unique())
    scns = g["lm"] + g["cls"]
    configs = sorted(c for c in ok["config"].unique()
                     if all(len(cells.get((s, c), ())) >= rules.min_seeds for s in scns))
    ev = {"configs": configs, "lm": g["lm"], "cls": g["cls"]}
    if not g["lm"] or not g["cls"] or len(configs) < 2:
        return _result(h4_frontier, claim, "inconclusive", "needs an LM and a classification scenario with >= 2 "
                       f"configs of >= {rules.min_seeds} ok seeds on both", evidence=ev)
    rng = np.random.default_rng(rules.seed)
    point = {s: np.stack([cells[s, c].mean(0) for c in configs])[None] for s in scns}       # (1, n, 2)
    boot = {s: np.stack([cells[s, c][rng.integers(0, len(cells[s, c]), (rules.n_boot, len(cells[s, c])))].mean(1)
                         for c in configs], axis=1) for s in scns}                           # (B, n, 2)

    def dist(v):
        f = {s: _fronts(v[s][..., 0], -v[s][..., 1]) for s in scns}
        d = [1 - (f[a] & f[b]).sum(1) / (f[a] | f[b]).sum(1) for a, b in product(g["lm"], g["cls"])]
        return np.mean(d, axis=0), f
    est, f = dist(point)
    b, _ = dist(boot)
    lo, hi = np.percentile(b, [50 * (1 - rules.conf), 50 * (1 + rules.conf)])
    ev["frontiers"] = {s: [c for c, on in zip(configs, f[s][0]) if on] for s in scns}
    verdict, reason = decide(float(lo), float(hi), 0.0)
    return _result(h4_frontier, claim, verdict, reason,
                   _effect("Jaccard distance of frontiers LM vs classification", "0-1", float(est[0]), float(lo),
                           float(hi), rules), ev)


def s2_h1_fp16_multilabel(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 002 H1: fp16_naive (static loss scale 1024) survives single-label CE but diverges
    on multi-label BCE. Effect: divergence rate on multi-label (C, D) minus single-label (E, F),
    each the mean over its scenarios with >= min_seeds ok + diverged runs. supported: CI above
    0; rejected: CI below 0 or inside +-margin_rate; inconclusive: otherwise or a task without
    data."""
    claim = "fp16_naive survives single-label CE but diverges on multi-label BCE"
    cells, cfg = seed_values(df, "diverged"), "fp16_naive"
    ci, ev = _contrast(cells, {s: [(s, cfg)] for s in _scn("multilabel")},
                       {s: [(s, cfg)] for s in _scn("singlelabel")}, lambda m, s: m[s, cfg], rules)
    ev = {"multilabel": ev["plus"], "singlelabel": ev["minus"]}
    return _verdict_of(s2_h1_fp16_multilabel, claim, ci, ev, "divergence rate multi-label - single-label",
                       "share of runs", rules, rules.margin_rate)


def s2_h2_bf16_mfu(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 002 H2: bf16_pure gains more MFU over fp32 on RoBERTa than on GPT-2. MFU gain =
    MFU(bf16_pure) / MFU(fp32_baseline) on the same model and device, which equals the ratio of
    tokens/s (the FLOPs per token and the peak cancel), so it is read from ``tokens_per_s``.
    Effect: mean over the matched task pairs (A,B), (C,D), (E,F) of gain(RoBERTa) -
    gain(GPT-2). supported: CI above 0; rejected: CI below 0 or inside +-margin_speedup;
    inconclusive: otherwise or no usable pair."""
    claim = "bf16_pure shows a higher MFU gain over fp32 on RoBERTa than on GPT-2"
    x, ref = "bf16_pure", BASELINE
    cells = seed_values(df, "tokens_per_s", oriented=False)
    units = {f"{g}-{r}": [(g, x), (g, ref), (r, x), (r, ref)] for g, r in ARCH_PAIRS}
    value = lambda m, u: m[u[2], x] / m[u[2], ref] - m[u[0], x] / m[u[0], ref]  # noqa: E731
    ci, ev = _contrast(cells, units, {}, value, rules)
    return _verdict_of(s2_h2_bf16_mfu, claim, ci, ev["plus"], "MFU gain RoBERTa - GPT-2", "x fp32", rules,
                       rules.margin_speedup)


def s2_h3_gpt2_precision(df: pd.DataFrame, rules: Rules = Rules(), configs=LOW_PRECISION) -> dict:
    """seed 002 H3: GPT-2 classification needs higher precision than RoBERTa. Quality loss of
    a low-precision config = -(its quality gain over fp32_baseline, % of fp32's quality).
    Effect: mean over the matched classification pairs (C,D), (E,F) and the low-precision
    configs of the study (amp_fp16, amp_bf16, bf16_pure, bf16_naive, fp16_naive) of loss(GPT-2)
    - loss(RoBERTa). supported: CI above 0; rejected: CI below 0 or inside
    +-margin_quality_pct; inconclusive: otherwise or no usable (pair, config)."""
    claim = "low-precision configs lose more quality vs fp32 on GPT-2 classification (C, E) than RoBERTa (D, F)"
    cells = seed_values(df, "quality", oriented=False)
    present = [c for c in configs if (df["config"] == c).any()]
    units = {f"{g}-{r}/{c}": (g, r, c) for g, r in ARCH_PAIRS[1:] for c in present}
    value = lambda m, u: (_gain(m, units[u][2], BASELINE, units[u][1], sign(df, "quality", units[u][1]))  # noqa: E731
                          - _gain(m, units[u][2], BASELINE, units[u][0], sign(df, "quality", units[u][0])))
    ci, ev = _contrast(cells, {u: [(g, c), (g, BASELINE), (r, c), (r, BASELINE)] for u, (g, r, c) in units.items()},
                       {}, value, rules)
    return _verdict_of(s2_h3_gpt2_precision, claim, ci, ev["plus"], "quality loss GPT-2 - RoBERTa", "% of quality",
                       rules, rules.margin_quality_pct, why_missing="no low-precision config with fp32_baseline "
                       "on both architectures of a classification task" if not present else "")


HYPOTHESES = {"seed001.H1": h1_output_head, "seed001.H2": h2_stability, "seed001.H3": h3_8bit_adam,
              "seed001.H4": h4_frontier, "seed002.H1": s2_h1_fp16_multilabel, "seed002.H2": s2_h2_bf16_mfu,
              "seed002.H3": s2_h3_gpt2_precision}


def evaluate_all(df: pd.DataFrame, rules: Rules = Rules()) -> dict[str, dict]:
    """Every hypothesis' verdict. A rule that fails on odd data reports ``inconclusive`` with
    the error rather than taking the comparison down."""
    out = {}
    for hid, fn in HYPOTHESES.items():
        try:
            out[hid] = fn(df, rules)
        except Exception as e:  # noqa: BLE001 - the comparison must finish; the reason names the error
            out[hid] = _result(fn, inspect.getdoc(fn).split(".")[0], "inconclusive",
                               f"could not evaluate: {type(e).__name__}: {e}")
    return out


def verdict_table(hyps: dict[str, dict]) -> pd.DataFrame:
    """One row per hypothesis: claim, verdict, effect and CI, reason."""
    rows = []
    for hid, h in hyps.items():
        e = h["effect"] or {}
        rows.append({"id": hid, "claim": h["claim"], "verdict": h["verdict"], "effect": e.get("name"),
                     "estimate": e.get("estimate"), "ci_low": e.get("ci_low"), "ci_high": e.get("ci_high"),
                     "unit": e.get("unit"), "reason": h["reason"]})
    return pd.DataFrame(rows)


# ---- recommendations -----------------------------------------------------------------------
def safety(df: pd.DataFrame, rules: Rules = Rules()) -> pd.DataFrame:
    """Per (scenario, config): ``safe`` when every run is ok and the quality is not worse than
    the scenario's best config beyond seed noise: the bootstrap share of resamples where the
    best is better stays < conf. With < min_seeds ok seeds on either side the noise cannot be
    estimated, so quality cannot disqualify (``tested`` = False) and only failed runs do.
    Cells whose runs were all skipped (the hardware cannot run the config) are left out."""
    q = seed_values(df, "quality")
    boot = bootstrap_means({k: v for k, v in q.items() if len(v) >= rules.min_seeds}, rules.n_boot,
                           np.random.default_rng(rules.seed + 2))
    rows = []
    for (s, c), g in df.groupby(["scenario", "config"]):
        if (g["status"] == "skipped").all():
            continue
        means = {cc: v.mean() for (ss, cc), v in q.items() if ss == s}
        best = max(means, key=means.get) if means else None
        row = {"scenario": s, "config": c, "runs": len(g), "ok": int((g["status"] == "ok").sum()), "best": best,
               "gap_pct": np.nan, "support": np.nan, "tested": False, "safe": False}
        if row["ok"] < len(g):
            bad = g.loc[g["status"] != "ok", "status"].value_counts()
            steps = g["stability/diverged_step"].dropna()
            row["reason"] = ", ".join(f"{k} {v}/{len(g)}" for k, v in bad.items()) + (
                f" (median divergence step {steps.median():.0f})" if len(steps) else "")
        elif (s, c) not in q:
            row["reason"] = "no quality value"
        else:
            row["gap_pct"] = gap = 100 * (means[best] - means[c]) / abs(means[best])
            row["tested"] = c == best or ((s, c) in boot and (s, best) in boot)
            if c != best and row["tested"]:
                row["support"] = float(np.mean(boot[s, best] > boot[s, c]))
            worse = row["support"] >= rules.conf
            row["safe"] = not worse
            row["reason"] = (f"quality {gap:.2f}% below the best ({best}), bootstrap support {row['support']:.0%}"
                             if worse else "safe" if row["tested"] else
                             f"safe as far as known: quality noise not estimated (< {rules.min_seeds} ok seeds)")
        rows.append(row)
    return pd.DataFrame(rows, columns=["scenario", "config", "runs", "ok", "best", "gap_pct", "support", "tested",
                                       "safe", "reason"])


def recommendations(df: pd.DataFrame, stats: pd.DataFrame, rules: Rules = Rules()) -> tuple[dict, pd.DataFrame]:
    """Rules over ``safety``: ``universal`` = configs safe on every scenario of the study,
    fastest first (mean throughput rank); the first is the default, and the lowest-memory one
    is named for memory-bound work. ``per_task[s]`` = the fastest safe config on s, and configs
    unsafe on s that are safe elsewhere. ``lm_specific`` / ``cls_specific`` = safe on every LM
    (classification) scenario but not on every classification (LM) one. ``avoid`` = safe nowhere.
    Every line carries its numbers (speed and memory vs fp32_baseline, or ranks)."""
    saf = safety(df, rules)
    scns = sorted(saf["scenario"].unique())
    piv = _pivots(stats)
    safe = {c: set(g.loc[g["safe"], "scenario"]) for c, g in saf.groupby("config")}
    speed_order = lambda cs: sorted(cs, key=lambda c: piv["throughput_rank"].loc[c].mean())  # noqa: E731

    def numbers(c, on):
        t, m = piv["throughput_rel"].loc[c, on].dropna(), piv["memory_rel"].loc[c, on].dropna()
        if len(t):
            spread = f"; {t.min():.2f}-{t.max():.2f}x" if t.max() - t.min() >= 0.01 else ""
            out = f"throughput {np.exp(np.log(t).mean()):.2f}x fp32" + (
                f" (geo-mean over {', '.join(t.index)}{spread})" if len(t) > 1 else f" on {t.index[0]}")
            return out + (f", memory {np.exp(np.log(m).mean()):.2f}x fp32" if len(m) else "")
        return f"mean throughput rank {piv['throughput_rank'].loc[c, on].mean():.1f}"

    def caveat(c, on):
        u = sorted(saf.loc[(saf["config"] == c) & saf["scenario"].isin(on) & ~saf["tested"].astype(bool), "scenario"])
        return f" [quality noise not estimated on {', '.join(u)}: < {rules.min_seeds} ok seeds]" if u else ""

    universal = speed_order([c for c, ss in safe.items() if set(scns) <= ss])
    rec = {"universal": [], "lm_specific": [], "cls_specific": [], "per_task": {}, "avoid": []}
    every = f"safe on all {len(scns)} scenarios ({', '.join(scns)}: every run ok, quality within seed noise of the best)"
    for i, c in enumerate(universal):
        rec["universal"].append(f"{'default: ' if i == 0 else ''}{c} - {every}; {numbers(c, scns)}{caveat(c, scns)}")
    if len(universal) > 1:
        lean = min(universal, key=lambda c: piv["memory_rank"].loc[c].mean())
        if lean != universal[0]:
            rec["universal"].append(f"memory-bound: {lean} - lowest memory of the universally safe configs; "
                                    f"{numbers(lean, scns)}")
    if not universal and safe:
        most = max(safe, key=lambda c: (len(safe[c]), -piv["throughput_rank"].loc[c].mean()))
        rec["universal"].append(f"no config is safe on every scenario; safe on the most: {most} "
                                f"({len(safe[most])}/{len(scns)}: {', '.join(sorted(safe[most]))})")
    default = universal[0] if universal else None
    for s in scns:
        here = saf[saf["scenario"] == s].set_index("config")
        lines = []
        fast = speed_order([c for c in here.index if here.loc[c, "safe"]])
        if fast:
            c = fast[0]
            g = piv["quality_gain"].loc[c, s]
            lines.append(f"{s}: fastest safe config {c} ({numbers(c, [s])}"
                         + (f", quality {round(g, 2) + 0.0:+.2f}% vs fp32" if pd.notna(g) else "") + ")"
                         + ("" if c == default else f"; differs from the default {default}" if default else "")
                         + caveat(c, [s]))
        for c in here.index[~here["safe"].astype(bool)]:
            if safe.get(c):
                lines.append(f"{s}: avoid {c} - {here.loc[c, 'reason']} (safe on {', '.join(sorted(safe[c]))})")
        rec["per_task"][s] = lines
    g = groups(scns)
    for name, mine, other in (("lm_specific", g["lm"], g["cls"]), ("cls_specific", g["cls"], g["lm"])):
        for c in speed_order([c for c, ss in safe.items() if mine and other and set(mine) <= ss
                              and not set(other) <= ss]):
            why = _reasons(saf[(saf["config"] == c) & ~saf["safe"].astype(bool) & saf["scenario"].isin(other)])
            rec[name].append(f"{c} - safe on {'LM' if name == 'lm_specific' else 'classification'} "
                             f"({', '.join(mine)}) but not on {why}; {numbers(c, mine)}")
    for c in sorted(set(saf["config"]) - {c for c, ss in safe.items() if ss}):
        why = _reasons(saf[saf["config"] == c])
        rec["avoid"].append(f"{c} - safe on no scenario ({why})")
    return rec, saf


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
