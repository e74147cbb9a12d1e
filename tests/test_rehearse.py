"""A GPU study rehearsed on the CPU first (``sweep --rehearse``): the same cells, stages and
analyses as the study, each run tiny, on this CPU, on synthetic data; and, end to end, the study
that pretrains its own GPT-2 and fine-tunes on thousands of labels (not run on a GPU yet) rehearses
through its pretrain stage and the fine-tuning that loads that checkpoint."""
import json

import pytest
from conftest import REPO

from benchlib.study.studyfile import load_study
from dtype_bench.study import rehearse, sweep

GPU_STUDIES = [p for p in sorted((REPO / "params").glob("*.yaml")) if rehearse.read_yaml(p).get("device") == "cuda"]


def test_there_are_gpu_studies_to_rehearse():
    assert len(GPU_STUDIES) >= 10 and any(p.stem == "premise_labels" for p in GPU_STUDIES)


@pytest.mark.parametrize("path", GPU_STUDIES, ids=[p.stem for p in GPU_STUDIES])
def test_a_rehearsal_has_the_studys_cells_stages_and_analyses_each_run_tiny_on_this_cpu(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # data folders named relative to where the sweep starts
    study, reh = load_study(path), load_study(rehearse.write_rehearsal(path, tmp_path))
    cells = {(r.arm, r.cfg.scenario, r.cfg.config) for r in study.runs()}
    assert {(r.arm, r.cfg.scenario, r.cfg.config) for r in reh.runs()} == cells
    assert len(reh.runs()) == len(cells)  # one seed per cell: the study's first
    assert {r.cfg.seed for r in reh.runs()} == {study.seeds[0]}
    assert set(reh.pretrain) == set(study.pretrain) and reh.analyses == study.analyses
    pre = [r for runs in reh.pretrain_runs().values() for r in runs]
    for r in reh.runs() + pre:
        c = r.cfg
        assert (c.size, c.device, c.data, c.tokenizer, c.steps) == ("tiny", "cpu", "synthetic", None, 8), r
        assert (c.model_name_or_path in (None, "pretrained") or "checkpoint>" in c.model_name_or_path) and c.seq_len == 32 and c.compile == "off"
    # a study that executes notebooks rehearses every cell in one (the papermill path is rehearsed too)
    kept = cells if any(r.notebook for r in study.runs()) else set()
    assert {(r.arm, r.cfg.scenario, r.cfg.config) for r in reh.runs() if r.notebook} == kept


def test_a_real_corpus_and_a_local_checkpoint_become_synthetic_data_and_a_model_from_scratch():
    d = rehearse.rehearsal({"scenarios": ["A", "D"], "configs": ["amp_bf16"], "seeds": [3, 4], "device": "cuda",
                            "config_seeds": {"amp_bf16": [4]}, "tokenizer": "data/real/tok", "size": "base",
                            "overrides": {"D": {"data": "data/real/debtags", "state_every": 0},
                                          "cls": {"model_name_or_path": "data/real/minilm", "eval_every": 750,
                                                  "roberta": {"seq_len": 256}}},
                            "pretrain": {"gpt2": [{"steps": 3000, "data": "data/real/linux-doc"}, {"steps": 500}]}})
    assert d["study"] == "study.rehearsal" and d["seeds"] == [3] and "config_seeds" not in d and "tokenizer" not in d
    assert d["overrides"]["D"] == {"data": "synthetic", "state_every": 0}  # a state never saved stays off
    assert d["overrides"]["cls"] == {"model_name_or_path": None, "eval_every": 4, "roberta": {"seq_len": 32}}
    assert d["pretrain"]["gpt2"] == [{"steps": 8, "data": "synthetic"}, {"steps": 8}]
    assert (d["size"], d["device"]) == ("tiny", "cpu")


def test_premise_labels_rehearses_its_pretrain_and_the_fine_tuning_that_loads_it(tmp_path, capsys):
    out = tmp_path / "out"
    # one config (the analysis of a study's records is the analysis tests' business)
    assert sweep.main([str(REPO / "params/premise_labels.yaml"), "--rehearse", "--out", str(out), "--no_analysis",
                       "--no_html", "--config", "amp_bf16_fp32_head"]) == 0
    assert "rehearsal of" in capsys.readouterr().out
    root = out / "premise_labels.rehearsal"
    recs = {p.parent.parent.name: json.loads(p.read_text()) for p in (root / "runs" / "C").glob("*/seed0/result.json")}
    assert set(recs) == {"amp_bf16_fp32_head"}
    for rec in recs.values():  # 8 steps learn nothing: the rehearsal checks that each run finished, not its quality
        assert rec["status"] not in ("error", "skipped"), rec.get("reason")
        assert rec["pretrained"]["path"].startswith(str(out / "premise_labels.rehearsal.pretrain"))
    assert (REPO / "params/premise_labels.yaml").read_text().count("device: cuda") == 1  # the study file is untouched


def test_the_rehearsal_says_what_the_gpu_call_reads_besides_the_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "train.txt").write_bytes(b"x" * 3 * 2**20)
    path = tmp_path / "s.yaml"
    path.write_text("scenarios: [A, C]\nconfigs: [amp_bf16, amp_bf16_8bit_adam]\nseeds: [0, 1]\nnotebook_seeds: [0]\n"
                    "device: cuda\noverrides:\n  A: {data: corpus}\n  C: {data: labels/debdeps}\n")
    lines = rehearse.needs(load_study(path))
    assert "corpus: 3.0 MiB" in lines and any(ln.startswith("labels/debdeps: not here") for ln in lines)
    assert "bitsandbytes (for amp_bf16_8bit_adam)" in lines
    assert any("4 runs execute a notebook" in ln for ln in lines)  # seed 0 of 2 scenarios x 2 configs
