"""A study's result records -> tables (seed 000's analysis plan): loading (``study_frame``: runs
named by their numeric definition, evidence gates applied), stage 1 per scenario (``summarize``,
``loss_curves``, ``describe_experiment``) and stage 2 (``config_stats``: means, ranks and gains vs
fp32 per scenario, config and metric; ``rank_correlations``, ``group_ranks``; the metrics'
directions, ``sign``).

A run is named by its numeric definition (``identify``): by its recorded name where the registry's
entry of that name has its definition; else by the registry's name for the definition (an old
``fp16_naive`` with fp16 moments is ``fp16_fp16_states``; ``config_recorded`` keeps the name); else
``<name>@<6 hex>`` where the registry name's meaning has changed (a *legacy* definition, never a
pick); an unknown name is kept, and two runs sharing it but not a definition are refused
(``ConfigIdentityError``). A record without numeric fields takes its name's registry definition.
``cost_hash`` marks configurations identical for speed and memory only (``core.dtypes.cost_definition``),
counted once by flips and picks. ``host_of`` says on which host a run ran.
"""
from __future__ import annotations

import dataclasses
import math
from itertools import combinations
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
from scipy import stats as sps

from benchlib.analysis.gates import (FAILED, LABELS, MEASURED, NOT_JUDGED, _first, apply_gates,  # noqa: F401
                                    excluded_configs, gated, healthy_runs, label, learned_scenarios, not_judged, quality_metrics,
                                    quality_runs, scenario_notes, shared_note, speed_runs, unhealthy,
                                    why_not_established)
from benchlib.analysis.stats import Rules, rng_kw, seeds
from benchlib.core.dtypes import ALIASES, REGISTRY, DtypeConfig, cost_definition, definition_of, hash_definition
from benchlib.core.errors import UserError
from benchlib.core.records import METRICS, kept_rows, load_records, read_steps, records_frame, steps_file
from benchlib.core.scenarios import SCENARIOS

HEADLINE = ("throughput", "memory", "quality")
BASELINE = "fp32_baseline"
STATUS_COLS = {"ok": "n_ok", "diverged": "n_diverged", "degraded": "n_degraded", "stalled": "n_stalled",
               "oom": "n_oom", "error": "n_error", "skipped": "n_skipped"}
# quality/ keys that are not quality values (flags, names, counts; baselines and errors below)
NOT_QUALITY = ("quality/beats_baseline", "quality/learned_metric", "quality/n_eval")
EXTRA_QUALITY = [k for k in METRICS if k.startswith("quality/") and k not in NOT_QUALITY
                 and not k.startswith("quality/baseline_") and not k.endswith("_se")]
SUMMARY_COLS = ["config", "seed", "throughput", "throughput_std", "memory", "memory_std", "quality",
                "quality_std", "n_seeds", "status", "shared_gpu", "n_runs", *STATUS_COLS.values(),
                "throughput_rel", "memory_rel", "quality_rel", "quality_delta", "rank_throughput",
                "rank_memory", "rank_quality", "pareto_throughput", "pareto_memory", "diverged_step",
                "quality_name", "quality_higher_is_better", "throughput_unit", "health", "health_reason",
                "n_healthy", "role", "excluded", "excluded_reason", "learned", "quality_established", "note"]


# ---- loading ------------------------------------------------------------------------------
HOST_KEYS = ("host_id", "boot_id", "gpu_uuid")  # not hostname: many GPU hosts share one (``vm``)
STACK_KEYS = ("device_name", "cuda", "torch", "transformers", "bitsandbytes", "torchao")
"""What a run's peak memory depends on beyond its recipe: the GPU model and the software, not the host
(C's 18 runs timed again on another H200 of the same stack peaked within 0.0001 GiB of the first)."""
LEGACY = "legacy"  # the role of a definition the registry no longer has
_NUMERIC = {f.name for f in dataclasses.fields(DtypeConfig)} - {"name", "description", "role"}
_BY_HASH = {c.definition_hash: c.name for c in REGISTRY.values()}


class ConfigIdentityError(ValueError):
    """Runs that share a configuration name but not its numeric definition."""


def definition_hash(dtype: dict) -> str | None:
    """The record's definition hash (recorded, else computed from its fields); None where its
    ``dtype`` entry has no numeric field and its name is not in the registry."""
    full = dtype if dtype.get("definition_hash") else _full(dtype)
    if full.get("definition_hash"):
        return str(full["definition_hash"])
    return hash_definition(definition_of(full)) if _NUMERIC & set(full) else None


def _full(dtype: dict) -> dict:
    """The record's dtype entry, or its registry entry where it names no numeric field."""
    if _NUMERIC & set(dtype):
        return dtype
    name = ALIASES.get(dtype.get("name", ""), dtype.get("name", ""))
    return REGISTRY[name].to_dict() if name in REGISTRY else dtype


def head_params(rec: dict) -> float:
    """A classification run's output-head parameters (width x labels + labels; the width is the
    input of the model's first matmul), NaN where the record does not say."""
    m = rec.get("model") if isinstance(rec.get("model"), dict) else {}
    labels, mm = m.get("num_labels"), m.get("matmuls") or []
    ok = rec.get("scenario") in ("C", "D", "E", "F") and labels and isinstance(mm, list) and mm
    return float(int(mm[0]["in"]) * int(labels) + int(labels)) if ok else float("nan")


def fp8_converted(rec: dict) -> bool | None:
    """Whether the run converted any Linear layer to float8 (``model.matmuls``); None: not said."""
    mm = (rec.get("model") or {}).get("matmuls")
    return any(bool(m.get("fp8")) for m in mm) if isinstance(mm, list) and mm else None


def identify(rec: dict) -> dict:
    """``config`` (the analysis' name, see the module docstring), ``config_recorded``,
    ``definition_hash``, ``cost_hash`` and ``role`` of one record."""
    recorded = ALIASES.get(rec["config"], rec["config"])
    dtype = {**(rec.get("dtype") or {}), "name": recorded}
    h = definition_hash(dtype)
    full = _full(dtype)
    fp8 = fp8_converted(rec) if full.get("fp8", "none") != "none" else None
    cost = hash_definition(cost_definition(full, fp8)) if _NUMERIC & set(full) else h
    if recorded in REGISTRY and (h is None or REGISTRY[recorded].definition_hash == h):
        name = recorded
    elif h in _BY_HASH:
        name = _BY_HASH[h]
    elif recorded in REGISTRY:
        name = f"{recorded}@{h[:6]}"
    else:
        name = recorded
    if name in REGISTRY:
        role = REGISTRY[name].role
    else:
        role = LEGACY if "@" in name else str((rec.get("dtype") or {}).get("role") or "candidate")
    return {"config": name, "config_recorded": rec["config"], "definition_hash": h, "cost_hash": cost, "role": role}


def identities(records: list[dict]) -> list[dict]:
    """``identify`` for every record; ``ConfigIdentityError`` where runs share a name, not a definition."""
    ids = [identify(r) for r in records]
    seen: dict[str, dict] = {}
    for r, i in zip(records, ids):
        seen.setdefault(i["config"], {}).setdefault(i["definition_hash"], []).append(r["run_id"])
    for name, defs in seen.items():
        if len(defs) > 1:
            runs = "; ".join(f"{', '.join(sorted(ids_)[:3])}{' ...' if len(ids_) > 3 else ''} (definition {h})"
                             for h, ids_ in sorted(defs.items(), key=lambda x: str(x[0])))
            raise ConfigIdentityError(f"runs share the config name {name!r} but not its definition, refusing to "
                                      f"merge them: {runs}; give the configurations different names or analyse "
                                      f"them apart")
    return ids


def host_of(env: dict) -> str | None:
    """The host identity of a run's ``env`` (``HOST_KEYS`` present, joined); None = unknown."""
    parts = [f"{k}={env[k]}" for k in HOST_KEYS if env.get(k)]
    return ";".join(parts) or None


def stack_of(env: dict) -> str | None:
    """The GPU model and software of a run's ``env`` (``STACK_KEYS`` present, joined); None where
    the record names no device."""
    if not env.get("device_name"):
        return None
    return ";".join(f"{k}={env[k]}" for k in STACK_KEYS if env.get(k))


def study_frame(records: Iterable[dict], rules=None) -> pd.DataFrame:
    """``records_frame`` normalised for analysis: runs named by ``identities`` (raises
    ``ConfigIdentityError``), ``host``, numeric headline columns, ``q_sign`` (+1: higher quality is
    better), one row per (scenario, config, seed) (the later record wins), then ``gates.apply_gates``."""
    records = list(records)
    df = records_frame(records)
    if df.empty:
        raise FileNotFoundError("no result records")
    df["date"] = [str(r.get("env", {}).get("date") or "") for r in records]
    df["host"] = [host_of(r.get("env") or {}) for r in records]
    df["stack"] = [stack_of(r.get("env") or {}) for r in records]
    df["model.type"] = [(r.get("model") or {}).get("model_type") for r in records]
    df["model.parameters"] = pd.to_numeric(pd.Series([(r.get("model") or {}).get("parameters") for r in records],
                                                     index=df.index, dtype=object), errors="coerce")
    df["model.head_params"] = [head_params(r) for r in records]
    df["pretrained.date"] = [((r.get("pretrained") or {}).get("checkpoint") or {}).get("date") for r in records]
    for col, values in pd.DataFrame(identities(records), index=df.index).items():
        df[col] = values
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
    one_recipe(df)
    df = df.sort_values(["date", "path"], na_position="first").drop_duplicates(["scenario", "config", "seed"],
                                                                                keep="last")
    df = df.sort_values(["scenario", "config", "seed"]).reset_index(drop=True)
    df.attrs["q_sign"] = df.groupby("scenario")["q_sign"].first().astype(int).to_dict()
    return apply_gates(df, rules)


RECIPE_KEYS = ("run.beta2",)
"""Run settings every verdict depends on beyond its config: one value per analysed frame, so a cell
is never the mean of runs trained two ways (a study at two beta2 values is two studies, one per arm)."""
DEFAULT_BETA2 = 0.95  # records from before beta2 was recorded trained at the run default of the time


def one_recipe(df: pd.DataFrame) -> None:
    """Refuse, in one line naming the values, records that differ in a ``RECIPE_KEYS`` setting."""
    for key in RECIPE_KEYS:
        vals = sorted({DEFAULT_BETA2 if pd.isna(v) else float(v) for v in df.get(key, pd.Series([DEFAULT_BETA2]))})
        if len(vals) > 1:
            runs = {v: df.loc[df[key].fillna(DEFAULT_BETA2).astype(float) == v, "run_id"].iloc[0] for v in vals}
            raise UserError(f"records differ in {key.removeprefix('run.')} ("
                            + ", ".join(f"{v:g}, e.g. {r}" for v, r in runs.items())
                            + "): a verdict holds at one value; analyse each value as its own study "
                              "(e.g. params/reference_real_b999.yaml beside params/reference_real.yaml)")


def recipe(df: pd.DataFrame) -> dict[str, dict]:
    """Per scenario, the recipe its verdicts hold under, as a reader needs it beside each verdict:
    beta2, steps, size, model (class and parameters), tokens per optimizer step, seeds per cell, the
    quality metric(s) and the data."""
    out = {}
    qm = df.attrs.get("quality_metric", {})
    for s, d in df.groupby("scenario"):
        seeds_per = d[d["status"].isin(MEASURED)].groupby("config")["seed"].nunique()
        num = lambda c: sorted({float(v) for v in d[c].dropna()}) if c in d else []  # noqa: E731
        tokens = (d["run.batch_size"] * d["run.grad_accum"].fillna(1) * d["run.seq_len"]).dropna() \
            if {"run.batch_size", "run.seq_len"} <= set(d) else pd.Series(dtype=float)
        second = SCENARIOS[s].task if s in SCENARIOS else None
        out[s] = {"beta2": (num("run.beta2") or [DEFAULT_BETA2])[0], "steps": [int(v) for v in num("run.steps")],
                  "size": sorted({str(v) for v in d["run.size"].dropna()}) if "run.size" in d else [],
                  "model": sorted({f"{t} {p / 1e6:.1f}M" for t, p in zip(d["model.type"], d["model.parameters"])
                                   if isinstance(t, str) and pd.notna(p)}),
                  "tokens_per_step": sorted({int(v) for v in tokens}),
                  "seeds": [int(seeds_per.min()), int(seeds_per.max())] if len(seeds_per) else [0, 0],
                  "metric": (qm.get(s) or {}).get("name", SCENARIOS[s].quality if s in SCENARIOS else None),
                  "metric2": "macro_f1" if second in ("multilabel", "singlelabel") else None,
                  "metric2_judged": second == "multilabel",
                  "data": sorted({str(v) for v in d["run.data"].dropna()}) if "run.data" in d else []}
    return out


def load_study(*roots: str | Path, rules=None, tasks: dict | None = None) -> pd.DataFrame:
    """Every readable ``result.json`` under the roots, as ``study_frame``; with ``tasks`` (a root ->
    "lm" or "cls"), only that root's runs of that kind of scenario (``compare --lm_results``)."""
    recs = [r for root in roots for r in load_records(root) if of_task(r, (tasks or {}).get(root))]
    if not recs:
        raise FileNotFoundError(f"no readable result.json under {', '.join(map(str, roots))}")
    return study_frame(recs, rules)


def of_task(rec: dict, task: str | None) -> bool:
    """Whether ``rec`` is a run of ``task``'s kind ("lm": A, B; "cls": C-F); any run where None."""
    scn = SCENARIOS.get(str(rec.get("scenario")))
    return task is None or scn is None or scn.is_lm == (task == "lm")


def resolve_study_dir(path: str | Path) -> Path:
    """A study folder as given, else relative to the repository root (papermill's working folder varies)."""
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


# ---- stage 1: one experiment ---------------------------------------------------------------
def pareto_front(x: Iterable[float], y: Iterable[float]) -> np.ndarray:
    """True where (x, y) is not dominated (both higher-is-better: negate the others); NaN never is."""
    x, y = np.asarray(list(x), float), np.asarray(list(y), float)
    ok = np.isfinite(x) & np.isfinite(y)
    front = np.zeros(len(x), bool)
    for i in np.flatnonzero(ok):
        dom = ok & (x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))
        front[i] = not dom.any()
    return front


def summarize(df: pd.DataFrame, scenario: str) -> pd.DataFrame:
    """Seed 000's summary CSV for one scenario: a row per run (with its ``health``) and a ``mean``
    row per config (over the runs that finished: ``n_seeds``), status counts, headline metrics
    relative to fp32_baseline (``*_rel``, ``quality_delta``) and the other quality metrics. Configs
    with an unhealthy run are ``excluded`` from ranks and Pareto flags, only candidates are on a
    frontier, and without established quality there is no quality rank or frontier. A seed row's
    ``throughput_std`` is over its timed windows."""
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
                "role": g["role"].iloc[0] if "role" in g else "candidate",
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
    out["quality_name"], out["throughput_unit"] = _first(d["quality_name"]), _first(d["throughput_unit"])
    out["quality_higher_is_better"] = sign(df, "quality", scenario) > 0
    established = bool(d["quality_established"].iloc[0])
    ranks_quality = bool(d["quality_ranked"].iloc[0])  # configs told apart: quality ranks and frontiers
    out["learned"] = pd.Series([d["learned"].iloc[0]] * len(out), index=out.index, dtype=object)
    out["quality_established"] = established
    out["note"] = scenario_notes(d)[scenario]
    is_mean = out["seed"] == "mean"
    base = out[is_mean & (out["config"] == BASELINE)]
    ranked = is_mean & ~out["excluded"].fillna(False).astype(bool)
    for m in HEADLINE:  # SUMMARY_COLS orders the columns
        ref = base[m].iloc[0] if len(base) else np.nan
        out[f"{m}_rel"] = out[m] / ref
        if m == "quality":
            out["quality_delta"] = out[m] - ref
        out[f"rank_{m}"] = np.nan
        if m != "quality" or ranks_quality:
            out.loc[ranked, f"rank_{m}"] = (out.loc[ranked, m] * sign(df, m, scenario)).rank(ascending=False,
                                                                                          method="min")
    ranked &= out["role"].fillna("candidate").eq("candidate")  # a control or ablation is never on a frontier
    q = out.loc[ranked, "quality"] * sign(df, "quality", scenario)
    for col, x in (("pareto_throughput", out.loc[ranked, "throughput"]), ("pareto_memory", -out.loc[ranked, "memory"])):
        out[col] = pd.Series(pd.NA, index=out.index, dtype="boolean")
        if ranks_quality:
            out.loc[is_mean, col] = False
            out.loc[ranked, col] = pareto_front(x, q)
    cols = [c for c in SUMMARY_COLS if c in out] + [c for c in out if c not in SUMMARY_COLS]
    return out[cols]


SAFE = ("safe", "reference")  # the verdicts under which a config may sit on a frontier


def _run_curve(path: str) -> tuple[np.ndarray, np.ndarray] | None:
    p = steps_file(Path(path).parent) if path else None
    if p is None:
        return None
    rows = [r for r in kept_rows(read_steps(p)) if "loss" in r]  # as compacted: the same curve before and after
    if not rows:
        return None
    loss = np.array([np.nan if r["loss"] is None else r["loss"] for r in rows], float)
    return np.array([r["step"] for r in rows]), loss


def loss_curves(df: pd.DataFrame, max_points: int = 60, cap_ratio: float = 3.0
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training loss of finished and diverged runs for charting: steps binned to at most
    ``max_points`` per scenario, then the mean, min and max over seeds per (scenario, config,
    step). Losses above ``cap_ratio`` x the median initial loss, or non-finite, are drawn at that
    cap; ``one_pass``: an LM scenario's step from which its runs have read one pass's worth of their
    corpus (NaN where no curve gets there). Second frame: one row per diverged run at its divergence step."""
    runs = []
    for _, r in df[df["status"].isin([*MEASURED, "diverged"])].iterrows():
        c = _run_curve(r["path"])
        if c is not None:
            runs.append((r, *c))
    cols = ["scenario", "config", "step", "loss", "loss_lo", "loss_hi", "n_runs", "cap", "one_pass"]
    if not runs:
        return pd.DataFrame(columns=cols), pd.DataFrame(columns=["scenario", "config", "seed", "step", "loss"])
    parts, marks = [], []
    for scn in sorted({r["scenario"] for r, _, _ in runs}):
        mine = [(r, s, l) for r, s, l in runs if r["scenario"] == scn]
        first = [l[np.isfinite(l)][0] for _, _, l in mine if np.isfinite(l).any()]
        cap = cap_ratio * float(np.median(first)) if first else np.inf
        last = max(int(s.max()) for _, s, _ in mine)
        width = max(1, math.ceil((last + 1) / max_points))
        # an LM scenario's first step past one pass over its corpus, where its curves reach it
        passes = [r.get("one_pass_step") for r, _, _ in mine]
        one_pass = min((p for p in passes if pd.notna(p)), default=np.nan)
        one_pass = one_pass if one_pass <= last else np.nan
        for r, steps, loss in mine:
            capped = np.where(np.isfinite(loss), np.minimum(loss, cap), cap)
            b = pd.DataFrame({"step": steps // width * width, "loss": capped}).groupby("step").mean()
            parts.append(b.reset_index().assign(scenario=scn, config=r["config"], seed=r["seed"], cap=cap,
                                                one_pass=one_pass))
            ds = r["stability/diverged_step"]
            if r["status"] == "diverged" and pd.notna(ds):
                at = capped[steps == int(ds)]
                marks.append({"scenario": scn, "config": r["config"], "seed": int(r["seed"]),
                              "step": int(ds), "loss": float(at[0]) if len(at) else cap})
    long = pd.concat(parts)
    curves = long.groupby(["scenario", "config", "step"]).agg(
        loss=("loss", "mean"), loss_lo=("loss", "min"), loss_hi=("loss", "max"),
        n_runs=("loss", "size"), cap=("cap", "first"), one_pass=("one_pass", "first")).reset_index()
    return curves[cols], pd.DataFrame(marks, columns=["scenario", "config", "seed", "step", "loss"])


def describe_experiment(summary: pd.DataFrame, scenario: str, rules=None) -> str:
    """Markdown sentences derived from a summary: the gates' note, the frontiers, the fastest
    candidate, the best quality (where established) and what failed."""
    rules = rules or Rules()
    m = summary[summary["seed"] == "mean"]
    q = m["quality_name"].iloc[0] or "quality"
    est = bool(m["quality_established"].iloc[0])
    lines = [f"**Scenario {scenario}** ({len(m)} configs, {int(m['n_runs'].sum())} runs; "
             f"quality = {label(q)}, {'higher' if m['quality_higher_is_better'].iloc[0] else 'lower'} is better)."]
    note = m["note"].iloc[0]
    if isinstance(note, str) and note:
        lines.append(f"- {note}.")
    who = "config shown safe here" if "verdict" in m else "healthy config"
    for col, what in (("pareto_throughput", "throughput-quality"), ("pareto_memory", "memory-quality")):
        front = m.loc[m[col].fillna(False).astype(bool), "config"].tolist()
        lines.append(f"- {what} Pareto frontier: "
                     + (", ".join(front) or f"none (no {who}{' with a measured speed' if col == 'pareto_throughput' else ''})"
                        if est else "none: quality not established on this scenario") + ".")
    ok = m[~m["excluded"].fillna(False).astype(bool)]
    if "role" in ok:  # a control or ablation is never named the fastest or the best
        ok = ok[ok["role"].fillna("candidate").eq("candidate")]
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
        if metric == "quality":  # a ratio of losses or F1s reads as "1x": the change in %
            n_top = seeds(int(top["n_healthy"].min()), "no healthy seed")
            text = (f"- best quality: {', '.join(top['config'])} ({n_top}"
                    + (f"; {(rel - 1) * 100:+.2f}% vs fp32_baseline" if pd.notna(rel) else "") + ")")
            few = r[r["n_healthy"] < rules.min_seeds]
            if len(few):
                text += ("; too few seeds to tell whether these are within seed noise of it (needs >= "
                         f"{rules.min_seeds}): " + ", ".join(f"{c} ({seeds(int(n), 'no healthy seed')})"
                                                            for c, n in zip(few["config"], few["n_healthy"])))
        elif not est:
            text = (f"- highest throughput measured: {', '.join(top['config'])}"
                    + (f" ({rel:.3g}x fp32_baseline)" if pd.notna(rel) else "")
                    + "; not named fastest: quality is not established, so whether it trains is unknown")
        else:
            text = f"- fastest: {', '.join(top['config'])}" + (f" ({rel:.3g}x fp32_baseline)" if pd.notna(rel) else "")
        lines.append(text + ".")
    out = m[m["excluded"].fillna(False).astype(bool)]
    for why, cfgs in out.groupby("excluded_reason", sort=False)["config"]:
        lines.append(f"- excluded from fastest and the frontiers: {', '.join(cfgs)}: {why}.")
    skipped = m.loc[m["n_skipped"] > 0, "config"].tolist()
    if skipped:
        lines.append(f"- skipped (this hardware or installation cannot run them): {', '.join(skipped)}.")
    return "\n".join(lines)


# ---- stage 2: across scenarios -------------------------------------------------------------
def sign(df: pd.DataFrame, metric: str, scenario: str) -> int:
    """+1 where higher is better: throughput +1, memory -1, quality from the records."""
    if metric != "quality":
        return -1 if metric == "memory" else 1
    signs = df.attrs.get("q_sign") or df.groupby("scenario")["q_sign"].first().to_dict()
    if scenario in signs:
        return int(signs[scenario])
    return 1 if SCENARIOS[scenario].higher_is_better else -1


def config_stats(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (scenario, config, metric): ``mean``, ``std``, ``n`` over the runs that count,
    status counts, ``n_failed``, ``established`` (quality judged), ``ranked`` (quality ranked: its
    configs told apart), ``rank`` (1 = best; on quality a config with only failed runs ranks last),
    ``rel`` (ratio to fp32_baseline) and ``gain_pct`` (> 0 = better)."""
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
                         "established": bool(g["quality_established"].iloc[0]) if m == "quality" else True,
                         "ranked": bool(g["quality_ranked"].iloc[0]) if m == "quality" else True})
    st = pd.DataFrame(rows)
    st["score"] = st["mean"] * st["sign"]
    st["rank"] = st.groupby(["scenario", "metric"])["score"].rank(ascending=False, method="min")
    st.loc[~st["ranked"], "rank"] = np.nan  # configs not told apart: their quality order is seed noise
    last = (st["metric"] == "quality") & st["mean"].isna() & (st["n_failed"] > 0) & st["ranked"]
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
    """Spearman's rho over the entries present in both and a two-sided permutation p-value, exact
    for n <= 8 (spearmanr's t-approximation says p = 0 for a perfect order of 3 configs)."""
    both = a.notna() & b.notna()
    x, y, n = a[both].to_numpy(float), b[both].to_numpy(float), int(both.sum())
    if n < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return np.nan, np.nan, n
    rho = float(sps.spearmanr(x, y).statistic)
    ry = sps.rankdata(y) - (n + 1) / 2

    def pearson_of_ranks(v, axis=-1):  # Spearman's rho of the permuted ranks, vectorised
        v = v - v.mean(axis=axis, keepdims=True)
        return (v @ ry) / (np.linalg.norm(v, axis=axis) * np.linalg.norm(ry))
    res = sps.permutation_test((sps.rankdata(x),), pearson_of_ranks, permutation_type="pairings", vectorized=True,
                               n_resamples=np.inf if n <= 8 else n_perm, **rng_kw(sps.permutation_test, seed))
    return rho, float(res.pvalue), n


def rank_correlations(stats: pd.DataFrame) -> pd.DataFrame:
    """``spearman`` of the configs' ranks between every pair of scenarios and, as ``LM``/``CLS``,
    the two groups' mean ranks, per metric."""
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
    """Per (metric, group, config): mean rank over the group's scenarios and its rank."""
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
UNSTABLE = ("diverged", "degraded")
"""Statuses of a run whose training became unstable: its loss blew up, or rose and stayed up."""


def trained_runs(df: pd.DataFrame) -> pd.Series:
    """Runs that count for stability: finished or diverged, in learned scenarios."""
    return df["status"].isin([*MEASURED, "diverged"]) & df["learned"].eq(True)


def seed_series(df: pd.DataFrame, metric: str, oriented: bool = True, runs: pd.Series | None = None
                ) -> dict[tuple[str, str], pd.Series]:
    """Finite per-seed values of ``metric`` per (scenario, config), indexed by seed, from the runs
    that count for it (or ``runs``); times ``sign`` when ``oriented``. ``"diverged"``: 1/0 per run
    that trained; ``"diverged_step"``: the step of each run that diverged. ``"unstable"`` and
    ``"unstable_step"``: the same for a run that diverged *or* degraded (its training loss rose and
    stayed up to the end: fp16 without a loss scale on real text climbs from 7.4 to ~21 without
    crossing 3x its initial loss), at its divergence step or the step its rise began."""
    df = gated(df)
    if metric in ("diverged", "diverged_step", "unstable", "unstable_step"):
        d = df[trained_runs(df)]
        bad = ("diverged",) if metric.startswith("diverged") else UNSTABLE
        if metric.endswith("_step"):
            d = d[d["status"].isin(bad)]
            step = d["stability/diverged_step"].where(d["status"] == "diverged", d["stability/degraded_step"])
            return {k: step[g.index].set_axis(g["seed"]).dropna().astype(float)
                    for k, g in d.groupby(["scenario", "config"])}
        return {k: g.set_index("seed")["status"].isin(bad).astype(float) for k, g in d.groupby(["scenario", "config"])}
    if runs is None:
        runs = quality_runs(df) if metric == "quality" else speed_runs(df)
    out = {}
    for (s, c), g in df[runs].groupby(["scenario", "config"]):
        v = g.set_index("seed")[metric].astype(float)
        v = v[np.isfinite(v)]
        if len(v):
            out[(s, c)] = v * (sign(df, metric, s) if oriented else 1)
    return out


def cell_text(text: str, n: int) -> str:
    """``text`` fit for one cell of a markdown table: no pipes or line breaks, at most ``n`` characters."""
    text = str(text).replace("|", "/").replace("\n", " ")
    return text if len(text) <= n else text[:n - 3].rstrip() + "..."


def study_path(folder: Path) -> str:
    """A study folder as the answer names it: from ``executed/`` on (where the machine ran it from)."""
    s = Path(folder).as_posix()
    return s[s.rindex("executed/"):] if "executed/" in s else s


def lm_and_cls(comparison: dict) -> bool:
    """Whether a study timed an LM and a classification scenario, the pair seed 001's H4 compares."""
    g = groups(comparison.get("learned") or {})
    return bool(g["lm"] and g["cls"])


def speed_only(comparison: dict) -> bool:
    """Whether a comparison is a speed study's (every scenario ``not judged``)."""
    learned = comparison.get("learned") or {}
    return bool(learned) and all(str(v.get("reason", "")).startswith(NOT_JUDGED[:11]) for v in learned.values())
