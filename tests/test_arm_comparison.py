"""The paired comparison of arms (``benchlib.analysis.arms``, ``dtype-bench arms``) on small
synthetic records: a known speed-up comes back with an interval that covers it, a run without its
baseline partner is refused in one line naming it, failed runs count as no pair, served precisions
compare with the trained one, the break-even names the sizes; and the committed arm studies'
tables are what it computes from their records."""
import copy
import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, line_with

from benchlib.analysis import arms
from dtype_bench.cli import main as cli
from benchlib.core.records import load_records

CHECKPOINTING = REPO / "executed" / "h100" / "checkpointing"


@pytest.fixture(scope="module")
def template():
    if not CHECKPOINTING.is_dir():
        pytest.skip("no committed checkpointing study to take a record's shape from")
    rec = load_records(CHECKPOINTING)[0]
    rec.pop("_path")
    return rec


def record(template, arm="plain", seed=0, step_ms=10.0, std=0.2, memory=4.0, status="ok", config="amp_bf16",
           size="base", serve=None):
    r = copy.deepcopy(template)
    r.update(scenario="A", config=config, seed=seed, status=status, reason="" if status == "ok" else "out of memory",
             run_id=f"A-{config}-{arm}-{size}-{seed}")
    r["run"].update(size=size, extra={"study": "t", "arm": arm}, timing_windows=5)
    r["metrics"].update(step_ms=step_ms, step_ms_std=std, memory=memory, timed_steps=50)
    if serve is not None:
        r["serve"] = serve
    return r


def study(template, ratio=0.8, seeds=6, drop=None):
    """Seeds of a plain and a fast arm; the fast arm's step time is ``ratio`` x plain's, with noise."""
    rng = np.random.default_rng(0)
    recs = []
    for s in range(seeds):
        base = 100 * (1 + 0.1 * s)  # seeds differ a lot; the pairing takes that out
        recs.append(record(template, "plain", s, base))
        recs.append(record(template, "fast", s, base * ratio * (1 + 0.02 * rng.standard_normal())))
    return [r for r in recs if (r["run"]["extra"]["arm"], r["seed"]) != drop]


def write(folder, recs):
    for r in recs:
        d = folder / r["run_id"]
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps(r))
    return folder


def test_a_known_speed_up_is_recovered_with_an_interval_that_covers_it(template):
    s = arms.compare(arms.record_rows(study(template)), "arm", "step_ms", "plain").iloc[0]
    assert s["arm"] == "fast" and s["pairs"] == 6
    assert s["ratio_lo"] <= 0.8 <= s["ratio_hi"] and s["ratio_hi"] - s["ratio_lo"] < 0.05
    assert s["speedup"] == pytest.approx(1.25, rel=0.02) and s["change_pct"] == pytest.approx(-20, abs=2)
    unpaired = arms.compare(arms.record_rows(study(template, ratio=1.0)), "arm", "step_ms", "plain").iloc[0]
    assert unpaired["ratio_lo"] <= 1.0 <= unpaired["ratio_hi"]  # no effect: the interval covers 1


def test_one_pair_gets_the_interval_of_its_timed_windows(template):
    recs = [record(template, "plain", 0, 100.0, std=1.0), record(template, "fast", 0, 80.0, std=1.0)]
    s = arms.compare(arms.record_rows(recs), "arm", "step_ms").iloc[0]
    assert s["pairs"] == 1 and s["ratio_lo"] < 0.8 < s["ratio_hi"]
    flat = [record(template, "plain", 0, 100.0, std=0.0), record(template, "fast", 0, 80.0, std=0.0)]
    assert math.isnan(arms.compare(arms.record_rows(flat), "arm", "step_ms").iloc[0]["ratio_lo"])


def test_a_missing_pair_is_refused_in_one_line_naming_it(template, tmp_path, capsys):
    with pytest.raises(ValueError) as e:
        arms.pairs(arms.record_rows(study(template, drop=("plain", 3))), "arm", "step_ms", "plain")
    assert "no arm=plain row to pair with arm=fast" in str(e.value) and "seed=3" in str(e.value)
    write(tmp_path / "s", study(template, drop=("plain", 3)))
    assert cli(["arms", str(tmp_path / "s"), "--arm", "arm", "--metric", "step_ms"]) == 2
    err = capsys.readouterr().err.strip()
    assert "seed=3" in err and "\n" not in err


@pytest.mark.parametrize("kwargs,expected", [
    ({"arm": "arm", "metric": "step_ms", "baseline": "slow"}, "no rows of the baseline arm='slow': the values are fast, plain"),
    ({"arm": "arm", "metric": "nope"}, "no column 'nope' in the rows"),
    ({"arm": "arm", "metric": "step_ms", "pair": ["scenario"]}, "rows for arm="),
    ({"arm": "arm", "metric": "step_ms", "by": ["run.lr"]}, "--by run.lr: a group key must be a pairing key"),
])
def test_bad_questions_are_refused_in_one_line(template, kwargs, expected):
    with pytest.raises(ValueError) as e:
        arms.compare(arms.record_rows(study(template, seeds=2)), **kwargs)
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_a_failed_run_is_no_pair_and_its_note_says_why(template):
    recs = study(template, seeds=3)
    recs[1].update(status="oom", reason="CUDA error\nout of memory")  # fast, seed 0: the last line is the why
    p = arms.pairs(arms.record_rows(recs), "arm", "step_ms")
    assert math.isnan(p.loc[0, "ratio"]) and p.loc[0, "note"] == "oom: out of memory"
    s = arms.compare(arms.record_rows(recs), "arm", "step_ms").iloc[0]
    assert s["pairs"] == 2 and "oom" in s["note"]


def test_groups_by_config_and_memory_saved(template):
    recs = [record(template, a, 0, 10.0, memory=m, config=c) for c in ("amp_bf16", "fp32_baseline")
            for a, m in (("plain", 4.0), ("fast", 3.0 if c == "amp_bf16" else 4.0))]
    s = arms.compare(arms.record_rows(recs), "arm", "memory").set_index("config")
    assert s.loc["amp_bf16", "change_pct"] == pytest.approx(-25) and s.loc["fp32_baseline", "change_pct"] == 0


def test_break_even_is_the_smallest_size_from_which_every_larger_one_pays(template):
    order = ["base", "medium", "large", "xl"]
    recs = []
    for size, sp in zip(order, (0.8, 1.2, 0.9, 1.1)):
        recs += [record(template, size, 0, 100.0, config="amp_bf16", size=size),
                 record(template, size, 0, 100.0 / sp, config="fp8", size=size)]
    df = arms.record_rows(recs)
    df["arm"] = "default"
    assert arms.break_evens(arms.compare(df, "config", "step_ms"), "config", "size", order) == {
        "fp8": "pays from xl (1.10x there)"}
    recs[5]["status"] = "oom"  # large fails: not a speed-up, named
    df = arms.record_rows(recs)
    df["arm"] = "default"
    assert arms.break_evens(arms.compare(df, "config", "step_ms"), "config", "size", order) == {
        "fp8": "pays from medium (1.20x there, 1.10x at xl); no speed-up at large"}


def test_served_precisions_compare_with_the_trained_quality(template, tmp_path, capsys):
    def served(v, status="ok"):
        return {"status": "ok", "metrics": {"val_loss": v}} if status == "ok" else {"status": status, "reason": "no kernel"}
    recs = []
    for seed, fp16 in ((0, 3.3), (1, 3.6)):
        r = record(template, "plain", seed, serve={"bf16": served(3.0), "fp16": served(fp16), "fp8": served(0, "skipped")})
        r["metrics"]["quality/val_loss"] = 3.0
        recs.append(r)
    s = arms.compare(arms.serve_rows(recs), "serve_mode", "quality").set_index("serve_mode")
    assert s.loc["bf16", "change_pct"] == pytest.approx(0) and s.loc["fp16", "change_pct"] == pytest.approx(15)
    assert s.loc["fp16", "change_pct_max"] == pytest.approx(20) and s.loc["fp8", "pairs"] == 0
    assert "skipped: no kernel" in s.loc["fp8", "note"]
    write(tmp_path / "plain", [record(template, "plain", 0)])
    assert cli(["arms", str(tmp_path / "plain"), "--arm", "serve_mode", "--metric", "quality"]) == 2
    assert line_with(capsys.readouterr().err, "serve", "serve_modes")  # what is missing, and the key that makes it


def test_inference_records_compare_modes_with_fp32(tmp_path, capsys):
    modes = [{"mode": "fp32", "status": "ok", "forward_ms": 10.0, "quality/val_loss": 3.0},
             {"mode": "bf16", "status": "ok", "forward_ms": 4.0, "quality/val_loss": 3.01},
             {"mode": "fp16", "status": "skipped", "reason": "no kernel"}]
    rec = {"kind": "inference", "run": {"scenario": "A", "size": "tiny"}, "weights": "runs/A/model",
           "env": {"device_name": "cpu", "date": "2026-11-25"}, "modes": modes}
    (tmp_path / "inference.json").write_text(json.dumps(rec))
    assert cli(["arms", str(tmp_path), "--arm", "mode", "--metric", "forward_ms", "--out", str(tmp_path / "o")]) == 0
    s = pd.read_csv(tmp_path / "o" / "arms.csv").set_index("mode")
    assert s.loc["bf16", "speedup"] == pytest.approx(2.5) and s.loc["fp16", "pairs"] == 0
    assert {"arms.csv", "arms.md", "arms.vl.json", "arms_pairs.csv"} <= {p.name for p in (tmp_path / "o").iterdir()}


def test_the_chart_draws_one_point_per_group_and_arm(template):
    s = arms.compare(arms.record_rows(study(template, seeds=3)), "arm", "step_ms")
    spec = arms.chart(s, "arm", "step_ms", "plain").to_dict()
    assert len(spec["datasets"][next(iter(spec["datasets"]))]) == 1


@pytest.mark.parametrize("folder,notebook_table,arm,metric", [
    ("checkpointing", "arm_cost/arm_cost.csv", "arm", "step_ms"),
    ("fp8_sizes", "fp8/fp8_sizes.csv", "config", "step_ms"),
])
def test_a_committed_arm_studys_table_is_what_its_records_give(folder, notebook_table, arm, metric):
    study_dir = REPO / "executed" / "h100" / folder
    if not (study_dir / notebook_table).is_file():
        pytest.skip(f"no committed {folder} study")
    committed = pd.read_csv(study_dir / notebook_table)
    df, _ = arms.rows(study_dir)
    if folder == "fp8_sizes":
        df["arm"] = df["arm"].where(df["arm"] != df["size"], "default")
    again = arms.compare(df, arm, metric)
    keys = [c for c in again.columns[:list(again.columns).index("pairs")]]
    merged = committed.merge(again, on=keys, suffixes=("", "_again"))
    assert len(merged) == len(committed) == len(again)
    for c in ("ratio", "ratio_lo", "ratio_hi", "pairs"):
        assert np.allclose(merged[c], merged[f"{c}_again"], rtol=1e-9, equal_nan=True), c


def test_a_run_that_shared_its_gpu_has_no_speed_and_says_so(template):
    recs = study(template, seeds=3)
    recs[1]["sweep"] = {"runs_per_gpu": 4}  # fast, seed 0
    p = arms.pairs(arms.record_rows(recs), "arm", "step_ms")
    assert math.isnan(p.loc[0, "ratio"]) and p.loc[0, "note"] == "shared its GPU: no speed metric"
    assert arms.compare(arms.record_rows(recs), "arm", "memory").iloc[0]["pairs"] == 3  # memory still counts


def test_the_committed_inference_tables_speed_ups_are_what_the_modes_give():
    study_dir = REPO / "executed" / "h100" / "inference_2026-11-24"
    if not (study_dir / "inference.csv").is_file():
        pytest.skip("no committed inference study")
    old = pd.read_csv(study_dir / "inference.csv")
    old = old[(old["mode"] != "fp32") & old["speedup_vs_fp32"].notna()].set_index(["scenario", "mode"])
    df, _ = arms.rows(study_dir)
    new = arms.compare(df, "mode", "forward_ms").set_index(["scenario", "mode"]).loc[old.index]
    assert len(old) >= 4 and np.allclose(new["speedup"], old["speedup_vs_fp32"], rtol=1e-9)
