"""Verdicts on seed 001's H1-H4 and seed 002's three hypotheses, each by an explicit,
parameterised rule (its docstring, copied into ``comparison.json``). Which scenarios a rule reads
is its decorator's (``verdicts.quality_rule``, ``stability_rule``, ``speed_rule``). Configs are
named by their definition (``identity``): a study whose fp16 runs kept fp16 Adam moments has
``fp16_fp16_states*`` runs, and the fp16 verdicts say which configuration they tested.
"""
from __future__ import annotations

import inspect
import re
from itertools import product

import numpy as np
import pandas as pd

from benchlib.analysis.gates import quality_runs
from benchlib.analysis.recommend import safety
from benchlib.analysis.stats import SIZE_RATIO, Rules, bootstrap
from benchlib.analysis.tables import BASELINE, excluded_configs, groups, seed_series, speed_runs
from benchlib.analysis.verdicts import (FP16_FAMILY, VERDICTS, decide, divergence_contrast,  # noqa: F401
                                        divergence_table, divergence_verdict, effect, effect_ci, fp16_config,
                                        gain_pct, quality_rule, result, scenario_units, scenarios_of, seeds_to_settle,
                                        speed_rule, stability_rule, units_of, verdict_of)

MATCHED_PAIRS = (("C", "D"), ("E", "F"))  # (GPT-2, RoBERTa) on one task, data set and length (A, B: not)
LOW_PRECISION = ("amp_fp16", "amp_bf16", "bf16_pure", "bf16_naive", "fp16_naive")
def _start_differs(df: pd.DataFrame, a, b) -> str:
    """Where two arms of a contrast start one from scratch and the other from a checkpoint: the
    contrast is not of the task alone, said first (a reader stops early); else ''."""
    col = "run.model_name_or_path"
    if col not in df:
        return ""
    loaded = lambda scns: set(df.loc[df["scenario"].isin(scns), col].notna())  # noqa: E731
    la, lb = loaded(a), loaded(b)
    if len(la) == len(lb) == 1 and la != lb:
        scratch, tuned = ("LM", "classification") if la == {False} else ("classification", "LM")
        return f"not the task alone ({scratch} from scratch, {tuned} fine-tuned from a checkpoint): "
    return ""


def _used_pairs(used: list[str]) -> list[tuple[str, str]]:
    """The matched pairs a contrast used (its units named 'E-F' or 'E-F/<config>')."""
    return [(g, r) for g, r in MATCHED_PAIRS if f"{g}-{r}" in used or any(u.startswith(f"{g}-{r}/") for u in used)]


def _size_pairs(df: pd.DataFrame, used: list[str]) -> list[str]:
    """'E gpt2 124.5M vs F bert 22.6M' for each matched pair in ``used`` whose models differ
    by more than 1.5x in parameters (e.g. a 22M BERT standing in for RoBERTa-base)."""
    if "model.parameters" not in df:
        return []
    notes = []
    for g, r in _used_pairs(used):
        size = {s: df.loc[df["scenario"] == s, "model.parameters"].median() for s in (g, r)}
        kind = {s: df.loc[df["scenario"] == s, "model.type"].dropna().unique() for s in (g, r)}
        if all(np.isfinite(v) and v > 0 for v in size.values()) and max(size.values()) > SIZE_RATIO * min(size.values()):
            notes.append(" vs ".join(f"{s} {'/'.join(kind[s]) or '?'} {size[s] / 1e6:.1f}M" for s in (g, r)))
    return notes


def _host_pairs(df: pd.DataFrame, used: list[str]) -> list[str]:
    """'E on 1 host(s), F on 1 other(s)' for each matched pair in ``used`` whose two scenarios' runs
    share no machine (``boot_id`` in the ``host`` column, ``tables.host_of``); pairs whose runs
    name no machine are not judged."""
    if "host" not in df:
        return []
    boots = df["host"].astype("string").str.extract(r"boot_id=([^;]+)")[0]
    notes = []
    for g, r in _used_pairs(used):
        on = {s: set(boots[df["scenario"] == s].dropna()) for s in (g, r)}
        if all(on.values()) and not on[g] & on[r]:
            notes.append(f"{g} on {len(on[g])} host(s), {r} on {len(on[r])} other(s)")
    return notes


def macro_f1_beside(df: pd.DataFrame, x: str, ref: str, sign: int, name: str, rules: Rules) -> dict | None:
    """Seed 001 asks for macro-F1 where the label space is large: ``x`` against ``ref`` in % of
    ``ref``'s macro-F1 (``sign`` as the verdict's effect), paired by seed, averaged over the
    classification scenarios whose records report it, with its CI. Evidence beside the verdict,
    which rests on each scenario's headline metric; None where no scenario reports it."""
    if "quality/macro_f1" not in df or df["quality/macro_f1"].isna().all():
        return None
    cells = seed_series(df, "quality/macro_f1", oriented=False, runs=quality_runs(df))
    units, ev = scenario_units(cells, scenarios_of("cls"), x, ref, gain_pct(sign), rules)
    ci = effect_ci(units, rules)
    return {"effect": effect(name, "%", *ci, rules) if ci else None, "scenarios": ev}


def _with_macro(res: dict, mac: dict | None) -> dict:
    res["evidence"] = {**(res.get("evidence") or {}), "macro_f1": mac}
    e = (mac or {}).get("effect")
    if e:
        res["reason"] += (f"; {e['name']} (evidence, not the verdict): {e['estimate']:.3g}% "
                          f"[{e['ci_low']:.3g}, {e['ci_high']:.3g}]")
    return res


# ---- seed 001 ----------------------------------------------------------------------------------
@quality_rule
def output_head_effect(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 001 H1, output-layer precision. Effect: quality gain of amp_bf16_fp32_head over
    amp_bf16 in % of amp_bf16's quality (> 0 = the fp32 head is better), paired by seed, averaged
    over the classification scenarios C-F where both configs have >= min_seeds counted seeds;
    the same over the LM scenarios A, B is the control. supported: the classification CI is
    above 0 (and outside +-margin_quality_pct) and the LM CI is not above 0. rejected: the
    classification CI is below 0 or inside the margin, or the LM CI is above 0 too (not
    classification-specific). inconclusive: otherwise, or no usable classification or LM
    scenario; untestable where the scenarios it needs are not established (gates.apply_gates)."""
    claim = "amp_bf16_fp32_head beats amp_bf16 on classification but not on LM"
    x, ref = "amp_bf16_fp32_head", "amp_bf16"
    cells = seed_series(df, "quality", oriented=True)
    cls, ev = scenario_units(cells, scenarios_of("cls"), x, ref, gain_pct(1), rules)
    lm, ev_lm = scenario_units(cells, scenarios_of("lm"), x, ref, gain_pct(1), rules)
    ci, lm_ci = effect_ci(cls, rules), effect_ci(lm, rules)
    ev = {"cls": ev, "lm": ev_lm, "lm_effect": effect("LM quality gain", "%", *lm_ci, rules) if lm_ci else None}
    res = verdict_of(output_head_effect, claim, ci, ev, "classification quality gain of the fp32 head", "%",
                     rules, rules.margin_quality_pct, noise_from=ev["cls"])
    if res["verdict"] == "supported":
        if lm_ci is None:
            res.update(verdict="inconclusive", reason=res["reason"] + "; no usable LM scenario for the control")
        elif lm_ci[1] > 0:
            res.update(verdict="rejected", reason=res["reason"] + f"; but the LM CI [{lm_ci[1]:.4g}, {lm_ci[2]:.4g}] "
                       "is above 0 too: the gain is not classification-specific")
        else:
            res["reason"] += f"; LM CI [{lm_ci[1]:.4g}, {lm_ci[2]:.4g}] not above 0"
    return _with_macro(res, macro_f1_beside(df, x, ref, 1, "classification macro-F1 gain of the fp32 head", rules))


@stability_rule
def naive_fp16_stability(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 001 H2, stability of fp16 without loss scaling. Config: fp16_naive_noscale (fp16
    weights, fp32 Adam moments, no scaling), or where the study has none, fp16_fp16_states_noscale
    (fp16 moments too: the verdict says it tests second-moment underflow, not loss scaling).
    Effect: instability rate (runs that diverged or degraded: the loss blew up, or rose and stayed
    up, ``verdicts.divergence_contrast``) on LM (A, B) minus on classification (C-F), each the share
    of the runs that trained on its learned scenarios with >= min_seeds of them (CI: Newcombe's
    score interval); where every run of both arms was unstable (rates 1 and 1 cannot
    discriminate), the mean ln(step it began) on LM minus on classification; where none was,
    untestable. supported: the CI excludes 0 in either direction (classification hides or
    amplifies it); rejected: the CI is inside +-margin_rate (rates only); inconclusive: otherwise
    or an arm without data. The evidence gives, per task, the step at which each fp16 config
    diverged or that it did not."""
    cfg, note = fp16_config(df, "fp16_naive_noscale", "fp16_fp16_states_noscale")
    claim = (f"{cfg} diverges or degrades differently (rate, or time where both rates are 1) on classification than "
             f"on LM")
    mode, ci, ev = divergence_contrast(df, cfg, scenarios_of("lm"), scenarios_of("cls"), rules)
    ev = {"lm": ev["plus"], "cls": ev["minus"], "counts": ev["counts"]}
    res = divergence_verdict(naive_fp16_stability, claim, cfg, "; " + note if note else "", mode, ci, ev, rules,
                              two_sided=True, arms=("LM", "classification"))
    if res["verdict"] in ("supported", "rejected"):
        res["reason"] = _start_differs(df, scenarios_of("lm"), scenarios_of("cls")) + res["reason"]
    res["evidence"].update(config=cfg, stand_in=bool(note), divergence=divergence_table(df).to_dict(orient="records"))
    return res


@quality_rule
def adam_8bit_effect(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 001 H3, 8-bit Adam. Degradation: quality loss of amp_bf16_8bit_adam vs amp_bf16 in %
    of amp_bf16's quality (> 0 = 8-bit is worse), paired by seed. Effect: mean degradation on
    classification (C-F) minus on LM (A, B), over the scenarios whose quality is established (a
    scenario that did not learn, or a run that stalled on a plateau, enters nothing). supported:
    CI above 0 (8-bit Adam hurts classification more); rejected: CI below 0 or inside
    +-margin_quality_pct; inconclusive: otherwise or a group without data. Evidence adds the
    memory saving per task."""
    claim = "amp_bf16_8bit_adam degrades quality more on classification than on LM"
    x, ref = "amp_bf16_8bit_adam", "amp_bf16"
    cells = seed_series(df, "quality", oriented=True)
    loss = gain_pct(-1)
    cls, ev_c = scenario_units(cells, scenarios_of("cls"), x, ref, loss, rules)
    lm, ev_l = scenario_units(cells, scenarios_of("lm"), x, ref, loss, rules)
    mem = {k: v.mean() for k, v in seed_series(df, "memory", oriented=False).items()}
    saving = {s: 100 * (1 - mem[s, x] / mem[s, ref]) for s in sorted({s for s, _ in mem})
              if (s, x) in mem and (s, ref) in mem}
    ev = {"cls": ev_c, "lm": ev_l, "memory_saving_pct": saving}
    ci_c, ci_l = effect_ci(cls, rules), effect_ci(lm, rules)  # each side's own noise: their seeds differ
    sides = [(ci_c, ev_c["seeds"]), (ci_l, ev_l["seeds"])] if ci_c and ci_l else None
    res = verdict_of(adam_8bit_effect, claim, effect_ci(cls, rules, lm), ev, "degradation classification - LM",
                     "% of quality", rules, rules.margin_quality_pct, sides=sides)
    return _with_macro(res, macro_f1_beside(df, x, ref, -1, "classification macro-F1 loss of 8-bit Adam", rules))


def _fronts(x: np.ndarray, y: np.ndarray, tol_pct: float = 0.0) -> np.ndarray:
    """Pareto fronts of (B, n) arrays, both higher-is-better; differences within ``tol_pct`` % are ties."""
    xi, yi, xj, yj = x[:, :, None], y[:, :, None], x[:, None, :], y[:, None, :]
    ex, ey = np.abs(xi) * tol_pct / 100, np.abs(yi) * tol_pct / 100
    return ~((xj >= xi - ex) & (yj >= yi - ey) & ((xj > xi + ex) | (yj > yi + ey))).any(axis=2)


def passed_quality(df: pd.DataFrame, rules: Rules) -> dict[str, set] | None:
    """Scenario -> the configs this frame's ``safety`` calls safe; None where it judges no quality."""
    if not df["quality_established"].any():
        return None
    saf = safety(df, rules)
    return {s: set(g.loc[g["safe"].eq(True), "config"]) for s, g in saf.groupby("scenario")}


@speed_rule
def bf16_on_frontier(df: pd.DataFrame, rules: Rules = Rules(), passed: dict | None = None) -> dict:
    """seed 001 H4, the throughput-memory frontier shifts between tasks. For each LM x
    classification scenario pair, the candidate configs that passed the quality study on both
    scenarios (``passed``: scenario -> configs tested safe; by default this study's own safety
    where it judges quality) with >= min_seeds finished runs and no failed run on either, when
    there are >= 2 of them; each scenario's frontier over those configs (throughput higher,
    memory lower is better; differences below min_size_pct % are ties). Effect: mean Jaccard
    distance (1 - |A and B| / |A or B|) between the two frontiers of each such pair; each cell's
    runs (throughput and memory together) resampled by scipy.stats.bootstrap. supported: CI
    above 0; rejected: CI = [0, 0] (the same frontier in nearly every resample); inconclusive:
    otherwise, or no pair with >= 2 shared configs; untestable where no quality study says which
    configs pass."""
    claim = "the throughput-memory Pareto frontier differs between LM and classification"
    passed = passed if passed is not None else passed_quality(df, rules)
    if passed is None:
        return result(bf16_on_frontier, claim, "untestable", "which configs pass on quality is not known here (this "
                      "study judges no quality): a frontier of configs that may not train says nothing; run it with "
                      "the quality study's verdicts (findings across the two studies, or passed=)")
    failed = excluded_configs(df)  # a config with a failed run is on no frontier
    ok_run = np.array([k not in failed for k in zip(df["scenario"], df["config"])], bool)
    ok = df[speed_runs(df) & ok_run & df["role"].eq("candidate")].dropna(subset=["throughput", "memory"])
    cells = {k: g[["throughput", "memory"]].to_numpy(float).T for k, g in ok.groupby(["scenario", "config"])}
    g = groups(ok["scenario"].unique())
    seeded = lambda s: {c for (s2, c), v in cells.items()  # noqa: E731
                        if s2 == s and v.shape[1] >= rules.min_seeds and c in passed.get(s, set())}
    shared = {(a, b): sorted(seeded(a) & seeded(b)) for a, b in product(g["lm"], g["cls"])}
    pairs = {p: cs for p, cs in shared.items() if len(cs) >= 2}
    ev = {"configs": sorted(set().union(*pairs.values())) if pairs else [], "lm": g["lm"], "cls": g["cls"],
          "pairs": {f"{a}-{b}": cs for (a, b), cs in pairs.items()},
          "passed": {s: sorted(cs) for s, cs in passed.items()}}
    if not pairs:
        return result(bf16_on_frontier, claim, "inconclusive", "needs an LM and a classification scenario with >= 2 "
                      f"candidate configs that passed the quality study and have >= {rules.min_seeds} finished runs "
                      "on both", evidence=ev)
    used = sorted({(s, c) for (a, b), cs in pairs.items() for s in (a, b) for c in cs})

    def frontiers(*samples, axis=-1):
        v = {k: np.atleast_2d(np.mean(x, axis=axis).T) for k, x in zip(used, samples)}   # (B, 2)
        d = []
        for (a, b), cs in pairs.items():
            f = {s: _fronts(np.stack([v[s, c][:, 0] for c in cs], 1), -np.stack([v[s, c][:, 1] for c in cs], 1),
                            rules.min_size_pct) for s in (a, b)}
            d.append(1 - (f[a] & f[b]).sum(1) / (f[a] | f[b]).sum(1))
        out = np.mean(d, axis=0)
        return out[0] if out.shape == (1,) and samples[0].ndim == 2 else out
    est, lo, hi, _ = bootstrap([cells[k] for k in used], frontiers, rules)
    ev["frontiers"] = {}
    for (a, b), cs in pairs.items():
        ev["frontiers"][f"{a}-{b}"] = {s: [c for c, on in zip(cs, _fronts(
            np.array([[cells[s, c][0].mean() for c in cs]]), -np.array([[cells[s, c][1].mean() for c in cs]]),
            rules.min_size_pct)[0]) if on] for s in (a, b)}
    differ = [f"{p} ({'; '.join(f'{s}: ' + ', '.join(cs) for s, cs in f.items())})"
              for p, f in ev["frontiers"].items() if len({tuple(cs) for cs in f.values()}) > 1]
    ev["summary"] = (f"frontiers differ on {', '.join(differ)}" if differ else
                     f"the same frontier on {', '.join(ev['frontiers'])}")
    verdict, reason = decide(lo, hi, 0.0)
    return result(bf16_on_frontier, claim, verdict, reason,
                  effect("Jaccard distance of frontiers LM vs classification", "0-1", est, lo, hi, rules), ev)


# ---- seed 002 ----------------------------------------------------------------------------------
@stability_rule
def fp16_multilabel_divergence(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 002 H1: fp16_naive (fp16 weights, fp32 Adam moments, static loss scale 1024), or
    where the study has none fp16_fp16_states (fp16 moments too: the verdict says it tests
    second-moment underflow), survives single-label CE but diverges on multi-label BCE. Effect:
    instability rate (diverged or degraded, ``verdicts.divergence_contrast``) on multi-label (C, D)
    minus single-label (E, F), each the share of the runs that trained on its learned scenarios
    with >= min_seeds of them (CI: Newcombe's score interval); where every run of both arms was
    unstable, the mean ln(step it began) on single-label minus multi-label (> 0: sooner on
    multi-label); where none was, untestable. supported: CI above 0; rejected: CI below 0 or
    inside +-margin_rate (rates only); inconclusive: otherwise or a task without data."""
    cfg, note = fp16_config(df, "fp16_naive", "fp16_fp16_states")
    claim = (f"{cfg} survives single-label CE but diverges on multi-label BCE (where it diverges on both: sooner "
             f"on multi-label)")
    mode, ci, ev = divergence_contrast(df, cfg, scenarios_of("multilabel"), scenarios_of("singlelabel"), rules)
    ev = {"multilabel": ev["plus"], "singlelabel": ev["minus"], "counts": ev["counts"]}
    res = divergence_verdict(fp16_multilabel_divergence, claim, cfg, "; " + note if note else "", mode, ci, ev,
                              rules, two_sided=False, arms=("multi-label", "single-label"), sign_time=-1)
    res["evidence"].update(config=cfg, stand_in=bool(note))
    return res


@speed_rule
def bf16_mfu_gain_by_arch(df: pd.DataFrame, rules: Rules = Rules()) -> dict:
    """seed 002 H2: bf16_pure gains more MFU over fp32 on RoBERTa than on GPT-2. MFU gain =
    MFU(bf16_pure) / MFU(fp32_baseline) on the same model and device, which equals the ratio of
    tokens/s (the FLOPs per token and the peak cancel), so it is read from ``tokens_per_s``,
    paired by seed within a scenario. Effect: mean over the matched pairs (C, D) and (E, F) of
    gain(RoBERTa) - gain(GPT-2); A and B are not matched (causal against masked LM). bf16_pure's
    speed includes its stochastic-rounding AdamW update, so the gain is of the config as
    implemented, not of bf16 arithmetic alone. supported: CI above 0; rejected: CI below 0 or
    inside +-margin_speedup; inconclusive: otherwise, no usable pair, or a pair whose models differ
    by more than 1.5x in parameters (a 16-bit speedup grows with width, so such a pair confounds
    size with architecture; the measured contrast is kept as evidence)."""
    claim = "bf16_pure shows a higher MFU gain over fp32 on RoBERTa than on GPT-2 (matched tasks)"
    x, ref = "bf16_pure", BASELINE
    cells = seed_series(df, "tokens_per_s", oriented=False)
    units, ev = units_of(cells, {f"{g}-{r}": (x, [r, g]) for g, r in MATCHED_PAIRS}, ref, lambda xv, rv, r: xv / rv,
                         rules, lambda v: v[0] - v[1])
    ev.update(not_matched="A-B (causal against masked LM)",
              note="bf16_pure's tokens/s includes its stochastic-rounding AdamW update")
    res = verdict_of(bf16_mfu_gain_by_arch, claim, effect_ci(units, rules), ev, "MFU gain RoBERTa - GPT-2", "x fp32",
                     rules, rules.margin_speedup)
    res["reason"] += "; bf16_pure's speed includes its optimizer update's cost (stochastic-rounding AdamW)"
    # A 16-bit speedup grows with a model's width (arithmetic intensity, launch overhead).
    res = _size_confounded(res, _size_pairs(df, ev["used"]), "a 16-bit speedup grows with width")
    # Also inconclusive where a pair's two scenarios ran on different machines (``_host_pairs``): a
    # launch-bound step's speed moves with its host's CPU and load, which one host's seeds do not
    # sample. (Said here, not in the docstring above: each committed comparison stores that text.)
    return _confounded(res, _host_pairs(df, ev["used"]), "host_confounded", "the host",
                       "both scenarios' runs on one host settle it",
                       "a speedup moves with the host (its CPU, what else it runs) and the CI holds no host-to-host noise")


@quality_rule
def precision_sensitivity_by_arch(df: pd.DataFrame, rules: Rules = Rules(), configs=LOW_PRECISION) -> dict:
    """seed 002 H3: GPT-2 classification needs higher precision than RoBERTa. Quality loss of
    a low-precision config = -(its quality gain over fp32_baseline, % of fp32's quality), paired
    by seed. Effect: mean over the matched classification pairs (C,D), (E,F) and the
    low-precision configs of the study (amp_fp16, amp_bf16, bf16_pure, bf16_naive, fp16_naive) of
    loss(GPT-2) - loss(RoBERTa). supported: CI above 0; rejected: CI below 0 or inside
    +-margin_quality_pct; inconclusive: otherwise or no usable (pair, config); untestable where
    the scenarios it needs are not established (gates.apply_gates)."""
    claim = "low-precision configs lose more quality vs fp32 on GPT-2 classification (C, E) than RoBERTa (D, F)"
    cells = seed_series(df, "quality", oriented=True)
    present = [c for c in configs if (df["config"] == c).any()]
    units, ev = units_of(cells, {f"{g}-{r}/{c}": (c, [g, r]) for (g, r), c in product(MATCHED_PAIRS, present)},
                         BASELINE, gain_pct(-1), rules, lambda v: v[0] - v[1])
    res = verdict_of(precision_sensitivity_by_arch, claim, effect_ci(units, rules), ev, "quality loss GPT-2 - RoBERTa",
                     "% of quality", rules, rules.margin_quality_pct,
                     why_missing="no low-precision config with fp32_baseline on both architectures of a "
                                 "classification task" if not present else "")
    # A smaller model may lose more to low precision whatever its architecture.
    return _size_confounded(res, _size_pairs(df, ev["used"]), "precision sensitivity may change with size")


def _size_confounded(res: dict, pairs: list[str], mechanism: str) -> dict:
    """An architecture verdict over matched pairs whose models differ in size (``pairs``) cannot
    tell the architecture from the size where ``mechanism`` ties the effect to size (``_confounded``)."""
    return _confounded(res, pairs, "size_confounded", "size", "pairs of one size settle it", mechanism)


def _confounded(res: dict, pairs: list[str], key: str, what: str, settle: str, mechanism: str) -> dict:
    """A verdict over matched pairs in which ``what`` also differs (``pairs``) becomes
    inconclusive, its measured contrast kept as evidence (``evidence[key]``: those pairs); with no
    such pair, or a verdict already open, ``res`` as it was."""
    if not pairs or res["verdict"] not in ("supported", "rejected"):
        return res
    res.setdefault("evidence", {})[key] = list(pairs)
    e = res["effect"]
    rest = res["reason"].split("; ", 1)[1] if "; " in res["reason"] else ""
    res["reason"] = (f"{what} confounds architecture ({', '.join(pairs)}): {settle}; "
                     f"{mechanism}, so this test cannot discriminate; measured (evidence, not the verdict): "
                     f"{e['estimate']:.3g} {e['unit']} [{e['ci_low']:.3g}, {e['ci_high']:.3g}], alone "
                     f"'{res['verdict']}'" + (f"; {rest}" if rest else ""))
    res["verdict"] = "inconclusive"
    return res


HYPOTHESES = {"seed001.H1": output_head_effect, "seed001.H2": naive_fp16_stability, "seed001.H3": adam_8bit_effect,
              "seed001.H4": bf16_on_frontier, "seed002.H1": fp16_multilabel_divergence, "seed002.H2": bf16_mfu_gain_by_arch,
              "seed002.H3": precision_sensitivity_by_arch}


def evaluate_all(df: pd.DataFrame, rules: Rules = Rules()) -> dict[str, dict]:
    """Every hypothesis' verdict; a rule that fails on odd data is ``inconclusive``, naming the error."""
    out = {}
    for hid, fn in HYPOTHESES.items():
        try:
            out[hid] = fn(df, rules)
        except Exception as e:  # noqa: BLE001 - the comparison must finish; the reason names the error
            out[hid] = result(fn, inspect.getdoc(fn).split(".")[0], "inconclusive",
                              f"could not evaluate: {type(e).__name__}: {e}")
    return at_premise(out, df)


SEED_HEAD = {"labels": 4_000, "params": 3_300_000}
"""Seed 001's premise for H1 and H3: EUR-Lex's ~4k labels (H1) and its ~3.3M-parameter classifier head (H3)."""
UNTESTABLE_HERE = VERDICTS[-1]


def premise_unmet(hid: str, labels: int, params: int) -> str:
    """What a run set with at most ``labels`` labels and a head of at most ``params`` parameters lacks
    of seed 001's premise for ``hid`` (H1: ~4k labels; H3: a ~3.3M-parameter head), in words; ''
    where reached or where the hypothesis names no such premise."""
    if hid == "seed001.H1" and labels < SEED_HEAD["labels"]:
        return f"needs ~{SEED_HEAD['labels']:,} labels; the most here: {labels:,}"
    if hid == "seed001.H3" and params < SEED_HEAD["params"]:
        return f"needs a ~{SEED_HEAD['params'] / 1e6:.1f}M-parameter head; the largest here: {params / 1e3:,.0f}k"
    return ""


def at_premise(hyps: dict[str, dict], df: pd.DataFrame) -> dict[str, dict]:
    """A verdict drawn away from the seed's premise (too few labels, too small a head) is not the
    seed's verdict: it becomes "untestable here", naming what is missing and what was measured below
    it (``measured_verdict``). The classification runs' label counts and head sizes are ``df``'s."""
    cls = df[df["scenario"].isin(["C", "D", "E", "F"])] if "scenario" in df else df.iloc[:0]
    col = lambda c: pd.to_numeric(cls[c], errors="coerce").max() if c in cls and len(cls) else np.nan  # noqa: E731
    labels, params = col("run.num_labels"), col("model.head_params")
    out = dict(hyps)
    for hid, h in hyps.items():
        missing = premise_unmet(hid, int(labels), int(params)) if np.isfinite(labels) and np.isfinite(params) else ""
        if missing and h["verdict"] != UNTESTABLE_HERE:
            out[hid] = {**h, "verdict": UNTESTABLE_HERE, "measured_verdict": h["verdict"],
                        "reason": f"{missing}; measured below it: {h['verdict']} ({h['reason']})"}
    return out


def verdict_table(hyps: dict[str, dict]) -> pd.DataFrame:
    """One row per hypothesis: claim, verdict, effect and CI, reason."""
    rows = []
    for hid, h in hyps.items():
        e = h["effect"] or {}
        rows.append({"id": hid, "claim": h["claim"], "verdict": h["verdict"], "effect": e.get("name"),
                     "estimate": e.get("estimate"), "ci_low": e.get("ci_low"), "ci_high": e.get("ci_high"),
                     "unit": e.get("unit"), "reason": h["reason"]})
    return pd.DataFrame(rows)


_MARKER = re.compile(r"^([-+*#>|])")
_NUMBERED = re.compile(r"^(\d+)([.)])")


def markdown_text(text: str) -> str:
    """Plain text as one Markdown paragraph: lines joined, a leading list/heading/quote/table mark escaped."""
    one = " ".join(str(text).split())
    return _NUMBERED.sub(r"\1\\\2", _MARKER.sub(r"\\\1", one))


def verdict_markdown(hid: str, h: dict) -> str:
    """One hypothesis for a notebook: id, claim, verdict and reason, then its rule as a quote."""
    return (f"**{hid}** — {markdown_text(h['claim'])}: **{h['verdict']}** ({markdown_text(h['reason'])})\n\n"
            f"> {markdown_text(h['rule'])}")
