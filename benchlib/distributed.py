"""Multi-GPU training through PyTorch's own stack: ``torchrun`` starts the processes, this
module joins them into a process group and wraps the model for one of five strategies.

    single       one process, no process group (the default; nothing here runs)
    ddp          DistributedDataParallel: full replicas, gradients all-reduced in buckets
    fsdp2        ``fully_shard`` per transformer block + root, a ``MixedPrecisionPolicy``
                 derived from the dtype config, explicit prefetching
    fsdp1        ``FullyShardedDataParallel`` with a per-block auto-wrap policy and
                 ``limit_all_gathers`` on/off (seed 004's "official" FSDP)
    fsdp_manual  ``benchlib.fsdp_manual``: seed 004's small reference FSDP

``train.run`` drives a strategy through one object (``setup(cfg, device)``) whose single-
process implementation does nothing, so the single-device path is the plain loop:

    dist = setup(cfg, device)
    step_model = dist.wrap(model, compile)           # before the optimizer is built
    opt = dist.regroup(build_optimizer(model, ...))  # fsdp1: weight-decay groups by original shape
    scaler = dist.loss_scaler(LossScaler(...))       # sharded grads: inf checks agree across ranks
    dist.set_grad_sync(step_model, last_micro)       # before each micro-batch's forward
    gnorm = dist.clip_grad_norm_(params, max_norm)   # norm of the whole (sharded) gradient
    dist.all_reduce_mean_(losses)                    # every rank logs / stops on the same loss
    dist.report(rec, out, cfg, timer, losses, opt)   # rank{r}.jsonl + seed 003's aggregates
    if dist.finish(rec): write result.json           # rank 0, or the rank that failed first
    dist.close()

A run with ``strategy != single`` started outside torchrun (a notebook, the sweep, a plain
``run(cfg)``) is launched through ``torchrun --standalone --nproc_per_node=nproc`` by
``launch``, which streams its progress and returns the record rank 0 wrote.

Tuning levers that are not part of a run's identity are read from one environment
variable, ``DTYPE_BENCH_DIST="key=value,..."`` (``Settings``), and recorded in the record's
``dist`` section so every number carries them.

This module holds the process-group side (``Strategy``, joining the group, collectives,
failure handling, per-rank records) and the torchrun launch; how each strategy wraps the
model (DDP, FSDP2, FSDP1, manual FSDP and their mixed-precision policy) is in
``benchlib.strategies``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import math
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import torch
import torch.nn as nn

from .runconfig import ConfigError, RunConfig

STRATEGIES = ("single", "ddp", "fsdp2", "fsdp1", "fsdp_manual")
SHARDED = ("fsdp2", "fsdp1", "fsdp_manual")
DATA_SEED_STRIDE = 1_000_003
"""Rank r draws training batches with seed ``seed + r * stride``: rank 0 sees the batches of
the single-device run with the same seed, and seeds of different runs never collide."""
ENV_SETTINGS = "DTYPE_BENCH_DIST"


def data_seed(seed: int, rank: int) -> int:
    return seed + rank * DATA_SEED_STRIDE


# =======================================================================================
# Settings: performance levers (not part of a run's identity; recorded with every run)
# =======================================================================================
@dataclass(frozen=True)
class Settings:
    timeout_s: float = 600.0
    """Process-group timeout: a collective that waits longer fails the run instead of hanging."""
    bucket_cap_mb: float = 100.0
    """DDP gradient bucket size: smaller buckets start the all-reduce earlier in backward but,
    under torch.compile, split the graph into more pieces (DDPOptimizer cuts at bucket
    boundaries). 100 was the fastest of 25/50/100/200 for GPT-2 124M on 2x H200
    (docs/multi_gpu.md)."""
    static_graph: bool = True
    """DDP: the set of used parameters never changes, so DDP can skip per-step bookkeeping
    (only without gradient accumulation: DDP's static graph does not support no_sync)."""
    reshard: Literal["all", "all_but_last", "none"] = "all_but_last"
    """FSDP2 blocks' ``reshard_after_forward``: all = free every block's gathered weights after
    its forward (least memory, one more all-gather in backward); all_but_last = the last block
    keeps them (its backward follows at once); none = no block frees them (DDP-like memory for
    parameters, fewest collectives). The root never reshards after forward."""
    prefetch: int = 1
    """FSDP2: explicit forward/backward prefetch of the next N blocks (0 = FSDP's implicit
    prefetch only); FSDP1: forward_prefetch on when > 0."""
    mp: Literal["policy", "autocast"] = "policy"
    """FSDP2/manual with AMP configs: policy = gather weights in the autocast dtype and reduce
    gradients in fp32 (MixedPrecisionPolicy); autocast = gather fp32 weights and let autocast
    cast per op, exactly the single-device numerics at twice the all-gather bytes."""
    compile: Literal["model", "blocks"] = "model"
    """What torch.compile wraps when the run compiles: the whole wrapped model, or each
    transformer block (DDP, FSDP2, manual; the root's embedding, head and loss run eager, and
    DDP's bucket hooks fire between the compiled blocks' backwards)."""
    optimize_ddp: Literal["ddp_optimizer", "python_reducer", "no_optimization"] = "ddp_optimizer"
    """DDP under torch.compile (``torch._dynamo.config.optimize_ddp``): ddp_optimizer = dynamo
    splits the graph at bucket boundaries so each bucket's all-reduce overlaps the rest of
    backward; python_reducer = one graph, backward traced by compiled autograd with the
    all-reduces in it (experimental in torch); no_optimization = one graph, every all-reduce
    after backward."""

    @classmethod
    def from_env(cls, text: str | None = None) -> "Settings":
        text = os.environ.get(ENV_SETTINGS, "") if text is None else text
        kw: dict[str, Any] = {}
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for item in filter(None, (s.strip() for s in text.split(","))):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or key not in fields:
                raise ConfigError(f"{ENV_SETTINGS}: {item!r} is not key=value with key one of {', '.join(fields)}")
            default = getattr(cls, key)
            value = value.strip()
            if isinstance(default, bool):
                if value.lower() not in ("1", "0", "true", "false", "on", "off", "yes", "no"):
                    raise ConfigError(f"{ENV_SETTINGS}: {key}={value!r} is not a boolean")
                kw[key] = value.lower() in ("1", "true", "on", "yes")
            elif isinstance(default, (int, float)):
                try:
                    kw[key] = type(default)(value)
                except ValueError:
                    raise ConfigError(f"{ENV_SETTINGS}: {key}={value!r} is not a {type(default).__name__}") from None
            else:
                import typing
                allowed = typing.get_args(typing.get_type_hints(cls)[key])
                if value not in allowed:
                    raise ConfigError(f"{ENV_SETTINGS}: {key}={value!r}; expected one of {', '.join(allowed)}")
                kw[key] = value
        return cls(**kw)


# =======================================================================================
# Which (strategy, dtype config) pairs run
# =======================================================================================
def unsupported_reason(cfg: RunConfig) -> str | None:
    """Why this dtype config cannot run under this strategy (a ``skipped`` record), or None."""
    s, d = cfg.strategy, cfg.dtype
    if s not in SHARDED:
        return None
    if d.optimizer == "adamw8bit" and s == "fsdp2":
        return ("bitsandbytes' 8-bit AdamW steps plain tensors; FSDP2's parameters are DTensors, "
                "so its quantised states cannot be sharded with them (use ddp, fsdp1 or fsdp_manual)")
    if d.head_dtype and d.head_dtype != d.param_dtype and not cfg.scn.is_lm:
        return (f"{d.name} stores the classification head in {d.head_dtype} and the body in "
                f"{d.param_dtype}; {s} all-gathers one shard group in one dtype and the head is "
                f"read by the root module, so it cannot be a group of its own (use ddp)")
    return None


# =======================================================================================
# The strategy object: one process, or a process group (the wrapping: benchlib.strategies)
# =======================================================================================
class Strategy:
    """One process, no process group: every hook is the plain single-device operation.

    Also stands for a run that never set up its process group (skipped, or failed in setup):
    its rank then comes from torchrun's environment so only rank 0 writes the record.
    """

    name = "single"

    def __init__(self) -> None:
        self.rank = int(os.environ.get("RANK", 0))
        self.world = 1
        self.settings = Settings()

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
        from .scaling import aggregate_windows
        m = rec["metrics"]
        # validation losses of the evaluations inside the run (eval_every), from rank 0's log
        evals = self.all_gather_object(_eval_losses(out / "steps.jsonl") if self.is_main else None)[0]
        rows = _window_rows(self.rank, cfg, timer, losses, evals)
        summary = {"rank": self.rank, "summary": True, "host": socket.gethostname(),
                   "device": rec["env"].get("device_name"),
                   "peak_allocated_gib": m.get("memory/peak_allocated_gib"),
                   "peak_reserved_gib": m.get("memory/peak_reserved_gib"),
                   "peak_rss_gib": m.get("memory/peak_rss_gib"),
                   "param_bytes": _local_bytes(p for g in opt.param_groups for p in g["params"]),
                   "optimizer_state_bytes": _local_state_bytes(opt),
                   "val_loss": m.get("quality/val_loss"),
                   "throughput": m.get("throughput"), "step_ms": m.get("step_ms")}
        with open(out / f"rank{self.rank}.jsonl", "w") as f:
            for r in rows + [summary]:
                f.write(json.dumps(r) + "\n")
        everyone = self.all_gather_object((rows, summary))
        all_rows = [r for rs, _ in everyone for r in rs]
        summaries = [s for _, s in everyone]
        agg = aggregate_windows(all_rows)
        unit = "tokens_per_s" if cfg.scn.is_lm else "samples_per_s"
        m["dist/world_size"] = self.world
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
        if self.world > 1:
            # headline numbers of a multi-process run: the whole system's throughput (each
            # rank's own rate summed) and the busiest device's memory; mfu_pct stays per GPU
            for k in ("throughput", "tokens_per_s", "samples_per_s"):
                vals = self.all_gather_object(m.get(k))
                if all(v is not None for v in vals):
                    m[k] = sum(vals)
            m["memory"] = max(self.all_gather_object(m["memory"]))
            m["memory/optimizer_state_bytes"] = summary["optimizer_state_bytes"]
        rec["ranks"] = summaries
        rec["dist"] = self.info()

    def finish(self, rec: dict) -> bool:
        """Settle the record after the run; True where this process writes ``result.json``."""
        rec.setdefault("dist", self.info())
        return self.is_main

    def close(self) -> None:
        pass


class _Group(Strategy):
    """A strategy over a process group joined from torchrun's environment variables."""

    _runs = 0  # runs set up in this process: keys in the store are per run

    def __init__(self, cfg: RunConfig, device: torch.device, settings: Settings):
        import torch.distributed as dist
        self.dist = dist
        self.device, self.cfg, self.settings = device, cfg, settings
        self.owns_group = not dist.is_initialized()
        if self.owns_group:
            missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
            if missing:
                raise RuntimeError(f"strategy={cfg.strategy} needs torchrun's environment ({', '.join(missing)} "
                                   f"unset): start it with `torchrun --nproc_per_node=N -m benchlib run ...` "
                                   f"or through benchlib.train.run, which launches torchrun itself")
            if device.type == "cuda":
                torch.cuda.set_device(device)
            backend = "nccl" if device.type == "cuda" else "gloo"
            kw = {"device_id": device} if device.type == "cuda" else {}
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=settings.timeout_s), **kw)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.backend = dist.get_backend()
        _Group._runs += 1
        self.key = f"dtype_bench/run{_Group._runs}"
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
        local = [g for g in map(_local, grads) if g.numel()]
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
        """A failed run on several ranks becomes one record with the first failure's message.

        The rank that fails first publishes its record's status and reason in the process
        group's store (reachable even while collectives hang) and writes ``result.json``
        itself, so the record exists even if torchrun then kills the other ranks. A rank that
        fails because of it (its peer vanished mid-collective, or a timeout) takes that
        message over; rank 0 writes the record as usual.
        """
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


def setup(cfg: RunConfig, device: torch.device) -> Strategy:
    """The strategy object for this process (joining the process group where there is one)."""
    world_env = int(os.environ.get("WORLD_SIZE", 1))
    if cfg.strategy == "single":
        if world_env > 1:
            raise ConfigError(f"strategy=single under torchrun with WORLD_SIZE={world_env}: every process would "
                              f"train alone; use --strategy ddp|fsdp2|fsdp1|fsdp_manual")
        if cfg.nproc > 1:
            raise ConfigError(f"strategy=single runs one process; nproc={cfg.nproc} needs ddp|fsdp2|fsdp1|fsdp_manual")
        return Strategy()
    from .strategies import STRATEGY_CLASSES  # it imports this module: import it late
    return STRATEGY_CLASSES[cfg.strategy](cfg, device, Settings.from_env())


def world_size(cfg: RunConfig) -> int:
    """The number of processes this run trains on (what the record's ``nproc`` says)."""
    if cfg.strategy != "single" and "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    return cfg.nproc


# =======================================================================================
# Launching: torchrun as a subprocess
# =======================================================================================
def needs_launch(cfg: RunConfig) -> bool:
    """A multi-process strategy asked for outside torchrun: ``run`` launches it."""
    return cfg.strategy != "single" and "WORLD_SIZE" not in os.environ


def torchrun_command(cfg: RunConfig, out_dir: str | os.PathLike, quiet: bool = False,
                     nproc: int | None = None) -> list[str]:
    """``torchrun --standalone --nproc_per_node=N -m benchlib run <flags> --out DIR``."""
    flags, defaults = [], RunConfig().to_dict()
    for k, v in cfg.to_dict().items():
        # nproc: torchrun sets the world size (and its parser reads `--nproc` as an ambiguous
        # abbreviation of its own --nproc-per-node, even after the module name)
        if k in ("out_dir", "extra", "nproc") or v is None or (v == defaults[k] and k not in ("scenario", "config", "seed", "strategy")):
            continue
        flags += [f"--{k}", _flag(v)]
    return ([sys.executable, "-m", "torch.distributed.run", "--standalone",
             f"--nproc_per_node={nproc or cfg.nproc}", "-m", "benchlib", "run"]
            + flags + ["--out", str(out_dir)] + (["--quiet"] if quiet else []))


def _flag(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def launch(cfg: RunConfig | dict, out_dir: str | os.PathLike | None = None, progress: bool = True,
           timeout_s: float | None = None, echo: Callable[[str], None] | None = None,
           settings: str | None = None) -> dict:
    """Run ``cfg`` under torchrun in a subprocess, stream its output, return its record.
    ``settings`` (``"key=value,..."``) replaces this process's ``DTYPE_BENCH_DIST`` for the run.

    The record is the one rank 0 (or the first failing rank) wrote; if torchrun died before
    any rank could write one, an ``error`` record with the tail of its output is written.
    """
    from .records import read_record, write_json_atomic
    from .train import new_record
    if isinstance(cfg, dict):
        cfg = RunConfig.from_dict(cfg)
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="dtype-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    for stale in [out / "result.json", *out.glob("rank*.jsonl")]:
        stale.unlink(missing_ok=True)
    why = unsupported_reason(cfg)
    if why:  # known before any process starts
        from .env import pick_device
        from .runconfig import resolved
        rec = new_record(resolved(cfg).replace(out_dir=str(out)), pick_device(cfg.device))
        rec.update(status="skipped", reason=why, wall_s=0.0, dist={"strategy": cfg.strategy, "world_size": cfg.nproc})
        write_json_atomic(out / "result.json", rec)
        return {**rec, "_path": str(out / "result.json")}
    cmd = torchrun_command(cfg, out, quiet=not progress)
    env = dict(os.environ)
    if settings is not None:
        Settings.from_env(settings)  # a bad key fails here, naming it, before any process starts
        env[ENV_SETTINGS] = settings
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        # one thread per process, for 1 process as for N (torchrun sets it only for N > 1),
        # so that CPU runs of different sizes compare
        env.setdefault("OMP_NUM_THREADS", "1")
    echo = echo or (lambda s: (sys.stdout.write(s), sys.stdout.flush()))
    if progress:
        echo(f"$ {shlex.join(cmd[2:]).replace('torch.distributed.run', 'torchrun', 1)}\n")
    t0 = time.perf_counter()
    tail: deque[str] = deque(maxlen=200)
    # its own process group, so that a timeout or Ctrl-C stops the workers too, not only
    # torchrun's agent (orphaned workers would keep their GPUs)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    timed_out = threading.Event()

    def stop(expired: bool = False) -> None:
        if expired:
            timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    watchdog = threading.Timer(timeout_s, stop, kwargs={"expired": True}) if timeout_s else None
    try:
        if watchdog:
            watchdog.start()
        for chunk in iter(lambda: proc.stdout.read1(4096), b""):
            text = chunk.decode(errors="replace")
            tail.append(text)
            if progress:
                echo(text)
        rc = proc.wait()
    except BaseException:
        stop()
        raise
    finally:
        if watchdog:
            watchdog.cancel()
    timed_out = timed_out.is_set()
    path = out / "result.json"
    rec = None
    if path.exists():
        try:
            rec = read_record(path)
        except Exception:
            rec = None
    if rec is None:
        rec = new_record(cfg, torch.device("cpu"))
        lines = "".join(tail).splitlines()
        why = f"torchrun exited with code {rc}" + (f" after the {timeout_s:.0f} s limit" if timed_out else "")
        rec.update(status="error", reason=why + " before any rank wrote a record:\n" + "\n".join(lines[-15:]),
                   wall_s=time.perf_counter() - t0)
    if cfg.extra and rec["run"].get("extra") != cfg.extra:
        rec["run"]["extra"] = dict(cfg.extra)  # not a CLI flag: carried over here
    write_json_atomic(path, {k: v for k, v in rec.items() if not k.startswith("_")})
    rec["_path"] = str(path)
    rec["_returncode"] = rc
    return rec


# =======================================================================================
# Helpers: per-rank bytes and windows for the record
# =======================================================================================
def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _local_bytes(tensors) -> int:
    seen, n = set(), 0
    for t in tensors:
        if id(t) in seen:
            continue
        seen.add(id(t))
        loc = _local(t)
        n += loc.numel() * loc.element_size()
    return n


def _local_state_bytes(opt: torch.optim.Optimizer) -> int:
    n = 0
    for state in opt.state.values():
        for v in state.values():
            if torch.is_tensor(v) and v.dim() > 0:
                loc = _local(v)
                n += loc.numel() * loc.element_size()
    return n


def _eval_losses(steps_file: Path) -> dict[int, float]:
    evals = {}
    if steps_file.exists():
        for line in steps_file.read_text().splitlines():
            row = json.loads(line)
            if "eval" in row and row["eval"].get("val_loss") is not None:
                evals[row["step"]] = row["eval"]["val_loss"]
    return evals


def _window_rows(rank: int, cfg: RunConfig, timer, losses: list[float],
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
