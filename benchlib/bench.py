"""``dtype-bench bench``: GPU speed of benchlib's training step, measured honestly.

In one process and one call, for each dtype config: benchlib's full run (metrics, logging,
divergence checks) and a bare loop of the *same* model and settings (autocast, scaler,
clip, optimizer; nothing else), both timed with device synchronisation after warm-up,
median over windows. Optionally an external reference (nanoGPT's ``bench.py``) is run
beside it as a subprocess and its ms/iter parsed. Writes ``bench.json`` and ``bench.md``.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from . import data as datamod
from . import env as envmod
from .models import autocast_context, build_model
from .precision import LossScaler, build_optimizer, set_matmul_flags
from .runconfig import RunConfig, resolved


def bare_loop_ms(cfg: RunConfig, steps: int = 30, warmup: int = 10, windows: int = 3) -> dict:
    """ms/step of a minimal loop over the same model, data and precision as ``cfg``."""
    cfg = resolved(cfg)
    device = envmod.pick_device(cfg.device)
    dtype = cfg.dtype
    set_matmul_flags(dtype)
    data = datamod.load_task_data(cfg)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.scn.arch, cfg.scn.task, cfg.size, data.vocab_size, cfg.seq_len, data.pad_id,
                        data.bos_id, data.num_labels, dtype).to(device)
    if dtype.fp8 != "none":
        from .fp8 import convert_fp8
        convert_fp8(model, dtype.fp8)
    opt = build_optimizer(model, dtype, cfg.lr, cfg.weight_decay, cfg.beta2, device)
    scaler = LossScaler(dtype, device)
    params = [p for p in model.parameters()]
    torch._dynamo.reset()
    step_model = torch.compile(model) if cfg.compile == "on" or (cfg.compile == "auto" and dtype.compile) else model
    next_batch = data.sampler(cfg.batch_size, device, cfg.seed)
    amp = autocast_context(device.type, dtype)
    torch.cuda.reset_peak_memory_stats(device)

    def step():
        for _ in range(cfg.grad_accum):
            with amp:
                loss, _ = step_model(next_batch())
            scaler.scale(loss / cfg.grad_accum).backward()
        scaler.unscale_(opt, params)
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        scaler.step(opt)
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    per_window = max(1, steps // windows)
    times = []
    for _ in range(windows):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(per_window):
            step()
        torch.cuda.synchronize(device)
        times.append(1000 * (time.perf_counter() - t0) / per_window)
    out = {"ms": statistics.median(times), "ms_windows": times,
           "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30,
           "flops_per_token": model.flops_per_token(cfg.seq_len)}
    return out


def nanogpt_ms(path: str, compile_: bool = True, timeout: int = 600) -> dict:
    """Run an external nanoGPT checkout's bench.py (random data) and parse its ms/iter."""
    cmd = [sys.executable, "bench.py", "--real_data=False", f"--compile={compile_}"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=path, capture_output=True, text=True, timeout=timeout)
    m = re.search(r"time per iteration: ([\d.]+)ms, MFU: ([\d.]+)%", p.stdout)
    if not m:
        return {"error": (p.stdout + p.stderr)[-2000:]}
    return {"ms": float(m.group(1)), "mfu_pct_a100_peak": float(m.group(2)), "wall_s": time.perf_counter() - t0}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="dtype-bench bench", description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="A")
    ap.add_argument("--size", default="base")
    ap.add_argument("--configs", default="amp_bf16", help="comma-separated dtype configs")
    ap.add_argument("--steps", type=int, default=60, help="benchlib run length (incl. warm-up)")
    ap.add_argument("--batch_size", type=int, default=None)
    ap.add_argument("--grad_accum", type=int, default=1)
    ap.add_argument("--log_every", type=int, default=20)
    ap.add_argument("--bare", default="amp_bf16", help="configs to also time as a bare loop ('all' or comma list)")
    ap.add_argument("--nanogpt", default=None, help="path to a nanoGPT checkout to run beside")
    ap.add_argument("--out", default="bench_out")
    a = ap.parse_args(argv)
    from .train import run
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    device = envmod.pick_device("auto")
    if device.type != "cuda":
        print("dtype-bench bench measures GPU speed; no CUDA device here.", file=sys.stderr)
        return 2
    env = envmod.environment(device)
    rows = []
    ref = nanogpt_ms(a.nanogpt) if a.nanogpt else None
    for name in a.configs.split(","):
        cfg = RunConfig(scenario=a.scenario, config=name, size=a.size, steps=a.steps, batch_size=a.batch_size,
                        grad_accum=a.grad_accum, log_every=a.log_every, eval_batches=2,
                        timing_warmup=min(15, a.steps // 3), timing_windows=5)
        t0 = time.perf_counter()
        rec = run(cfg, out_dir=out / "runs" / f"{a.scenario}_{name}", progress=False)
        m = rec["metrics"]
        row = {"config": name, "status": rec["status"], "reason": (rec["reason"] or "").strip().splitlines()[-1:],
               "ms": m.get("step_ms"), "ms_std": m.get("step_ms_std"), "tokens_per_s": m.get("tokens_per_s"),
               "mfu_pct": m.get("mfu_pct"), "mfu_matched_pct": m.get("mfu_matched_pct"),
               "peak_gib": m.get("memory/peak_allocated_gib"), "j_per_token": m.get("energy/j_per_unit") if a.scenario in "AB" else None,
               "quality": m.get("quality"), "first_step_s": m.get("time/first_step_s"),
               "setup_s": m.get("time/setup_s"), "eval_s": m.get("time/eval_s"), "run_wall_s": time.perf_counter() - t0}
        if rec["status"] == "ok" and (a.bare == "all" or name in a.bare.split(",")):
            b = bare_loop_ms(cfg)
            row.update(bare_ms=b["ms"], bare_peak_gib=b["peak_gib"], overhead_pct=100 * (row["ms"] / b["ms"] - 1))
        if ref and "ms" in ref and row["ms"]:
            row["vs_nanogpt"] = ref["ms"] / row["ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"env": env, "args": vars(a), "nanogpt": ref, "rows": rows}
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    md = _markdown(result)
    (out / "bench.md").write_text(md)
    print(md)
    return 0


def _markdown(result: dict) -> str:
    e = result["env"]
    lines = [f"Device: {e['device_name']}; torch {e['torch']} (CUDA {e['cuda']}), transformers {e['transformers']}, "
             f"bitsandbytes {e['bitsandbytes']}, torchao {e['torchao']}; commit {e['git_commit']}; {e['date']}", ""]
    if result["nanogpt"]:
        lines.append(f"nanoGPT bench.py (same call, same GPU): {result['nanogpt'].get('ms', 'error')} ms/iter")
        lines.append("")
    cols = ["config", "status", "ms", "ms_std", "bare_ms", "overhead_pct", "vs_nanogpt", "tokens_per_s", "mfu_pct",
            "mfu_matched_pct", "peak_gib", "j_per_token", "first_step_s"]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for r in result["rows"]:
        lines.append("| " + " | ".join(_f(r.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _f(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return str(v)
