"""FP8 break-even tooling: matmul shapes per size, the per-size Linear sum and the break-even rule."""
import pytest
import torch

from benchlib.training.fp8_bench import break_even, main, per_size, size_matmuls, time_linear


def test_sizes_grow_and_keep_the_optimizer_batch():
    base, xl = size_matmuls("A", "base"), size_matmuls("A", "xl")
    assert [s["name"] for s in base["shapes"]] == ["h.*.attn.c_attn", "h.*.attn.c_proj", "h.*.mlp.c_fc", "h.*.mlp.c_proj"]
    assert base["shapes"][0] == {"name": "h.*.attn.c_attn", "in": 768, "out": 2304, "count": 12, "fp8": True}
    assert xl["shapes"][2]["in"] == 1600 and xl["shapes"][2]["out"] == 6400 and xl["shapes"][2]["count"] == 48
    assert 1.4e9 < xl["parameters"] < 1.7e9
    assert base["tokens"] == base["micro_batch"] * base["seq_len"]


def _row(size, recipe, in_, out, count, ms):
    return {"size": size, "tokens": 4096, "name": "x", "in": in_, "out": out, "count": count, "fp8": True,
            "recipe": recipe, "ms": ms}


def test_per_size_sums_layers_and_break_even_is_the_first_paying_size():
    rows = [_row("base", "none", 8, 8, 12, 1.0), _row("base", "none", 8, 32, 12, 2.0),
            _row("base", "tensorwise", 8, 8, 12, 1.5), _row("base", "tensorwise", 8, 32, 12, 2.5),
            _row("xl", "none", 16, 64, 48, 4.0), _row("xl", "tensorwise", 16, 64, 48, 2.0)]
    s = per_size(rows)
    base = s[s["size"] == "base"].iloc[0]
    assert base["bf16_linear_ms"] == pytest.approx(36.0) and base["fp8_linear_ms"] == pytest.approx(48.0)
    assert base["speedup"] == pytest.approx(0.75)
    assert s[s["size"] == "xl"].iloc[0]["speedup"] == pytest.approx(2.0)
    assert break_even(s, ["base", "medium", "xl"]) == {"tensorwise": "xl"}
    # no size pays: said, not guessed
    assert break_even(per_size(rows[:4]), ["base"]) == {"tensorwise": None}


def test_linear_timing_runs_on_cpu_without_fp8():
    r = time_linear(32, 16, 32, "none", torch.device("cpu"), iters=2, repeats=1)
    assert r["ms"] > 0 and r["tflops"] > 0


def test_cli_refuses_unknown_size_and_a_missing_gpu(capsys):
    assert main(["--scenario", "D", "--sizes", "xl"]) == 2
    assert "size 'xl' does not exist for roberta" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["--sizes", "base", "--out", "/tmp/unused_fp8"]) == 2
        assert "no CUDA device" in capsys.readouterr().err
