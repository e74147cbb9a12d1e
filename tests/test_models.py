"""The speed work on the models changes no results; pretrained weights load from a local
directory; the head runs in the precision the dtype config asks for."""
import dataclasses

import pytest
import torch
import torch.nn as nn

from benchlib.core.dtypes import get_config
from benchlib.training.init_cache import initialised, prune
from benchlib.training.models import ModelSpec, build_model, padded_vocab

FP32 = get_config("fp32_baseline")


def _stock_sdpa(model):
    for mod in model.backbone.modules():
        if hasattr(mod, "config"):
            mod.config._attn_implementation = "sdpa"


@pytest.mark.parametrize("arch,task", [("gpt2", "clm"), ("roberta", "mlm"), ("gpt2", "multilabel"),
                                       ("roberta", "singlelabel")])
def test_mask_free_attention_gives_the_same_outputs_as_stock_sdpa(arch, task):
    torch.manual_seed(0)
    m = build_model(ModelSpec(arch, task, "tiny", 256, 32, 0, 1, 7), FP32)
    ids = torch.randint(4, 256, (3, 32))
    mask = torch.ones(3, 32, dtype=torch.long)
    mask[1, 20:] = 0  # one padded sequence: the padding mask path must still apply
    ids[1, 20:] = 0
    batch = {"input_ids": ids, "attention_mask": mask}
    ours = m.logits(batch)
    _stock_sdpa(m)
    assert torch.equal(ours, m.logits(batch))


def test_gpt2_conv1d_swap_computes_the_same_function(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=32,
                                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    hf.save_pretrained(tmp_path)
    ours = build_model(ModelSpec("gpt2", "clm", "tiny", 256, 32, 0, 1, None, model_name_or_path=str(tmp_path)), FP32)
    ids = torch.randint(0, 256, (2, 32))
    ref = hf.eval()(input_ids=ids).logits
    got = ours.eval().logits({"input_ids": ids})
    assert torch.allclose(got[..., :256], ref, atol=1e-5)


def test_pretrained_classification_backbone_loads_the_saved_weights(tmp_path):
    from transformers import RobertaConfig, RobertaModel
    torch.manual_seed(1)
    saved = RobertaModel(RobertaConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=128, max_position_embeddings=40, pad_token_id=0,
                                       type_vocab_size=1), add_pooling_layer=False)
    saved.save_pretrained(tmp_path)
    m = build_model(ModelSpec("roberta", "multilabel", "tiny", 256, 32, 0, 1, 9, model_name_or_path=str(tmp_path)), FP32)
    w = m.backbone.encoder.layer[1].attention.self.query.weight
    assert torch.equal(w, saved.encoder.layer[1].attention.self.query.weight)
    assert m.head.out_features == 9


def test_vocabulary_is_padded_to_a_multiple_of_64():
    assert padded_vocab(50257) == 50304 and padded_vocab(256) == 256
    m = build_model(ModelSpec("gpt2", "clm", "tiny", 250, 32, 0, 1, None), FP32)
    assert m.backbone.wte.weight.shape[0] == 256


def test_fp32_head_computes_in_fp32_under_bf16_autocast():
    m = build_model(ModelSpec("roberta", "multilabel", "tiny", 256, 32, 0, 1, 5), get_config("amp_bf16_fp32_head"))
    plain = build_model(ModelSpec("roberta", "multilabel", "tiny", 256, 32, 0, 1, 5), get_config("amp_bf16"))
    b = {"input_ids": torch.randint(4, 256, (2, 32)), "attention_mask": torch.ones(2, 32, dtype=torch.long)}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert m.logits(b).dtype == torch.float32
        assert plain.logits(b).dtype == torch.bfloat16


def test_bf16_body_fp32_head_stores_the_head_in_fp32():
    m = build_model(ModelSpec("gpt2", "singlelabel", "tiny", 256, 32, 0, 1, 5), get_config("bf16_body_fp32_head"))
    assert m.head.weight.dtype == torch.float32
    assert m.backbone.h[0].mlp.c_fc.weight.dtype == torch.bfloat16


def test_the_logit_statistic_is_the_largest_magnitude_of_the_first_sequence():
    torch.manual_seed(0)
    m = build_model(ModelSpec("gpt2", "clm", "tiny", 256, 16, 0, 1, None), FP32)
    ids = torch.randint(4, 256, (3, 16))
    batch = {"input_ids": ids, "labels": ids}
    loss, stat = m(batch, logit_stats=True)
    logits = m.logits(batch)
    assert stat.item() == pytest.approx(logits[0].abs().max().item())
    assert loss.item() == pytest.approx(m(batch)[0].item()) and m(batch)[1] is None


def test_roberta_base_keeps_its_514_positions_at_any_sequence_length():
    """A masked-LM checkpoint pretrained at 128 tokens must load into a 512-token fine-tune."""
    from benchlib.core.sizes import shape
    from benchlib.training.models import _roberta_config
    assert _roberta_config(shape("roberta", "base"), 256, 128, 0, 1).max_position_embeddings == 514
    assert _roberta_config(shape("roberta", "base"), 256, 512, 0, 1).max_position_embeddings == 514
    assert _roberta_config(shape("roberta", "tiny"), 256, 64, 0, 1).max_position_embeddings == 66  # small shapes stay small


# ---- initial weights built once (init_cache) -------------------------------------------------
@pytest.mark.parametrize("scenario", ["A", "D"])
def test_a_cached_initial_model_is_the_built_one_and_leaves_the_same_random_state(tmp_path, scenario):
    """The second build of the same shape and seed loads the first's module: the same weights,
    and the random numbers drawn after it (data order, a classification head) are the same as
    without the cache; another seed is another entry."""
    arch, task = ("gpt2", "clm") if scenario == "A" else ("roberta", "multilabel")
    spec = ModelSpec(arch, task, "tiny", 300, 16, num_labels=5)
    cached = dataclasses.replace(spec, init_cache=str(tmp_path))

    hits = []

    def build(s, seed=0):
        torch.manual_seed(seed)
        m = build_model(s, get_config("fp32_baseline"))
        hits.append(m.build_info["cached"])  # the record's time/model_init_cached
        assert m.build_info["import_s"] >= 0 and m.build_info["init_s"] > 0
        return m.state_dict(), torch.rand(4)

    plain, after = build(spec)
    for _ in range(2):  # the first fills the cache, the second reads it
        sd, after_cached = build(cached)
        assert sd.keys() == plain.keys() and all(torch.equal(sd[k], plain[k]) for k in plain)
        assert torch.equal(after_cached, after)
    assert hits == [None, False, True]
    assert len(list(tmp_path.glob("*.pt"))) == 1
    build(cached, seed=1)
    assert len(list(tmp_path.glob("*.pt"))) == 2


def test_the_init_cache_builds_once_rebuilds_a_torn_entry_and_keeps_the_recent_ones(tmp_path):
    calls = []

    def make():
        calls.append(1)
        return nn.Linear(64, 64)

    torch.manual_seed(0)
    a = initialised(make, "linear 64", tmp_path)
    torch.manual_seed(0)
    b = initialised(make, "linear 64", tmp_path)
    assert len(calls) == 1 and torch.equal(a.weight, b.weight)
    (entry,) = tmp_path.glob("*.pt")
    entry.write_bytes(b"torn")
    torch.manual_seed(0)
    c = initialised(make, "linear 64", tmp_path)
    assert len(calls) == 2 and torch.equal(a.weight, c.weight)
    for seed in (1, 2, 3):
        torch.manual_seed(seed)
        initialised(make, "linear 64", tmp_path)
    size = entry.stat().st_size
    prune(tmp_path, max_bytes=2 * size)
    assert len(list(tmp_path.glob("*.pt"))) == 2  # the two most recently used
    assert initialised(make, "linear 64", None) is not None and len(calls) == 6  # no cache: always built
