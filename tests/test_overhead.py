"""A study's run walls split into the training steps and each kind of overhead, from the
records' own timings (``analysis.overhead``, which the sweep prints from): the parts add up to
the sweep's wall, and records without the sweep's timing are counted and left out."""
import re

import pytest

from benchlib.analysis.overhead import PARTS, parts_table, run_parts, summary, where_it_went


def record(scenario="A", wall=100.0, own=90.0, setup=10.0, data=1.0, model=6.0, train=75.0, first=5.0, evals=10.0,
           final=0.0):
    return {"scenario": scenario, "config": "amp_bf16", "seed": 0, "wall_s": own,
            "sweep": {"wall_s": wall, "notebook": True, "runs_per_gpu": 1},
            "metrics": {"time/setup_s": setup, "time/data_s": data, "time/model_s": model, "time/train_s": train,
                        "time/first_step_s": first, "time/eval_s": evals, "time/final_eval_s": final,
                        "time/steps_s": 1.0}}


def test_a_runs_parts_add_up_to_its_wall_and_steps_are_the_loops_own_time():
    p = run_parts(record())
    assert p["start"] == 10.0 and p["setup_other"] == 3.0 and p["rest"] == 5.0  # 90 - 10 - 75
    assert p["steps"] == 60.0  # 75 of loop - 5 first step - 10 evaluation; not the record's steps_s (1.0)
    assert sum(p[k] for k in PARTS) == pytest.approx(100.0)


def test_the_final_evaluation_counts_once_and_saved_states_are_not_steps():
    # 10 s of evaluation, 4 of them after the loop; 2 s writing the training state inside it
    rec = record(evals=10.0, final=4.0)
    rec["metrics"]["time/state_s"] = 2.0
    p = run_parts(rec)
    assert p["evaluation"] == 10.0 and p["state"] == 2.0
    assert p["steps"] == 62.0  # 75 of loop - 5 first step - 6 evaluation in it - 2 state
    assert p["rest"] == 1.0  # 90 - 10 setup - 75 loop - 4 final evaluation
    assert sum(p[k] for k in PARTS) == pytest.approx(100.0)


def test_a_record_without_the_final_evaluations_time_shares_it_over_its_evaluations():
    # 1,500 steps, eval_every 500: evaluations after steps 500 and 1,000 and the final one
    rec = record(evals=9.0)
    del rec["metrics"]["time/final_eval_s"]
    rec["run"] = {"steps": 1500, "eval_every": 500}
    assert run_parts(rec)["steps"] == 75.0 - 5.0 - 6.0 and run_parts(rec)["rest"] == 5.0 - 3.0
    rec["metrics"]["stability/diverged_step"] = 700  # stopped at step 700: one evaluation in the loop
    assert run_parts(rec)["steps"] == 75.0 - 5.0 - 4.5
    rec["resumed"] = {"from_step": 600}  # this process started after the first one
    del rec["metrics"]["stability/diverged_step"]
    assert run_parts(rec)["steps"] == 75.0 - 5.0 - 4.5


def test_shares_are_of_the_summed_wall_per_scenario_and_for_the_study():
    runs, left_out = parts_table([record("A"), record("A", wall=300.0, own=290.0, train=275.0),
                                  record("D"), {"scenario": "D", "metrics": {}, "wall_s": 5.0}])
    assert left_out == 1
    s = summary(runs).set_index("scenario")
    assert s.loc["A", "runs"] == 2 and s.loc["A", "steps_pct"] == pytest.approx(100 * (60 + 260) / 400)
    assert s.loc["all", "runs"] == 3 and s.loc["all", "wall_s"] == 500.0
    assert s.loc["all", [f"{k}_pct" for k in PARTS]].sum() == pytest.approx(100.0)


def test_a_real_record_has_what_the_split_reads(tmp_path):
    from benchlib.training.loop import run
    rec = run({"scenario": "A", "steps": 6, "eval_every": 3, "eval_batches": 1}, out_dir=tmp_path / "runs" / "a",
              progress=False)
    assert run_parts(rec) is None  # run outside a sweep: no sweep timing
    rec["sweep"] = {"wall_s": rec["wall_s"] + 2.0, "notebook": False}
    p = run_parts(rec)
    assert p["start"] == pytest.approx(2.0) and p["steps"] > 0 and p["evaluation"] > 0 and p["rest"] >= 0
    assert sum(p[k] for k in PARTS) == pytest.approx(p["wall_s"])
    # the loop's own account of its steps (evaluations and saved states left out) is the part's
    assert p["steps"] == pytest.approx(rec["metrics"]["time/steps_s"], abs=1e-6)
    assert 0 < rec["metrics"]["time/final_eval_s"] < rec["metrics"]["time/eval_s"]


def test_the_first_step_is_split_by_compile_cache_when_records_say():
    from benchlib.analysis.overhead import first_step_by_cache
    recs = [record(first=f) for f in (40.0, 50.0, 4.0, 8.0)]
    for r, state in zip(recs, ("miss", "miss", "hit", "hit")):
        r["metrics"]["compile/cache"] = state
    runs, _ = parts_table(recs)
    line = first_step_by_cache(runs)
    # per cache state, in its own ;-separated part: run count, median first step, share of the 400 s wall
    assert re.search(r"\bhit\b[^;=]*\b2\b[^;]*\b6\.0 s[^;]*\b3%", line), line
    assert re.search(r"\bmiss\b[^;=]*\b2\b[^;]*\b45\.0 s[^;]*\b22%", line), line
    assert first_step_by_cache(parts_table([record()])[0]) == ""  # records before compile/* say nothing


def test_the_efficiency_line_says_below_the_target_and_never_rounds_a_miss_up_to_it():
    from benchlib.analysis.overhead import efficiency_line
    # A: 60 of 100 s in steps; D: 260 of 300 s: the study 320 / 400 = 80%
    recs = [record("A"), record("D", wall=300.0, own=290.0, train=275.0)]
    line = efficiency_line("s", recs)
    assert re.search(r"\b80%", line) and re.search(r"\bA 60\b", line) and re.search(r"\bD 87\b", line)
    assert "below" not in line
    assert "below" in efficiency_line("s", [record("A")])  # 60% < 70%
    # 69.6% in steps: shown with its decimal, not as a 70 that reads as met
    near = efficiency_line("s", [record("A", wall=1000.0, own=990.0, setup=10.0, train=711.0, first=5.0, evals=10.0)])
    assert "69.6%" in near and "below" in near, near
    assert efficiency_line("s", [{"scenario": "A", "metrics": {}, "wall_s": 5.0}]) == ""


def test_where_the_time_went_is_a_row_per_scenario_with_steps_first():
    table = where_it_went([record("A"), record("D", wall=300.0, own=290.0, train=275.0)])
    head, *rows = [line.split() for line in table.splitlines()[1:]]
    assert head[:2] == ["runs", "steps"] and set(head[1:]) == set(PARTS)
    shares = {r[0]: dict(zip(head, map(int, r[1:]))) for r in rows if r and r[0] in ("A", "D", "all")}
    assert shares["A"]["steps"] == 60 and shares["D"]["steps"] == 87 and shares["all"]["steps"] == 80
    assert shares["all"]["runs"] == 2
    assert where_it_went([{"scenario": "A", "metrics": {}, "wall_s": 5.0}]) == ""
