"""``dtype-bench bench``: GPU speed of benchlib's training step, measured honestly.

In one process and one call, for each dtype config: benchlib's full run (metrics, logging,
divergence checks) and a bare loop of the *same* model and settings (autocast, scaler,
clip, optimizer; nothing else), both timed with device synchronisation after warm-up,
median over windows. Optionally an external reference (nanoGPT's ``bench.py``) is run
beside it as a subprocess, as shipped (``bias=False``) and with GPT-2's biases
(``--bias=True``, the same architecture as benchlib's GPT-2), and its ms/iter parsed. With
``--profile`` the bare loop's kernels are profiled for a few steps: the device's busy time per
step against the step time tells a launch-bound config (idle device) from a compute-bound one.
Writes ``bench.json`` and ``bench.md``.
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
from typing import Callable

import torch

from benchlib.data import load as datamod
from benchlib.core import env as envmod
from benchlib.training.models import autocast_context, ModelSpec, build_model
from benchlib.training.precision import LossScaler, build_optimizer, set_matmul_flags
from benchlib.core.records import COMPLETED
from benchlib.core.runconfig import RunConfig, resolved


def bare_loop_ms(cfg: RunConfig, steps: int = 50, warmup: int = 15, windows: int = 5,
                 profile_steps: int = 0) -> dict:
    """ms/step of a minimal loop over the same model, data and precision as ``cfg``.

    The warm-up and window count match the harness run of ``bench`` (15 steps, 5 windows).
    With ``profile_steps`` > 0, that many further steps run under the profiler and the result
    gains ``kernel_ms`` (device busy time per step), ``device_idle_pct`` and ``top_kernels``.
    """
    cfg = resolved(cfg)
    device = envmod.pick_device(cfg.device)
    dtype = cfg.dtype
    set_matmul_flags(dtype)
    data = datamod.load_task_data(cfg)
    torch.manual_seed(cfg.seed)
    model = build_model(ModelSpec.for_run(cfg, data), dtype).to(device)
    if dtype.fp8 != "none":
        from benchlib.training.fp8 import convert_fp8
        convert_fp8(model, dtype.fp8)
    opt = build_optimizer(model, dtype, cfg.lr, cfg.weight_decay, cfg.beta2, device)
    scaler = LossScaler(dtype, device)
    params = [p for p in model.parameters()]
    torch._dynamo.reset()
    compiled = cfg.compile == "on" or (cfg.compile == "auto" and dtype.compile and device.type == "cuda")
    mode = "reduce-overhead" if compiled and cfg.cudagraphs and device.type == "cuda" else None
    step_model = torch.compile(model, mode=mode) if compiled else model
    next_batch = data.sampler(cfg.batch_size, device, cfg.seed)
    amp = autocast_context(device.type, dtype)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    keep_grads = mode is not None and cfg.grad_accum > 1  # as in train: graphs' outputs are reused
    if keep_grads:
        for p in params:
            p.grad = torch.zeros_like(p)

    def step():
        for _ in range(cfg.grad_accum):
            if mode:
                torch.compiler.cudagraph_mark_step_begin()
            with amp:
                loss, _ = step_model(next_batch())
            scaler.scale(loss / cfg.grad_accum).backward()
        scaler.unscale_(opt, params)
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        scaler.step(opt)
        opt.zero_grad(set_to_none=not keep_grads)

    for _ in range(warmup):
        step()
    per_window = max(1, steps // windows)
    times = []
    for _ in range(windows):
        sync()
        t0 = time.perf_counter()
        for _ in range(per_window):
            step()
        sync()
        times.append(1000 * (time.perf_counter() - t0) / per_window)
    out = {"ms": statistics.median(times), "ms_windows": times,
           "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None,
           "flops_per_token": model.flops_per_token(cfg.seq_len)}
    if profile_steps > 0 and cuda:
        out.update(profile_kernels(step, profile_steps, sync, out["ms"]))
    return out


def profile_kernels(step: Callable[[], None], n: int, sync: Callable[[], None], step_ms: float) -> dict:
    """Run ``step`` n times under the profiler (device activity only) and summarise its kernels."""
    from torch.profiler import ProfilerActivity, profile
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        sync()
    # device events only; a user annotation (e.g. "Optimizer.step#AdamW.step") spans the gaps
    # between its kernels, so counting it would hide exactly the idle time looked for
    kernels = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA
               and not getattr(e, "is_user_annotation", False) and "#" not in e.name]
    if not kernels:
        return {"profile_error": "the profiler recorded no device kernels"}
    return kernel_summary(kernels, n, step_ms)


def kernel_summary(kernels: list[tuple[str, float, float]], steps: int, step_ms: float, top: int = 8) -> dict:
    """Device busy time per step from kernel intervals (microseconds; overlaps counted once),
    the idle share of the unprofiled step time, and the kernels taking the most time."""
    busy_us, end = 0.0, float("-inf")
    for _, a, b in sorted(kernels, key=lambda k: k[1]):
        if b > end:
            busy_us += b - max(a, end)
            end = b
    per_name: dict[str, float] = {}
    for name, a, b in kernels:
        per_name[name] = per_name.get(name, 0.0) + (b - a)
    kernel_ms = busy_us / 1000 / steps
    ranked = sorted(per_name.items(), key=lambda kv: -kv[1])[:top]
    return {"kernel_ms": kernel_ms, "kernels_per_step": len(kernels) / steps,
            "device_idle_pct": max(0.0, 100 * (1 - kernel_ms / step_ms)) if step_ms else None,
            "top_kernels": [{"name": k[:120], "ms_per_step": v / 1000 / steps} for k, v in ranked]}


def nanogpt_ms(path: str, compile_: bool = True, bias: bool | None = None, timeout: int = 600) -> dict:
    """Run an external nanoGPT checkout's bench.py (random data) and parse its ms/iter.
    ``bias`` None leaves bench.py's own setting (False); True gives GPT-2's biases."""
    if not (Path(path) / "bench.py").is_file():
        return {"error": f"no bench.py in {path!r}: --nanogpt takes a nanoGPT checkout"}
    cmd = [sys.executable, "bench.py", "--real_data=False", f"--compile={compile_}"]
    if bias is not None:
        cmd.append(f"--bias={bias}")
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
    ap.add_argument("--grad_accum", type=int, default=None, help="default: the size's (core.sizes)")
    ap.add_argument("--log_every", type=int, default=20)
    ap.add_argument("--cudagraphs", action="store_true",
                    help="compiled configs replay forward and backward as CUDA graphs (RunConfig.cudagraphs)")
    ap.add_argument("--bare", default="amp_bf16", help="configs to also time as a bare loop ('all' or comma list)")
    ap.add_argument("--nanogpt", default=None,
                    help="path to a nanoGPT checkout to run beside (as shipped, and with --bias=True)")
    ap.add_argument("--profile", type=int, default=0, metavar="STEPS",
                    help="profile the bare loop's kernels over STEPS steps (device busy vs idle)")
    ap.add_argument("--no_forensics", action="store_true",
                    help="harness runs without the forensic counters (RunConfig.forensics=False): their cost")
    ap.add_argument("--out", default="bench_out")
    a = ap.parse_args(argv)
    from benchlib.training.loop import run
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    device = envmod.pick_device("auto")
    if device.type != "cuda":
        print("dtype-bench bench measures GPU speed; no CUDA device here.", file=sys.stderr)
        return 2
    env = envmod.environment(device)
    rows = []
    ref = nanogpt_ms(a.nanogpt) if a.nanogpt else None
    ref_bias = nanogpt_ms(a.nanogpt, bias=True) if a.nanogpt else None
    for r in (ref, ref_bias):
        if r and "error" in r:
            print(f"nanoGPT reference failed: {r['error'][-500:]}", file=sys.stderr)
    for name in a.configs.split(","):
        cfg = RunConfig(scenario=a.scenario, config=name, size=a.size, steps=a.steps, batch_size=a.batch_size,
                        grad_accum=a.grad_accum, log_every=a.log_every, eval_batches=2, cudagraphs=a.cudagraphs,
                        timing_warmup=min(15, a.steps // 3), timing_windows=5, forensics=not a.no_forensics)
        t0 = time.perf_counter()
        rec = run(cfg, out_dir=out / "runs" / f"{a.scenario}_{name}", progress=False)
        m = rec["metrics"]
        row = {"config": name, "status": rec["status"], "reason": (rec["reason"] or "").strip().splitlines()[-1:],
               "ms": m.get("step_ms"), "ms_std": m.get("step_ms_std"), "tokens_per_s": m.get("tokens_per_s"),
               "mfu_pct": m.get("mfu_pct"), "mfu_matched_pct": m.get("mfu_matched_pct"),
               "peak_gib": m.get("memory/peak_allocated_gib"), "j_per_token": m.get("energy/j_per_unit") if a.scenario in "AB" else None,
               "quality": m.get("quality"), "first_step_s": m.get("time/first_step_s"),
               "setup_s": m.get("time/setup_s"), "eval_s": m.get("time/eval_s"), "run_wall_s": time.perf_counter() - t0}
        # a 60-step run may well not beat its trivial baseline yet (stalled): its speed still counts
        if rec["status"] in COMPLETED and (a.bare == "all" or name in a.bare.split(",")):
            b = bare_loop_ms(cfg, profile_steps=a.profile)
            row.update(bare_ms=b["ms"], bare_ms_windows=b["ms_windows"], bare_peak_gib=b["peak_gib"],
                       overhead_pct=100 * (row["ms"] / b["ms"] - 1),
                       **{k: b[k] for k in ("kernel_ms", "device_idle_pct", "kernels_per_step", "top_kernels") if k in b})
        for key, r in (("vs_nanogpt", ref), ("vs_nanogpt_bias", ref_bias)):
            if r and "ms" in r and row["ms"]:
                row[key] = r["ms"] / row["ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"env": env, "args": vars(a), "nanogpt": ref, "nanogpt_bias": ref_bias, "rows": rows}
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
        lines.append(f"nanoGPT bench.py (same call, same GPU): {result['nanogpt'].get('ms', 'error')} ms/iter as "
                     f"shipped (bias=False: vs_nanogpt); "
                     f"{(result.get('nanogpt_bias') or {}).get('ms', 'error')} ms/iter with --bias=True, GPT-2's "
                     f"architecture (vs_nanogpt_bias)")
        lines.append("")
    cols = ["config", "status", "ms", "ms_std", "bare_ms", "overhead_pct", "vs_nanogpt", "vs_nanogpt_bias",
            "tokens_per_s", "mfu_pct", "mfu_matched_pct", "peak_gib", "j_per_token", "kernel_ms",
            "device_idle_pct", "first_step_s"]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for r in result["rows"]:
        lines.append("| " + " | ".join(_f(r.get(c)) for c in cols) + " |")
    for r in result["rows"]:
        if r.get("top_kernels"):
            lines += ["", f"Bare loop of {r['config']}: {_f(r['kernel_ms'])} ms of kernels per {_f(r['bare_ms'])} ms "
                      f"step ({_f(r['kernels_per_step'])} kernels/step); the largest:"]
            lines += [f"- {k['ms_per_step']:.3f} ms `{k['name']}`" for k in r["top_kernels"][:5]]
    return "\n".join(lines) + "\n"


def _f(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return str(v)
