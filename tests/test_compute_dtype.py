"""A run refuses to go on when its model computes in another dtype than its config says: what a
stale compiled graph (torch 2.11's compile cache served fp16 graphs to bf16-autocast runs) does."""
import pytest
import torch

from benchlib.training import models
from benchlib.training.loop import run

TINY = {"scenario": "A", "size": "tiny", "steps": 2, "eval_batches": 1, "compile": "off", "device": "cpu"}


@pytest.mark.parametrize("config", ["fp32_baseline", "amp_bf16", "bf16_pure", "amp_bf16_fp32_head", "fp16_naive"])
def test_each_configs_logits_come_out_in_the_dtype_it_declares(tmp_path, config):
    rec = run({**TINY, "config": config}, out_dir=tmp_path, progress=False)
    assert rec["status"] != "error", rec["reason"]


def test_a_run_whose_logits_are_in_another_dtype_stops_with_an_error_naming_both(tmp_path, monkeypatch):
    forward = models.BenchModel.forward

    def fp16_graph(self, batch, logit_stats=False):  # as if an amp_fp16 graph ran under bf16 autocast
        loss, lm = forward(self, batch, logit_stats)
        return loss, (lm.to(torch.float16) if lm is not None else None)

    monkeypatch.setattr(models.BenchModel, "forward", fp16_graph)
    rec = run({**TINY, "config": "amp_bf16"}, out_dir=tmp_path, progress=False)
    assert rec["status"] == "error"
    assert "torch.float16" in rec["reason"] and "torch.bfloat16" in rec["reason"]
    assert "\n" not in rec["reason"]  # one line, not a traceback
