"""How far each undecided cell of the answer is from a decision, as the README's Findings print it:
the paired seeds an inconclusive candidate cell needs to show it safe (``seed_plan``, from
``contrasts.seeds_to_show_safe``; ``seeds_line``), the cells whose measured loss already reaches
the minimum effect, so that no number of seeds decides them (``past_min_effect``), and the
candidates that more seeds alone could make a default (``closest``)."""
from __future__ import annotations

import math

import pandas as pd

from benchlib.analysis.contrasts import MOST_SEEDS, PLAN_UPPER, POWER, seeds_to_show_safe
from benchlib.analysis.recommend import ENTERED, PASS
from benchlib.analysis.stats import Rules
from benchlib.analysis.tables import config_order


def seed_plan(e: dict, metric: str, rules: Rules = Rules(), upper: float | None = None) -> int | None:
    """Seeds an inconclusive paired cell needs to show it safe on every metric it is judged on
    (``seeds_to_show_safe``), the most of them; None where one of them cannot be. Each of k judged
    metrics is planned at POWER ** (1 / k), so that all of them pass together with POWER were they
    independent (micro- and macro-F1 each planned at 80% passed together less often: 78% in a
    simulation at a gap of 0.3 minimum effects); correlated metrics need fewer."""
    metrics = [(metric, "gap_pct", "ci_low", "ci_high")] + (
        [(e["metric2"], "gap2_pct", "ci2_low", "ci2_high")] if e.get("judged2") and e.get("metric2") else [])
    each = POWER ** (1 / len(metrics))
    plans = [seeds_to_show_safe(*(float(e.get(k) if e.get(k) is not None else "nan") for k in cols),
                                int(e["n_paired"]), rules.min_effect_pct(m), power=each, upper=upper)
             for m, *cols in metrics]
    return None if None in plans else max(plans)


def _never(comp: dict) -> list[dict]:
    """A comparison's inconclusive candidate cells measured on paired seeds whose measured loss is at
    or beyond the minimum effect on a metric they are judged on: no number of seeds shows them safe."""
    rules = Rules()

    def reaches(e: dict) -> bool:
        metric = (comp.get("quality_metric") or {}).get(e["scenario"], {}).get("name")
        judged = [(metric, e.get("gap_pct"))] + ([(e["metric2"], e.get("gap2_pct"))]
                                                 if e.get("judged2") and e.get("metric2") else [])
        return any(g is not None and math.isfinite(g) and g >= rules.min_effect_pct(m) for m, g in judged)

    return [e for e in comp.get("recommendation_evidence", []) if e.get("verdict") == "inconclusive"
            and e.get("role", "candidate") == "candidate" and e.get("paired") and reaches(e)]


def past_min_effect(arms: list[dict]) -> dict[str, list[str]]:
    """config -> the cells ("beta2 0.999 on A") of ``_never`` over the arms (``recommend.pick``'s rule 3)."""
    out: dict[str, list[str]] = {}
    for a in arms:
        for e in _never(a["comparison"]):
            out.setdefault(e["config"], []).append(f"{a['label']} on {e['scenario']}")
    return out


def seeds_line(arms: list[dict]) -> str:
    """Per arm, each inconclusive candidate cell measured on paired seeds: the seeds that would
    decide it at the gap and spread measured, or that none would; '' where no cell is inconclusive."""
    parts = []
    for a in arms:
        comp = a["comparison"]
        cells = [e for e in comp.get("recommendation_evidence", []) if e.get("verdict") == "inconclusive"
                 and e.get("role", "candidate") == "candidate" and e.get("paired")]
        order = config_order([e["config"] for e in cells])
        metric = lambda e: (comp.get("quality_metric") or {}).get(e["scenario"], {}).get("name")  # noqa: E731
        plans = [(e, seed_plan(e, metric(e)), seed_plan(e, metric(e), upper=PLAN_UPPER))
                 for e in sorted(cells, key=lambda e: (e["scenario"], order.index(e["config"])))]
        if plans:
            parts.append(f"at {a['label']}: " + ", ".join(
                f"{e['scenario']} {e['config']} {int(e['n_paired'])} -> {_count(k)}"
                + (f" ({_count(c)})" if k is not None else "") for e, k, c in plans))
    if not parts:
        return ""
    return (f"**Seeds a decision needs** (each inconclusive candidate: the paired seeds that show it safe with "
            f"{POWER:.0%} power on every judged metric together were its true gap and per-seed spread those "
            f"measured, from the seeds it has; in brackets, were they at their one-sided {PLAN_UPPER:.0%} upper "
            "confidence bounds: near the minimum effect a few seeds' gap is optimistic, and only the bracketed "
            "count came out safe about as often as planned in simulation (docs/journal.md, 2026-11-29); "
            "\"never\": the gap is at or beyond the minimum effect, so no number of seeds shows it safe "
            "at this recipe): " + "; ".join(parts) + ".")


def _count(k: int | None) -> str:
    """A seed plan as the answer prints it."""
    return "never" if k is None else f"more than {k - 1}" if k > MOST_SEEDS else str(k)


def closest(arms: list[dict], first_cells: pd.DataFrame, shown: int = 3) -> str:
    """The candidates that more paired seeds alone could show safe on every scenario that entered
    verdicts at every beta2 (each cell safe, or inconclusive with a finite ``seed_plan``), with the
    seeds each cell still needs, fewest first, and whether any still could by the cautious plans
    (``PLAN_UPPER``). Where none could but some candidate is held back only by cells not run or not
    tested (too few seeds for an interval), those candidates with the cells that still need runs;
    '' where no candidate is left to decide."""
    near = _decidable(arms, first_cells)
    if not near:
        waiting = _waiting(arms, first_cells)
        if not waiting:
            return ""
        return ("Closest to a default: none is decidable by more paired seeds of the cells measured alone: each "
                "candidate has a cell not run or not tested (fewer than 3 paired seeds, no interval yet), or one no "
                f"number of seeds within {MOST_SEEDS} decides; fewest cells that need runs first, where the rest are "
                "decidable by seeds: " + "; ".join(
                    f"{c} ({', '.join(f'{w} {why}' for w, why in v)}"
                    + (f"; then {k} more paired seeds on its inconclusive cells at the gap and spread measured" if k
                       else "") + ")" for _, k, c, v in waiting[:shown]) + ".")
    cautious = _decidable(arms, first_cells, PLAN_UPPER)
    return ("Closest to a default (every cell safe, or decidable by more paired seeds alone at the gap and spread "
            "measured): " + "; ".join(f"{c}, {n} more paired seeds ({', '.join(f'{w} +{k}' for w, k in v)})"
                                      for n, c, v in near[:shown])
            + (f"; by the bracketed, cautious plans: {cautious[0][1]}, {cautious[0][0]} more" if cautious else
               f"; by the bracketed, cautious plans none is decidable within {MOST_SEEDS} seeds a cell") + ".")


def _cell_plans(arms: list[dict], first_cells: pd.DataFrame, upper: float | None = None):
    """(config, cell, plan) for each candidate's cell not yet passed on a scenario that entered
    verdicts: plan is the paired seeds still needed (int), or why more seeds of the cell alone cannot
    decide it: "not run", "not tested" (no interval yet), None (never, or beyond ``MOST_SEEDS``), or
    "broken" (failed, degraded, worse, or any other verdict)."""
    for a in arms:
        cells = first_cells if a is arms[0] else a["cells"]
        on = sorted(set(cells.loc[cells["verdict"].isin(ENTERED), "scenario"]))
        metric = {s: (a["comparison"].get("quality_metric") or {}).get(s, {}).get("name") for s in on}
        evidence = {(e["scenario"], e["config"]): e for e in a["comparison"].get("recommendation_evidence", [])}
        verdict = {(r.scenario, r.config): r.verdict for r in cells.itertuples()}
        for cfg in set(cells.loc[cells["verdict"] != "reference", "config"]):
            for s in on:
                e, v = evidence.get((s, cfg), {}), verdict.get((s, cfg))
                if v in PASS:
                    continue
                cell = f"{a['label']} {s}"
                if v in (None, "not run", "not tested"):
                    n = int(e["n_paired"]) if e.get("n_paired") else 0
                    yield cfg, cell, (f"not tested, {n} paired seed{'s' * (n != 1)}" if v == "not tested"
                                      else "not run")
                elif v != "inconclusive":
                    yield cfg, cell, "broken"
                else:
                    k = seed_plan(e, metric[s], upper=upper) if e.get("paired") else None
                    yield cfg, cell, (k - int(e["n_paired"]) if k is not None and k <= MOST_SEEDS else None)


def _decidable(arms: list[dict], first_cells: pd.DataFrame, upper: float | None = None) -> list[tuple]:
    """(seeds still needed in all, config, [(cell, seeds)]) of each candidate ``closest`` names, fewest first."""
    plans: dict[str, list[tuple[str, int]]] = {}
    blocked: set[str] = set()
    for cfg, cell, plan in _cell_plans(arms, first_cells, upper):
        if isinstance(plan, int):
            plans.setdefault(cfg, []).append((cell, plan))
        else:
            blocked.add(cfg)
    return sorted(((sum(n for _, n in v), c, v) for c, v in plans.items() if c not in blocked), key=lambda t: t[:2])


def _waiting(arms: list[dict], first_cells: pd.DataFrame) -> list[tuple]:
    """(cells that need runs, paired seeds the other cells still need, config, [(cell, why)]) of each
    candidate whose cells not yet passed are all decidable by more paired seeds or merely not run / not
    tested, fewest such cells first."""
    need: dict[str, list[tuple[str, str]]] = {}
    seeds: dict[str, int] = {}
    blocked: set[str] = set()
    for cfg, cell, plan in _cell_plans(arms, first_cells):
        if isinstance(plan, int):
            seeds[cfg] = seeds.get(cfg, 0) + plan
        elif plan in (None, "broken"):
            blocked.add(cfg)
        else:
            need.setdefault(cfg, []).append((cell, plan))
    return sorted(((len(v), seeds.get(c, 0), c, v) for c, v in need.items() if c not in blocked),
                  key=lambda t: t[:3])
