"""The machinery of a hypothesis verdict (the rules are in ``hypotheses``): an effect is a mean over
*units* (a scenario, or a matched pair), or the difference of two; a unit is made of *pieces*, one
per scenario (``stats.piece``: paired by seed where the configs share ``Rules.min_seeds`` seeds),
resampled independently across scenarios. Verdicts: ``untestable`` (both arms at one ceiling or
floor, or every scenario it needs gated out), ``inconclusive`` (a cell short of ``min_seeds``, or
a CI straddling 0), ``rejected`` (a CI inside +-margin, or below 0), ``supported`` (a CI above 0;
for a claim that two things differ, on either side).
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable

import numpy as np
import pandas as pd
from scipy import stats as sps

from benchlib.analysis.gates import by_reason
from benchlib.analysis.stats import Rules, bootstrap, piece, rate_difference_ci
from benchlib.analysis.tables import gated, seed_series, why_not_established
from benchlib.core.records import TRAINED
from benchlib.core.scenarios import SCENARIOS

VERDICTS = ("supported", "rejected", "inconclusive", "untestable", "untestable here")
"""untestable here: measured away from the seed's stated premise (``hypotheses.at_premise``)."""
SETTLE_MAX = 1000  # more seeds than this per cell: the effect is too small to be worth settling


def short_cells(cells: dict, keys, rules: Rules, studied: set) -> list[str]:
    return sorted({f"{s}/{c} ({len(cells.get((s, c), ()))} of {rules.min_seeds} seeds)" for s, c in keys
                   if len(cells.get((s, c), ())) < rules.min_seeds and s in studied})


def effect_ci(units: dict, rules: Rules, minus: dict | None = None):
    """(point, lo, hi) of mean(unit values over ``units``) [- mean over ``minus``], each unit a
    (list of Piece, combine) pair; None when a side has no unit."""
    if not units or (minus is not None and not minus):
        return None
    sides = [units] + ([minus] if minus is not None else [])
    flat, layout = [], []
    for side in sides:
        spec = []
        for pieces, combine in side.values():
            idx = []
            for p in pieces:
                idx.append(list(range(len(flat), len(flat) + len(p.samples))))
                flat += [np.asarray(x, float) for x in p.samples]
            spec.append((pieces, idx, combine))
        layout.append(spec)

    def statistic(*samples, axis=-1):
        means = [np.mean(x, axis=axis) for x in samples]
        vals = [np.mean([combine([p.value(*[means[i] for i in ix]) for p, ix in zip(pieces, idx)])
                         for pieces, idx, combine in spec], axis=0) for spec in layout]
        return vals[0] - vals[1] if len(vals) == 2 else vals[0]
    point, lo, hi, _ = bootstrap(flat, statistic, rules)
    return point, lo, hi


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


def result(fn: Callable, claim: str, verdict: str, reason: str, effect: dict | None = None,
           evidence: dict | None = None) -> dict:
    return {"claim": claim, "rule": inspect.getdoc(fn), "verdict": verdict, "reason": reason,
            "effect": effect, "evidence": evidence or {}}


def effect(name: str, unit: str, est: float, lo: float, hi: float, rules: Rules) -> dict:
    return {"name": name, "unit": unit, "estimate": est, "ci_low": lo, "ci_high": hi, "conf": rules.conf}


def seeds_to_settle(point: float, lo: float, hi: float, n: int) -> int | None:
    """About how many seeds per cell would put a CI that includes 0 clear of it at this effect and
    noise (a CI narrows as 1/sqrt(seeds)); None when the point estimate is 0."""
    if point == 0 or not (np.isfinite(lo) and np.isfinite(hi)) or n < 1:
        return None
    dist = point - lo if point > 0 else hi - point
    return int(np.ceil(n * (dist / abs(point)) ** 2))


def seeds_to_settle_sides(point: float, sides: list[tuple[tuple, int]]) -> int | None:
    """``seeds_to_settle`` for an effect that is a difference of sides measured on different numbers
    of seeds (``sides``: each side's own (point, lo, hi) and seeds): each side's variance scales as
    1/seeds, so with k seeds a cell the half-width is sqrt(sum(hw_i^2 n_i) / k); the k that brings it
    down to the estimate. None when the estimate is 0."""
    if point == 0 or any(not (np.isfinite(lo) and np.isfinite(hi)) for (_, lo, hi), _ in sides):
        return None
    return int(np.ceil(sum(((hi - lo) / 2) ** 2 * n for (_, lo, hi), n in sides) / point ** 2))


def verdict_of(fn, claim, ci, ev, name, unit, rules, margin=0.0, two_sided=False, why_missing="",
               noise_from: dict | None = None, sides: list[tuple[tuple, int]] | None = None) -> dict:
    """The verdict of an effect's CI (None: not enough data, ``ev``'s ``missing`` cells say why),
    with the seeds that would settle an inconclusive one, scaled from the fewest seeds of the
    evidence the CI is computed from (``noise_from``; default all of ``ev``: an LM control that
    does not enter the CI must not set the count), or, for a difference of sides measured on
    different numbers of seeds, from each side's own interval (``sides``, ``seeds_to_settle_sides``)."""
    if ci is None:
        miss = _collect(ev, "missing")
        short = (f"needs >= {rules.min_seeds} counted seeds per (scenario, config); short: {', '.join(miss[:8])}"
                 + (f" and {len(miss) - 8} more" if len(miss) > 8 else "") if miss else
                 "no scenario with the configs it compares")
        return result(fn, claim, "inconclusive", why_missing or f"not enough data: {short}", evidence=ev)
    verdict, reason = decide(ci[1], ci[2], margin, two_sided)
    eff = effect(name, unit, *ci, rules)
    n = min((k for k in _collect(ev if noise_from is None else noise_from, "seeds") if k), default=0)  # None: a side without data
    if sides and all(k for _, k in sides):
        n = " and ".join(str(k) for _, k in sides)
    if verdict == "inconclusive" and n:
        need = seeds_to_settle_sides(ci[0], sides) if isinstance(n, str) else seeds_to_settle(*ci, n)
        eff["seeds_to_settle"] = need
        reason += (f": the effect ({ci[0]:.3g} {unit}) is smaller than the seed noise; "
                   + ("no number of seeds settles an estimate of 0" if need is None else
                      f"more than {SETTLE_MAX} seeds per (scenario, config) would be needed: too small to matter"
                      if need > SETTLE_MAX else
                      f"about {need} seeds per (scenario, config) would settle it at this effect and noise (now {n})"))
    return result(fn, claim, verdict, reason, eff, ev)


def _collect(ev, key: str) -> list:
    """Every ``key`` entry of a (nested) evidence dict, flattened."""
    if isinstance(ev, dict):
        out = []
        for k, v in ev.items():
            out += (list(v) if isinstance(v, list) else [v]) if k == key else _collect(v, key)
        return sorted(out, key=str) if key == "missing" else out
    return []


def pairing(units: dict) -> str:
    """How a side's configs were compared: 'paired by seed', 'unpaired' or mixed."""
    kinds = {p.paired for pieces, _ in units.values() for p in pieces if p.paired is not None}
    return {frozenset({True}): "paired by seed", frozenset({False}): "unpaired (seeds not shared)"}.get(
        frozenset(kinds), "partly paired by seed" if kinds else "")


FP16_FAMILY = ("fp16_naive", "fp16_naive_noscale", "fp16_fp16_states", "fp16_fp16_states_noscale",
               "fp16_fp16_states_eps1e4")
STAND_IN = ("tested with {got} ({what}): it fails of second-moment underflow, so this tests that, not "
            "loss scaling; the loss-scaling question needs runs of fp16_naive and fp16_naive_noscale (fp16 "
            "weights, fp32 moments), which this study does not have")


# ---- building effects ------------------------------------------------------------------------
def _first(vals):
    return vals[0]


def gain_pct(sgn: int) -> Callable:
    """Gain of x over ref in % of ref's mean quality, > 0 = x better (per seed, or of means)."""
    return lambda xv, rv, r: 100 * sgn * (xv - rv) / abs(float(np.mean(r)))


def scenarios_of(kind: str) -> list[str]:
    """Scenario ids of a kind: 'lm', 'cls', or a task ('multilabel', 'singlelabel')."""
    pick = {"lm": lambda x: x.is_lm, "cls": lambda x: not x.is_lm}.get(kind, lambda x: x.task == kind)
    return [s for s, x in SCENARIOS.items() if pick(x)]


def units_of(cells: dict, groups: dict, ref: str | None, f: Callable, rules: Rules,
             combine: Callable = _first) -> tuple[dict, dict]:
    """One unit per group (key -> (config, its scenarios)) where the config (against ``ref``) has
    the seeds on each of its scenarios: its pieces, in that order, and ``combine``; and the
    evidence (used, missing cells, seeds, pairing)."""
    units, missing, seeds = {}, [], []
    for key, (x, scns) in groups.items():
        cs = [x] + ([ref] if ref else [])
        pieces = [piece(cells, s, x, ref, f, rules) for s in scns]
        if all(p is not None for p in pieces):
            units[key] = (pieces, combine)
            seeds += [len(cells[s, c]) for s in scns for c in cs]
        else:
            missing += [(s, c) for s in scns for c in cs]
    return units, {"used": list(units), "missing": short_cells(cells, missing, rules, {s for s, _ in cells}),
                   "seeds": min(seeds) if seeds else None, "pairing": pairing(units)}


def scenario_units(cells: dict, scenarios, x: str, ref: str | None, f: Callable, rules: Rules) -> tuple[dict, dict]:
    """``units_of`` with one single-piece unit per scenario."""
    return units_of(cells, {s: (x, [s]) for s in scenarios}, ref, f, rules)


# ---- which scenarios a rule reads ------------------------------------------------------------
def _gated(res: dict, skipped: dict, what: str) -> dict:
    """A verdict naming the scenarios a rule left out (``skipped``: scenario -> why); one left
    without an effect by them alone is untestable."""
    if not skipped:
        return res
    why = by_reason(skipped)
    res["evidence"] = {**(res["evidence"] or {}), "not_learned": skipped}
    if res["verdict"] == "inconclusive" and res["effect"] is None and not _collect(res["evidence"], "missing"):
        res.update(verdict="untestable", reason=f"no scenario it needs gives evidence ({why})")
    else:
        res["reason"] += f"; scenario(s) {', '.join(skipped)} {what} ({why})"
    return res


def quality_rule(fn: Callable) -> Callable:
    """Run a quality rule on the scenarios whose quality is established only (``_gated``)."""
    @functools.wraps(fn)
    def rule(df: pd.DataFrame, rules: Rules = Rules(), **kw) -> dict:
        df = gated(df, rules)
        skipped = {s: why_not_established(df, s)
                   for s in sorted(df.loc[~df["quality_established"], "scenario"].unique())}
        return _gated(fn(df[df["quality_established"]], rules, **kw), skipped, "skipped: quality not established")
    return rule


def stability_rule(fn: Callable) -> Callable:
    """Run a divergence rule on the scenarios that learned (told apart or not: it does not bear on
    divergence); the verdict names the others."""
    @functools.wraps(fn)
    def rule(df: pd.DataFrame, rules: Rules = Rules(), **kw) -> dict:
        df = gated(df, rules)
        skipped = {s: df.attrs["learned"].get(s, {}).get("reason", "")
                   for s in sorted(df.loc[~df["learned"].eq(True), "scenario"].unique())}
        return _gated(fn(df, rules, **kw), skipped, "skipped: did not learn")
    return rule


def speed_rule(fn: Callable) -> Callable:
    """Run a speed or memory rule on every scenario; where quality is not established a stalled run
    is no failure (the reference stalled too) and ``evidence.speed_only`` names those scenarios."""
    @functools.wraps(fn)
    def rule(df: pd.DataFrame, rules: Rules = Rules(), **kw) -> dict:
        df = gated(df, rules).copy()
        speed_only = ~df["quality_established"]
        df.loc[speed_only & (df["health"] == "stalled"), "health"] = "ok"
        names = sorted(df.loc[speed_only, "scenario"].unique())
        res = fn(df, rules, **kw)
        if names:
            res["evidence"] = {**(res["evidence"] or {}), "speed_only": names}
            res["reason"] += (f"; scenario(s) {', '.join(names)} count for speed only (quality not established "
                              f"there, so a stalled run is not a failure)")
        return res
    return rule


def divergence_table(df: pd.DataFrame, configs=FP16_FAMILY) -> pd.DataFrame:
    """Per config x scenario: runs that trained, how many diverged and at which steps (seed 001 H2)."""
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


def fp16_config(df: pd.DataFrame, wanted: str, stand_in: str) -> tuple[str, str]:
    """``wanted`` where the study ran it, else ``stand_in`` and what the verdict must say of it."""
    if (df["config"] == wanted).any() or not (df["config"] == stand_in).any():
        return wanted, ""
    return stand_in, STAND_IN.format(got=stand_in, what="fp16 weights and fp16 Adam moments")


def divergence_contrast(df: pd.DataFrame, cfg: str, plus, minus, rules: Rules) -> tuple:
    """Instability of ``cfg`` on the ``plus`` scenarios against the ``minus`` ones, a run being
    unstable where it diverged or degraded (``tables.UNSTABLE``: its loss blew up, or rose and
    stayed up to the end): the rate (share of the arm's runs that trained that were unstable, over
    its learned scenarios; Newcombe's score interval for the difference) where it can differ;
    where every run of both arms was, the time to it (mean ln of the divergence step, or of the
    step the rise began, each scenario's runs resampled on their own); where none was, nothing.
    Returns (mode: 'rate' / 'time' / 'none', ci, evidence)."""
    rates = seed_series(df, "unstable")
    up, ev_p = scenario_units(rates, plus, cfg, None, lambda m: m, rules)
    um, ev_m = scenario_units(rates, minus, cfg, None, lambda m: m, rules)
    count = lambda used: (int(sum(rates[s, cfg].sum() for s in used)), int(sum(len(rates[s, cfg]) for s in used)))  # noqa: E731
    ev = {"plus": ev_p, "minus": ev_m, "counts": {"plus": count(up), "minus": count(um)}}
    vals = np.concatenate([rates[s, cfg].to_numpy() for s in [*up, *um]]) if up and um else np.array([])
    if len(vals) and (vals == 1).all():
        steps = {k: np.log(v.clip(lower=1)) for k, v in seed_series(df, "unstable_step").items()}
        up, ev["plus"] = scenario_units(steps, plus, cfg, None, lambda m: m, rules)
        um, ev["minus"] = scenario_units(steps, minus, cfg, None, lambda m: m, rules)
        return "time", effect_ci(up, rules, um), ev
    if len(vals) and (vals == 0).all():
        return "none", None, ev
    if not (up and um):
        return "rate", None, ev
    return "rate", rate_difference_ci(*ev["counts"]["plus"], *ev["counts"]["minus"], rules), ev


def divergence_verdict(fn, claim, cfg, note, mode, ci, ev, rules, two_sided, arms=("one arm", "the other"),
                        sign_time=1) -> dict:
    ev = {**ev, "config": cfg, "divergence": None}
    if mode == "none":
        (_, n1), (_, n2) = ev["counts"]["plus"], ev["counts"]["minus"]
        return result(fn, claim, "untestable", f"no run of {cfg} was unstable (diverged, or its loss rose and stayed up) on "
                      f"either arm ({arms[0]} 0/{n1}, {arms[1]} 0/{n2}): a rate of 0 against 0 cannot discriminate, and "
                      f"there is no time to divergence to compare; runs in which {cfg} becomes unstable on at least one "
                      "arm (longer, or a config nearer its edge) would settle it" + note, evidence=ev)
    if mode == "time":
        if ci is not None:
            ci = tuple(sign_time * v for v in ci)
            ci = (ci[0], min(ci[1:]), max(ci[1:]))
        res = verdict_of(fn, claim, ci, ev, "ln(step of divergence) ratio", "ln ratio", rules, 0.0, two_sided)
        res["reason"] = (f"every run of {cfg} diverged or degraded in both arms (rates 1 and 1: the rate test is untestable); "
                         f"time to divergence compared instead"
                         + (f" (on {arms[0]} it diverges at {np.exp(sign_time * ci[0]):.2g}x the step of "
                            f"{arms[1]})" if ci else "")
                         + f": {res['reason']}")
    else:
        res = verdict_of(fn, claim, ci, ev, "divergence rate difference", "share of runs", rules, rules.margin_rate,
                         two_sided)
        (k1, n1), (k2, n2) = ev["counts"]["plus"], ev["counts"]["minus"]
        if n1 and n2:
            p = sps.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]], alternative="two-sided" if two_sided else "greater")[1]
            res["evidence"]["fisher_exact_p"] = float(p)
            res["reason"] += (f"; unstable runs: {arms[0]} {k1}/{n1}, {arms[1]} {k2}/{n2} (Fisher's exact test, "
                              f"{'two-sided' if two_sided else 'one-sided'}: p = {p:.2g})")
    res["reason"] += note
    return res
