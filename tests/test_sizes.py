"""Model sizes beyond base: GPT-2 medium / large / xl and RoBERTa-large have their published
shapes, and their default batch keeps base's tokens per step within the memory estimate.
Models are built on the meta device: shapes and parameter counts without a byte of weights."""
import pytest
import torch

from benchlib.run import add_run_args, run_config_from_args
from benchlib.core.dtypes import get_config
from benchlib.core.runconfig import ConfigError, RunConfig, resolved
from benchlib.core.sizes import BUDGET_FRACTION, GPU_BYTES, LARGE_SIZES, Shape, estimate_train_bytes, shape
from benchlib.training.models import ModelSpec, build_model

FP32 = get_config("fp32_baseline")
NOMINAL = {("gpt2", "medium"): 355e6, ("gpt2", "large"): 774e6, ("gpt2", "xl"): 1.5e9, ("roberta", "large"): 355e6}
"""The sizes' names: the counts published with the models, rounded (GPT-2 xl is "1.5B")."""


def _meta_model(arch, task, size, vocab, seq_len):
    with torch.device("meta"):
        return build_model(ModelSpec(arch, task, size, vocab, seq_len, 1, 0, 5 if task == "singlelabel" else None), FP32)


def _blocks(s: Shape) -> int:
    # per block: QKV (3d^2 + 3d) + output (d^2 + d) + MLP (8d^2 + 5d) + two norms (4d)
    return s.layers * (12 * s.width ** 2 + 13 * s.width)


@pytest.mark.parametrize("size", ["medium", "large", "xl"])
def test_gpt2_sizes_have_the_published_parameter_counts(size):
    s = shape("gpt2", size)
    m = _meta_model("gpt2", "clm", size, 50257, 1024)
    n = sum(p.numel() for p in m.parameters())  # the tied head counts once
    vocab = m.backbone.get_input_embeddings().weight.shape[0]  # padded to 50304
    assert n == vocab * s.width + 1024 * s.width + _blocks(s) + 2 * s.width  # + positions + final norm
    assert (m.backbone.config.n_layer, m.backbone.config.n_head, m.backbone.config.n_embd) == (s.layers, s.heads, s.width)
    assert n == pytest.approx(NOMINAL["gpt2", size], rel=0.05)


def test_roberta_large_has_the_published_parameter_count():
    s = shape("roberta", "large")
    m = _meta_model("roberta", "singlelabel", "large", 50265, 512)
    backbone = sum(p.numel() for p in m.backbone.parameters())
    vocab = m.backbone.get_input_embeddings().weight.shape[0]
    positions = m.backbone.config.max_position_embeddings  # 514
    # + positions, one token type, the embedding norm
    assert backbone == vocab * s.width + positions * s.width + s.width + 2 * s.width + _blocks(s)
    assert (s.layers, s.heads, s.width) == (24, 16, 1024)
    assert backbone == pytest.approx(NOMINAL["roberta", "large"], rel=0.05)


def test_a_size_the_architecture_lacks_is_refused_naming_its_sizes():
    with pytest.raises(ConfigError, match=r"size='xl' does not exist for roberta .*tiny, small, base, large$"):
        RunConfig(scenario="D", size="xl")
    with pytest.raises(ConfigError, match=r"'medium'"):
        RunConfig.from_dict({"scenario": "B", "size": "medium"})


def test_memory_estimate_is_the_documented_sum():
    # params = 3*2 + 1*(12*4 + 13*2) = 80 -> 80*16 = 1280; activations 1*1*1*2*68 = 136; logits 3*12 = 36
    assert estimate_train_bytes(Shape(1, 1, 2), vocab=3, batch=1, seq_len=1, lm=True) == 1280 + 136 + 36
    assert estimate_train_bytes(Shape(1, 1, 2), vocab=3, batch=1, seq_len=1, lm=False) == 1280 + 136


@pytest.mark.parametrize("scenario,size", [(s, z) for s in "ACE" for z in LARGE_SIZES] + [(s, "large") for s in "BDF"])
def test_large_size_defaults_keep_base_tokens_per_step_within_the_estimate(scenario, size):
    base, r = resolved(RunConfig(scenario=scenario, size="base")), resolved(RunConfig(scenario=scenario, size=size))
    assert r.batch_size * r.grad_accum == base.batch_size * base.grad_accum
    assert (r.seq_len, r.vocab_size, r.num_labels) == (base.seq_len, base.vocab_size, base.num_labels)
    est = lambda b: estimate_train_bytes(shape(r.scn.arch, size), r.vocab_size, b, r.seq_len, r.scn.is_lm)  # noqa: E731
    budget = GPU_BYTES * BUDGET_FRACTION
    assert est(r.batch_size) <= budget or r.batch_size == 1
    total = base.batch_size
    larger = [d for d in range(r.batch_size + 1, total + 1) if total % d == 0]
    assert all(est(d) > budget for d in larger)  # the largest micro-batch that fits


def test_gpt2_xl_accumulates_where_base_does_not():
    xl = resolved(RunConfig(scenario="A", size="xl"))
    assert resolved(RunConfig(scenario="A", size="base")).grad_accum == 1
    assert xl.grad_accum > 1 and xl.batch_size < 12


def test_an_explicit_batch_or_accumulation_wins_over_the_size_default():
    assert (resolved(RunConfig(scenario="A", size="xl", batch_size=3)).grad_accum) == 1
    r = resolved(RunConfig(scenario="A", size="xl", grad_accum=12))
    assert r.grad_accum == 12 and r.batch_size == resolved(RunConfig(scenario="A", size="xl")).batch_size


def test_cli_and_study_keys_take_the_new_sizes():
    import argparse
    p = argparse.ArgumentParser()
    add_run_args(p)
    assert run_config_from_args(p.parse_args(["--scenario", "E", "--size", "xl"])).size == "xl"
    assert RunConfig.from_dict({"scenario": "F", "size": "large"}).size == "large"
