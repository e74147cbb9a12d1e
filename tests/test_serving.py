"""Trained in one precision, served in another: ``serve_modes`` evaluates the trained model in
each inference precision after training and records it; a model whose activations leave fp16's
range breaks when served in fp16 and not in bf16 (the comparison of modes: test_arm_comparison)."""
import math

import pytest
import torch

from benchlib.core.dtypes import get_config
from benchlib.core.runconfig import ConfigError, RunConfig
from benchlib.training.inference import serve_quality
from benchlib.training.loop import evaluate, run
from benchlib.training.models import ModelSpec, build_model

CPU = torch.device("cpu")


def test_serve_modes_are_checked_in_one_line():
    with pytest.raises(ConfigError, match="serve_modes: unknown inference mode 'fp8': use one of fp32, autocast_bf16"):
        RunConfig(scenario="A", serve_modes="fp16,fp8")
    with pytest.raises(ConfigError, match="serve_modes works with dist.strategy='single' only"):
        RunConfig.from_dict({"scenario": "A", "serve_modes": "fp16", "dist": {"strategy": "ddp", "nproc": 2}})
    assert RunConfig(scenario="A", serve_modes=" fp16, bf16 ").serve_list == ["fp16", "bf16"]


def test_a_run_records_its_model_served_in_each_mode(tmp_path):
    rec = run({"scenario": "F", "config": "fp32_baseline", "steps": 6, "eval_batches": 2,
               "serve_modes": "fp32,bf16"}, out_dir=tmp_path, progress=False)
    serve = rec["serve"]
    assert list(serve) == ["fp32", "bf16"] and all(s["status"] == "ok" for s in serve.values())
    # served in the precision it was trained in, the model scores what the run recorded
    assert serve["fp32"]["metrics"]["accuracy"] == rec["metrics"]["quality/accuracy"]
    assert serve["fp32"]["minus_trained"]["val_loss"] == pytest.approx(0, abs=1e-6)
    assert serve["bf16"]["weights"] == "bf16" and math.isfinite(serve["bf16"]["metrics"]["val_loss"])


def test_activations_beyond_fp16_range_break_fp16_serving_but_not_bf16():
    torch.manual_seed(0)
    model = build_model(ModelSpec("gpt2", "clm", "tiny", 256, 16), get_config("fp32_baseline"))
    with torch.no_grad():  # a residual stream far beyond 65504: fine in fp32 and bf16 (same exponent range)
        model.backbone.wte.weight.mul_(1e6)
    ids = torch.randint(4, 256, (4, 16))
    val = [{"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}]
    trained, _ = evaluate(model, val, "clm", torch.autocast("cpu", enabled=False))
    out = serve_quality(model, val, ["bf16", "fp16"], CPU, trained)
    assert math.isfinite(out["bf16"]["metrics"]["val_loss"])
    assert not math.isfinite(out["fp16"]["metrics"]["val_loss"])


def test_the_serve_study_serves_every_run_in_all_five_modes_with_the_reference_recipes():
    from pathlib import Path

    from benchlib.core.dtypes import INFER_MODES
    from benchlib.study.studyfile import load_study
    repo = Path(__file__).resolve().parents[1]
    study, reference = (load_study(repo / "params" / f"{n}.yaml") for n in ("serve", "reference"))
    runs = study.runs()
    assert len(runs) == 6 * 4 and all(r.cfg.serve_list == list(INFER_MODES) for r in runs)
    assert study.overrides == reference.overrides and study.pretrain == reference.pretrain


def test_a_mode_that_cannot_be_served_is_skipped_with_its_reason_and_the_others_still_run(monkeypatch):
    import benchlib.training.inference as inference
    model = build_model(ModelSpec("gpt2", "clm", "tiny", 256, 16), get_config("fp32_baseline"))
    ids = torch.randint(4, 256, (2, 16))
    val = [{"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}]
    real = inference.serve_copy

    def fussy(m, mode):  # e.g. a layer type that cannot be deep-copied or cast
        if mode.name == "fp16":
            raise AttributeError("Float8Linear has no attribute 'x'")
        return real(m, mode)
    monkeypatch.setattr(inference, "serve_copy", fussy)
    out = serve_quality(model, val, ["fp16", "bf16"], CPU, {"val_loss": 5.0})
    assert out["fp16"] == {"weights": "fp16", "autocast": None, "status": "skipped",
                           "reason": "AttributeError: Float8Linear has no attribute 'x'"}
    assert out["bf16"]["status"] == "ok"
