"""The nanoGPT parity script: both sides run, the ratio is theirs over ours, a bad checkout is named.

nanoGPT itself is never in the project; here a stand-in ``bench.py`` prints nanoGPT's result line
after timing a small loop of its own, and dtype-bench's side is a real tiny run on the CPU."""
import json
import sys

import pytest

from dtype_bench import parity

STAND_IN = '''
import sys, time, torch
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
assert args["real_data"] == "False" and args["device"] == "cpu", args
m = torch.nn.Linear(int(args["block_size"]), 8)
t0 = time.time()
for _ in range(20):
    m(torch.randn(int(args["batch_size"]), int(args["block_size"]))).sum().backward()
print(f"19/20 loss: 1.0000")
print(f"time per iteration: {(time.time() - t0) / 20 * 1000:.4f}ms, MFU: 0.01%")
'''


@pytest.fixture
def checkout(tmp_path):
    d = tmp_path / "nanoGPT"
    d.mkdir()
    (d / "bench.py").write_text(STAND_IN)
    return d


def test_both_sides_run_and_the_ratio_is_theirs_over_ours(checkout, tmp_path):
    r = parity.compare(checkout, tmp_path / "out", batch_size=2, block_size=32, device="cpu", size="tiny",
                       steps=6, compile_=False, timeout=300)
    assert r["nanogpt_ms"] > 0 and r["dtype_bench_ms"] > 0
    assert r["ratio"] == pytest.approx(r["nanogpt_ms"] / r["dtype_bench_ms"])
    saved = json.loads((tmp_path / "out" / "parity.json").read_text())
    assert saved["ratio"] == r["ratio"] and saved["dtype_bench"]["timed_steps"] >= 1
    rec = json.loads((tmp_path / "out" / "run" / "result.json").read_text())
    assert (rec["scenario"], rec["config"], rec["run"]["seq_len"], rec["run"]["batch_size"]) == ("A", "amp_bf16", 32, 2)


def test_a_folder_without_bench_py_is_named_in_one_line(tmp_path, capsys):
    assert parity.main(["--nanogpt", str(tmp_path), "--device", "cpu", "--size", "tiny"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path) in err and "bench.py" in err


def test_a_bench_py_that_prints_no_time_is_refused_naming_its_last_line(checkout, tmp_path):
    (checkout / "bench.py").write_text("import sys\nprint('CUDA error: no device')\nsys.exit(1)\n")
    with pytest.raises(parity.ParityError, match="no device"):
        parity.nanogpt_ms(checkout, 2, 32, "cpu", False, timeout=60)
