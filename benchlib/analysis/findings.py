"""The README's **Findings** section, composed from studies' ``comparison.json`` (``render``), short
enough to read in a minute: scope, the default by the rule, the answer table, where candidates
break, hypotheses, flips, gates, supporting studies, provenance. The ``dtype-bench findings``
command (``dtype_bench.findings_cmd``) reads its inputs and writes the README block,
``executed/ANSWER.md`` and the chart; ``answer_for`` gives a study's report the committed answer.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from benchlib.analysis import answer, arms, horizon
from benchlib.analysis.overhead import efficiency_line
from benchlib.analysis.gates import by_reason, speed_runs
from benchlib.analysis.hypotheses import UNTESTABLE_HERE, bf16_on_frontier
from benchlib.analysis.hypothesis_scope import (DECIDED, at_premise, decided_by, drew_on, measured_on, merged_hypotheses,
                                                premise, premise_elsewhere, records_or_empty, unmet_premise)
from benchlib.analysis.seed_plans import closest, past_min_effect, seeds_line
from benchlib.analysis.verdicts import SETTLE_MAX
from benchlib.analysis.recommend import Arm, candidates, pick as pick_default
from benchlib.analysis.stats import Rules, adjust, label
from benchlib.analysis.tables import (DEFAULT_BETA2, cell_text, config_order, lm_and_cls, load_study, speed_only,
                                      study_path)
from benchlib.core.errors import UserError
from benchlib.core.records import STAGE_SUFFIX, load_records, pretrain_folder, records_frame, short_commit
from benchlib.core.sizes import SHAPES
from benchlib.core.timing import STEPS_SHARE_TARGET

START, END = "<!-- findings:start -->", "<!-- findings:end -->"
STUDIES_MARK = "<!-- answer studies:"
"""The line of the Findings that names the study folders the answer is made of (``answer_studies``)."""
ANSWER_FILE = Path("executed") / "ANSWER.md"
CHART = Path("executed") / "answer_gaps.svg"
"""The answer table as a chart (``overview.answer_gaps``), written with ``--answer``."""
"""Where ``--answer`` writes the answer alone, which executed/README.md, the HTML reports and the
analysis notebooks of the studies it names show as it is (``answer_for``)."""
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


def horizon_section(study_dirs: list[Path]) -> list[str]:
    """One supporting line: each horizon study's (``horizon.findings_line``) with its records'
    provenance, then the comparison across beta2 where two of them differ only there
    (``horizon.beta2_line``)."""
    lines = []
    for study_dir in study_dirs:
        if not study_dir.is_dir():
            raise FileNotFoundError(f"no study folder {study_dir}")
        lines += horizon.findings_line(study_dir, provenance(study_dir, commits=False))
    return [" ".join(lines + (horizon.beta2_line(study_dirs) if len(study_dirs) > 1 else []))]


def _range(lo: float, hi: float, fmt: str) -> str:
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}} to {hi:{fmt}}"


def render(studies: list[tuple[str, dict, Path]], sources: list[str], extra: list[str] = (),
           first: list[Path] | None = None, horizons: list[Path] = ()) -> str:
    """The Findings section as Markdown: scope (each arm's recipe), the default by ``pick``'s rule,
    the answer table (a column per scenario and beta2 arm), the rule, absolute speed, where
    candidates break (whether their gaps move within the answer's steps, and past them from
    ``horizons``), hypotheses, flips, gates,
    supporting studies (and ``extra``), provenance."""
    name, comparison, folder = studies[0]
    folders = first or [folder]
    if first and len(first) > 1:  # a comparison of several studies is named by all of them
        name = " + ".join(f.name for f in folders)
    studies = [(name, comparison, folder), *_named(studies[1:])]
    speeds = _speed_sources(studies[1:], folders)
    stats = _speed_stats(speeds) if speeds else _own_speed(folder)
    sources_ = [(n, d, scns) for n, _, d, scns in speeds]
    speed_names = ", ".join(f"`{n}` ({', '.join(scns)})" for n, _, _, scns in speeds)
    arms = answer_arms(studies, folders)
    cells = answer.cells(comparison, stats)
    picked = pick_default([Arm(a["label"], a["beta2"], a["cells"] if i else cells, a["recipe"])
                           for i, a in enumerate(arms)], stats, beyond=past_min_effect(arms), per_seed=_per_seed(speeds))
    used = [f for a in arms for f in a["folders"]] + [d for _, _, d, _ in speeds]
    out = ["## Findings", "", f"{STUDIES_MARK} {' '.join(study_path(f) for f in used)} -->", ""]
    out += answer.scope_box((name, folders), sources_, arms) + [""]
    out += [picked["sentence"], ""]
    marks, notes = _marks(arms)
    out += answer.answer_table(cells, [(a["label"], a["cells"]) for a in arms[1:]], marks)
    level = 1 - 2 * Rules.alpha
    out += ["", f"Cell: the verdict for (scenario, config); throughput x fp32 (TF32 off) / x TF32 / x amp_bf16 and "
            f"peak GiB ({speed_names or f'`{name}`'}: {answer.hosts_line(sources_ or folder)}, each config's runs "
            f"alone on a GPU; speed does not depend on beta2, so the beta2 columns show quality only); "
            + answer.metric_legend({s: r for a in arms for s, r in a["recipe"].items()}, level)
            + f". Columns without a beta2 are `{name}`'s (beta2 {arms[0]['beta2']:g})"
            + "".join(f"; `{a['label']}` columns are `{a['name']}`'s" for a in arms[1:]) + ". "
            + _references(arms) + " ".join(notes) + " "
            + (answer.model_mismatch(folders, sources_, sorted(cells["scenario"].unique())) + " " if speeds else "")
            + answer.controls_line(comparison)]
    out += ["", picked["rule"] + "  ", f"![The answer as a chart: each cell's quality change and interval]({CHART.as_posix()})"]
    if speeds:
        shown = list(dict.fromkeys([answer.BASELINE, answer.TF32, answer.AMP, *picked["configs"]]))
        note = answer.energy_note(sources_)
        out += ["", f"Absolute speed ({speed_names}, mean over seeds; MFU against the GPU's dense bf16 peak"
                    + (f"; {note}" if note else "") + "):", ""]
        out += answer.absolute_table(sources_, shown)
    out += ["", "**Where it breaks** (candidates; every run and reason in the reports):"]
    out += _bullets([line for a in arms for line in _breaks(a["cells"] if a is not arms[0] else cells, a["label"])],
                    "no candidate failed, degraded or came out worse on any scenario")
    reported = "; ".join(line for a in arms for line in _reported_worse(a["cells"] if a is not arms[0] else cells,
                                                                           a["label"]))
    reported = reported and ("**Worse on a reported metric** (not judged, so the verdict stands; its interval lies "
                             f"below 0): {reported}.")
    seeds = " ".join(part for part in (_checkpoint_line(arms), seeds_line(arms), closest(arms, cells)) if part)
    within = horizon.within_line([(a["label"], a["folders"], a["comparison"]) for a in arms])
    beyond = horizon.answer_line(horizons) if horizons else ""
    why = " ".join(part for part in (_stuck_line(arms), within, beyond) if part)  # a mechanism, then how far it goes
    forensics = "  \n".join(part for part in (reported, why, seeds) if part)
    out += ["", forensics] if forensics else []
    out += ["", "**Hypotheses**", "", "| id | claim | verdict | why, or what would settle it | scope, against the seed's premise | from |",
            "|---|---|---|---|---|---|"]
    by_study = {name: [r for f in folders for r in load_records(f)]}
    by_study.update({n_: _records_of(c, d) for n_, c, d in studies[1:]})
    real = _same_data(by_study[name], [r for rs in by_study.values() for r in rs])
    linked_rows = set()  # studies that decide a row, linked there: at the seed's premise, or several compared
    known = {c for a in arms for c in _broken(a["cells"] if a is not arms[0] else cells)}  # "Where it breaks"
    for hid, (n, h) in _hypotheses(studies, comparison).items():
        n, h, below = at_premise(hid, n, h, studies, by_study)
        link = bool(below) or " + " in n and n != name  # a later comparison of several studies: its report
        linked_rows |= {n} if link else set()
        why = _to_settle(h) or _evidence(h, pd.DataFrame(comparison.get("recommendation_evidence", [])),
                                         name if n != name else None)
        decided = [r for part in n.split(" x ") for r in by_study.get(part, [])]  # "speed x quality": both
        verdict = h["verdict"]  # a comparison already says "untestable here" away from the premise (at_premise)
        if verdict != UNTESTABLE_HERE and (missing := unmet_premise(hid, decided)):  # one decided across studies
            verdict, why = UNTESTABLE_HERE, f"{missing}; measured below it: {h['verdict']} ({why})"
        out.append(f"| {hid} | {h['claim']} | {verdict} | {cell_text(why, 200)} | "
                   f"{premise(hid, drew_on(h, decided), real)}{measured_on(h, studies, n, comparison)}"
                   f"{below or premise_elsewhere(hid, n, studies, by_study)} | "
                   f"{decided_by(n, studies, linked=link)} |")
    arm_names = {a["study"] for a in arms[1:]}
    out += ["", _flips(name, comparison, [sp[:3] for sp in speeds]) + "  ", _gates(cells, comparison, folders) + "  ",
            _efficiency([(f.name, f) for f in folders] + [(f.name, f) for a in arms[1:] for f in a["folders"]]
                        + [(f.name, f) for n, c, d in studies[1:] if n not in arm_names for f in _folders_of(c, d)]
                        + [(h.name, h) for h in horizons]),
            "", "**Supporting studies**"]
    timed_by = {s: sp[0] for sp in speeds for s in sp[3]}  # scenario -> the study the answer's speed is from
    out += [f"- {line}" for line in [_supporting(n, c, d, timed_by) for n, c, d in studies[1:]
                                      if n not in {sp[0] for sp in speeds} and n not in arm_names
                                      and not _gated_out(c) and not _said_in_rows(n, c, d, linked_rows, known)]
            + list(extra)]
    out += ["", f"<sub>{_footnote([(f.name, None, f) for a in arms for f in a['folders']], [sp[:3] for sp in speeds], sources)}</sub>"]
    return "\n".join(out) + "\n"


STUCK = "forensics/exp_avg_sq_stuck_frac_mean"


def _stuck_line(arms: list[dict]) -> str:
    """Where the runs measured it: the share of second-moment entries a step should shrink that stayed
    bit-identical, per arm and candidate (mean over seeds), in one line; '' where none did."""
    parts = []
    for a in arms:
        vals: dict[str, list] = {}
        for r in (r for f in a["folders"] for r in load_records(f)):
            v = (r.get("metrics") or {}).get(STUCK)
            if isinstance(v, (int, float)) and (r.get("dtype") or {}).get("role", "candidate") == "candidate":
                vals.setdefault(r["config"], []).append(float(v))
        if vals:
            parts.append(f"at {a['label']}: " + ", ".join(f"{c} {sum(v) / len(v):.2f}" for c, v in
                                                           sorted(vals.items(), key=lambda kv: config_order(vals).index(kv[0]))))
    if not parts:
        return ""
    return ("**Second moment that cannot decay** (`exp_avg_sq_stuck_frac`: of the Adam second-moment entries a step "
            "should shrink, the share left bit-identical; mean over logged steps and seeds; near 1 means v only rises; "
            "stochastic rounding moves a few entries a step, unbiased, so its share is high but its v decays): "
            + "; ".join(parts) + ".")


def _checkpoint_line(arms: list[dict], rules: Rules = Rules()) -> str:
    """The fine-tuning cells whose per-seed gap differs between the pretrain checkpoints their pairs
    loaded (``contrasts.checkpoint_blocks``; Holm over each arm's tested (cell, metric)s), with the
    count tested; '' where no cell's seeds span two checkpoints with two seeds each."""
    parts, tested = [], 0
    for a in arms:
        comp = a["comparison"]
        metric = {s: (q or {}).get("name") for s, q in (comp.get("quality_metric") or {}).items()}
        keys = {}
        for e in comp.get("recommendation_evidence", []):
            for col, gaps, name in (("p_checkpoint", "checkpoint_gaps", metric.get(e["scenario"])),
                                    ("p2_checkpoint", "checkpoint2_gaps", e.get("metric2"))):
                p = e.get(col)
                if isinstance(p, (int, float)) and math.isfinite(p) and e.get("role", "candidate") != "reference":
                    keys[(e["scenario"], e["config"], name)] = (p, e.get(gaps) or "")
        tested += len(keys)
        adj = adjust({k: p for k, (p, _) in keys.items()}, rules)
        hits = [f"{s} {c} {label(m)} {keys[(s, c, m)][1]} (p {adj[(s, c, m)]:.2g})" for s, c, m in sorted(keys)
                if adj[(s, c, m)] < rules.alpha]
        if hits:
            parts.append(f"at {a['label']}: " + ", ".join(hits))
    if not tested:
        return ""
    return ("**Gap that depends on the checkpoint** (fine-tuning cells whose paired seeds loaded several of the "
            "study's pretrain checkpoints; one-way ANOVA of the per-seed gaps across checkpoints, Holm over the "
            f"{tested} (cell, metric)s tested; where one differs, the intervals above, which treat seeds as "
            "exchangeable, hold for these checkpoints, not for the pretraining recipe): "
            + ("; ".join(parts) + " (each checkpoint's mean quality change in %, seeds)" if parts
               else "none shown to differ beyond seed noise (with a few seeds a checkpoint the test finds only shifts "
                 "of several per-seed spreads)") + ".")


def _own_speed(folder: Path) -> pd.DataFrame | None:
    """A study's own config_stats where no speed study is given and its runs timed throughput (the
    analysis blanks the speed of runs that shared a GPU), else None."""
    path = folder / "comparison" / "config_stats.csv"
    if not path.is_file():
        return None
    st = pd.read_csv(path)
    return st if st.loc[st["metric"] == "throughput", "rel"].notna().any() else None


def beta2_of(comparison: dict, folder: Path) -> float:
    """The beta2 a comparison's runs trained with: its recipe's, else its records' (one value: a study
    frame refuses two), else the run default of the time."""
    for rc in (comparison.get("recipe") or {}).values():
        return float(rc["beta2"])
    for r in load_records(folder):
        return float((r.get("run") or {}).get("beta2", DEFAULT_BETA2))
    return DEFAULT_BETA2


def answer_arms(studies, folders: list[Path]) -> list[dict]:
    """The answer's arms: the first study, then each later quality study (not a speed study) whose
    runs trained at another beta2. Each: name, label, beta2, cells, recipe, folder."""
    name, comparison, folder = studies[0]
    b0 = beta2_of(comparison, folders[0])
    arms = [{"name": name, "label": f"beta2 {b0:g}", "beta2": b0, "cells": None, "folder": folder, "folders": folders,
             "recipe": comparison.get("recipe") or {}, "comparison": comparison}]
    for n, comp, d in studies[1:]:
        if speed_only(comp) or "recipe" not in comp:
            continue
        b = beta2_of(comp, d)
        if b != b0 and b not in {a["beta2"] for a in arms}:
            srcs = study_sources(comp, d)
            arms.append({"name": " + ".join(f.name for f in srcs) if len(srcs) > 1 else n, "label": f"beta2 {b:g}",
                         "beta2": b, "cells": answer.cells(comp, None), "folder": d, "folders": srcs, "study": n,
                         "recipe": comp["recipe"], "comparison": comp})
    return arms


def _marks(arms: list[dict]) -> tuple[dict, list[str]]:
    """Column -> footnote mark for a scenario whose viable candidates are not told apart (it detects
    broken configs only), and the footnotes."""
    marks, notes = {}, []
    for i, a in enumerate(arms):
        for s, r in (a["comparison"].get("reliability") or {}).items():
            if r.get("told_apart") is False and r.get("detects"):
                col = s if i == 0 else f"{s} {a['label']}"
                marks[col] = " (1)"
    if marks:
        notes.append("(1) Detects broken configs only: its viable candidates are not told apart (rank reliability "
                     f"under {Rules.min_rank_reliability:g}), so a safe cell there says no loss of the minimum effect, "
                     "not which viable config is better.")
    return marks, notes


def _references(arms: list[dict]) -> str:
    """Where a column's reference is not fp32_baseline, which config it is."""
    other = []
    for i, a in enumerate(arms):
        c = a["comparison"]
        for r in c.get("recommendation_evidence", []):
            if r.get("verdict") == "reference" and r.get("config") != answer.BASELINE:
                other.append(f"{r['scenario']}{'' if i == 0 else ' ' + a['label']}: `{r['config']}`")
    return (f"The reference is `{answer.BASELINE}` (fp32, TF32 off) except: {', '.join(other)}. " if other else
            f"The reference is `{answer.BASELINE}` (fp32, TF32 off). ")


def _hypotheses(studies, comparison: dict) -> dict:
    """Each hypothesis from the study that decides it; H4 across the quality and speed studies."""
    hyps = merged_hypotheses([(n, c) for n, c, _ in studies])
    timing = next((st for st in studies[1:] if speed_only(st[1]) and lm_and_cls(st[1])), None)
    if timing and "seed001.H4" in hyps and hyps["seed001.H4"][1]["verdict"] not in DECIDED:
        h4 = frontier_across(comparison, timing[2])
        if h4:
            hyps["seed001.H4"] = (f"{timing[0]} x {studies[0][0]}", h4)  # speed of one, quality of the other
    return hyps


def _same_data(quality: list[dict], every: list[dict]) -> list[dict]:
    """Of ``every`` record, those of a scenario the quality records have, trained on the same data."""
    want = _size_and_data(quality)
    return [r for r in every if (str(r.get("scenario")), Path(str((r.get("run") or {}).get("data"))).name)
            in {(s, d) for s, v in want.items() for _, d in v}]


def _folders_of(comparison: dict, folder: Path) -> list[Path]:
    """The study folders a later comparison of several studies was computed from, here (``_sources``);
    its own folder for a comparison of one study, or one that took some scenarios from another
    study (``tasks``: ``compare --lm_results``; the other study's other scenarios are not in it)."""
    if comparison.get("tasks"):
        return [folder]
    try:
        found = study_sources(comparison, folder)
    except UserError:
        return [folder]
    return found if len(found) > 1 else [folder]


def _named(studies: list[tuple[str, dict, Path]]) -> list[tuple[str, dict, Path]]:
    """Later studies, each named by every study folder its comparison was computed from ("a + b"),
    as the first is: a comparison of reference_real's GPT-2 and reference_real_roberta's
    RoBERTa-base decides seed 002 H3 on both, and its row names both and reads both's records."""
    out = []
    for n, c, d in studies:
        folders = _folders_of(c, d)
        out.append((" + ".join(f.name for f in folders) if len(folders) > 1 else n, c, d))
    return out


def _records_of(comparison: dict, folder: Path) -> list[dict]:
    """Every record of the studies a later comparison was computed from (``_folders_of``)."""
    return [r for f in _folders_of(comparison, folder) for r in records_or_empty(f)]


def _established(cells: pd.DataFrame) -> list[str]:
    """Scenarios where quality entered verdicts (a config compared with the reference there)."""
    return sorted(set(cells.loc[cells["verdict"].isin(["safe", "degraded", "worse", "inconclusive", "reference"]), "scenario"]))


BROKE = ("failed", "degraded", "worse")
"""The verdicts "Where it breaks" lists."""


def _broken(cells: pd.DataFrame) -> set[str]:
    """The configs that fail, degrade or come out worse somewhere in ``cells``."""
    return set(cells.loc[cells["verdict"].isin(BROKE), "config"])


def _breaks(cells: pd.DataFrame, arm: str = "") -> list[str]:
    """One line per candidate config that fails, degrades or comes out worse somewhere (worse: beyond
    seed noise, by less than shown to matter), listing the scenarios, with ``arm`` (e.g. beta2 0.999)."""
    bad = cells[cells["verdict"].isin(BROKE)]
    out = []
    for cfg in config_order(bad["config"].unique()):
        g = bad[bad["config"] == cfg]
        first = g["reason"].iloc[0].split(" (")[0]
        out.append(f"{cfg}{f' at {arm}' if arm else ''}: {answer.where_marks(g)} (e.g. {g['scenario'].iloc[0]}: "
                   f"{first})")
    return out


def _reported_worse(cells: pd.DataFrame, arm: str = "") -> list[str]:
    """One line per candidate config whose reported, not judged, second metric (single-label
    macro-F1) is worse beyond seed noise where its verdict is not already a failure: its interval lies
    wholly below 0."""
    if "judged2" not in cells:
        return []
    bad = cells[~cells["judged2"].astype(bool) & cells["metric2"].notna() & (cells["delta2_hi"] < 0)
                & ~cells["verdict"].isin(BROKE)]  # those already say where it breaks
    out = []
    for cfg in config_order(bad["config"].unique()):
        g = bad[bad["config"] == cfg]
        out.append(f"{cfg}{f' at {arm}' if arm else ''}: " + ", ".join(
            f"{r.scenario} ({r.verdict}) {label(r.metric2)} {r.delta2_pct:+.2f}% [{r.delta2_lo:+.2f}, {r.delta2_hi:+.2f}]"
            for r in g.itertuples()))
    return out


def _flips(name: str, comparison: dict, speeds: list) -> str:
    """The flips the rules allow, in at most a few words each, or one line saying none passed
    (``speeds``: the speed studies' (name, comparison, folder)), then the reversals the rules could
    not test: no flip there is not shown absent."""
    flips = [(name, f) for f in comparison.get("flips", [])]
    flips += [(n, f) for n, c, _ in speeds for f in c.get("flips", []) if f.get("metric") in ("throughput", "memory")]
    by_quality = _untested(name, comparison, ("quality",))
    by_speed = [u for n, c, _ in speeds for u in _untested(n, c, ("throughput", "memory"))]
    rules = comparison.get("method", {}).get("rules", {})
    where = {"throughput": "a speed flip is tested between two scenarios timed on one host",
             "memory": "a memory flip between two scenarios measured on one GPU model and software stack"}
    left = [w for m, w in where.items() if any(_untested(n, c, (m,)) for n, c, _ in speeds)]
    why = ([f"{', '.join(left)}, >= {rules.get('min_flip_seeds_speed', '?')} seeds a cell"] if left else []) + (
           [f"a quality flip needs >= {rules.get('min_seeds', '?')} counted seeds a cell"] if by_quality else [])
    tail = f"not tested: {', '.join(by_quality + by_speed)} between scenarios ({'; '.join(why)})" if why else ""
    if not flips:
        return (f"**Flips between tasks**: none passed the rules (quality in `{name}`"
                + (f", speed and memory in {', '.join(f'`{n}`' for n, _, _ in speeds)}" if speeds else "") + ")."
                + (f" {tail[0].upper()}{tail[1:]}." if tail else ""))
    shown = "; ".join(f"`{n}`: {cell_text(f.get('interpretation', f), 480).rstrip('.')}" for n, f in flips[:3])
    more = f"; {len(flips) - 3} more in the report" if len(flips) > 3 else ""
    return f"**Flips between tasks** ({len(flips)}): {shown}{more}" + (f"; {tail}" if tail else "")


def _untested(name: str, comparison: dict, metrics: tuple) -> list[str]:
    """``name``'s reversed config pairs the noise test could not take, per metric (``method.reversals``)."""
    rev = comparison.get("method", {}).get("reversals", {})
    parts = [f"{n} {m}" for m in metrics
             if (n := rev.get(m, {}).get("reversed_pairs", 0) - rev.get(m, {}).get("testable", 0)) > 0]
    return [f"`{name}`: {' and '.join(parts)} reversal(s)"] if parts else []


def _gates(cells: pd.DataFrame, comparison: dict, folders: list[Path]) -> str:
    """Which scenarios entered verdicts, why the others did not, and where the full account is: the
    report of each study the answer's comparison joins, with the scenarios whose gates it shows."""
    est = _established(cells)
    rest = sorted(set(cells["scenario"]) - set(est))
    learned, rel = comparison.get("learned", {}), comparison.get("reliability") or {}
    untested = {s for s, g in cells.groupby("scenario") if (g["verdict"] == "not tested").all()}
    why = {s: "did not learn" if (learned.get(s) or {}).get("learned") is False else
           "configs not told apart" if (rel.get(s) or {}).get("told_apart") is False else
           "too few seeds (every cell not tested)" if s in untested else "not established" for s in rest}
    if len(folders) == 1:
        where = f"[the report]({folders[0] / 'html' / 'index.html'})"
    else:
        shown = {f: sorted({str(r.get("scenario")) for r in load_records(f)}) for f in folders}
        where = "the reports: " + ", ".join(f"[`{f.name}`]({f / 'html' / 'index.html'})"
                                            + (f" ({', '.join(ss)})" if ss else "") for f, ss in shown.items())
    return (f"**Evidence gates**: quality entered verdicts on {', '.join(est) or 'no scenario'}"
            + (f"; {by_reason(why)}" if why else "") + f"; every gate and reason in {where}.")


def _efficiency(parts: list[tuple[str, Path]]) -> str:
    """Each study's share of run time in training steps (``overhead.efficiency_line``), once a study,
    its pretrain stage's after it where it has one (``<study>.pretrain``: GPU time the study spent too)."""
    once = {Path(p[1]).resolve(): p for p in reversed(parts)}
    parts = [p for p in parts if once[Path(p[1]).resolve()] is p]
    staged = [(name + STAGE_SUFFIX, pretrain_folder(folder)) for name, folder in parts]
    parts = [q for p, stage in zip(parts, staged) for q in (p, stage) if q is p or stage[1].is_dir()]
    lines = [line for name, folder in parts if (line := efficiency_line(name, load_records(folder)))]
    return (f"**Efficiency** (share of each study's run time in training steps, and of its pretrain stage's "
            f"(`<study>{STAGE_SUFFIX}`) where it has one, per scenario in brackets; runs "
            f"that shared a GPU count each its own time; target >= {100 * STEPS_SHARE_TARGET:.0f}%): "
            + ("; ".join(lines) if lines else "no record carries the sweep's timing") + ".")


def _supporting(name: str, comparison: dict, folder: Path, timed_by: dict[str, str] | None = None) -> str:
    """A supporting study in one line: its scope and where its candidates break; a speed study
    whose scenarios the answer times from other studies (``timed_by``: scenario -> study) says so,
    so that its multipliers are not read as the answer's."""
    recs = records_or_empty(folder)  # a comparison of several studies: this study's own part of it
    d = answer.describe(recs) if recs else {"n": 0}
    if len(_folders_of(comparison, folder)) > 1:
        name = folder.name
    scope = (f"{d['n']} runs on {d['device']}, `{d['size']}`, {d['steps']} steps, {d['seeds']} seed(s), "
             f"scenarios {d['scenarios']}" if d.get("n") else "no records here")
    try:
        fails = "; ".join(b.split(" (e.g.")[0] for b in _own_breaks(comparison, d)) or "no candidate failed"
    except ValueError as e:
        fails = str(e)
    long = _long_stability(comparison)
    timed = _speed_line(folder) if speed_only(comparison) else ""
    by: dict[str, list[str]] = {}  # the answer's speed study -> which of this study's scenarios it times
    for s in str(d.get("scenarios", "")) if timed else "":
        if s in (timed_by or {}):
            by.setdefault(timed_by[s], []).append(s)
    instead = (" (the answer's speed: " + "; ".join(f"{', '.join(v)} from `{k}`" for k, v in by.items()) + ")"
               if by else "")
    return (f"`{name}` ({scope}){instead}: {fails}" + (f"; fp16 in runs of >= {H2_WINDOW:,} steps: {long}" if long else "")
            + (f"; {timed}" if timed else "") + ".")


def _own_cells(comparison: dict, described: dict) -> pd.DataFrame:
    """A study's answer cells, on its own scenarios only where it was compared beside another study's
    (``tasks``, or several studies compared together; ``described``: ``answer.describe`` of its own
    records)."""
    c = answer.cells(comparison, None)
    if (comparison.get("tasks") or len(comparison.get("sources") or []) > 1) and described.get("n"):
        c = c[c["scenario"].astype(str).isin(set(str(described["scenarios"])))]
    return c


def _own_breaks(comparison: dict, described: dict) -> list[str]:
    """Where a study's candidates break (``_breaks``) on its own scenarios (``_own_cells``)."""
    return _breaks(_own_cells(comparison, described))


def _said_in_rows(name: str, comparison: dict, folder: Path, linked: set[str], known: set[str] = frozenset()) -> bool:
    """Whether a study's supporting line would only repeat its hypothesis rows and the answer: it
    decides a row that links its report (``linked``: at the seed's premise, or a later comparison of
    several studies), and no candidate of it broke but configs the answer's "Where it breaks" already
    names (``known``)."""
    if name not in linked:
        return False
    recs = records_or_empty(folder)
    try:
        return _broken(_own_cells(comparison, answer.describe(recs) if recs else {"n": 0})) <= set(known)
    except ValueError:
        return False


def _gated_out(comparison: dict) -> bool:
    """Whether a quality study's every scenario was kept from verdicts by the gates (not learned, or
    its configs not told apart with no control to show it detects a defect): it supports nothing
    in the answer, and "no candidate failed" would misread it. The hypothesis rows name it where it
    reached a seed's premise (``premise_elsewhere``); its report says why."""
    rel, learned = comparison.get("reliability") or {}, comparison.get("learned") or {}
    return bool(learned) and not speed_only(comparison) and all(
        not v.get("learned") or ((rel.get(s) or {}).get("told_apart") is False and not (rel.get(s) or {}).get("detects"))
        for s, v in learned.items())


def _speed_line(folder: Path) -> str:
    """A speed study's throughput per scenario as multiples of amp_bf16's (its anchor where timed,
    else its first config), mean over seeds, with each config's seed spread and peak GiB; '' without stats."""
    path = folder / "comparison" / "config_stats.csv"
    if not path.is_file():
        return ""
    st = pd.read_csv(path)
    t = st[st["metric"] == "throughput"]
    if "mean" not in t or t["mean"].isna().all():
        return ""
    parts = []
    for scn, g in t.groupby("scenario"):
        g = g.set_index("config").reindex(config_order(list(g["config"])))
        anchor = answer.AMP if answer.AMP in g.index else g.index[0]
        gib = st[(st["metric"] == "memory") & (st["scenario"] == scn)].set_index("config")["mean"]
        parts.append(f"{scn}, throughput x `{anchor}` (seed sd % of the mean; peak GiB): " + ", ".join(
            _times(c, r, g.loc[anchor, "mean"], gib.get(c, float("nan"))) for c, r in g.iterrows() if c != anchor)
            + f"; `{anchor}` {g.loc[anchor, 'mean']:,.0f} {_unit(scn)}")
    return "; ".join(parts)


def _times(config: str, row: pd.Series, anchor_mean: float, gib: float) -> str:
    """One config's multiple of the anchor's throughput, its seed spread and peak GiB; a config with no
    timed run (every run failed) says so rather than printing nan."""
    if pd.isna(row["mean"]):
        return f"{config} not timed (no run finished)"
    spread = "one seed" if pd.isna(row["std"]) else f"{100 * row['std'] / row['mean']:.1f}%"
    return f"{config} {row['mean'] / anchor_mean:.2f}x ({spread}; " + ("-" if pd.isna(gib) else f"{gib:.1f}") + ")"


def _unit(scenario: str) -> str:
    return "tokens/s" if scenario in ("A", "B") else "samples/s"


H2_WINDOW = 5000
"""Seed 001's H2 puts fp16's divergence in LM "around 5-10k steps": runs this long speak to it."""


def _long_stability(comparison: dict) -> str:
    """Where the study's fp16 runs trained ``H2_WINDOW`` steps or more: per config and scenario,
    whether and where they diverged (seed 001 H2's evidence, ``verdicts.divergence_table``)."""
    h = (comparison.get("hypotheses") or {}).get("seed001.H2") or {}
    rows = (h.get("evidence") or {}).get("divergence") or []
    return "; ".join(f"{r['config']} on {r['scenario']} {r['summary']}" for r in rows
                     if (r.get("train_steps") or 0) >= H2_WINDOW)


def _footnote(quality, speeds: list, sources: list[str]) -> str:
    """Provenance of the quality study's folders and the speed studies', and the command."""
    used = list(quality) + list(speeds)
    return ("Records: " + "; ".join(f"`{n}` {provenance(d, commits=False)}" for n, _, d in used)
            + ". Commits and every run: [executed/README.md](executed/README.md). "
            + f"Generated by `dtype-bench findings {' '.join(sources)}` (not edited by hand).")


def _speed_sources(studies: list[tuple[str, dict, Path]], quality: list[Path]) -> list[tuple[str, dict, Path, list[str]]]:
    """The answer's speed: each scenario from the first of ``studies`` built for speed (with its
    ``config_stats.csv``) that timed it on the quality runs' data (a size of its own is said by
    ``answer.model_mismatch``), so that a scenario's configs are never compared across studies
    (hosts) and never timed on other data.
    (name, comparison, folder, the scenarios it supplies), in the order given; a study that supplies
    no scenario is left out."""
    want = _size_and_data([r for f in quality for r in load_records(f)])
    out, taken = [], set()
    for n, comp, d in studies:
        if not (speed_only(comp) and (d / "comparison" / "config_stats.csv").is_file()):
            continue
        try:
            have = _size_and_data(load_records(d))
        except FileNotFoundError:  # its config_stats without its records: what it timed cannot be checked
            have = {}
        if not have:
            st = pd.read_csv(d / "comparison" / "config_stats.csv")
            scns = [str(x) for x in sorted(st.loc[st["metric"] == "throughput", "scenario"].unique()) if str(x) not in taken]
        else:
            scns = [s for s in sorted(have) if s not in taken and s in want
                    and {d for _, d in have[s]} <= {d for _, d in want[s]}]
        if scns:
            out.append((n, comp, d, scns))
            taken |= set(scns)
    return out


def _size_and_data(records: list[dict]) -> dict[str, set]:
    """Scenario -> the (model size, data folder's name) its runs trained at."""
    out: dict[str, set] = {}
    for r in records:
        run = r.get("run") or {}
        out.setdefault(str(r.get("scenario")), set()).add((run.get("size"), Path(str(run.get("data"))).name))
    return out


def _per_seed(sources: list[tuple[str, dict, Path, list[str]]]) -> pd.DataFrame | None:
    """Each speed source's timed runs of its scenarios, a row each: scenario, config, seed, the GPU
    (``env.gpu_uuid``), throughput and memory, for ``recommend.beyond_noise``'s paired test."""
    rows = []
    for _, _, d, scns in sources:
        try:
            recs = [r for r in load_records(d) if str(r.get("scenario")) in scns]
        except FileNotFoundError:
            continue
        df = records_frame(recs)
        if df.empty:
            continue
        df["gpu"] = [r.get("env", {}).get("gpu_uuid") for r in recs]
        rows.append(df.loc[speed_runs(df), ["scenario", "config", "seed", "gpu", "throughput", "memory"]])
    return pd.concat(rows, ignore_index=True) if rows else None


def _speed_stats(sources: list[tuple[str, dict, Path, list[str]]]) -> pd.DataFrame:
    """The config_stats rows of each speed source's scenarios, one table."""
    return pd.concat([(st := pd.read_csv(d / "comparison" / "config_stats.csv"))[st["scenario"].astype(str).isin(scns)]
                      for _, _, d, scns in sources], ignore_index=True)


def _to_settle(h: dict) -> str:
    """For an undecided verdict: the seeds that would settle it, or why there is no estimate."""
    if h["verdict"] in DECIDED:
        return ""
    if h.get("measured_verdict"):  # untestable here: what is missing, then what was measured below it
        return str(h["reason"]).replace("|", "/")
    eff = h.get("effect") or {}
    if (need := eff.get("seeds_to_settle")) is not None:
        return (f"{eff.get('name', 'effect')} {eff['estimate']:+.3g} [{eff['ci_low']:+.3g}, {eff['ci_high']:+.3g}] "
                f"{eff.get('unit', '')}: " + (f"more than {SETTLE_MAX} seeds per (scenario, config) would be needed: "
                                              "too small to matter" if need > SETTLE_MAX else
                                              f"~{need} seeds per (scenario, config) at this effect and noise"))
    reason = str(h.get("reason") or "").split("; ")[0][:120]
    ev = h.get("evidence") or {}
    if ev.get("summary") and ev.get("pairs"):  # a frontier comparison: what it compared, and what it saw
        among = sorted({c for cs in ev["pairs"].values() for c in cs})
        reason += f": {ev['summary']}, among {', '.join(among)}"
    return reason.replace("|", "/")


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


def answer_studies(text: str) -> list[str]:
    """The study folders (from ``executed/`` on) an answer or Findings text says it is made of."""
    line = next((ln for ln in text.splitlines() if ln.startswith(STUDIES_MARK)), "")
    return line.removeprefix(STUDIES_MARK).removesuffix("-->").split()


def showing_another_answer(text: str, root: Path = Path(".")) -> list[str]:
    """The studies ``text`` (an answer) is made of whose comparison notebook shows a scope, table or
    legend ("Cell: ...") line other than its own: analysed before the findings that changed it
    (``answer_for`` reads the answer then)."""
    rows = [ln.rstrip() for ln in text.splitlines() if ln.startswith(("| ", "> ", "Cell: "))]
    out = []
    for study in answer_studies(text):
        nb = root / study / "analysis" / "11_compare_experiments.ipynb"
        if nb.is_file():
            shown = "".join(str(o.get("data", {}).get("text/markdown", "")) for c in json.loads(nb.read_text())["cells"]
                            for o in c.get("outputs", []))
            if not all(r in shown for r in rows):
                out.append(study)
    return out


def answer_for(study_dir: Path, root: Path | None = None) -> str | None:
    """The committed answer (``ANSWER_FILE`` under ``root``, the repository) where ``study_dir`` is one
    of the studies it is made of, else None: a study's report and notebook show it beside their own
    per-study tables, so that every output states the same default."""
    root = root or Path(__file__).resolve().parents[2]
    path = root / ANSWER_FILE
    if not path.is_file():
        return None
    text = path.read_text()
    return text if study_path(Path(study_dir).resolve()) in answer_studies(text) else None


def study_sources(comparison: dict, study_dir: Path) -> list[Path]:
    """The study folders a comparison was computed from (its ``sources``, which name them as the
    machine that ran it did), here, wherever the comparison itself was written (``compare
    --output_dir``); the comparison's own study (the folder above its own) where none is found.
    A comparison with neither is refused by name: the folder above it holds another study's
    records, or none (``/tmp/x/comparison.json`` would read whatever lies under ``/tmp``)."""
    found = [Path(s[s.rindex("executed/"):]) for s in comparison.get("sources", []) if "executed/" in s]
    found = [p for p in found if p.is_dir()]
    if found:
        return found
    if not ((study_dir / "records.jsonl.gz").is_file() or (study_dir / "runs").is_dir()):
        names = ", ".join(comparison.get("sources") or []) or "none named"
        raise UserError(f"a comparison under {str(study_dir)!r}, not a study folder, names studies none of which "
                        f"is here ({names}): run findings where its studies are")
    return [study_dir]
