"""The README's **Findings** section (``dtype-bench findings``), generated from studies'
``comparison.json``, short enough to read in a minute:

    dtype-bench findings executed/h100/reference/comparison/comparison.json \
        executed/h100/reference_speed/comparison/comparison.json --readme README.md

The first study is the answer (its quality verdicts); the first later one built for speed gives
throughput and memory; each hypothesis comes from the study that decides it; the others, and
``--fp8-sizes`` / ``--arm-cost`` (``arms.compare``), are supporting lines, as is ``--transfer``
(``transfer.findings_line``). ``--readme`` replaces the
block between the ``findings`` markers (appended when absent), so a rerun rewrites nothing.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from benchlib.analysis import answer, arms, transfer
from benchlib.analysis.overhead import efficiency_line
from benchlib.analysis.gates import by_reason
from benchlib.analysis.hypotheses import bf16_on_frontier
from benchlib.analysis.recommend import _numbers, _pivots, _ties, candidates, default_across, order_across
from benchlib.analysis.stats import Rules
from benchlib.analysis.tables import NOT_JUDGED, config_order, load_study
from benchlib.core.errors import UserError
from benchlib.core.records import load_records, short_commit
from benchlib.core.sizes import SHAPES
from benchlib.core.timing import STEPS_SHARE_TARGET

START, END = "<!-- findings:start -->", "<!-- findings:end -->"
FP8_BASELINE = "amp_bf16"


def provenance(study_dir: Path, commits: bool = True) -> str:
    """Device, software and (``commits``) commit(s) of the study's records, in one line."""
    envs = [r.get("env", {}) for r in load_records(study_dir)]
    if not envs:
        return f"no records under {study_dir}"

    def values(key: str, short=str) -> str:
        return ", ".join(sorted({short(str(e[key])) for e in envs if e.get(key)})) or "unknown"

    return (f"{len(envs)} runs on {values('device_name')}; torch {values('torch')}; "
            + (f"commit {values('git_commit', short_commit)}; " if commits else "") + f"{min(e.get('date', '') for e in envs)[:10]} to "
            f"{max(e.get('date', '') for e in envs)[:10]}")


def _bullets(lines: list[str], empty: str) -> list[str]:
    return [f"- {x}" for x in lines] or [f"- {empty}"]


DECIDED = ("supported", "rejected")


def merged_hypotheses(studies: list[tuple[str, dict]]) -> dict[str, tuple[str, dict]]:
    """hypothesis id -> (study, verdict): the first study that decides it, else the first that
    measured an effect for it, else the first that has it. A study that measured an effect and
    could not decide (a confound, seed noise) is not overruled by a later one that decided on its
    own arms (the first study's arms are the real ones; a later study's do not settle what they
    left open): that verdict is named in the reason instead.
    A study that tested the hypothesis's own config and found it untestable is not overruled by one
    that decided it on a stand-in config (e.g. fp16 with fp16 Adam moments for fp16_naive): that
    verdict is named in the reason instead.
    The exception: a study left undecided only because its architecture pairs differed in size
    (evidence ``size_confounded``) is settled by a later speed study (no quality judged, so whether
    its data are real does not enter) that decided on pairs of one size, the test it asked for."""
    out: dict[str, tuple[str, dict]] = {}
    for name, comp in studies:
        for hid, h in comp.get("hypotheses", {}).items():
            if hid in out and h["verdict"] in DECIDED and _confounded(out[hid][1]) and not _confounded(h) \
                    and _speed_only(comp):
                first, kept = out[hid]
                out[hid] = (name, {**h, "reason": f"architecture pairs of one size, where `{first}`'s differed "
                                   f"({', '.join(kept['evidence']['size_confounded'])}): {h['reason']}"})
                continue
            measured = bool(h.get("effect")) and not (out[hid][1].get("effect") if hid in out else False)
            if hid in out and out[hid][1]["verdict"] not in DECIDED and out[hid][1].get("effect") \
                    and h["verdict"] in DECIDED:
                first, kept = out[hid]
                out[hid] = (first, {**kept, "reason": f"{kept['reason']}; `{name}` {h['verdict']} it on its own arms, "
                                    f"which do not settle what `{first}` measured and left open"})
                continue
            if hid not in out or (out[hid][1]["verdict"] not in DECIDED and (h["verdict"] in DECIDED or measured)):
                if hid in out and _stand_in(h) and not _stand_in(out[hid][1]) and out[hid][1]["verdict"] == "untestable":
                    first, kept = out[hid]
                    own = (kept.get("evidence") or {}).get("config") or "its config"
                    out[hid] = (first, {**kept, "reason": f"{own} untestable here, `{name}` {h['verdict']} it only with "
                                        f"a stand-in ({(h.get('evidence') or {}).get('config')}); {kept['reason']}"})
                    continue
                out[hid] = (name, h)
    return out


def _confounded(h: dict) -> bool:
    return bool((h.get("evidence") or {}).get("size_confounded"))


def _stand_in(h: dict) -> bool:
    return bool((h.get("evidence") or {}).get("stand_in"))


def frontier_across(quality: dict, speed_dir: Path) -> dict:
    """Seed 001's H4 from a speed study's records over the candidates the quality study calls safe
    on each scenario; {} where either is missing."""
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


def fp8_section(study_dir: Path) -> list[str]:
    """One line: per float8 config, its break-even size over amp_bf16 (``arms.compare`` of step
    times); an arm not named after its size (``xl_16k``) is a series of its own."""
    df, _ = arms.rows(study_dir)
    df["arm"] = df["arm"].where(df["arm"] != df["size"], "default")
    summary = arms.compare(df, "config", "step_ms", FP8_BASELINE)
    bes = arms.break_evens(summary, "config", "size", list(SHAPES["gpt2"]))
    return [f"`{study_dir.name}` ({provenance(study_dir, commits=False)}): where FP8 pays over "
            f"{FP8_BASELINE}: " + "; ".join(f"{k}: {v}" for k, v in bes.items()) + "."]


def arm_cost_section(study_dir: Path) -> list[str]:
    """One line: each arm's range of step-time cost and peak memory saved against the plain arm."""
    df, _ = arms.rows(study_dir)
    base = arms.BASELINES["arm"]
    head = f"`{study_dir.name}` ({provenance(study_dir, commits=False)}): "
    time, memory = (arms.compare(df, "arm", m, base, by=[]).set_index("arm") for m in ("step_ms", "memory"))
    time = time[time["pairs"] > 0]
    if time.empty:
        return [head + f"no arm paired with its `{base}` arm yet."]
    parts = []
    for arm, t in time.iterrows():
        m = memory.loc[arm]
        parts.append(f"`{arm}` costs {_range(t['change_pct_min'], t['change_pct_max'], '+.0f')}% step time and saves "
                     f"{_range(-m['change_pct_max'], -m['change_pct_min'], '.0f')}% peak memory against `{base}` "
                     f"over {t['pairs']} (scenario, config, seed) pairs")
    return [head + "; ".join(parts) + "."]


def _range(lo: float, hi: float, fmt: str) -> str:
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}} to {hi:{fmt}}"


def render(studies: list[tuple[str, dict, Path]], sources: list[str], extra: list[str] = (),
           first: list[Path] | None = None) -> str:
    """The Findings section as Markdown: scope, default, answer table, absolute speed, where
    candidates break, hypotheses, flips, gates, supporting studies (and ``extra``), provenance."""
    name, comparison, folder = studies[0]
    folders = first or [folder]
    if first and len(first) > 1:  # a comparison of several studies is named by all of them
        name = " + ".join(f.name for f in folders)
    studies = [(name, comparison, folder), *studies[1:]]
    speed = _speed_study(studies[1:])
    stats = pd.read_csv(speed[2] / "comparison" / "config_stats.csv") if speed else None
    cells = answer.cells(comparison, stats)
    out = ["## Findings", ""]
    out += answer.scope_box((name, folders), (speed[0], speed[2]) if speed else None) + [""]
    out += [_default(comparison, cells, stats, speed[0] if speed else None), ""]
    out += answer.answer_table(cells)
    out += ["", f"Cell: the comparison's verdict for (scenario, config); throughput x fp32 / x TF32 and peak GiB "
            f"(`{speed[0] if speed else name}`); {answer.quality_legend(cells)} (`{name}`). "
            + (answer.model_mismatch(folders, speed[2], sorted(cells["scenario"].unique())) + " " if speed else "")
            + answer.controls_line(comparison)]
    if speed:
        shown = list(dict.fromkeys([answer.BASELINE, answer.TF32, *_default_configs(comparison, cells, stats)[0][:1]]))
        out += ["", f"Absolute speed (`{speed[0]}`, mean over seeds; MFU against the GPU's dense bf16 peak):", ""]
        out += answer.absolute_table(speed[2], shown)
    out += ["", f"**Where it breaks** (`{name}`, candidates; every run and reason in the report):"]
    out += _bullets(_breaks(cells), "no candidate failed or degraded on any scenario")
    out += ["", "**Hypotheses**", "", "| id | claim | verdict | why, or what would settle it | from |", "|---|---|---|---|---|"]
    for hid, (n, h) in _hypotheses(studies, comparison).items():
        why = _to_settle(h) or _evidence(h, pd.DataFrame(comparison.get("recommendation_evidence", [])),
                                         name if n != name else None)
        out.append(f"| {hid} | {h['claim']} | {h['verdict']} | {_short(why, 200)} | `{n}` |")
    out += ["", _flips(name, comparison, speed) + "  ", _gates(cells, comparison, folder) + "  ",
            _efficiency([(f.name, f) for f in folders] + [(n, d) for n, _, d in studies[1:]]), "", "**Supporting studies**"]
    out += [f"- {line}" for line in [_supporting(n, c, d) for n, c, d in studies[1:] if not speed or n != speed[0]]
            + list(extra)]
    out += ["", f"<sub>{_footnote([(f.name, None, f) for f in folders], speed, sources)}</sub>"]
    return "\n".join(out) + "\n"


def _short(text: str, n: int) -> str:
    text = str(text).replace("|", "/").replace("\n", " ")
    return text if len(text) <= n else text[:n - 3].rstrip() + "..."


def _hypotheses(studies, comparison: dict) -> dict:
    """Each hypothesis from the study that decides it; H4 across the quality and speed studies."""
    hyps = merged_hypotheses([(n, c) for n, c, _ in studies])
    timing = next((st for st in studies[1:] if _speed_only(st[1])), None)
    if timing and "seed001.H4" in hyps and hyps["seed001.H4"][1]["verdict"] not in DECIDED:
        h4 = frontier_across(comparison, timing[2])
        if h4:
            hyps["seed001.H4"] = (f"{timing[0]} x {studies[0][0]}", h4)  # speed of one, quality of the other
    return hyps


def _established(cells: pd.DataFrame) -> list[str]:
    """Scenarios where quality entered verdicts (a config compared with the reference there)."""
    return sorted(set(cells.loc[cells["verdict"].isin(["safe", "degraded", "inconclusive", "reference"]), "scenario"]))


def _default_configs(comparison: dict, cells: pd.DataFrame, stats: pd.DataFrame | None) -> tuple[list[str], dict]:
    """The candidates safe wherever quality was testable (and tested somewhere) that never failed
    or degraded, ``order_across`` the speed study's scenarios."""
    if stats is None:
        return [], {}
    est = _established(cells)
    ok = [c for c, g in cells.groupby("config") if set(g.loc[g["scenario"].isin(est), "verdict"]) <= {"safe", "reference"}
          and not g["verdict"].isin(["failed", "degraded"]).any() and g["scenario"].isin(est).any()]
    return order_across(stats, ok)


def _default(comparison: dict, cells: pd.DataFrame, stats: pd.DataFrame | None, speed: str | None) -> str:
    """The default in one sentence: the rules' where they name one (ordered by the speed study's
    throughput where one is given: the quality study's runs may have shared their GPUs), else a
    provisional one."""
    rec = comparison["recommendations"]
    named = None
    if stats is not None:
        named = next((x for x in default_across(pd.DataFrame(comparison["recommendation_evidence"]), stats,
                                                f"`{speed}`") if x.startswith("default: ")), None)
    if named is None:
        named = next((x for x in rec.get("universal", []) if x.startswith("default: ")), None)
    if named:
        return f"**Default: {named[len('default: '):]}.**"
    order, missing = _default_configs(comparison, cells, stats)
    est = _established(cells)
    if missing:
        return (f"**No default yet**: `{speed}` has no throughput for "
                + "; ".join(f"{c} on {', '.join(ss)}" for c, ss in sorted(missing.items()))
                + f", a candidate safe wherever quality was testable ({', '.join(est)}).")
    if not order:
        return "**No default**: " + _short(rec.get("universal", ["no candidate is safe wherever tested"])[0], 300)
    piv, on = _pivots(stats), sorted(stats["scenario"].unique())
    untested = sorted(set(cells["scenario"]) - set(est))
    return (f"**No default under the rules** (quality entered verdicts only on {', '.join(est)}); the fastest candidate "
            f"safe there, **{order[0]}** (`{speed}`: {_numbers(piv, order[0], on)}"
            f"{_ties(piv, order, on, Rules.min_size_pct, stats)}), is the provisional choice, untested on "
            f"{', '.join(untested) or 'no scenario'}.")


def _breaks(cells: pd.DataFrame) -> list[str]:
    """One line per candidate config that fails or degrades somewhere, listing the scenarios."""
    bad = cells[cells["verdict"].isin(["failed", "degraded"])]
    out = []
    for cfg in config_order(bad["config"].unique()):
        g = bad[bad["config"] == cfg]
        first = g["reason"].iloc[0].split(" (")[0]
        out.append(f"{cfg}: {answer.where_marks(g)} (e.g. {g['scenario'].iloc[0]}: {first})")
    return out


def _flips(name: str, comparison: dict, speed) -> str:
    """The flips the rules allow, in at most a few words each, or one line saying none passed."""
    flips = [(name, f) for f in comparison.get("flips", [])]
    if speed:
        flips += [(speed[0], f) for f in speed[1].get("flips", []) if f.get("metric") in ("throughput", "memory")]
    if not flips:
        return (f"**Flips between tasks**: none passed the rules (quality in `{name}`"
                + (f", speed and memory in `{speed[0]}`" if speed else "") + ").")
    shown = "; ".join(f"`{n}`: {_short(f.get('interpretation', f), 160)}" for n, f in flips[:3])
    return f"**Flips between tasks** ({len(flips)}): {shown}" + (f"; {len(flips) - 3} more in the report" if len(flips) > 3 else "")


def _gates(cells: pd.DataFrame, comparison: dict, folder: Path) -> str:
    """Which scenarios entered verdicts, why the others did not, and where the full account is."""
    est = _established(cells)
    rest = sorted(set(cells["scenario"]) - set(est))
    learned, rel = comparison.get("learned", {}), comparison.get("reliability") or {}
    why = {s: "did not learn" if (learned.get(s) or {}).get("learned") is False else
           "configs not told apart" if (rel.get(s) or {}).get("told_apart") is False else "not established" for s in rest}
    return (f"**Evidence gates**: quality entered verdicts on {', '.join(est) or 'no scenario'}"
            + (f"; {by_reason(why)}" if why else "")
            + f"; every gate and reason in [the report]({folder / 'html' / 'index.html'}).")


def _efficiency(parts: list[tuple[str, Path]]) -> str:
    """Each study's share of run time in training steps (``overhead.efficiency_line``)."""
    lines = [line for name, folder in parts if (line := efficiency_line(name, load_records(folder)))]
    return (f"**Efficiency** (share of each study's run time in training steps, per scenario in brackets; runs "
            f"that shared a GPU count each its own time; target >= {100 * STEPS_SHARE_TARGET:.0f}%): "
            + ("; ".join(lines) if lines else "no record carries the sweep's timing") + ".")


def _supporting(name: str, comparison: dict, folder: Path) -> str:
    """A supporting study in one line: its scope and where its candidates break."""
    try:
        d = answer.describe(load_records(folder))
    except FileNotFoundError:
        d = {"n": 0}
    scope = (f"{d['n']} runs on {d['device']}, `{d['size']}`, {d['steps']} steps, {d['seeds']} seed(s), "
             f"scenarios {d['scenarios']}" if d.get("n") else "no records here")
    try:
        c = answer.cells(comparison, None)
        broken = _breaks(c)
        fails = "; ".join(b.split(" (e.g.")[0] for b in broken) or "no candidate failed"
    except ValueError as e:
        fails = str(e)
    long = _long_stability(comparison)
    return f"`{name}` ({scope}): {fails}" + (f"; fp16 in runs of >= {H2_WINDOW:,} steps: {long}" if long else "") + "."


H2_WINDOW = 5000
"""Seed 001's H2 puts fp16's divergence in LM "around 5-10k steps": runs this long speak to it."""


def _long_stability(comparison: dict) -> str:
    """Where the study's fp16 runs trained ``H2_WINDOW`` steps or more: per config and scenario,
    whether and where they diverged (seed 001 H2's evidence, ``verdicts.divergence_table``)."""
    h = (comparison.get("hypotheses") or {}).get("seed001.H2") or {}
    rows = (h.get("evidence") or {}).get("divergence") or []
    return "; ".join(f"{r['config']} on {r['scenario']} {r['summary']}" for r in rows
                     if (r.get("train_steps") or 0) >= H2_WINDOW)


def _footnote(quality, speed, sources: list[str]) -> str:
    """Provenance of the quality study's folders and the speed study's, and the command."""
    used = list(quality) + ([speed] if speed else [])
    return ("Records: " + "; ".join(f"`{n}` {provenance(d, commits=False)}" for n, _, d in used)
            + ". Commits and every run: [executed/README.md](executed/README.md). "
            + f"Generated by `dtype-bench findings {' '.join(sources)}` (not edited by hand).")


def _speed_only(comparison: dict) -> bool:
    """Whether a comparison is a speed study's (every scenario ``not judged``)."""
    learned = comparison.get("learned") or {}
    return bool(learned) and all(str(v.get("reason", "")).startswith(NOT_JUDGED[:11]) for v in learned.values())


def _speed_study(studies: list[tuple[str, dict, Path]]) -> tuple[str, dict, Path] | None:
    """The first of ``studies`` built for speed whose folder holds its ``config_stats.csv``, or None."""
    for study in studies:
        if _speed_only(study[1]) and (study[2] / "comparison" / "config_stats.csv").is_file():
            return study
    return None


def _to_settle(h: dict) -> str:
    """For an undecided verdict: the seeds that would settle it, or why there is no estimate."""
    if h["verdict"] in DECIDED:
        return ""
    need = (h.get("effect") or {}).get("seeds_to_settle")
    if need is not None:
        return f"~{need} seeds per (scenario, config) at this effect and noise"
    reason = str(h.get("reason") or "").split("; ")[0]
    return reason.replace("|", "/")[:120]


def _evidence(h: dict, safety: pd.DataFrame, quality_study: str | None) -> str:
    """For a decided verdict: its evidence's summary (else its reason) and, for a speed study's,
    the configs it rests on that ``quality_study`` found unsafe (``safety``)."""
    ev = h.get("evidence") or {}
    text = str(ev.get("summary") or h.get("reason") or "")  # the rule's own words where no summary
    used = sorted({c for f in (ev.get("frontiers") or {}).values() for cs in f.values() for c in cs})
    if quality_study and used and {"config", "safe", "scenario"} <= set(safety.columns):
        bad = safety[safety["config"].isin(used) & (safety["safe"] == False)]  # noqa: E712 - None is untested
        if len(bad):
            text += "; " + "; ".join(f"{c} unsafe on {', '.join(sorted(g['scenario']))} in `{quality_study}`"
                                     for c, g in bad.groupby("config"))
    return text.replace("|", "/")


def replace_block(text: str, body: str, start: str = START, end: str = END) -> str:
    """``text`` with the block between the markers replaced by ``body`` (appended when absent)."""
    block = f"{start}\n{body}{end}"
    if start in text and end in text and text.index(start) < text.index(end):
        return text[:text.index(start)] + block + text[text.index(end) + len(end):]
    return text.rstrip("\n") + "\n\n" + block + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dtype-bench findings",
                                description="The README's Findings section from a study's comparison.json")
    p.add_argument("comparison", nargs="+", help="<study>/comparison/comparison.json (written by dtype-bench "
                   "compare); several: the first one's recommendation, each hypothesis from the study that decides it")
    p.add_argument("--fp8-sizes", metavar="STUDY", help="also where FP8 pays, from this fp8_sizes study's records")
    p.add_argument("--arm-cost", metavar="STUDY", help="also what this study's arms cost against its plain arm "
                   "(e.g. executed/h100/checkpointing)")
    p.add_argument("--transfer", metavar="DIR", help="also where verdicts come from: DIR/transfer.csv (dtype-bench transfer)")
    p.add_argument("--readme", help="rewrite this file's findings block instead of printing")
    return p


def generate(ns: argparse.Namespace) -> str:
    """The section for parsed arguments (``_parser``): the comparisons, then the extra studies."""
    extra, sources = [], list(ns.comparison)
    for flag, folder, section in (("--fp8-sizes", ns.fp8_sizes, fp8_section), ("--arm-cost", ns.arm_cost, arm_cost_section),
                                  ("--transfer", ns.transfer, transfer.findings_line)):
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
    first = _sources(studies[0][1], studies[0][2])
    return render(studies, sources, extra, first)


def _sources(comparison: dict, study_dir: Path) -> list[Path]:
    """The study folders a comparison was computed from (its ``sources``, which name them as the
    machine that ran it did), here; the comparison's own study where they are not found."""
    found = [Path(s[s.rindex("executed/"):]) for s in comparison.get("sources", []) if "executed/" in s]
    found = [p for p in found if p.is_dir()]
    return found if study_dir.resolve() in {p.resolve() for p in found} else [study_dir]


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
