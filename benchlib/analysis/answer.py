"""The answer a practitioner reads first: a candidate x scenario table of verdict, speed, memory and
quality (``answer_table``), its scope (``scope_box``) and absolute speed (``absolute_table``), from a
quality study's ``comparison.json`` and a speed study's ``config_stats.csv``; ``study_answer``: the
same for one study. ``controls_line`` says where the controls and ablations break.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from benchlib.analysis.recommend import candidates
from benchlib.analysis.stats import label
from benchlib.analysis.tables import config_order
from benchlib.core.records import corpus_passes, load_records, shared_gpu, split_seeds

BASELINE, TF32, AMP = "fp32_baseline", "fp32_tf32_matmul", "amp_bf16"
FAILURES = ("diverged", "stalled", "degraded", "oom", "error")  # the outcomes a failed verdict's mark names


def verdicts(comparison: dict) -> pd.DataFrame:
    """Per (scenario, config): ``role``, ``verdict``, ``mark`` (``failed(diverged)``) and the quality
    change against the reference in % (negative: worse) with its CI."""
    ev = pd.DataFrame(comparison.get("recommendation_evidence", []))
    if ev.empty or "verdict" not in ev:
        raise ValueError("its comparison.json has no per-cell verdicts: run `dtype-bench compare` again")
    ev["role"] = ev["role"].fillna("candidate") if "role" in ev else "candidate"
    ev["mark"] = [mark(v, r) for v, r in zip(ev["verdict"], ev["reason"].fillna(""))]
    for col in ("gap_pct", "ci_low", "ci_high"):
        ev[col] = pd.to_numeric(ev.get(col), errors="coerce")
    ev["delta_pct"], ev["delta_lo"], ev["delta_hi"] = -ev["gap_pct"], -ev["ci_high"], -ev["ci_low"]
    for col in ("gap2_pct", "ci2_low", "ci2_high"):
        ev[col] = pd.to_numeric(ev.get(col), errors="coerce")
    ev["delta2_pct"], ev["delta2_lo"], ev["delta2_hi"] = -ev["gap2_pct"], -ev["ci2_high"], -ev["ci2_low"]
    ev["metric2"] = ev.get("metric2")
    ev["judged2"] = ev["judged2"].fillna(False).astype(bool) if "judged2" in ev else False
    return ev[["scenario", "config", "role", "verdict", "mark", "delta_pct", "delta_lo", "delta_hi", "metric2",
               "judged2", "delta2_pct", "delta2_lo", "delta2_hi", "reason"]]


def mark(verdict: str, reason: str) -> str:
    """The verdict as a cell shows it: ``failed`` with the outcomes its reason names."""
    if verdict != "failed":
        return verdict
    kinds = [k for k in FAILURES if re.search(rf"\b{k} \d+/\d+", reason)]
    return f"failed({'|'.join(kinds)})" if kinds else "failed"


def speed(stats: pd.DataFrame) -> pd.DataFrame:
    """Per (scenario, config) of a speed study's ``config_stats``: throughput x fp32 (TF32 off), x TF32,
    x amp_bf16 (each mean over seeds against that config's on the same scenario; NaN where it was not
    timed there), and GiB."""
    t = stats[stats["metric"] == "throughput"].set_index(["scenario", "config"])
    t = t["mean"] if "mean" in t and t["mean"].notna().any() else t["rel"]  # a ratio needs no reference
    mem = stats[stats["metric"] == "memory"].set_index(["scenario", "config"])

    def against(cfg):
        ref = t.xs(cfg, level="config") if cfg in t.index.get_level_values("config") else pd.Series(dtype=float)
        return [v / ref.get(s, np.nan) for (s, _), v in t.items()]
    gib = mem["mean"].reindex(t.index) if "mean" in mem else np.nan
    return pd.DataFrame({"x_fp32": against(BASELINE), "x_tf32": against(TF32), "x_amp": against(AMP), "gib": gib},
                        index=t.index).reset_index()


def cells(comparison: dict, stats: pd.DataFrame | None) -> pd.DataFrame:
    """Every candidate's verdict on every scenario, with the speed study's numbers where measured."""
    v = verdicts(comparison)
    v = v[v["config"].isin(candidates(v))]
    if stats is not None and not stats.empty:
        v = v.merge(speed(stats), on=["scenario", "config"], how="left")
    else:
        v = v.assign(x_fp32=np.nan, x_tf32=np.nan, x_amp=np.nan, gib=np.nan)
    return v


def _x(v) -> str:
    return f"{v:.2f}x" if pd.notna(v) else "-"


def _pct(d, lo, hi, name: str = "") -> str:
    ci = f" [{lo:+.2f}, {hi:+.2f}]" if pd.notna(lo) and pd.notna(hi) else ""
    return f"{name}{d:+.2f}%{ci}"


def _cell(r: pd.Series) -> str:
    parts = [f"**{r['mark']}**"]
    if any(pd.notna(r.get(k)) for k in ("x_fp32", "x_tf32", "x_amp")):  # "-" where that reference was not timed
        parts.append(f"{_x(r['x_fp32'])} / {_x(r.get('x_tf32'))} / {_x(r.get('x_amp'))}")
    if pd.notna(r.get("gib")):
        parts.append(f"{r['gib']:.1f} GiB")
    if pd.notna(r["delta_pct"]):
        parts.append(_pct(r["delta_pct"], r["delta_lo"], r["delta_hi"]))
    if pd.notna(r.get("delta2_pct")):
        parts.append(_pct(r["delta2_pct"], r["delta2_lo"], r["delta2_hi"], f"{label(r['metric2'])} "))
    return "<br>".join(parts)


def _grid(configs, scns: list, cell) -> list[str]:
    """A Markdown table: a row per config, a column per scenario, ``cell(config, scenario)``."""
    return (["| config | " + " | ".join(scns) + " |", "|---|" + "---|" * len(scns)]
            + [f"| {cfg} | " + " | ".join(cell(cfg, s) for s in scns) + " |" for cfg in configs])


def answer_table(c: pd.DataFrame, arms: list[tuple[str, pd.DataFrame]] = (), marks: dict | None = None) -> list[str]:
    """Markdown rows: one per candidate config (registry order), one column per scenario of ``c``
    and, after each, one per further arm that has it (``arms``: (label, cells); speed is shown in
    the first arm's columns only, it does not depend on beta2); ``marks``: column -> a footnote mark."""
    cols = [(s, s, c) for s in sorted(c["scenario"].unique())]
    for label_, a in arms:
        for s in sorted(a["scenario"].unique()):
            at = max([i for i, (x, _, _) in enumerate(cols) if x.split(" ")[0] == s], default=len(cols) - 1)
            cols.insert(at + 1, (f"{s} {label_}", s, a.assign(x_fp32=np.nan, x_tf32=np.nan, x_amp=np.nan, gib=np.nan)))
    idx = {name: d.set_index(["config", "scenario"]) for name, _, d in cols}
    configs = config_order(set(c["config"]).union(*(set(a["config"]) for _, a in arms)))
    names = [name + (marks or {}).get(name, "") for name, _, _ in cols]
    table = _grid(configs, names, lambda cfg, col: "")
    rows = table[:2]
    for cfg in configs:
        cells_ = [_cell(idx[name].loc[(cfg, s)]) if (cfg, s) in idx[name].index else "not run" for name, s, _ in cols]
        rows.append(f"| {cfg} | " + " | ".join(cells_) + " |")
    return rows


def _models(records: list[dict]) -> dict[str, set]:
    """Scenario -> the models its runs trained: (size, model class, checkpoint it started from)."""
    out: dict[str, set] = {}
    for r in records:
        run, model = r.get("run") or {}, r.get("model") if isinstance(r.get("model"), dict) else {}
        ckpt = run.get("model_name_or_path")
        out.setdefault(str(r.get("scenario")), set()).add(
            (run.get("size"), model.get("class"), Path(str(ckpt)).name if ckpt else None))
    return out


def speed_records(speed) -> list[dict]:
    """The records behind the answer's speed: one folder's, or, for a list of (name, folder, scenarios)
    sources, each source's records of the scenarios it supplies."""
    if isinstance(speed, (str, Path)):
        return load_records(Path(speed))
    return [r for _, folder, scns in speed for r in load_records(folder) if str(r.get("scenario")) in scns]


def model_mismatch(quality: list[Path], speed, scenarios: list[str]) -> str:
    """A sentence naming the answer's scenarios whose speed and quality come from different models
    (e.g. speed of a RoBERTa trained from scratch beside the quality of a fine-tuned BERT), or ''.
    ``speed``: a folder, or a list of sources (``speed_records``)."""
    q = _models([r for f in quality for r in load_records(f)])
    s = _models(speed_records(speed))
    words = lambda ms: " / ".join(f"`{size}` {cls or '?'}" + (f" from `{c}`" if c else "")  # noqa: E731
                                  for size, cls, c in sorted(ms, key=str))
    diff = [f"{sc} (speed: {words(s[sc])}; quality: {words(q[sc])})" for sc in scenarios
            if sc in q and sc in s and q[sc] != s[sc]]
    return ("Speed and quality come from different models on " + ", ".join(diff)
            + ": the multipliers and GiB there are the speed study's model's.") if diff else ""


def quality_legend(c: pd.DataFrame) -> str:
    """What a cell's quality change is measured against: fp32_baseline, or on a scenario where it
    has too few seeds, the config the comparison took as that scenario's reference instead."""
    ref = c[c["verdict"] == "reference"].set_index("scenario")["config"]
    other = ", ".join(f"{sc}: `{cfg}`" for sc, cfg in ref.items() if cfg != BASELINE)
    return (f"quality change vs `{BASELINE}` in % [95% CI]"
            + (f" ({other} where `{BASELINE}` has too few seeds)" if other else ""))


def controls_line(comparison: dict) -> str:
    """Where the controls and ablations break, in one line (they are never rows of the answer)."""
    v = verdicts(comparison)
    v = v[~v["config"].isin(candidates(v))]
    bad = v[v["verdict"].isin(["failed", "degraded"])]
    where = "; ".join(f"{cfg} {where_marks(g)}" for cfg, g in bad.groupby("config", sort=False))
    names = ", ".join(config_order(v["config"].unique()))
    return f"Controls and ablations (judged, never picked: {names}): " + (where or "none failed") + "."


def where_marks(g: pd.DataFrame) -> str:
    """One config's failing cells as "failed(diverged) on A, C; degraded on B"."""
    return "; ".join(f"{m} on {', '.join(sorted(h['scenario']))}" for m, h in g.groupby("mark", sort=False))


def _span(values, fmt=str) -> str:
    vals = sorted({v for v in values if v is not None and v == v})
    if not vals:
        return "unknown"
    return fmt(vals[0]) if len(vals) == 1 else f"{fmt(vals[0])}-{fmt(vals[-1])}"


def describe(records: list[dict]) -> dict:
    """What a study's records say about its scope: sizes, data, steps, seeds per cell, GPUs."""
    runs = [r.get("run", {}) for r in records]
    seeds = pd.Series([(r.get("scenario"), r.get("config")) for r in records]).value_counts()
    uuids = [r.get("env", {}).get("gpu_uuid") for r in records]
    loaded: dict[str, set] = {}  # checkpoint -> scenarios fine-tuned from it
    for r, x in zip(records, runs):
        if x.get("model_name_or_path"):
            loaded.setdefault(Path(str(x["model_name_or_path"])).name, set()).add(str(r.get("scenario")))
    return {"n": len(records), "size": _span([x.get("size") for x in runs]),
            "checkpoints": "; ".join(f"{', '.join(sorted(s))} from `{c}`" for c, s in sorted(loaded.items())),
            "data": ", ".join(sorted({str(x.get("data")) for x in runs if x.get("data")})) or "unknown",
            "steps": _span([x.get("steps") for x in runs]), "seeds": _span(list(seeds.values)) if len(seeds) else "0",
            "scenarios": "".join(sorted({str(r.get("scenario")) for r in records})),
            "device": ", ".join(sorted({r.get("env", {}).get("device_name", "?") for r in records})),
            "torch": ", ".join(sorted({str(r.get("env", {}).get("torch")) for r in records if r.get("env", {}).get("torch")})),
            "gpus": len({u for u in uuids if u}), "with_gpu_id": sum(bool(u) for u in uuids),
            "hosts": len({r.get("env", {}).get("boot_id") for r in records if r.get("env", {}).get("boot_id")}),
            "scenario_hosts": {str(sc): len(b) for (sc,), b in sorted(_gpus_by(records, "scenario", env_key="boot_id").items(),
                                                                        key=lambda kv: str(kv[0][0]))},
            "cells": len(cells := _gpus_by(records, "scenario", "config")),
            "seed_on_one": bool(seeds_at := _gpus_by(records, "scenario", "seed")) and all(len(g) == 1 for g in seeds_at.values()),
            "seed_dealt": any((r.get("sweep") or {}).get("seed_per_gpu") for r in records),
            "seed_split": sorted((f"{a} " if a else "") + f"{sc} seed {k}" for a, sc, k in split_seeds(records)),
            "seed_scenarios": sorted({str(sc) for sc, _ in seeds_at}),
            "spread": sorted(f"{sc}/{c}" for (sc, c), g in cells.items() if len(g) > 1),
            "step_cv": _step_cv(records), "beside": _beside(records),
            "pinned": sum("cpus_per_run" in (r.get("sweep") or {}) for r in records),
            "dates": _span([str(r.get("env", {}).get("date", ""))[:10] for r in records if r.get("env", {}).get("date")])}


def _step_cv(records: list[dict]) -> dict[str, tuple[float, float]]:
    """Per scenario, the median and the largest over runs of the step time's coefficient of
    variation within a run (%, ``step_ms_std / step_ms`` over its timed intervals): near 0 for a
    run that had its GPU and cores to itself, larger where something else took them (or its
    batches vary in shape)."""
    cv: dict[str, list] = {}
    for r in records:
        m = r.get("metrics", {})
        if m.get("step_ms") and m.get("step_ms_std") is not None:
            cv.setdefault(str(r.get("scenario")), []).append(100 * m["step_ms_std"] / m["step_ms"])
    return {k: (float(np.median(v)), float(np.max(v))) for k, v in sorted(cv.items())}


def _beside(records: list[dict]) -> int:
    """How many runs overlapped in time (``env.date`` + ``wall_s``) with a run on another GPU of
    their host (``env.boot_id``): timed side by side, each on its own GPU."""
    spans = []
    for r in records:
        e = r.get("env", {})
        try:
            t0 = pd.Timestamp(e["date"]).timestamp()
        except (KeyError, ValueError, TypeError):
            continue
        if e.get("boot_id") and e.get("gpu_uuid") and r.get("wall_s"):
            spans.append((e["boot_id"], e["gpu_uuid"], t0, t0 + float(r["wall_s"])))
    return sum(any(h == h2 and g != g2 and a < b2 and a2 < b for h2, g2, a2, b2 in spans) for h, g, a, b in spans)


def _timing(d: dict) -> str:
    """The speed runs' within-run step-time variation per scenario, and whether the runs that
    shared a host had their own cores (``sweep --cpus``)."""
    if not d.get("step_cv"):
        return ""
    text = ("step time within a run varies, median (largest) coefficient of variation: "
            + ", ".join(f"{k} {m:.1f}% ({x:.1f}%)" for k, (m, x) in d["step_cv"].items()))
    if d.get("beside"):  # timed while other GPUs of the host ran
        n = d.get("pinned", 0)
        text += (f"; {d['beside']} of {d['n']} runs timed while another GPU of their host ran, "
                 + ("each run on its own cores (--cpus)" if n == d["n"] else
                    f"{n} of {d['n']} runs on their own cores (--cpus)" if n else
                    "sharing its cores (no --cpus), which can slow launch-bound runs"))
    return text


def scope_box(quality: tuple[str, Path | list[Path]], speed_study, arms: list[dict] = ()) -> list[str]:
    """The GPU and baseline; each quality arm's recipe, a scenario at a time in a practitioner's
    words (``recipe_lines``; ``arms``: findings' arms, the first being ``quality``); the scope of the
    speed study (``(name, folder)``) or of each speed source (a list of ``(name, folder, scenarios)``,
    each timing its scenarios on one host)."""
    folders = quality[1] if isinstance(quality[1], (list, tuple)) else [quality[1]]
    records = [r for f in folders for r in load_records(f)]
    q = describe(records)
    sources = ([(speed_study[0], speed_study[1], None)] if isinstance(speed_study, tuple) else list(speed_study or []))
    timed = [(n, describe([r for r in load_records(f) if scns is None or str(r.get("scenario")) in scns]))
             for n, f, scns in sources]
    s = describe([r for n, f, scns in sources for r in load_records(f)
                  if scns is None or str(r.get("scenario")) in scns]) if sources else None
    arm_records = [[r for f in a["folders"] for r in load_records(f)] for a in arms[1:]]
    devices = sorted({d for rs in [records, *arm_records] for d in describe(rs)["device"].split(", ")})
    gpu = ", ".join(devices) + (f" (quality), {s['device']} (speed)" if s and [s["device"]] != devices else "")
    lines = [f"> **GPU** {gpu}, torch {q['torch']}. **Baseline** `{BASELINE}`: fp32 with TF32 off; "
             f"x TF32 is against `{TF32}` (fp32 weights, TF32 matmuls), x amp_bf16 against `{AMP}`."]
    for i, a in enumerate(arms or [{"name": quality[0], "recipe": {}, "folder": None}]):
        recs = records if i == 0 else arm_records[i - 1]
        if a["recipe"]:
            lines.append(f"> **Quality at {a['label']}** (`{a['name']}`): " + "; ".join(recipe_lines(a["name"], a["recipe"],
                                                                                                   recs)) + ".")
        else:
            lines.append(f"> **Quality** (`{quality[0]}`): `{q['size']}` models"
                         + (f" ({q['checkpoints']})" if q["checkpoints"] else "") + f", {q['data']} data, "
                         f"{q['steps']} steps, {q['seeds']} seed(s) per cell, scenarios {q['scenarios']}.")
    speed = []
    for n, d in timed:
        host, timing = _hosts(d), _timing(d)
        speed.append(f"(`{n}`): `{d['size']}` models, {d['data']} data, "
                     f"{d['steps']} steps, {d['seeds']} seed(s) per cell, scenarios {d['scenarios']}, alone on the GPU "
                     f"({d['device']}); {host}" + (f"; {timing}" if timing else "") + ".")
    if speed:  # one line however many studies time the scenarios: the scope stays a screenful
        lines.append("> **Speed and memory** " + " ".join(speed))
    if not timed:
        lines.append("> **Speed and memory**: not measured alone on a GPU in this study.")
    return [ln + ("  " if i < len(lines) - 1 else "") for i, ln in enumerate(lines)]  # "  ": a Markdown line break


def _gpus_by(records: list[dict], *keys: str, env_key: str = "gpu_uuid") -> dict[tuple, set]:
    """(the records' ``keys``) -> the GPUs (``env.gpu_uuid``; the hosts with ``env_key="boot_id"``) its
    runs ran on, for records that name one: by (scenario, config), where a config's seeds ran; by
    (scenario, seed), where a seed's configs did."""
    out: dict[tuple, set] = {}
    for r in records:
        if u := r.get("env", {}).get(env_key):
            out.setdefault(tuple(r.get(k) for k in keys), set()).add(u)
    return out


def _hosts(d: dict) -> str:
    """Where a study's runs ran, as far as its records' ``env.gpu_uuid`` tell, and what noise that
    puts where: seeds of a config spread over GPUs put between-GPU noise in the seed noise; each
    config's seeds on one GPU, and configs on several, put it in the configs' differences instead,
    which the seed noise does not measure. Where only some cells spread, it names them."""
    if not d["with_gpu_id"]:
        return "hosts not identified (its records carry no GPU id)"
    part = "" if d["with_gpu_id"] == d["n"] else f"{d['with_gpu_id']} of {d['n']} records carry a GPU id: "
    if d["gpus"] == 1:
        return part + "one GPU" + (" among them; the rest not identified" if part else " for every seed")
    per = d.get("scenario_hosts") or {}
    where = f"{d['gpus']} different GPUs" + (f" of {d['hosts']} hosts" if d.get("hosts", 0) > 1 else
                                             " of one host" if d.get("hosts") == 1 else "")
    if d.get("hosts", 0) > 1 and len(per) > 1:  # which scenario's seeds compare across hosts
        where += " (" + ", ".join(f"{sc} on {n} host{'s' if n > 1 else ''}" for sc, n in per.items()) + ")"
    spread, cells = d.get("spread", []), d.get("cells", 0)
    if d.get("seed_dealt") and d.get("seed_split") and not part:  # runs of --seed_per_gpu, yet a seed on several GPUs
        split = d["seed_split"]
        whole = [sc for sc in d.get("seed_scenarios", []) if not any(x.split(" seed ")[0].split(" ")[-1] == sc
                                                                     for x in split)]  # "[arm ]A seed 0"
        named = ", ".join(split[:4]) + (f" and {len(split) - 4} more" if len(split) > 4 else "")
        return (where + (f": each seed's configs on one GPU in {', '.join(whole)}, so there between-GPU noise is in "
                         f"the seed noise; " if whole else ": ")
                + f"{named}: configs on several GPUs, so their speed is left out (between-GPU differences would "
                  f"enter the differences between configs); speed from the seeds timed whole")
    if part or not cells or len(spread) == cells:
        paired = (": each seed's configs on one GPU, so between-GPU noise is in the seed noise, not in the "
                  "differences between configs within a seed") if d.get("seed_on_one") and not part else \
            ", so its seed noise includes between-GPU noise"
        return part + where + paired
    one = "a config's seeds on one GPU" + (f" in {cells - len(spread)} of {cells} cells" if spread else "")
    line = f"{where}: {one}, so differences between configs include between-GPU differences that the seed noise does not measure"
    if spread:  # e.g. a cell too long for one job, its seeds split over GPUs
        named = ", ".join(spread[:3]) + (f" and {len(spread) - 3} more" if len(spread) > 3 else "")
        line += f"; {named}: seeds on several GPUs, between-GPU noise in their seed noise"
    return line


def hosts_line(speed) -> str:
    """How many hosts (``env.boot_id``) timed each scenario of the answer's speed (a folder, or
    ``speed_records``' sources): "each scenario's configs timed on one host" only where the records
    say so; otherwise which scenarios were timed on several, and whose records name no host."""
    try:
        records = speed_records(speed)
    except FileNotFoundError:
        records = []
    if not records:  # a comparison made from a frame: nothing tells
        return "hosts not identified"
    by = _gpus_by(records, "scenario", env_key="boot_id")
    scns = sorted({str(r.get("scenario")) for r in records})
    several = [f"{sc} (on {len(by[(sc,)])} hosts)" for sc in scns if len(by.get((sc,), ())) > 1]
    unknown = [f"{sc} (hosts not identified)" for sc in scns if (sc,) not in by]
    if not several and not unknown:
        return "each scenario's configs timed on one host"
    return "each scenario's configs timed on one host except " + ", ".join(several + unknown)


def energy_trusted(records: list[dict]) -> list[bool]:
    """Per record, whether its energy is its own GPU's. A record that names the GPU it metered
    (``env.energy_gpu_uuid``) is; one from before that (the meter took NVML's device by torch's
    index, which under CUDA_VISIBLE_DEVICES is the host's first GPU, not the run's) only where no
    record here ran on another GPU of its machine and boot: on a multi-GPU host it may have read
    its neighbour's counter (seen: 2.8 kJ for a run whose seeds on the other GPU took 17.7 kJ)."""
    gpus: dict = {}
    for r in records:
        e = r.get("env") or {}
        gpus.setdefault((e.get("hostname"), e.get("boot_id")), set()).add(e.get("gpu_uuid"))
    out = []
    for r in records:
        e = r.get("env") or {}
        if "energy_gpu_uuid" in e:
            out.append(bool(e["energy_gpu_uuid"]) and e["energy_gpu_uuid"] == e.get("gpu_uuid"))
        else:
            out.append(e.get("boot_id") is not None and len(gpus[e.get("hostname"), e.get("boot_id")]) == 1)
    return out


def energy_note(speed) -> str:
    """A sentence where the absolute table leaves out energy it cannot vouch for (``energy_trusted``),
    else ''."""
    recs = [r for r in speed_records(speed) if (r.get("metrics") or {}).get("energy/j_per_unit") is not None]
    left = sum(not ok for ok in energy_trusted(recs))
    return (f"energy per token left out for {left} of {len(recs)} runs: timed on a multi-GPU host before the "
            f"meter named its GPU, they may have read another GPU's counter") if left else ""


def absolute_table(speed, configs: list[str]) -> list[str]:
    """Markdown: per config and scenario, the speed study's mean tokens/s, MFU and energy per token
    (``speed``: a folder, or a list of sources as ``speed_records`` reads them; energy only from
    records ``energy_trusted`` vouches for, ``energy_note`` says how many it left out)."""
    rows = []
    recs = speed_records(speed)
    for r, own in zip(recs, energy_trusted(recs)):
        m = r.get("metrics", {})
        tok, per_unit, unit_s = m.get("tokens_per_s"), m.get("energy/j_per_unit") if own else None, m.get("throughput")
        j_tok = per_unit * unit_s / tok if tok and per_unit is not None and unit_s else np.nan
        rows.append({"scenario": r.get("scenario"), "config": r.get("config"), "tok": tok, "mfu": m.get("mfu_pct"),
                     "j_tok": j_tok})
    if not rows:
        return ["(no records here)"]
    d = pd.DataFrame(rows).astype({"tok": float, "mfu": float, "j_tok": float}).groupby(["scenario", "config"]).mean()
    def fmt(cfg, s):
        if (s, cfg) not in d.index:
            return "-"
        x = d.loc[(s, cfg)]
        return (f"{x['tok'] / 1e3:.0f}k tok/s" + (f", MFU {x['mfu']:.1f}%" if pd.notna(x["mfu"]) else "")
                + (f", {x['j_tok'] * 1e3:.2f} mJ/tok" if pd.notna(x["j_tok"]) else ""))
    return _grid(configs, sorted(d.index.get_level_values("scenario").unique()), fmt)


def study_answer(study_dir: Path) -> str:
    """The answer of one study from its own ``<study>/comparison``: scope box, answer table and
    controls line; a CPU study's is labelled a smoke answer. '' without a comparison; a one-line
    note where it is unreadable."""
    comp_dir = Path(study_dir) / "comparison"
    if not (comp_dir / "comparison.json").exists():
        return ""
    try:
        comparison = json.loads((comp_dir / "comparison.json").read_text())
        stats = pd.read_csv(comp_dir / "config_stats.csv") if (comp_dir / "config_stats.csv").exists() else None
        table = answer_table(cells(comparison, stats))
    except (ValueError, KeyError, OSError) as e:
        return f"answer table: not made from {comp_dir / 'comparison.json'}: {e}"
    records = load_records(study_dir)
    if records and all(r.get("env", {}).get("device") == "cpu" for r in records):
        d = describe(records)
        head = [f"> **Smoke answer, not a recommendation** (`{Path(study_dir).name}`): `{d['size']}` models, "
                f"{d['data']} data, {d['steps']} steps, {d['seeds']} seed(s) per cell, scenarios {d['scenarios']}, "
                f"on {d['device']}, torch {d['torch']}.  ",
                "> It shows that the instrument answers: which scenarios learned and which configs broke. Its "
                "speed and memory are a toy model's CPU numbers, nothing a GPU would show."]
    else:  # its speed counts as measured alone only where no run shared its GPU
        own = (Path(study_dir).name, Path(study_dir))
        head = scope_box(own, None if any(shared_gpu(r) for r in records) else own)
    learned = [f"- {s}: {v.get('reason', '')}" for s, v in comparison.get("learned", {}).items()]
    tail = [controls_line(comparison)] if (verdicts(comparison)["role"] != "candidate").any() else []
    return "\n".join(["answer (verdict, x fp32 / x TF32 throughput, peak GiB, quality change vs the reference "
                      "[CI]):", *head, *learned, "", *(t.replace("<br>", ", ") for t in table), *tail])


FAMILY = {"gpt2": "GPT-2", "bert": "BERT", "roberta": "RoBERTa"}


def _model_words(records: list[dict]) -> str:
    """What was trained, as a practitioner names it: family, size, and where it started from."""
    r = records[0]
    m, run = r.get("model") if isinstance(r.get("model"), dict) else {}, r.get("run") or {}
    name = f"{FAMILY.get(m.get('model_type'), m.get('model_type') or '?')} {m.get('parameters', 0) / 1e6:.1f}M"
    ckpt = run.get("model_name_or_path")
    pre = r.get("pretrained") or {}
    if not ckpt:
        return f"{name} from scratch"
    if (pre.get("checkpoint") or {}).get("run_id"):
        c = pre["checkpoint"]
        return f"{name} fine-tuned from the study's own pretraining ({c['scenario']}, {c['steps']:,} steps)"
    package = pre.get("provenance_package")
    return f"{name} fine-tuned from `{Path(str(ckpt)).name}`" + (f" ({package})" if package else "")


def recipe_lines(name: str, recipe: dict, records: list[dict]) -> list[str]:
    """One line per scenario of a quality study, in a practitioner's words: the model, its start,
    the data, steps x tokens per step, beta2, the metric(s) and seeds."""
    by = {}
    for r in records:
        by.setdefault(str(r.get("scenario")), []).append(r)
    out = []
    for s, rc in sorted(recipe.items()):
        recs = by.get(s) or [{}]
        data = Path(str(rc["data"][0])).name if rc.get("data") else "?"
        metric = label(rc["metric"]) + (f" and {label(rc['metric2'])}" + ("" if rc.get("metric2_judged") else
                                                                           " (reported)") if rc.get("metric2") else "")
        seeds = rc["seeds"][0] if rc["seeds"][0] == rc["seeds"][1] else f"{rc['seeds'][0]}-{rc['seeds'][1]}"
        steps = "/".join(f"{v:,}" for v in rc["steps"])
        tokens = "/".join(f"{v:,}" for v in rc.get("tokens_per_step") or [])
        out.append(f"{s}: {_model_words(recs)} on {data}, {steps} steps x {tokens} tokens{_passes(recs)}, "
                   f"beta2 {rc['beta2']:g}, {metric}, {seeds} seeds")
    return out


def passes(record: dict) -> tuple[float, int] | None:
    """``records.corpus_passes``: (passes over the corpus, the step by which one pass is read)."""
    return corpus_passes(record)


def _passes(records: list[dict]) -> str:
    """' (reads its corpus N times: one pass by step K)' where a scenario's LM runs read their corpus
    more than once, the share of one pass where not; '' for classification."""
    got = {p for r in records if (p := passes(r))}
    if not got:
        return ""
    most, first = max(got)
    n = (records[0].get("data") or {}).get("n_train_tokens")
    if most <= 1:
        return f" ({most:.2f} of one pass over its {n / 1e6:.1f}M training tokens)"
    return f" (reads its {n / 1e6:.1f}M training tokens {most:.1f} times: one pass by step {first:,})"


def metric_legend(recipes: dict[str, dict], level: float) -> str:
    """What a cell's quality numbers are, per scenario: the metric, its sign, the interval."""
    by: dict[str, list[str]] = {}
    for s, rc in sorted(recipes.items()):
        m = label(rc["metric"]) + (f" (then {label(rc['metric2'])}, " + ("judged too)" if rc.get("metric2_judged")
                                                                          else "reported, not judged)")
                                   if rc.get("metric2") else "")
        by.setdefault(m, []).append(s)
    return (f"quality change against the scenario's reference in % of it, negative = worse whatever the metric's "
            f"direction, with its {level:.0%} t-interval over per-seed differences (paired by seed): "
            + "; ".join(f"{', '.join(ss)}: {m}" for m, ss in by.items()))
