"""The process-group side of a multi-process run: the ``Strategy`` interface the training loop
drives, its one-process implementation (every hook the plain single-device operation) and the one
over a process group joined from torchrun's environment (collectives, failures, teardown).

    dist = setup(cfg, device)                        # strategies.setup
    step_model = dist.wrap(model, compile)           # before the optimizer is built
    opt = dist.regroup(build_optimizer(model, ...))  # fsdp1: weight-decay groups by original shape
    scaler = dist.loss_scaler(LossScaler(...))       # sharded grads: inf checks agree across ranks
    dist.set_grad_sync(step_model, last_micro)       # before each micro-batch's forward
    dist.before_optimizer()                          # fsdp2 local_shards: gradients to the shards
    gnorm = dist.clip_grad_norm_(params, max_norm)   # norm of the whole (sharded) gradient
    dist.all_reduce_mean_(losses)                    # every rank logs / stops on the same loss
    dist.report(rec, out, cfg, timer, losses, opt)   # rank{r}.jsonl + seed 003's aggregates
    if dist.finish(rec): write result.json           # rank 0, or the rank that failed first
    dist.close()
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn

from benchlib.core.runconfig import DistConfig, RunConfig
from benchlib.core.memory import local_tensor
from benchlib.parallel.report import rank_report

SHARDED = ("fsdp2", "fsdp1", "fsdp_manual")
DATA_SEED_STRIDE = 1_000_003
"""Rank r draws training batches with seed ``seed + r * stride``: rank 0 sees the batches of
the single-device run with the same seed, and seeds of different runs never collide."""


def data_seed(seed: int, rank: int) -> int:
    return seed + rank * DATA_SEED_STRIDE


def unsupported_reason(cfg: RunConfig) -> str | None:
    """Why this dtype config cannot run under this strategy (a ``skipped`` record), or None."""
    s, d = cfg.dist.strategy, cfg.dtype
    if s not in SHARDED:
        return None
    if d.optimizer == "adamw8bit" and s == "fsdp2" and not cfg.dist.local_shards:
        return ("bitsandbytes' 8-bit AdamW steps plain tensors; FSDP2's parameters are DTensors, "
                "so its quantised states cannot be sharded with them (use dist.local_shards, which hands "
                "the optimizer plain shards, or ddp, fsdp1, fsdp_manual)")
    if d.head_dtype and d.head_dtype != d.param_dtype and not cfg.scn.is_lm:
        return (f"{d.name} stores the classification head in {d.head_dtype} and the body in "
                f"{d.param_dtype}; {s} all-gathers one shard group in one dtype and the head is "
                f"read by the root module, so it cannot be a group of its own (use ddp)")
    return None


class Strategy:
    """One process, no process group: every hook is the plain single-device operation. Also stands
    for a run that never joined its group (its rank from torchrun's environment: rank 0 writes)."""

    name = "single"

    def __init__(self) -> None:
        self.rank = int(os.environ.get("RANK", 0))
        self.world = 1
        self.settings = DistConfig()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def info(self) -> dict:
        return {"strategy": self.name, "world_size": self.world}

    # ---- model -------------------------------------------------------------------
    def wrap(self, model: nn.Module, compile: bool = False) -> Callable:
        """Shard / replicate ``model`` (in place where the strategy does) and return the
        callable the training step runs. ``model`` stays the module to evaluate."""
        return torch.compile(model) if compile else model

    def regroup(self, opt: torch.optim.Optimizer) -> torch.optim.Optimizer:
        return opt

    def loss_scaler(self, scaler):
        return scaler

    def data_seed(self, seed: int) -> int:
        return data_seed(seed, self.rank)

    # ---- step --------------------------------------------------------------------
    def set_grad_sync(self, step_model: Callable, sync: bool) -> None:
        """Called before each micro-batch's forward: gradients are communicated only on the
        last micro-batch of an accumulation (``sync``)."""

    def stepped(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        """The tensors the optimizer steps for ``params`` (after ``regroup``): the parameters themselves."""
        return params

    def before_optimizer(self) -> None:
        """Backward (and its communication) is done: called before the gradients are unscaled,
        clipped and stepped."""

    def clip_grad_norm_(self, params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    def grad_max(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """Largest |gradient| element (logged with the loss)."""
        return torch.stack(torch._foreach_norm(grads, float("inf"))).max().float()

    def all_reduce_mean_(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def all_gather_object(self, obj: Any) -> list:
        return [obj]

    # ---- end of run --------------------------------------------------------------
    def report(self, rec: dict, out: Path, cfg: RunConfig, timer, losses: list[float],
               opt: torch.optim.Optimizer) -> None:
        """Per-rank window metrics (``rank{r}.jsonl``) and seed 003's aggregates into the record."""
        rank_report(self, rec, out, cfg, timer, losses, opt)

    def finish(self, rec: dict) -> bool:
        """Settle the record after the run; True where this process writes ``result.json``."""
        rec.setdefault("dist", self.info())
        return self.is_main

    def close(self) -> None:
        pass


class ProcessGroupStrategy(Strategy):
    """A strategy over a process group joined from torchrun's environment variables."""

    _runs = 0  # runs set up in this process: keys in the store are per run

    def __init__(self, cfg: RunConfig, device: torch.device):
        import torch.distributed as dist
        self.dist = dist
        self.device, self.cfg, self.settings = device, cfg, cfg.dist
        self.owns_group = not dist.is_initialized()
        if self.owns_group:
            missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
            if missing:
                raise RuntimeError(f"dist.strategy={cfg.dist.strategy} needs torchrun's environment ({', '.join(missing)} "
                                   f"unset): start it with `torchrun --nproc_per_node=N -m benchlib.run --dist.strategy ...` "
                                   f"or through benchlib.training.loop.run, which launches torchrun itself")
            if device.type == "cuda":
                torch.cuda.set_device(device)
            backend = "nccl" if device.type == "cuda" else "gloo"
            kw = {"device_id": device} if device.type == "cuda" else {}
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=cfg.dist.timeout_s), **kw)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.backend = dist.get_backend()
        ProcessGroupStrategy._runs += 1
        self.key = f"dtype_bench/run{ProcessGroupStrategy._runs}"
        self.step_model: Callable | None = None

    def info(self) -> dict:
        return {"strategy": self.name, "world_size": self.world, "backend": self.backend,
                "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", self.world)),
                "nnodes": self.world // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", self.world))),
                "settings": dataclasses.asdict(self.settings), **self.extra_info()}

    def extra_info(self) -> dict:
        return {}

    def _compile(self, module: nn.Module, compile: bool) -> Callable:
        return torch.compile(module) if compile else module

    # ---- collectives -------------------------------------------------------------
    def all_reduce_mean_(self, t: torch.Tensor) -> torch.Tensor:
        # gloo has no AVG: sum, then divide
        self.dist.all_reduce(t, op=self.dist.ReduceOp.SUM)
        return t.div_(self.world)

    def grad_max(self, grads: list[torch.Tensor]) -> torch.Tensor:
        # this rank's shards (some may be empty), then the max over ranks
        local = [g for g in map(local_tensor, grads) if g.numel()]
        t = (torch.stack(torch._foreach_norm(local, float("inf"))).max().float() if local
             else torch.zeros((), device=self.device))
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t

    def all_gather_object(self, obj: Any) -> list:
        out: list = [None] * self.world
        self.dist.all_gather_object(out, obj)
        return out

    # ---- failures ----------------------------------------------------------------
    def finish(self, rec: dict) -> bool:
        """A failed run on several ranks becomes one record with the first failure's message: that
        rank publishes it in the store (reachable while collectives hang) and writes the record
        itself (torchrun may kill the others); a rank failing because of it takes the message over."""
        rec.setdefault("dist", self.info())
        if rec["status"] not in ("error", "oom"):
            return self.is_main
        try:
            store = self.dist.distributed_c10d._get_default_store()
            own = {"status": rec["status"], "reason": f"rank {self.rank} ({socket.gethostname()}): {rec['reason']}"}
            if store.add(f"{self.key}/failures", 1) == 1:
                store.set(f"{self.key}/first", json.dumps(own))
                rec.update(own)
                self.failed_first = True
                return True
            deadline = time.time() + 10
            while time.time() < deadline and not store.check([f"{self.key}/first"]):
                time.sleep(0.1)
            if store.check([f"{self.key}/first"]):
                first = json.loads(store.get(f"{self.key}/first"))
                rec.update(first)
                rec["reason"] += f"\n(rank {self.rank} then failed too: {own['reason'].strip().splitlines()[-1]})"
        except Exception:  # the store went away with the failed rank's agent: keep our own message
            pass
        return self.is_main

    def close(self) -> None:
        failed = getattr(self, "failed_first", False)
        if not self.owns_group or not self.dist.is_initialized():
            return
        if failed and self.backend == "nccl":
            # peers may be blocked inside a collective: abort rather than a collective teardown
            with contextlib.suppress(Exception):
                self.dist.distributed_c10d._abort_process_group()
            return
        with contextlib.suppress(Exception):
            self.dist.destroy_process_group()


def world_size(cfg: RunConfig) -> int:
    """The number of processes this run trains on (what the record's ``nproc`` says)."""
    if cfg.dist.strategy != "single" and "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    return cfg.dist.nproc
