"""The README's **Findings** section, generated from a study's ``comparison.json`` (``dtype-bench
findings``), never written by hand: the recommended default (or why there is none), what flips
between tasks, where each configuration breaks, the hypothesis verdicts, and the device, software
and commit of the records behind them.

    dtype-bench findings executed/h100/reference/comparison/comparison.json            # print it
    dtype-bench findings executed/h100/reference/comparison/comparison.json \
        executed/h100/reference_speed/comparison/comparison.json --readme README.md

Several studies: the first one's recommendation and flips, every study's failures, and each
hypothesis from the study that decides it (the quality study for the quality hypotheses, a
speed study at ``base`` for the speed ones), named in the table. Where the first study measured
no speed (its runs shared a GPU) and a later one is a speed study (``judge_quality: false``),
the default is the fastest, in the speed study, of the configs the first calls safe on every
scenario (``recommend.default_across``).

``--fp8-sizes STUDY`` and ``--arm-cost STUDY`` add what those studies answer, recomputed from
their records (``fp8_sizes``, ``arm_cost``): per float8 config its break-even and speed-up at
each size, and per (scenario, config) what the arm costs in step time and saves in memory.

With ``--readme`` the text replaces what lies between the two marker lines ``<!-- findings:start
-->`` and ``<!-- findings:end -->`` (added at the end when absent), so running it again at the
same results rewrites nothing.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from benchlib.analysis.outputs import study_records
from benchlib.analysis.recommend import default_across, fastest_safe_across
from benchlib.analysis.tables import NOT_JUDGED
from benchlib.core.errors import UserError
from benchlib.core.records import load_records, short_commit

START, END = "<!-- findings:start -->", "<!-- findings:end -->"


def provenance(study_dir: Path) -> str:
    """Device, software and commit(s) of the study's records, in one line."""
    envs = [r.get("env", {}) for r in load_records(study_dir)]
    if not envs:
        return f"no records under {study_dir}"

    def values(key: str, short=str) -> str:
        return ", ".join(sorted({short(str(e[key])) for e in envs if e.get(key)})) or "unknown"

    return (f"{len(envs)} runs on {values('device_name')}; torch {values('torch')}; "
            f"commit {values('git_commit', short_commit)}; {min(e.get('date', '') for e in envs)[:10]} to "
            f"{max(e.get('date', '') for e in envs)[:10]}")


def _bullets(lines: list[str], empty: str) -> list[str]:
    return [f"- {x}" for x in lines] or [f"- {empty}"]


def _breaks(comparison: dict) -> list[str]:
    out = []
    for s, cfgs in sorted(comparison.get("excluded", {}).items()):
        learned = comparison.get("learned", {}).get(s, {})
        if cfgs and learned.get("learned") is False:  # every config "fails" where nothing learned
            out.append(f"on {s} no config can be judged on quality: {learned.get('reason', 'not established')} "
                       f"({len(cfgs)} configs stalled or failed)")
        else:
            out += [f"{c} on {s}: {why}" for c, why in sorted(cfgs.items())]
    return out + list(comparison.get("recommendations", {}).get("avoid", []))


DECIDED = ("supported", "rejected")


def merged_hypotheses(studies: list[tuple[str, dict]]) -> dict[str, tuple[str, dict]]:
    """hypothesis id -> (study, verdict): the first study whose verdict is decided (supported or
    rejected), else the first that has it. A study built for speed (short runs at ``base``)
    decides the speed hypotheses, one built for quality the others."""
    out: dict[str, tuple[str, dict]] = {}
    for name, comp in studies:
        for hid, h in comp.get("hypotheses", {}).items():
            if hid not in out or (out[hid][1]["verdict"] not in DECIDED and h["verdict"] in DECIDED):
                out[hid] = (name, h)
    return out


def frontier_across(quality: dict, speed_dir: Path) -> dict:
    """Seed 001's H4 from a speed study's records over the candidate configs that the quality
    study (its ``comparison.json``) calls safe on each scenario: a frontier of configs that may
    not train says nothing. {} where either is missing."""
    from benchlib.analysis.hypotheses import bf16_on_frontier
    from benchlib.analysis.recommend import candidates
    from benchlib.analysis.tables import load_study
    saf = pd.DataFrame(quality.get("recommendation_evidence", []))
    if saf.empty or "safe" not in saf:
        return {}
    cand = candidates(saf)
    passed = {s: set(g.loc[g["safe"].eq(True) & g["config"].isin(cand), "config"]) for s, g in saf.groupby("scenario")}
    try:
        runs = load_study(speed_dir)
    except FileNotFoundError:  # a speed study whose records are not here: its own verdict stands
        return {}
    return bf16_on_frontier(runs, passed=passed)


def _ci(x: float, lo: float, hi: float, fmt: str = ".2f") -> str:
    return f"{x:{fmt}}" + (f" [{lo:{fmt}}, {hi:{fmt}}]" if pd.notna(lo) and pd.notna(hi) else "")


def _change(pct: float) -> str:
    return "unchanged" if abs(pct) < 0.5 else f"{pct:+.0f}%"


def fp8_section(study_dir: Path) -> list[str]:
    """**Where FP8 pays**: per float8 config (and series), its break-even and each size's speed-up."""
    from benchlib.analysis import fp8_sizes
    _, records = study_records(study_dir)
    t = fp8_sizes.size_table(records)
    out = ["", f"**Where FP8 pays** (`{study_dir.name}`: {provenance(study_dir)})", ""]
    bes = fp8_sizes.break_evens(t)
    for (config, series), g in t[t["config"] != fp8_sizes.BASELINE].groupby(["config", "series"], sort=False):
        key = config if series == fp8_sizes.DEFAULT_SERIES else f"{config} ({series})"
        sizes = "; ".join(f"{r['size']} {_ci(r['speedup'], r['speedup_lo'], r['speedup_hi'])}"
                          if pd.notna(r["speedup"]) else f"{r['size']} - ({r['note']})" for _, r in g.iterrows())
        out.append(f"- {key}: {bes[key]}; speed-up over {fp8_sizes.BASELINE} (its ms/step / the config's, 95% CI): "
                   f"{sizes}")
    return out


def arm_cost_section(study_dir: Path) -> list[str]:
    """**What an arm costs**: per (scenario, config, seed) the step-time cost and memory saved."""
    from benchlib.analysis import arm_cost
    _, records = study_records(study_dir)
    t = arm_cost.cost_table(records)
    out = ["", f"**What `{study_dir.name}` costs** against its `{arm_cost.BASELINE_ARM}` arm "
               f"({provenance(study_dir)})", ""]
    arms = t[t["arm"] != arm_cost.BASELINE_ARM]
    for _, r in arms.iterrows():
        if pd.isna(r["time_ratio"]):
            out.append(f"- {r['scenario']} {r['config']} {r['arm']}: no pair ({r['note']})")
            continue
        base = t[(t["arm"] == arm_cost.BASELINE_ARM) & (t["scenario"] == r["scenario"]) & (t["config"] == r["config"])
                 & (t["seed"] == r["seed"])]["peak_gib"].iloc[0]
        out.append(f"- {r['scenario']} {r['config']} {r['arm']}: step time "
                   f"{_ci(r['time_cost_pct'], 100 * (r['time_ratio_lo'] - 1), 100 * (r['time_ratio_hi'] - 1), '+.1f')}%"
                   f", peak memory {_change(-r['memory_saved_pct'])} ({base:.2f} -> {r['peak_gib']:.2f} GiB)")
    missing = sorted({(s, c) for s, c in zip(t["scenario"], t["config"])} - {(s, c) for s, c in zip(arms["scenario"], arms["config"])})
    if missing:
        out.append("- no arm run yet: " + ", ".join(f"{s} {c}" for s, c in missing))
    return out


def render(studies: list[tuple[str, dict, Path]], sources: list[str], extra: list[str] = ()) -> str:
    """The Findings section as Markdown (a level-2 heading and its body) from one or more
    studies' comparisons (name, comparison, study folder): the first one's recommendation,
    flips and failures (with a speed study's throughput and memory flips when the first timed
    nothing), every study's failures, and each hypothesis' decided verdict."""
    name, comparison, _ = studies[0]
    rec = comparison["recommendations"]
    out = ["## Findings", "",
           f"Generated by `dtype-bench findings {' '.join(sources)}` from the studies' comparisons (not "
           f"edited by hand). Records: " + "; ".join(f"`{n}`: {provenance(d)}" for n, _, d in studies) + ".", ""]
    speed = _speed_study(studies[1:]) if not _timed(rec) else None
    per_task = dict(rec.get("per_task", {}))
    if speed:
        s_name, _, s_dir = speed
        out += [f"**Recommended default** (quality: `{name}`, speed and memory: `{s_name}`)", ""]
        stats = pd.read_csv(s_dir / "comparison" / "config_stats.csv")
        saf = pd.DataFrame(comparison.get("recommendation_evidence", []))
        out += _bullets(default_across(saf, stats, f"`{s_name}`") or rec.get("universal", []), "none named")
        for s, line in fastest_safe_across(saf, stats, f"`{s_name}`").items():  # in place of "a safe config"
            per_task[s] = [line] + [x for x in per_task.get(s, []) if not x.startswith(f"{s}: a safe config")]
    else:
        out += [f"**Recommended default** (`{name}`)", ""]
        out += _bullets(rec.get("universal", []), "none named")
    task = rec.get("lm_specific", []) + rec.get("cls_specific", [])
    task += [x for lines in per_task.values() for x in lines]
    out += ["", "**Per task**", ""] + _bullets(task, "nothing task-specific")
    flips = [(name, f) for f in comparison.get("flips", [])]
    if speed:  # the quality study timed nothing: which config is faster or leaner flips in the speed study
        flips += [(speed[0], f) for f in speed[1].get("flips", []) if f.get("metric") in ("throughput", "memory")]
    several = len({n for n, _ in flips}) > 1
    out += ["", "**What flips between tasks** (beyond seed noise)", ""]
    out += _bullets([(f"`{n}`: " if several else "") + f.get("interpretation", str(f)) for n, f in flips],
                    "no flip beyond seed noise")
    out += ["", "**Where each configuration breaks**", ""]
    for n, comp, _ in studies:
        prefix = f"`{n}`: " if len(studies) > 1 else ""
        out += _bullets([prefix + x for x in _breaks(comp)], prefix + "no configuration failed a run")
    out += list(extra)
    hyps = merged_hypotheses([(n, c) for n, c, _ in studies])
    timing = next((st for st in studies[1:] if _speed_only(st[1])), None)
    if timing and "seed001.H4" in hyps and hyps["seed001.H4"][1]["verdict"] not in DECIDED:
        h4 = frontier_across(comparison, timing[2])
        if h4:
            hyps["seed001.H4"] = (f"{timing[0]} x {name}", h4)  # speed of one, quality of the other
    if hyps:
        safety = pd.DataFrame(comparison.get("recommendation_evidence", []))
        out += ["", "**Hypotheses**", "",
                "| id | claim | verdict | effect [CI] | evidence, or what would settle it | from |", "|---|---|---|---|---|---|"]
        for hid, (n, h) in hyps.items():
            e = h.get("effect") or {}
            ci = (f"{e['estimate']:.3g} [{e['ci_low']:.3g}, {e['ci_high']:.3g}] {e.get('unit', '')}".strip()
                  if e.get("estimate") is not None else "-")
            basis = _to_settle(h) or _evidence(h, safety, name if n != name else None)
            out.append(f"| {hid} | {h['claim']} | {h['verdict']} | {ci} | {basis} | `{n}` |")
    notes = [f"`{n}` {x}" if len(studies) > 1 else x for n, c, _ in studies for x in c.get("notes", [])]
    if notes:
        out += ["", "**What the evidence gates said**", ""] + _bullets(notes, "")
    return "\n".join(out) + "\n"


def _timed(rec: dict) -> bool:
    """Whether a study's recommendations name a default (its runs measured speed)."""
    return any(x.startswith("default: ") for x in rec.get("universal", []))


def _speed_only(comparison: dict) -> bool:
    """Whether a comparison is a speed study's (every scenario ``not judged``)."""
    learned = comparison.get("learned") or {}
    return bool(learned) and all(str(v.get("reason", "")).startswith(NOT_JUDGED[:11]) for v in learned.values())


def _speed_study(studies: list[tuple[str, dict, Path]]) -> tuple[str, dict, Path] | None:
    """The first of ``studies`` built for speed (every scenario ``not judged``: its runs set
    ``judge_quality: false``) whose folder holds its ``config_stats.csv``; None if there is none."""
    for study in studies:
        if _speed_only(study[1]) and (study[2] / "comparison" / "config_stats.csv").is_file():
            return study
    return None


def _to_settle(h: dict) -> str:
    """For an undecided verdict: the seeds per (scenario, config) that would settle it at the
    measured effect and noise, or why it has no estimate (untestable: why the test cannot
    discriminate); '' for a decided one."""
    if h["verdict"] in DECIDED:
        return ""
    need = (h.get("effect") or {}).get("seeds_to_settle")
    if need is not None:
        return f"~{need} seeds per (scenario, config) at this effect and noise"
    reason = str(h.get("reason") or "").split("; ")[0]
    return reason.replace("|", "/")[:120]


def _evidence(h: dict, safety: pd.DataFrame, quality_study: str | None) -> str:
    """For a decided verdict: its evidence's summary (H4: the frontiers that differ; else the
    verdict's reason, e.g. the CI inside the margin), and where
    the verdict comes from a speed study, the configs it rests on that ``quality_study`` found
    unsafe on a scenario (``safety``: its ``recommendation_evidence``)."""
    ev = h.get("evidence") or {}
    text = str(ev.get("summary") or h.get("reason") or "")  # the rule's own words where no summary
    used = sorted({c for f in (ev.get("frontiers") or {}).values() for cs in f.values() for c in cs})
    if quality_study and used and {"config", "safe", "scenario"} <= set(safety.columns):
        bad = safety[safety["config"].isin(used) & (safety["safe"] == False)]  # noqa: E712 - None is untested
        if len(bad):
            text += "; " + "; ".join(f"{c} unsafe on {', '.join(sorted(g['scenario']))} in `{quality_study}`"
                                     for c, g in bad.groupby("config"))
    return text.replace("|", "/")


def replace_block(text: str, body: str) -> str:
    """``text`` with the block between the markers replaced by ``body`` (appended when absent)."""
    block = f"{START}\n{body}{END}"
    if START in text and END in text and text.index(START) < text.index(END):
        return text[:text.index(START)] + block + text[text.index(END) + len(END):]
    return text.rstrip("\n") + "\n\n" + block + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dtype-bench findings",
                                description="The README's Findings section from a study's comparison.json")
    p.add_argument("comparison", nargs="+", help="<study>/comparison/comparison.json (written by dtype-bench "
                   "compare); several: the first one's recommendation, each hypothesis from the study that decides it")
    p.add_argument("--fp8-sizes", metavar="STUDY", help="also where FP8 pays, from this fp8_sizes study's records")
    p.add_argument("--arm-cost", metavar="STUDY", help="also what this study's arms cost against its plain arm "
                   "(e.g. executed/h100/checkpointing)")
    p.add_argument("--readme", help="rewrite this file's findings block instead of printing")
    return p


def generate(ns: argparse.Namespace) -> str:
    """The section for parsed arguments (``_parser``): the comparisons, then the extra studies."""
    extra, sources = [], list(ns.comparison)
    for flag, folder, section in (("--fp8-sizes", ns.fp8_sizes, fp8_section), ("--arm-cost", ns.arm_cost, arm_cost_section)):
        if folder:
            try:
                extra += section(Path(folder))
            except (FileNotFoundError, ValueError) as e:
                raise UserError(f"{flag} {folder}: {e}") from None
            sources += [flag, folder]
    studies = []
    for source in ns.comparison:
        path = Path(source)
        if not path.is_file():
            raise UserError(f"no comparison file {str(path)!r}: run `dtype-bench compare <study>` first")
        try:
            comparison = json.loads(path.read_text())
            comparison["recommendations"]["universal"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise UserError(f"{path}: not a comparison.json written by dtype-bench compare "
                            f"({type(e).__name__}: {e})") from None
        study_dir = path.parent.parent
        studies.append((study_dir.name, comparison, study_dir))
    return render(studies, sources, extra)


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    body = generate(ns)
    if ns.readme:
        readme = Path(ns.readme)
        old = readme.read_text() if readme.exists() else ""
        new = replace_block(old, body)
        if new != old:
            readme.write_text(new)
        print(f"{readme}: findings {'updated' if new != old else 'unchanged'}")
    else:
        print(body, end="")
    return 0
