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
from benchlib.analysis.tables import config_order
from benchlib.core.records import load_records, shared_gpu

BASELINE, TF32 = "fp32_baseline", "fp32_tf32_matmul"
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
    return ev[["scenario", "config", "role", "verdict", "mark", "delta_pct", "delta_lo", "delta_hi", "reason"]]


def mark(verdict: str, reason: str) -> str:
    """The verdict as a cell shows it: ``failed`` with the outcomes its reason names."""
    if verdict != "failed":
        return verdict
    kinds = [k for k in FAILURES if re.search(rf"\b{k} \d+/\d+", reason)]
    return f"failed({'|'.join(kinds)})" if kinds else "failed"


def speed(stats: pd.DataFrame) -> pd.DataFrame:
    """Per (scenario, config) of a speed study's ``config_stats``: throughput x fp32, x TF32 and GiB."""
    t = stats[stats["metric"] == "throughput"].set_index(["scenario", "config"])
    mem = stats[stats["metric"] == "memory"].set_index(["scenario", "config"])
    tf32 = t["rel"].xs(TF32, level="config") if TF32 in t.index.get_level_values("config") else pd.Series(dtype=float)
    x_tf32 = [rel / tf32.get(s, np.nan) for (s, _), rel in t["rel"].items()]
    gib = mem["mean"].reindex(t.index) if "mean" in mem else np.nan
    return pd.DataFrame({"x_fp32": t["rel"], "x_tf32": x_tf32, "gib": gib}, index=t.index).reset_index()


def cells(comparison: dict, stats: pd.DataFrame | None) -> pd.DataFrame:
    """Every candidate's verdict on every scenario, with the speed study's numbers where measured."""
    v = verdicts(comparison)
    v = v[v["config"].isin(candidates(v))]
    if stats is not None and not stats.empty:
        v = v.merge(speed(stats), on=["scenario", "config"], how="left")
    else:
        v = v.assign(x_fp32=np.nan, x_tf32=np.nan, gib=np.nan)
    return v


def _cell(r: pd.Series) -> str:
    parts = [f"**{r['mark']}**"]
    if pd.notna(r["x_fp32"]):
        parts.append(f"{r['x_fp32']:.1f}x / {r['x_tf32']:.1f}x" if pd.notna(r["x_tf32"]) else f"{r['x_fp32']:.1f}x / -")
    if pd.notna(r["gib"]):
        parts.append(f"{r['gib']:.1f} GiB")
    if pd.notna(r["delta_pct"]):
        ci = f" [{r['delta_lo']:+.2f}, {r['delta_hi']:+.2f}]" if pd.notna(r["delta_lo"]) and pd.notna(r["delta_hi"]) else ""
        parts.append(f"{r['delta_pct']:+.2f}%{ci}")
    return "<br>".join(parts)


def _grid(configs, scns: list, cell) -> list[str]:
    """A Markdown table: a row per config, a column per scenario, ``cell(config, scenario)``."""
    return (["| config | " + " | ".join(scns) + " |", "|---|" + "---|" * len(scns)]
            + [f"| {cfg} | " + " | ".join(cell(cfg, s) for s in scns) + " |" for cfg in configs])


def answer_table(c: pd.DataFrame) -> list[str]:
    """Markdown rows: one per candidate config (registry order), one column per scenario."""
    g = c.set_index(["config", "scenario"])
    return _grid(config_order(c["config"].unique()), sorted(c["scenario"].unique()),
                 lambda cfg, s: _cell(g.loc[(cfg, s)]) if (cfg, s) in g.index else "not run")


def _models(records: list[dict]) -> dict[str, set]:
    """Scenario -> the models its runs trained: (size, model class, checkpoint it started from)."""
    out: dict[str, set] = {}
    for r in records:
        run, model = r.get("run") or {}, r.get("model") if isinstance(r.get("model"), dict) else {}
        ckpt = run.get("model_name_or_path")
        out.setdefault(str(r.get("scenario")), set()).add(
            (run.get("size"), model.get("class"), Path(str(ckpt)).name if ckpt else None))
    return out


def model_mismatch(quality: list[Path], speed: Path, scenarios: list[str]) -> str:
    """A sentence naming the answer's scenarios whose speed and quality come from different models
    (e.g. speed of a RoBERTa trained from scratch beside the quality of a fine-tuned BERT), or ''."""
    q = _models([r for f in quality for r in load_records(f)])
    s = _models(load_records(speed))
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
            "cells": len(cells := _cell_gpus(records)),
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


def scope_box(quality: tuple[str, Path | list[Path]], speed_study: tuple[str, Path] | None) -> list[str]:
    """Three lines: the GPU and baseline; the quality study's scope (one folder, or the several
    its comparison was computed from); the speed study's."""
    folders = quality[1] if isinstance(quality[1], (list, tuple)) else [quality[1]]
    q = describe([r for f in folders for r in load_records(f)])
    s = describe(load_records(speed_study[1])) if speed_study else None
    gpu = q["device"] if not s or s["device"] == q["device"] else f"{q['device']} (quality), {s['device']} (speed)"
    lines = [f"> **GPU** {gpu}, torch {q['torch']}. **Baseline** `{BASELINE}`: fp32 with TF32 off; "
             f"x TF32 is against `{TF32}` (fp32 weights, TF32 matmuls)."]
    lines.append(f"> **Quality** (`{quality[0]}`): `{q['size']}` models"
                 + (f" ({q['checkpoints']})" if q["checkpoints"] else "") + f", {q['data']} data, {q['steps']} steps, "
                 f"{q['seeds']} seed(s) per cell, scenarios {q['scenarios']}.")
    if s:
        host, timing = _hosts(s), _timing(s)
        lines.append(f"> **Speed and memory** (`{speed_study[0]}`): `{s['size']}` models, {s['data']} data, "
                     f"{s['steps']} steps, {s['seeds']} seed(s) per cell, scenarios {s['scenarios']}, alone on the GPU; {host}"
                     + (f"; {timing}" if timing else "") + ".")
    else:
        lines.append("> **Speed and memory**: not measured alone on a GPU in this study.")
    return [ln + ("  " if i < len(lines) - 1 else "") for i, ln in enumerate(lines)]  # "  ": a Markdown line break


def _cell_gpus(records: list[dict]) -> dict[tuple, set]:
    """(scenario, config) -> the GPUs (``env.gpu_uuid``) its seeds ran on, for records that name one."""
    out: dict[tuple, set] = {}
    for r in records:
        if u := r.get("env", {}).get("gpu_uuid"):
            out.setdefault((r.get("scenario"), r.get("config")), set()).add(u)
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
    where = f"{d['gpus']} different GPUs" + (f" of {d['hosts']} hosts" if d.get("hosts", 0) > 1 else
                                             " of one host" if d.get("hosts") == 1 else "")
    spread, cells = d.get("spread", []), d.get("cells", 0)
    if part or not cells or len(spread) == cells:
        return part + where + ", so its seed noise includes between-GPU noise"
    one = "a config's seeds on one GPU" + (f" in {cells - len(spread)} of {cells} cells" if spread else "")
    line = f"{where}: {one}, so differences between configs include between-GPU differences that the seed noise does not measure"
    if spread:  # e.g. a cell too long for one job, its seeds split over GPUs
        named = ", ".join(spread[:3]) + (f" and {len(spread) - 3} more" if len(spread) > 3 else "")
        line += f"; {named}: seeds on several GPUs, between-GPU noise in their seed noise"
    return line


def absolute_table(speed_dir: Path, configs: list[str]) -> list[str]:
    """Markdown: per config and scenario, the speed study's mean tokens/s, MFU and energy per token."""
    rows = []
    for r in load_records(speed_dir):
        m = r.get("metrics", {})
        tok, per_unit, unit_s = m.get("tokens_per_s"), m.get("energy/j_per_unit"), m.get("throughput")
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
