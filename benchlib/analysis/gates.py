"""Evidence gates (``apply_gates``), so that the analysis does not speak where the evidence cannot
discriminate. Per scenario: its effective quality (``quality_metrics``), whether it learned
(``learned_scenarios``) and whether its configs can be told apart (``reliability``). One that did
not learn, or an LM whose reference learned and then overfit its data (``overfit``), enters no
quality rank, flip, verdict or recommendation (speed, memory and divergence are still
reported); one whose configs cannot be told apart enters no rank or flip, and verdicts only where
a control is unmistakably degraded there (``_sensitivity``). Per run: ``health`` / ``health_reason``
(its status, ``stalled`` where it did not learn, ``degraded`` against the reference). Which runs count: ``speed_runs``, ``quality_runs``, ``healthy_runs``.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from benchlib.analysis.contrasts import reference_contrasts
from benchlib.analysis.stats import IDEAL, LABELS, Rules, label, rank_reliability  # noqa: F401 - label re-exported
from benchlib.core.records import COMPLETED, read_steps, steps_file
from benchlib.core.scenarios import SCENARIOS

MEASURED = COMPLETED  # runs that trained to the end and were timed and evaluated
FAILED = ("diverged", "degraded", "stalled")  # never safe, fastest or on a Pareto frontier
NOT_JUDGED = ("not judged: the study's runs measure speed and memory only (run.judge_quality false); quality "
              "enters no ranking, and a stalled run is not a failure")


def _tri(v) -> bool | None:
    """A record's flag as True / False / None (absent)."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    return bool(v)


def _text(v) -> str | None:
    return v if isinstance(v, str) and v else None


def _first(col: pd.Series):
    col = col.dropna()
    return col.iloc[0] if len(col) else None


def _num(r: pd.Series, key: str) -> float:
    v = r.get(key) if key in r else None
    try:
        return float(v) if v is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


class Shared(list):
    """A list kept in a frame's ``attrs`` that pandas does not deep-copy into every derived frame:
    read-only by convention."""

    def __deepcopy__(self, memo):
        return self


class SharedDict(dict):
    __deepcopy__ = Shared.__deepcopy__


def not_judged(runs: pd.DataFrame) -> bool:
    """Whether these runs (one scenario's) all measure speed and memory only (``judge_quality`` false)."""
    return "run.judge_quality" in runs and bool(len(runs)) and bool((runs["run.judge_quality"] == False).all())  # noqa: E712


# ---- the scenario's quality metric ----------------------------------------------------------
def quality_metrics(df: pd.DataFrame) -> dict[str, dict]:
    """Per scenario, the quality the comparison uses: ``name``, ``higher_is_better``, ``column``
    (None = none usable), the record's ``headline`` and a ``note``. A degenerate multi-label
    micro-F1 (0 everywhere, or one mean for every config) gives way to P@1, else val loss."""
    out = {}
    for s, d in df.groupby("scenario"):
        head = _first(d["quality_record_name"]) or (SCENARIOS[s].quality if s in SCENARIOS else "quality")
        info = {"name": head, "higher_is_better": bool(d["quality_record_sign"].iloc[0] > 0),
                "column": "quality_record", "headline": head, "degenerate": False, "note": ""}
        ok = d[d["status"].isin(MEASURED)]
        v = ok["quality_record"].dropna()
        multi = head == "micro_f1" or (s in SCENARIOS and SCENARIOS[s].task == "multilabel")
        if multi and len(v) and not not_judged(d):  # a speed study's quality is read nowhere: no stand-in
            means = ok.groupby("config")["quality_record"].mean().dropna()
            zero, flat = bool((v == 0).all()), len(means) >= 2 and float(means.max() - means.min()) == 0.0
            if zero or flat:
                why = (f"{label(head)} is 0 in every run" if zero else
                       f"{label(head)} is {v.iloc[0]:.4g} for every config")
                info["degenerate"] = True
                for name, hib in (("p_at_1", True), ("val_loss", False)):
                    if f"quality/{name}" in ok and ok[f"quality/{name}"].notna().any():
                        info.update(name=name, higher_is_better=hib, column=f"quality/{name}",
                                    note=f"{why} (degenerate): {label(name)} ({'higher' if hib else 'lower'} "
                                         f"is better) stands in for it as the scenario's quality in ranks, flips, "
                                         f"verdicts and recommendations")
                        break
                else:
                    info.update(column=None, note=f"{why} (degenerate) and the records carry no threshold-free "
                                                  f"metric (P@1, val loss): quality enters no ranking")
        out[s] = info
    return out


# ---- learned: gap closed --------------------------------------------------------------------
def gap_of(r: pd.Series) -> tuple[float, str | None, float, float, float]:
    """(share closed, what it is measured against: "floor" / "ideal" / None, that target, the
    baseline's value, the run's value) of one run's learned metric."""
    m = r.get("quality/learned_metric")
    if not isinstance(m, str):
        return math.nan, None, math.nan, math.nan, math.nan
    v, b = _num(r, f"quality/{m}"), _num(r, f"baseline/{m}")
    floor = _num(r, "quality/floor")
    if not np.isfinite(floor) and m == "val_loss":
        floor = _num(r, "quality/loss_floor")
    recorded = _num(r, "quality/gap_closed")
    if np.isfinite(floor) and np.isfinite(recorded):
        return recorded, "floor", floor, b, v
    target, kind = (floor, "floor") if np.isfinite(floor) else (IDEAL.get(m, math.nan), "ideal")
    if not (np.isfinite(v) and np.isfinite(b) and np.isfinite(target)) or target == b:
        return math.nan, None, target, b, v
    return (v - b) / (target - b), kind, target, b, v


def run_learning(df: pd.DataFrame, rules: Rules) -> pd.DataFrame:
    """Per run: ``gap_closed`` (share), ``gap_to`` (floor / ideal), ``learned_run`` (True,
    False, or None without a trivial baseline) and ``learned_why`` (the numbers in words)."""
    rows = []
    for _, r in df.iterrows():
        share, kind, target, b, v = gap_of(r)
        beats = _tri(r.get("quality/beats_baseline"))
        need = rules.min_gap_closed if kind == "floor" else rules.min_gain_without_floor
        m, base = r.get("quality/learned_metric"), r.get("baseline/name")
        nums = (f"{label(m)} {v:.3g} vs {label(base) if isinstance(base, str) else 'the trivial baseline'} {b:.3g}"
                + (f", {'floor' if kind == 'floor' else 'ideal'} {target:.3g}: closed {share:.0%} of the gap"
                   if kind else "") if np.isfinite(v) and np.isfinite(b) else "")
        if beats is None:
            learned = None
        elif beats is False or r["status"] == "stalled":
            learned = False
        else:
            learned = bool(share >= need) if kind else True
        why = (nums + (f" (< {need:.0%}{'' if kind == 'floor' else ' with no floor known'})" if learned is False and
                       kind and share < need else "")) if nums else ""
        rows.append({"gap_closed": share, "gap_to": kind, "learned_run": learned, "learned_why": why})
    out = pd.DataFrame(rows, index=df.index)
    out["learned_run"] = out["learned_run"].astype(object)
    return out


def learned_scenarios(df: pd.DataFrame, rules=None) -> pd.DataFrame:
    """Per scenario: ``reference`` (first of ``rules.reference_configs`` with a finished run),
    ``learned`` (every finished reference run learned; None = unknown), the deciding ``metric``,
    the reference's and the trivial ``baseline``'s means of it, ``gap_closed`` and the ``reason``."""
    rules = rules or Rules()
    if "learned_run" not in df:
        df = pd.concat([df, run_learning(df, rules)], axis=1)
    rows = []
    for s in sorted(df["scenario"].unique()):
        fin = df[(df["scenario"] == s) & df["status"].isin(MEASURED)]
        ref = next((c for c in rules.reference_configs if (fin["config"] == c).any()), None)
        row = {"scenario": s, "reference": ref, "learned": None, "metric": None, "reference_value": np.nan,
               "baseline": None, "baseline_value": np.nan, "gap_closed": np.nan, "gap_to": None, "n_runs": 0,
               "overfit": ""}
        if not_judged(df[df["scenario"] == s]):  # a speed study's: whatever its reference did
            rows.append({**row, "n_runs": int((fin["config"] == ref).sum()), "reason": NOT_JUDGED})
            continue
        if ref is None:
            rows.append({**row, "reason": f"unknown: no reference config ({', '.join(rules.reference_configs)}) "
                                          "finished a run; quality enters no ranking"})
            continue
        r = fin[fin["config"] == ref]
        metric = _first(r["quality/learned_metric"])
        row.update(n_runs=len(r), metric=metric, baseline=_first(r["baseline/name"]), gap_to=_first(r["gap_to"]),
                   gap_closed=r["gap_closed"].mean())
        if metric and f"quality/{metric}" in r and f"baseline/{metric}" in r:
            row.update(reference_value=r[f"quality/{metric}"].mean(), baseline_value=r[f"baseline/{metric}"].mean())
        states = list(r["learned_run"])
        n, fails, unknown = len(states), states.count(False), sum(x is None for x in states)
        first_fail = next((w for w, x in zip(r["learned_why"], states) if x is False and w), "")
        if fails:
            row.update(learned=False, reason=f"reference {ref} {first_fail or 'did not beat the trivial baseline'}: "
                       f"not learned ({fails}/{n} run(s)); quality enters no ranking")
        elif unknown == n:
            row["reason"] = "unknown: records carry no trivial baseline; quality enters no ranking"
        elif unknown:
            row["reason"] = (f"unknown: {unknown}/{n} run(s) of the reference {ref} carry no trivial baseline; "
                             "quality enters no ranking")
        else:
            why = next((w for w in r["learned_why"] if w), "")
            row.update(learned=True, reason=f"reference {ref}{' ' + why if why else ''}: learned ({n}/{n} run(s))")
            over = overfit(r, rules) if metric == "val_loss" else ""
            if over:
                row.update(overfit=over, reason=f"{row['reason']}; {over}")
        rows.append(row)
    out = pd.DataFrame(rows, columns=["scenario", "reference", "learned", "reason", "metric", "reference_value",
                                      "baseline", "baseline_value", "gap_closed", "gap_to", "n_runs", "overfit"])
    out["learned"] = out["learned"].astype(object)
    return out


# ---- overfit: the validation loss rose from its lowest -------------------------------------
def val_history(path, metric: str = "val_loss") -> list[tuple[int, float]]:
    """(step, ``metric``: the validation loss, or a classification run's micro_f1 or accuracy) of a
    run's evaluations during training, from its step log (empty where the record has no step log
    or the log no evaluation of it)."""
    log = steps_file(Path(path).parent) if isinstance(path, str) and path else None
    if log is None:
        return []
    return [(int(r["step"]), float(r["eval"][metric])) for r in read_steps(log)
            if isinstance(r.get("eval"), dict) and r["eval"].get(metric) is not None]


def overfit(runs: pd.DataFrame, rules: Rules) -> str:
    """Why the reference ``runs`` overfit (``Rules.max_overfit_pct``), or "": the runs whose last
    evaluation lies that far above their lowest, with the largest rise in numbers."""
    rises = []
    for path in runs.get("path", pd.Series(dtype=object)):
        ev = [e for e in val_history(path) if np.isfinite(e[1])]
        if len(ev) >= 2:
            (step, low), final = min(ev, key=lambda e: e[1]), ev[-1][1]
            if low > 0 and final > low * (1 + rules.max_overfit_pct / 100):
                rises.append((final / low - 1, step, low, final, ev[-1][0]))
    if not rises:
        return ""
    rise, step, low, final, last = max(rises)
    return (f"overfit: {len(rises)}/{len(runs)} reference run(s) end above their lowest validation loss by more "
            f"than {rules.max_overfit_pct:g}% (e.g. {low:.3g} at step {step}, {final:.3g} at step {last}: "
            f"+{100 * rise:.0f}%), "
            f"so end-of-run quality measures how fast a config memorises, not what its precision costs; quality "
            f"enters no ranking or verdict (stability still counts)")


# ---- told apart: rank reliability -----------------------------------------------------------
def reliability(df: pd.DataFrame, scenarios, rules: Rules, degraded: set = frozenset()) -> dict[str, dict]:
    """Per scenario: the rank reliability of its viable candidates' quality across seeds
    (``stats.rank_reliability``; viable: healthy runs, and not ``degraded`` there, a set of
    (scenario, config)), ``told_apart`` (None: not measured) and the reason. Broken configs are
    left out: they rank last on every seed and would make any scenario look discriminating."""
    out = {}
    for s in scenarios:
        d = df[(df["scenario"] == s) & (df["role"] == "candidate") & (df["status"] == "ok") & (df["health"] == "ok")
               & (df["checkpoint_note"] == "")]
        d = d[[(s, c) not in degraded for c in d["config"]]]
        t = d.pivot_table(index="config", columns="seed", values="quality", aggfunc="first") * (
            d["q_sign"].iloc[0] if len(d) else 1)
        rho, n_c, n_s = rank_reliability(t, rules.min_reliability_configs)
        ok = None if not np.isfinite(rho) else bool(rho >= rules.min_rank_reliability)
        n = f"{n_c} viable candidate configs, {n_s} shared seeds"
        why = (f"rank reliability not measured ({n}; needs {rules.min_reliability_configs} and 2)" if ok is None else
               f"configs told apart: rank reliability {rho:.2f} >= {rules.min_rank_reliability:g} ({n})" if ok else
               f"viable configs cannot be told apart: rank reliability {rho:.2f} < {rules.min_rank_reliability:g} "
               f"({n}): the scenario detects broken configs only; quality enters no ranking")
        out[s] = {"reliability": rho if np.isfinite(rho) else None, "n_configs": n_c, "n_seeds": n_s,
                  "told_apart": ok, "reason": why}
    return out


def _sensitivity(rel: dict, con: pd.DataFrame, controls: set, rules: Rules) -> None:
    """A scenario whose candidates cannot be told apart still judges each config against its
    reference where a positive control (a ``control`` config, built to carry one defect: Adam eps
    1e-4, fp16 without its loss scale) is unmistakably degraded there (the near end of its CI at
    ``rules.control_detect_factor`` x the minimum effect or more): the scenario has shown it detects
    a defect, so a candidate that is not degraded is evidence, not a saturated metric. Only a
    control opens it: a candidate "degraded" among candidates whose order is noise may be a chance
    call. Ranks and flips stay closed (their order is seed noise). Adds ``detects`` (those
    controls) to ``rel``'s entries that were not told apart, and says so in the reason."""
    for s, r in rel.items():
        if r["told_apart"] is not False:
            continue
        c = con[(con["scenario"] == s) & (con["verdict"] == "degraded") & con["config"].isin(controls)]
        bad = sorted(c.loc[c["ci_low"] >= rules.control_detect_factor * c["min_effect_pct"], "config"])
        r["detects"] = bad
        r["reason"] = r["reason"].removesuffix("; quality enters no ranking") + (
            f"; quality enters no rank or flip; verdicts against the reference stand: the scenario detects a "
            f"defect (control {', '.join(bad)} degraded)" if bad else
            f"; no control is degraded there by {rules.control_detect_factor:g}x the minimum effect or more, so the "
            f"scenario has not shown it can detect a defect: quality enters no rank, flip or verdict")


# ---- the gates ------------------------------------------------------------------------------
def _gate_key(rules) -> tuple:
    """What the gates depend on: a frame gated with other rules is gated again."""
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in vars(rules).items())


def apply_gates(df: pd.DataFrame, rules=None) -> pd.DataFrame:
    """The study frame with the evidence gates: ``quality`` the effective quality (the record's in
    ``quality_record*``), ``gap_closed`` / ``learned_run`` per run, ``learned`` and
    ``quality_established`` (verdicts) and ``quality_ranked`` (ranks, frontiers, flips) per
    scenario, ``health`` and ``health_reason``; ``attrs``:
    ``quality_metric``, ``learned``, ``reliability`` and ``contrasts``. Idempotent."""
    rules = rules or Rules()
    df = df.copy()
    if "quality_record" not in df:
        df["quality_record"], df["quality_record_name"] = df["quality"], df["quality_name"]
        df["quality_record_sign"] = df["q_sign"]
    if "role" not in df:
        df["role"] = "candidate"
    qm = quality_metrics(df)
    df["quality"] = df["quality_record"]
    df["quality_name"] = df["quality_record_name"]
    df["q_sign"] = df["quality_record_sign"]
    df["quality_higher_is_better"] = df["q_sign"] > 0
    for s, info in qm.items():
        rows = df["scenario"] == s
        df.loc[rows, "quality"] = df.loc[rows, info["column"] or "quality_record"].to_numpy(float)
        df.loc[rows, "quality_name"] = info["name"]
        df.loc[rows, "q_sign"] = 1 if info["higher_is_better"] else -1
        df.loc[rows, "quality_higher_is_better"] = info["higher_is_better"]
    for col, v in run_learning(df, rules).items():
        df[col] = v
    lt = learned_scenarios(df, rules)
    learned = dict(zip(lt["scenario"], lt["learned"]))
    df["learned"] = pd.Series([learned.get(s) for s in df["scenario"]], index=df.index, dtype=object)
    df["health"], df["health_reason"] = _health(df, lt)
    df["checkpoint_note"] = checkpoint_notes(df, rules)
    over = dict(zip(lt["scenario"], lt["overfit"]))  # learned, but its end-of-run quality reads memorisation
    usable = [s for s in qm if learned.get(s) is True and qm[s]["column"] is not None and not over.get(s)]
    counts = (df["status"] == "ok") & (df["health"] == "ok") & (df["checkpoint_note"] == "")
    con = reference_contrasts(df[df["scenario"].isin(usable) & counts], rules)
    rel = reliability(df, usable, rules, set(zip(con.loc[con["verdict"] == "degraded", "scenario"],
                                                 con.loc[con["verdict"] == "degraded", "config"])))
    _sensitivity(rel, con, set(df.loc[df["role"] == "control", "config"]), rules)
    est = {s: s in usable and (rel[s]["told_apart"] is not False or bool(rel[s].get("detects"))) for s in qm}
    ranked = {s: est[s] and rel[s]["told_apart"] is not False for s in qm}
    df["quality_established"] = df["scenario"].map(est).fillna(False).astype(bool)
    df["quality_ranked"] = df["scenario"].map(ranked).fillna(False).astype(bool)
    shown = con["scenario"].map(est).fillna(False).astype(bool)
    df.attrs["contrasts_for_reading"] = Shared(con[~shown].to_dict(orient="records"))  # measured, not judged
    con = con[shown].reset_index(drop=True)
    for r in con[con["verdict"] == "degraded"].itertuples():
        rows = (df["scenario"] == r.scenario) & (df["config"] == r.config) & (df["health"] == "ok")
        df.loc[rows, "health"] = "degraded"
        df.loc[rows, "health_reason"] = f"quality {r.reason}"
    df.attrs["q_sign"] = SharedDict({s: 1 if info["higher_is_better"] else -1 for s, info in qm.items()})
    df.attrs["quality_metric"] = SharedDict({s: {k: v for k, v in info.items() if k != "column"}
                                             | {"usable": bool(info["column"])} for s, info in qm.items()})
    df.attrs["learned"] = SharedDict({r["scenario"]: {k: (None if isinstance(v, float) and not np.isfinite(v) else v)
                                           for k, v in r.items() if k != "scenario"}
                           for r in lt.to_dict(orient="records")})
    df.attrs["reliability"] = SharedDict(rel)
    df.attrs["contrasts"] = Shared(con.to_dict(orient="records"))
    df.attrs["gate"] = _gate_key(rules)
    return df


def _health(df: pd.DataFrame, lt: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    health = df["status"].astype(object).copy()
    reason = pd.Series([""] * len(df), index=df.index, dtype=object)
    unjudged = set(lt.loc[lt["reason"] == NOT_JUDGED, "scenario"])  # learned_scenarios decided it
    for i, r in df.iterrows():
        st = r["status"]
        if st == "diverged":
            step = r["stability/diverged_step"]
            reason[i] = f"diverged at step {step:.0f}" if pd.notna(step) else _text(r["reason"]) or "diverged"
        elif st in ("ok", "stalled", "degraded") and r["scenario"] in unjudged:
            health[i] = "ok"
            reason[i] = "" if st == "ok" else f"{st}, not judged: the run measures speed and memory only"
        elif st == "degraded":
            step = r["stability/degraded_step"]
            reason[i] = _text(r["reason"]) or ("training loss rose a sustained amount above its running minimum"
                                               + (f" from step {step:.0f}" if pd.notna(step) else ""))
        elif st == "stalled" or (st == "ok" and r["learned_run"] is False):
            health[i] = "stalled"
            reason[i] = "did not learn" + (f" ({r['learned_why']})" if r["learned_why"] else "")
        elif st != "ok":
            reason[i] = _text(r["reason"]) or st
    return health, reason


def checkpoint_notes(df: pd.DataFrame, rules: Rules) -> pd.Series:
    """Per run, '' or why its quality pairs with no run of its seed: it fine-tuned from another of the
    study's pretrain checkpoints than its (scenario, seed)'s, which is the one the first reference
    config run there loaded (``Rules.reference_configs``), else the one most of its runs loaded (the
    later on a tie). Two runs that start from different weights differ by their checkpoints as well as
    their configs."""
    notes = pd.Series("", index=df.index, dtype=object)
    if "pretrained.date" not in df:
        return notes
    for _, g in df[df["pretrained.date"].notna()].groupby(["scenario", "seed"]):
        dates = g["pretrained.date"]
        if dates.nunique() < 2:
            continue
        ref = next((g.loc[g["config"] == c, "pretrained.date"].iloc[0] for c in rules.reference_configs
                    if (g["config"] == c).any()), None)
        if ref is None:
            n = dates.value_counts()
            ref = max(n.index, key=lambda d: (n[d], d))
        for i in g.index[dates != ref]:
            notes[i] = (f"fine-tuned from the pretrain checkpoint of {dates[i]}, not from its seed's ({ref}): "
                        "its quality pairs with no run")
    return notes


def checkpoint_note(d: pd.DataFrame) -> str:
    """How many runs pair with none for their checkpoint (``checkpoint_notes``), with an example, or ''."""
    bad = d[d["checkpoint_note"] != ""] if "checkpoint_note" in d else d.iloc[:0]
    if bad.empty:
        return ""
    r = bad.iloc[0]
    return (f"{len(bad)} of {len(d)} run(s) fine-tuned from another pretrain checkpoint than their seed's, so their "
            f"quality enters no pair, verdict or rank (e.g. {r['config']}/seed{int(r['seed'])}: {r['checkpoint_note']})")


def gated(df: pd.DataFrame, rules=None) -> pd.DataFrame:
    """``df`` as it is when already gated with ``rules`` (None: with any), else ``apply_gates``."""
    if "health" in df and (rules is None or df.attrs.get("gate") == _gate_key(rules)):
        return df
    return apply_gates(df, rules)


# ---- which runs count -----------------------------------------------------------------------
def speed_runs(df: pd.DataFrame) -> pd.Series:
    """Runs whose throughput and memory count: every run that finished (ok, degraded, stalled)."""
    return df["status"].isin(MEASURED)


def quality_runs(df: pd.DataFrame) -> pd.Series:
    """Runs whose quality counts: ok runs of established scenarios, healthy or degraded, each fine-tuned
    from its seed's pretrain checkpoint (``checkpoint_notes``)."""
    ok = df["checkpoint_note"] == "" if "checkpoint_note" in df else True
    return df["quality_established"] & (df["status"] == "ok") & df["health"].isin(["ok", "degraded"]) & ok


def healthy_runs(df: pd.DataFrame) -> pd.Series:
    return df["health"] == "ok"


def unhealthy(g: pd.DataFrame) -> str:
    """Why runs of one (scenario, config) are not healthy ('diverged 3/3 (median ...)'), '' if none."""
    g = g[g["status"] != "skipped"]
    bad = g[g["health"] != "ok"]
    if bad.empty:
        return ""
    counts = ", ".join(f"{h} {n}/{len(g)}" for h, n in bad["health"].value_counts().items())
    steps = bad.loc[bad["health"] == "diverged", "stability/diverged_step"].dropna()
    other = next((x for h, x in zip(bad["health"], bad["health_reason"]) if x and h != "diverged"), "")
    return counts + (f" (median divergence step {steps.median():.0f})" if len(steps) else "") + (
        f" ({other})" if other else "")


def excluded_configs(df: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(scenario, config) -> why it is excluded from "fastest" and frontiers (``unhealthy``)."""
    return {k: why for k, g in df.groupby(["scenario", "config"]) if (why := unhealthy(g))}


def why_not_established(df: pd.DataFrame, scenario: str) -> str:
    """Why a scenario's quality is not established (learned, metric or reliability gate), or ''."""
    if bool(df.loc[df["scenario"] == scenario, "quality_established"].any()):
        return ""
    lrn = df.attrs["learned"].get(scenario, {})
    if lrn.get("learned") is not True:
        return lrn.get("reason", "")
    if lrn.get("overfit"):
        return lrn["overfit"]
    if not df.attrs["quality_metric"][scenario].get("usable", True):
        return df.attrs["quality_metric"][scenario]["note"]
    return df.attrs.get("reliability", {}).get(scenario, {}).get("reason", "")


def by_reason(why: dict[str, str]) -> str:
    """'A, B: <reason>; C: <other reason>': scenario -> reason, each reason once."""
    return "; ".join(f"{', '.join(ss)}: {r}" for r, ss in pd.Series(list(why), list(why.values()),
                                                                   dtype=object).groupby(level=0, sort=False))


def scenario_notes(df: pd.DataFrame) -> dict[str, str]:
    """Per scenario, what the gates say in words (learned, told apart, metric, shared GPU)."""
    df = gated(df)
    out = {}
    for s in sorted(df["scenario"].unique()):
        lrn = df.attrs["learned"].get(s, {})
        qm = df.attrs["quality_metric"].get(s, {})
        rel = df.attrs.get("reliability", {}).get(s, {})
        out[s] = "; ".join(x for x in (lrn.get("reason", ""), rel.get("reason", ""), qm.get("note", ""),
                                       shared_note(df[df["scenario"] == s]),
                                       checkpoint_note(df[df["scenario"] == s])) if x)
    return out


def shared_note(d: pd.DataFrame) -> str:
    """What the blanked speed of runs that shared their GPU means, or ''."""
    n = int(d["shared_gpu"].sum()) if "shared_gpu" in d else 0
    return (f"{n} of {len(d)} run(s) shared their GPU with other runs (--runs_per_gpu): their throughput, step "
            f"time and MFU are not their own and are left blank (shared_gpu)") if n else ""
