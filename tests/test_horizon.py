"""The horizon analysis (benchlib.analysis.horizon, notebooks/24_horizon.ipynb): each config's gap to the
reference against the training step, and whether it grows."""
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchlib.analysis import horizon
from benchlib.analysis.stats import Rules
from dtype_bench import findings_cmd

STEPS = [250, 500, 750, 1000, 1250, 1500]


def _evaluations(one_pass=1000):
    """Four seeds of a reference whose loss falls, a config whose loss drifts 0.4% a step further above
    it at every evaluation, and one that stays within seed noise of it."""
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(4):
        for k, step in enumerate(STEPS):
            ref = 6.0 - 0.3 * k + rng.normal(0, 0.01)
            for config, v in (("fp32_tf32_matmul", ref), ("grows", ref * (1 + 0.004 * (k + 1)) + rng.normal(0, 0.003)),
                              ("flat", ref + rng.normal(0, 0.003))):
                rows.append(("A", config, seed, step, v, one_pass))
    return pd.DataFrame(rows, columns=["scenario", "config", "seed", "step", "val_loss", "one_pass_step"])


def test_a_gap_that_grows_is_found_and_one_within_noise_is_not():
    ev = _evaluations()
    trend = horizon.trend(ev).set_index("config")
    assert set(trend.index) == {"grows", "flat"} and (trend["reference"] == "fp32_tf32_matmul").all()
    assert trend.loc["grows", "grows_worse"] and trend.loc["grows", "growth_pct"] < -1.5
    assert not trend.loc["flat", "grows_worse"]
    assert (trend["first_step"] == STEPS[0]).all() and (trend["last_step"] == STEPS[-1]).all()
    # the second reading, from every evaluation: 0.4% a step of 250, i.e. -1.6% per 1,000 steps
    assert trend.loc["grows", "slope_pct_per_kstep"] == pytest.approx(-1.6, rel=0.1)
    assert trend.loc["grows", "p_slope_falls"] < 0.05
    assert abs(trend.loc["flat", "slope_pct_per_kstep"]) < 0.1 * abs(trend.loc["grows", "slope_pct_per_kstep"])


def test_each_evaluation_step_has_its_paired_interval_and_says_whether_it_lies_past_one_pass():
    gaps = horizon.gaps(_evaluations(one_pass=1000))
    grows = gaps[gaps["config"] == "grows"].set_index("step")
    assert list(grows.index) == STEPS and (grows["n_paired"] == 4).all()
    assert grows.loc[1500, "ci_high"] < -Rules().min_effect_loss_pct  # worse by more than the minimum effect, late
    assert grows.loc[250, "ci_low"] < grows.loc[250, "change_pct"] < grows.loc[250, "ci_high"]
    assert list(grows["past_one_pass"]) == [s >= 1000 for s in STEPS]
    assert not gaps["past_one_pass"].where(gaps["step"] < 1000, False).any()


def test_short_of_seeds_the_point_gap_is_drawn_without_an_interval_or_a_trend_verdict():
    ev = _evaluations()
    ev = ev[ev["seed"] == 0]  # one seed of each config: a study stopped after its first seed
    gaps = horizon.gaps(ev).set_index(["config", "step"])
    assert (gaps["n_paired"] == 1).all() and gaps["ci_low"].isna().all() and gaps["ci_high"].isna().all()
    assert gaps.loc[("grows", 1500), "change_pct"] < gaps.loc[("grows", 250), "change_pct"] < 0
    trend = horizon.trend(ev).set_index("config")
    assert trend.loc["grows", "growth_pct"] < -1.5 and np.isnan(trend.loc["grows", "p_grows_worse"])
    assert np.isnan(trend.loc["grows", "p_slope_falls"]) and trend.loc["grows", "slope_pct_per_kstep"] < 0
    assert trend["grows_worse"].isna().all()
    two = _evaluations()
    two = two[two["seed"] < 2]  # two seeds: a p-value is computable, but the verdicts ask for min_seeds
    assert horizon.trend(two)["grows_worse"].isna().all()
    assert "no band" in str(horizon.chart(horizon.gaps(ev), ev).to_dict())


def test_a_broken_config_gets_the_candidates_a_panel_of_their_own():
    ev = _evaluations()
    broken = ev[ev["config"] == "flat"].assign(config="broken", val_loss=lambda d: d["val_loss"] * 1.1)
    spec = horizon.chart(horizon.gaps(pd.concat([ev, broken])), ev).to_dict()
    panels = spec["vconcat"][0]["hconcat"]
    assert len(panels) == 2 and "within" in str(panels[1])
    shown = {r["config"] for d in spec["datasets"].values() for r in d if "config" in r}
    assert "broken" in shown
    zoomed = spec["datasets"][panels[1]["layer"][0]["data"]["name"]]
    assert {r["config"] for r in zoomed} == {"flat", "grows"}  # both within 2.5%; "broken" 10% off
    assert len(horizon.chart(horizon.gaps(ev), ev).to_dict()["vconcat"][0]["hconcat"]) == 1


def _rules_at(spec: dict) -> set:
    """The x values of the chart's vertical rules (one pass over the corpus)."""
    found = set()

    def walk(node):
        if isinstance(node, dict):
            if node.get("mark") in ("rule", {"type": "rule"}) or (isinstance(node.get("mark"), dict)
                                                                  and node["mark"].get("type") == "rule"):
                enc = node.get("encoding", {})
                if "x" in enc:
                    name = node.get("data", {}).get("name")
                    found.update(r["x"] for r in spec["datasets"].get(name, []) if "x" in r)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(spec)
    return found


def test_one_pass_over_the_corpus_is_drawn_where_it_falls_within_the_evaluations_and_named_where_not():
    inside = horizon.chart(horizon.gaps(ev := _evaluations(one_pass=1000)), ev).to_dict()
    assert _rules_at(inside) == {1000} and "grey: one pass" in str(inside["title"])
    beyond = horizon.chart(horizon.gaps(ev := _evaluations(one_pass=8043)), ev).to_dict()
    assert _rules_at(beyond) == set()  # a rule at 8,043 would stretch the axis past the last evaluation, 1,500
    assert "one pass over the corpus at step 8,043, past the last evaluation" in str(beyond["title"])


def test_without_the_reference_config_there_is_no_gap_and_the_chart_says_why():
    ev = _evaluations()
    ev = ev[ev["config"] != "fp32_tf32_matmul"]
    assert horizon.gaps(ev).empty and horizon.trend(ev).empty
    spec = horizon.chart(horizon.gaps(ev), ev).to_dict()
    assert "no config and reference" in str(spec)


@pytest.mark.slow  # a sweep and a papermill kernel
@pytest.mark.timeout(600)
def test_the_horizon_notebook_runs_on_a_studys_records(tmp_path):
    from dtype_bench.study import sweep
    from conftest import REPO, papermill
    study = tmp_path / "h.yaml"
    study.write_text("study: h\nscenarios: [A]\nconfigs: [fp32_baseline, amp_bf16, bf16_naive]\nseeds: [0, 1, 2]\nnotebook_seeds: []\n"
                     "size: tiny\nsteps: 6\neval_every: 2\neval_batches: 1\ndevice: cpu\nanalysis: horizon\n")
    assert sweep.main([str(study), "--out", str(tmp_path / "executed"), "--no_analysis", "--no_html"]) == 0
    out = tmp_path / "24.ipynb"
    p = papermill(str(REPO / "notebooks" / "24_horizon.ipynb"), str(out), "-p", "study_dir", str(tmp_path / "executed" / "h"))
    assert p.returncode == 0, p.stderr[-3000:]
    trend = pd.read_csv(tmp_path / "executed" / "h" / "horizon" / "trend.csv")
    assert list(trend["config"]) == ["amp_bf16", "bf16_naive"] and (trend["n_paired"] == 3).all()
    assert (trend["first_step"] < trend["last_step"]).all()
    assert (tmp_path / "executed" / "h" / "horizon" / "horizon.svg").is_file()
    # where the update went: bf16 weights rounded to nearest drop part of every update, fp32 weights none
    lost = pd.read_csv(tmp_path / "executed" / "h" / "horizon" / "forensics.csv").query("counter == 'update_lost_frac'")
    by = lost.groupby("config")["value"].mean()
    assert set(lost["step"]) <= set(pd.read_csv(tmp_path / "executed" / "h" / "horizon" / "gaps.csv")["step"])
    assert by["bf16_naive"] > 1.0 and abs(by["fp32_baseline"]) < 0.01 and (lost["n_seeds"] == 3).all()
    assert "update lost to rounding" in (tmp_path / "executed" / "h" / "horizon" / "forensics.svg").read_text()


def _frame(ev: pd.DataFrame) -> pd.DataFrame:
    runs = ev[["scenario", "config", "seed"]].drop_duplicates()
    return runs.assign(status="ok", **{"run.size": "tiny", "run.data": "corpus", "run.steps": 1500, "run.beta2": 0.999,
                                       "one_pass_step": 3000})


@pytest.mark.parametrize("seeds, says", [(1, "No verdict on growth: 1 paired seed(s), the rules ask 3"),
                                          (4, "(one-sided paired t, alpha 0.05): grows (p 0.")])
def test_the_findings_line_states_the_recipe_and_gives_a_growth_verdict_only_with_enough_seeds(monkeypatch, seeds, says):
    ev = _evaluations()
    ev = ev[ev["seed"] < seeds]
    monkeypatch.setattr(horizon, "load_study", lambda d: _frame(ev))
    monkeypatch.setattr(horizon, "evaluations", lambda df: ev)
    (line,) = horizon.findings_line("executed/x/h", "on a test host")
    assert says in line
    assert "1500 steps, beta2 0.999" in line and "read 0.50 times" in line and "on a test host" in line
    assert line.index("grows ") < line.index("flat ")  # the worst change at the last evaluation first
    monkeypatch.setattr(horizon, "evaluations", lambda df: ev[ev["config"] == "flat"])
    with pytest.raises(ValueError, match="nothing to say"):
        horizon.findings_line("executed/x/h", "")


def test_with_seeds_missing_in_some_cells_each_config_is_told_which_verdict_it_has_and_why(monkeypatch):
    """A study whose last session ran out: the configs with every seed get the test and their
    interval, one that grew worse named, one that did not said to be not shown to grow (not
    "safe"), and one with fewer paired seeds than the rules ask listed with its count."""
    ev = _evaluations()
    ev = ev[(ev["config"] != "flat") | (ev["seed"] < 2)]  # flat: 2 seeds
    monkeypatch.setattr(horizon, "load_study", lambda d: _frame(ev))
    monkeypatch.setattr(horizon, "evaluations", lambda df: ev)
    (line,) = horizon.findings_line("executed/x/h", "on a test host")
    assert "Grows worse from step 250 to 1500" in line and "grows (p 0." in line
    assert "no verdict under 3 paired seeds: flat (2)" in line and "not shown to grow" not in line
    assert "(4 seeds)" in line and "(2 seeds)" in line
    assert re.search(r"grows [+-][\d.]+ -> -[\d.]+% \[-[\d.]+, -[\d.]+\] \(4 seeds\)", line)  # its interval, late
    ev = _evaluations()
    monkeypatch.setattr(horizon, "evaluations", lambda df: ev)
    (line,) = horizon.findings_line("executed/x/h", "")
    assert "not shown to grow" in line and "flat (p 0." in line
    assert re.search(r"slope over every evaluation \(one-sided t\): falls for grows \(-1\.\d\d% per 1,000 steps", line)


def _arm(beta2_gain: dict, seeds=4, steps=1500):
    """One arm's evaluations: the reference and a config, each config's loss ``beta2_gain[config]``
    (a fraction) lower than a shared per-seed base, plus seed noise."""
    rng = np.random.default_rng(len(beta2_gain) + seeds)
    rows = []
    for seed in range(seeds):
        base = 4.0 + rng.normal(0, 0.02)
        for config, gain in beta2_gain.items():
            for step in (500, 1000, steps):
                rows.append(("A", config, seed, step, base * (1 - gain) * (1 + 0.1 * (steps - step) / steps)
                             + rng.normal(0, 0.002), 3000))
    return pd.DataFrame(rows, columns=["scenario", "config", "seed", "step", "val_loss", "one_pass_step"])


def test_across_beta2_each_config_is_compared_with_itself_at_the_other_beta2_paired_by_seed():
    lo = _arm({"fp32_tf32_matmul": 0.0, "bf16_pure": 0.0})
    hi = _arm({"fp32_tf32_matmul": 0.04, "bf16_pure": 0.02})  # both train better at the larger beta2, fp32 more
    t = horizon.across_beta2({0.999: hi, 0.95: lo}).set_index("config")
    assert (t["beta2_from"] == 0.95).all() and (t["beta2_to"] == 0.999).all() and (t["step"] == 1500).all()
    assert t.loc["fp32_tf32_matmul", "change_pct"] == pytest.approx(4.0, abs=0.6)
    assert t.loc["bf16_pure", "change_pct"] == pytest.approx(2.0, abs=0.6)
    assert (t["ci_low"] > 0).all() and (t["n_paired"] == 4).all()
    few = horizon.across_beta2({0.95: lo[lo["seed"] < 2], 0.999: hi})
    assert (few["n_paired"] == 2).all() and few["ci_low"].isna().all() and few["change_pct"].notna().all()
    with pytest.raises(ValueError, match="two arms"):
        horizon.across_beta2({0.95: lo})


def test_the_beta2_line_compares_arms_of_one_recipe_and_refuses_arms_that_differ_in_more(monkeypatch):
    arms = {"h95": (_arm({"fp32_tf32_matmul": 0.0, "bf16_pure": 0.0}), 0.95, 1500),
            "h999": (_arm({"fp32_tf32_matmul": 0.04, "bf16_pure": 0.02}), 0.999, 1500)}

    def study(d):
        ev, beta2, steps = arms[Path(d).name]
        return _frame(ev).assign(**{"run.beta2": beta2, "run.steps": steps, "ev": [ev] * len(_frame(ev))})
    monkeypatch.setattr(horizon, "load_study", study)
    monkeypatch.setattr(horizon, "evaluations", lambda df: df["ev"].iloc[0])
    (line,) = horizon.beta2_line(["x/h95", "x/h999"])
    assert "`h95` (beta2 0.95) and `h999` (beta2 0.999)" in line and "step 1500" in line
    assert re.search(r"bf16_pure [\d.]+ -> [\d.]+ \(\+[12]\.\d\d% \[\+[\d.]+, \+[\d.]+\], 4 seeds\)", line)
    assert line.index("bf16_pure") < line.index("fp32_tf32_matmul ")  # the smaller gain first
    arms["h999"] = (arms["h999"][0], 0.999, 6000)
    with pytest.raises(ValueError, match="differ in run.steps"):
        horizon.beta2_line(["x/h95", "x/h999"])
    arms["h999"] = (arms["h999"][0], 0.95, 1500)
    assert horizon.beta2_line(["x/h95", "x/h999"]) == []  # one beta2: nothing to compare across


def test_findings_takes_several_horizon_studies_and_names_them_all_in_its_command(tmp_path):
    ns = findings_cmd.parser().parse_args(["c.json", "--horizon", "executed/a", "executed/b"])
    assert ns.horizon == ["executed/a", "executed/b"]
    with pytest.raises(Exception, match="--horizon executed/a executed/b: no study folder"):
        findings_cmd.inputs(ns)


def test_the_answers_note_past_its_steps_gives_candidates_their_gap_verdict_and_growth(monkeypatch, tmp_path):
    """The answer's "past the answer's steps" note: candidates only (a control stays in its study),
    the interval where the seeds measure one and a point with its seed count where not, the study's
    own verdict where it was compared (or, where it judges none, why once), and the growth test's outcome."""
    ev = _evaluations()
    ev = pd.concat([ev, ev[ev["config"] == "grows"].assign(config="control")])
    few = ev[ev["seed"] < 2]
    frames = {"h999": (ev, 0.999), "h95": (few, 0.95)}

    def study(d):
        e, beta2 = frames[Path(d).name]
        return _frame(e).assign(**{"run.beta2": beta2, "role": lambda f: np.where(f["config"] == "control", "control",
                                                                                   "candidate"), "ev": None})
    monkeypatch.setattr(horizon, "load_study", study)
    monkeypatch.setattr(horizon, "evaluations", lambda df: frames["h999" if df["run.beta2"].iloc[0] == 0.999 else "h95"][0])
    (tmp_path / "h999" / "comparison").mkdir(parents=True)
    (tmp_path / "h999" / "comparison" / "comparison.json").write_text(json.dumps({"recommendation_evidence": [
        {"config": "grows", "verdict": "degraded"}, {"config": "flat", "verdict": "inconclusive"}]}))
    line = horizon.answer_line([tmp_path / "h999", tmp_path / "h95"])
    assert "control" not in line.split("):", 1)[1]
    part999, part95 = line.split("at beta2 0.999 (`h999`): ")[1].split("; at beta2 0.95 (`h95`): ")
    assert re.search(r"grows -[\d.]+% \[-[\d.]+, -[\d.]+\], \*\*degraded\*\*, grows worse \(p 0\.0", part999)
    assert re.search(r"flat [+-][\d.]+% \[[+-][\d.]+, [+-][\d.]+\], \*\*inconclusive\*\*, not shown to grow", part999)
    assert re.search(r"grows -[\d.]+% \(2 seeds\)", part95) and "**" not in part95  # no comparison there, no test
    assert "A alone, on corpus, 1500 steps" in line and "at step 1500" in line
    (tmp_path / "h95" / "comparison").mkdir(parents=True)
    (tmp_path / "h95" / "comparison" / "comparison.json").write_text(json.dumps({
        "recommendation_evidence": [{"config": c, "role": "candidate", "verdict": "untestable"} for c in ("grows", "flat")]
        + [{"config": "control", "role": "control", "verdict": "untestable"}],
        "reliability": {"A": {"reliability": 0.1, "told_apart": False, "detects": []}}}))
    part95 = horizon.answer_line([tmp_path / "h999", tmp_path / "h95"]).split("; at beta2 0.95 (`h95`): ")[1]
    assert "**" not in part95  # a study that judges none: one reason, not "untestable" per config
    assert re.search(r"no verdict: its candidates are not told apart \(rank reliability 0\.10\).*control control has 2 of "
                     r"the 3 paired seeds", part95)
    # judged none for another reason (its quality not established): that reason, not the seeds' count
    (tmp_path / "h95" / "comparison" / "comparison.json").write_text(json.dumps({
        "recommendation_evidence": [{"config": c, "role": "candidate", "verdict": "untestable"} for c in ("grows", "flat")],
        "reliability": {"A": {"reliability": 0.9, "told_apart": True, "detects": []}}}))
    part95 = horizon.answer_line([tmp_path / "h999", tmp_path / "h95"]).split("; at beta2 0.95 (`h95`): ")[1]
    assert "no verdict: its quality is not established" in part95 and "paired seeds the rules ask" not in part95


def _study_with_logs(tmp_path, lost: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A study frame whose runs' step logs carry ``update_lost_frac`` (config -> its value, growing with
    the step and, where not 0, a little apart per seed), logged every 2 steps, evaluated at steps 3 and 7."""
    rows, ev = [], []
    for config, value in lost.items():
        for seed in range(3):
            run = tmp_path / config / f"seed{seed}"
            run.mkdir(parents=True)
            log = [{"step": s, "loss": 1.0, "update_lost_frac": value * (1 + s / 10) + 0.001 * seed * (value > 0)} for s in range(0, 8, 2)]
            log += [{"step": s, "eval": {"val_loss": 1.0}} for s in (3, 7)]
            (run / "steps.jsonl").write_text("\n".join(json.dumps(x) for x in log) + "\n")
            rows.append({"scenario": "A", "config": config, "seed": seed, "status": "ok", "path": str(run / "result.json")})
            ev += [("A", config, seed, s, 1.0, np.nan) for s in (3, 7)]
    return pd.DataFrame(rows), pd.DataFrame(ev, columns=["scenario", "config", "seed", "step", "val_loss", "one_pass_step"])


def test_the_forensics_are_averaged_up_to_each_evaluation_then_over_seeds_and_a_flat_counter_is_not_drawn(tmp_path):
    df, ev = _study_with_logs(tmp_path, {"fp32_baseline": 0.0, "bf16_naive": 0.2})
    f = horizon.forensics(df, ev).set_index(["config", "counter", "step"])
    # steps 0 and 2 belong to the evaluation at 3, steps 4 and 6 to the one at 7
    assert f.loc[("bf16_naive", "update_lost_frac", 3), "value"] == pytest.approx(100 * (0.2 * 1.1 + 0.001), abs=1e-9)
    assert f.loc[("bf16_naive", "update_lost_frac", 7), "value"] == pytest.approx(100 * (0.2 * 1.5 + 0.001), abs=1e-9)
    assert (f["n_seeds"] == 3).all()
    assert f.loc[("fp32_baseline", "update_lost_frac", 7), "value"] == 0
    assert "exp_avg_sq_stuck_frac" not in f.index.get_level_values("counter")  # the logs do not carry it
    spec = horizon.forensics_chart(horizon.forensics(df, ev), configs=["amp_bf16", "bf16_naive"]).to_dict()
    assert "update lost to rounding" in json.dumps(spec)
    # each config keeps the gap chart's colour (there amp_bf16 first, bf16_naive second); the reference comes after
    domains = re.findall(r'"domain": (\[[^\]]*\])', json.dumps(spec))
    assert domains and all(json.loads(d) == ["amp_bf16", "bf16_naive", "fp32_baseline"] for d in domains)
    flat = horizon.forensics_chart(horizon.forensics(*_study_with_logs(tmp_path / "flat", {"fp32_baseline": 0.0})))
    assert "no config lost more than" in json.dumps(flat.to_dict())


def test_the_answers_own_steps_name_the_candidates_whose_gap_grows_after_holm_in_the_metric_each_scenario_is_judged_by(
        monkeypatch):
    """Within the answer's steps: each scenario whose judged metric was evaluated during training has
    its candidates tested for growth in that metric (Holm over each scenario's candidates): an LM scenario by val loss
    (lower better), a classification scenario by micro-F1 (higher better: a config falling further
    below the reference grows worse). The one that grows is named with its p, the flat one counted
    as not shown to grow; a control that grows stays out; a scenario evaluated at its end only is
    named as out of it; an arm short of seeds, or with nothing evaluated, says nothing."""
    ev = _evaluations()
    lm = pd.concat([ev, ev[ev["config"] == "grows"].assign(config="control")], ignore_index=True)
    # C: micro-F1 rising to ~0.6; "grows" drifts further below the reference, a clear growth in an F1
    f1 = lm.assign(scenario="C", micro_f1=0.3 + 0.6 * (6.0 - lm["val_loss"]) / 1.5 * 0.5).drop(columns="val_loss")
    f1.loc[f1["config"].isin(["grows", "control"]), "micro_f1"] *= 1 - 0.004 * (f1["step"] // 250)
    studies = {("lm", "val_loss"): lm, ("cls", "micro_f1"): f1,
               ("few", "val_loss"): lm[lm["seed"] < 2], ("end", "micro_f1"): f1.iloc[:0]}
    monkeypatch.setattr(horizon, "load_study", lambda d: Path(d).name)
    monkeypatch.setattr(horizon, "evaluations", lambda name, metric, scns: (
        (e := studies.get((name, metric), pd.DataFrame(columns=[*lm.columns[:4], metric, "one_pass_step"])))
        [e["scenario"].isin(scns)]))
    evidence = [{"scenario": s, "config": c, "role": "control" if c == "control" else "candidate"}
                for s in "AC" for c in ("grows", "flat", "control")]
    comparison = {"quality_metric": {"A": {"name": "val_loss", "higher_is_better": False},
                                     "C": {"name": "micro_f1", "higher_is_better": True}},
                  "recommendation_evidence": evidence}
    line = horizon.within_line([("beta2 0.95", ["lm", "cls"], comparison)])
    said = line.split("at beta2 0.95: ", 1)[1]
    assert re.match(r"A \(val_loss, step 250 -> 1,500, 4 seeds\): grows worse grows \+?-?[\d.]+ -> -[\d.]+% "
                    r"\(p 0\.0\d+, Holm 0\.0\d+\); the other 1 not shown to grow", said)
    c_part = said.split("; C (", 1)[1]
    assert c_part.startswith("micro_f1, step 250 -> 1,500, 4 seeds): grows worse grows") and "-> -" in c_part
    assert "the other 1 not shown to grow" in c_part  # flat, in F1 too
    assert "control" not in said and "4 tests in all" in line and "out of it" not in line
    # C evaluated at its end only: out of it, and said so; A's finding stands alone
    end = horizon.within_line([("beta2 0.95", ["lm", "end"], comparison)])
    assert "C evaluated at their end only" in end and "C (" not in end.split("at beta2 0.95: ", 1)[1]
    # a trend the seeds cannot test (2 paired) is not a finding; an arm with nothing evaluated neither
    assert horizon.within_line([("beta2 0.999", ["few"], comparison)]) == ""
    assert horizon.within_line([("beta2 0.95", ["end"], comparison)]) == ""
    # Holm over the scenario's candidates: the flat config's p enters the family, so the grows config's adjusted p
    # is at least its own
    p_raw, p_holm = map(float, re.search(r"\(p ([\d.]+), Holm ([\d.]+)\)", said).groups())
    assert p_holm >= p_raw
