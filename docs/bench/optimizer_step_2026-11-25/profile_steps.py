"""Where an optimizer step's time goes: device kernel time against host time, per step.

For bitsandbytes' AdamW8bit (each step mode) and, for comparison, torch's fused AdamW and
adamw.AdamW on GPT-2 124M's shapes (the benchmark's setup): the step's median time by CUDA events
(as in bench_optimizer_step.py, three repetitions of each so that a hiccup shows), the host time
of the Python call alone (perf_counter around ``step()``, no synchronisation), and the summed
device time of its kernels under torch.profiler, with the kernels that take most of it.

    PYTHONPATH=<benchlib>:<bitsandbytes> python3 profile_steps.py --out $OUT
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch

from bench_optimizer_step import LR, bnb8, fused, make_params, ours, set_lr, shapes, time_steps


def host_ms(opt, steps=30) -> float:
    """Median host time of one ``step()`` call (the device runs behind; the queue never fills here)."""
    out = []
    for i in range(steps):
        set_lr(opt, LR)
        t = time.perf_counter()
        opt.step()
        out.append((time.perf_counter() - t) * 1e3)
        if i % 5 == 4:
            torch.cuda.synchronize()
    return statistics.median(out)


def kernel_ms(opt, steps=5) -> tuple[float, list]:
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            set_lr(opt, LR)
            opt.step()
        torch.cuda.synchronize()
    per = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name] += e.device_time_total / 1e3 / steps  # device_time_total is in us
    top = sorted(per.items(), key=lambda kv: -kv[1])[:4]
    return sum(per.values()), [(k[:60], round(v, 3)) for k, v in top]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    shp = shapes()
    variants = [("torch AdamW fused, bf16", torch.bfloat16, fused),
                ("adamw.AdamW nearest, bf16 moments", torch.bfloat16, ours()),
                ("adamw.AdamW SR, bf16 moments", torch.bfloat16, ours(rounding="stochastic"))]
    variants += [(f"AdamW8bit {m}", torch.float32, bnb8(m)) for m in ("bnb", "lean", "direct")]
    rows = []
    for name, dt, build in variants:
        ps, groups = make_params(shp, dt)
        opt = build(groups)
        reps = [time_steps(opt, 100)["ms"] for _ in range(3)]
        h = host_ms(opt)
        k, top = kernel_ms(opt)
        rows.append({"optimizer": name, "event_ms": reps, "host_ms": h, "kernel_ms": k, "top": top})
        print(json.dumps(rows[-1]), flush=True)
        del ps, groups, opt
        torch.cuda.empty_cache()
    lines = ["| optimizer | ms/step (3 repetitions) | host ms/step | kernel ms/step | top kernels |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['optimizer']} | {' / '.join(f'{x:.3f}' for x in r['event_ms'])} | {r['host_ms']:.3f} | "
              f"{r['kernel_ms']:.3f} | {'; '.join(f'{n} {t}' for n, t in r['top'][:2])} |" for r in rows]
    text = (f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
            + "\n\n" + "\n".join(lines))
    Path(args.out, "profile_steps.md").write_text(text + "\n")
    Path(args.out, "profile_steps.json").write_text(json.dumps(rows, indent=1))
    print("\n" + text)


if __name__ == "__main__":
    main()
