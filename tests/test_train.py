"""The training loop: every config x scenario runs, statuses are honest, runs are
reproducible, and a tiny model actually learns the synthetic tasks."""
import json
import math

import pytest
import torch

from conftest import COMPLETED

from benchlib.core import env as envmod
from dtype_bench.cli import main as cli_main
from benchlib.core.dtypes import REGISTRY
from benchlib.core.records import read_record, read_steps, validate
from benchlib.core.runconfig import ConfigError, RunConfig
from benchlib.core.steplog import StepLog, first_divergence
from benchlib.core.scenarios import SCENARIOS
from benchlib.training.loop import run

FP8 = {n for n, c in REGISTRY.items() if c.fp8 != "none"}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("config", list(REGISTRY))
def test_every_config_runs_on_every_scenario(tmp_path, scenario, config):
    rec = run({"scenario": scenario, "config": config, "steps": 3, "log_every": 2, "eval_batches": 1},
              out_dir=tmp_path, progress=False)
    validate(read_record(tmp_path / "result.json"))
    if config in FP8:  # CPU: no FP8 tensor cores
        assert rec["status"] == "skipped" and "FP8" in rec["reason"]
        return
    assert rec["status"] in (*COMPLETED, "diverged"), rec["reason"]
    m = rec["metrics"]
    assert m["throughput"] > 0 and math.isfinite(m["memory"])
    if rec["status"] != "diverged":
        # the trivial baseline beside the quality, and the verdict: stalled exactly when it was not beaten
        assert m["baseline/quality"] is not None and math.isfinite(m["baseline/quality"])
        assert (rec["status"] == "stalled") == (m["quality/beats_baseline"] is False)
        if m["quality"] is None:
            # a non-finite evaluation (recorded as None) only after a step with inf/nan gradients
            # whose loss was still below the divergence threshold (fp16_naive on A: the last of
            # 3 steps), and it never counts as beating the baseline
            assert rec["status"] == "stalled" and m["stability/nonfinite_steps"] > 0, rec["reason"]
        else:
            assert math.isfinite(m["quality"])
    rows = [r for r in read_steps(tmp_path / "steps.jsonl") if "loss" in r]
    assert [r["step"] for r in rows] == list(range(len(rows)))


def _losses(path):
    return [r["loss"] for r in read_steps(path / "steps.jsonl") if "loss" in r]


def test_same_seed_gives_identical_loss_curves_and_another_seed_does_not(tmp_path):
    cfg = {"scenario": "A", "config": "fp32_baseline", "steps": 8, "log_every": 4}
    run(cfg, out_dir=tmp_path / "a", progress=False)
    run(cfg, out_dir=tmp_path / "b", progress=False)
    run({**cfg, "seed": 1}, out_dir=tmp_path / "c", progress=False)
    assert _losses(tmp_path / "a") == _losses(tmp_path / "b")
    assert _losses(tmp_path / "a") != _losses(tmp_path / "c")


def test_a_tiny_gpt2_learns_the_synthetic_lm_toward_its_floor(tmp_path):
    rec = run({"scenario": "A", "config": "fp32_baseline", "steps": 300, "lr": 3e-3, "log_every": 50},
              out_dir=tmp_path, progress=False)
    m = rec["metrics"]
    assert rec["status"] == "ok"
    floor, start = m["quality/loss_floor"], m["stability/initial_loss"]
    # more than half of the initial excess over the entropy-rate floor is gone
    assert m["quality/val_loss"] - floor < 0.5 * (start - floor)
    assert m["quality/val_loss"] > floor - 0.05  # cannot beat the Bayes floor (beyond sampling noise)
    # the record says how often the steps read the corpus over, and from which step on text recurs
    d, r = rec["data"], rec["run"]
    per_step = r["batch_size"] * r["grad_accum"] * r["seq_len"]
    assert d["tokens_per_step"] == per_step and d["corpus_passes"] == pytest.approx(300 * per_step / d["n_train_tokens"])
    assert (d["one_pass_step"] - 1) * per_step < d["n_train_tokens"] <= d["one_pass_step"] * per_step


def test_a_tiny_roberta_learns_multilabel_classification_toward_its_bayes_floor(tmp_path):
    cfg = {"scenario": "D", "config": "fp32_baseline", "steps": 600, "lr": 1e-3, "log_every": 100}
    rec = run(cfg, out_dir=tmp_path, progress=False)
    m = rec["metrics"]
    assert rec["status"] == "ok" and m["quality/learned_metric"] == "p_at_1"
    # well off the label-frequency predictor on every threshold-free metric ...
    assert m["quality/gap_closed"] > 0.3, m["quality/gap_closed"]
    assert m["quality/p_at_5"] > m["baseline/p_at_5"] + 3 * m["quality/p_at_5_se"]
    assert m["quality/macro_f1"] > m["baseline/macro_f1"] + 3 * m["quality/macro_f1_se"]
    assert m["quality/val_loss"] < m["baseline/val_loss"]
    # ... and no better than the Bayes-optimal predictor, beyond sampling noise
    assert m["quality/p_at_1"] < m["quality/floor"] + 3 * m["quality/p_at_1_se"]
    assert m["quality/val_loss"] > m["quality/loss_floor"] - 3 * m["quality/val_loss_se"]


def test_a_diverging_run_is_marked_with_its_step_and_stops(tmp_path):
    rec = run({"scenario": "A", "config": "fp32_baseline", "steps": 40, "lr": 50.0, "warmup_steps": 1,
               "log_every": 5, "grad_clip": 0.0}, out_dir=tmp_path, progress=False)
    assert rec["status"] == "diverged"
    step = rec["metrics"]["stability/diverged_step"]
    assert step is not None and step < 40
    assert len(_losses(tmp_path)) < 40 and f"at step {step}" in rec["reason"]


def test_on_divergence_continue_runs_every_step_while_the_weights_stay_finite(tmp_path):
    rec = run({"scenario": "A", "config": "fp32_baseline", "steps": 20, "lr": 0.5, "warmup_steps": 1,
               "log_every": 5, "grad_clip": 0.0, "on_divergence": "continue"}, out_dir=tmp_path, progress=False)
    assert rec["status"] == "diverged" and len(_losses(tmp_path)) == 20
    assert "stability/nonfinite_weights_step" not in rec["metrics"]


def test_on_divergence_continue_stops_once_a_weight_is_inf_or_nan(tmp_path):
    """Nothing recovers from non-finite weights: a long stability run would train NaNs to its end
    (the 10k-step arm's fp16_naive runs did, ~10k steps each)."""
    rec = run({"scenario": "A", "config": "fp32_baseline", "steps": 40, "lr": 50.0, "warmup_steps": 1,
               "log_every": 5, "grad_clip": 0.0, "on_divergence": "continue"}, out_dir=tmp_path, progress=False)
    dead = rec["metrics"]["stability/nonfinite_weights_step"]
    assert rec["status"] == "diverged" and dead < 39 and len(_losses(tmp_path)) == dead + 1
    assert f"a weight held inf/nan at step {dead}" in rec["reason"]


def test_missing_bitsandbytes_gives_a_skipped_record_with_the_reason(tmp_path, monkeypatch):
    real = envmod._importable
    monkeypatch.setattr(envmod, "_importable", lambda m: "ImportError: no module" if m.startswith("bitsandbytes") else real(m))
    rec = run({"scenario": "D", "config": "amp_bf16_8bit_adam", "steps": 2}, out_dir=tmp_path, progress=False)
    assert rec["status"] == "skipped" and "bitsandbytes" in rec["reason"]
    assert read_record(tmp_path / "result.json")["status"] == "skipped"


def test_a_cuda_oom_becomes_an_oom_record(tmp_path, monkeypatch):
    import benchlib.training.models as models

    def boom(self, batch):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    monkeypatch.setattr(models.BenchModel, "logits", boom)
    rec = run({"scenario": "A", "config": "amp_bf16", "steps": 2}, out_dir=tmp_path, progress=False)
    assert rec["status"] == "oom" and "80.00 GiB" in rec["reason"]


def test_an_exception_becomes_an_error_record_with_the_traceback_tail(tmp_path, monkeypatch):
    import benchlib.training.models as models

    def bad(self, batch):
        raise RuntimeError("shape mismatch in the head")
    monkeypatch.setattr(models.BenchModel, "logits", bad)
    rec = run({"scenario": "C", "config": "amp_bf16", "steps": 2}, out_dir=tmp_path, progress=False)
    assert rec["status"] == "error" and "shape mismatch in the head" in rec["reason"]
    validate(read_record(tmp_path / "result.json"))


def test_missing_local_data_file_is_a_one_line_error():
    with pytest.raises(ConfigError) as e:
        RunConfig(scenario="A", data="/no/such/corpus.txt")
    assert "/no/such/corpus.txt" in str(e.value) and "\n" not in str(e.value)


def test_cli_run_writes_the_record_and_the_step_log(tmp_path, capsys):
    rc = cli_main(["run", "--scenario", "E", "--config", "amp_bf16", "--seed", "0", "--size", "tiny",
                   "--steps", "4", "--out", str(tmp_path), "--quiet"])
    assert rc == 0  # a finished run, stalled or not
    rec = json.loads((tmp_path / "result.json").read_text())
    assert rec["run_id"] == "E/amp_bf16/seed0" and rec["run"]["steps"] == 4
    assert rec["env"]["torch"] == torch.__version__
    assert rec["status"] in COMPLETED
    out = capsys.readouterr().out
    assert f"E/amp_bf16/seed0: {rec['status']}" in out
    assert "vs majority-class" in out and "forensics (mean over logged steps)" in out


def test_record_carries_the_resolved_config_and_environment(tmp_path):
    rec = run({"scenario": "B", "config": "amp_fp16", "steps": 3}, out_dir=tmp_path, progress=False)
    assert rec["dtype"]["loss_scaling"] == "dynamic"
    assert rec["run"]["compile"] == "off" and rec["run"]["device"] == "cpu"  # CPU: compile auto -> off
    assert rec["run"]["batch_size"] == 8 and rec["run"]["seq_len"] == 64
    for k in ("device_name", "torch", "transformers", "git_commit", "date"):
        assert k in rec["env"]
    assert rec["metrics"]["stability/final_loss_scale"] > 1


def test_record_carries_the_optimizer_steps_time_and_its_share_of_the_step(tmp_path):
    rec = run({"scenario": "A", "config": "fp32_baseline", "steps": 12, "log_every": 4}, out_dir=tmp_path,
              progress=False)
    m = rec["metrics"]
    # timed on the steps that log nothing, inside the windows that give step_ms
    assert 0 < m["time/optimizer_ms"] < m["step_ms"] and 0 < m["time/optimizer_share"] < 1
    only_logged = run({"scenario": "A", "config": "fp32_baseline", "steps": 4, "log_every": 1},
                      out_dir=tmp_path / "logged", progress=False)["metrics"]
    assert only_logged["time/optimizer_ms"] is None and only_logged["time/optimizer_share"] is None


def test_record_says_which_machine_and_gpu_ran_it(tmp_path, monkeypatch):
    env = envmod.environment(torch.device("cpu"))
    assert env["gpu_uuid"] is None  # a CPU run: no GPU to name
    boot = envmod.BOOT_ID.read_text().strip() if envmod.BOOT_ID.exists() else None
    assert env["boot_id"] == boot and (env["host_id"] is not None) == (boot is not None)
    assert envmod.host_identity(torch.device("cpu"))["host_id"] == env["host_id"]  # stable within a boot
    fake = tmp_path / "boot_id"
    fake.write_text("another-machine\n")
    monkeypatch.setattr(envmod, "BOOT_ID", fake)
    other = envmod.host_identity(torch.device("cpu"))
    assert other["boot_id"] == "another-machine" and other["host_id"] not in (None, env["host_id"])


def test_flops_per_token_counts_matmul_parameters_only():
    from benchlib.core.dtypes import get_config
    from benchlib.training.models import ModelSpec, build_model
    lm = build_model(ModelSpec("gpt2", "clm", "tiny", 256, 64, 0, 1, None), get_config("fp32_baseline"))
    cls = build_model(ModelSpec("gpt2", "multilabel", "tiny", 256, 64, 0, 1, 10), get_config("fp32_baseline"))
    body = sum(p.numel() for p in lm.backbone.parameters()) - lm.backbone.wpe.weight.numel()
    attn = 12 * 2 * 64 * 64  # 12 * layers * width * seq_len
    assert lm.flops_per_token(64) == 6 * body + attn  # tied head: the embedding is the vocabulary matmul
    emb = cls.backbone.wte.weight.numel()
    # untied embedding is a lookup; the head (64x10 + 10 bias) acts once per sequence: only its bias stays
    assert cls.flops_per_token(64) == 6 * (body - emb + 10) + attn


def test_training_forward_builds_no_kv_cache():
    from benchlib.core.dtypes import get_config
    from benchlib.training.models import ModelSpec, build_model
    m = build_model(ModelSpec("gpt2", "clm", "tiny", 256, 32, 0, 1, None), get_config("fp32_baseline"))
    out = m.backbone(input_ids=torch.randint(4, 256, (2, 32)))
    assert m.backbone.config.use_cache is False and out.past_key_values is None


def test_time_breakdown_separates_what_scales_with_steps_from_fixed_cost(tmp_path):
    def times(steps, **kw):
        return run({"scenario": "A", "config": "fp32_baseline", "steps": steps, **kw},
                   out_dir=tmp_path / str(steps), progress=False)["metrics"]
    short, long_ = times(2), times(24, eval_every=6, eval_batches=64)
    for m in (short, long_):
        assert 0 < m["time/startup_s"]  # this process started before the run
        assert m["time/data_s"] + m["time/model_s"] + m["time/to_device_s"] <= m["time/setup_s"]
        assert 0 < m["time/steps_s"] < m["time/train_s"]
    # the loop's wall after the first step: the 3 mid-run evaluations (64 batches each) and the
    # first step are fixed cost, not steps; what is left is about the steady step time x 23
    assert long_["time/steps_s"] < long_["time/train_s"] - long_["time/first_step_s"] - 0.5 * long_["time/eval_s"]
    assert long_["time/steps_s"] == pytest.approx(long_["step_ms"] / 1000 * 23, rel=0.5)
    assert long_["time/steps_s"] > 5 * short["time/steps_s"]


def test_cudagraphs_is_for_single_process_runs_and_a_no_op_off_cuda(tmp_path):
    with pytest.raises(ConfigError, match=r"cudagraphs=True works with dist.strategy='single' only.*'ddp'"):
        RunConfig.from_dict({"dist": {"strategy": "ddp", "nproc": 2}, "cudagraphs": True})
    cfg = {"scenario": "A", "config": "fp32_baseline", "steps": 6, "log_every": 3, "grad_accum": 2}
    plain = run(cfg, out_dir=tmp_path / "a", progress=False)
    graphs = run({**cfg, "cudagraphs": True}, out_dir=tmp_path / "b", progress=False)
    # the record says what ran: no CUDA graphs on the CPU, and the same training
    assert graphs["status"] in COMPLETED and graphs["run"]["cudagraphs"] is False
    assert graphs["status"] == plain["status"]
    assert _losses(tmp_path / "a") == _losses(tmp_path / "b")
    assert plain["metrics"]["stability/max_logit"] == graphs["metrics"]["stability/max_logit"]


def test_one_heavy_batch_is_not_a_divergence_but_a_sustained_rise_or_a_nan_is():
    """D's fine-tuning loss starts at the label prior, and one batch of 8 with many labels reached
    2.8x the first steps' mean in healthy runs; a 1-step first window made step 0 the reference, and
    a third of D's runs were marked diverged at one heavy batch (H100, 2026-11-26)."""
    base = [0.02, 0.03, 0.025, 0.02, 0.03] + [0.02] * 50
    spike = list(base)
    spike[30] = 0.2  # 8x the initial mean, one step
    assert first_divergence(spike, sum(base[:5]) / 5, 3.0) is None
    rise = list(base)
    rise[30:] = [0.2] * (len(rise) - 30)
    assert first_divergence(rise, sum(base[:5]) / 5, 3.0) == 30
    nan = list(base)
    nan[12] = float("nan")
    assert first_divergence(nan, sum(base[:5]) / 5, 3.0) == 12
    assert first_divergence(rise, None, 3.0) is None  # no reference yet: only non-finite counts


def test_a_run_logged_in_intervals_judges_divergence_on_the_5_step_median(tmp_path):
    """Through ``StepLog`` as training drives it: step 0 flushed alone, then every 10 steps."""
    def judge(losses):
        log = StepLog(len(losses), torch.device("cpu"), open(tmp_path / "rows.jsonl", "w"), diverge_ratio=3.0)
        for step, v in enumerate(losses):
            log.record(step, torch.tensor(v), torch.tensor(1.0))
            if step == 0 or (step + 1) % 10 == 0:
                log.flush(step, 1e-3, {})
        log.finish()
        return log
    losses = [0.01] + [0.025] * 39  # a light first batch
    losses[20] = 0.1  # one heavy batch, 10x the step-0 loss
    log = judge(losses)
    assert log.initial_loss == pytest.approx(0.01) and log.diverged_step is None
    losses[25:] = [0.1] * 15  # a rise that stays
    assert judge(losses).diverged_step == 25
