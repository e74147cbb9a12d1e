"""Verdicts on seed 001's H1-H4 and seed 002's three hypotheses, each by an explicit,
parameterised rule.

Noise is judged as everywhere else (``stats.Rules``): an unpaired percentile bootstrap over
seeds, each (scenario, config) cell resampled with replacement on its own. An effect's CI is
the central ``conf`` interval of the effect over the resamples, and a verdict reads it
(``decide``):

- ``inconclusive`` when a needed (scenario, config) has fewer than ``min_seeds`` runs (the
  reason names the cells short of seeds and how many are needed), or the CI is undefined;
- ``rejected`` when the CI lies inside [-margin, +margin] (no effect worth the name) or
  entirely below 0 (the opposite holds);
- ``supported`` when the CI lies entirely above 0 (or, for a claim that two things merely
  differ, entirely on either side);
- ``inconclusive`` otherwise (the CI straddles 0).

Scenarios whose quality is not established (the reference did not learn, or the records carry
no trivial baseline: ``analysis.learned_scenarios``) are left out of every verdict, and the
verdict says so (``evidence.not_learned`` and the reason). Otherwise the runs that count are
the evidence gates' (``analysis``): throughput and memory from runs that finished, quality
from runs that did not fail for quality, stability from runs that trained. Each verdict
function's docstring is its rule and is copied into ``comparison.json``.
"""
from __future__ import annotations

import functools
import inspect
import re
from itertools import product
from typing import Callable

import numpy as np
import pandas as pd

from benchlib.analysis.tables import BASELINE, excluded_configs, gated, groups, sign, speed_runs, why_not_established
from benchlib.analysis.stats import Rules, bootstrap_means
from benchlib.analysis.tables import seed_values
from benchlib.core.records import TRAINED
from benchlib.core.scenarios import SCENARIOS

# seed 002 compares the architectures on matched tasks: (GPT-2, RoBERTa) scenario pairs
ARCH_PAIRS = (("A", "B"), ("C", "D"), ("E", "F"))
LOW_PRECISION = ("amp_fp16", "amp_bf16", "bf16_pure", "bf16_naive", "fp16_naive")


# ---- CIs and verdicts ----------------------------------------------------------------------
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



# ---- hypotheses ----------------------------------------------------------------------------
def _noted(res: dict, key: str, value, scenarios, why: str) -> dict:
    """``res`` with ``evidence[key]`` and a reason clause naming the scenarios, when any."""
    if scenarios:
        res["evidence"] = {**(res["evidence"] or {}), key: value}
        res["reason"] += f"; scenario(s) {', '.join(scenarios)} {why}"
    return res


def speed_rule(fn: Callable) -> Callable:
    """Run a speed or memory rule on every scenario, also where quality is not established
    (a speed-only study: short runs at a size where the step is not launch-bound). There a
    run's ``stalled`` says only that the scenario did not learn in the run's steps, the
    reference config included, so it takes no config off a frontier or out of a contrast;
    diverged, oom and error runs still do. The verdict's ``evidence.speed_only`` names those
    scenarios, and its reason says so."""
    @functools.wraps(fn)
    def rule(df: pd.DataFrame, rules: Rules = Rules(), **kw) -> dict:
        df = gated(df, rules).copy()
        speed_only = ~df["quality_established"]
        df.loc[speed_only & (df["health"] == "stalled"), "health"] = "ok"
        names = sorted(df.loc[speed_only, "scenario"].unique())
        return _noted(fn(df, rules, **kw), "speed_only", names, names,
                      "count for speed only (quality not established there, so a stalled run is not a failure)")
    return rule


def learned_only(fn: Callable) -> Callable:
    """Run a verdict rule on the scenarios whose quality is established only; the verdict's
    ``evidence.not_learned`` names the others and why, and its reason says they were skipped."""
    @functools.wraps(fn)
    def rule(df: pd.DataFrame, rules: Rules = Rules(), **kw) -> dict:
        df = gated(df, rules)
        skipped = {s: why_not_established(df, s)
                   for s in sorted(df.loc[~df["quality_established"], "scenario"].unique())}
        why = "; ".join(f"{s}: {r}" for s, r in skipped.items())
        return _noted(fn(df[df["quality_established"]], rules, **kw), "not_learned", skipped, list(skipped),
                      f"skipped: quality not established ({why})")
    return rule


def _contrast(cells: dict, plus: dict, minus: dict, value: Callable, rules: Rules):
    """CI of mean(value over the usable ``plus`` units) - mean(over the usable ``minus``
    units); with ``minus`` empty, of the plain mean. A unit (a scenario, or a scenario pair)
    names the cells it needs and is usable when each has >= min_seeds values; ``missing``
    lists the cells short of seeds (with how many they have of the min_seeds needed). Returns
    (point, lo, hi) or None when a side has no usable unit, and the evidence."""
    ev, used = {}, {}
    studied = {s for s, _ in cells}  # cells short of seeds are listed for the scenarios the study has
    for side, units in (("plus", plus), ("minus", minus)):
        ok = {u: ks for u, ks in units.items() if all(len(cells.get(k, ())) >= rules.min_seeds for k in ks)}
        miss = sorted({f"{s}/{c} ({len(cells.get((s, c), ()))} of {rules.min_seeds} seeds)" for u, ks in units.items()
                       if u not in ok for s, c in ks if len(cells.get((s, c), ())) < rules.min_seeds and s in studied})
        used[side] = ok
        ev[side] = {"used": list(ok), "missing": miss}
    keys = sorted({k for side in used.values() for ks in side.values() for k in ks})
    m = {k: cells[k].mean() for k in keys}
    for side in used:
        ev[side]["values"] = {u: float(value(m, u)) for u in used[side]}
        ks = {k for u in used[side].values() for k in u}
        if ks:
            ev[side]["seeds"] = min(len(cells[k]) for k in ks)  # the fewest seeds behind a cell mean
    if not used["plus"] or (minus and not used["minus"]):
        return None, ev

    def fn(mm):
        out = np.mean([value(mm, u) for u in used["plus"]], axis=0)
        return out - np.mean([value(mm, u) for u in used["minus"]], axis=0) if minus else out
    return _ci(cells, keys, fn, rules), ev


def _missing(ev) -> list[str]:
    """Every ``missing`` entry of a (nested) evidence dict."""
    if isinstance(ev, dict):
        return sorted({m for k, v in ev.items() for m in (v if k == "missing" else _missing(v))})
    return []


def _seeds_used(ev) -> list[int]:
    """Every ``seeds`` entry of a (nested) evidence dict."""
    if isinstance(ev, dict):
        return [n for k, v in ev.items() for n in ([v] if k == "seeds" else _seeds_used(v))]
    return []


SETTLE_MAX = 1000
"""Beyond this many seeds per (scenario, config), ``seeds_to_settle`` says the effect is too small
against the noise to be worth settling."""


def seeds_to_settle(point: float, lo: float, hi: float, n: int) -> int | None:
    """About how many seeds per (scenario, config) would put a CI that includes 0 clear of it,
    were the effect and the seed-to-seed noise what they are now: a bootstrap CI narrows as
    1/sqrt(seeds), so the bound on 0's side moves from ``point`` by (its distance now) x
    sqrt(n / n'); None when the point estimate is 0 (no number of seeds settles a null effect's
    sign)."""
    if point == 0 or not (np.isfinite(lo) and np.isfinite(hi)) or n < 1:
        return None
    dist = point - lo if point > 0 else hi - point
    return int(np.ceil(n * (dist / abs(point)) ** 2))


def _verdict_of(fn, claim, ci, ev, name, unit, rules, margin=0.0, two_sided=False, why_missing="") -> dict:
    if ci is None:
        miss = _missing(ev)
        short = (f"needs >= {rules.min_seeds} ok seeds per (scenario, config); short: {', '.join(miss[:8])}"
                 + (f" and {len(miss) - 8} more" if len(miss) > 8 else "") if miss else
                 "no scenario with the configs it compares")
        return _result(fn, claim, "inconclusive", why_missing or f"not enough data: {short}", evidence=ev)
    verdict, reason = decide(ci[1], ci[2], margin, two_sided)
    effect = _effect(name, unit, *ci, rules)
    n = min(_seeds_used(ev), default=0)
    if verdict == "inconclusive" and n:
        need = seeds_to_settle(*ci, n)
        effect["seeds_to_settle"] = need
        reason += (f": the effect ({ci[0]:.3g} {unit}) is smaller than the seed noise; "
                   + ("no number of seeds settles an estimate of 0" if need is None else
                      f"more than {SETTLE_MAX} seeds per (scenario, config) would be needed: too small to matter"
                      if need > SETTLE_MAX else
                      f"about {need} seeds per (scenario, config) would settle it at this effect and noise (now {n})"))
    return _result(fn, claim, verdict, reason, effect, ev)


def _scn(kind: str) -> list[str]:
    """Scenario ids of a kind: 'lm', 'cls', or a task ('multilabel', 'singlelabel')."""
    pick = {"lm": lambda x: x.is_lm, "cls": lambda x: not x.is_lm}.get(kind, lambda x: x.task == kind)
    return [s for s, x in SCENARIOS.items() if pick(x)]


@learned_only
def output_head_effect(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
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
    res = _verdict_of(output_head_effect, claim, cls, ev, "classification quality gain of the fp32 head", "%",
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
    """Per config x scenario: runs that trained (finished or diverged), how many diverged and at
    which steps, or that none did in N steps (seed 001 H2: 'track when/if loss explodes')."""
    rows = []
    d = df[df["config"].isin(configs) & df["status"].isin(TRAINED)]
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


@learned_only
def naive_fp16_stability(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 001 H2, stability. Config: fp16_naive_noscale (seed 001's fp16 without loss
    scaling), or fp16_naive (static scale 1024) when the study has no noscale runs. Effect:
    divergence rate (share of the runs that trained that diverged) on LM (A, B) minus on
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
    return _verdict_of(naive_fp16_stability, claim, ci, ev, "divergence rate LM - classification", "share of runs",
                       rules, rules.margin_rate, two_sided=True)


@learned_only
def adam_8bit_effect(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
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
    return _verdict_of(adam_8bit_effect, claim, ci, ev, "degradation classification - LM", "% of quality",
                       rules, rules.margin_quality_pct)


def _fronts(x: np.ndarray, y: np.ndarray, tol_pct: float = 0.0) -> np.ndarray:
    """Pareto fronts of (B, n) arrays, both higher-is-better, vectorised over B. Differences
    within ``tol_pct`` % of a point's value are ties: a point is dominated by one no worse on
    both axes beyond the tolerance and better beyond it on one (on C of the speed study,
    fp16_naive_eps1e4 was otherwise on the frontier by 1 KiB less memory than bf16_naive,
    9% slower)."""
    xi, yi, xj, yj = x[:, :, None], y[:, :, None], x[:, None, :], y[:, None, :]
    ex, ey = np.abs(xi) * tol_pct / 100, np.abs(yi) * tol_pct / 100
    return ~((xj >= xi - ex) & (yj >= yi - ey) & ((xj > xi + ex) | (yj > yi + ey))).any(axis=2)


@speed_rule
def bf16_on_frontier(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 001 H4, the throughput-memory frontier shifts between tasks. For each LM x
    classification scenario pair, the configs with >= min_seeds ok seeds on both scenarios and
    no failed run (diverged, degraded, stalled) on either, when there are >= 2 of them; each
    scenario's frontier over those configs (throughput higher, memory lower is better;
    differences below min_size_pct % are ties). Effect: mean Jaccard distance (1 - |A and B| /
    |A or B|) between the two frontiers of each such pair; the bootstrap resamples each cell's
    runs (throughput and memory together), once per draw for all pairs. supported: CI above 0;
    rejected: CI = [0, 0] (the same frontier in nearly every resample); inconclusive: otherwise,
    or no pair with >= 2 shared configs."""
    claim = "the throughput-memory Pareto frontier differs between LM and classification"
    failed = excluded_configs(df)  # a config with a failed run is on no frontier
    healthy = np.array([k not in failed for k in zip(df["scenario"], df["config"])], bool)
    ok = df[speed_runs(df) & healthy].dropna(subset=["throughput", "memory"])
    cells = {k: g[["throughput", "memory"]].to_numpy(float) for k, g in ok.groupby(["scenario", "config"])}
    g = groups(ok["scenario"].unique())
    seeded = lambda s: {c for (s2, c), v in cells.items() if s2 == s and len(v) >= rules.min_seeds}  # noqa: E731
    shared = {(a, b): sorted(seeded(a) & seeded(b)) for a, b in product(g["lm"], g["cls"])}
    pairs = {p: cs for p, cs in shared.items() if len(cs) >= 2}
    ev = {"configs": sorted(set().union(*pairs.values())), "lm": g["lm"], "cls": g["cls"],
          "pairs": {f"{a}-{b}": cs for (a, b), cs in pairs.items()}}
    if not pairs:
        return _result(bf16_on_frontier, claim, "inconclusive", "needs an LM and a classification scenario with >= 2 "
                       f"configs of >= {rules.min_seeds} ok seeds on both", evidence=ev)
    rng = np.random.default_rng(rules.seed)
    used = sorted({(s, c) for (a, b), cs in pairs.items() for s in (a, b) for c in cs})
    point = {k: cells[k].mean(0)[None] for k in used}                                        # (1, 2)
    boot = {k: cells[k][rng.integers(0, len(cells[k]), (rules.n_boot, len(cells[k])))].mean(1) for k in used}  # (B, 2)

    def dist(v):
        d, fronts = [], {}
        for (a, b), cs in pairs.items():
            f = {}
            for s in (a, b):
                tp_mem = np.stack([v[s, c] for c in cs], axis=1)                             # (B, n, 2)
                f[s] = _fronts(tp_mem[..., 0], -tp_mem[..., 1], rules.min_size_pct)
            d.append(1 - (f[a] & f[b]).sum(1) / (f[a] | f[b]).sum(1))
            fronts[f"{a}-{b}"] = {s: [c for c, on in zip(cs, f[s][0]) if on] for s in (a, b)}
        return np.mean(d, axis=0), fronts
    est, ev["frontiers"] = dist(point)
    differ = [f"{p} ({'; '.join(f'{s}: ' + ', '.join(cs) for s, cs in f.items())})"
              for p, f in ev["frontiers"].items() if len({tuple(cs) for cs in f.values()}) > 1]
    ev["summary"] = (f"frontiers differ on {', '.join(differ)}" if differ else
                     f"the same frontier on {', '.join(ev['frontiers'])}")
    b, _ = dist(boot)
    lo, hi = np.percentile(b, [50 * (1 - rules.conf), 50 * (1 + rules.conf)])
    verdict, reason = decide(float(lo), float(hi), 0.0)
    return _result(bf16_on_frontier, claim, verdict, reason,
                   _effect("Jaccard distance of frontiers LM vs classification", "0-1", float(est[0]), float(lo),
                           float(hi), rules), ev)


@learned_only
def fp16_multilabel_divergence(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 002 H1: fp16_naive (static loss scale 1024) survives single-label CE but diverges
    on multi-label BCE. Effect: divergence rate on multi-label (C, D) minus single-label (E, F),
    each the mean over its scenarios with >= min_seeds runs that trained. supported: CI above
    0; rejected: CI below 0 or inside +-margin_rate; inconclusive: otherwise or a task without
    data."""
    claim = "fp16_naive survives single-label CE but diverges on multi-label BCE"
    cells, cfg = seed_values(df, "diverged"), "fp16_naive"
    ci, ev = _contrast(cells, {s: [(s, cfg)] for s in _scn("multilabel")},
                       {s: [(s, cfg)] for s in _scn("singlelabel")}, lambda m, s: m[s, cfg], rules)
    ev = {"multilabel": ev["plus"], "singlelabel": ev["minus"]}
    return _verdict_of(fp16_multilabel_divergence, claim, ci, ev, "divergence rate multi-label - single-label",
                       "share of runs", rules, rules.margin_rate)


@speed_rule
def bf16_mfu_gain_by_arch(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
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
    return _verdict_of(bf16_mfu_gain_by_arch, claim, ci, ev["plus"], "MFU gain RoBERTa - GPT-2", "x fp32", rules,
                       rules.margin_speedup)


@learned_only
def precision_sensitivity_by_arch(df: pd.DataFrame, rules: Rules = Rules(), configs=LOW_PRECISION) -> dict:
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
    return _verdict_of(precision_sensitivity_by_arch, claim, ci, ev["plus"], "quality loss GPT-2 - RoBERTa", "% of quality",
                       rules, rules.margin_quality_pct, why_missing="no low-precision config with fp32_baseline "
                       "on both architectures of a classification task" if not present else "")


HYPOTHESES = {"seed001.H1": output_head_effect, "seed001.H2": naive_fp16_stability, "seed001.H3": adam_8bit_effect,
              "seed001.H4": bf16_on_frontier, "seed002.H1": fp16_multilabel_divergence, "seed002.H2": bf16_mfu_gain_by_arch,
              "seed002.H3": precision_sensitivity_by_arch}


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


_MARKER = re.compile(r"^([-+*#>|])")
_NUMBERED = re.compile(r"^(\d+)([.)])")


def markdown_text(text: str) -> str:
    """Plain text as one Markdown paragraph: line breaks joined (rules are wrapped docstrings,
    and a wrapped line that begins "- loss(RoBERTa)" would become a list item), and a leading
    character that would open a list, heading, quote or table escaped."""
    one = " ".join(str(text).split())
    return _NUMBERED.sub(r"\1\\\2", _MARKER.sub(r"\\\1", one))


def verdict_markdown(hid: str, h: dict) -> str:
    """One hypothesis for a notebook: id, claim, verdict and reason, then its rule as a quote."""
    return (f"**{hid}** — {markdown_text(h['claim'])}: **{h['verdict']}** ({markdown_text(h['reason'])})\n\n"
            f"> {markdown_text(h['rule'])}")
