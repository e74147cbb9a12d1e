"""Inference, measured per precision: how fast a model serves (``forward_throughput``; GPT-2's
``decode``: prefill, then greedy decoding with the KV cache), and how good it stays served in
another precision than it was trained in (``quality``, ``serve_quality``); ``infer`` is
``dtype-bench infer``. An inference precision (``MODES``) is data: the weights' dtype and the
autocast dtype; each mode serves a cast copy of one fp32 model, so every mode starts alike.
"""
from __future__ import annotations

import copy
import json
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

import torch

from benchlib.core import env as envmod
from benchlib.core.dtypes import INFER_MODES, TORCH_DTYPES, InferMode, get_config, get_mode
from benchlib.core.runconfig import RunConfig, resolved
from benchlib.training.baselines import evaluate_predictor
from benchlib.training.models import BenchModel, ModelSpec, autocast_context, build_model


MODES = INFER_MODES  # the inference precisions, data in core.dtypes


def serve_copy(model: BenchModel, mode: InferMode) -> BenchModel:
    """A copy of ``model`` in eval mode with its weights in ``mode.weights``; an fp32 head of
    the training model (``head_dtype``) stays as the model computes it."""
    m = copy.deepcopy(model).eval()
    return m.to(TORCH_DTYPES[mode.weights])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], object], device: torch.device, iters: int, warmup: int) -> list[float]:
    """Milliseconds of each of ``iters`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iters):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _peak_gib(device: torch.device) -> Optional[float]:
    return torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else None


@torch.inference_mode()
def forward_throughput(model: BenchModel, batch: dict, mode: InferMode, device: torch.device,
                       iters: int = 10, warmup: int = 3) -> dict:
    """Forward passes only: ms per batch and samples/s (classification) or tokens/s (LM) from the
    median of ``iters`` timed passes (a slow pass or two moved the mean of ten by a third on an
    H100), with the mean, standard deviation and every pass's ms."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with autocast_context(device.type, mode.autocast):
        ms = _timed(lambda: model.logits(batch), device, iters, warmup)
    ids = batch["input_ids"]
    units = ids.numel() if model.task in ("clm", "mlm") else ids.shape[0]
    med = statistics.median(ms)
    return {"forward_ms": med, "forward_stat": "median", "forward_ms_mean": statistics.fmean(ms),
            "forward_ms_std": statistics.pstdev(ms), "forward_ms_all": [round(x, 4) for x in ms],
            "throughput": units / (med / 1e3), "throughput_unit": "tokens/s" if model.task in ("clm", "mlm") else "samples/s",
            "batch_size": ids.shape[0], "seq_len": ids.shape[1], "memory/peak_gib": _peak_gib(device)}


def _generate(bb, head, prompt: torch.Tensor, new_tokens: int, device: torch.device) -> tuple[torch.Tensor, float, list[float]]:
    """One greedy continuation with the KV cache: (ids [B, new_tokens], prefill ms, ms of each
    one-token step)."""
    out_ids, step_ms = [], []
    _sync(device)
    t0 = time.perf_counter()
    o = bb(input_ids=prompt, use_cache=True)  # training builds models with use_cache off
    nxt = head(o.last_hidden_state[:, -1:]).argmax(-1)
    _sync(device)
    prefill_ms = (time.perf_counter() - t0) * 1e3
    past = o.past_key_values
    for _ in range(new_tokens):
        out_ids.append(nxt)
        t0 = time.perf_counter()
        o = bb(input_ids=nxt, past_key_values=past, use_cache=True)
        past = o.past_key_values
        nxt = head(o.last_hidden_state[:, -1:]).argmax(-1)
        _sync(device)
        step_ms.append((time.perf_counter() - t0) * 1e3)
    # the last step's forward computes a token past new_tokens: its time is a decode step all the same
    return torch.cat(out_ids, 1), prefill_ms, step_ms


@torch.inference_mode()
def decode(model: BenchModel, prompt: torch.Tensor, new_tokens: int, mode: InferMode,
           device: torch.device, repeats: int = 3) -> tuple[torch.Tensor, dict]:
    """Greedy continuation of ``prompt`` [B, P] by a causal LM with the KV cache, once untimed, then
    ``repeats`` times timed: the ids [B, new_tokens] and the latencies (prefill and per-token
    medians, the per-token mean, standard deviation and 90th percentile)."""
    if model.task != "clm":
        raise ValueError(f"decoding needs a causal LM (scenario A), not a {model.task} model")
    limit = model.backbone.config.max_position_embeddings
    if prompt.shape[1] + new_tokens > limit:
        raise ValueError(f"prompt {prompt.shape[1]} + {new_tokens} new tokens exceed the model's {limit} positions")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    prefills, steps = [], []
    with autocast_context(device.type, mode.autocast):
        for i in range(1 + repeats):
            ids, prefill_ms, step_ms = _generate(model.backbone, model._head, prompt, new_tokens, device)
            if i:
                prefills.append(prefill_ms)
                steps += step_ms
    per_token = statistics.median(steps)
    return ids, {
        "prefill_ms": statistics.median(prefills), "prompt_len": prompt.shape[1], "new_tokens": new_tokens,
        "decode_repeats": repeats, "decode_ms_per_token": per_token,
        "decode_ms_per_token_mean": statistics.fmean(steps), "decode_ms_per_token_std": statistics.pstdev(steps),
        "decode_ms_per_token_p90": statistics.quantiles(steps, n=10)[-1] if len(steps) > 1 else steps[0],
        "decode_tokens_per_s": prompt.shape[0] / (per_token / 1e3),
        "decode_memory/peak_gib": _peak_gib(device)}


@torch.inference_mode()
def quality(model: BenchModel, val: list[dict], mode: InferMode, device: torch.device) -> dict:
    """Validation quality of ``model`` served in ``mode`` (``baselines.evaluate_predictor``)."""
    with autocast_context(device.type, mode.autocast):
        metrics, _ = evaluate_predictor(model.logits, val, model.task)
    return {f"quality/{k}": v for k, v in metrics.items()}


def serve_quality(model: BenchModel, val: list[dict], modes: list[str], device: torch.device,
                  trained: dict[str, float]) -> dict:
    """The quality of a just-trained ``model`` served in each of ``modes`` on the run's validation
    batches, and each metric's difference to ``trained`` (its evaluation in the training
    precision). A mode that fails gets its status and reason instead."""
    out = {}
    for name in modes:
        mode = get_mode(name)

        def served():
            q = {k.removeprefix("quality/"): v for k, v in quality(serve_copy(model, mode), val, mode, device).items()}
            return {"metrics": q, "minus_trained": {k: v - trained[k] for k, v in q.items() if k in trained}}
        # serving is measured after the run: no failure of it may cost the record
        out[name] = {"weights": mode.weights, "autocast": mode.autocast,
                     **_guarded(device, served, Exception, named=True)}
    return out


def _guarded(device: torch.device, fn: Callable[[], dict], skip=(RuntimeError, TypeError), named=False) -> dict:
    """``{"status": "ok", **fn()}``, or ``oom`` / ``skipped`` (an exception in ``skip``: a dtype
    without a kernel, a layer that cannot be cast) with the reason."""
    try:
        return {"status": "ok", **fn()}
    except torch.cuda.OutOfMemoryError as e:
        return {"status": "oom", "reason": str(e).splitlines()[0][:300]}
    except skip as e:
        return {"status": "skipped", "reason": (f"{type(e).__name__}: " if named else "") + " ".join(str(e).split())[:300]}
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()


def infer(cfg: RunConfig | dict, modes: list[str], out_dir: str | Path | None = None, iters: int = 10,
          prompt_len: int = 128, new_tokens: int = 32) -> dict:
    """Build the run configuration's model (``model_name_or_path``: e.g. an LM run's ``save_model``
    directory) and data, then measure every mode: forward throughput, peak memory, quality and
    (causal LM) decode; a mode this device cannot run gets a row saying so."""
    cfg = resolved(RunConfig.from_dict(cfg) if isinstance(cfg, dict) else cfg)
    for name in modes:
        get_mode(name)
    from benchlib.data.load import load_task_data
    device = envmod.pick_device(cfg.device)
    data = load_task_data(cfg)
    base = build_model(ModelSpec.for_run(cfg, data), get_config("fp32_baseline"))
    batch = {k: v.to(device) for k, v in data.sampler(cfg.batch_size, "cpu", cfg.seed)().items()}
    val = data.val_batches(cfg.batch_size, cfg.eval_batches, device)
    prompt = batch["input_ids"][:, :min(prompt_len, batch["input_ids"].shape[1])]
    rows = []
    for name in modes:
        mode, row = MODES[name], {"mode": name, **asdict(MODES[name])}

        def measure():  # into row: what a mode measured before it failed stays
            m = serve_copy(base, mode).to(device)
            row.update(forward_throughput(m, batch, mode, device, iters=iters))
            row.update(quality(m, val, mode, device))
            if m.task == "clm":
                row.update(decode(m, prompt, new_tokens, mode, device)[1])
            return {}
        row.update(_guarded(device, measure))
        rows.append(row)
    rec = {"kind": "inference", "run": cfg.to_dict(), "env": envmod.environment(device),
           "weights": cfg.model_name_or_path or "initialised (from scratch)",
           "model": {"parameters": sum(p.numel() for p in base.parameters()), "class": type(base.backbone).__name__},
           "data": {"source": data.source, "eval_sequences": sum(len(b["input_ids"]) for b in val)},
           "modes": rows}
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "inference.json").write_text(json.dumps(rec, indent=1, default=str))
    return rec
