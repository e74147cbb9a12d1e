"""Where FP8 pays end to end: the study file, the per-size table and speed-up, the break-even
rule, the chart and the ``fp8-sizes`` command."""
import json
import math
from pathlib import Path

import pytest

from benchlib.analysis.charts import title_of
from benchlib.analysis.fp8_sizes import break_even, break_evens, size_table, speedup_chart
from benchlib.cli import main as cli
from benchlib.study.studyfile import load_study

REPO = Path(__file__).resolve().parents[1]
SIZES = ["base", "medium", "large", "xl"]
MATMULS = [{"name": "h.*.attn.c_attn", "in": 8, "out": 24, "count": 2, "fp8": True},
           {"name": "h.*.mlp.c_fc", "in": 8, "out": 32, "count": 2, "fp8": True}]


def record(size, config, step_ms=100.0, status="ok", step_ms_std=0.0, reason=None, batch=4, arm=None):
    """A record with what the analysis reads: 4 x 16 tokens per step, five timed windows; from
    the study's arm ``arm`` (default: the arm named after its size)."""
    tokens = batch * 16
    metrics = {} if status not in ("ok", "stalled") else {
        "step_ms": step_ms, "step_ms_std": step_ms_std, "timed_steps": 50, "tokens_per_s": tokens * 1000 / step_ms,
        "mfu_pct": 40.0, "memory": 10.0, "flops_per_token": 1200}
    return {"schema": 1, "run_id": f"{size}/A/{config}/seed0", "status": status, "reason": reason, "scenario": "A",
            "config": config, "seed": 0, "dtype": {}, "metrics": metrics, "wall_s": 1.0,
            "run": {"size": size, "batch_size": batch, "grad_accum": 1, "seq_len": 16, "timing_windows": 5,
                    "extra": {"study": "fp8_sizes", "arm": arm or size}},
            "env": {"device_name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "cuda": "13.0", "torchao": "0.18.0",
                    "git_commit": "abc123", "date": "2026-11-23T10:00:00+00:00"},
            "model": {"parameters": {"base": 124e6, "medium": 355e6, "large": 774e6, "xl": 1.56e9}.get(size, 1e5),
                      "matmuls": MATMULS} if status != "skipped" else {}}


def study(speedups, config="amp_bf16_fp8"):
    """amp_bf16 at 100 ms per size, ``config`` at 100 / speed-up."""
    return [r for s, x in zip(SIZES, speedups) for r in (record(s, "amp_bf16"), record(s, config, 100.0 / x))]


# ---- the break-even rule ---------------------------------------------------------------
def test_break_even_is_the_first_size_from_which_float8_stays_faster():
    assert break_even(dict(zip(SIZES, [0.8, 0.9, 1.1, 1.2]))) == "large"


def test_a_size_that_pays_then_loses_again_is_not_the_break_even():
    assert break_even(dict(zip(SIZES, [0.8, 1.1, 0.9, 1.2]))) == "xl"


def test_no_break_even_when_float8_never_pays():
    assert break_even(dict(zip(SIZES, [0.5, 0.7, 0.9, 0.99]))) is None
    assert break_evens(size_table(study([0.5, 0.7, 0.9, 0.99])))["amp_bf16_fp8"] == \
        "pays at none of the sizes measured (base, medium, large, xl)"


def test_break_even_sentence_names_the_size_and_its_speed_ups():
    text = break_evens(size_table(study([0.8, 0.9, 1.1, 1.25])))["amp_bf16_fp8"]
    assert text == "pays from large (1.10x there, 1.25x at xl)"


# ---- the table -------------------------------------------------------------------------
def test_table_has_one_row_per_size_and_config_in_size_order():
    recs = study([0.8, 0.9, 1.1, 1.2])[::-1]  # order of the records does not matter
    t = size_table(recs)
    assert list(zip(t["size"], t["config"]))[:3] == [("base", "amp_bf16"), ("base", "amp_bf16_fp8"),
                                                     ("medium", "amp_bf16")]
    assert len(t) == 8


def test_speed_up_is_the_ratio_of_step_times_against_amp_bf16_of_the_same_size():
    t = size_table([record("xl", "amp_bf16", 465.0), record("xl", "amp_bf16_fp8", 634.0),
                    record("base", "amp_bf16", 30.0), record("base", "amp_bf16_fp8", 20.0)])
    sp = dict(zip(zip(t["size"], t["config"]), t["speedup"]))
    assert sp[("xl", "amp_bf16_fp8")] == pytest.approx(465 / 634)
    assert sp[("base", "amp_bf16_fp8")] == pytest.approx(1.5)
    assert sp[("xl", "amp_bf16")] == 1.0


def test_linear_columns_come_from_model_matmuls():
    row = size_table([record("base", "amp_bf16")]).iloc[0]
    assert row["linear_shapes"] == 2 and row["fp8_layers"] == 4
    # 6 x (8*24*2 + 8*32*2) FLOPs per token x 64 tokens per step
    assert row["linear_tflop_per_step"] == pytest.approx(6 * (384 + 512) * 64 / 1e12)
    assert row["linear_flops_pct"] == pytest.approx(100 * 6 * 896 / 1200)


def test_failed_float8_run_has_no_speed_up_and_says_why():
    recs = study([0.8, 0.9, 1.1]) + [record("xl", "amp_bf16"),
                                     record("xl", "amp_bf16_fp8", status="oom", reason="Traceback\nCUDA out of memory")]
    t = size_table(recs)
    xl = t[(t["size"] == "xl") & (t["config"] == "amp_bf16_fp8")].iloc[0]
    assert math.isnan(xl["speedup"])
    assert xl["note"] == "amp_bf16_fp8 oom: CUDA out of memory"
    assert break_evens(t)["amp_bf16_fp8"] == "pays from large (1.10x there); no speed-up at xl"


def test_failed_reference_leaves_its_size_without_speed_up():
    t = size_table([record("base", "amp_bf16", status="error", reason="boom"), record("base", "amp_bf16_fp8", 50.0)])
    assert math.isnan(t["speedup"].iloc[1]) and t["note"].iloc[1] == "amp_bf16 at base: error"


def test_a_run_refused_before_it_started_is_named_without_speed_up():
    refused = record("base", "amp_bf16_fp8", status="error", reason="device='cuda' but no CUDA GPU is visible here")
    refused["run"].update(batch_size=None, grad_accum=None)
    t = size_table([record("base", "amp_bf16"), refused])
    assert math.isnan(t["speedup"].iloc[1]) and t["note"].iloc[1].startswith("amp_bf16_fp8 error: device='cuda'")
    assert t["linear_shapes"].iloc[1] == 2  # the size's shapes, from the run that built the model


def test_runs_of_different_tokens_per_step_are_not_compared():
    t = size_table([record("base", "amp_bf16"), record("base", "amp_bf16_fp8", 50.0, batch=8)])
    assert math.isnan(t["speedup"].iloc[1]) and "do not compare" in t["note"].iloc[1]


def test_speed_up_interval_brackets_the_ratio_when_windows_spread():
    t = size_table([record("base", "amp_bf16", 100.0, step_ms_std=2.0),
                    record("base", "amp_bf16_fp8", 80.0, step_ms_std=2.0)])
    fp8 = t.iloc[1]
    assert fp8["speedup"] == pytest.approx(1.25)
    assert fp8["speedup_lo"] < fp8["speedup"] < fp8["speedup_hi"]
    # delta method: se(log ratio) = sqrt((2/100)^2/5 + (2/80)^2/5); 95% -> 1.96 se
    se = math.sqrt((0.02 ** 2 + 0.025 ** 2) / 5)
    assert fp8["speedup_hi"] == pytest.approx(1.25 * math.exp(1.959964 * se), rel=1e-5)


def test_two_records_of_one_size_and_config_are_refused():
    with pytest.raises(ValueError, match="one run per size, arm and config"):
        size_table([record("base", "amp_bf16"), record("base", "amp_bf16")])


def test_an_arm_with_a_larger_micro_batch_is_a_series_of_its_own():
    big = [record("xl", "amp_bf16", 400.0, batch=16, arm="xl_16k"), record("xl", "amp_bf16_fp8", 320.0, batch=16, arm="xl_16k")]
    t = size_table(study([0.8, 0.9, 0.95, 0.97]) + big)
    xl = t[t["size"] == "xl"]
    assert list(zip(xl["series"], xl["config"])) == [("default", "amp_bf16"), ("default", "amp_bf16_fp8"),
                                                     ("xl_16k", "amp_bf16"), ("xl_16k", "amp_bf16_fp8")]
    # each against amp_bf16 of its own arm (the xl_16k arm's 256 tokens per step are not the default's 64)
    assert list(xl["speedup"].round(4)) == [1.0, 0.97, 1.0, 1.25]
    assert break_evens(t) == {"amp_bf16_fp8": "pays at none of the sizes measured (base, medium, large, xl)",
                              "amp_bf16_fp8 (xl_16k)": "pays from xl (1.25x there)"}
    spec = speedup_chart(t).to_dict()
    assert spec["layer"][0]["encoding"]["strokeDash"]["field"] == "series"


def test_a_missing_reference_in_an_arm_is_named_with_its_arm():
    t = size_table([record("xl", "amp_bf16"), record("xl", "amp_bf16_fp8", 80.0, batch=16, arm="xl_16k")])
    assert t["note"].iloc[1] == "no amp_bf16 run at xl (xl_16k)"


# ---- the chart -------------------------------------------------------------------------
def test_chart_title_states_the_break_even_and_subtitle_names_failed_runs():
    recs = study([0.8, 0.9, 1.1]) + [record("xl", "amp_bf16"), record("xl", "amp_bf16_fp8", status="oom")]
    spec = speedup_chart(size_table(recs)).to_dict()
    assert "amp_bf16_fp8: pays from large" in title_of(spec)
    assert "failed: xl/amp_bf16_fp8 (oom)" in spec["title"]["subtitle"][0]
    assert "tokens per micro-batch (the M of each Linear matmul): base 64, medium 64" in " ".join(spec["title"]["subtitle"])
    lo, hi = spec["layer"][0]["encoding"]["y"]["scale"]["domain"]
    assert lo < 0.8 and hi > 1.0  # the rule at 1 (amp_bf16's speed) stays inside the chart
    rule = [layer for layer in spec["layer"] if layer["mark"]["type"] == "rule"]
    assert rule and spec["datasets"][rule[0]["data"]["name"]] == [{"y": 1.0}]


# ---- a real record ---------------------------------------------------------------------
def test_a_real_tiny_cpu_record_has_every_key_the_analysis_reads(tmp_path):
    from benchlib.training.loop import run
    root = tmp_path / "fp8_sizes"
    base = run({"scenario": "A", "size": "tiny", "config": "amp_bf16", "steps": 8, "device": "cpu",
                "eval_batches": 1, "forensics": False}, out_dir=root / "runs/tiny/A/amp_bf16/seed0", progress=False)
    fp8 = run({"scenario": "A", "size": "tiny", "config": "amp_bf16_fp8", "steps": 8, "device": "cpu"},
              out_dir=root / "runs/tiny/A/amp_bf16_fp8/seed0", progress=False)
    assert base["model"]["matmuls"] and base["metrics"]["step_ms"] > 0
    t = size_table([base, fp8])
    ref = t.iloc[0]
    assert ref["speedup"] == 1.0 and ref["linear_shapes"] == 4 and ref["tokens_per_step"] == 8 * 64
    assert ref["linear_flops_pct"] > 0 and ref["peak_gib"] > 0
    # no FP8 GPU here: the float8 run is skipped, and the table says so
    assert fp8["status"] == "skipped" and math.isnan(t.iloc[1]["speedup"])
    assert t.iloc[1]["note"].startswith("amp_bf16_fp8 skipped: ")


# ---- the study file --------------------------------------------------------------------
def test_study_file_expands_to_three_configs_at_each_of_four_sizes_and_xl_at_16k_tokens():
    runs = load_study(REPO / "params/fp8_sizes.yaml").runs()
    assert len(runs) == 15
    assert {r.arm: r.cfg.size for r in runs} == {**{s: s for s in SIZES}, "xl_16k": "xl"}
    for arm in SIZES + ["xl_16k"]:
        assert sorted(r.cfg.config for r in runs if r.arm == arm) == \
            ["amp_bf16", "amp_bf16_fp8", "amp_bf16_fp8_rowwise"]
    big = [r.cfg for r in runs if r.arm == "xl_16k"]
    assert {(c.batch_size, c.grad_accum, c.activation_checkpointing) for c in big} == {(16, 1, True)}
    cfg = runs[0].cfg
    assert (cfg.scenario, cfg.device, cfg.compile, cfg.forensics, cfg.seed) == ("A", "cuda", "on", False, 0)
    assert cfg.timing_warmup < cfg.steps and cfg.eval_every == 0


# ---- the command -----------------------------------------------------------------------
def write_study(root: Path, recs: list[dict]) -> None:
    for r in recs:
        d = root / "runs" / r["run"]["size"] / "A" / r["config"] / "seed0"
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps(r))


def test_cli_prints_the_table_and_writes_its_files(tmp_path, capsys):
    write_study(tmp_path / "fp8_sizes", study([0.8, 0.9, 1.1, 1.2]))
    assert cli(["fp8-sizes", str(tmp_path / "fp8_sizes"), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "amp_bf16_fp8: pays from large" in out and "| xl | default | amp_bf16_fp8 | ok |" in out
    assert "NVIDIA H100 80GB HBM3" in out and "abc123" in out
    assert "- base (M = 4 x 16 tokens per micro-batch): 8->24 x2, 8->32 x2" in out
    files = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"fp8_sizes.csv", "fp8_sizes.md", "fp8_speedup.vl.json"} <= files
    assert "xl" in (tmp_path / "out" / "fp8_sizes.csv").read_text()


def test_a_stalled_speed_run_keeps_its_speed_up_and_the_text_says_why(tmp_path, capsys):
    recs = study([0.8, 0.9, 1.1, 1.2])
    recs[-1]["status"] = "stalled"
    write_study(tmp_path / "fp8_sizes", recs)
    assert cli(["fp8-sizes", str(tmp_path / "fp8_sizes")]) == 0
    out = capsys.readouterr().out
    assert "| xl | default | amp_bf16_fp8 | stalled | 83.33 |" in out and "Runs marked stalled trained" in out


def test_cli_writes_beside_the_records_by_default(tmp_path, capsys):
    write_study(tmp_path / "fp8_sizes", study([0.8, 0.9, 1.1, 1.2]))
    assert cli(["fp8-sizes", str(tmp_path / "fp8_sizes")]) == 0
    assert (tmp_path / "fp8_sizes" / "fp8" / "fp8_sizes.csv").is_file()


@pytest.mark.parametrize("where", ["missing", "empty"])
def test_cli_refuses_a_bad_study_folder_in_one_line(tmp_path, capsys, where):
    (tmp_path / "empty").mkdir()
    assert cli(["fp8-sizes", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dtype-bench fp8-sizes: error: ") and len(err.splitlines()) == 1
    assert str(tmp_path / where) in err
