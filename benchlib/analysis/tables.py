"""A study's result records -> tables (seed 000's analysis plan).

Stage 1, per experiment (scenario): ``summarize`` (the summary CSV: a row per seed and a
``mean`` row per config, relative to ``fp32_baseline``, ranks, Pareto frontiers) and
``loss_curves``. Stage 2, across experiments: ``config_stats`` (one tidy table of means, ranks
and gains vs fp32), ``rank_correlations`` (Spearman, scipy) and ``group_ranks``, assembled
with the flips (``flips``), verdicts (``hypotheses``) and recommendations (``recommend``) into
``comparison.json`` by ``report.compare``. Charts are in ``charts``; the decision rules and the
bootstrap in ``stats``.

Evidence gates (``apply_gates``, run by ``study_frame``), so that the analysis does not speak
where the evidence is empty:

- *Learned* (``learned_scenarios``): a scenario is learned when every finished run of its
  reference config (``Rules.reference_configs``) clearly beat the trivial predictor
  (``quality/beats_baseline``, decided at train time). Not learned, or unknown (records
  without a trivial baseline), the scenario's quality enters no rank, flip, verdict, safety
  label or recommendation; its throughput and memory are still reported.
- *Effective quality* (``quality_metrics``): where a multi-label scenario's micro-F1 is
  degenerate (0 in every run, or equal for every config) ``quality`` is P@1 (else val loss)
  for every downstream use; the record's own headline stays in ``quality_record``.
- *Health* per run (``health``, ``health_reason``): the record's status, ``stalled`` where an
  ok run did not beat the trivial baseline, and ``degraded`` where its quality ends more than
  ``Rules.degraded_vs_reference_pct`` % worse than the reference's run of the same seed (in
  learned scenarios only).

Which runs count (``speed_runs``, ``quality_runs``, ``healthy_runs``): throughput and memory
from every run that finished (``ok``, ``degraded``, ``stalled``); quality from ok runs of
established scenarios that did not stall, degraded-vs-reference ones included (their gap is
what ranks, flips and verdicts measure); safety, "fastest" and Pareto frontiers only from
configs whose every run is healthy. ``diverged`` runs count for stability and are marked on
curves; other statuses are counted. Writing the files and the CLI (``dtype-bench analyze`` /
``compare``) are in ``report``.
"""
from __future__ import annotations

import math
from itertools import combinations, permutations
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
from scipy import stats as sps

from benchlib.core.dtypes import ALIASES, REGISTRY
from benchlib.core.records import COMPLETED, METRICS, load_records, read_steps, records_frame, steps_file
from benchlib.analysis.stats import Rules
from benchlib.core.scenarios import SCENARIOS

HEADLINE = ("throughput", "memory", "quality")
BASELINE = "fp32_baseline"
STATUS_COLS = {"ok": "n_ok", "diverged": "n_diverged", "degraded": "n_degraded", "stalled": "n_stalled",
               "oom": "n_oom", "error": "n_error", "skipped": "n_skipped"}
MEASURED = COMPLETED
"""Statuses of runs that trained to the end and were timed and evaluated."""
FAILED = ("diverged", "degraded", "stalled")
"""Health values that are failures for quality: never safe, fastest or on a Pareto frontier."""
# quality/ keys that are not quality values (flags, names, counts, the gap to the trivial
# baseline, standard errors)
NOT_QUALITY = ("quality/beats_baseline", "quality/learned_metric", "quality/n_eval")
EXTRA_QUALITY = [k for k in METRICS if k.startswith("quality/") and k not in NOT_QUALITY
                 and not k.startswith("quality/baseline_") and not k.endswith("_se")]
LABELS = {"val_loss": "val loss", "p_at_1": "P@1", "p_at_3": "P@3", "p_at_5": "P@5", "micro_f1": "micro-F1",
          "macro_f1": "macro-F1", "accuracy": "accuracy", "unigram": "unigram",
          "label_frequency": "label-frequency", "majority_class": "majority-class"}
SUMMARY_COLS = ["config", "seed", "throughput", "throughput_std", "memory", "memory_std", "quality",
                "quality_std", "n_seeds", "status", "shared_gpu", "n_runs", *STATUS_COLS.values(),
                "throughput_rel", "memory_rel", "quality_rel", "quality_delta", "rank_throughput",
                "rank_memory", "rank_quality", "pareto_throughput", "pareto_memory", "diverged_step",
                "quality_name", "quality_higher_is_better", "throughput_unit", "health", "health_reason",
                "n_healthy", "excluded", "excluded_reason", "learned", "quality_established", "note"]


def label(name) -> str:
    """A metric or baseline name as written in sentences: ``p_at_1`` -> ``P@1``."""
    return LABELS.get(name, str(name))


def _rules(rules=None):
    return Rules() if rules is None else rules


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


# ---- loading ------------------------------------------------------------------------------
def study_frame(records: Iterable[dict], rules=None) -> pd.DataFrame:
    """``records_frame`` normalised for analysis: canonical config names (``fp32_true`` ->
    ``fp32_baseline``), numeric headline columns, ``q_sign`` (+1 when higher quality is better),
    and one row per (scenario, config, seed): a run recorded twice keeps the later one (record
    date, then path). Then the evidence gates (``apply_gates``, with ``rules``, default
    ``stats.Rules()``)."""
    records = list(records)
    df = records_frame(records)
    if df.empty:
        raise FileNotFoundError("no result records")
    df["date"] = [str(r.get("env", {}).get("date") or "") for r in records]
    df["config"] = df["config"].map(lambda c: ALIASES.get(c, c))
    num = [*HEADLINE, "throughput_std", "tokens_per_s", "stability/diverged_step", "stability/degraded_step",
           "stability/stalled_step", "run.steps", "quality_se", "quality/n_eval", *EXTRA_QUALITY,
           *[c for c in df if (c.startswith("baseline/") and c != "baseline/name")
             or (c.startswith("quality/") and c.endswith("_se"))]]
    for col in num:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df else np.nan
    for col in ("quality_name", "throughput_unit", "quality_higher_is_better", "quality/beats_baseline",
                "quality/learned_metric", "baseline/name"):
        if col not in df:
            df[col] = None
    fallback = df["scenario"].map(lambda s: SCENARIOS[s].higher_is_better if s in SCENARIOS else True)
    hib = df["quality_higher_is_better"].where(df["quality_higher_is_better"].notna(), fallback)
    df["q_sign"] = np.where(hib.astype(bool), 1, -1)
    df = df.sort_values(["date", "path"], na_position="first").drop_duplicates(["scenario", "config", "seed"],
                                                                                keep="last")
    df = df.sort_values(["scenario", "config", "seed"]).reset_index(drop=True)
    df.attrs["q_sign"] = df.groupby("scenario")["q_sign"].first().astype(int).to_dict()
    return apply_gates(df, rules)


# ---- evidence gates -----------------------------------------------------------------------
def quality_metrics(df: pd.DataFrame) -> dict[str, dict]:
    """Per scenario, the quality the comparison uses: ``name``, ``higher_is_better``,
    ``column`` (of the frame; None = none usable), the record's ``headline`` and a ``note``.
    A multi-label scenario whose micro-F1 is degenerate (0 in every run that finished, or the
    same mean for every config) uses P@1 if recorded, else val loss (lower is better)."""
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


def learned_scenarios(df: pd.DataFrame, rules=None) -> pd.DataFrame:
    """Per scenario: ``reference`` (the first of ``rules.reference_configs`` with a finished
    run), ``learned`` (True when every finished reference run has ``quality/beats_baseline``
    True; False when one did not beat it or stalled; None = unknown: no reference, or records
    without a trivial baseline), the threshold-free ``metric`` that decided it, the reference's
    and the trivial ``baseline``'s mean value of it, and the ``reason`` in words."""
    rules = _rules(rules)
    if "quality_record" not in df:
        df = apply_gates(df, rules)
    rows = []
    for s in sorted(df["scenario"].unique()):
        fin = df[(df["scenario"] == s) & df["status"].isin(MEASURED)]
        ref = next((c for c in rules.reference_configs if (fin["config"] == c).any()), None)
        row = {"scenario": s, "reference": ref, "learned": None, "metric": None, "reference_value": np.nan,
               "baseline": None, "baseline_value": np.nan, "n_runs": 0}
        if not_judged(df[df["scenario"] == s]):  # a speed study's: whatever its reference did
            row.update(n_runs=int((fin["config"] == ref).sum()), reason=NOT_JUDGED)
            rows.append(row)
            continue
        if ref is None:
            row["reason"] = (f"unknown: no reference config ({', '.join(rules.reference_configs)}) finished a run; "
                             "quality enters no ranking")
            rows.append(row)
            continue
        r = fin[fin["config"] == ref]
        beats = [False if st == "stalled" else _tri(b) for st, b in zip(r["status"], r["quality/beats_baseline"])]
        metric, base = _first(r["quality/learned_metric"]), _first(r["baseline/name"])
        row.update(n_runs=len(r), metric=metric, baseline=base)
        if metric and f"quality/{metric}" in r and f"baseline/{metric}" in r:
            row["reference_value"] = r[f"quality/{metric}"].mean()
            row["baseline_value"] = r[f"baseline/{metric}"].mean()
        nums = (f" {label(metric)} {row['reference_value']:.3g} vs {label(base) if base else 'the trivial baseline'} "
                f"{row['baseline_value']:.3g}" if np.isfinite(row["reference_value"])
                and np.isfinite(row["baseline_value"]) else "")
        n, fails, unknown = len(r), beats.count(False), beats.count(None)
        if fails:
            row["learned"] = False
            row["reason"] = (f"reference {ref}{nums}: not learned ({fails}/{n} run(s) did not clearly beat the "
                             "trivial baseline); quality enters no ranking")
        elif unknown == n:
            row["reason"] = "unknown: records carry no trivial baseline; quality enters no ranking"
        elif unknown:
            row["reason"] = (f"unknown: {unknown}/{n} run(s) of the reference {ref} carry no trivial baseline; "
                             "quality enters no ranking")
        else:
            row["learned"] = True
            row["reason"] = f"reference {ref}{nums}: learned ({n}/{n} run(s) clearly beat the trivial baseline)"
        rows.append(row)
    out = pd.DataFrame(rows, columns=["scenario", "reference", "learned", "reason", "metric", "reference_value",
                                      "baseline", "baseline_value", "n_runs"])
    out["learned"] = out["learned"].astype(object)
    return out


NOT_JUDGED = ("not judged: the study's runs measure speed and memory only (run.judge_quality false); quality "
              "enters no ranking, and a stalled run is not a failure")


def not_judged(runs: pd.DataFrame) -> bool:
    """Whether these runs (one scenario's) all measure speed and memory only (``judge_quality``
    false): a speed study's short runs, whose quality nobody should read."""
    return "run.judge_quality" in runs and bool(len(runs)) and bool((runs["run.judge_quality"] == False).all())  # noqa: E712


def _gate_key(rules) -> tuple:
    return tuple(rules.reference_configs), float(rules.degraded_vs_reference_pct)


def apply_gates(df: pd.DataFrame, rules=None) -> pd.DataFrame:
    """The study frame with the evidence gates (module docstring): ``quality`` = the effective
    quality (``quality_name``, ``quality_higher_is_better``, ``q_sign`` follow it; the record's
    own in ``quality_record*``), ``learned`` (the scenario's, True/False/None),
    ``quality_established`` (learned and a usable quality metric), ``health`` and
    ``health_reason``. ``attrs``: ``quality_metric`` and ``learned`` per scenario (plain dicts).
    Idempotent: applying it again with other rules recomputes from the record's columns."""
    rules = _rules(rules)
    df = df.copy()
    if "quality_record" not in df:
        df["quality_record"], df["quality_record_name"] = df["quality"], df["quality_name"]
        df["quality_record_sign"] = df["q_sign"]
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
    lt = learned_scenarios(df, rules)
    learned = dict(zip(lt["scenario"], lt["learned"]))
    est = {s: learned.get(s) is True and qm[s]["column"] is not None for s in qm}
    df["learned"] = pd.Series([learned.get(s) for s in df["scenario"]], index=df.index, dtype=object)
    df["quality_established"] = df["scenario"].map(est).fillna(False).astype(bool)
    df["health"], df["health_reason"] = _health(df, lt, rules)
    df.attrs["q_sign"] = {s: 1 if info["higher_is_better"] else -1 for s, info in qm.items()}
    df.attrs["quality_metric"] = {s: {k: v for k, v in info.items() if k != "column"} | {"usable": bool(info["column"])}
                                  for s, info in qm.items()}
    df.attrs["learned"] = {r["scenario"]: {k: (None if isinstance(v, float) and not np.isfinite(v) else v)
                                           for k, v in r.items() if k != "scenario"}
                           for r in lt.to_dict(orient="records")}
    df.attrs["gate"] = _gate_key(rules)
    return df


def _health(df: pd.DataFrame, lt: pd.DataFrame, rules) -> tuple[pd.Series, pd.Series]:
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
        elif st == "stalled":
            reason[i] = "did not beat the trivial baseline" + _vs_baseline(r)
        elif st == "ok" and _tri(r["quality/beats_baseline"]) is False:
            health[i], reason[i] = "stalled", "did not beat the trivial baseline" + _vs_baseline(r)
        elif st != "ok":
            reason[i] = _text(r["reason"]) or st
    pct = rules.degraded_vs_reference_pct
    for row in lt.itertuples():
        if not df.loc[df["scenario"] == row.scenario, "quality_established"].any():
            continue
        d = df[(df["scenario"] == row.scenario) & (df["status"] == "ok") & (health == "ok")]
        ref = d[d["config"] == row.reference].set_index("seed")["quality"]
        for i, r in d[d["config"] != row.reference].iterrows():
            q0 = ref.get(r["seed"], np.nan)
            if not (np.isfinite(q0) and np.isfinite(r["quality"]) and q0 != 0):
                continue
            worse = 100 * r["q_sign"] * (q0 - r["quality"]) / abs(q0)
            if worse > pct:
                health[i] = "degraded"
                reason[i] = (f"{label(r['quality_name'])} {r['quality']:.4g} vs reference {row.reference} {q0:.4g} "
                             f"on seed {int(r['seed'])}: {worse:.1f}% worse (> {pct:g}%)")
    return health, reason


def _vs_baseline(r: pd.Series) -> str:
    m, base = r["quality/learned_metric"], r["baseline/name"]
    if not isinstance(m, str) or f"quality/{m}" not in r or f"baseline/{m}" not in r:
        return ""
    v, b = r[f"quality/{m}"], r[f"baseline/{m}"]
    if not (pd.notna(v) and pd.notna(b)):
        return ""
    return f" ({label(m)} {v:.3g} vs {label(base) if isinstance(base, str) else 'baseline'} {b:.3g})"


def gated(df: pd.DataFrame, rules=None) -> pd.DataFrame:
    """``df`` with the evidence gates of ``rules``: as it is when already gated so (or, with
    no rules, gated at all), else ``apply_gates``."""
    if "health" in df and (rules is None or df.attrs.get("gate") == _gate_key(rules)):
        return df
    return apply_gates(df, rules)


def speed_runs(df: pd.DataFrame) -> pd.Series:
    """Runs whose throughput and memory count: every run that finished (ok, degraded, stalled)."""
    return df["status"].isin(MEASURED)


def quality_runs(df: pd.DataFrame) -> pd.Series:
    """Runs whose quality counts: ok runs of established scenarios that did not stall (a run
    degraded against the reference counts: its gap is what ranks and verdicts measure)."""
    return df["quality_established"] & (df["status"] == "ok") & df["health"].isin(["ok", "degraded"])


def healthy_runs(df: pd.DataFrame) -> pd.Series:
    return df["health"] == "ok"


def unhealthy(g: pd.DataFrame) -> str:
    """Why some runs of one (scenario, config) are not healthy, '' if none: counts per health
    ('diverged 3/3'), then the median divergence step or the first other reason."""
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
    """(scenario, config) -> why it is excluded from "fastest" and Pareto frontiers: one of its
    runs is not healthy (diverged, degraded, stalled, oom, error; ``unhealthy``). Skipped runs
    (the hardware cannot run the config) do not count."""
    out = {}
    for (s, c), g in df.groupby(["scenario", "config"]):
        why = unhealthy(g)
        if why:
            out[s, c] = why
    return out


def why_not_established(df: pd.DataFrame, scenario: str) -> str:
    """Why a scenario's quality is not established: the learned gate's reason, or the quality
    metric's note (degenerate with nothing to stand in); '' when it is established."""
    if bool(df.loc[df["scenario"] == scenario, "quality_established"].any()):
        return ""
    lrn = df.attrs["learned"].get(scenario, {})
    return lrn.get("reason", "") if lrn.get("learned") is not True else df.attrs["quality_metric"][scenario]["note"]


def scenario_notes(df: pd.DataFrame) -> dict[str, str]:
    """Per scenario, what the gates say in words: learned or not and why, the quality metric
    used where it is not the record's headline, and the runs whose speed is blanked."""
    df = gated(df)
    out = {}
    for s in sorted(df["scenario"].unique()):
        lrn = df.attrs["learned"].get(s, {})
        qm = df.attrs["quality_metric"].get(s, {})
        out[s] = "; ".join(x for x in (lrn.get("reason", ""), qm.get("note", ""), shared_note(df[df["scenario"] == s]))
                           if x)
    return out


def shared_note(d: pd.DataFrame) -> str:
    """What the blanked speed of runs that shared their GPU means, or ''."""
    n = int(d["shared_gpu"].sum()) if "shared_gpu" in d else 0
    return (f"{n} of {len(d)} run(s) shared their GPU with other runs (--runs-per-gpu): their throughput, step "
            f"time and MFU are not their own and are left blank (shared_gpu)") if n else ""


def load_study(*roots: str | Path, rules=None) -> pd.DataFrame:
    """Every readable ``result.json`` under the roots, as ``study_frame``."""
    recs = [r for root in roots for r in load_records(root)]
    if not recs:
        raise FileNotFoundError(f"no readable result.json under {', '.join(map(str, roots))}")
    return study_frame(recs, rules)


def resolve_study_dir(path: str | Path) -> Path:
    """A study folder as given, else relative to the repository root (notebooks run by
    papermill may start in ``notebooks/`` or in the output folder)."""
    p = Path(path).expanduser()
    for cand in (p, Path(__file__).resolve().parents[2] / p):
        if cand.is_dir():
            return cand.resolve()
    raise FileNotFoundError(f"study folder {path!r} not found")


def config_order(configs: Iterable[str]) -> list[str]:
    """Registry order (seed 001's table first), then unknown names alphabetically."""
    s = set(configs)
    known = [c for c in REGISTRY if c in s]
    return known + sorted(s - set(known))


def status_table(df: pd.DataFrame) -> pd.DataFrame:
    """Runs per scenario x status."""
    t = df.pivot_table(index="scenario", columns="status", values="run_id", aggfunc="count", fill_value=0)
    return t.reindex(columns=[s for s in STATUS_COLS if s in t.columns])


def sign(df: pd.DataFrame, metric: str, scenario: str) -> int:
    """+1 where higher is better: throughput +1, memory -1, quality from the records."""
    if metric != "quality":
        return -1 if metric == "memory" else 1
    signs = df.attrs.get("q_sign") or df.groupby("scenario")["q_sign"].first().to_dict()
    if scenario in signs:
        return int(signs[scenario])
    return 1 if SCENARIOS[scenario].higher_is_better else -1


# ---- stage 1: one experiment ---------------------------------------------------------------
def pareto_front(x: Iterable[float], y: Iterable[float]) -> np.ndarray:
    """True where (x, y) is not dominated, both axes higher-is-better (negate the others).
    A point is dominated by one at least as good on both axes and better on one; NaN is never
    on the front."""
    x, y = np.asarray(list(x), float), np.asarray(list(y), float)
    ok = np.isfinite(x) & np.isfinite(y)
    front = np.zeros(len(x), bool)
    for i in np.flatnonzero(ok):
        dom = ok & (x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))
        front[i] = not dom.any()
    return front


def summarize(df: pd.DataFrame, scenario: str) -> pd.DataFrame:
    """Seed 000's summary CSV for one scenario: a row per run (``seed`` = its number, with its
    ``health`` and ``health_reason``) and a ``mean`` row per config (mean and std over the runs
    that finished, ok or not: ``n_seeds``; ``n_healthy`` of them healthy), status counts, each
    headline metric relative to fp32_baseline (``*_rel`` = ratio, ``quality_delta`` =
    difference), and the scenario's other quality metrics (``val_loss``, ``macro_f1``, ...) in
    their own columns. Configs with an unhealthy run are ``excluded`` (``excluded_reason``) from
    the ranks (1 = best, direction-aware) and the Pareto flags; where the scenario's quality is
    not established (``learned``, ``note``) there is no quality rank and no frontier. On a seed
    row, ``throughput_std`` is the run's own std over its timed windows."""
    df = gated(df)
    d = df[df["scenario"] == scenario]
    if d.empty:
        raise ValueError(f"no records for scenario {scenario!r}")
    extra = [k for k in EXTRA_QUALITY if d[k].notna().any()]
    excluded = excluded_configs(d)
    shared = "shared_gpu" in d and bool(d["shared_gpu"].any())  # the column only where some run shared its GPU
    rows = []
    for cfg in config_order(d["config"].unique()):
        g = d[d["config"] == cfg].sort_values("seed")
        fin = g[speed_runs(g)]
        for _, r in g.iterrows():
            rows.append({"config": cfg, "seed": str(int(r["seed"])), "status": r["status"],
                         "n_seeds": int(r["status"] in MEASURED), "diverged_step": r["stability/diverged_step"],
                         **{m: r[m] for m in HEADLINE}, "throughput_std": r["throughput_std"],
                         "health": r["health"], "health_reason": r["health_reason"],
                         **({"shared_gpu": bool(r["shared_gpu"])} if shared else {}),
                         **{k.split("/", 1)[1]: r[k] for k in extra}})
        mean = {"config": cfg, "seed": "mean", "n_seeds": len(fin), "n_runs": len(g),
                "n_healthy": int(healthy_runs(g).sum()),
                "status": ",".join(f"{n}x{s}" for s, n in g["status"].value_counts().items()),
                "diverged_step": g["stability/diverged_step"].median(),
                "excluded": (scenario, cfg) in excluded, "excluded_reason": excluded.get((scenario, cfg), ""),
                **({"shared_gpu": bool(g["shared_gpu"].any())} if shared else {})}
        for m in [*HEADLINE, *extra]:
            name = m.split("/", 1)[-1]
            mean[name] = fin[m].mean() if len(fin) else np.nan
            if m in HEADLINE:
                mean[f"{m}_std"] = fin[m].std(ddof=1) if len(fin) > 1 else np.nan
        mean.update({col: int((g["status"] == s).sum()) for s, col in STATUS_COLS.items()})
        rows.append(mean)
    out = pd.DataFrame(rows)
    out["quality_name"] = d["quality_name"].dropna().iloc[0] if d["quality_name"].notna().any() else None
    out["throughput_unit"] = d["throughput_unit"].dropna().iloc[0] if d["throughput_unit"].notna().any() else None
    out["quality_higher_is_better"] = sign(df, "quality", scenario) > 0
    established = bool(d["quality_established"].iloc[0])
    out["learned"] = pd.Series([d["learned"].iloc[0]] * len(out), index=out.index, dtype=object)
    out["quality_established"] = established
    out["note"] = scenario_notes(d)[scenario]
    is_mean = out["seed"] == "mean"
    base = out[is_mean & (out["config"] == BASELINE)]
    for m in HEADLINE:
        ref = base[m].iloc[0] if len(base) else np.nan
        out[f"{m}_rel"] = out[m] / ref
        if m == "quality":
            out["quality_delta"] = out[m] - ref
    ranked = is_mean & ~out["excluded"].fillna(False).astype(bool)
    for m in HEADLINE:
        out[f"rank_{m}"] = np.nan
        if m != "quality" or established:
            out.loc[ranked, f"rank_{m}"] = (out.loc[ranked, m] * sign(df, m, scenario)).rank(ascending=False,
                                                                                          method="min")
    q = out.loc[ranked, "quality"] * sign(df, "quality", scenario)
    for col, x in (("pareto_throughput", out.loc[ranked, "throughput"]), ("pareto_memory", -out.loc[ranked, "memory"])):
        out[col] = pd.Series(pd.NA, index=out.index, dtype="boolean")
        if established:
            out.loc[is_mean, col] = False
            out.loc[ranked, col] = pareto_front(x, q)
    cols = [c for c in SUMMARY_COLS if c in out] + [c for c in out if c not in SUMMARY_COLS]
    return out[cols]


def _run_curve(path: str) -> tuple[np.ndarray, np.ndarray] | None:
    p = steps_file(Path(path).parent) if path else None
    if p is None:
        return None
    rows = [r for r in read_steps(p) if "loss" in r]
    if not rows:
        return None
    loss = np.array([np.nan if r["loss"] is None else r["loss"] for r in rows], float)
    return np.array([r["step"] for r in rows]), loss


def loss_curves(df: pd.DataFrame, max_points: int = 120, cap_ratio: float = 3.0
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training loss from each run's ``steps.jsonl`` (finished and diverged runs), aggregated for
    charting: steps binned to at most ``max_points`` per scenario, then per (scenario, config,
    step) the mean, min and max over seeds (``loss``, ``loss_lo``, ``loss_hi``, ``n_runs``).
    Losses above ``cap_ratio`` x the scenario's median initial loss, and non-finite ones, are
    drawn at that cap so a divergence shows as a jump to the ceiling. Second frame: one row per
    diverged run at its divergence step."""
    runs = []
    for _, r in df[df["status"].isin([*MEASURED, "diverged"])].iterrows():
        c = _run_curve(r["path"])
        if c is not None:
            runs.append((r, *c))
    cols = ["scenario", "config", "step", "loss", "loss_lo", "loss_hi", "n_runs", "cap"]
    if not runs:
        return pd.DataFrame(columns=cols), pd.DataFrame(columns=["scenario", "config", "seed", "step", "loss"])
    parts, marks = [], []
    for scn in sorted({r["scenario"] for r, _, _ in runs}):
        mine = [(r, s, l) for r, s, l in runs if r["scenario"] == scn]
        first = [l[np.isfinite(l)][0] for _, _, l in mine if np.isfinite(l).any()]
        cap = cap_ratio * float(np.median(first)) if first else np.inf
        width = max(1, math.ceil((max(int(s.max()) for _, s, _ in mine) + 1) / max_points))
        for r, steps, loss in mine:
            capped = np.where(np.isfinite(loss), np.minimum(loss, cap), cap)
            b = pd.DataFrame({"step": steps // width * width, "loss": capped}).groupby("step").mean()
            parts.append(b.reset_index().assign(scenario=scn, config=r["config"], seed=r["seed"], cap=cap))
            ds = r["stability/diverged_step"]
            if r["status"] == "diverged" and pd.notna(ds):
                at = capped[steps == int(ds)]
                marks.append({"scenario": scn, "config": r["config"], "seed": int(r["seed"]),
                              "step": int(ds), "loss": float(at[0]) if len(at) else cap})
    long = pd.concat(parts)
    curves = long.groupby(["scenario", "config", "step"]).agg(
        loss=("loss", "mean"), loss_lo=("loss", "min"), loss_hi=("loss", "max"),
        n_runs=("loss", "size"), cap=("cap", "first")).reset_index()
    return curves[cols], pd.DataFrame(marks, columns=["scenario", "config", "seed", "step", "loss"])


def describe_experiment(summary: pd.DataFrame, scenario: str, rules=None) -> str:
    """Markdown sentences derived from a summary (no hand-written findings): what the evidence
    gates say, the frontiers and the fastest config (configs that failed left out), the best
    quality where it is established, and what failed."""
    rules = _rules(rules)
    m = summary[summary["seed"] == "mean"]
    q = m["quality_name"].iloc[0] or "quality"
    est = bool(m["quality_established"].iloc[0])
    lines = [f"**Scenario {scenario}** ({len(m)} configs, {int(m['n_runs'].sum())} runs; "
             f"quality = {label(q)}, {'higher' if m['quality_higher_is_better'].iloc[0] else 'lower'} is better)."]
    note = m["note"].iloc[0]
    if isinstance(note, str) and note:
        lines.append(f"- {note}.")
    for col, what in (("pareto_throughput", "throughput-quality"), ("pareto_memory", "memory-quality")):
        front = m.loc[m[col].fillna(False).astype(bool), "config"].tolist()
        lines.append(f"- {what} Pareto frontier: "
                     + (", ".join(front) or "none (no healthy config)" if est else
                        "none: quality not established on this scenario") + ".")
    ok = m[~m["excluded"].fillna(False).astype(bool)]
    for metric, what in (("throughput", "fastest"), ("quality", "best quality")):
        r = ok.dropna(subset=[f"rank_{metric}"])
        if not len(r):
            if metric == "throughput":
                blank = "shared_gpu" in m and bool(m["shared_gpu"].fillna(False).astype(bool).all())
                lines.append("- fastest: none named: " + ("the runs shared their GPU, so no speed was measured."
                                                          if blank else "every config has a failed run."))
            continue
        top = r[r[f"rank_{metric}"] == r[f"rank_{metric}"].min()]
        rel = top[f"{metric}_rel"].iloc[0]
        text = f"- {what}: {', '.join(top['config'])}" + (f" ({rel:.3g}x fp32_baseline)" if pd.notna(rel) else "")
        if metric == "throughput" and not est:
            text = (f"- highest throughput measured: {', '.join(top['config'])}"
                    + (f" ({rel:.3g}x fp32_baseline)" if pd.notna(rel) else "")
                    + "; not named fastest: quality is not established, so whether it trains is unknown")
        if metric == "quality" and r["n_healthy"].min() < rules.min_seeds:
            text += (f"; {_seeds(int(r['n_healthy'].min()))}: cannot tell whether the others are within seed "
                     f"noise of it (needs >= {rules.min_seeds} seeds per config)")
        lines.append(text + ".")
    out = m[m["excluded"].fillna(False).astype(bool)]
    for why, cfgs in out.groupby("excluded_reason", sort=False)["config"]:
        lines.append(f"- excluded from fastest and the frontiers: {', '.join(cfgs)}: {why}.")
    skipped = m.loc[m["n_skipped"] > 0, "config"].tolist()
    if skipped:
        lines.append(f"- skipped (this hardware or installation cannot run them): {', '.join(skipped)}.")
    return "\n".join(lines)


def _seeds(n: int) -> str:
    return {0: "no healthy seed", 1: "one seed"}.get(n, f"{n} seeds")


# ---- stage 2: across experiments -----------------------------------------------------------
def config_stats(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (scenario, config, metric): ``mean``, ``std``, ``n`` over the runs that count
    (``speed_runs`` for throughput and memory, ``quality_runs`` for quality), status counts,
    ``n_failed`` (runs whose health is diverged, degraded or stalled), ``established`` (False for
    quality where the scenario's quality is not established: no value, no rank), ``rank`` (1 =
    best; on quality a config with no counted run but a failed one ranks last), ``rel`` (ratio
    to fp32_baseline) and ``gain_pct`` (% vs fp32_baseline, > 0 = better)."""
    df = gated(df)
    rows = []
    speed, qual = speed_runs(df), quality_runs(df)
    for (s, c), g in df.groupby(["scenario", "config"]):
        counts = {col: int((g["status"] == st).sum()) for st, col in STATUS_COLS.items()}
        for m in HEADLINE:
            v = g.loc[(qual if m == "quality" else speed)[g.index], m].dropna()
            rows.append({"scenario": s, "config": c, "metric": m, "mean": v.mean() if len(v) else np.nan,
                         "std": v.std(ddof=1) if len(v) > 1 else np.nan, "n": len(v), "n_runs": len(g),
                         "sign": sign(df, m, s), **counts, "n_failed": int(g["health"].isin(FAILED).sum()),
                         "established": bool(g["quality_established"].iloc[0]) if m == "quality" else True})
    st = pd.DataFrame(rows)
    st["score"] = st["mean"] * st["sign"]
    st["rank"] = st.groupby(["scenario", "metric"])["score"].rank(ascending=False, method="min")
    last = (st["metric"] == "quality") & st["mean"].isna() & (st["n_failed"] > 0) & st["established"]
    n_ranked = st[st["metric"] == "quality"].groupby("scenario")["rank"].count()
    st.loc[last, "rank"] = st.loc[last, "scenario"].map(n_ranked).astype(float) + 1
    ref = st.set_index(["scenario", "metric"]).index.map(
        st[st["config"] == BASELINE].set_index(["scenario", "metric"])["mean"].to_dict())
    ref = np.asarray(ref, float)
    st["rel"] = st["mean"] / ref
    st["gain_pct"] = 100 * st["sign"] * (st["mean"] - ref) / np.abs(ref)
    return st


def groups(scenarios: Iterable[str]) -> dict[str, list[str]]:
    """Seed 000's two experiments: language modelling (A, B) and classification (C-F)."""
    s = sorted(set(scenarios))
    return {"lm": [x for x in s if SCENARIOS[x].is_lm], "cls": [x for x in s if not SCENARIOS[x].is_lm]}


def spearman(a: pd.Series, b: pd.Series, n_perm: int = 20000, seed: int = 0) -> tuple[float, float, int]:
    """Spearman's rho (scipy.stats.spearmanr) over the entries present in both, and a two-sided
    permutation p-value: exact over all n! pairings for n <= 8 configs, else ``n_perm`` random
    pairings. (spearmanr's own t-approximation says p = 0 for a perfect order of 3 configs.)"""
    both = a.notna() & b.notna()
    x, y, n = a[both].to_numpy(float), b[both].to_numpy(float), int(both.sum())
    if n < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return np.nan, np.nan, n
    rho = float(sps.spearmanr(x, y).statistic)
    rx, ry = sps.rankdata(x) - (n + 1) / 2, sps.rankdata(y)
    perms = (np.array(list(permutations(ry))) if n <= 8 else
             np.random.default_rng(seed).permuted(np.tile(ry, (n_perm, 1)), axis=1))
    perms = perms - perms.mean(axis=1, keepdims=True)
    r = perms @ rx / (np.linalg.norm(perms, axis=1) * np.linalg.norm(rx))
    p = float(np.mean(np.abs(r) >= abs(rho) - 1e-12))
    return rho, p if n <= 8 else (p * n_perm + 1) / (n_perm + 1), n


def rank_correlations(stats: pd.DataFrame) -> pd.DataFrame:
    """Spearman rho (``spearman``: scipy's rho, permutation p-value) of the configs' ranks between
    every pair of scenarios and, as ``LM``/``CLS``, between the two groups' mean ranks; per
    metric, over the configs ranked in both (>= 3 needed)."""
    rows = []
    for m in HEADLINE:
        piv = stats[stats["metric"] == m].pivot(index="config", columns="scenario", values="rank")
        for a, b in combinations(piv.columns, 2):
            rho, p, n = spearman(piv[a], piv[b])
            rows.append({"metric": m, "a": a, "b": b, "rho": rho, "p": p, "n_configs": n})
        g = groups(piv.columns)
        if g["lm"] and g["cls"]:
            rho, p, n = spearman(piv[g["lm"]].mean(axis=1), piv[g["cls"]].mean(axis=1))
            rows.append({"metric": m, "a": "LM", "b": "CLS", "rho": rho, "p": p, "n_configs": n})
    return pd.DataFrame(rows, columns=["metric", "a", "b", "rho", "p", "n_configs"])


def group_ranks(stats: pd.DataFrame) -> pd.DataFrame:
    """Per (metric, group, config): mean rank over the group's scenarios and its rank (seed
    000's ``lm_quality_rank`` / ``cls_quality_rank``)."""
    rows = []
    for m in HEADLINE:
        piv = stats[stats["metric"] == m].pivot(index="config", columns="scenario", values="rank")
        for name, scns in groups(piv.columns).items():
            if scns:
                mr = piv[scns].mean(axis=1)
                rows += [{"metric": m, "group": name, "config": c, "mean_rank": v, "rank": r}
                         for c, v, r in zip(mr.index, mr, mr.rank(method="min"))]
    return pd.DataFrame(rows, columns=["metric", "group", "config", "mean_rank", "rank"])


# ---- per-seed values of a metric (what the statistics resample) -------------------------------
def trained_runs(df: pd.DataFrame) -> pd.Series:
    """Runs that count for stability: those that trained (finished or diverged) in learned
    scenarios."""
    return df["status"].isin([*MEASURED, "diverged"]) & df["learned"].eq(True)


def seed_values(df: pd.DataFrame, metric: str, oriented: bool = True) -> dict[tuple[str, str], np.ndarray]:
    """Finite per-seed values of ``metric`` per (scenario, config) from the runs that count for
    it (``analysis.quality_runs`` for quality, ``speed_runs`` otherwise); times ``sign`` when
    ``oriented`` (higher is better everywhere). ``metric="diverged"``: 1/0 per run that trained
    (``trained_runs``)."""
    df = gated(df)
    if metric == "diverged":
        d = df[trained_runs(df)]
        return {k: (g["status"] == "diverged").to_numpy(float) for k, g in d.groupby(["scenario", "config"])}
    out = {}
    for (s, c), g in df[quality_runs(df) if metric == "quality" else speed_runs(df)].groupby(["scenario", "config"]):
        v = g[metric].to_numpy(float)
        v = v[np.isfinite(v)]
        if len(v):
            out[(s, c)] = v * (sign(df, metric, s) if oriented else 1)
    return out
