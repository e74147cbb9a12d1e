"""What an arm costs each config (``dtype-bench arm-cost``): runs paired with the baseline arm's
run of the same scenario, config and seed, ratios and their intervals, failures named, a study
with arms ordered pair by pair, and the checkpointing study file."""
import math
from pathlib import Path

import pandas as pd
import pytest
from conftest import COMPLETED

from benchlib.analysis.arm_cost import cost_table
from benchlib.cli import main as cli
from benchlib.core.records import read_record
from benchlib.study.studyfile import load_study

REPO = Path(__file__).resolve().parents[1]


def record(arm, config="amp_bf16", step_ms=100.0, memory=10.0, status="ok", seed=0, batch=8, std=2.0, reason=None):
    metrics = {} if status not in ("ok", "stalled") else {
        "step_ms": step_ms, "step_ms_std": std, "timed_steps": 50, "tokens_per_s": batch * 16 * 1000 / step_ms,
        "memory": memory, "mfu_pct": 30.0}
    return {"schema": 1, "run_id": f"{arm}/A/{config}/seed{seed}", "status": status, "reason": reason,
            "scenario": "A", "config": config, "seed": seed, "dtype": {}, "metrics": metrics, "wall_s": 1.0,
            "run": {"size": "base", "batch_size": batch, "grad_accum": 1, "seq_len": 16, "timing_windows": 5,
                    "extra": {"arm": arm}},
            "env": {"device_name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "git_commit": "abc123",
                    "date": "2026-11-24T10:00:00+00:00"}}


def row(table, arm, config="amp_bf16"):
    return table[(table["arm"] == arm) & (table["config"] == config)].iloc[0]


def test_an_arm_is_priced_against_the_baseline_run_of_its_config():
    recs = [record("plain"), record("checkpointed", step_ms=125.0, memory=6.0),
            record("plain", "fp32_tf32_matmul", step_ms=200.0, memory=20.0),
            record("checkpointed", "fp32_tf32_matmul", step_ms=220.0, memory=8.0)]
    t = cost_table(recs)
    ck = row(t, "checkpointed")
    assert ck["time_ratio"] == pytest.approx(1.25) and ck["time_cost_pct"] == pytest.approx(25.0)
    assert ck["memory_ratio"] == pytest.approx(0.6) and ck["memory_saved_pct"] == pytest.approx(40.0)
    # delta method on the log ratio: se = sqrt((2/125)^2/5 + (2/100)^2/5)
    se = math.sqrt((2 / 125) ** 2 / 5 + (2 / 100) ** 2 / 5)
    assert ck["time_ratio_lo"] == pytest.approx(1.25 * math.exp(-1.959964 * se), rel=1e-5)
    assert ck["time_ratio_hi"] == pytest.approx(1.25 * math.exp(1.959964 * se), rel=1e-5)
    assert row(t, "checkpointed", "fp32_tf32_matmul")["memory_saved_pct"] == pytest.approx(60.0)
    assert row(t, "plain")["note"] == "the baseline arm"
    # the baseline's run comes first within its (scenario, config, seed)
    assert list(t["arm"][:2]) == ["plain", "checkpointed"]


def test_a_stalled_speed_run_is_priced_and_the_text_says_why_its_speed_counts():
    from benchlib.analysis.arm_cost import markdown
    t = cost_table([record("plain", status="stalled"), record("checkpointed", step_ms=125.0, status="stalled")])
    assert row(t, "checkpointed")["time_ratio"] == pytest.approx(1.25)
    text = markdown(t, [], "plain")
    assert "Runs marked stalled trained and were timed on every step" in text
    assert "Runs marked" not in markdown(cost_table([record("plain"), record("checkpointed")]), [], "plain")


def test_a_failed_run_or_a_missing_or_different_baseline_has_no_ratio_and_says_why():
    recs = [record("plain"), record("checkpointed", status="oom", reason="CUDA out of memory\n"),
            record("checkpointed", "bf16_pure"),
            record("plain", "fp32_tf32_matmul", status="error", reason="boom"),
            record("checkpointed", "fp32_tf32_matmul"),
            record("plain", "amp_fp16"), record("checkpointed", "amp_fp16", batch=16)]
    t = cost_table(recs)
    notes = {c: row(t, "checkpointed", c)["note"] for c in ("amp_bf16", "bf16_pure", "fp32_tf32_matmul", "amp_fp16")}
    assert notes == {"amp_bf16": "checkpointed: oom: CUDA out of memory",
                     "bf16_pure": "no plain run of this scenario, config and seed",
                     "fp32_tf32_matmul": "plain: error",
                     "amp_fp16": "256 tokens per step against plain's 128: step times do not compare"}
    assert t[t["arm"] == "checkpointed"]["time_ratio"].isna().all()


def test_without_the_baseline_arm_the_error_names_the_arms_there():
    with pytest.raises(ValueError, match="no runs of the baseline arm 'plain'; the arms found are ckpt, eager"):
        cost_table([record("eager"), record("ckpt")])


def test_the_checkpointing_study_differs_between_its_arms_only_in_checkpointing_and_runs_pair_by_pair():
    study = load_study(REPO / "params" / "checkpointing.yaml")
    assert study.arms == {"plain": {"activation_checkpointing": False},
                          "checkpointed": {"activation_checkpointing": True}}
    runs = study.runs()
    assert [r.arm for r in runs[:4]] == ["plain", "checkpointed"] * 2
    assert [r.cfg.run_id for r in runs[:2]] == [runs[0].cfg.run_id] * 2
    assert [r.cfg.activation_checkpointing for r in runs[:2]] == [False, True]
    assert len(runs) == 2 * len(study.scenarios) * len(study.configs)


def test_arm_cost_of_a_tiny_study_run_on_cpu(tmp_path, capsys):
    path = tmp_path / "ck.yaml"
    path.write_text("study: ck\nscenarios: [A]\nconfigs: [fp32_baseline]\nseeds: [0]\nnotebook_seeds: []\n"
                    "order: cells\nsize: tiny\nsteps: 12\ndevice: cpu\ndata: synthetic\neval_every: 0\n"
                    "eval_batches: 1\ntiming_warmup: 2\ntiming_windows: 3\njudge_quality: false\narms:\n"
                    "  plain: {activation_checkpointing: false}\n  checkpointed: {activation_checkpointing: true}\n")
    assert cli(["sweep", str(path), "--out", str(tmp_path / "out"), "--no-analysis", "--no-html"]) == 0
    study = tmp_path / "out" / "ck"
    ck = read_record(study / "runs" / "checkpointed" / "A" / "fp32_baseline" / "seed0" / "result.json")
    assert ck["run"]["activation_checkpointing"] is True and ck["status"] in COMPLETED
    capsys.readouterr()
    assert cli(["arm-cost", str(study)]) == 0
    out = capsys.readouterr().out
    assert f"| A | fp32_baseline | 0 | checkpointed | {ck['status']} |" in out
    assert {"arm_cost.csv", "arm_cost.md", "arm_cost.vl.json"} <= {p.name for p in (study / "arm_cost").iterdir()}
    table = pd.read_csv(study / "arm_cost" / "arm_cost.csv")
    assert list(table["arm"]) == ["plain", "checkpointed"] and table["time_ratio"].iloc[1] > 0
    assert cli(["arm-cost", str(study), "--baseline", "single"]) != 0
    assert "no runs of the baseline arm 'single'; the arms found are checkpointed, plain" in capsys.readouterr().err


def test_the_committed_checkpointing_table_is_reproduced_from_its_records(tmp_path):
    committed = REPO / "executed" / "h100" / "checkpointing"
    if not (committed / "arm_cost" / "arm_cost.csv").exists():
        pytest.skip("no committed checkpointing study")
    assert cli(["arm-cost", str(committed), "--out", str(tmp_path)]) == 0
    new, old = (pd.read_csv(p / "arm_cost.csv") for p in (tmp_path, committed / "arm_cost"))
    assert list(new.columns) == list(old.columns) and len(new) == len(old) >= 4
    pd.testing.assert_frame_equal(new, old, check_exact=False, rtol=1e-9)
