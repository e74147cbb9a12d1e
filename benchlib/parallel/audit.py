"""The dtype parity audit: for each precision policy (a dtype config), do ``single``, ``ddp``,
``fsdp2``, ``fsdp1`` and ``fsdp_manual`` compute with the same numerics? A few steps of a tiny
model, 2 ranks (gloo on the CPU, NCCL on GPUs), against one process over the same global batch
(``single``: per step rank 0's micro-batch then rank 1's, accumulated).

    python -m benchlib.parallel.audit --out DIR [--policies ...] [--strategies ...] [--steps N]

What is captured, per rank, and how (``Probe``: a wrapper around the run's ``Strategy``, so the
training loop runs as it always does; the hooks watch the capture step, the last one):

============== ===================================================================================
quantity       method
============== ===================================================================================
param          each parameter as stored, after the last step: the tensor the optimizer steps (a
               shard under FSDP; a DTensor's local tensor)
forward_weight each weight as the forward reads it (FSDP: the gathered / unsharded weight): a forward
               pre-hook on every module that holds parameters
output         the dtype of those modules' outputs: the compute dtype (autocast's, or the weights')
grad_local     the gradient of the weight the forward read, before any reduction: a tensor hook
               registered on it in the pre-hook (FSDP: the unsharded gradient)
grad_reduce    the dtypes of the buffers handed to a reducing collective in forward and backward:
               DDP's buckets (through ``allreduce_hook``, the comm hook torch documents as DDP's
               built-in all-reduce), FSDP's reduce-scatter inputs (``torch.distributed`` observed).
               ``single`` reduces nothing: the two micro-batches' gradients are summed in
               ``p.grad``, so its dtype is single's "reduction" dtype
weight_gather  the dtypes of the all-gathers' inputs (sharded strategies only; not compared)
grad           ``p.grad`` as the optimizer reads it: reduced, cast back, a shard under FSDP (read when
               backward is done: at the loss scaler's ``unscale_``, which changes no dtype)
exp_avg(_sq)   the optimizer's moments after the last step
master_weight  derived: the stored weights' dtype where it is wider than the matmuls' outputs
               (``output`` of modules with a 2-D weight, embeddings aside), else ``none``
loss           the (all-ranks mean) training loss at each step, from ``steps.jsonl``
loss_scale     the loss scale at each step (dynamic scaling's halvings must agree)
============== ===================================================================================

A (policy, strategy) *matches* when every compared dtype equals single's (per parameter or
module; the union over ranks, and the ranks agree), the loss scale is the same each step and the
loss is within ``LOSS_RTOL`` of single's at every step (relative, per step).

The runs go through ``benchlib.training.audit_worker`` in a subprocess (``python -m`` for
single, ``torchrun`` for the rest): this package sits below ``training`` and launches it as
``launch`` does, by command.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable

import torch
import torch.nn as nn

from benchlib.core.dtypes import ALIASES, REGISTRY, closest, get_config
from benchlib.core.errors import UserError
from benchlib.core.memory import local_tensor

POLICIES = ["fp32_baseline", "amp_bf16", "amp_fp16", "bf16_pure", "bf16_pure_fp32v"]
STRATEGIES = ["single", "ddp", "fsdp2", "fsdp1", "fsdp_manual"]
VARIANTS = {
    # name: (the strategy it runs, its dist settings, what it changes): alternatives a user might pick,
    # audited on request (not in the default set)
    "fsdp2_mp_autocast": ("fsdp2", {"mp": "autocast"}, "FSDP2 with dist.mp=autocast: weights gathered in their "
                          "storage dtype, autocast casts as in single"),
    "fsdp2_reduce_bf16": ("fsdp2", {}, "FSDP2 with MixedPrecisionPolicy(reduce_dtype=bf16): gradients "
                          "reduce-scattered in bf16"),
    "ddp_bf16_compress": ("ddp", {}, "DDP with torch's bf16_compress_hook: gradient buckets all-reduced in bf16"),
    "fsdp2_local_shards": ("fsdp2", {"local_shards": True}, "FSDP2 with dist.local_shards: the optimizer and "
                           "clipping step plain local shards, not DTensors"),
}
WORLD = 2
DTYPE_QUANTITIES = ["param", "forward_weight", "output", "grad_local", "grad_reduce", "grad", "exp_avg",
                    "exp_avg_sq", "master_weight"]
"""Compared with single's, name by name."""
INFO_QUANTITIES = ["weight_gather"]
VALUE_QUANTITIES = ["loss", "loss_scale"]

LOSS_RTOL = {"fp32": 1e-5, "tf32": 1e-3, "fp16": 5e-3, "bf16": 2e-2}
"""Per-step relative tolerance of the loss against single's, by the policy's compute dtype
(``DtypeConfig.compute_dtype``). Every run sees the same micro-batches, so step 0's forward
differs only where a strategy computes it differently; later steps differ by the order in which
the two ranks' gradients are summed (gloo's / NCCL's order against single's accumulation in
``p.grad``), which Adam's normalised update carries into every weight, and, for stochastically
rounded bf16 weights, by the draws, which a shard takes by its own element indices.

* fp32: each sum is exact to an ulp (6e-8 relative); the CPU runs differ by <= 1e-7 after 5 steps:
  1e-5 leaves a factor of 100 and still flags any real change (the distributed tests' rtol).
* bf16: 8 significant bits. Where the weights are bf16 the logged loss is itself a bf16 number
  (steps of 2^-7 = 7.8e-3 relative), and single sums its two micro-batch halves in bf16 where the
  ranks average theirs in fp32: they are one bf16 step apart (2.8e-3 at a loss of 5.5). 2e-2 is
  ~2.5 bf16 steps of the loss; amp_bf16's FSDP gathers in bf16 moved it by <= 2e-5 here.
* fp16 (11 significant bits, 4.9e-4 unit roundoff): 5e-3, ten units; measured <= 6e-6.
* TF32 (GPU only, the CPU runs it as fp32): 10-bit mantissa inputs to the matmuls: 1e-3."""


class AuditError(UserError):
    """A bad policy or strategy name, or no run could start: one line."""


# ---- names ---------------------------------------------------------------------------
def check_names(policies: Iterable[str], strategies: Iterable[str]) -> tuple[list[str], list[str]]:
    """The policies and strategies, checked: an unknown one is one line naming it and the closest."""
    policies, strategies = [ALIASES.get(p, p) for p in policies], list(strategies)
    for p in policies:
        if p not in REGISTRY:
            raise AuditError(f"unknown policy {p!r}.{closest(p, list(REGISTRY) + list(ALIASES))} "
                             f"(`dtype-bench configs` lists them)")
    valid = STRATEGIES + list(VARIANTS)
    for s in strategies:
        if s not in valid:
            raise AuditError(f"unknown strategy {s!r}.{closest(s, valid)} Valid: {', '.join(valid)}")
    if not policies or not strategies:
        raise AuditError("no policy or no strategy to audit")
    return list(dict.fromkeys(policies)), list(dict.fromkeys(["single", *strategies]))


def base_strategy(strategy: str) -> str:
    """The project's strategy a name runs (a variant's base)."""
    return VARIANTS[strategy][0] if strategy in VARIANTS else strategy


def dtype_name(dt: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dt, str(dt).replace("torch.", ""))


def clean_name(name: str) -> str:
    """A parameter's or module's name without the wrappers' path segments (DDP's ``module``,
    FSDP1's ``_fsdp_wrapped_module``, checkpointing's, compile's), so that strategies compare."""
    skip = {"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"}
    parts = [s for s in name.split(".") if s not in skip]
    return ".".join(parts[1:] if parts[:1] == ["module"] else parts)


# ---- the probe: a Strategy wrapper that records dtypes ---------------------------------
class Probe:
    """The run's strategy with its hooks recording dtypes on step ``capture_step`` (0-based, of
    ``grad_accum`` micro-batches). The loop calls it as it would the strategy: ``wrap`` (module,
    tensor and DDP comm hooks), ``set_grad_sync`` (a micro-batch starts: capture on), the loss
    scaler's ``unscale_`` (backward done: the reduced grads; capture off; ``grad_max`` and
    ``clip_grad_norm_`` too, should a loop not unscale), ``report`` (after the last step: stored
    weights, optimizer state; writes ``audit_rank{r}.json`` into the run's folder)."""

    def __init__(self, inner, capture_step: int, grad_accum: int, variant: str | None = None):
        self.inner, self.capture_step, self.grad_accum, self.variant = inner, capture_step, grad_accum, variant
        self.found: dict[str, dict[str, set]] = {}
        self.capturing, self.micro, self.model, self.opt = False, 0, None, None
        self.step_handles: list = []
        self.names: dict[int, str] | None = None

    def __getattr__(self, name):  # every other hook and attribute: the strategy's own
        return getattr(self.inner, name)

    def note(self, quantity: str, name: str, dt: torch.dtype | str) -> None:
        self.found.setdefault(quantity, {}).setdefault(name, set()).add(dt if isinstance(dt, str) else dtype_name(dt))

    # ---- the Strategy interface --------------------------------------------------------
    def wrap(self, model: nn.Module, compile: bool = False):
        with self._variant_policy():
            step_model = self.inner.wrap(model, compile)
        self.model = model
        ddp = getattr(self.inner, "ddp", None)
        if ddp is not None:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            ddp.register_comm_hook(None, bf16_compress if self.variant == "ddp_bf16_compress"
                                   else default_hooks.allreduce_hook)
        self._hook_modules(model)
        return step_model

    def regroup(self, opt):
        self.opt = self.inner.regroup(opt)
        return self.opt

    def loss_scaler(self, scaler):
        """The scaler, its ``unscale_`` (the first thing after backward) ending the capture first: the
        collectives after it (a DTensor GradScaler's inf check, ``grad_max``) reduce no gradient."""
        scaler = self.inner.loss_scaler(scaler)
        unscale = scaler.unscale_

        def unscale_(optimizer, params):
            self._end_capture(params)
            return unscale(optimizer, params)
        scaler.unscale_ = unscale_
        return scaler

    def set_grad_sync(self, step_model, sync: bool) -> None:
        step = self.micro // self.grad_accum
        self.micro += 1
        self.capturing = step == self.capture_step
        self.inner.set_grad_sync(step_model, sync)

    def grad_max(self, grads):
        self._end_capture(None)
        return self.inner.grad_max(grads)

    def clip_grad_norm_(self, params, max_norm):
        self._end_capture(params)
        return self.inner.clip_grad_norm_(params, max_norm)

    def _end_capture(self, params) -> None:
        """Backward is done: the gradients as the optimizer will read them (reduced, cast back, a
        shard under FSDP), the parameters' names (sharded again: FSDP2 keeps the root and the last
        block unsharded after a forward); capture off."""
        if not self.capturing:
            return
        self.names = self._param_names()
        params = params if params is not None else [p for g in self.opt.param_groups for p in g["params"]]
        for p in params:
            if p.grad is not None:
                self.note("grad", self.names.get(id(p), "?"), local_tensor(p.grad).dtype)
                if self.inner.name == "single":  # the micro-batches' grads were summed in p.grad
                    self.note("grad_reduce", "*", p.grad.dtype)
        self.capturing = False
        for h in self.step_handles:
            h.remove()
        self.step_handles = []

    def report(self, rec, out, cfg, timer, losses, opt):
        """After the last step: the stored weights and the optimizer's state, of the tensors the
        optimizer steps; then this rank's file."""
        self.inner.report(rec, out, cfg, timer, losses, opt)
        names = self.names or self._param_names()
        for p in (p for g in opt.param_groups for p in g["params"]):
            n = names.get(id(p), "?")
            self.note("param", n, local_tensor(p).dtype)
            for k in ("exp_avg", "exp_avg_sq"):
                st = opt.state.get(p, {}).get(k)
                if torch.is_tensor(st):
                    self.note(k, n, local_tensor(st).dtype)
        self._derive_master()
        payload = {"rank": self.inner.rank, "strategy": self.inner.name, "variant": self.variant,
                   "found": {q: {n: sorted(v) for n, v in d.items()} for q, d in self.found.items()}}
        Path(out, f"audit_rank{self.inner.rank}.json").write_text(json.dumps(payload, indent=1, sort_keys=True))

    # ---- hooks ---------------------------------------------------------------------------
    def _param_names(self) -> dict[int, str]:
        # a DTensor's local shard too: what the optimizer steps under dist.local_shards
        names = {id(p): clean_name(n) for n, p in self.model.named_parameters()}
        names.update({id(p._local_tensor): clean_name(n) for n, p in self.model.named_parameters()
                      if hasattr(p, "_local_tensor")})
        return names

    def _hook_modules(self, model: nn.Module) -> None:
        """A forward pre-hook (the weights as read, a tensor hook for their gradients) and a forward
        hook (the output's dtype) on every module holding parameters, wrappers aside."""
        for path, mod in model.named_modules():
            own = [n for n, t in mod._parameters.items() if t is not None and not n.startswith("_flat_param")]
            if not own or type(mod).__name__ in ("FullyShardedDataParallel", "DistributedDataParallel"):
                continue
            path = clean_name(path)
            mod.register_forward_pre_hook(self._pre_hook(path, own))
            mod.register_forward_hook(self._post_hook(path, mod))

    def _pre_hook(self, path: str, own: list[str]):
        def pre(mod, args):
            if not self.capturing:
                return
            for n in own:
                t = mod._parameters.get(n)
                if t is None:
                    continue
                key = f"{path}.{n}" if path else n
                self.note("forward_weight", key, t.dtype)
                if t.requires_grad and torch.is_grad_enabled():
                    self.step_handles.append(t.register_hook(
                        lambda g, key=key: self.note("grad_local", key, g.dtype) if self.capturing else None))
        return pre

    def _post_hook(self, path: str, mod: nn.Module):
        def post(mod, args, output):
            if not self.capturing:
                return
            out = output[0] if isinstance(output, (tuple, list)) else output
            if torch.is_tensor(out) and out.is_floating_point():
                self.note("output", path or "<root>", out.dtype)
                w = mod._parameters.get("weight")  # as the forward read it (FSDP1: 1-D flat views outside)
                if w is not None and w.dim() == 2 and not isinstance(mod, nn.Embedding):
                    self.note("_matmul_output", "*", out.dtype)
        return post

    def _derive_master(self) -> None:
        width = {"fp32": 4, "bf16": 2, "fp16": 2}
        stored = {d for v in self.found.get("param", {}).values() for d in v}
        compute = self.found.pop("_matmul_output", {}).get("*", set())
        wide = max(stored, key=lambda d: width.get(d, 0), default=None)
        narrow = min(compute, key=lambda d: width.get(d, 0), default=None)
        master = wide if wide and narrow and width.get(wide, 0) > width.get(narrow, 0) else "none"
        self.found["master_weight"] = {"*": {master}}

    @contextlib.contextmanager
    def _variant_policy(self):
        """``fsdp2_reduce_bf16``: the project's mixed-precision policy with reduce_dtype bf16."""
        if self.variant != "fsdp2_reduce_bf16":
            yield
            return
        from benchlib.parallel import strategies
        orig = strategies.mp_dtypes
        strategies.mp_dtypes = lambda dtype, settings: (orig(dtype, settings)[0], torch.bfloat16)
        try:
            yield
        finally:
            strategies.mp_dtypes = orig


def bf16_compress(process_group, bucket):
    """torch's ``bf16_compress_hook`` (bucket cast to bf16, pre-divided, all-reduced, copied back
    into the bucket's dtype), which torch allows on NCCL only: here on gloo too."""
    import torch.distributed as dist
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(dist.get_world_size(group))
    fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(f):
        buffer.copy_(f.value()[0])
        return buffer
    return fut.then(decompress)


REDUCING = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "_reduce_scatter_base")
GATHERING = ("all_gather_into_tensor", "all_gather_single", "_all_gather_base", "all_gather")
# FSDP1 on the CPU gathers with all_gather(list, tensor); reduce_scatter(tensor, list) takes a list: not seen


@contextlib.contextmanager
def observe_collectives(probe_of):
    """``torch.distributed``'s reducing and gathering functions noting their input's dtype on the
    probe ``probe_of()`` returns while it captures (the functions run unchanged)."""
    import torch.distributed as dist
    saved = {}

    def observed(fname, orig):
        quantity = "grad_reduce" if fname in REDUCING else "weight_gather"
        arg = 1 if fname in REDUCING[1:] or fname in GATHERING else 0  # (output, input) but all_reduce(tensor)

        def call(*args, **kwargs):
            probe = probe_of()
            if probe is not None and probe.capturing:
                t = next((kwargs[k] for k in ("input", "input_tensor", "tensor") if k in kwargs),
                         args[arg] if len(args) > arg else None)
                if torch.is_tensor(t):
                    probe.note(quantity, "*", t.dtype)
            return orig(*args, **kwargs)
        return call

    for fname in REDUCING + GATHERING:
        if hasattr(dist, fname):
            saved[fname] = getattr(dist, fname)
            setattr(dist, fname, observed(fname, saved[fname]))
    try:
        yield
    finally:
        for fname, orig in saved.items():
            setattr(dist, fname, orig)


# ---- running: specs for the worker, subprocesses ---------------------------------------
def run_config(policy: str, strategy: str, steps: int, device: str, seed: int) -> dict:
    """The run configuration of one cell: a tiny GPT-2 (scenario A), eager, every step logged;
    single accumulates the two ranks' micro-batches."""
    cfg = {"scenario": "A", "config": policy, "size": "tiny", "steps": steps, "log_every": 1, "seed": seed,
           "eval_batches": 1, "timing_windows": 1, "device": device, "compile": "off", "forensics": False,
           "judge_quality": False, "warmup_steps": 0}
    if strategy == "single":
        return {**cfg, "grad_accum": WORLD, "dist": {"strategy": "single"}}
    settings = VARIANTS[strategy][1] if strategy in VARIANTS else {}
    return {**cfg, "dist": {"strategy": base_strategy(strategy), "nproc": WORLD, "timeout_s": 120, **settings}}


def plan(pairs: list[tuple[str, str]], steps: int, device: str, seed: int, root: Path) -> list[dict]:
    """The worker's cells, one per (policy, strategy)."""
    return [{"policy": p, "strategy": s, "variant": s if s in VARIANTS else None,
             "cfg": run_config(p, s, steps, device, seed), "out": str(root / "runs" / p / s),
             "capture_step": steps - 1, "grad_accum": WORLD if s == "single" else 1, "world": WORLD}
            for p, s in pairs]


WORKER = "benchlib.training.audit_worker"


def worker_command(spec_path: Path, multi: bool, nproc: int = WORLD) -> list[str]:
    if multi:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                "-m", WORKER, str(spec_path)]
    return [sys.executable, "-m", WORKER, str(spec_path)]


def run_cells(cells: list[dict], root: Path, multi: bool, device: str, timeout_s: float, echo=print) -> int:
    """Run ``cells`` in workers: a worker under torchrun stops at a run that fails (its group is out
    of step), and a fresh one goes on with the cells after it. The largest exit status."""
    pending, rcs = list(cells), []
    while pending:
        rc, _ = run_worker(pending, root, multi, device, timeout_s, echo, attempt=len(rcs))
        rcs.append(rc)
        recorded = [i for i, c in enumerate(pending) if (Path(c["out"]) / "result.json").exists()]
        if rc == 0 or not recorded:  # all done, or nothing ran: a fresh worker would fail alike
            break
        pending = pending[recorded[-1] + 1:]
    return max(rcs, default=0)


def run_worker(cells: list[dict], root: Path, multi: bool, device: str, timeout_s: float, echo=print,
               attempt: int = 0) -> tuple[int, str]:
    """Run ``cells`` in one worker (one process, or ``WORLD`` under torchrun): (exit status, output tail)."""
    stem = ("multi" if multi else "single") + (f"_{attempt}" if attempt else "")
    spec = root / f"{stem}.json"
    spec.write_text(json.dumps(cells, indent=1))
    env = dict(os.environ)
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if device == "cpu" or not torch.cuda.is_available():
        env.setdefault("OMP_NUM_THREADS", "1")
    cmd = worker_command(spec, multi)
    echo(f"$ {' '.join(cmd[1:])}")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        out += f"\n(stopped after the {timeout_s:.0f} s limit)"
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    (root / f"{stem}.log").write_text(out)
    return proc.returncode, out[-3000:]


# ---- the table and the verdicts ---------------------------------------------------------
RAN = ("ok", "degraded", "stalled", "diverged")


def collect(cells: list[dict]) -> "pandas.DataFrame":  # noqa: F821
    """The tidy table: policy, strategy, rank, quantity, name, value, note. A ``status`` row per
    cell (``note``: a skipped or failed run's reason); dtype rows per rank from the probes'
    files; ``loss`` / ``loss_scale`` rows per step (``name`` the step) from ``steps.jsonl``."""
    import pandas as pd

    from benchlib.core.records import read_record, read_steps
    rows = []
    for cell in cells:
        out, key = Path(cell["out"]), {"policy": cell["policy"], "strategy": cell["strategy"]}
        try:
            rec = read_record(out / "result.json")
            status, note = rec["status"], rec.get("reason") or ""
        except Exception:  # noqa: BLE001 - no record: an earlier cell's failure stopped the worker
            status, note = "not run", "no record: the worker stopped before this run (see the worker's log)"
        if status not in RAN:
            note = _one_line(str(note))
        else:
            note = ""  # the run's own verdict on its learning (a 3-step tiny run stalls) is not the audit's
        rows.append({**key, "rank": None, "quantity": "status", "name": "", "value": status, "note": note})
        if status not in RAN:
            continue
        for f in sorted(out.glob("audit_rank*.json")):
            found = json.loads(f.read_text())
            for q, names in found["found"].items():
                rows += [{**key, "rank": found["rank"], "quantity": q, "name": n, "value": ",".join(v), "note": ""}
                         for n, v in sorted(names.items())]
        steps = [r for r in read_steps(out / "steps.jsonl") if "loss" in r]
        for r in steps:
            rows.append({**key, "rank": None, "quantity": "loss", "name": str(r["step"]), "value": r["loss"], "note": ""})
            scale = r.get("loss_scale")
            rows.append({**key, "rank": None, "quantity": "loss_scale", "name": str(r["step"]),
                         "value": float(scale) if scale is not None else None, "note": ""})
    return pd.DataFrame(rows, columns=["policy", "strategy", "rank", "quantity", "name", "value", "note"])


def _one_line(reason: str) -> str:
    """A skipped run's reason as is; a failed one's "rank r (host): " and its exception's line."""
    lines = [x.strip() for x in reason.splitlines() if x.strip()] or [""]
    if len(lines) == 1:
        return lines[0]
    where = re.match(r"rank \d+ \([^)]*\): ", lines[0])
    error = next((x for x in reversed(lines) if re.match(r"\(?[\w. ]*?(\w+Error|Exception)\b", x)), lines[-1])
    return (where.group(0) if where else "") + error


def _by_name(t, quantity: str) -> tuple[dict[str, str], list[str]]:
    """{name: the union of its dtypes over ranks}, and the names whose ranks disagree."""
    sub = t[t["quantity"] == quantity]
    merged, disagree = {}, []
    for name, g in sub.groupby("name"):
        vals = set(g["value"])
        merged[name] = ",".join(sorted({d for v in vals for d in str(v).split(",")}))
        if len(vals) > 1:
            disagree.append(name)
    return merged, disagree


def dtype_differences(ref, t) -> list[str]:
    """What differs between single's dtype rows ``ref`` and a strategy's ``t``: one entry per
    quantity, naming it, how many names differ, and an example (single's value, then this one)."""
    out = []
    for q in DTYPE_QUANTITIES:
        mine, disagree = _by_name(t, q)
        theirs, _ = _by_name(ref, q)
        if disagree:
            out.append(f"{q}: ranks disagree on {len(disagree)} (e.g. {disagree[0]})")
        names = sorted(set(mine) | set(theirs))
        bad = [n for n in names if mine.get(n) != theirs.get(n)]
        if bad:
            n = bad[0]
            out.append(f"{q}: {len(bad)} of {len(names)} differ (e.g. {n}: single {theirs.get(n, 'absent')}, "
                       f"here {mine.get(n, 'absent')})")
    return out


def _series(t, quantity: str) -> list[float]:
    sub = t[t["quantity"] == quantity]
    return [float(v) if v is not None else math.nan for v in sub.sort_values("name", key=lambda s: s.astype(int))["value"]]


def loss_difference(ref, t, rtol: float) -> tuple[float, list[str]]:
    """The largest per-step relative loss difference against single's, and what breaks parity:
    another number of steps, a step beyond ``rtol``, a different loss scale."""
    a, b = _series(t, "loss"), _series(ref, "loss")
    out = []
    if len(a) != len(b):
        out.append(f"loss: {len(a)} steps logged, single {len(b)}")
    rel = [abs(x - y) / max(abs(y), 1e-12) if math.isfinite(x) and math.isfinite(y) else
           (0.0 if (math.isnan(x) and math.isnan(y)) or x == y else math.inf) for x, y in zip(a, b)]
    worst = max(rel, default=0.0)
    over = [i for i, r in enumerate(rel) if r > rtol]
    if over:
        i = over[0]
        out.append(f"loss: {len(over)} of {len(rel)} steps beyond rtol {rtol:g} (step {i}: single {b[i]:.6g}, "
                   f"here {a[i]:.6g}, rel {rel[i]:.2g})")
    sa, sb = _series(t, "loss_scale"), _series(ref, "loss_scale")
    if sa != sb:
        i = next((i for i, (x, y) in enumerate(zip(sa, sb)) if x != y), min(len(sa), len(sb)))
        out.append(f"loss_scale: differs from step {i} (single {sb[i] if i < len(sb) else '-'}, "
                   f"here {sa[i] if i < len(sa) else '-'})")
    return worst, out


def loss_rtol(policy: str, device: str = "cuda") -> float:
    """``LOSS_RTOL`` of the policy's compute dtype (TF32 runs as fp32 on the CPU)."""
    compute = get_config(policy).compute_dtype
    if compute == "tf32" and device == "cpu":
        compute = "fp32"
    return LOSS_RTOL.get(compute, LOSS_RTOL["bf16"])


def verdicts(table, rtol: dict[str, float] | None = None, device: str = "cuda") -> "pandas.DataFrame":  # noqa: F821
    """One row per (policy, strategy): ``verdict`` match / mismatch against single of the same
    policy (``reference`` for single itself; skipped, error, not run, no reference; ``run_status``
    is the run's own record status, ``stalled`` for most 5-step tiny runs), whether the
    dtypes are equal, the largest relative loss difference and its tolerance, and ``differences``
    naming each quantity that differs."""
    import pandas as pd
    rows = []
    for (policy, strategy), t in table.groupby(["policy", "strategy"], sort=False):
        status_row = t[t["quantity"] == "status"].iloc[0]
        tol = (rtol or {}).get(policy, loss_rtol(policy, device))
        row = {"policy": policy, "strategy": strategy, "run_status": status_row["value"], "verdict": None,
               "dtypes_equal": None, "loss_max_rel_diff": None, "loss_rtol": tol, "loss_within": None,
               "differences": "", "reason": status_row["note"]}
        ref = table[(table["policy"] == policy) & (table["strategy"] == "single")]
        ref_status = ref[ref["quantity"] == "status"]["value"].iloc[0] if len(ref) else "absent"
        if row["run_status"] not in RAN:
            row["verdict"] = row["run_status"]
        elif strategy == "single":
            row["verdict"] = "reference"
        elif ref_status not in RAN:
            row["verdict"], row["reason"] = "no reference", f"single {ref_status}"
        else:
            dt = dtype_differences(ref, t)
            worst, ld = loss_difference(ref, t, tol)
            row.update(dtypes_equal=not dt, loss_max_rel_diff=worst, loss_within=not ld,
                       differences="; ".join(dt + ld), verdict="match" if not (dt or ld) else "mismatch")
        rows.append(row)
    return pd.DataFrame(rows)


def matrix(verdicts) -> "pandas.DataFrame":  # noqa: F821
    """The verdicts as a policy x strategy grid: ``match``, or ``mismatch`` and the quantities that
    differ, with the largest relative loss difference; skipped, error, not run as they are."""
    def cell(r) -> str:
        loss = f" ({r['loss_max_rel_diff']:.0e})" if r["verdict"] in ("match", "mismatch") else ""
        if r["verdict"] == "mismatch":
            named = dict.fromkeys(d.split(":")[0] for d in r["differences"].split("; "))
            return "**mismatch**: " + ", ".join(named) + loss
        return r["verdict"] + loss
    v = verdicts[verdicts["strategy"] != "single"].copy()
    v["cell"] = [cell(r) for _, r in v.iterrows()]
    grid = v.pivot(index="policy", columns="strategy", values="cell")
    grid = grid.reindex(index=list(dict.fromkeys(v["policy"])), columns=list(dict.fromkeys(v["strategy"])))
    return grid.fillna("").reset_index()


def compact(table) -> "pandas.DataFrame":  # noqa: F821
    """Per (policy, strategy), each dtype quantity's dtypes over every name and rank (e.g.
    ``bf16,fp32``): the audit in one screen."""
    import pandas as pd
    rows = []
    for (policy, strategy), t in table.groupby(["policy", "strategy"], sort=False):
        row = {"policy": policy, "strategy": strategy}
        for q in DTYPE_QUANTITIES + INFO_QUANTITIES:
            vals = t[t["quantity"] == q]["value"]
            row[q] = ",".join(sorted({d for v in vals for d in str(v).split(",")})) or "-"
        rows.append(row)
    return pd.DataFrame(rows)


# ---- the whole audit ----------------------------------------------------------------------
class AuditResult:
    def __init__(self, table, verdicts, root: Path, returncodes: dict[str, int], device: str):
        self.table, self.verdicts, self.root, self.returncodes = table, verdicts, root, returncodes
        self.device = device  # "cpu" (gloo) or "cuda" (NCCL)

    def verdict(self, policy: str, strategy: str) -> dict:
        v = self.verdicts
        return v[(v["policy"] == policy) & (v["strategy"] == strategy)].iloc[0].to_dict()


def audit(policies: Iterable[str] = POLICIES, strategies: Iterable[str] = STRATEGIES, steps: int = 5,
          out: str | os.PathLike = "audit", device: str = "auto", seed: int = 0, timeout_s: float = 900,
          echo=print, pairs: Iterable[tuple[str, str]] | None = None) -> AuditResult:
    """Run the audit (single in one process, the rest in one torchrun of ``WORLD`` ranks) into
    ``out/runs/<policy>/<strategy>/`` and return its table and verdicts: every policy under every
    strategy, or only the (policy, strategy) ``pairs`` (each policy's single added)."""
    import shutil
    if pairs is not None:
        pairs = [(ALIASES.get(p, p), s) for p, s in pairs]
        policies, strategies = [p for p, _ in pairs], [s for _, s in pairs]
    policies, strategies = check_names(policies, strategies)
    if pairs is None:
        pairs = [(p, s) for p in policies for s in strategies]
    pairs = list(dict.fromkeys((p, s) for p in policies for s in ["single", *(s for q, s in pairs if q == p)]))
    if steps < 2:
        raise AuditError(f"--steps {steps}: the audit needs at least 2 steps (it captures the last)")
    if device == "cuda" and not torch.cuda.is_available():
        raise AuditError("--device cuda: no CUDA GPU is visible")
    if device != "cpu" and torch.cuda.is_available() and torch.cuda.device_count() < WORLD:
        raise AuditError(f"the audit runs {WORLD} ranks, one GPU each: {torch.cuda.device_count()} visible "
                         f"(--device cpu runs them on gloo)")
    root = Path(out)
    shutil.rmtree(root / "runs", ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    cells = plan(pairs, steps, device, seed, root)
    rcs = {}
    singles = [c for c in cells if c["strategy"] == "single"]
    multi = [c for c in cells if c["strategy"] != "single"]
    for name, group_cells, is_multi in (("single", singles, False), ("multi", multi, True)):
        if group_cells:
            rcs[name] = run_cells(group_cells, root, is_multi, device, timeout_s, echo)
    table = collect(cells)
    used = "cuda" if device != "cpu" and torch.cuda.is_available() else "cpu"
    return AuditResult(table, verdicts(table, device=used), root, rcs, used)


def markdown(result: AuditResult, command: str = "") -> str:
    """The summary: where and how it ran, the verdicts, the compact dtype table."""
    from benchlib.core.env import git_commit
    v = result.verdicts.copy()
    v["loss_max_rel_diff"] = v["loss_max_rel_diff"].map(lambda x: f"{x:.1e}" if isinstance(x, float) and x == x else "")
    v["notes"] = [d or r for d, r in zip(v["differences"], v["reason"])]
    cols = ["policy", "strategy", "verdict", "dtypes_equal", "loss_max_rel_diff", "loss_rtol", "notes"]
    where = (f"{torch.cuda.get_device_name(0)}, NCCL" if result.device == "cuda" else "CPU, gloo")
    lines = ["# dtype parity audit", "",
             f"commit {git_commit(code_only=True) or 'unknown'}, torch {torch.__version__}, {WORLD} ranks ({where})"
             + (f"; `{command}`" if command else ""), "",
             "## Verdicts against single (one process over the same global batch)", "",
             _pipe(matrix(result.verdicts)), "", "In full:", "", _pipe(v[cols]), "", "## dtypes (over every parameter / module and rank)", "", _pipe(compact(result.table))]
    return "\n".join(lines) + "\n"


def _pipe(df) -> str:
    rows = [list(map(str, df.columns))] + [["" if x is None else str(x) for x in r] for r in df.itertuples(index=False)]
    return "\n".join(["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])] +
                     ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows[1:]])


def build_parser():
    from benchlib.core.argparser import ArgumentParser
    p = ArgumentParser(prog="python -m benchlib.parallel.audit",
                       description="dtype parity audit: per precision policy, single vs DDP vs FSDP2 vs FSDP1 vs "
                                   "manual FSDP on a tiny model (2 ranks: gloo on the CPU, NCCL on GPUs)")
    p.add_argument("--out", required=True, help="folder for table.csv, table.json, verdicts.csv, summary.md and the runs")
    p.add_argument("--policies", nargs="+", default=POLICIES, help=f"dtype configs (default: {' '.join(POLICIES)})")
    p.add_argument("--strategies", nargs="+", default=STRATEGIES,
                   help=f"strategies (default: {' '.join(STRATEGIES)}); variants: {', '.join(VARIANTS)}")
    p.add_argument("--steps", type=int, default=5, help="training steps per run (default: 5)")
    p.add_argument("--seed", type=int, default=0, help="the runs' seed (default: 0)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: CUDA (NCCL, one GPU per rank) where visible, else the CPU (gloo)")
    p.add_argument("--timeout", type=float, default=900, help="seconds each worker may run (default: 900)")
    return p


def _split(values: list[str]) -> list[str]:
    return [x for v in values for x in v.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    """0: the audit ran (its verdicts say what matched); 1: a run failed; 2: bad arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    ns = parser.parse_args(argv)
    t0 = time.perf_counter()
    try:
        res = audit(_split(ns.policies), _split(ns.strategies), ns.steps, ns.out, ns.device, ns.seed, ns.timeout)
    except AuditError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    root = Path(ns.out)
    res.table.to_csv(root / "table.csv", index=False)
    res.table.to_json(root / "table.json", orient="records", indent=1)
    res.verdicts.to_csv(root / "verdicts.csv", index=False)
    compact(res.table).to_csv(root / "dtypes.csv", index=False)
    md = markdown(res, " ".join(["python -m benchlib.parallel.audit", *argv]))
    (root / "summary.md").write_text(md)
    print(md)
    print(f"audit: {time.perf_counter() - t0:.0f} s; {root / 'summary.md'}, table.csv / table.json, verdicts.csv")
    failed = res.verdicts[res.verdicts["verdict"].isin(["error", "not run"])]
    return 1 if len(failed) else 0


if __name__ == "__main__":
    sys.exit(main())
