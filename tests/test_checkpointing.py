"""Gradient (activation) checkpointing on a single process: one run configuration field, the
blocks really recompute in backward, the record says so, and the training is the same."""
import pytest
import torch

from benchlib.core.dtypes import get_config
from benchlib.core.records import read_record, read_steps
from benchlib.core.runconfig import RunConfig
from benchlib.training.loop import run
from benchlib.training.models import ModelSpec, build_model

FP32 = get_config("fp32_baseline")


def _first_block_linear(model):
    bb = model.backbone
    block = bb.h[0] if hasattr(bb, "h") else bb.encoder.layer[0]
    # a layer inside the block: the block's own hooks stay outside transformers' checkpoint
    return next(m for m in block.modules() if isinstance(m, torch.nn.Linear))


def _block_forwards_in_one_step(model) -> int:
    """How often the first block's computation runs in one forward + backward."""
    calls = []
    hook = _first_block_linear(model).register_forward_hook(lambda *a: calls.append(1))
    ids = torch.randint(4, 256, (2, 16))
    loss, _ = model({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids})
    loss.backward()
    hook.remove()
    return len(calls)


@pytest.mark.parametrize("arch,task", [("gpt2", "clm"), ("roberta", "mlm")])
def test_checkpointed_blocks_run_again_in_backward(arch, task):
    plain = build_model(ModelSpec(arch, task, "tiny", 256, 16), FP32)
    ckpt = build_model(ModelSpec(arch, task, "tiny", 256, 16, activation_checkpointing=True), FP32)
    assert (_block_forwards_in_one_step(plain), _block_forwards_in_one_step(ckpt)) == (1, 2)


def test_a_pretrained_backbone_is_checkpointed_from_the_first_step(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel
    GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=32)).save_pretrained(tmp_path)
    m = build_model(ModelSpec("gpt2", "clm", "tiny", 256, 16, model_name_or_path=str(tmp_path),
                              activation_checkpointing=True), FP32)
    assert m.training and _block_forwards_in_one_step(m) == 2


def test_gradient_checkpointing_is_accepted_as_another_spelling():
    assert RunConfig.from_dict({"gradient_checkpointing": True}).activation_checkpointing is True
    assert RunConfig().replace(gradient_checkpointing=True).activation_checkpointing is True


@pytest.mark.parametrize("scenario", ["A", "F"])
def test_a_checkpointed_run_records_it_and_trains_as_the_plain_run(tmp_path, scenario):
    base = {"scenario": scenario, "config": "fp32_baseline", "steps": 4, "log_every": 1, "eval_batches": 1, "seed": 3}
    recs, losses = {}, {}
    for on in (False, True):
        out = tmp_path / str(on)
        recs[on] = run({**base, "activation_checkpointing": on}, out_dir=out, progress=False)
        assert read_record(out / "result.json")["run"]["activation_checkpointing"] is on
        losses[on] = [row["loss"] for row in read_steps(out / "steps.jsonl") if "loss" in row]  # other rows: eval
    assert recs[True]["status"] == recs[False]["status"] and recs[True]["status"] not in ("error", "oom")
    assert len(losses[True]) == 4
    assert losses[True] == pytest.approx(losses[False], rel=1e-5, abs=1e-6)
