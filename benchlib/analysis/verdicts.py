"""The machinery of a hypothesis verdict: effects built from per-seed cells, their bootstrap CI,
and the verdict a CI gives (``decide``). The seven rules themselves are in ``hypotheses``.

An effect is a mean over *units* (a scenario, or a matched pair of scenarios), or the
difference of two such means. A unit is made of *pieces*, one per scenario: the per-seed values
of a config on it, or of a config against another paired by seed (``piece``). Pieces of
different scenarios are resampled independently (their runs are different runs); two configs of
one scenario are paired by seed where they share ``Rules.min_seeds`` seeds, else resampled on
their own and the evidence says ``unpaired``. Verdicts:

- ``untestable`` where the test cannot discriminate: both arms at the same ceiling or floor, or
  every scenario it needs did not learn or cannot be told apart (the evidence says which);
- ``inconclusive`` when a needed cell has fewer than ``min_seeds`` values (the reason names the
  cells short of seeds), or the CI straddles 0 (with how many seeds might settle it);
- ``rejected`` when the CI lies inside [-margin, +margin] (no effect worth the name) or
  entirely below 0 (the opposite holds);
- ``supported`` when the CI lies entirely above 0 (or, for a claim that two things merely
  differ, entirely on either side).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from benchlib.analysis.stats import Rules, bootstrap

VERDICTS = ("supported", "rejected", "inconclusive", "untestable")
SETTLE_MAX = 1000
"""Beyond this many seeds per (scenario, config), ``seeds_to_settle`` says the effect is too small
against the noise to be worth settling."""


@dataclass
class Piece:
    """One scenario's contribution to a unit: ``samples`` (per-seed Series) and ``value``, which
    maps their means (arrays over resamples) to the piece's value."""
    samples: list
    value: Callable
    paired: bool | None  # None: one config, nothing to pair


def piece(cells: dict, s: str, x: str, ref: str | None, f: Callable, rules: Rules) -> Piece | None:
    """Config ``x`` on scenario ``s``: without ``ref``, ``f(mean of x)``; with it, ``f(x, ref,
    ref's values)`` on each shared seed where they share >= min_seeds seeds (paired), else on
    the two means (unpaired). None where a cell has fewer than min_seeds values."""
    a = cells.get((s, x), pd.Series(dtype=float))
    if ref is None:
        return Piece([a], lambda m: f(m), None) if len(a) >= rules.min_seeds else None
    r = cells.get((s, ref), pd.Series(dtype=float))
    shared = sorted(set(a.index) & set(r.index))
    if len(shared) >= rules.min_seeds:
        return Piece([f(a[shared].to_numpy(float), r[shared].to_numpy(float), r[shared])], lambda m: m, True)
    if len(a) >= rules.min_seeds and len(r) >= rules.min_seeds:
        return Piece([a, r], lambda ma, mr: f(ma, mr, r), False)
    return None


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
    """About how many seeds per (scenario, config) would put a CI that includes 0 clear of it,
    were the effect and the seed-to-seed noise what they are now: a bootstrap CI narrows as
    1/sqrt(seeds), so the bound on 0's side moves from ``point`` by (its distance now) x
    sqrt(n / n'); None when the point estimate is 0 (no number of seeds settles a null effect's
    sign)."""
    if point == 0 or not (np.isfinite(lo) and np.isfinite(hi)) or n < 1:
        return None
    dist = point - lo if point > 0 else hi - point
    return int(np.ceil(n * (dist / abs(point)) ** 2))


def verdict_of(fn, claim, ci, ev, name, unit, rules, margin=0.0, two_sided=False, why_missing="") -> dict:
    """The verdict of an effect's CI (None: not enough data, the reason from ``ev``'s
    ``missing`` cells), with the seeds that would settle an inconclusive one."""
    if ci is None:
        miss = _collect(ev, "missing")
        short = (f"needs >= {rules.min_seeds} counted seeds per (scenario, config); short: {', '.join(miss[:8])}"
                 + (f" and {len(miss) - 8} more" if len(miss) > 8 else "") if miss else
                 "no scenario with the configs it compares")
        return result(fn, claim, "inconclusive", why_missing or f"not enough data: {short}", evidence=ev)
    verdict, reason = decide(ci[1], ci[2], margin, two_sided)
    eff = effect(name, unit, *ci, rules)
    n = min(_collect(ev, "seeds"), default=0)
    if verdict == "inconclusive" and n:
        need = seeds_to_settle(*ci, n)
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
