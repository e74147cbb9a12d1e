"""Evidence gates: the analysis does not speak where the evidence is empty. A scenario whose
reference config did not beat the trivial predictor (or whose records carry no trivial
baseline) gives no rank, flip, verdict or recommendation on quality; nothing is "safe" and no
default is named from one seed; failed runs (stalled, diverged, degraded against the
reference) are never the fastest or on a Pareto frontier; a degenerate micro-F1 gives way to
P@1. Hand-built records with known answers (tests/fixtures/records.py)."""
from __future__ import annotations

import dataclasses

import pytest
from conftest import line_with

from benchlib.analysis import gates, tables
from benchlib.analysis import report
from benchlib.analysis import charts
from benchlib.analysis import hypotheses as hy
from benchlib.analysis import recommend
from benchlib.analysis.recommend import safety
from benchlib.analysis.stats import Rules
from benchlib.core.dtypes import REGISTRY
from benchlib.core.scenarios import SCENARIOS
from fixtures.records import grid, make_record, write_run

FAST = Rules(n_boot=400)
# per task: the threshold-free metric that decides "learned", the trivial predictor, its value
TRIVIAL = {"clm": ("val_loss", "unigram", 7.5), "mlm": ("val_loss", "unigram", 7.5),
           "multilabel": ("p_at_1", "label_frequency", 0.107), "singlelabel": ("accuracy", "majority_class", 0.1)}


def with_baseline(rec: dict, beats: bool = True, **metrics) -> dict:
    """``rec`` as training writes it since it measures the trivial predictor: the predictor's
    name and value of the learned metric, and whether the run clearly beat it; a multi-label
    record's P@1 (always recorded) is its micro-F1 unless given."""
    if rec["status"] in ("oom", "error", "skipped"):
        return rec
    metric, name, value = TRIVIAL[SCENARIOS[rec["scenario"]].task]
    m = rec["metrics"]
    if metric == "p_at_1":
        m.setdefault("quality/p_at_1", m.get("quality"))
    m.update({"baseline/name": name, "quality/learned_metric": metric, f"baseline/{metric}": value,
              "quality/beats_baseline": beats, **metrics})
    return rec


def frame(records, beats=True):
    return tables.study_frame([with_baseline(r, beats) for r in records])


def seeds(scn, cfg, values, key="quality", **kw):
    return [make_record(scn, cfg, k, **{key: v}, **kw) for k, v in enumerate(values)]


def stalled(rec: dict) -> dict:
    """As training writes a run that did not beat its trivial predictor."""
    rec["status"], rec["reason"] = "stalled", "did not clearly beat the trivial baseline"
    return with_baseline(rec, beats=False)


# ---- learned / not learned -------------------------------------------------------------------
def two_task_study(d_learned: bool):
    """A (val loss) learned; D (P@1 as its micro-F1) learned or not. bf16_pure trails amp_bf16
    by 3% on A and leads it by 20% on D, tight seeds: a flip if D counts. amp_bf16_fp32_head
    beats amp_bf16 on D only: seed 001's H1 supported if D counts."""
    q = {("A", "fp32_baseline"): 3.00, ("A", "amp_bf16"): 3.00, ("A", "bf16_pure"): 3.09,
         ("A", "amp_bf16_fp32_head"): 3.00,
         ("D", "fp32_baseline"): 0.70, ("D", "amp_bf16"): 0.70, ("D", "bf16_pure"): 0.84,
         ("D", "amp_bf16_fp32_head"): 0.84}
    recs = grid("AD", ["fp32_baseline", "amp_bf16", "bf16_pure", "amp_bf16_fp32_head"],
                value=lambda s, c, k: {"quality": q[s, c] * (1 + 0.001 * k), "throughput": 100 + k})
    return tables.study_frame([with_baseline(r) if r["scenario"] == "A" or d_learned else stalled(r)
                                 for r in recs])


def overfit_study(root, overfit: bool):
    """A at 10k steps: fp16_naive ends 12% lower in val loss than amp_bf16, the reference. With
    ``overfit``, each reference run's validation loss bottomed out mid-run (4.05 at step 3999) and
    rose to its end: the gap is how fast each config memorised a small corpus."""
    end = {"amp_bf16": 5.2, "fp16_naive": 4.6}
    for r in grid("A", list(end), value=lambda s, c, k: {"quality": end[c] + 0.01 * k}):
        final = r["metrics"]["quality"]
        low = 4.05 if overfit and r["config"] == "amp_bf16" else final + 0.1
        evals = [(999, final + 0.8), (3999, low), (9999, final)]
        write_run(root, with_baseline(r), [{"step": s, "eval": {"val_loss": v}} for s, v in evals])
    return tables.load_study(root, rules=FAST)


def test_an_lm_whose_reference_overfit_gives_no_quality_verdict_but_keeps_its_runs_healthy(tmp_path):
    clean, over = overfit_study(tmp_path / "clean", False), overfit_study(tmp_path / "over", True)
    assert tables.learned_scenarios(clean, FAST).set_index("scenario").loc["A", "learned"] is True
    assert clean["quality_established"].all()  # the same end-of-run numbers count without the rise
    lt = tables.learned_scenarios(over, FAST).set_index("scenario")
    assert lt.loc["A", "learned"] is True and "3/3" in lt.loc["A", "overfit"]  # it learned, then memorised
    assert not over["quality_established"].any()
    assert "overfit" in gates.why_not_established(over, "A")
    assert set(over["health"]) == {"ok"}  # overfitting is not a run that failed to learn
    verdict = {s: safety(d, FAST).set_index("config").loc["fp16_naive", "verdict"] for s, d in
               (("clean", clean), ("over", over))}
    assert verdict == {"clean": "safe", "over": "untestable"}


def test_a_scenario_whose_reference_did_not_learn_gives_no_flip_verdict_or_recommendation():
    learned, not_learned = two_task_study(True), two_task_study(False)
    assert report.compare(learned, FAST).result["flips"]  # the data do flip when D counts
    assert hy.output_head_effect(learned, FAST)["verdict"] == "supported"

    lt = tables.learned_scenarios(not_learned, FAST).set_index("scenario")
    assert lt.loc["A", "learned"] is True and lt.loc["D", "learned"] is False
    assert lt.loc["D", "reference"] == "fp32_baseline"
    r = report.compare(not_learned, FAST).result
    assert r["flips"] == []
    assert r["learned"]["D"]["learned"] is False and r["learned"]["A"]["learned"] is True
    assert "not learned" in r["notes"][1]
    assert r["recommendations"]["per_task"]["D"][0].startswith("D: no recommendation")
    assert not any(line.startswith(recommend.PICK) for line in r["recommendations"]["universal"])
    # stalled where nothing learned says nothing of a config: only A's evidence is cited
    assert all(" D:" not in line and "unsafe on A:" in line for line in r["recommendations"]["avoid"])
    assert {e["safe"] for e in r["recommendation_evidence"] if e["scenario"] == "D"} == {None}
    assert {e["verdict"] for e in r["recommendation_evidence"] if e["scenario"] == "D"} == {"untestable"}
    h1 = r["hypotheses"]["seed001.H1"]
    assert h1["verdict"] == "untestable" and set(h1["evidence"]["not_learned"]) == {"D"}
    stats = tables.config_stats(not_learned)
    assert stats.query("scenario == 'D' and metric == 'quality'")["rank"].isna().all()
    assert stats.query("scenario == 'D' and metric == 'throughput'")["rank"].notna().all()  # speed still reported


def test_the_summary_of_a_not_learned_scenario_says_so_and_ranks_no_quality():
    s = tables.summarize(two_task_study(False), "D")
    m = s[s["seed"] == "mean"]
    assert m["rank_quality"].isna().all() and m["pareto_throughput"].isna().all()
    assert m["throughput"].notna().all()  # measured, and reported
    assert "not learned" in m["note"].iloc[0] and m["learned"].iloc[0] is False
    text = tables.describe_experiment(s, "D")
    assert "not learned" in text and "none: quality not established" in text
    assert "no frontier" in str(charts.pareto_chart(s).to_dict()["title"])


def test_records_without_a_trivial_baseline_leave_learned_unknown():
    df = tables.study_frame(grid("A", ["fp32_baseline", "amp_bf16"]))  # records from before baselines
    lt = tables.learned_scenarios(df)
    assert lt["learned"].tolist() == [None]
    assert lt["reason"].iloc[0].startswith("unknown") and "no trivial baseline" in lt["reason"].iloc[0]  # the verdict, and why
    rec, saf = recommend.recommendations(df, tables.config_stats(df), FAST)
    assert saf["safe"].isna().all() and rec["per_task"]["A"][0].startswith("A: no recommendation")
    assert "unknown: records carry no trivial baseline" in tables.summarize(df, "A")["note"].iloc[0]
    assert tables.summarize(df, "A")["rank_quality"].isna().all()


def test_no_reference_config_leaves_learned_unknown():
    df = frame(grid("A", ["bf16_pure", "fp16_naive"]))  # beat their baselines, but no reference ran
    lt = tables.learned_scenarios(df).iloc[0]
    assert lt["learned"] is None and lt["reason"].startswith("unknown: no reference config")


# ---- noise needs seeds on both sides ---------------------------------------------------------
def test_with_one_seed_no_config_is_safe_and_no_default_is_named():
    cfgs = (("fp32_baseline", 100, 1.0), ("amp_bf16", 200, 1.002), ("bf16_pure", 220, 0.999))
    recs = [make_record(s, c, 0, throughput=t, quality=(3.0 if s == "A" else 0.5) * f) for s in "AC" for c, t, f in cfgs]
    df = frame(recs)
    rec, saf = recommend.recommendations(df, tables.config_stats(df), FAST)
    assert saf["safe"].isna().all() and not saf["tested"].any() and set(saf["verdict"]) == {"not tested"}
    lines = rec["universal"] + [line for ls in rec["per_task"].values() for line in ls]
    assert not any(line.startswith(recommend.PICK) or "fastest safe" in line for line in lines)
    assert rec["universal"][0].startswith(recommend.NO_PICK)
    assert line_with(rec["per_task"]["A"][0], "A", "no candidate", "safe")
    text = tables.describe_experiment(tables.summarize(df, "A"), "A")
    best = next(ln for ln in text.splitlines() if ln.startswith("- best quality: "))
    assert "(one seed;" in best and "too few seeds to tell" in best  # the best's own seeds, then the others'


def test_a_config_with_fewer_seeds_than_needed_is_not_tested_while_the_others_are():
    # amp_bf16 looks best with one seed (a config run at one seed by design, like the compile
    # ablation): it is not tested, and the configs with measured noise are tested against the
    # reference, not left untested by it
    df = frame(seeds("A", "amp_bf16", [2.98]) + seeds("A", "fp32_baseline", [3.00, 3.01, 2.99])
               + seeds("A", "bf16_pure", [3.00, 3.02, 2.99]))
    s = recommend.safety(df, FAST).set_index("config")
    assert (s["best"] == "fp32_baseline").all() and (s["reference"] == "fp32_baseline").all()
    assert s.loc["fp32_baseline", "safe"] is True and s.loc["bf16_pure", "safe"] is True
    assert s.loc["amp_bf16", "safe"] is None and s.loc["amp_bf16", "verdict"] == "not tested"


@pytest.mark.parametrize("n_seeds, tested", [(2, False), (3, True)])
def test_two_seeds_are_too_few_to_call_anything_safe_three_are_enough(n_seeds, tested):
    def value(s, c, k):
        base = 3.0 if s == "A" else 0.5
        return {"throughput": {"fp32_baseline": 100, "amp_bf16": 200}[c] + k,
                "quality": base * (1 + 0.001 * k + (0.0001 if c == "amp_bf16" else 0))}
    df = frame(grid("AC", ["fp32_baseline", "amp_bf16"], seeds=tuple(range(n_seeds)), value=value))
    rec, saf = recommend.recommendations(df, tables.config_stats(df), FAST)
    amp = saf[saf["config"] == "amp_bf16"]
    assert amp["tested"].all() == tested and amp["safe"].eq(True).all() == tested
    assert rec["universal"][0].startswith(recommend.PICK + "amp_bf16") == tested


def test_with_one_seed_a_verdict_says_how_many_seeds_it_needs():
    df = frame(grid("AC", ["amp_bf16", "amp_bf16_fp32_head"], seeds=(0,)))
    h = hy.output_head_effect(df, FAST)
    assert h["verdict"] == "inconclusive"
    assert f"needs >= {FAST.min_seeds}" in h["reason"] and "C/amp_bf16 (1 of 3 seeds)" in h["reason"]


# ---- failed configs are never fastest nor on a frontier --------------------------------------
def failing_study():
    """A, 3 seeds: amp_bf16 (200/s) sound; fp16_naive (300/s) stalled; fp16_naive_noscale
    (400/s) diverged; bf16_naive (350/s) degraded by its own curve; bf16_pure (250/s) 10% worse
    than the reference on every seed (degraded against it). Each other failing config has the
    fp32 quality, so only its failure keeps it off the frontier."""
    speed = {"fp32_baseline": 100, "amp_bf16": 200, "bf16_pure": 250, "fp16_naive": 300, "bf16_naive": 350,
             "fp16_naive_noscale": 400}
    recs = grid("A", list(speed), value=lambda s, c, k: {
        "throughput": speed[c] + k, "quality": (3.3 if c == "bf16_pure" else 3.0) + 0.001 * k})
    out = []
    for r in recs:
        if r["config"] == "fp16_naive":
            r = stalled(r)
        elif r["config"] == "fp16_naive_noscale":
            r["status"], r["metrics"]["stability/diverged_step"] = "diverged", 30
        elif r["config"] == "bf16_naive":
            r["status"], r["reason"] = "degraded", "training loss rose 10% above its minimum and stayed there"
        out.append(with_baseline(r) if r["status"] in ("ok", "degraded") else r)
    return tables.study_frame(out)


def test_failed_configs_are_excluded_from_fastest_and_the_pareto_front():
    df = failing_study()
    m = tables.summarize(df, "A").query("seed == 'mean'").set_index("config")
    failed = ["fp16_naive", "fp16_naive_noscale", "bf16_naive", "bf16_pure"]
    assert m.loc[failed, "excluded"].all() and not m.loc[["fp32_baseline", "amp_bf16"], "excluded"].any()
    assert not m.loc[failed, "pareto_throughput"].any() and m.loc["amp_bf16", "pareto_throughput"]
    assert m.loc[failed, "rank_throughput"].isna().all() and m.loc["amp_bf16", "rank_throughput"] == 1
    assert m.loc["fp16_naive", "throughput"] == 301  # measured, and reported
    assert "stalled 3/3" in m.loc["fp16_naive", "excluded_reason"]
    assert "degraded 3/3" in m.loc["bf16_pure", "excluded_reason"]
    text = tables.describe_experiment(tables.summarize(df, "A"), "A")
    assert "amp_bf16" in line_with(text, "fastest:") and "fp16_naive" not in line_with(text, "fastest:")
    assert line_with(text, "excluded", "fastest", "frontier", "fp16_naive")  # measured, yet not a candidate
    chart = charts.quality_scatter(tables.summarize(df, "A")).to_dict()
    rows = [r for rows in chart["datasets"].values() for r in rows if "point" in r]
    assert {r["config"] for r in rows if r["frontier"]} == {"amp_bf16"}
    # the diverged config has no point: diverged runs give no throughput
    assert {r["config"] for r in rows if r["point"] == "excluded (failed run)"} == set(failed) - {"fp16_naive_noscale"}


def test_a_speed_study_judges_no_quality_and_keeps_stalled_runs_on_the_speed_frontier():
    """A speed study's short runs (run.judge_quality false): the same failing study gives no
    quality verdict, and only the diverged config leaves the frontiers (it is the one failure
    that is not about quality: it did not finish)."""
    df = failing_study()
    df["run.judge_quality"] = False
    df = tables.apply_gates(df, FAST)
    lt = tables.learned_scenarios(df, FAST).set_index("scenario")
    assert lt.loc["A", "learned"] is None and "not judged" in lt.loc["A", "reason"]
    assert not df["quality_established"].any()
    m = tables.summarize(df, "A").query("seed == 'mean'").set_index("config")
    assert not m.loc[["fp16_naive", "bf16_naive", "bf16_pure"], "excluded"].any()
    assert m.loc["fp16_naive_noscale", "excluded"]
    assert m.loc["bf16_naive", "rank_throughput"] == 1  # 350/s, the fastest that finished
    r = report.compare(df, FAST).result
    assert r["flips"] == [] and r["recommendations"]["avoid"] == []
    assert "not judged" in r["recommendations"]["per_task"]["A"][0]
    assert hy.output_head_effect(df, FAST)["verdict"] == "untestable"
    # a quality study of the same records still fails them
    judged = failing_study()
    judged["run.judge_quality"] = True
    assert tables.summarize(tables.apply_gates(judged, FAST), "A").query("seed == 'mean'").set_index(
        "config").loc["fp16_naive", "excluded"]


def test_failed_configs_are_never_the_fastest_recommendation():
    df = failing_study()
    rec, saf = recommend.recommendations(df, tables.config_stats(df), FAST)
    s = saf.set_index("config")
    assert not any(s.loc[c, "safe"] for c in ["fp16_naive", "fp16_naive_noscale", "bf16_naive", "bf16_pure"])
    assert rec["per_task"]["A"][0].startswith("A: fastest safe config amp_bf16")
    assert rec["universal"][0].startswith(recommend.PICK + "amp_bf16")


# ---- degraded against the reference ----------------------------------------------------------
@pytest.mark.parametrize("scenario, ref", [("A", 3.0), ("E", 0.5)])
def test_a_config_is_degraded_beyond_seed_noise_and_the_minimum_effect_not_by_a_fixed_percentage(scenario, ref):
    """Three shared seeds with noise 0.1%: amp_bf16 2% worse on each (beyond noise and above the
    minimum effect) is degraded; bf16_pure 0.2% worse on each (beyond noise, below the minimum
    effect) is safe; amp_fp16 10% worse on one seed only is neither (inconclusive). (Four configs
    with one erratic seed rank too unreliably for the gate; it is lowered here, tested apart.)"""
    sgn = -1 if scenario == "A" else 1  # a worse loss is higher, a worse accuracy lower
    worse = {"amp_bf16": [0.02] * 3, "bf16_pure": [0.002] * 3, "amp_fp16": [0.10, 0.0, 0.0], "fp32_baseline": [0] * 3}
    recs = grid(scenario, list(worse), value=lambda s, c, k: {"quality": ref * (1 + 0.001 * k) * (1 - sgn * worse[c][k])})
    rules = dataclasses.replace(FAST, min_rank_reliability=-1.0)
    df = tables.study_frame([with_baseline(r) for r in recs], rules)
    h = df.set_index(["config", "seed"])
    assert (h.loc["amp_bf16", "health"] == "degraded").all() and (h.loc["amp_bf16", "status"] == "ok").all()
    assert (h.loc["bf16_pure", "health"] == "ok").all() and (h.loc["amp_fp16", "health"] == "ok").all()
    v = recommend.safety(df, rules).set_index("config")["verdict"]
    assert (v["amp_bf16"], v["bf16_pure"], v["amp_fp16"]) == ("degraded", "safe", "inconclusive")
    loose = tables.apply_gates(df, dataclasses.replace(rules, min_effect_loss_pct=5.0, min_effect_score_pct=5.0))
    assert (loose["health"] == "ok").all()  # the minimum effect is the rule's, not hard-wired


def test_no_run_is_degraded_against_a_reference_that_did_not_learn():
    recs = (seeds("A", "fp32_baseline", [3.0, 3.0, 3.0]) + seeds("A", "amp_bf16", [3.3, 3.3, 3.3]))
    df = tables.study_frame(recs)  # no trivial baseline: learned unknown
    assert (df["health"] == "ok").all()


# ---- degenerate micro-F1 ---------------------------------------------------------------------
@pytest.mark.parametrize("f1, extra, metric, best", [
    (0.0, {"p_at_1": {"amp_bf16": 0.80, "bf16_pure": 0.85}}, "p_at_1", "bf16_pure"),  # F1 0 everywhere
    (0.3, {"p_at_1": {"amp_bf16": 0.85, "bf16_pure": 0.80}}, "p_at_1", "amp_bf16"),   # F1 equal everywhere
    (0.0, {"val_loss": {"amp_bf16": 0.05, "bf16_pure": 0.04}}, "val_loss", "bf16_pure"),  # no P@1: val loss, lower
])
def test_a_degenerate_micro_f1_gives_way_to_a_threshold_free_metric_and_says_so(f1, extra, metric, best):
    (key, values), = extra.items()
    recs = [with_baseline(make_record("D", c, k, quality=f1, **{"quality/micro_f1": f1}), **{
        "quality/p_at_1": None, f"quality/{key}": v * (1 + 0.001 * k)}) for c, v in values.items() for k in (0, 1, 2)]
    df = tables.study_frame(recs)
    assert set(df["quality_name"]) == {metric} and (df["quality_record"] == f1).all()
    s = tables.summarize(df, "D")
    m = s.query("seed == 'mean'").set_index("config")
    assert m["rank_quality"].idxmin() == best
    assert f"{tables.label(metric)} ({'lower' if metric == 'val_loss' else 'higher'} is better) stands in" \
        in m["note"].iloc[0] and "degenerate" in m["note"].iloc[0]
    r = report.compare(df, FAST).result
    assert r["quality_metric"]["D"]["name"] == metric and r["quality_metric"]["D"]["degenerate"]
    assert tables.label(metric) in r["notes"][0]


def test_a_micro_f1_that_differs_between_configs_is_kept():
    recs = [with_baseline(make_record("D", c, k, quality=q, **{"quality/micro_f1": q}))
            for c, q in (("amp_bf16", 0.30), ("bf16_pure", 0.32)) for k in (0, 1)]
    df = tables.study_frame(recs)
    assert set(df["quality_name"]) == {"micro_f1"} and not tables.scenario_notes(df)["D"].count("degenerate")


# ---- comparison.json -------------------------------------------------------------------------
def test_comparison_json_carries_the_gates(tmp_path):
    comp = report.compare(failing_study(), FAST)
    r = comp.result
    assert {"learned", "notes", "quality_metric", "health", "excluded"} <= set(r)
    assert r["excluded"]["A"].keys() == {"fp16_naive", "fp16_naive_noscale", "bf16_naive", "bf16_pure"}
    assert {(x["config"], x["seed"], x["health"]) for x in r["health"]["not_ok"]} >= {("bf16_pure", 0, "degraded")}
    assert {"min_gap_closed", "min_rank_reliability", "min_effect_loss_pct", "multitest"} <= set(r["method"]["rules"])
    assert r["method"]["rules"]["reference_configs"] == ["fp32_baseline", "fp32_tf32_matmul", "amp_bf16"]
    assert r["configs_by_definition"]["fp16_naive"]["definition_hash"] == REGISTRY["fp16_naive"].definition_hash
    files = report.write_comparison(comp, tmp_path, formats=())
    learned = (tmp_path / "learned.csv").read_text()
    assert tmp_path / "learned.csv" in files and "fp32_baseline" in learned and "True" in learned


def test_a_speed_only_study_answers_the_speed_hypotheses_and_still_drops_diverged_configs():
    """Short runs at base learn nothing (every run stalled, the reference's too): H4 cannot say
    alone which configs train, so it is untestable; given the configs a quality study passed, the
    frontier is drawn from their speed and memory, the scenarios are named speed-only, and a
    diverged config stays off it."""
    speed = {"fp32_baseline": (100, 2.0), "amp_bf16": (200, 1.5), "bf16_pure": (250, 1.2), "fp16_naive": (300, 1.0)}
    recs = grid("AC", list(speed), value=lambda s, c, k: {"throughput": speed[c][0] + k, "memory": speed[c][1]})
    out = []
    for r in recs:
        if r["config"] == "fp16_naive":
            r["status"], r["metrics"]["stability/diverged_step"] = "diverged", 30
            out.append(r)
        else:
            out.append(stalled(r))
    df = tables.study_frame(out)
    assert not df["quality_established"].any()
    assert hy.bf16_on_frontier(df, FAST)["verdict"] == "untestable"
    passed = {s: set(speed) for s in "AC"}
    h = hy.bf16_on_frontier(df, FAST, passed=passed)
    assert h["evidence"]["speed_only"] == ["A", "C"] and "speed only" in h["reason"]
    assert h["evidence"]["configs"] == ["amp_bf16", "bf16_pure", "fp32_baseline"]  # fp16_naive diverged
    assert h["evidence"]["frontiers"] == {"A-C": {"A": ["bf16_pure"], "C": ["bf16_pure"]}}
    assert h["verdict"] == "rejected"  # the same frontier on both tasks in every resample
    # a config the quality study did not pass is on no frontier, however fast and lean
    h = hy.bf16_on_frontier(df, FAST, passed={s: {"fp32_baseline", "amp_bf16"} for s in "AC"})
    assert h["evidence"]["frontiers"] == {"A-C": {"A": ["amp_bf16"], "C": ["amp_bf16"]}}
    # the quality rules still skip these scenarios
    assert "not_learned" in hy.output_head_effect(df, FAST)["evidence"]


def test_a_speed_only_study_answers_the_mfu_gain_hypothesis_on_matched_architectures():
    """Seed 002's H2 from stalled speed runs: bf16_pure 2x fp32 on RoBERTa (D), 1.5x on GPT-2
    (C); A and B (causal against masked LM) are not a matched pair and change nothing."""
    tps = {("C", "fp32_baseline"): 100, ("C", "bf16_pure"): 150, ("D", "fp32_baseline"): 100, ("D", "bf16_pure"): 200,
           ("A", "fp32_baseline"): 100, ("A", "bf16_pure"): 400, ("B", "fp32_baseline"): 100, ("B", "bf16_pure"): 100}
    recs = grid("ABCD", ["fp32_baseline", "bf16_pure"], seeds=(0, 1, 2),
                value=lambda s, c, k: {"throughput": tps[s, c] + k, "tokens_per_s": tps[s, c] + k})
    h = hy.bf16_mfu_gain_by_arch(tables.study_frame([stalled(r) for r in recs]), FAST)
    assert h["verdict"] == "supported" and h["evidence"]["used"] == ["C-D"]
    assert h["effect"]["estimate"] == pytest.approx(0.5, abs=0.02)
    assert "optimizer update" in h["reason"]  # bf16_pure's speed includes its update's cost


def test_a_failed_config_is_on_no_throughput_memory_frontier_of_h4():
    # fp16_naive is fastest and leanest on both tasks, but stalled on C: left out everywhere
    speed = {"fp32_baseline": (100, 2.0), "amp_bf16": (200, 1.5), "fp16_naive": (300, 1.0)}
    recs = grid("AC", list(speed), value=lambda s, c, k: {"throughput": speed[c][0] + k, "memory": speed[c][1]})
    df = tables.study_frame([stalled(r) if (r["scenario"], r["config"]) == ("C", "fp16_naive") else
                               with_baseline(r) for r in recs])
    h = hy.bf16_on_frontier(df, FAST)
    assert h["evidence"]["configs"] == ["amp_bf16", "fp32_baseline"]
    assert h["evidence"]["frontiers"]["A-C"]["A"] == ["amp_bf16"]


def test_a_run_fine_tuned_from_another_pretrain_checkpoint_than_its_seed_pairs_with_none():
    """The synthetic reference study fine-tuned C-F's seeds from pretrains made on different days: at
    E seed 2, 8 configs loaded one checkpoint and 8 another. A seed's checkpoint is the reference's,
    else the one most of its runs loaded (the later on a tie)."""
    recs = grid(["E"], ["fp32_baseline", "amp_bf16", "bf16_pure"], seeds=(0, 1, 2))
    recs += [make_record("E", c, 3) for c in ("bf16_pure", "amp_bf16_8bit_adam")]  # no reference config at seed 3
    dates = {("amp_bf16", 2): "2026-11-23", ("amp_bf16_8bit_adam", 3): "2026-11-25"}
    for r in recs:
        r["pretrained"] = {"checkpoint": {"date": dates.get((r["config"], r["seed"]), "2026-11-24")}}
    df = tables.study_frame(recs)
    odd = df.loc[df["checkpoint_note"] != "", ["config", "seed"]].values.tolist()
    assert sorted(odd) == [["amp_bf16", 2], ["bf16_pure", 3]]  # seed 3: a tie, the later checkpoint is the seed's
    note = df.loc[(df["config"] == "amp_bf16") & (df["seed"] == 2), "checkpoint_note"].item()
    assert "2026-11-23" in note and "2026-11-24" in note
    assert "2 of 11 run(s) fine-tuned from another pretrain checkpoint" in gates.scenario_notes(df)["E"]
    counted = gates.quality_runs(df.assign(quality_established=True))
    assert not counted[df["checkpoint_note"] != ""].any() and counted[df["checkpoint_note"] == ""].all()
    for r in recs:  # one checkpoint for every run: nothing is set apart
        r["pretrained"]["checkpoint"]["date"] = "2026-11-24"
    assert (tables.study_frame(recs)["checkpoint_note"] == "").all()
