"""Inference per precision at tiny size on the CPU: the KV-cache decode continues a prompt as
full forwards do, throughput counts what it says, cast copies leave the model alone, and a
trained checkpoint's quality is evaluated under each inference precision."""
import json

import pytest
import torch

from dtype_bench.cli import main as cli_main
from benchlib.core.dtypes import get_config
from benchlib.training import inference as inf
from benchlib.training.loop import run
from benchlib.training.models import ModelSpec, build_model

FP32 = get_config("fp32_baseline")
CPU = torch.device("cpu")


def _gpt2():
    torch.manual_seed(0)
    return build_model(ModelSpec("gpt2", "clm", "tiny", 256, 64), FP32)


def test_kv_cache_decode_gives_the_greedy_tokens_of_full_forwards():
    m = inf.serve_copy(_gpt2(), inf.MODES["fp32"])
    prompt = torch.randint(4, 256, (2, 10))
    got, timing = inf.decode(m, prompt, 6, inf.MODES["fp32"], CPU)
    ids = prompt
    with torch.no_grad():
        for _ in range(6):  # no cache: the whole sequence again for every token
            ids = torch.cat([ids, m.logits({"input_ids": ids})[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(got, ids[:, 10:])
    assert timing["prompt_len"] == 10 and timing["new_tokens"] == 6 and timing["decode_ms_per_token"] > 0


def test_decode_times_warm_repeats_and_reports_the_median(monkeypatch):
    """The first continuation is untimed (kernel selection, caches); the per-token figure is the
    median over the timed repeats' steps, so one slow step does not move it."""
    calls = []
    slow = iter([500.0])  # the first timed step is a 500 ms outlier, every other takes 2 ms

    def fake_generate(bb, head, prompt, new_tokens, device):
        calls.append(new_tokens)
        steps = [next(slow, 2.0) if len(calls) > 1 else 900.0 for _ in range(new_tokens)]
        return torch.zeros(prompt.shape[0], new_tokens, dtype=torch.long), 30.0 if len(calls) > 1 else 999.0, steps

    monkeypatch.setattr(inf, "_generate", fake_generate)
    m = inf.serve_copy(_gpt2(), inf.MODES["fp32"])
    _, t = inf.decode(m, torch.zeros(2, 4, dtype=torch.long), 5, inf.MODES["fp32"], CPU, repeats=3)
    assert len(calls) == 4 and t["decode_repeats"] == 3
    assert t["prefill_ms"] == 30.0  # the untimed first prefill (999 ms) is not in it
    assert t["decode_ms_per_token"] == 2.0 and t["decode_ms_per_token_mean"] > 2.0
    assert t["decode_tokens_per_s"] == 2 / 0.002


def test_decode_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="exceed the model's 64 positions"):
        inf.decode(_gpt2(), torch.zeros(1, 60, dtype=torch.long), 8, inf.MODES["fp32"], CPU)
    enc = build_model(ModelSpec("roberta", "singlelabel", "tiny", 256, 32, num_labels=3), FP32)
    with pytest.raises(ValueError, match="needs a causal LM"):
        inf.decode(enc, torch.zeros(1, 4, dtype=torch.long), 2, inf.MODES["fp32"], CPU)


@pytest.mark.parametrize("task,per_batch", [("clm", 3 * 16), ("singlelabel", 3)])
def test_throughput_counts_tokens_for_lm_and_samples_for_classification(task, per_batch):
    m = build_model(ModelSpec("gpt2", task, "tiny", 256, 16, num_labels=4), FP32).eval()
    ids = torch.randint(4, 256, (3, 16))
    r = inf.forward_throughput(m, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, inf.MODES["fp32"],
                               CPU, iters=3, warmup=1)
    assert r["throughput"] == pytest.approx(per_batch / (r["forward_ms"] / 1e3))
    assert r["throughput_unit"] == ("tokens/s" if task == "clm" else "samples/s")


def test_a_served_copy_has_the_modes_weights_and_leaves_the_model_alone():
    m = _gpt2()
    half = inf.serve_copy(m, inf.MODES["bf16"])
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in m.parameters()} == {torch.float32} and m.training and not half.training


def test_unknown_mode_is_one_line_naming_the_modes(capsys):
    with pytest.raises(ValueError, match="unknown inference mode 'int4': use one of fp32, autocast_bf16"):
        inf.get_mode("int4")
    assert cli_main(["infer", "--scenario", "E", "--modes", "fp32,int4"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_trained_checkpoint_is_evaluated_under_each_precision(tmp_path, capsys):
    train = {"scenario": "A", "config": "fp32_baseline", "steps": 4, "eval_batches": 2, "seed": 1}
    rec = run({**train, "save_model": True}, out_dir=tmp_path / "train", progress=False)
    assert rec["status"] not in ("error", "oom")
    served = {**train, "model_name_or_path": str(tmp_path / "train" / "model")}
    assert cli_main(["infer", *[f"--{k}={v}" for k, v in served.items()], "--modes", "fp32,bf16", "--iters", "2",
                     "--prompt_len", "8", "--new_tokens", "4", "--out", str(tmp_path / "infer")]) == 0
    out = json.loads((tmp_path / "infer" / "inference.json").read_text())
    by = {r["mode"]: r for r in out["modes"]}
    assert [by[m]["status"] for m in ("fp32", "bf16")] == ["ok", "ok"]
    # served in the precision it was trained in, the checkpoint scores what its training run recorded
    assert by["fp32"]["quality/val_loss"] == pytest.approx(rec["metrics"]["quality/val_loss"], rel=1e-5)
    assert by["bf16"]["quality/val_loss"] == pytest.approx(by["fp32"]["quality/val_loss"], rel=0.05)
    assert by["bf16"]["new_tokens"] == 4 and by["bf16"]["prefill_ms"] > 0
    assert out["weights"].endswith("model") and "fp32" in capsys.readouterr().out


def test_classification_inference_has_no_decode_rows(tmp_path):
    out = inf.infer({"scenario": "F", "eval_batches": 1}, ["fp32", "autocast_bf16"], out_dir=tmp_path, iters=2)
    assert [r["status"] for r in out["modes"]] == ["ok", "ok"]
    assert all("prefill_ms" not in r and "quality/accuracy" in r for r in out["modes"])
    assert (tmp_path / "inference.json").exists()


def test_forward_time_is_the_median_so_one_slow_pass_does_not_move_it(monkeypatch):
    m = _gpt2()
    ids = torch.randint(4, 256, (2, 8))
    passes = iter([2.0, 2.0, 2.0, 50.0, 2.0])  # ms of the timed passes; the fourth is slow
    monkeypatch.setattr(inf, "_timed", lambda fn, device, iters, warmup: [next(passes) for _ in range(iters)])
    r = inf.forward_throughput(m, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, inf.MODES["fp32"],
                               CPU, iters=5, warmup=0)
    assert r["forward_ms"] == 2.0 and r["forward_stat"] == "median"
    assert r["forward_ms_mean"] == pytest.approx(11.6) and r["forward_ms_all"][3] == 50.0
