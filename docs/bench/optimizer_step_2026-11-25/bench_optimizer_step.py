"""The optimizer step alone, on GPT-2 124M's parameter shapes, one GPU, one call.

Builds benchlib's GPT-2 at size ``base`` (124.4M parameters in 148 tensors, the same two weight
decay groups as a run), then for each optimizer: random weights and random gradients (never
zeros; gradients spread over five decades), 10 warm-up steps, then ``--steps`` steps timed one by
one with CUDA events (the learning rate set before each, as the training loop does); the table
gives the median. The memory floor counts each byte the step must move once (weight, gradient and
moments read, weight and moments written) at the copy bandwidth measured in the same call.

Checks, on the GPU, that each fast path computes its reference's function:
* adamw.AdamW's Triton kernel against its plain-torch reference (both on the GPU), 3 steps on the
  whole model: bit-equal weights and moments, stochastic rounding included (the two draw the
  same counter-based bits);
* stochastic rounding, one step of one matrix drawn with 64 seeds: every draw is one of the two
  bf16 neighbours of the exact fp32 result, and the share rounded up matches the exact dropped
  fraction (a z-score over all draws);
* bitsandbytes' AdamW8bit step modes: bit-equal weights and states after 3 steps.
Then short training runs through the real loop (bf16_pure compiled with CUDA graphs; fp16_naive,
amp_bf16_8bit_adam and the control amp_bf16 eager). The table is printed last and written to ``$OUT``.

    PYTHONPATH=<benchlib>:<bitsandbytes> python3 bench_optimizer_step.py --commit <sha> --out $OUT
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import time
import traceback
from pathlib import Path

import torch

from benchlib.core.dtypes import get_config
from benchlib.training import adamw_triton
from benchlib.training.adamw import AdamW
from benchlib.training.models import ModelSpec, build_model
from benchlib.training.precision import param_groups

DEV = torch.device("cuda")
LR, BETAS, EPS, WD = 6e-4, (0.9, 0.95), 1e-8, 0.1


def shapes() -> list[tuple[tuple[int, ...], bool]]:
    """(shape, in the weight-decay group) of every trainable tensor of benchlib's GPT-2 base."""
    m = build_model(ModelSpec("gpt2", "clm", "base", 50304, 1024), get_config("fp32_baseline"))
    groups = param_groups(m, WD)
    decay = {id(p) for p in groups[0]["params"]}
    return [(tuple(p.shape), id(p) in decay) for p in m.parameters() if p.requires_grad]


def make_params(shp, dtype, gen_seed=0):
    g = torch.Generator(device=DEV).manual_seed(gen_seed)
    ps, decay, no_decay = [], [], []
    for shape, d in shp:
        p = torch.nn.Parameter((torch.randn(shape, device=DEV, generator=g) * 0.02).to(dtype))
        scale = 10 ** (torch.rand(shape, device=DEV, generator=g) * 5 - 6)  # |g| from 1e-6 to 1e-1
        p.grad = (torch.randn(shape, device=DEV, generator=g) * scale).to(dtype)
        (decay if d else no_decay).append(p)
        ps.append(p)
    return ps, [{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}]


def set_lr(opt, lr: float) -> None:  # as training.loop does
    for g in opt.param_groups:
        if torch.is_tensor(g["lr"]):
            g["lr"].fill_(lr)
        else:
            g["lr"] = lr


def time_steps(opt, steps: int, warmup: int = 10) -> dict:
    for i in range(warmup):
        set_lr(opt, LR * (1 - i / 1000))
        opt.step()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    t0 = time.perf_counter()
    ev[0].record()
    for i in range(steps):
        set_lr(opt, LR * (1 - i / 1000))
        opt.step()
        ev[i + 1].record()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / steps * 1e3
    ms = [ev[i].elapsed_time(ev[i + 1]) for i in range(steps)]
    return {"ms": statistics.median(ms), "ms_min": min(ms), "ms_p90": sorted(ms)[int(0.9 * steps)], "wall_ms": wall}


def bytes_per_step(ps, opt) -> int:
    """Bytes one step must move: weight, gradient and moments read once; weight and moments written once."""
    total = 0
    for p in ps:
        st = opt.state[p]
        mom = sum(t.numel() * t.element_size() for k, t in st.items()
                  if torch.is_tensor(t) and t.numel() > 1 and k not in ("qmap1", "qmap2"))
        total += p.numel() * p.element_size() * 2 + p.grad.numel() * p.grad.element_size() + 2 * mom
    return total


def copy_bandwidth() -> float:
    """GB/s of a 2 GiB device-to-device copy, bytes read plus written (median of 20)."""
    a = torch.empty(2**29, dtype=torch.float32, device=DEV).normal_()
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    out = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        out.append(2 * a.numel() * 4 / (s.elapsed_time(e) * 1e-3) / 1e9)
    del a, b
    return statistics.median(out)


def bench_variant(name, shp, dtype, build, steps, bw, rows, note=""):
    try:
        ps, groups = make_params(shp, dtype)
        opt = build(groups)
        t = time_steps(opt, steps)
        nbytes = bytes_per_step(ps, opt)
        floor = nbytes / (bw * 1e9) * 1e3
        rows.append({"optimizer": name, "params": str(dtype).replace("torch.", ""), **t, "bytes": nbytes,
                     "floor_ms": floor, "of_floor": t["ms"] / floor, "note": note})
        print(f"  {name}: {t['ms']:.3f} ms (wall {t['wall_ms']:.3f}), floor {floor:.3f}", flush=True)
    except Exception as e:  # noqa: BLE001 - one failed variant must not cost the others
        rows.append({"optimizer": name, "params": str(dtype), "error": f"{type(e).__name__}: {e}"})
        traceback.print_exc()
    finally:
        torch.cuda.empty_cache()


def ours(**kw):
    return lambda groups: AdamW(groups, lr=LR, betas=BETAS, eps=EPS, **kw)


def fused(groups):
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, fused=True)


def bnb8(mode):
    from benchlib.training.adamw8bit import AdamW8bit
    return lambda groups: AdamW8bit(groups, lr=LR, betas=BETAS, eps=EPS, step_mode=mode)


def check_kernel_equals_reference(shp, checks):
    """Triton kernel vs the reference, both on the GPU, 3 steps of the whole model."""
    cases = [("bf16 SR, bf16 moments", torch.bfloat16, dict(rounding="stochastic")),
             ("bf16 SR, fp32 v", torch.bfloat16, dict(rounding="stochastic", exp_avg_sq_dtype="fp32")),
             ("bf16 SR, SR moments", torch.bfloat16, dict(rounding="stochastic", moment_rounding="stochastic")),
             ("fp16, fp32 moments", torch.float16, dict(exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32")),
             ("bf16 nearest, bf16 moments", torch.bfloat16, {}),
             ("fp32", torch.float32, {})]
    for label, dtype, kw in cases:
        try:
            runs = {}
            for impl in ("triton", "reference"):
                ps, groups = make_params(shp, dtype, gen_seed=1)
                opt = AdamW(groups, lr=LR, betas=BETAS, eps=EPS, impl=impl, seed=5, **kw)
                for _ in range(3):
                    opt.step()
                runs[impl] = (ps, opt)
                torch.cuda.synchronize()
            (a, oa), (b, ob) = runs["triton"], runs["reference"]
            diff = sum(int((x != y).sum()) for x, y in zip(a, b))
            mdiff = sum(int((oa.state[x][k] != ob.state[y][k]).sum()) for x, y in zip(a, b)
                        for k in ("exp_avg", "exp_avg_sq"))
            n = sum(p.numel() for p in a)
            checks.append({"check": f"kernel = reference, {label}", "pass": diff == 0 and mdiff == 0,
                           "detail": f"{diff} weights and {mdiff} moments differ of {n:,} (3 steps)"})
            del runs, a, b, oa, ob
        except Exception as e:  # noqa: BLE001
            checks.append({"check": f"kernel = reference, {label}", "pass": False, "detail": f"{type(e).__name__}: {e}"})
            traceback.print_exc()
        torch.cuda.empty_cache()


def check_stochastic_rounding(checks, draws=64):
    """One step of a 768x3072 bf16 matrix, drawn with ``draws`` seeds, against the exact fp32 step."""
    g = torch.Generator(device=DEV).manual_seed(2)
    p0 = (torch.randn(768, 3072, device=DEV, generator=g) * 0.02).bfloat16()
    grad = (torch.randn(768, 3072, device=DEV, generator=g) * 1e-3).bfloat16()
    m0 = (torch.randn(768, 3072, device=DEV, generator=g) * 1e-3).bfloat16()
    v0 = (torch.rand(768, 3072, device=DEV, generator=g) * 1e-6).bfloat16()

    def one(dtype, seed, impl, rounding):
        p = torch.nn.Parameter(p0.to(dtype).clone())
        p.grad = grad.to(dtype).clone()
        opt = AdamW([p], lr=1e-3, betas=BETAS, eps=EPS, weight_decay=WD, rounding=rounding, impl=impl, seed=seed,
                    exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
        st = opt._init_state(p, opt.param_groups[0])
        st["exp_avg"].copy_(m0)
        st["exp_avg_sq"].copy_(v0)
        st["step"].fill_(9)  # the step about to run is the 10th
        opt.step()
        return p.detach()

    exact = one(torch.float32, 0, "reference", "nearest")  # the same update on an fp32 weight: no rounding
    bits = exact.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    down = bits & 0xFFFF0000
    q = (bits & 0xFFFF).double() / 65536  # the exact probability of rounding up (away from zero)
    up_count = torch.zeros_like(q)
    neighbours = True
    total = torch.zeros_like(q)
    for s in range(draws):
        d = one(torch.bfloat16, 1000 + s, "triton", "stochastic").float()
        db = d.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
        is_down, is_up = db == down, db == down + 0x10000
        neighbours &= bool((is_down | (is_up & (q > 0))).all())
        up_count += is_up.double()
        total += d.double()
    n = q.numel() * draws
    z = float((up_count.sum() - draws * q.sum()) / torch.sqrt(draws * (q * (1 - q)).sum()))
    ulp = ((down + 0x10000).to(torch.int32).view(torch.float32).double().abs() - down.to(torch.int32).view(
        torch.float32).double().abs())
    bias = float(((total / draws - exact.double()) / ulp).mean())
    checks.append({"check": "SR draws land on a bf16 neighbour of the exact step", "pass": neighbours,
                   "detail": f"{n:,} draws ({draws} seeds x {q.numel():,} weights)"})
    checks.append({"check": "SR rounds up with the dropped fraction's probability", "pass": abs(z) < 5,
                   "detail": f"z = {z:+.2f} over all draws; mean (draw - exact) = {bias:+.2e} ulp"})


def check_8bit_modes(shp, checks):
    try:
        res = {}
        for mode in ("bnb", "nosync", "lean", "direct"):
            ps, groups = make_params(shp, torch.float32, gen_seed=3)
            opt = bnb8(mode)(groups)
            for _ in range(3):
                opt.step()
            torch.cuda.synchronize()
            res[mode] = (ps, opt)
        (a, oa) = res["bnb"]
        for mode in ("nosync", "lean", "direct"):
            b, ob = res[mode]
            same = all(torch.equal(x, y) and all(torch.equal(oa.state[x][k], ob.state[y][k]) for k in ("state1", "state2"))
                       for x, y in zip(a, b))
            checks.append({"check": f"AdamW8bit step_mode={mode} = bitsandbytes' step", "pass": same,
                           "detail": "weights and both states after 3 steps"})
    except Exception as e:  # noqa: BLE001
        checks.append({"check": "AdamW8bit step modes", "pass": False, "detail": f"{type(e).__name__}: {e}"})
        traceback.print_exc()
    torch.cuda.empty_cache()


def training_runs(out: Path, checks):
    from benchlib.training.loop import run
    for cfg in ({"config": "bf16_pure", "compile": "on", "cudagraphs": True},
                {"config": "fp16_naive", "compile": "off"},
                {"config": "amp_bf16_8bit_adam", "compile": "off"},
                {"config": "amp_bf16", "compile": "off"}):  # the control: torch's fused AdamW
        try:
            t = time.perf_counter()
            rec = run({"scenario": "A", "size": "tiny", "steps": 200, "lr": 3e-3, "log_every": 50, **cfg},
                      out_dir=out / f"run_{cfg['config']}", progress=False)
            m = rec["metrics"]
            checks.append({"check": f"training run {cfg}", "pass": rec["status"] == "ok",
                           "detail": f"status {rec['status']}, val_loss {m.get('quality/val_loss')}, initial "
                                     f"{m.get('stability/initial_loss')}, {time.perf_counter() - t:.0f} s"})
        except Exception as e:  # noqa: BLE001
            checks.append({"check": f"training run {cfg}", "pass": False, "detail": f"{type(e).__name__}: {e}"})
            traceback.print_exc()


def versions() -> dict:
    import triton
    try:
        import bitsandbytes
        bnb = bitsandbytes.__version__
    except Exception as e:  # noqa: BLE001
        bnb = f"unavailable ({e})"
    drv = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    return {"device": torch.cuda.get_device_name(), "nvidia-smi": drv, "torch": torch.__version__,
            "cuda": torch.version.cuda, "triton": triton.__version__, "bitsandbytes": bnb}


def table(rows, fused_bf16_ms) -> str:
    lines = ["| optimizer | weights | ms/step (median) | wall ms/step | floor ms | x floor | x fused bf16 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['optimizer']} | {r['params']} | error: {r['error'][:80]} | | | | |")
            continue
        rel = f"{r['ms'] / fused_bf16_ms:.2f}" if fused_bf16_ms else "-"
        lines.append(f"| {r['optimizer']} | {r['params']} | {r['ms']:.3f} | {r['wall_ms']:.3f} | {r['floor_ms']:.3f} "
                     f"| {r['of_floor']:.2f} | {rel} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--quick", action="store_true", help="the optimizers' timings and the kernel checks only (no "
                    "8-bit step modes, block-size tuning or training runs)")
    args = ap.parse_args()
    out = Path(args.out)
    info = {**versions(), "commit": args.commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "steps_timed": args.steps}
    print(json.dumps(info), flush=True)
    shp = shapes()
    info["tensors"], info["parameters"] = len(shp), sum(math.prod(s) for s, _ in shp)
    bw = copy_bandwidth()
    info["copy_GBps"] = bw
    print(f"{info['parameters']:,} parameters in {info['tensors']} tensors; copy {bw:.0f} GB/s", flush=True)

    rows = []
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        bench_variant("torch AdamW fused", shp, dt, fused, args.steps, bw, rows)
    bench_variant("adamw.AdamW, stochastic rounding, bf16 moments (bf16_pure)", shp, torch.bfloat16,
                  ours(rounding="stochastic"), args.steps, bw, rows)
    bench_variant("adamw.AdamW, stochastic rounding, bf16 m, fp32 v (bf16_pure_fp32v)", shp, torch.bfloat16,
                  ours(rounding="stochastic", exp_avg_sq_dtype="fp32"), args.steps, bw, rows)
    bench_variant("adamw.AdamW, stochastic rounding, bf16 moments rounded stochastically (bf16_pure_sr_moments)", shp,
                  torch.bfloat16, ours(rounding="stochastic", moment_rounding="stochastic"), args.steps, bw, rows)
    bench_variant("adamw.AdamW, fp32 moments (fp16_naive)", shp, torch.float16,
                  ours(exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32"), args.steps, bw, rows)
    bench_variant("adamw.AdamW, nearest, bf16 moments (as bf16_naive)", shp, torch.bfloat16, ours(), args.steps, bw, rows)
    bench_variant("adamw.AdamW, fp32", shp, torch.float32, ours(), args.steps, bw, rows)
    for mode in ("bnb", "nosync", "lean", "direct")[-1 if args.quick else 0:]:
        bench_variant(f"bitsandbytes AdamW8bit, step_mode={mode}", shp, torch.float32, bnb8(mode), args.steps, bw, rows)
    # the kernel's block size and warps, for the two configurations that use it
    tuning = []
    default = (adamw_triton.BLOCK, adamw_triton.NUM_WARPS)
    for block, warps in () if args.quick else ((1024, 4), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (8192, 8)):
        adamw_triton.BLOCK, adamw_triton.NUM_WARPS = block, warps
        for label, dt, kw in (("bf16 SR", torch.bfloat16, dict(rounding="stochastic")),
                              ("fp16 + fp32 moments", torch.float16, dict(exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32"))):
            bench_variant(f"tuning {label} BLOCK={block} warps={warps}", shp, dt, ours(**kw), args.steps, bw, tuning)
    adamw_triton.BLOCK, adamw_triton.NUM_WARPS = default

    checks = []
    check_kernel_equals_reference(shp, checks)
    check_stochastic_rounding(checks)
    if not args.quick:
        check_8bit_modes(shp, checks)
    fused_bf16 = next((r["ms"] for r in rows if r["optimizer"] == "torch AdamW fused" and r["params"] == "bfloat16"
                       and "ms" in r), None)
    result = {"info": info, "rows": rows, "tuning": tuning, "checks": checks}
    (out / "optimizer_step.json").write_text(json.dumps(result, indent=1))
    if not (args.no_train or args.quick):
        training_runs(Path("/tmp/optimizer_bench_runs"), checks)
        (out / "optimizer_step.json").write_text(json.dumps(result, indent=1))
    text = "\n".join([
        f"{info['device']} ({info['nvidia-smi']}), torch {info['torch']} (CUDA {info['cuda']}), triton {info['triton']}, "
        f"bitsandbytes {info['bitsandbytes']}, commit {info['commit']}, {info['date']}",
        f"GPT-2 124M shapes: {info['parameters']:,} parameters, {info['tensors']} tensors; copy bandwidth "
        f"{bw:.0f} GB/s (read + write); median of {args.steps} steps after 10 warm-up, CUDA events",
        "", table(rows, fused_bf16), "", "Kernel tuning (BLOCK elements per program, warps):", table(tuning, fused_bf16),
        "", "| check | pass | detail |", "| --- | --- | --- |",
        *[f"| {c['check']} | {'yes' if c['pass'] else 'NO'} | {c['detail']} |" for c in checks]])
    (out / "optimizer_step.md").write_text(text + "\n")
    print("\n" + text, flush=True)


if __name__ == "__main__":
    main()
