"""benchlib.training.bench on CPU: the kernel summary's arithmetic, the nanoGPT reference runner (a stub
bench.py that prints nanoGPT's line and the flags it got), the bare loop, and the CLI's guard."""
from __future__ import annotations

import math

import pytest

from benchlib.training import bench
from benchlib.core.runconfig import RunConfig


def test_kernel_summary_counts_overlaps_once_and_ranks_kernels():
    # two steps; kernels in microseconds: gemm 0-400 and a reduction overlapping it 300-500,
    # then an idle gap, then the optimizer 1000-1100 (busy 500 + 100 = 600 us)
    ks = [("gemm", 0, 400), ("reduce", 300, 500), ("adam", 1000, 1100)]
    s = bench.kernel_summary(ks, steps=2, step_ms=0.6)
    assert s["kernel_ms"] == pytest.approx(0.3)  # 600 us over 2 steps
    assert s["device_idle_pct"] == pytest.approx(50.0)
    assert s["kernels_per_step"] == 1.5
    assert [k["name"] for k in s["top_kernels"]] == ["gemm", "reduce", "adam"]
    assert s["top_kernels"][0]["ms_per_step"] == pytest.approx(0.2)


def test_kernel_summary_nested_intervals_and_a_busy_device():
    ks = [("outer", 0, 1000), ("inner", 100, 200)]  # contained: adds nothing to the busy time
    s = bench.kernel_summary(ks, steps=1, step_ms=1.0)
    assert s["kernel_ms"] == pytest.approx(1.0)
    assert s["device_idle_pct"] == 0.0


STUB = '''import sys
print("args:", " ".join(sys.argv[1:]))
bias = "--bias=True" in sys.argv
print("time per iteration: %.2fms, MFU: 40.10%%" % (27.5 if bias else 26.0))
'''


def test_nanogpt_reference_as_shipped_and_with_bias(tmp_path):
    (tmp_path / "bench.py").write_text(STUB)
    shipped = bench.nanogpt_ms(str(tmp_path))
    biased = bench.nanogpt_ms(str(tmp_path), bias=True)
    assert shipped["ms"] == 26.0 and biased["ms"] == 27.5
    assert shipped["mfu_pct_a100_peak"] == pytest.approx(40.1)


def test_nanogpt_reference_errors_are_reported(tmp_path):
    assert "no bench.py" in bench.nanogpt_ms(str(tmp_path))["error"]
    (tmp_path / "bench.py").write_text("raise SystemExit('CUDA unavailable')\n")
    assert "CUDA unavailable" in bench.nanogpt_ms(str(tmp_path))["error"]


def test_bare_loop_times_windows_on_cpu():
    cfg = RunConfig(scenario="A", config="fp32_baseline", size="tiny", seq_len=16, batch_size=2,
                    device="cpu", steps=4)
    out = bench.bare_loop_ms(cfg, steps=4, warmup=1, windows=2, profile_steps=2)
    assert len(out["ms_windows"]) == 2 and all(math.isfinite(t) and t > 0 for t in out["ms_windows"])
    assert out["peak_gib"] is None and out["flops_per_token"] > 0
    assert "kernel_ms" not in out  # the kernel profile is for CUDA devices only


def test_bench_cli_refuses_without_a_gpu(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert bench.main(["--configs", "amp_bf16"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_markdown_names_both_references_and_the_largest_kernels():
    env = {k: "x" for k in ("device_name", "torch", "cuda", "transformers", "bitsandbytes", "torchao",
                            "git_commit", "date")}
    row = {"config": "amp_bf16", "status": "ok", "ms": 26.5, "bare_ms": 26.4, "vs_nanogpt": 0.98,
           "vs_nanogpt_bias": 1.04, "kernel_ms": 25.0, "kernels_per_step": 900.0, "device_idle_pct": 5.3,
           "top_kernels": [{"name": "sm90_gemm", "ms_per_step": 3.2}]}
    md = bench._markdown({"env": env, "nanogpt": {"ms": 26.0}, "nanogpt_bias": {"ms": 27.5}, "rows": [row]})
    assert "26.0 ms/iter as shipped" in md and "27.5 ms/iter with --bias=True" in md
    assert "| amp_bf16 | ok | 26.5 | - | 26.4 |" in md
    assert "3.200 ms `sm90_gemm`" in md
