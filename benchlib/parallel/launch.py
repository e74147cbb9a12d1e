"""Launching a multi-process run: ``torchrun --standalone --nproc_per_node=N -m benchlib.run`` in a
subprocess of its own process group, output streamed, a time limit enforced; returns the record
rank 0 (or the first failing rank) wrote, or an ``error`` record with torchrun's last output.
``loop.run`` calls it for ``dist.strategy != single`` outside torchrun.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

import torch

from benchlib.core.env import pick_device
from benchlib.core.records import new_record, read_record, write_record
from benchlib.core.runconfig import RunConfig, resolved
from benchlib.parallel.group import unsupported_reason


def needs_launch(cfg: RunConfig) -> bool:
    """A multi-process strategy asked for outside torchrun: ``run`` launches it."""
    return cfg.dist.strategy != "single" and "WORLD_SIZE" not in os.environ


def torchrun_command(cfg: RunConfig, out_dir: str | os.PathLike, quiet: bool = False,
                     nproc: int | None = None) -> list[str]:
    """``torchrun --standalone --nproc_per_node=N -m benchlib.run <flags> --out DIR``: a flag for
    every key that differs from its default (identity keys always)."""
    flags, defaults = [], RunConfig().flat()
    for k, v in cfg.flat().items():
        # dist.nproc: torchrun sets the world size
        if k in ("out_dir", "dist.nproc") or v is None or (v == defaults[k] and k not in IDENTITY_FLAGS):
            continue
        flags += [f"--{k}", _flag(v)]
    return ([sys.executable, "-m", "torch.distributed.run", "--standalone",
             f"--nproc_per_node={nproc or cfg.dist.nproc}", "-m", "benchlib.run"]
            + flags + ["--out", str(out_dir)] + (["--quiet"] if quiet else []))


IDENTITY_FLAGS = ("scenario", "config", "seed", "dist.strategy")


def _flag(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):  # extra: the record's notes (study, arm) travel with the command
        return json.dumps(v, sort_keys=True)
    return str(v)


def launch(cfg: RunConfig | dict, out_dir: str | os.PathLike | None = None, progress: bool = True,
           timeout_s: float | None = None, echo: Callable[[str], None] | None = None) -> dict:
    """Run ``cfg`` under torchrun in a subprocess, stream its output, return the record a rank
    wrote (or, where none could, an ``error`` record with the tail of torchrun's output)."""
    if isinstance(cfg, dict):
        cfg = RunConfig.from_dict(cfg)
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="dtype-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    for stale in [out / "result.json", *out.glob("rank*.jsonl")]:
        stale.unlink(missing_ok=True)
    why = unsupported_reason(cfg)
    if why:  # known before any process starts
        rec = new_record(resolved(cfg).replace(out_dir=str(out)), pick_device(cfg.device))
        rec.update(status="skipped", reason=why, wall_s=0.0, dist={"strategy": cfg.dist.strategy, "world_size": cfg.dist.nproc})
        write_record(out, rec)
        return {**rec, "_path": str(out / "result.json")}
    cmd = torchrun_command(cfg, out, quiet=not progress)
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
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
    path = out / "result.json"
    try:
        rec = read_record(path)
    except Exception:  # noqa: BLE001 - no rank wrote one, or it is torn: the error record below
        rec = None
    if rec is None:
        rec = new_record(cfg, torch.device("cpu"))
        lines = "".join(tail).splitlines()
        why = f"torchrun exited with code {rc}" + (f" after the {timeout_s:.0f} s limit" if timed_out.is_set() else "")
        rec.update(status="error", reason=why + " before any rank wrote a record:\n" + "\n".join(lines[-15:]),
                   wall_s=time.perf_counter() - t0)
    if cfg.extra and rec["run"].get("extra") != cfg.extra:
        rec["run"]["extra"] = dict(cfg.extra)  # not a CLI flag: carried over here
    write_record(path.parent, rec)
    rec["_path"] = str(path)
    rec["_returncode"] = rc
    return rec
