"""Checkpoints of other families, saved here with transformers' own classes: each is either
built as the class its config.json declares (hidden states equal to transformers' own model's)
or refused in one line before anything trains."""
import json

import pytest
import torch
from transformers import (AutoModel, BertConfig, BertForMaskedLM, BertModel, DistilBertConfig, DistilBertModel,
                          GPT2Config, GPT2Model, GPTNeoConfig, GPTNeoForCausalLM, GPTNeoModel, RobertaConfig,
                          RobertaModel, T5Config, T5Model)

from benchlib.core.dtypes import get_config
from benchlib.training.checkpoints import CheckpointError, checkpoint_config, max_positions
from benchlib.training.models import ModelSpec, build_model

FP32 = get_config("fp32_baseline")
V = 300  # the checkpoints' vocabulary; the runs ask for 256 rows: no resize


def _build(arch, task, path, labels=7):
    return build_model(ModelSpec(arch, task, "tiny", vocab_size=256, seq_len=16, num_labels=labels,
                                 model_name_or_path=str(path)), FP32)


def _bert(path, cls=BertModel):
    torch.manual_seed(0)
    cls(BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                   max_position_embeddings=64)).save_pretrained(path)
    return path


def _neo(path, cls=GPTNeoForCausalLM):
    torch.manual_seed(0)
    cls(GPTNeoConfig(vocab_size=V, hidden_size=32, num_layers=2, num_heads=2, max_position_embeddings=64,
                     attention_types=[[["global", "local"], 1]], bos_token_id=0, eos_token_id=0)).save_pretrained(path)
    return path


def _batch(n=2, T=16):
    ids = torch.randint(5, 256, (n, T), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(n, T, dtype=torch.long)
    mask[1, 10:] = 0
    return ids, mask


def _hidden(model, ids, mask=None):
    with torch.no_grad():
        return model.eval()(input_ids=ids, **({"attention_mask": mask} if mask is not None else {})).last_hidden_state


def _one_line(e):
    return "\n" not in str(e.value) and len(str(e.value)) < 600


# ---- loaded as what they are -------------------------------------------------------------
def test_a_bert_checkpoint_fine_tunes_on_d_as_bert_with_bert_positions(tmp_path):
    path = _bert(tmp_path / "bert", BertForMaskedLM)
    m = _build("roberta", "multilabel", path)
    ref = BertModel.from_pretrained(path, add_pooling_layer=False)
    ids, mask = _batch()
    assert type(m.backbone).__name__ == "BertModel"
    assert torch.allclose(_hidden(m.backbone, ids, mask), _hidden(ref, ids, mask), atol=1e-5)
    info = m.pretrained_info
    assert (info["model_type"], info["architecture"], info["family"], info["loaded_fraction"]) == (
        "bert", "BertForMaskedLM", "other", 1.0)
    assert info["unused_checkpoint_weights"] > 0  # its MLM head: read, not used
    head = sum(p.numel() for p in m.head.parameters())
    assert info["parameters"] == sum(p.numel() for p in m.parameters())
    assert info["loaded_fraction_of_model"] == pytest.approx(1 - head / info["parameters"], abs=1e-6)


def test_the_same_bert_weights_in_roberta_classes_would_shift_every_position(tmp_path):
    """Why the family matters: RoBERTa numbers positions from padding_idx + 1."""
    path = _bert(tmp_path / "bert")
    m = _build("roberta", "singlelabel", path)
    cfg = json.loads((path / "config.json").read_text())
    as_roberta = RobertaModel(RobertaConfig(**{k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}),
                              add_pooling_layer=False)
    as_roberta.load_state_dict(BertModel.from_pretrained(path).state_dict(), strict=False)
    ids, mask = _batch()
    assert not torch.allclose(_hidden(as_roberta, ids, mask), _hidden(m.backbone, ids, mask), atol=1e-3)


def test_a_distilbert_checkpoint_fine_tunes_on_f(tmp_path):
    torch.manual_seed(0)
    DistilBertModel(DistilBertConfig(vocab_size=V, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                     max_position_embeddings=64)).save_pretrained(tmp_path)
    m = _build("roberta", "singlelabel", tmp_path)
    ids, mask = _batch()
    assert torch.allclose(_hidden(m.backbone, ids, mask), _hidden(DistilBertModel.from_pretrained(tmp_path), ids, mask),
                          atol=1e-5)
    assert m.pretrained_info["model_class"] == "DistilBertModel" and m.head.out_features == 7
    assert m.flops_per_token(16) > 0  # the FLOPs formula reads DistilBERT's config names


@pytest.mark.parametrize("task", ["multilabel", "singlelabel"])
def test_a_gpt_neo_checkpoint_fine_tunes_on_c_and_e(tmp_path, task):
    path = _neo(tmp_path / "neo")
    m = _build("gpt2", task, path)
    ids, _ = _batch()
    assert torch.allclose(_hidden(m.backbone, ids), _hidden(GPTNeoModel.from_pretrained(path), ids), atol=1e-5)
    assert m.pretrained_info["model_type"] == "gpt_neo"


def test_a_gpt_neo_checkpoint_continues_causal_lm_training_on_a_with_its_own_logits(tmp_path):
    path = _neo(tmp_path / "neo")
    m = _build("gpt2", "clm", path, labels=None)
    ids, _ = _batch()
    with torch.no_grad():
        ref = GPTNeoForCausalLM.from_pretrained(path).eval()(input_ids=ids).logits
        assert torch.allclose(m.eval().logits({"input_ids": ids}), ref, atol=1e-5)
    assert m.pretrained_info["loaded_fraction_of_model"] == 1.0  # the LM head is tied: nothing fresh


@pytest.mark.parametrize("arch, task, make, cls", [
    ("roberta", "multilabel", RobertaModel, lambda: RobertaConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                                  num_attention_heads=2, intermediate_size=64,
                                                                  max_position_embeddings=40, pad_token_id=1)),
    ("gpt2", "singlelabel", GPT2Model, lambda: GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=2, n_positions=64)),
])
def test_the_scenarios_own_families_still_load_natively(tmp_path, arch, task, make, cls):
    torch.manual_seed(0)
    make(cls()).save_pretrained(tmp_path)
    m = _build(arch, task, tmp_path)
    ids, mask = _batch()
    ref = AutoModel.from_pretrained(tmp_path)
    ours = _hidden(m.backbone, ids, mask if arch == "roberta" else None)
    assert torch.allclose(ours, _hidden(ref, ids, mask if arch == "roberta" else None), atol=1e-5)
    assert "family" not in m.pretrained_info


# ---- refused in one line -----------------------------------------------------------------
@pytest.mark.parametrize("arch, task, scenario, make, expected", [
    ("gpt2", "multilabel", "C", _bert, ["is a 'bert' model", "an encoder", "scenario C needs a decoder"]),
    ("roberta", "singlelabel", "F", _neo, ["is a 'gpt_neo' model", "a decoder", "scenario F needs an encoder"]),
    ("roberta", "mlm", "B", _bert, ["'bert' encoder", "takes model_type 'roberta' only", "on D or F"]),
])
def test_a_checkpoint_of_the_wrong_role_is_refused_naming_what_fits(tmp_path, arch, task, scenario, make, expected):
    path = make(tmp_path / "ckpt")
    with pytest.raises(CheckpointError) as e:
        checkpoint_config(arch, path, scenario, task)
    assert _one_line(e) and str(path) in str(e.value)
    for part in expected:
        assert part in str(e.value)
    with pytest.raises(CheckpointError):  # and the model is never built from it
        _build(arch, task, path, labels=None if task == "mlm" else 7)


def test_an_encoder_decoder_checkpoint_is_refused(tmp_path):
    T5Model(T5Config(vocab_size=V, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="neither an encoder nor a decoder") as e:
        _build("roberta", "multilabel", tmp_path)
    assert _one_line(e)


def test_another_family_missing_backbone_weights_is_refused(tmp_path):
    _neo(tmp_path, GPTNeoModel)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(num_layers=3, attention_types=[[["global", "local", "global"], 1]],
               attention_layers=["global", "local", "global"])
    (tmp_path / "config.json").write_text(json.dumps(cfg))  # layer 2 is not in the weights
    with pytest.raises(CheckpointError, match=r"lacks \d+ GPT-2 backbone weights .*h\.2\.") as e:
        _build("gpt2", "multilabel", tmp_path)
    assert _one_line(e)


@pytest.mark.parametrize("path, expected", [
    ("/nonexistent/models/bert", "no such local directory"),
    ("./models/bert", "no such local directory"),
])
def test_a_missing_local_path_is_named_as_such_not_as_a_bad_hub_id(path, expected):
    with pytest.raises(CheckpointError, match=expected) as e:
        checkpoint_config("roberta", path, "D", "multilabel")
    assert _one_line(e) and "hub id looks like" in str(e.value)


def test_a_file_instead_of_a_directory_is_refused(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_text("x")
    with pytest.raises(CheckpointError, match="is a file: give the checkpoint's directory"):
        checkpoint_config("gpt2", f, "C", "multilabel")


@pytest.mark.parametrize("config, expected", [
    ({"model_type": "gpt2", "n_positions": 1024, "max_position_embeddings": 7}, 1024),
    ({"model_type": "roberta", "max_position_embeddings": 514, "pad_token_id": 1}, 512),
    ({"model_type": "bert", "max_position_embeddings": 512, "pad_token_id": 0}, 512),
    ({"model_type": "gpt_neo", "max_position_embeddings": 2048}, 2048),
    ({"model_type": "something"}, None),
])
def test_max_positions_counts_the_positions_a_sequence_may_use(config, expected):
    assert max_positions(config) == expected


def test_weights_of_another_family_in_a_native_class_are_refused_after_loading(tmp_path):
    """The check behind hub ids (whose config is seen only once loaded): a BERT in RobertaModel."""
    from benchlib.training.checkpoints import check_loaded
    path = _bert(tmp_path / "bert")
    model, info = RobertaModel.from_pretrained(path, output_loading_info=True)
    with pytest.raises(CheckpointError, match="is a 'bert' model loaded into RobertaModel") as e:
        check_loaded("roberta", path, info, model, "D")
    assert _one_line(e)
