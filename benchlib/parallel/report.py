"""The end of a multi-process run: each rank's timed windows and memory into
``rank{r}.jsonl``, and the aggregate over ranks (seed 003's numbers) into the record."""
from __future__ import annotations

import json
import math
import socket
from pathlib import Path

import torch

from benchlib.core.memory import optimizer_state_bytes, tensor_bytes
from benchlib.core.records import read_steps
from benchlib.core.runconfig import RunConfig
from benchlib.core.timing import aggregate_windows


def rank_report(strategy, rec: dict, out: Path, cfg: RunConfig, timer, losses: list[float],
                opt: torch.optim.Optimizer) -> None:
    """Write ``rank{r}.jsonl`` (this rank's timed windows and a summary) and put the aggregate over
    ranks into the record's ``dist/`` metrics; every rank calls it (it gathers).
    One window row: seed 003's per-rank, per-epoch metrics (time, tokens/s, losses)."""
    m = rec["metrics"]
    # validation losses of the evaluations inside the run (eval_every), from rank 0's log
    evals = strategy.all_gather_object(eval_losses(out / "steps.jsonl") if strategy.is_main else None)[0]
    rows = window_rows(strategy.rank, cfg, timer, losses, evals)
    summary = {"rank": strategy.rank, "summary": True, "host": socket.gethostname(),
               "device": rec["env"].get("device_name"),
               **{k: m.get(f"memory/{k}") for k in ("peak_allocated_gib", "peak_reserved_gib", "peak_rss_gib")},
               "param_bytes": tensor_bytes(p for g in opt.param_groups for p in g["params"]),
               "optimizer_state_bytes": optimizer_state_bytes(opt),
               "val_loss": m.get("quality/val_loss"),
               "throughput": m.get("throughput"), "step_ms": m.get("step_ms")}
    with open(out / f"rank{strategy.rank}.jsonl", "w") as f:
        for r in rows + [summary]:
            f.write(json.dumps(r) + "\n")
    everyone = strategy.all_gather_object((rows, summary))
    all_rows = [r for rs, _ in everyone for r in rs]
    summaries = [s for _, s in everyone]
    agg = aggregate_windows(all_rows)
    unit = "tokens_per_s" if cfg.scn.is_lm else "samples_per_s"
    m["dist/world_size"] = strategy.world
    if agg:
        m["dist/windows"] = agg["windows"]
        for k in ("time_s", "step_ms", "tokens_per_s", "samples_per_s"):
            m[f"dist/{k}"], m[f"dist/{k}_std"] = agg[k], agg[f"{k}_std"]
        m["dist/throughput"], m["dist/throughput_std"] = agg[unit], agg[f"{unit}_std"]
        per_rank = [s["step_ms"] for s in summaries if s["step_ms"]]
        if len(per_rank) > 1:
            m["dist/straggler_pct"] = 100 * (max(per_rank) - min(per_rank)) / min(per_rank)
    for k in ("peak_allocated_gib", "peak_reserved_gib", "peak_rss_gib", "param_bytes",
              "optimizer_state_bytes"):
        vals = [s[k] for s in summaries if s[k] is not None]
        if vals:
            m[f"dist/{k}_max"] = max(vals)
    if strategy.world > 1:
        # headline numbers of a multi-process run: the whole system's throughput (each
        # rank's own rate summed) and the busiest device's memory; mfu_pct stays per GPU
        for k in ("throughput", "tokens_per_s", "samples_per_s"):
            vals = strategy.all_gather_object(m.get(k))
            if all(v is not None for v in vals):
                m[k] = sum(vals)
        m["memory"] = max(strategy.all_gather_object(m["memory"]))
        m["memory/optimizer_state_bytes"] = summary["optimizer_state_bytes"]
    rec["ranks"] = summaries
    rec["dist"] = strategy.info()


def eval_losses(steps_file: Path) -> dict[int, float]:
    rows = read_steps(steps_file) if steps_file.exists() else []
    return {r["step"]: r["eval"]["val_loss"] for r in rows if (r.get("eval") or {}).get("val_loss") is not None}


def window_rows(rank: int, cfg: RunConfig, timer, losses: list[float],
                 evals: dict[int, float] | None = None) -> list[dict]:
    """One row per timed window of this rank (seed 003's per-rank, per-epoch metrics: time,
    tokens/s, training loss, and the validation loss of an evaluation inside the window)."""
    rows, start = [], timer.warmup
    seqs = cfg.batch_size * cfg.grad_accum
    for i, (n, s) in enumerate(timer.done):
        window = [v for v in losses[start:start + n] if math.isfinite(v)]
        inside = [v for step, v in sorted((evals or {}).items()) if start <= step < start + n]
        rows.append({"rank": rank, "window": i, "first_step": start, "steps": n, "time_s": s,
                     "step_ms": 1000 * s / n, "samples_per_s": n * seqs / s,
                     "tokens_per_s": n * seqs * cfg.seq_len / s,
                     "train_loss": sum(window) / len(window) if window else None,
                     "val_loss": inside[-1] if inside else None})
        start += n
    return rows
