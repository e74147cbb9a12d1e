"""Which study decides each hypothesis row of the README's Findings, and what its verdict covered:
the deciding study among several (``merged_hypotheses``; ``at_premise`` where only another reached
the seed's premise), the runs its test drew on (``drew_on``), and its scope set against the seed's
stated premise (``premise``, ``unmet_premise``, ``premise_elsewhere``, ``measured_on``)."""
from __future__ import annotations

import json
import math
from pathlib import Path

from benchlib.analysis.hypotheses import SEED_HEAD, premise_unmet
from benchlib.analysis.tables import DEFAULT_BETA2, cell_text, head_params, speed_only, study_path
from benchlib.analysis.verdicts import scenarios_of
from benchlib.core.records import load_records

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
    (evidence ``size_confounded``) is settled by a later study that decided on pairs of one size,
    the test it asked for, where that study is a speed study (no quality judged, so whether its
    data are real does not enter) or keeps the first's arms (``_same_arms``)."""
    out: dict[str, tuple[str, dict]] = {}
    comps = dict(studies)
    for name, comp in studies:
        for hid, h in comp.get("hypotheses", {}).items():
            if hid in out and h["verdict"] in DECIDED and _confounded(out[hid][1]) and not _confounded(h) \
                    and (speed_only(comp) or _same_arms(comps[out[hid][0]], comp, h)):
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


def _same_arms(first: dict, later: dict, h: dict) -> bool:
    """Whether ``later`` (a comparison whose hypothesis ``h`` used pairs of one size) replaced only
    the confounded partner of ``first``'s pairs: the two share a study folder (``sources``: the same
    runs on one side of each pair), and every scenario of ``h``'s pairs read the same data in both
    where both ran it (``recipe``). seed 002 H3: reference_real's GPT-2 arms beside a RoBERTa-base
    fine-tuned on their data settle what the 22M encoder left open; a study on other data does not."""
    if not set(first.get("sources") or []) & set(later.get("sources") or []):
        return False
    used = (h.get("evidence") or {}).get("used") or []
    scen = {s for u in used for s in u.split("/", 1)[0].split("-")}
    a, b = first.get("recipe") or {}, later.get("recipe") or {}
    return bool(scen) and all((a[s].get("data") == b[s].get("data")) for s in scen if s in a and s in b)


def _stand_in(h: dict) -> bool:
    return bool((h.get("evidence") or {}).get("stand_in"))


SEED_H2_STEPS = (5_000, 10_000)
"""Seed 001's H2: unscaled fp16 'diverges in LM around 5-10k steps'."""


def records_or_empty(folder: Path) -> list[dict]:
    """A study folder's records; none where it holds no records table or result files."""
    try:
        return load_records(folder)
    except FileNotFoundError:
        return []


def _heads(records: list[dict]) -> dict[str, tuple[int, int]]:
    """Classification scenario -> (labels, classifier-head parameters: width x labels + labels)."""
    out = {}
    for r in records:
        p = head_params(r)
        if p == p:  # not NaN
            out[r["scenario"]] = (int(r["model"]["num_labels"]), int(p))
    return dict(sorted(out.items()))


def _span_of(values: list) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"


def unmet_premise(hid: str, records: list[dict]) -> str:
    """Where a hypothesis names a premise its runs did not reach (seed 001 H1: ~4k labels; H3: a
    ~3.3M-parameter head), what is missing, in words; '' where reached or not applicable."""
    heads = _heads(records)
    if not heads:
        return ""
    return premise_unmet(hid, max(n for n, _ in heads.values()), max(p for _, p in heads.values()))


def at_premise(hid: str, decided_by: str, h: dict, studies, by_study: dict) -> tuple[str, dict, str]:
    """(study, verdict, what was measured below the premise): where ``decided_by`` ran below seed
    001's premise for H1/H3 and another quality study given reached it and measured the effect
    there (a CI, whatever its verdict), that study decides the row, since only its scope is the
    seed's; the third item then names the study below the premise and its verdict. Otherwise
    ``(decided_by, h, "")``."""
    if hid not in ("seed001.H1", "seed001.H3") or not unmet_premise(hid, by_study.get(decided_by, [])):
        return decided_by, h, ""
    for name, comp, _ in studies:
        recs, there = by_study.get(name) or [], (comp.get("hypotheses") or {}).get(hid)
        if (name != decided_by and there and there.get("effect") and not speed_only(comp) and _heads(recs)
                and not unmet_premise(hid, recs)):
            heads = ", ".join(f"{s} {n:,}" for s, (n, _) in _heads(by_study[decided_by]).items())
            parts = str(h["reason"]).split("measured below it: ", 1)  # at_premise's "<missing>; measured below it: <v> (<why>)"
            found = parts[1] if len(parts) == 2 else f"{h['verdict']} ({parts[0]})"
            return name, there, f"; below it (`{decided_by}`, labels {heads}): {cell_text(found, 140)}"
    return decided_by, h, ""


def measured_on(h: dict, studies, name: str, first: dict) -> str:
    """The metric and seeds of each side a hypothesis's effect was measured on (its evidence's ``cls``
    and ``lm``: scenarios used, fewest seeds), or of the scenario pairs it compared (``used`` such as
    "C-D/amp_bf16", seed 002 H3), from the deciding comparison's recipe, e.g. "; micro_f1 on C, 12
    seeds; val_loss on A, 3 seeds"; '' where the evidence names none or the effect is not a quality
    change (a divergence rate is no metric's)."""
    if "%" not in str((h.get("effect") or {}).get("unit", "")):
        return ""
    recipe = (next((c for n, c, _ in studies if n == name), first) or {}).get("recipe") or {}
    evidence = h.get("evidence") or {}
    sides = [evidence.get(side) for side in ("cls", "lm")]
    if not any(isinstance(ev, dict) for ev in sides) and evidence.get("used") and evidence.get("seeds"):
        paired = {s for u in evidence["used"] for s in str(u).split("/", 1)[0].split("-") if "/" in str(u)}
        sides = [{"used": sorted(paired), "seeds": evidence["seeds"]}] if paired else []
    parts = []
    for ev in sides:
        if isinstance(ev, dict) and ev.get("used") and ev.get("seeds"):
            by_metric: dict[str, list[str]] = {}
            for s in ev["used"]:
                by_metric.setdefault((recipe.get(s) or {}).get("metric") or "quality", []).append(s)
            parts.append(", ".join(f"{m} on {'/'.join(v)}" for m, v in by_metric.items()) + f", {ev['seeds']} seeds")
    return "".join(f"; {p}" for p in parts)


def decided_by(name: str, studies, linked: bool = False) -> str:
    """The "from" cell: the study (``linked``: to its report's README, where the row stands for its
    supporting line), and the studies its comparison also took scenarios from (a comparison given
    ``--lm_results``/``--cls_results`` of two folders)."""
    comp, folder = next(((c, d) for n, c, d in studies if n == name), ({}, None))
    others = [Path(s).name for s in comp.get("tasks") or {} if Path(s).name != name]
    shown = (f"[`{name}`]({study_path(folder)}/README.md)" if linked and folder is not None and (folder / "README.md").is_file()
             else f"`{name}`")
    return shown + (f" (with {', '.join(f'`{o}`' for o in others)})" if others else "")


def premise_elsewhere(hid: str, decided_by: str, studies, by_study: dict) -> str:
    """Where the study that decides ``hid`` ran below the seed's premise and another quality study
    given reached it, what that study found there (its verdict and why, shortened), so a row never
    hides a run at the premise that settled nothing; '' otherwise."""
    if hid not in ("seed001.H1", "seed001.H3") or not unmet_premise(hid, by_study.get(decided_by, [])):
        return ""
    for name, comp, _ in studies:
        recs = by_study.get(name) or []
        h = (comp.get("hypotheses") or {}).get(hid)
        if name != decided_by and h and not speed_only(comp) and _heads(recs) and not unmet_premise(hid, recs):
            heads = ", ".join(f"{s} {n:,} labels ({p / 1e6:.2f}M)" for s, (n, p) in _heads(recs).items())
            return f"; reached by `{name}` ({heads}): {h['verdict']} there ({cell_text(h['reason'], 360)})"
    return ""


def drew_on(h: dict, records: list[dict]) -> list[dict]:
    """The records of the scenarios a hypothesis's test used, as its evidence lists them (each arm's
    ``used``: "A", or "C-D/amp_fp16" for a pair; seed 001 H4's frontier ``pairs``: "A-E"), so that its
    scope states their steps and beta2, not those of a joined study whose scenario was missing seeds
    and entered nothing; all of ``records`` where the evidence lists none."""
    ev = h.get("evidence") or {}
    lists = [ev.get("used"), list(ev.get("pairs") or ())] + [v.get("used") for v in ev.values() if isinstance(v, dict)]
    used = {s for items in lists if isinstance(items, list) for item in items for s in str(item).split("/")[0].split("-")}
    return [r for r in records if r.get("scenario") in used] if used else records


def premise(hid: str, quality: list[dict], every: list[dict]) -> str:
    """What the verdict's runs covered, set against the seed's stated premise, in one cell: the label
    counts and head sizes (seed 001 H1, H3), where unscaled fp16 turned and diverged on LM against
    the seed's 5-10k steps (H2, over every study's records), the models a frontier or an
    architecture contrast compares (H4, seed 002 H2/H3); steps and beta2 of the quality runs."""
    steps = sorted({(r.get("run") or {}).get("steps") for r in quality if (r.get("run") or {}).get("steps")})
    beta2 = sorted({float((r.get('run') or {}).get('beta2', DEFAULT_BETA2)) for r in quality})
    base = f"{_span_of(steps)} steps, beta2 {'/'.join(f'{b:g}' for b in beta2)}" if steps and beta2 else ""
    parts = []
    if hid in ("seed001.H1", "seed001.H3") and (heads := _heads(quality)):
        shown = ", ".join(f"{s} {n:,} labels ({p / 1e3:,.0f}k)" for s, (n, p) in heads.items())
        big = max(heads.values(), key=lambda t: t[1])
        want = (f"~{SEED_HEAD['labels']:,} labels" if hid.endswith("H1") else
                f"a ~{SEED_HEAD['params'] / 1e6:.1f}M-parameter head")
        reached = big[0] >= SEED_HEAD["labels"] if hid.endswith("H1") else big[1] >= SEED_HEAD["params"]
        parts.append(f"heads: {shown}; the seed's premise ({want}) " + ("reached" if reached else "not reached here"))
    if hid == "seed001.H2":
        per, first = [], []  # each LM scenario's unscaled fp16 runs: a causal and a masked LM fail apart
        for s in scenarios_of("lm"):
            lm = [r for r in every if r.get("scenario") == s and r.get("config") == "fp16_naive_noscale"]
            turned = [m["stability/degraded_step"] for r in lm if (m := r.get("metrics") or {}).get("stability/degraded_step")]
            died = [m["stability/diverged_step"] for r in lm if (m := r.get("metrics") or {}).get("stability/diverged_step")]
            longest = max([(r.get("run") or {}).get("steps") or 0 for r in lm], default=0)
            if turned or died:
                seen = f"loss turned up at step {_span_of(turned)}" if turned else ""
                seen += (", " if seen else "") + (f"diverged at {_span_of(died)}" if died else
                                                   f"no divergence in runs of up to {longest:,} steps")
                per.append(f"{s}: {seen}")
                first.append(min(turned + died))
        if per:
            early = min(first) < SEED_H2_STEPS[0]  # before the seed's window opens
            parts.append("unscaled fp16 on LM, " + "; ".join(per)
                         + ("; the seed's 5-10k-step timing is refuted (it fails far sooner)" if early else
                            "; consistent with the seed's 5-10k-step timing"))
    if hid == "seed001.H4":
        parts += [task_pairs(quality)]
    if hid in ("seed002.H2", "seed002.H3"):
        models = sorted({_model_of(r) for r in quality if isinstance(r.get("model"), dict)})
        sizes = [float(m.split()[-1][:-1]) for m in models]
        if len(models) > 1:
            parts.append(f"models {', '.join(models)}" + ("; architecture and size confounded" if sizes and
                                                          max(sizes) > 2 * min(sizes) else ""))
    if hid == "seed002.H3":
        parts.append(_pretraining(quality, every))
    parts = [x for x in parts if x]
    return cell_text("; ".join(([base] if base else []) + parts), 260).replace("|", "/")


def _pretraining(records: list[dict], every: list[dict] = ()) -> str:
    """Each architecture's pretraining where the study made it (the checkpoint a fine-tune loaded):
    its scenario, steps and final val loss, with the share of its unigram gap closed where that
    scenario's own runs give the baseline. Two objectives and depths: a condition of an
    architecture verdict, said beside it (seed 002 H3 over in-study GPT-2 and RoBERTa)."""
    base = {}  # the pretraining scenario's own runs give its baseline, used by the test or not (``every``)
    for r in [*records, *every]:
        b = (r.get("metrics") or {}).get("baseline/val_loss")
        if isinstance(b, (int, float)) and math.isfinite(b):
            base.setdefault(r.get("scenario"), b)
    seen, own = {}, {}
    for r in records:
        p = r.get("pretrained") or {}
        ck = p.get("checkpoint") or {}
        v = (ck.get("quality") or {}).get("val_loss")
        if ck.get("scenario") and isinstance(v, (int, float)):
            key = (p.get("model_type") or "?", ck["scenario"], ck.get("steps"))
            seen.setdefault(key, v)
            if key not in own and (b := _checkpoint_baseline(p.get("path"), ck.get("run_id"))) is not None:
                own[key] = b
    out = []
    for (arch, scen, steps), v in sorted(seen.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        b = own.get((arch, scen, steps), base.get(scen))
        share = f", {(b - v) / b:.0%} of its unigram gap" if b else ""
        out.append(f"{arch} on {scen}" + (f" {steps:,} steps" if steps else "") + f" (val loss {v:.2f}{share})")
    return ("pretrained in the study: " + ", ".join(out)) if out else ""


def _checkpoint_baseline(path, run_id) -> float | None:
    """The baseline val loss in the record of the run that wrote a checkpoint (``<stage>/<arch>/model``):
    ``<arch>/result.json`` beside it, or once the stage is compacted its records table (the record
    of ``run_id``), where either is here."""
    if not path:
        return None
    run = Path(str(path)).parent
    try:
        found = ([json.loads((run / "result.json").read_text())] if (run / "result.json").is_file() else
                 [r for r in records_or_empty(run.parent) if r.get("run_id") == run_id])
    except (OSError, ValueError):
        return None
    b = next(((r.get("metrics") or {}).get("baseline/val_loss") for r in found if isinstance(r, dict)), None)
    return float(b) if isinstance(b, (int, float)) and math.isfinite(b) else None


def _model_of(r: dict) -> str:
    m = r.get("model") or {}
    return f"{m.get('model_type')} {(m.get('parameters') or 0) / 1e6:.1f}M"


def task_pairs(records: list[dict]) -> str:
    """Which LM-against-classification pairs of a frontier comparison keep one model (a task contrast)
    and which change architecture or size too (confounded), from the records' models."""
    by = {}
    for r in records:
        if isinstance(r.get("model"), dict):
            by.setdefault(str(r.get("scenario")), set()).add(((r["model"].get("model_type")),
                                                             (r["model"].get("parameters") or 0) / 1e6))
    lm = {m for s in ("A", "B") for m in by.get(s, ())}
    if not lm:
        return ""
    same = lambda m: any(m[0] == t and 0.5 <= m[1] / max(p, 1e-9) <= 2 for t, p in lm)  # noqa: E731
    one = sorted(s for s in by if s not in ("A", "B") and all(same(m) for m in by[s]))
    other = sorted(s for s in by if s not in ("A", "B") and s not in one)
    return "; ".join(x for x in (f"{', '.join(one)} against LM: one model (a task contrast)" if one else "",
                                 f"{', '.join(other)} against LM: architecture or size differ too (confounded)"
                                 if other else "") if x)
