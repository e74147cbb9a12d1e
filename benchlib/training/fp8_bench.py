"""``dtype-bench fp8-shapes``: from which model size does FP8 training pay on this GPU?

Float8 speeds up the matmuls of the Linear layers and nothing else, and pays only where a
matmul is large enough for the faster tensor cores to outweigh the casts and scaling it adds.
So the question is answered per matmul shape: for every size of an architecture, the body's
Linear shapes (``fp8.linear_shapes`` of the model, at the micro-batch's tokens the size runs
with) are timed forward + backward as in an ``amp_bf16`` step (fp32 weights, bf16 autocast,
``torch.compile``) and again as torchao float8 Linear layers (each recipe asked for). A
shape is timed by the device's kernel time per step (``torch.profiler``, overlaps counted
once): one layer's compiled step costs the host about a millisecond whatever its size (measured
on an H100, 2026-11-23), so the wall clock of small shapes measures the host, and the float8
path's extra cast kernels would be charged as host time. The wall time is kept beside it and a
timing is flagged ``host_bound`` where the two part (``HOST_BOUND``). The
per-size sum (each shape times the layers that have it) is the Linear time of one micro-batch
step; its float8 speed-up bounds the whole step's from above (attention, norms, embeddings and
the optimizer are unchanged). The break-even size is the smallest whose Linear speed-up is > 1.

Writes ``fp8_shapes.json`` (environment, every timing) and ``fp8_shapes.md`` after every
shape, so a run stopped by its time budget keeps what it measured.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn as nn

from benchlib.core import env as envmod
from benchlib.core.dtypes import get_config
from benchlib.core.runconfig import RunConfig, resolved
from benchlib.core.sizes import SHAPES
from benchlib.training.bench import profile_kernels
from benchlib.training.fp8 import convert_fp8, linear_shapes
from benchlib.training.models import ModelSpec, build_model


HOST_BOUND = 1.25
"""A timing whose wall time exceeds its kernels' time by this factor was paced by the host
(Python, dispatch, launches), not by the matmul: its wall time says nothing about float8."""


def size_matmuls(scenario: str, size: str) -> dict:
    """The Linear shapes of ``size`` for ``scenario``'s model and the tokens (M) each matmul
    sees per micro-batch, from a model built on the meta device (no memory, no weights)."""
    cfg = resolved(RunConfig(scenario=scenario, size=size, config="amp_bf16"))
    spec = ModelSpec(cfg.scn.arch, cfg.scn.task, cfg.size, cfg.vocab_size, cfg.seq_len, num_labels=cfg.num_labels)
    with torch.device("meta"):
        model = build_model(spec, get_config("amp_bf16"))
    tokens = cfg.batch_size * cfg.seq_len
    return {"size": size, "tokens": tokens, "micro_batch": cfg.batch_size, "seq_len": cfg.seq_len,
            "parameters": sum(p.numel() for p in model.parameters()),
            "shapes": linear_shapes(model.backbone)}


def time_linear(m: int, k: int, n: int, recipe: str, device: torch.device, iters: int = 20,
                repeats: int = 3) -> dict:
    """Median ms of one forward + backward of a (k -> n) Linear on m tokens, as amp_bf16
    trains it (fp32 weights, bf16 autocast), compiled; ``recipe`` none = bf16 matmuls, else a
    torchao float8 recipe (tensorwise, rowwise)."""
    torch._dynamo.reset()
    holder = nn.Module()
    holder.backbone = nn.Sequential(nn.Linear(k, n)).to(device)
    if recipe != "none":
        convert_fp8(holder, recipe)
    mod = torch.compile(holder.backbone)
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16, requires_grad=True)
    go = torch.randn(m, n, device=device, dtype=torch.bfloat16)

    def step():
        for p in holder.parameters():
            p.grad = None
        x.grad = None
        with torch.autocast(device.type, dtype=torch.bfloat16):
            y = mod(x)
        y.backward(go)

    t0 = time.perf_counter()
    for _ in range(3):
        step()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(iters):
            step()
        sync()
        times.append((time.perf_counter() - t) * 1000 / iters)
    ms = statistics.median(times)
    out = {"wall_ms": ms, "wall_ms_repeats": times, "compile_s": compile_s}
    if device.type == "cuda":  # the device's own time: a single layer's step is often host-bound
        prof = profile_kernels(step, iters, sync, ms)
        out.update(kernel_ms=prof.get("kernel_ms"), kernels_per_step=prof.get("kernels_per_step"),
                   device_idle_pct=prof.get("device_idle_pct"))
    out["ms"] = out.get("kernel_ms") or ms
    out["host_bound"] = bool(out.get("kernel_ms")) and ms > HOST_BOUND * out["kernel_ms"]
    out["tflops"] = 6 * m * k * n / out["ms"] / 1e9
    return out


def per_size(rows: list[dict]) -> pd.DataFrame:
    """Per size and recipe: the Linear time of one micro-batch step (sum of shape time x
    layers), bf16's and float8's, the speed-up, and whether every shape was timed."""
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["step_ms"] = df["ms"] * df["count"]
    base = df[df.recipe == "none"].set_index(["size", "in", "out"])["ms"]
    out = []
    for (size, recipe), g in df[df.recipe != "none"].groupby(["size", "recipe"], sort=False):
        ref = base.reindex(list(zip(g["size"], g["in"], g["out"]))).to_numpy()
        bf16_ms = float((ref * g["count"].to_numpy()).sum())
        out.append({"size": size, "recipe": recipe, "tokens": int(g["tokens"].iloc[0]),
                    "bf16_linear_ms": bf16_ms, "fp8_linear_ms": float(g["step_ms"].sum()),
                    "speedup": bf16_ms / float(g["step_ms"].sum()), "shapes": len(g)})
    return pd.DataFrame(out)


def break_even(summary: pd.DataFrame, order: list[str]) -> dict:
    """Per recipe: the smallest size (in ``order``) whose Linear speed-up is > 1, else None."""
    res = {}
    for recipe, g in summary.groupby("recipe", sort=False):
        paying = [s for s in order if ((g["size"] == s) & (g["speedup"] > 1)).any()]
        res[recipe] = paying[0] if paying else None
    return res


def markdown(result: dict) -> str:
    e = result["env"]
    rows = pd.DataFrame(result["rows"])
    summary = per_size(result["rows"])
    lines = [f"Device: {e['device_name']}; torch {e['torch']} (CUDA {e['cuda']}), torchao {e.get('torchao')}; "
             f"commit {e['git_commit']}; {e['date']}", "",
             f"Scenario {result['scenario']}: Linear layers of the body, forward + backward, compiled, fp32 weights "
             "under bf16 autocast (amp_bf16) against torchao float8 Linear. M = tokens of one micro-batch; ms = the "
             "device's kernel time per forward + backward (wall_ms: the clock's, host included).", ""]
    if not summary.empty:
        lines += ["Per size (Linear time of one micro-batch step = sum over shapes of time x layers):", "",
                  summary.to_markdown(index=False, floatfmt=".3g"), "",
                  "Break-even size (smallest with Linear speed-up > 1): "
                  + ", ".join(f"{r}: {s or 'none of the sizes measured'}" for r, s in result["break_even"].items()), ""]
    if not rows.empty:
        cols = [c for c in ["size", "name", "tokens", "in", "out", "count", "recipe", "ms", "wall_ms", "host_bound",
                            "tflops"] if c in rows]
        lines += ["Per shape:", "", rows[cols].to_markdown(index=False, floatfmt=".4g")]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="dtype-bench fp8-shapes", description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="A", help="whose model's shapes (A: GPT-2, B: RoBERTa, ...)")
    ap.add_argument("--sizes", default=None, help="comma-separated; default: every size of the architecture from base up")
    ap.add_argument("--recipes", default="tensorwise,rowwise", help="torchao float8 recipes, comma-separated")
    ap.add_argument("--tokens", type=int, default=None,
                    help="M of every matmul; default: each size's micro-batch x sequence length (its own regime)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget_s", type=float, default=None, help="stop starting new timings after this many seconds")
    ap.add_argument("--out", default="fp8_shapes_out")
    a = ap.parse_args(argv)
    from benchlib.core.scenarios import get_scenario
    arch = get_scenario(a.scenario).arch
    known = [s for s in SHAPES[arch] if s not in ("tiny", "small")]
    sizes = a.sizes.split(",") if a.sizes else known
    bad = [s for s in sizes if s not in SHAPES[arch]]
    if bad:
        print(f"dtype-bench fp8-shapes: size {bad[0]!r} does not exist for {arch}: use one of {', '.join(SHAPES[arch])}",
              file=sys.stderr)
        return 2
    device = envmod.pick_device("auto")
    if device.type != "cuda":
        print("dtype-bench fp8-shapes measures GPU matmuls; no CUDA device here.", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"env": envmod.environment(device), "args": vars(a), "scenario": a.scenario,
              "sizes": [dict(size_matmuls(a.scenario, s), **({"tokens": a.tokens} if a.tokens else {})) for s in sizes], "rows": [], "break_even": {}}
    t0 = time.perf_counter()
    for recipe in ["none"] + a.recipes.split(","):
        for sz in result["sizes"]:
            for sh in sz["shapes"]:
                if not sh["fp8"] or (a.budget_s and time.perf_counter() - t0 > a.budget_s):
                    continue
                r = time_linear(sz["tokens"], sh["in"], sh["out"], recipe, device, iters=a.iters)
                row = {"size": sz["size"], "tokens": sz["tokens"], **sh, "recipe": recipe, **r}
                result["rows"].append(row)
                print(json.dumps({k: row.get(k) for k in ("size", "name", "recipe", "ms", "wall_ms", "tflops", "compile_s")}),
                      flush=True)
                summary = per_size(result["rows"])
                result["break_even"] = break_even(summary, sizes) if not summary.empty else {}
                (out / "fp8_shapes.json").write_text(json.dumps(result, indent=1))
                (out / "fp8_shapes.md").write_text(markdown(result))
    print(markdown(result))
    return 0
