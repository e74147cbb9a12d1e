"""Verdicts that know when a test cannot discriminate: configs named by their numeric
definition, untestable verdicts (both arms at a ceiling, a scenario that did not learn, configs
that cannot be told apart), paired contrasts, the gap-closed gate, flips a reader can use, and
controls that are never picked. Hand-built records with known answers."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from benchlib.analysis import contrasts, findings, recommend, report, tables
from benchlib.analysis import hypotheses as hy
from benchlib.analysis.flips import order_reversals
from benchlib.analysis.tables import ConfigIdentityError
from benchlib.analysis.stats import Rules
from benchlib.core.dtypes import REGISTRY
from fixtures.records import grid, make_record
from test_gates import with_baseline

FAST = Rules(n_boot=400)


def frame(records, rules=FAST):
    return tables.study_frame([with_baseline(r) for r in records], rules)


def old_dtype(**fields) -> dict:
    """A ``dtype`` entry as records wrote it before the moments' storage and the definition hash
    were part of a configuration."""
    base = {"param_dtype": "fp32", "autocast_dtype": None, "loss_scaling": "none", "loss_scale": 1.0,
            "optimizer": "adamw", "update_rounding": "nearest", "head_dtype": None, "compile": True, "tf32": True,
            "adam_eps": 1e-08, "fp8": "none"}
    return {**base, **fields}


# ---- config identity ---------------------------------------------------------------------------
def test_an_old_record_is_named_by_its_definition():
    # the reference study ran "fp16_naive" with fp16 Adam moments (model.half() + torch AdamW):
    # by definition that is today's fp16_fp16_states, and its eps-1e-4 variant a control
    recs = [make_record("A", "fp16_naive", k) for k in range(3)] + [make_record("A", "fp16_naive_eps1e4", 0),
                                                                    make_record("A", "fp32_true", 0)]
    for r in recs[:3]:
        r["dtype"] = old_dtype(name="fp16_naive", param_dtype="fp16", loss_scaling="static", loss_scale=1024.0)
    recs[3]["dtype"] = old_dtype(name="fp16_naive_eps1e4", param_dtype="fp16", loss_scaling="static",
                                 loss_scale=1024.0, adam_eps=1e-4)
    df = frame(recs).set_index("run_id")
    assert df.loc["A/fp16_naive/seed0", "config"] == "fp16_fp16_states"
    assert df.loc["A/fp16_naive/seed0", "config_recorded"] == "fp16_naive"
    assert df.loc["A/fp16_naive/seed0", "definition_hash"] == REGISTRY["fp16_fp16_states"].definition_hash
    assert (df.loc["A/fp16_naive_eps1e4/seed0", "config"], df.loc["A/fp16_naive_eps1e4/seed0", "role"]) == \
        ("fp16_fp16_states_eps1e4", "control")
    assert df.loc["A/fp32_true/seed0", "config"] == "fp32_baseline"


def test_a_registry_name_whose_definition_changed_is_a_legacy_config_never_picked():
    recs = grid("AC", ["fp32_baseline", "amp_bf16"]) + grid("AC", ["amp_bf16"], seeds=(3, 4, 5))
    for r in recs:
        if r["config"] == "amp_bf16" and r["seed"] >= 3:  # another eps than any registry entry
            r["dtype"] = old_dtype(name="amp_bf16", autocast_dtype="bf16", adam_eps=3e-6)
            r["metrics"]["throughput"] = 1000.0
    df = frame(recs)
    legacy = sorted(c for c in df["config"].unique() if c.startswith("amp_bf16@"))
    assert len(legacy) == 1 and set(df.loc[df["config"] == legacy[0], "role"]) == {"legacy"}
    rec, saf = recommend.recommendations(df, tables.config_stats(df), FAST)
    assert legacy[0] not in recommend.recommended_configs(saf).values()  # the fastest, yet no pick
    assert not any(legacy[0] in line for line in rec["universal"])


def test_two_records_with_one_name_and_different_definitions_are_refused_naming_them():
    # a name the registry does not know, over two definitions it does not know either (a
    # definition the registry has would be named by the registry: bf16 weights = bf16_naive)
    a, b = make_record("A", "my_config", 0), make_record("C", "my_config", 1)
    a["dtype"] = old_dtype(name="my_config", param_dtype="bf16", adam_eps=3e-6)
    b["dtype"] = old_dtype(name="my_config", param_dtype="bf16", adam_eps=5e-6)
    with pytest.raises(ConfigIdentityError) as e:
        frame([a, b])
    msg = str(e.value)
    assert "\n" not in msg and "A/my_config/seed0" in msg and "C/my_config/seed1" in msg and "my_config" in msg
    b["dtype"] = dict(a["dtype"])  # one definition: merged
    assert set(frame([a, b])["config"]) == {"my_config"}


# ---- untestable: both arms at the same ceiling or floor -----------------------------------------
def fp16_study(config, steps_lm, steps_cls):
    """fp16 runs on A (LM) and C (classification); ``steps_*`` per seed: the divergence step,
    or None for a run that trained to the end. fp32_baseline shows both scenarios learned."""
    recs = grid("AC", ["fp32_baseline"])
    for s, steps in (("A", steps_lm), ("C", steps_cls)):
        for k, step in enumerate(steps):
            recs.append(make_record(s, config, k) if step is None else
                        make_record(s, config, k, status="diverged", diverged_step=step))
    return frame(recs)


def test_two_arms_that_always_diverge_are_untestable_on_the_rate_and_compared_by_time():
    h = hy.naive_fp16_stability(fp16_study("fp16_naive_noscale", [7, 8, 9], [30, 33, 36]), FAST)
    assert h["verdict"] == "supported" and "untestable" in h["reason"]  # the rate test could not discriminate
    assert h["effect"]["estimate"] == pytest.approx(np.mean(np.log([7, 8, 9])) - np.mean(np.log([30, 33, 36])))
    assert h["effect"]["ci_high"] < 0  # LM diverges sooner
    same = hy.naive_fp16_stability(fp16_study("fp16_naive_noscale", [20, 31, 25], [24, 21, 30]), FAST)
    assert same["verdict"] == "inconclusive" and same["effect"]["ci_low"] < 0 < same["effect"]["ci_high"]
    never = hy.naive_fp16_stability(fp16_study("fp16_naive_noscale", [None] * 3, [None] * 3), FAST)
    assert never["verdict"] == "untestable" and never["effect"] is None
    assert "LM 0/3, classification 0/3" in never["reason"]
    rate = hy.naive_fp16_stability(fp16_study("fp16_naive_noscale", [7, 8, 9], [None] * 3), FAST)
    assert rate["verdict"] == "supported" and rate["effect"]["estimate"] == 1.0
    # 3 runs of 3 against 0 of 3 measure a rate difference of 1 to within its width, not exactly:
    # the interval is not the point [1, 1] a bootstrap of all-or-nothing arms gives
    assert 0 < rate["effect"]["ci_low"] < 0.5 and rate["effect"]["ci_high"] == 1.0


def test_a_rate_difference_from_few_runs_keeps_the_width_they_leave():
    """3 unstable LM runs of 3 against 2 of 5 on classification: a percentile bootstrap over the
    runs gives [0.2, 1] (it would say 'supported'), Fisher's exact test p = 0.20; the score
    interval straddles 0 and the verdict waits."""
    h = hy.naive_fp16_stability(fp16_study("fp16_naive_noscale", [7, 8, 9], [30, 40, None, None, None]), FAST)
    e = h["effect"]
    assert h["verdict"] == "inconclusive" and e["ci_low"] < 0 < e["ci_high"]
    assert e["estimate"] == pytest.approx(0.6) and h["evidence"]["fisher_exact_p"] > 0.05


def test_the_fp16_verdicts_say_which_configuration_they_tested():
    # only the fp16-moment configs ran (the committed studies' "fp16_naive*"): the verdicts test
    # second-moment underflow, and say that the loss-scaling question needs other runs
    h2 = hy.naive_fp16_stability(fp16_study("fp16_fp16_states_noscale", [7, 8, 9], [30, 33, 36]), FAST)
    assert h2["evidence"]["config"] == "fp16_fp16_states_noscale" and h2["evidence"]["stand_in"]
    assert "fp16_naive_noscale" in h2["reason"] and "loss scaling" in h2["reason"]
    own = hy.naive_fp16_stability(fp16_study("fp16_naive_noscale", [7, 8, 9], [30, 33, 36]), FAST)
    assert own["evidence"]["config"] == "fp16_naive_noscale" and not own["evidence"]["stand_in"]


def test_a_scenario_that_did_not_learn_enters_no_divergence_verdict():
    df = fp16_study("fp16_naive_noscale", [7, 8, 9], [None] * 3)
    df = tables.apply_gates(df.assign(**{"quality/beats_baseline": df["scenario"].ne("A")}), FAST)
    h = hy.naive_fp16_stability(df, FAST)
    assert h["verdict"] == "untestable" and set(h["evidence"]["not_learned"]) == {"A"}


# ---- paired contrasts ---------------------------------------------------------------------------
def test_a_shared_seed_offset_is_found_by_the_paired_contrast_and_missed_unpaired():
    # the seed moves every config by +-0.1 (data order, initialisation); bf16_naive is 0.02 below
    # the reference on each seed: paired, a 3.3% gap with a tight CI; unpaired, lost in the spread
    ref = pd.Series([0.50, 0.60, 0.70], index=[0, 1, 2])
    x = ref - 0.02
    paired = contrasts.contrast(x, ref, +1, FAST)
    unpaired = contrasts.contrast(x.set_axis([3, 4, 5]), ref, +1, FAST)
    assert paired["paired"] and paired["ci_low"] > 3.0 and contrasts.tests(paired, 1.0)["p_worse"] < 0.05
    assert unpaired["paired"] is False and unpaired["ci_low"] < 0 < unpaired["ci_high"]
    recs = ([make_record("C", "fp32_baseline", k, quality=v) for k, v in ref.items()]
            + [make_record("C", "bf16_naive", k, quality=v) for k, v in x.items()])
    s = recommend.safety(frame(recs), FAST).set_index("config")
    assert s.loc["bf16_naive", "verdict"] == "degraded" and s.loc["bf16_naive", "paired"]


def test_a_contrast_over_seeds_that_are_not_shared_says_it_is_unpaired():
    recs = ([make_record("C", "fp32_baseline", k, quality=0.5 + 0.01 * k) for k in range(3)]
            + [make_record("C", "amp_bf16", k, quality=0.5 + 0.01 * (k - 3)) for k in range(3, 6)])
    s = recommend.safety(frame(recs), FAST).set_index("config")
    assert s.loc["amp_bf16", "paired"] is False and "unpaired" in s.loc["amp_bf16", "reason"]


# ---- the gap-closed gate ------------------------------------------------------------------------
@pytest.mark.parametrize("val_loss, extra, learned", [
    (6.82, {"quality/loss_floor": 0.27}, False),   # B of the reference study: 9% of the way to its floor
    (2.40, {"quality/loss_floor": 2.18}, True),    # A: 96%
    (6.82, {"quality/floor": 0.27, "quality/gap_closed": 0.09}, False),  # a new record's own share
    (3.54, {}, True),                              # no floor known: 53% of the way to a loss of 0
    (6.82, {}, False),                             # no floor known: 9%
])
def test_a_plateau_that_closes_little_of_the_gap_to_its_floor_is_not_learned(val_loss, extra, learned):
    recs = grid("AC", ["fp32_baseline", "amp_bf16", "bf16_pure"], value=lambda s, c, k: {
        "quality": (val_loss * (1 + 0.001 * k + 0.01 * (c == "bf16_pure")) if s == "A" else 0.8), **(
            extra if s == "A" else {})})
    df = tables.study_frame([with_baseline(r, **{"baseline/val_loss": 7.48}) if r["scenario"] == "A" else
                             with_baseline(r) for r in recs], FAST)
    lt = tables.learned_scenarios(df, FAST).set_index("scenario")
    assert lt.loc["A", "learned"] is learned and lt.loc["C", "learned"] is True
    a = df[df["scenario"] == "A"]
    assert a["quality_established"].all() == learned and (a["health"] == "stalled").all() != learned
    r = report.compare(df, FAST).result
    assert all("A" not in f.get("ranks", {}) or learned for f in r["flips"])
    if not learned:
        assert "not learned" in r["learned"]["A"]["reason"]
        assert {e["verdict"] for e in r["recommendation_evidence"] if e["scenario"] == "A"} == {"untestable"}


def test_configs_that_cannot_be_told_apart_enter_no_verdict_but_a_failure_still_counts():
    # six candidates whose order on C changes from seed to seed; one diverges
    cfgs = ["fp32_baseline", "fp32_tf32_matmul", "amp_fp16", "amp_bf16", "bf16_pure", "amp_bf16_fp32_head"]
    rng = np.random.default_rng(1)
    noise = {(c, k): rng.normal(0, 0.01) for c in cfgs for k in range(3)}
    recs = grid("C", cfgs, value=lambda s, c, k: {"quality": 0.8 + noise[c, k]})
    recs += [make_record("C", "amp_fp16_8bit_adam", k, status="diverged", diverged_step=20) for k in range(3)]
    df = frame(recs)
    rel = df.attrs["reliability"]["C"]
    assert rel["told_apart"] is False and rel["reliability"] < FAST.min_rank_reliability
    assert not df["quality_established"].any()
    s = recommend.safety(df, FAST).set_index("config")
    assert set(s.loc[cfgs, "verdict"]) == {"untestable"} and s.loc["amp_fp16_8bit_adam", "safe"] is False
    assert tables.config_stats(df).query("metric == 'quality'")["rank"].isna().all()
    strict = dataclasses.replace(FAST, min_rank_reliability=-1.0)  # the level is the rule's
    assert tables.apply_gates(df, strict)["quality_established"].all()


def test_a_degraded_control_opens_verdicts_where_candidates_cannot_be_told_apart_but_not_ranks():
    """C's candidates sit within noise of each other (order from seed to seed); the eps control
    loses 20%: the scenario detects a defect, so each config is judged against fp32, while quality
    ranks and flips stay closed. Without the control, nothing is judged."""
    cfgs = ["fp32_baseline", "fp32_tf32_matmul", "amp_fp16", "amp_bf16", "bf16_pure", "amp_bf16_fp32_head"]
    noise = {(c, k): v for (c, k), v in zip([(c, k) for c in cfgs for k in range(3)],
                                            np.random.default_rng(7).normal(0, 0.002, 18))}
    recs = grid("CE", cfgs, value=lambda s, c, k: {"quality": (0.8 if s == "C" else 0.7) + noise[c, k]
                                                   + (0.02 * (cfgs.index(c) - k) if s == "E" else 0)})
    ctrl = grid("CE", ["amp_bf16_eps1e4"], value=lambda s, c, k: {"quality": 0.64 + 0.001 * k})
    df = frame(recs + ctrl)
    rel = df.attrs["reliability"]["C"]
    assert rel["told_apart"] is False and rel["detects"] == ["amp_bf16_eps1e4"]
    c = df[df["scenario"] == "C"]
    assert c["quality_established"].all() and not c["quality_ranked"].any()
    s = recommend.safety(df, FAST).set_index(["scenario", "config"])
    assert s.loc[("C", "amp_bf16_eps1e4"), "verdict"] == "degraded"
    assert s.loc[("C", "amp_bf16"), "verdict"] in ("safe", "inconclusive")  # judged, not untestable
    q = tables.config_stats(df).query("metric == 'quality'").set_index(["scenario", "config"])
    assert q.loc["C", "rank"].isna().all() and q.loc["C", "mean"].notna().all()
    assert not (order_reversals(df, FAST).query("metric == 'quality'")[["better_on", "worse_on"]] == "C").any().any()
    alone = frame(recs)  # no control: the scenario has shown nothing
    assert alone.attrs["reliability"]["C"]["detects"] == [] and not alone.loc[alone["scenario"] == "C",
                                                                              "quality_established"].any()
    # a control 1.5% down: degraded beyond the 1% minimum effect, but not unmistakably (< 2x): still closed
    def fp32(s, k):
        return (0.8 if s == "C" else 0.7) + noise["fp32_baseline", k] - (0.02 * k if s == "E" else 0)
    slight = grid("CE", ["amp_bf16_eps1e4"], value=lambda s, c, k: {"quality": fp32(s, k) * (0.985 + 0.0005 * k)})
    df = frame(recs + slight)
    con = pd.DataFrame(df.attrs["contrasts"]).set_index(["scenario", "config"])
    assert df.attrs["reliability"]["C"]["detects"] == [] and not df.loc[df["scenario"] == "C",
                                                                        "quality_established"].any()
    assert con.loc[("E", "amp_bf16_eps1e4"), "verdict"] == "degraded"  # E, told apart, calls it degraded


def test_a_config_that_diverges_fails_even_where_the_scenario_did_not_learn():
    """Stalling means something only against a reference that learned; a loss that went
    non-finite is a failure whatever the reference did (B of the reference study)."""
    recs = grid("A", ["fp32_baseline", "amp_bf16", "bf16_pure"], value=lambda s, c, k: {"quality": 6.82 + 0.001 * k})
    recs += [make_record("A", "fp16_fp16_states", k, status="diverged", diverged_step=20) for k in range(3)]
    df = tables.study_frame([with_baseline(r, **{"baseline/val_loss": 7.48, "quality/loss_floor": 0.27})
                             for r in recs], FAST)
    assert not df["quality_established"].any()
    s = recommend.safety(df, FAST).set_index("config")
    assert s.loc["fp16_fp16_states", "verdict"] == "failed" and s.loc["fp16_fp16_states", "safe"] is False
    assert "diverged 3/3" in s.loc["fp16_fp16_states", "reason"]
    assert set(s.loc[["amp_bf16", "bf16_pure"], "verdict"]) == {"untestable"}


# ---- flips a reader can use ---------------------------------------------------------------------
def test_a_reversal_over_several_scenario_pairs_is_one_line_with_both_sides():
    q = {"A": (3.00, 3.20), "C": (0.50, 0.60), "E": (0.50, 0.60)}  # amp_bf16 better on A only

    def value(s, c, k):
        a, b = q[s]
        return {"quality": (a if c == "amp_bf16" else b) * (1 + 0.001 * k)}
    comp = report.compare(frame(grid("ACE", ["amp_bf16", "bf16_pure"], value=value)), FAST)
    (f,) = comp.result["flips"]
    assert (f["config"], f["other"], f["better_on"], f["worse_on"]) == ("amp_bf16", "bf16_pure", ["A"], ["C", "E"])
    assert len(f["reversals"]) == 2 and comp.result["method"]["reversals"]["quality"]["flips"] == 1


def speed_record(s, c, k, tp, host="GPU-1", size="base", **kw):
    r = with_baseline(make_record(s, c, k, throughput=tp, **kw))
    r["run"]["size"] = size
    if host:
        r["env"]["gpu_uuid"] = host
    return r


def speed_reversal(host="GPU-1", size="base", seeds=(0, 1, 2), other="bf16_pure", fp8_converted=None):
    """amp_bf16 faster than ``other`` on A by 20%, slower on C by 20%."""
    tp = {("A", "amp_bf16"): 120, ("A", other): 100, ("C", "amp_bf16"): 100, ("C", other): 120}
    recs = [speed_record(s, c, k, tp[s, c] + 0.1 * k, host, size) for s in "AC" for c in ("amp_bf16", other)
            for k in seeds]
    if fp8_converted is not None:
        for r in recs:
            if r["config"] == other:
                r["model"] = {"matmuls": [{"name": "h.*.mlp", "fp8": fp8_converted}]}
    return frame(recs)


@pytest.mark.parametrize("kw, flips", [
    ({}, 1),                                    # base, 3 seeds, one identified host
    ({"host": None}, 0),                        # host unknown: cannot establish one host
    ({"size": "small"}, 0),                     # not the size the speed study runs at
    ({"seeds": (0, 1)}, 0),                     # two seeds
    ({"other": "amp_bf16_fp8", "fp8_converted": True}, 1),
    ({"other": "amp_bf16_fp8", "fp8_converted": False}, 0),  # no Linear converted: amp_bf16 by construction
    ({"other": "amp_bf16_eps1e4"}, 0),          # a control, and eps changes no speed
])
def test_a_speed_flip_needs_the_speed_size_three_seeds_one_host_and_two_different_configs(kw, flips):
    rev = order_reversals(speed_reversal(**kw), FAST)
    assert int(rev.loc[rev["metric"] == "throughput", "significant"].sum()) == flips


@pytest.mark.parametrize("c_torch, memory_flips", [("2.11.0", 1), ("2.12.0", 0)])
def test_a_memory_flip_needs_one_gpu_model_and_software_a_speed_flip_one_host(c_torch, memory_flips):
    """A on one host, C on another: the throughput reversal is not tested (a host's CPU moves a
    step's speed), the memory one is where both ran one GPU model and one software stack."""
    recs = []
    for s, host in (("A", "GPU-1"), ("C", "GPU-2")):
        for c in ("amp_bf16", "bf16_pure"):
            for k in range(3):
                better = (s == "A") == (c == "amp_bf16")
                r = speed_record(s, c, k, (120 if better else 100) + 0.1 * k, host, memory=(1.0 if better else 1.2) + 0.001 * k)
                r["env"].update(torch=c_torch if s == "C" else "2.11.0", cuda="13.0")
                recs.append(r)
    rev = order_reversals(frame(recs), FAST).set_index("metric")
    assert not rev.loc["throughput", "significant"] and "one identified host" in rev.loc["throughput", "note"]
    assert int(rev.loc["memory", "significant"]) == memory_flips
    assert (rev.loc["memory", "note"] == "") == bool(memory_flips)


def test_configs_identical_by_construction_are_one_for_speed_flips():
    # amp_bf16_fp8 converted nothing: for speed it is amp_bf16, and a reversal against bf16_pure
    # is counted once, from amp_bf16
    tp = {"A": {"amp_bf16": 120, "amp_bf16_fp8": 121, "bf16_pure": 100},
          "C": {"amp_bf16": 100, "amp_bf16_fp8": 99, "bf16_pure": 120}}
    recs = [speed_record(s, c, k, tp[s][c] + 0.1 * k) for s in "AC" for c in tp[s] for k in range(3)]
    for r in recs:
        if r["config"] == "amp_bf16_fp8":
            r["model"] = {"matmuls": [{"name": "h.*.mlp", "fp8": False}]}
    rev = order_reversals(frame(recs), FAST)
    t = rev[rev["metric"] == "throughput"]
    assert len(t) == 1 and {t["config"].iloc[0], t["other"].iloc[0]} == {"amp_bf16", "bf16_pure"}


# ---- roles: a control is never a pick ------------------------------------------------------------
def control_study():
    """amp_bf16_eps1e4 (a control) is the fastest and as good as the rest on both scenarios."""
    speed = {"fp32_baseline": 100, "amp_bf16": 200, "amp_bf16_eps1e4": 400, "bf16_no_compile": 300}
    return frame(grid("AC", list(speed), value=lambda s, c, k: {
        "throughput": speed[c] + k, "quality": (3.0 if s == "A" else 0.5) * (1 + 0.001 * k), "memory": 1.0}))


def test_a_control_or_ablation_is_never_picked_even_when_fastest():
    df = control_study()
    rec, saf = recommend.recommendations(df, tables.config_stats(df), FAST)
    assert saf.set_index(["scenario", "config"]).loc[("A", "amp_bf16_eps1e4"), "safe"] is True  # judged, reported
    assert rec["universal"][0].startswith(recommend.PICK + "amp_bf16 ")
    assert recommend.recommended_configs(saf) == {"A": "amp_bf16", "C": "amp_bf16"}
    lines = [x for v in rec.values() for x in (v if isinstance(v, list) else sum(v.values(), []))]
    assert not any("eps1e4" in x or "no_compile" in x for x in lines)
    m = tables.summarize(df, "A").query("seed == 'mean'").set_index("config")
    assert not m.loc[["amp_bf16_eps1e4", "bf16_no_compile"], "pareto_throughput"].any()
    assert "fastest: amp_bf16 " in tables.describe_experiment(tables.summarize(df, "A"), "A")


def test_the_findings_never_print_a_control_as_a_pick_nor_a_mirror_flip(tmp_path):
    comp = report.compare(control_study(), FAST)
    (tmp_path / "comparison").mkdir()
    comp.stats.to_csv(tmp_path / "comparison" / "config_stats.csv", index=False)  # its own runs' speed
    text = findings.render([("study", comp.result, tmp_path)], ["study/comparison.json"])
    default = next(ln for ln in text.splitlines() if ln.startswith("**Default") or ln.startswith("**No default"))
    rows = [ln.split("|")[1].strip() for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| config")]
    assert "amp_bf16" in default and "eps1e4" not in default and "no_compile" not in default
    assert "amp_bf16" in rows and not any("eps1e4" in r or "no_compile" in r for r in rows)  # never a row of the answer
    flip_df = frame(grid("AC", ["amp_bf16", "bf16_pure"], value=lambda s, c, k: {
        "quality": {("A", "amp_bf16"): 3.0, ("A", "bf16_pure"): 3.2, ("C", "amp_bf16"): 0.5,
                    ("C", "bf16_pure"): 0.6}[s, c] * (1 + 0.001 * k)}))
    text = findings.render([("study", report.compare(flip_df, FAST).result, tmp_path)], ["x"])
    flips = next(ln for ln in text.splitlines() if ln.startswith("**Flips between tasks**"))
    assert flips.startswith("**Flips between tasks** (1): ")  # one reversal, one entry


def test_the_frontier_hypothesis_across_studies_rests_on_configs_that_passed_the_quality_study(tmp_path):
    from fixtures.records import write_study
    speed = {"fp32_baseline": (100, 2.0), "amp_bf16": (200, 1.5), "bf16_pure": (250, 1.2), "bf16_naive": (300, 1.0)}
    # quality study: bf16_naive 5% behind the reference on every seed (degraded); no speed measured
    quality = grid("AC", list(speed), value=lambda s, c, k: {"quality": (
        (3.0 * (1.05 if c == "bf16_naive" else 1.0)) if s == "A" else 0.5 * (0.95 if c == "bf16_naive" else 1.0))
        * (1 + 0.001 * k)})
    write_study(tmp_path / "quality", [{**with_baseline(r), "sweep": {"runs_per_gpu": 12}} for r in quality])
    q = report.compare_study(tmp_path / "quality", rules=FAST, formats=())
    # speed study at base: bf16_naive fastest and leanest on both
    runs = grid("AC", list(speed), value=lambda s, c, k: {"throughput": speed[c][0] + k, "memory": speed[c][1]})
    for r in runs:
        r["run"]["judge_quality"] = False
    write_study(tmp_path / "speed", runs)
    sp = report.compare_study(tmp_path / "speed", rules=FAST, formats=())
    assert sp.result["hypotheses"]["seed001.H4"]["verdict"] == "untestable"  # alone it cannot say what trains
    h4 = findings.frontier_across(q.result, tmp_path / "speed")
    assert "bf16_naive" not in h4["evidence"]["configs"] and h4["evidence"]["configs"]
    text = findings.render([("quality", q.result, tmp_path / "quality"), ("speed", sp.result, tmp_path / "speed")],
                           ["q", "s"])
    row = next(line for line in text.splitlines() if line.startswith("| seed001.H4"))
    assert row.split("|")[3].strip() == h4["verdict"] and "speed x quality" in row


@pytest.mark.parametrize("d_model, confounded", [(("bert", 22.8e6), True), (("roberta", 124.1e6), False)])
def test_a_flip_between_architectures_of_different_sizes_says_the_size_confounds_it(d_model, confounded):
    """C (GPT-2 124.9M) against D: a reversal there reads "(architecture)" only when D's model is of
    GPT-2's size; against a 22.8M BERT it names both models and says the split is confounded."""
    q = {("C", "amp_bf16"): 0.50, ("C", "bf16_pure"): 0.60, ("D", "amp_bf16"): 0.60, ("D", "bf16_pure"): 0.50}
    records = grid("CD", ["amp_bf16", "bf16_pure"], value=lambda s, c, k: {"quality": q[s, c] * (1 + 0.001 * k)})
    for r in records:
        kind, n = ("gpt2", 124.9e6) if r["scenario"] == "C" else d_model
        r["model"] = {"model_type": kind, "parameters": n}
    flips = report.compare(frame(records), FAST).result["flips"]
    text = " ".join(f["interpretation"] for f in flips if f["metric"] == "quality")
    assert "better on GPT-2 than on" in text  # the reversal is found either way
    assert ("size differs too" in text and "confounded" in text) is confounded
    assert ("BERT 22.8M" in text) is confounded
