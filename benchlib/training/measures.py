"""What a finished run's record says, metric by metric: speed, memory, quality and stability,
each computed from what the training loop measured (``loop._finalise`` calls these in turn)."""
from __future__ import annotations

import math
import statistics

import torch

from benchlib.core import env as envmod
from benchlib.core.memory import optimizer_state_bytes
from benchlib.core.runconfig import RunConfig
from benchlib.core.steplog import StepLog
from benchlib.core.timing import WindowTimer
from benchlib.training.baselines import LEARNED_METRIC, evidence
from benchlib.training.forensics import Forensics
from benchlib.training.metrics import mfu_pct, peak_tflops
from benchlib.training.precision import LossScaler


def speed_metrics(cfg: RunConfig, timer: WindowTimer, device: torch.device, device_name: str | None,
                  flops_per_token: float) -> dict:
    """Throughput over the timed windows (median step time, spread over windows), MFU against
    the device's bf16 and precision-matched peaks, energy per unit where measured."""
    m: dict = {}
    scn, dtype, fpt = cfg.scn, cfg.dtype, flops_per_token
    units_per_step = cfg.batch_size * cfg.grad_accum
    tokens_per_step = units_per_step * cfg.seq_len
    unit = tokens_per_step if scn.is_lm else units_per_step
    if timer.done:
        steps = sum(n for n, _ in timer.done)
        sps = steps / sum(s for _, s in timer.done)
        step_ms = [1000 * s / n for n, s in timer.done]
        m.update({"samples_per_s": sps * units_per_step, "tokens_per_s": sps * tokens_per_step,
                  "throughput": sps * unit, "throughput_std": _std([n / s * unit for n, s in timer.done]),
                  "step_ms": statistics.median(step_ms), "step_ms_std": _std(step_ms), "timed_steps": steps,
                  **timer.optimizer_metrics()})
    m["throughput_unit"] = f"{scn.unit}/s"
    m["flops_per_token"] = fpt
    if device.type == "cuda" and "tokens_per_s" in m:
        m["peak_tflops_bf16"] = peak_tflops(device_name, "bf16")
        m["mfu_pct"] = mfu_pct(m["tokens_per_s"], fpt, m["peak_tflops_bf16"])
        m["mfu_matched_pct"] = mfu_pct(m["tokens_per_s"], fpt, peak_tflops(device_name, dtype.compute_dtype))
    if timer.joules and timer.done:
        m["energy/joules"] = timer.joules
        m["energy/j_per_unit"] = timer.joules / (m["timed_steps"] * unit)
    return m


def memory_metrics(device: torch.device, opt: torch.optim.Optimizer) -> dict:
    """Peak device memory (allocated, reserved), the process's peak RSS, optimizer-state bytes;
    ``memory`` is the device's peak where there is one."""
    m: dict = {}
    if device.type == "cuda":
        m["memory/peak_allocated_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        m["memory/peak_reserved_gib"] = torch.cuda.max_memory_reserved(device) / 2**30
    m["memory/peak_rss_gib"] = envmod.peak_rss_gib()
    m["memory"] = m.get("memory/peak_allocated_gib", m["memory/peak_rss_gib"])
    m["memory/optimizer_state_bytes"] = optimizer_state_bytes(opt)
    return m


def quality_metrics(cfg: RunConfig, quality: dict, per_example, base_quality: dict, base_per,
                    floors: dict | float | None) -> dict:
    """The final evaluation under ``quality/``, the baseline's under ``baseline/``, the evidence that
    the run beat it, and with ``floors`` (metric -> best attainable value; a bare number: val loss)
    the gap to the floor closed and the excess loss."""
    m: dict = {}
    scn = cfg.scn
    floors = {"val_loss": floors} if isinstance(floors, (int, float)) else dict(floors or {})
    for k, v in quality.items():
        m[f"quality/{k}"] = v
    learned = LEARNED_METRIC[scn.task][0]
    m.update(evidence(quality, per_example, base_quality, base_per, scn.task, floor=floors.get(learned)))
    m["baseline/quality"] = base_quality.get(scn.quality)
    m["quality_se"] = m.get(f"quality/{scn.quality}_se")
    loss_floor = floors.get("val_loss")
    if loss_floor is not None and "val_loss" in quality:
        m["quality/loss_floor"] = loss_floor
        m["quality/excess_loss"] = quality["val_loss"] - loss_floor
    m["quality"] = quality.get(scn.quality)
    m["quality_name"] = scn.quality
    m["quality_higher_is_better"] = scn.higher_is_better
    return m


def stability_metrics(log: StepLog, diverged_step: int | None, scaler: LossScaler) -> dict:
    """Loss trajectory, non-finite and skipped steps, the loss scale, gradient and logit maxima,
    and the forensic counters' summary."""
    finite_losses = [v for v in log.losses if math.isfinite(v)][-5:]
    nf = log.nonfinite_steps
    return {"stability/initial_loss": log.initial_loss,
            "stability/final_train_loss": sum(finite_losses) / len(finite_losses) if finite_losses else None,
            "stability/diverged_step": diverged_step, "stability/nonfinite_steps": nf,
            "stability/skipped_steps": nf if scaler.mode == "dynamic" else 0,
            "stability/final_loss_scale": float(scaler.current_scale()),
            "stability/max_grad_norm": log.max_grad, "stability/max_logit": log.max_logit,
            **Forensics.summary(log.extra_rows)}


def _std(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0

