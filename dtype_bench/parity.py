"""Parity with nanoGPT: its ``bench.py`` and dtype-bench's ``run`` path timed side by side.

nanoGPT's benchmark (github.com/karpathy/nanoGPT, MIT) trains GPT-2 124M on fixed random tokens with
bf16 autocast, TF32 matmuls, fused AdamW and ``torch.compile``: 10 burn-in steps, then the mean of 20.
This script runs that file from a checkout the user names (it is never copied into the project), then
scenario A at the same batch and length through ``dtype-bench run`` under ``amp_bf16`` (the same
numerics), and prints both step times and their ratio. Both runs are separate processes on the same
device, one after the other, so neither shares the GPU with the other.

    python -m dtype_bench.parity --nanogpt ../nanoGPT --out /tmp/parity      # one GPU
    python -m dtype_bench.parity --nanogpt DIR --device cpu --size tiny ...  # the suite's check

The ratio is nanoGPT's ms per step over dtype-bench's: above 1, dtype-bench is faster. What differs
and is not levelled: nanoGPT's model has no biases (``bias=False``) and the project's GPT-2 has them;
dtype-bench's figure is the median of timing windows after its warm-up, nanoGPT's one mean of 20
steps; dtype-bench's runs draw batches from a synthetic corpus, nanoGPT reuses one batch.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from benchlib.core.argparser import ArgumentParser

_NANOGPT_LINE = re.compile(r"time per iteration:\s*([0-9.]+)\s*ms", re.IGNORECASE)


class ParityError(RuntimeError):
    """A run of the comparison could not be made or read; the message says which."""


def nanogpt_ms(nanogpt: Path, batch_size: int, block_size: int, device: str, compile_: bool,
               timeout: float) -> float:
    """Run ``bench.py`` in its checkout with the given overrides; its reported ms per step."""
    bench = nanogpt / "bench.py"
    if not bench.is_file():
        raise ParityError(f"{nanogpt}: no bench.py there; --nanogpt names a nanoGPT checkout")
    cmd = [sys.executable, "bench.py", f"--batch_size={batch_size}", f"--block_size={block_size}",
           "--real_data=False", f"--compile={compile_}", f"--device={device}", "--profile=False"]
    done = subprocess.run(cmd, cwd=nanogpt, capture_output=True, text=True, timeout=timeout)
    found = _NANOGPT_LINE.findall(done.stdout)
    if done.returncode != 0 or not found:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise ParityError(f"{bench} (exit {done.returncode}) printed no 'time per iteration': {last}")
    return float(found[-1])


def run_path_ms(out: Path, batch_size: int, block_size: int, device: str, size: str, steps: int,
                compile_: bool, timeout: float) -> dict:
    """Scenario A under amp_bf16 through ``dtype-bench run``; its record's step time and context."""
    cmd = [sys.executable, "-m", "dtype_bench", "run", "--scenario", "A", "--config", "amp_bf16", "--size", size,
           "--device", device, "--batch_size", str(batch_size), "--grad_accum", "1", "--seq_len", str(block_size),
           "--steps", str(steps), "--eval_batches", "1", "--compile", "on" if compile_ else "off",
           "--judge_quality", "false", "--quiet", "--out", str(out), "--overwrite"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    record = out / "result.json"
    if not record.is_file():
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise ParityError(f"dtype-bench run (exit {done.returncode}) wrote no record: {last}")
    rec = json.loads(record.read_text())
    ms = rec.get("metrics", {}).get("step_ms")
    if rec.get("status") == "error" or ms is None:  # a quality verdict (stalled, ...) does not matter here
        raise ParityError(f"dtype-bench run ended {rec.get('status')}, timing nothing: {rec.get('reason')}")
    env = rec.get("env", {})
    return {"ms": float(ms), "timed_steps": rec["metrics"].get("timed_steps"), "device": env.get("device_name"),
            "torch": env.get("torch"), "commit": env.get("git_commit"), "params": rec.get("model", {}).get("params")}


def compare(nanogpt: Path, out: Path, batch_size: int = 12, block_size: int = 1024, device: str = "cuda",
            size: str = "base", steps: int = 120, compile_: bool = True, timeout: float = 540) -> dict:
    """Both step times and their ratio (nanoGPT's over dtype-bench's), written to ``out/parity.json``."""
    out.mkdir(parents=True, exist_ok=True)
    theirs = nanogpt_ms(nanogpt, batch_size, block_size, device, compile_, timeout)
    ours = run_path_ms(out / "run", batch_size, block_size, device, size, steps, compile_, timeout)
    result = {"nanogpt_ms": theirs, "dtype_bench_ms": ours["ms"], "ratio": theirs / ours["ms"],
              "batch_size": batch_size, "block_size": block_size, "size": size, "device": device,
              "compile": compile_, "dtype_bench": ours}
    (out / "parity.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m dtype_bench.parity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nanogpt", type=Path, required=True, help="a nanoGPT checkout holding bench.py and model.py")
    ap.add_argument("--out", type=Path, default=None, help="folder for the run's record and parity.json "
                                                         "(default: a temporary folder)")
    ap.add_argument("--batch_size", type=int, default=12, help="sequences per step, both sides (nanoGPT's 12)")
    ap.add_argument("--block_size", type=int, default=1024, help="tokens per sequence, both sides (nanoGPT's 1024)")
    ap.add_argument("--device", default="cuda", help="cuda (the figure that counts) or cpu (a check of the script)")
    ap.add_argument("--size", default="base", help="dtype-bench's model size: base is GPT-2 124M, nanoGPT's model")
    ap.add_argument("--steps", type=int, default=120, help="dtype-bench's steps (timed after its warm-up)")
    ap.add_argument("--no_compile", dest="compile", action="store_false", help="eager on both sides")
    ap.add_argument("--timeout", type=float, default=540, help="seconds allowed to each side")
    a = ap.parse_args(argv)
    if a.batch_size < 1 or a.block_size < 2 or a.steps < 2:
        ap.error("--batch_size >= 1, --block_size >= 2 and --steps >= 2")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            r = compare(a.nanogpt.resolve(), a.out or Path(tmp), a.batch_size, a.block_size, a.device, a.size,
                        a.steps, a.compile, a.timeout)
    except (ParityError, subprocess.TimeoutExpired) as e:
        print(f"parity: {e}", file=sys.stderr)
        return 1
    ours = r["dtype_bench"]
    print(f"nanoGPT bench.py {r['nanogpt_ms']:.2f} ms/step; dtype-bench run {r['dtype_bench_ms']:.2f} ms/step "
          f"(A, amp_bf16, {r['batch_size']} x {r['block_size']}, {ours['device']}, torch {ours['torch']}, "
          f"commit {ours['commit']}); ratio {r['ratio']:.3f} (> 1: dtype-bench faster)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
