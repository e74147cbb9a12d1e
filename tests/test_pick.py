"""The default by a rule a reader can check (``analysis.recommend.pick``): safe at every beta2 measured, then
fastest by scenario wins, memory next, else a tie named; provisional where nothing qualifies."""
import numpy as np
import pandas as pd

from benchlib.analysis import recommend
from benchlib.analysis.stats import Rules


def stats(rel: dict, mem: dict | None = None) -> pd.DataFrame:
    """config_stats rows: throughput x fp32 (``rel[config][scenario]``) and peak GiB."""
    rows = []
    for c, by in rel.items():
        for s, x in by.items():
            rows.append({"metric": "throughput", "scenario": s, "config": c, "rel": x, "mean": 100 * x})
            rows.append({"metric": "memory", "scenario": s, "config": c, "rel": 1.0,
                         "mean": (mem or {}).get(c, {}).get(s, 5.0)})
    return pd.DataFrame(rows)


def arm(beta2: float, verdicts: dict) -> recommend.Arm:
    """An arm whose cells are ``verdicts[config][scenario]``."""
    rows = [{"scenario": s, "config": c, "verdict": v} for c, by in verdicts.items() for s, v in by.items()]
    return recommend.Arm(f"study at {beta2}", beta2, pd.DataFrame(rows), {})


REF = {"fp32_baseline": {"A": "reference", "E": "reference"}}
SPEED = {"fp32_baseline": {"A": 1.0, "E": 1.0}, "amp_bf16": {"A": 8.2, "E": 4.9}, "bf16_pure": {"A": 9.0, "E": 5.9}}


def test_the_fastest_config_safe_at_both_beta2_is_the_default():
    a = arm(0.95, {**REF, "amp_bf16": {"A": "safe", "E": "safe"}, "bf16_pure": {"A": "safe", "E": "safe"}})
    b = arm(0.999, {**REF, "amp_bf16": {"A": "safe", "E": "safe"}, "bf16_pure": {"A": "safe", "E": "safe"}})
    p = recommend.pick([a, b], stats(SPEED))
    assert p["kind"] == "default" and p["configs"] == ["bf16_pure"]


def test_a_config_unsafe_at_the_second_beta2_is_not_the_default_even_when_fastest():
    a = arm(0.95, {**REF, "amp_bf16": {"A": "safe", "E": "safe"}, "bf16_pure": {"A": "safe", "E": "safe"}})
    b = arm(0.999, {**REF, "amp_bf16": {"A": "safe", "E": "safe"}, "bf16_pure": {"A": "degraded", "E": "safe"}})
    p = recommend.pick([a, b], stats(SPEED))
    assert p["kind"] == "default" and p["configs"] == ["amp_bf16"]
    assert p["per_arm"] == {"beta2 0.95": ["amp_bf16", "bf16_pure"], "beta2 0.999": ["amp_bf16"]}


def test_the_reference_is_never_the_pick():
    a = arm(0.95, {**REF, "amp_bf16": {"A": "inconclusive", "E": "safe"}})
    p = recommend.pick([a], stats(SPEED))
    assert "fp32_baseline" not in p["configs"] and p["kind"] == "provisional" and p["configs"] == ["amp_bf16"]
    assert "A (inconclusive)" in p["sentence"]


def test_speed_ties_are_not_broken_by_a_mean_over_scenarios_but_by_memory_then_named_both():
    # bf16_pure much faster on A, the head config a little faster on F: one scenario each; a geo-mean
    # would call bf16_pure faster, the rule does not
    rel = {"fp32_baseline": {"A": 1.0, "F": 1.0}, "amp_bf16_fp32_head": {"A": 7.0, "F": 1.82},
           "bf16_pure": {"A": 9.0, "F": 1.60}}
    assert recommend.faster(stats(rel), "bf16_pure", "amp_bf16_fp32_head", 1.0) == 0
    lighter = stats(rel, {"bf16_pure": {"A": 5.5, "F": 0.3}, "amp_bf16_fp32_head": {"A": 10.1, "F": 0.5}})
    assert recommend.faster(lighter, "bf16_pure", "amp_bf16_fp32_head", 1.0) == 1
    both = ["amp_bf16_fp32_head", "bf16_pure"]
    verdicts = {c: {"A": "safe", "F": "safe"} for c in both}
    p = recommend.pick([arm(0.95, {"fp32_baseline": {"A": "reference", "F": "reference"}, **verdicts})], stats(rel))
    assert p["kind"] == "tie" and sorted(p["configs"]) == both


def test_a_gap_under_one_percent_is_no_win():
    rel = {"a": {"A": 2.00}, "b": {"A": 1.99}}
    assert recommend.faster(stats({k: v for k, v in rel.items()}), "a", "b", Rules().min_size_pct) == 0


def test_a_config_the_speed_study_did_not_time_is_never_fastest():
    a = arm(0.95, {**REF, "bf16_pure_fp32v": {"A": "safe", "E": "safe"}})
    p = recommend.pick([a], stats(SPEED))
    assert p["configs"] == [] and "not timed" in p["sentence"] and "bf16_pure_fp32v" in p["sentence"]


def test_the_rule_names_the_arms_and_the_speed_scenarios():
    text = recommend.pick([arm(0.95, REF), arm(0.999, REF)], stats(SPEED))["rule"]
    assert "beta2 0.95, beta2 0.999" in text and "(A, E)" in text


def _timed(rows: dict) -> pd.DataFrame:
    """config_stats with seeds' spread: ``rows[config] = (mean tokens/s, sd, n)`` on A; memory alike."""
    out = []
    for c, (m, sd, n) in rows.items():
        out.append({"metric": "throughput", "scenario": "A", "config": c, "rel": m / 100, "mean": m, "std": sd, "n": n})
        out.append({"metric": "memory", "scenario": "A", "config": c, "rel": 1.0, "mean": 5.0, "std": 0.0, "n": n})
    return pd.DataFrame(out)


def test_a_gap_inside_the_seeds_noise_is_no_win_and_the_same_gap_beyond_it_is():
    """4% faster by the means: with seeds that spread 10% it is a tie; with seeds that spread 0.5%
    (3 each) it is a win; a single seed has no spread to test, so the gap decides."""
    assert recommend.faster(_timed({"a": (104, 10, 3), "b": (100, 10, 3)}), "a", "b", 1.0) == 0
    assert recommend.faster(_timed({"a": (104, 0.5, 3), "b": (100, 0.5, 3)}), "a", "b", 1.0) == 1
    assert recommend.faster(_timed({"a": (100, 0.5, 3), "b": (104, 0.5, 3)}), "a", "b", 1.0) == -1
    assert recommend.faster(_timed({"a": (104, None, 1), "b": (100, None, 1)}), "a", "b", 1.0) == 1


def test_a_config_whose_measured_loss_reaches_the_minimum_effect_is_not_provisional_and_is_named_as_left_out():
    a = arm(0.95, {**REF, "amp_bf16": {"A": "inconclusive", "E": "safe"}, "bf16_pure": {"A": "safe", "E": "safe"}})
    b = arm(0.999, {**REF, "amp_bf16": {"A": "inconclusive", "E": "safe"}, "bf16_pure": {"A": "inconclusive", "E": "safe"}})
    assert recommend.pick([a, b], stats(SPEED))["configs"] == ["bf16_pure"]  # the faster, without its measured loss
    p = recommend.pick([a, b], stats(SPEED), beyond={"bf16_pure": ["beta2 0.999 on A"]})
    assert p["kind"] == "provisional" and p["configs"] == ["amp_bf16"]
    assert "bf16_pure" in p["sentence"] and "beta2 0.999 on A" in p["sentence"]
    assert recommend.pick([a, b], stats(SPEED), beyond={"bf16_pure": []})["configs"] == ["bf16_pure"]


def test_a_gap_each_seed_shows_on_its_own_gpu_is_a_win_that_welch_would_call_noise():
    """a is 2% faster than b on every seed, each seed's two runs on one GPU, the GPUs 10% apart:
    paired by seed the win is beyond noise; Welch's test on the pooled seeds calls it a tie; with
    a seed's runs on two GPUs there is no pairing and Welch's decides."""
    base = {0: 100.0, 1: 110.0, 2: 95.0}
    per_seed = pd.DataFrame([{"scenario": "A", "config": c, "seed": k, "gpu": f"GPU-{k}",
                              "throughput": v * (1.02 if c == "a" else 1.0), "memory": 5.0}
                             for k, v in base.items() for c in ("a", "b")])
    sd = float(np.std(list(base.values()), ddof=1))
    stats = _timed({"a": (102 * 305 / 300, sd, 3), "b": (305 / 3, sd, 3)})
    assert recommend.faster(stats, "a", "b", 1.0) == 0
    assert recommend.faster(stats, "a", "b", 1.0, per_seed=per_seed) == 1
    assert recommend.faster(stats, "b", "a", 1.0, per_seed=per_seed) == -1
    apart = per_seed.assign(gpu=[f"GPU-{k}-{c}" for k, c in zip(per_seed["seed"], per_seed["config"])])
    assert recommend.faster(stats, "a", "b", 1.0, per_seed=apart) == 0
