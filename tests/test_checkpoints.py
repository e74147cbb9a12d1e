"""The fine-tuning regime offline: LM runs save Hugging Face checkpoints that plain
transformers and the classification runs load; a study's pretrain stage makes them first
and its runs name them with ``model_name_or_path: pretrained``."""
import json

import pytest
import torch
import yaml
from conftest import fake_papermill, line_with
from transformers import GPT2LMHeadModel, GPT2Model, RobertaForMaskedLM, RobertaModel

from benchlib.study import notebook
from dtype_bench.study import runner, sweep
from benchlib.training.checkpoints import (META_FILE, CheckpointError, checkpoint_config, is_complete, load_pretrained,
                                  save_pretrained)
from benchlib.core.dtypes import get_config
from benchlib.training.models import ModelSpec, build_model
from benchlib.core.records import read_record
from benchlib.core.runconfig import ConfigError, RunConfig, resolved
from benchlib.study.studyfile import load_study

FP32 = get_config("fp32_baseline")


def _build(arch, task, dtype=FP32, labels=None, path=None):
    return build_model(ModelSpec(arch, task, "tiny", vocab_size=256, seq_len=64, num_labels=labels,
                                 model_name_or_path=path), dtype)


def _jitter(model, seed=0):
    """Move every weight off its init (zero biases, unit LayerNorms): a mapping mistake shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_((0.05 * torch.randn(p.shape, generator=g)).to(p.dtype))
    return model


def _one_line(e):
    return "\n" not in str(e.value)


# ---- saving: plain transformers reads what the BenchModel computes ---------------------------
def test_gpt2_checkpoint_loads_in_plain_transformers_with_the_same_outputs(tmp_path):
    torch.manual_seed(0)
    m = _jitter(_build("gpt2", "clm")).eval()
    path = save_pretrained(m, tmp_path / "model", {"run_id": "A/fp32_baseline/seed0", "steps": 7})
    ids = torch.randint(4, 256, (2, 64))
    with torch.no_grad():
        ours = m.logits({"input_ids": ids})
        lm = GPT2LMHeadModel.from_pretrained(path).eval()
        assert torch.allclose(lm(input_ids=ids).logits, ours, atol=1e-5)
        body = GPT2Model.from_pretrained(path).eval()
        assert torch.allclose(body(input_ids=ids).last_hidden_state, m.backbone(input_ids=ids).last_hidden_state,
                              atol=1e-5)
    meta = json.loads((path / META_FILE).read_text())
    assert (meta["run_id"], meta["steps"], meta["hf_class"], meta["saved_dtype"]) == (
        "A/fp32_baseline/seed0", 7, "GPT2LMHeadModel", "float32")
    assert "bench_sdpa" not in (path / "config.json").read_text()  # loadable where benchlib is not imported


def test_roberta_mlm_checkpoint_loads_in_plain_transformers_with_the_same_outputs(tmp_path):
    torch.manual_seed(0)
    m = _jitter(_build("roberta", "mlm")).eval()
    path = save_pretrained(m, tmp_path / "model", {})
    ids = torch.randint(4, 256, (2, 64))
    with torch.no_grad():
        mlm = RobertaForMaskedLM.from_pretrained(path).eval()
        assert torch.allclose(mlm(input_ids=ids).logits, m.logits({"input_ids": ids}), atol=1e-5)
        body = RobertaModel.from_pretrained(path, add_pooling_layer=False).eval()
        assert torch.allclose(body(input_ids=ids).last_hidden_state, m.backbone(input_ids=ids).last_hidden_state,
                              atol=1e-5)
    assert torch.equal(mlm.lm_head.bias, m.head.bias)  # lm_head.bias is the decoder's bias


def test_a_bf16_model_saves_fp32_weights(tmp_path):
    from safetensors import safe_open
    m = _jitter(_build("gpt2", "clm", dtype=get_config("bf16_pure")))
    assert m.backbone.h[0].mlp.c_fc.weight.dtype == torch.bfloat16
    path = save_pretrained(m, tmp_path / "model", {})
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}
        c_fc = f.get_tensor("transformer.h.0.mlp.c_fc.weight")
    assert dtypes == {torch.float32}
    assert torch.equal(c_fc, m.backbone.h[0].mlp.c_fc.weight.float().t())  # Conv1D layout (in, out)
    assert json.loads((path / META_FILE).read_text())["trained_param_dtype"] == "bfloat16"
    assert m.backbone.h[0].mlp.c_fc.weight.dtype == torch.bfloat16  # the trained model is left as it was


def test_saving_replaces_an_older_checkpoint_whole(tmp_path):
    path = save_pretrained(_build("gpt2", "clm"), tmp_path / "model", {"run_id": "old"})
    (path / "stale-shard.safetensors").write_text("x")
    save_pretrained(_build("gpt2", "clm"), tmp_path / "model", {"run_id": "new"})
    assert json.loads((path / META_FILE).read_text())["run_id"] == "new"
    assert not (path / "stale-shard.safetensors").exists() and is_complete(path)
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary folder left beside it


def test_a_classification_model_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="only the LM scenarios") as e:
        save_pretrained(_build("gpt2", "multilabel", labels=5), tmp_path / "model", {})
    assert _one_line(e) and not (tmp_path / "model").exists()


def test_a_sharded_model_is_refused(tmp_path):
    m = _build("gpt2", "clm")
    lin = m.backbone.h[0].mlp.c_fc
    lin.weight = torch.nn.Parameter(lin.weight.detach().reshape(-1)[: lin.weight.numel() // 2].clone())  # FSDP1's 1-D shard
    with pytest.raises(CheckpointError, match="looks sharded") as e:
        save_pretrained(m, tmp_path / "model", {})
    assert _one_line(e)


def test_an_fsdp2_dtensor_model_is_refused(tmp_path):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        m = _build("gpt2", "clm")
        lin = m.backbone.h[0].mlp.c_fc
        lin.weight = torch.nn.Parameter(distribute_tensor(lin.weight.data, init_device_mesh("cpu", (1,)), [Shard(0)]))
        with pytest.raises(CheckpointError, match="sharded .FSDP DTensor") as e:
            save_pretrained(m, tmp_path / "model", {})
        assert _one_line(e)
    finally:
        dist.destroy_process_group()


# ---- loading: the checks around from_pretrained ---------------------------------------------
def test_a_pretrained_gpt2_run_hands_its_backbone_to_a_classification_run(tmp_path):
    from benchlib.training.loop import run
    rec = run(RunConfig(scenario="A", config="fp32_baseline", steps=3, size="tiny", device="cpu", save_model=True,
                        eval_batches=2, log_every=1), out_dir=tmp_path / "a", progress=False)
    ckpt = tmp_path / "a" / "model"
    assert is_complete(ckpt), rec["reason"]
    # the record lists the body's matmul shapes (whether float8 pays is decided per shape)
    assert {"name": "h.*.attn.c_attn", "in": 64, "out": 192, "count": 2, "fp8": True} in rec["model"]["matmuls"]
    saved = GPT2Model.from_pretrained(ckpt)
    cls = _build("gpt2", "multilabel", labels=5, path=str(ckpt))
    assert torch.equal(cls.backbone.h[1].attn.c_attn.weight, saved.h[1].attn.c_attn.weight.t())
    torch.manual_seed(0)  # the A run's initial weights: the checkpoint holds trained ones
    assert not torch.equal(_build("gpt2", "clm").backbone.h[1].attn.c_attn.weight, cls.backbone.h[1].attn.c_attn.weight)
    info = cls.pretrained_info
    assert (info["architecture"], info["model_type"], info["loaded_fraction"]) == ("GPT2LMHeadModel", "gpt2", 1.0)
    assert info["backbone_parameters"] == sum(p.numel() for p in saved.parameters())
    assert info["checkpoint"]["run_id"] == "A/fp32_baseline/seed0"


def test_a_roberta_checkpoint_given_to_a_gpt2_scenario_is_refused_in_one_line(tmp_path):
    path = save_pretrained(_build("roberta", "mlm"), tmp_path / "roberta", {})
    with pytest.raises(CheckpointError) as e:
        _build("gpt2", "multilabel", labels=5, path=str(path))
    assert _one_line(e)
    for part in [str(path), "'roberta'", "A, C, E take GPT-2 checkpoints", "B takes RoBERTa checkpoints",
                 "D, F those or another encoder"]:
        assert part in str(e.value)


def test_missing_backbone_weights_are_an_error_naming_them(tmp_path):
    from transformers import GPT2Config
    GPT2Model(GPT2Config(n_layer=1, n_head=2, n_embd=64, vocab_size=256, n_positions=64)).save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "n_layer": 2}))  # layer 1 is not in the weights
    with pytest.raises(CheckpointError, match=r"lacks 12 GPT-2 backbone weights .*h\.1\.") as e:
        load_pretrained(GPT2Model, "gpt2", tmp_path)
    assert _one_line(e) and str(tmp_path) in str(e.value)


def test_a_fresh_task_head_is_expected_not_an_error(tmp_path):
    RobertaModel(build_model(ModelSpec("roberta", "mlm", "tiny", 256, 64, 0, 1, None), FP32).backbone.config,
                 add_pooling_layer=False).save_pretrained(tmp_path)
    model, info = load_pretrained(RobertaForMaskedLM, "roberta", tmp_path)
    assert info["loaded_fraction"] == 1.0 and info["model_type"] == "roberta"
    assert {"lm_head.dense.weight", "lm_head.layer_norm.weight"} <= set(info["new_weights"])
    assert "checkpoint" not in info  # not one of ours: no dtype_bench_checkpoint.json


def test_the_study_value_pretrained_outside_a_sweep_is_explained():
    with pytest.raises(CheckpointError, match="dtype-bench sweep. replaces it"):
        checkpoint_config("gpt2", "pretrained")


# ---- the study's pretrain stage -----------------------------------------------------------------
STUDY = """study: ft
scenarios: [A, C, D]
configs: [fp32_baseline]
seeds: [0, 1]
size: tiny
steps: 3
device: cpu
pretrain:
  gpt2: {config: amp_bf16, steps: 5}
  roberta: {scenario: B, config: fp32_baseline, steps: 4, seed: 1}
overrides:
  lm: {batch_size: 4}
  cls:
    lr: 2.0e-5
    model_name_or_path: pretrained
"""


def _study(tmp_path, text=STUDY, name="ft.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_pretrain_stage_is_planned_first_and_pretrained_resolves_to_its_checkpoint(tmp_path):
    path = _study(tmp_path)
    items = sweep.plan(load_study(path), tmp_path / "executed")
    assert [i.run_id for i in items] == ["pretrain/gpt2", "pretrain/roberta", "A/fp32_baseline/seed0",
                                         "C/fp32_baseline/seed0", "D/fp32_baseline/seed0", "A/fp32_baseline/seed1",
                                         "C/fp32_baseline/seed1", "D/fp32_baseline/seed1"]  # seed-major
    g, r = items[0], items[1]
    assert g.model_dir == tmp_path / "executed/ft.pretrain/gpt2/model"
    c = g.spec.cfg  # the study's settings and lm overrides, then the pretrain keys, save_model on
    assert (c.scenario, c.config, c.seed, c.steps, c.batch_size, c.size, c.device, c.save_model, c.model_name_or_path) \
        == ("A", "amp_bf16", 0, 5, 4, "tiny", "cpu", True, None)
    assert (r.spec.cfg.scenario, r.spec.cfg.seed, r.spec.cfg.steps) == ("B", 1, 4)
    loads = {i.run_id: (i.spec.cfg.model_name_or_path, i.needs) for i in items[2:]}
    c_seed0 = next(i for i in items if i.run_id == "C/fp32_baseline/seed0")
    assert loads["A/fp32_baseline/seed0"] == (None, None)
    assert loads["C/fp32_baseline/seed1"] == (str(g.model_dir), g)
    assert loads["D/fp32_baseline/seed0"] == (str(r.model_dir), r)
    assert c_seed0.spec.cfg.lr == 2e-5 and not c_seed0.spec.cfg.save_model
    # the run's papermill command carries every setting inline, the resolved path included,
    # and the notebook turns them into the same configuration
    inline = runner.injected(runner.papermill_command(c_seed0))
    assert inline["model_name_or_path"] == str(g.model_dir)
    cfg = notebook.validate_params({"run_config": {**inline, "out_dir": "x"}}, family="cls")
    assert cfg == resolved(c_seed0.spec.cfg).replace(out_dir="x")
    assert runner.injected(runner.papermill_command(g))["save_model"] is True


def test_a_study_file_with_a_pretrain_section_still_parameterises_the_notebooks(tmp_path):
    ns = {**yaml.safe_load(STUDY), "scenario": "A", "config": "fp32_baseline", "seed": 1}
    cfg = notebook.validate_params(ns, family="lm")  # papermill -f ft.yaml -p scenario A ...
    assert (cfg.scenario, cfg.seed, cfg.batch_size, cfg.save_model) == ("A", 1, 4, False)


def test_dry_run_shows_the_pretrain_stage(tmp_path, capsys):
    assert sweep.main([str(_study(tmp_path)), "--dry_run", "--out", str(tmp_path / "executed")]) == 0
    out = capsys.readouterr().out
    assert "ft (" in out and "6 runs" in out
    assert "pretrain stage first" in out and line_with(out, "pretrain/gpt2 ", "A/amp_bf16/seed0", "5 steps", "new")
    assert "done 0, to run 8 (new 8)" in out
    assert out.index("pretrain/roberta") < out.index("C/fp32_baseline/seed0")
    assert "loads pretrain/gpt2's checkpoint" in out and "save_model: true" in out
    assert not (tmp_path / "executed").exists()


def test_selecting_runs_pulls_in_the_pretrain_runs_they_need(tmp_path):
    items = sweep.plan(load_study(_study(tmp_path)), tmp_path / "executed")
    picked = sweep.select(items, ["D/*"], [], [], [])
    assert [i.run_id for i in picked] == ["pretrain/roberta", "D/fp32_baseline/seed0", "D/fp32_baseline/seed1"]
    assert picked[0].pulled
    assert [i.run_id for i in sweep.select(items, ["pretrain/*"], [], [], [])] == ["pretrain/gpt2", "pretrain/roberta"]
    assert [i.run_id for i in sweep.select(items, [], ["A"], [], [0])] == ["A/fp32_baseline/seed0"]


@pytest.mark.parametrize("text, expected", [
    (STUDY.split("pretrain:")[0] + "overrides:\n  cls: {model_name_or_path: pretrained}\n",
     ["overrides.cls.model_name_or_path: 'pretrained' for scenario C needs a pretrain.gpt2 section"]),
    (STUDY.replace("  gpt2: {config: amp_bf16, steps: 5}\n", ""),
     ["overrides.cls.model_name_or_path: 'pretrained' for scenario C needs a pretrain.gpt2 section"]),
    (STUDY.replace("gpt2: {config", "gpt2: {scenario: C, config"),
     ["pretrain.gpt2: scenario 'C': the GPT-2 checkpoint is pretrained on scenario A"]),
    (STUDY.replace("  gpt2:", "  bert:"), ["pretrain: unknown architecture 'bert'", "Valid: gpt2, roberta"]),
    (STUDY.replace("steps: 5}", "steps: 5, stpes: 3}"), ["pretrain.gpt2: unknown parameter 'stpes'"]),
    (STUDY.replace("steps: 5}", "steps: 5, strategy: fsdp2}"), ["pretrain.gpt2: dist.strategy 'fsdp2' shards"]),
    (STUDY.replace("steps: 5}", "steps: 5, model_name_or_path: pretrained}"),
     ["pretrain.gpt2: model_name_or_path: 'pretrained' is what this stage makes"]),
])
def test_bad_pretrain_settings_fail_at_load_in_one_line_naming_file_and_key(tmp_path, text, expected):
    path = _study(tmp_path, text, "bad.yaml")
    with pytest.raises(ConfigError) as e:
        load_study(path)
    assert _one_line(e)
    for part in [str(path), *expected]:
        assert part in str(e.value)


def test_a_failed_pretrain_skips_its_runs_which_the_next_sweep_retries(tmp_path, monkeypatch, capsys):
    path, root = _study(tmp_path), tmp_path / "executed"
    calls, clock = [], [0]
    argv = [str(path), "--out", str(root), "--no_analysis", "--no_html"]
    monkeypatch.setattr(runner, "execute", fake_papermill(path, root, {"pretrain/gpt2": "error"}, calls, clock))
    assert sweep.main(argv) == 1
    # the stage first, then what loads no checkpoint (A), then what does (D); C never started
    assert calls == ["pretrain/gpt2", "pretrain/roberta", "A/fp32_baseline/seed0", "A/fp32_baseline/seed1",
                     "D/fp32_baseline/seed0", "D/fp32_baseline/seed1"]
    c0 = read_record(root / "ft/runs/C/fp32_baseline/seed0/result.json")
    assert c0["status"] == "skipped" and c0["sweep"]["waiting_for"] == "pretrain/gpt2"
    assert c0["reason"].startswith(sweep.WAITING) and "pretrain/gpt2 (A/amp_bf16/seed0) ended error" in c0["reason"]
    assert "boom in pretraining" in c0["reason"]
    d0 = read_record(root / "ft/runs/D/fp32_baseline/seed0/result.json")
    assert d0["status"] == "ok" and d0["sweep"]["pretrained"]["run"] == "pretrain/roberta"
    assert d0["run"]["model_name_or_path"] == str(root / "ft.pretrain/roberta/model")  # findable from the record
    assert line_with(capsys.readouterr().err, "2 run(s)", "skipped", "pretrain")

    # resume: the failed pretrain and its waiting runs run again, nothing else
    assert sweep.main(argv + ["--dry_run"]) == 0
    assert "done 5, to run 3 (error 1, waiting 2)" in capsys.readouterr().out
    calls.clear()
    monkeypatch.setattr(runner, "execute", fake_papermill(path, root, {}, calls, clock))
    assert sweep.main(argv) == 0
    assert calls == ["pretrain/gpt2", "C/fp32_baseline/seed0", "C/fp32_baseline/seed1"]
    c0 = read_record(root / "ft/runs/C/fp32_baseline/seed0/result.json")
    gpt2 = read_record(root / "ft.pretrain/gpt2/result.json")
    assert c0["status"] == "ok" and c0["sweep"]["pretrained"]["date"] == gpt2["env"]["date"]

    # a checkpoint trained again: the runs that loaded the old one are stale
    assert sweep.main(argv + ["--only", "pretrain/roberta", "--force"]) == 0
    capsys.readouterr()
    assert sweep.main(argv + ["--dry_run", "--only", "D/*"]) == 0
    out = capsys.readouterr().out
    assert "to run 2 (stale 2)" in out and "its checkpoint was retrained" in out
    (root / "ft.pretrain/roberta/result.json").unlink()  # to be trained again: its runs follow it
    assert sweep.main(argv + ["--dry_run"]) == 0
    assert "done 5, to run 3 (new 1, stale 2)" in capsys.readouterr().out


def test_a_stalled_pretrain_hands_on_its_checkpoint_with_a_warning_and_a_diverged_one_does_not(
        tmp_path, monkeypatch, capsys):
    path, root = _study(tmp_path), tmp_path / "executed"
    calls, clock = [], [0]
    argv = [str(path), "--out", str(root), "--no_analysis", "--no_html"]
    outcomes = {"pretrain/gpt2": "stalled", "pretrain/roberta": "diverged"}
    monkeypatch.setattr(runner, "execute", fake_papermill(path, root, outcomes, calls, clock))
    assert sweep.main(argv) == 1  # D's runs wait for a usable checkpoint
    captured = capsys.readouterr()
    out = captured.out + captured.err
    warning = ("warning: pretrain run pretrain/gpt2 (A/amp_bf16/seed0) ended stalled: did not clearly beat the "
               "trivial baseline")
    assert warning in out and "its checkpoint is loaded all the same" in out
    assert "pretrain/roberta" not in "".join(line for line in out.splitlines() if line.startswith("warning:"))
    # the stalled checkpoint is loaded: C ran, its record says which training made it
    c0 = read_record(root / "ft/runs/C/fp32_baseline/seed0/result.json")
    assert c0["status"] == "ok" and c0["sweep"]["pretrained"]["run"] == "pretrain/gpt2"
    assert "C/fp32_baseline/seed0" in calls
    # the diverged one is not, though training saved it: D waits for it
    assert "D/fp32_baseline/seed0" not in calls and (root / "ft.pretrain/roberta/model").is_dir()
    d0 = read_record(root / "ft/runs/D/fp32_baseline/seed0/result.json")
    assert d0["status"] == "skipped" and d0["sweep"]["waiting_for"] == "pretrain/roberta"
    assert line_with(d0["reason"], "pretrain/roberta", "B/fp32_baseline/seed1", "diverged", "non-finite")
    assert sweep.pretrain_problem(sweep.plan(load_study(path), root)[0]) is None
    assert sweep.pretrain_warning(sweep.plan(load_study(path), root)[1]) is None  # unusable: a problem, not a warning
