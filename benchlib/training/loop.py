"""One training run: (scenario, dtype config, seed, size, steps, ...) -> a result record.

The step reads the dtype config's fields (autocast, loss scaling, optimizer, head dtype,
compile, TF32) and never its name. Per-step values stay on the device and are copied to
the host once every ``log_every`` steps, so logging costs one sync per interval.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import time
import traceback
from pathlib import Path
from dataclasses import dataclass
from typing import IO, Any, Callable

import torch

from benchlib.core import env as envmod
from benchlib.core.memory import local_tensor
from benchlib.training.baselines import evaluate_baseline, evaluate_predictor, head_bias
from benchlib.training.checkpoints import CheckpointError
from benchlib.core.dtypes import TORCH_DTYPES, DtypeConfig
from benchlib.data.load import load_task_data
from benchlib.data.tasks import BadDataError, DataUnavailableError, TaskData
from benchlib.training.forensics import Forensics
from benchlib.training.health import verdict
from benchlib.parallel.group import Strategy, unsupported_reason, world_size
from benchlib.parallel.launch import launch, needs_launch
from benchlib.parallel.strategies import setup
from benchlib.training.measures import memory_metrics, quality_metrics, speed_metrics, stability_metrics
from benchlib.training.models import BenchModel, ModelSpec, autocast_context, build_model
from benchlib.training.precision import LossScaler, build_optimizer, convert_fp8, linear_shapes, lr_at, set_matmul_flags
from benchlib.training import compile_cache, resume
from benchlib.core.records import FINISHED, CorruptRecord, new_record, read_record, write_record
from benchlib.training.preflight import out_problem, refusal
from benchlib.core.steplog import StepLog
from benchlib.core.timing import WindowTimer
from benchlib.core.runconfig import RunConfig, resolved


class Diverged(Exception):
    pass


def _weights_nonfinite(params: list[torch.Tensor], all_reduce_mean_) -> bool:
    """Whether any weight (on any rank) holds inf/nan: no step recovers from there, so a run that
    continues after its divergence stops."""
    bad = torch.stack([(~torch.isfinite(local_tensor(p.detach()))).any() for p in params]).any().float()
    return bool(all_reduce_mean_(bad.reshape(1)).item() > 0)


_last_end: float | None = None
"""When this process's previous run ended (``time.time()``), if one did: a later run's startup
is counted from there, not from the process start (a notebook comparing configs, the seeds of a
cell the sweep runs in one process)."""


def run(cfg: RunConfig | dict, out_dir: str | os.PathLike | None = None, progress: bool = True,
        progress_desc: str | None = None) -> dict:
    """Train one configuration and return its record; never raises for a failed run.

    Status ``ok``, ``diverged``, ``oom``, ``error`` (the traceback's last lines in ``reason``) or
    ``skipped`` (hardware or packages cannot run it). With ``out_dir``, ``steps.jsonl`` and then
    ``result.json`` (atomically) are written there. A run refused before it starts (``preflight``)
    is an ``error`` record with that one line, never written over a finished record (``_kept``).
    """
    global _last_end
    # kernel / interpreter start and imports before this call, or the time since the previous run
    startup_s = time.time() - _last_end if _last_end is not None else envmod.process_age_s()
    cfg = resolved(RunConfig.from_dict(cfg) if isinstance(cfg, dict) else cfg)  # once: a ResolvedRun from here on
    problem = refusal(cfg) or (out_problem(out_dir) if out_dir else None)
    if problem:
        return _refused(cfg, out_dir, problem)
    if needs_launch(cfg):  # ddp / fsdp outside torchrun: run it under torchrun
        return launch(cfg, out_dir, progress=progress)
    device = envmod.pick_device(cfg.device)
    compile_ = {"on": True, "off": False}.get(cfg.compile, cfg.dtype.compile and device.type == "cuda")
    cfg = cfg.replace(device=device.type, compile="on" if compile_ else "off", **{"dist.nproc": world_size(cfg)},
                      cudagraphs=cfg.cudagraphs and compile_ and device.type == "cuda",
                      out_dir=str(out_dir) if out_dir else cfg.out_dir)
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="dtype-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    rec = new_record(cfg, device)
    rec["metrics"]["time/startup_s"] = startup_s
    t0 = time.perf_counter()
    skip = envmod.unsupported_reason(cfg.dtype, device) or unsupported_reason(cfg)
    dist = Strategy()  # until the process group is joined
    try:
        if skip:
            rec.update(status="skipped", reason=skip)
        else:
            dist = setup(cfg, device)
            _train(cfg, device, out, rec, progress and dist.is_main, progress_desc, dist)
    except torch.cuda.OutOfMemoryError as e:
        rec.update(status="oom", reason=str(e).splitlines()[0][:500])
    except (CheckpointError, DataUnavailableError, BadDataError, ComputeDtypeError) as e:  # bad input: its one line says what to do
        rec.update(status="error", reason=str(e))
    except Exception:
        rec.update(status="error", reason="".join(traceback.format_exc().splitlines(True)[-15:]))
    finally:
        rec["wall_s"] = time.perf_counter() - t0
        if device.type == "cuda":
            torch.cuda.empty_cache()
    rec["_path"] = str(out / "result.json")
    if dist.finish(rec):  # rank 0 writes the record (or the rank that failed first)
        write_record(out, rec)
        if cfg.state_every:  # the record holds what the state was for
            resume.clear(out)
    dist.close()
    _last_end = time.time()
    return rec


def _refused(cfg: RunConfig, out_dir, problem: str) -> dict:
    """The ``error`` record of a run refused before it started, written to ``out_dir`` where it can
    be but never over a finished record (nothing ran, so nothing recorded is replaced)."""
    device = torch.device("cuda" if cfg.device != "cpu" and torch.cuda.is_available() else "cpu")
    rec = {**new_record(cfg.replace(out_dir=str(out_dir) if out_dir else None), device),
           "status": "error", "reason": problem, "wall_s": 0.0, "_path": None}
    path = Path(out_dir) / "result.json" if out_dir else None
    if path is None or out_problem(out_dir):
        return rec
    try:
        kept = read_record(path)["status"] in FINISHED
    except CorruptRecord:
        kept = False
    if kept:
        rec["_kept"] = str(path)
    else:
        write_record(out_dir, rec)
        rec["_path"] = str(path)
    return rec


def _auto_warmup(cfg: RunConfig, device: torch.device) -> int:
    auto = 2 if device.type == "cpu" else min(max(5, cfg.steps // 10), 50)
    return min(auto if cfg.timing_warmup is None else cfg.timing_warmup, cfg.steps - 1)


@dataclass
class _Run:
    """What setup built: the loop and finalise read it."""
    data: TaskData
    model: BenchModel
    step_model: Callable  # the model as the step calls it: wrapped (ddp / fsdp), compiled
    params: list[torch.Tensor]
    opt: torch.optim.Optimizer
    scaler: LossScaler
    next_batch: Callable
    val: list[dict]
    forensics: Forensics | None
    amp: Any
    fpt: float  # flops per token, from the unsharded model
    compiled_before: dict
    data_s: float
    model_s: float
    to_device_s: float
    setup_s: float = 0.0
    saved: dict | None = None  # the state a resumed run continues from
    start: int = 0  # the first step this process runs


@dataclass
class _Loop:
    """What the loop measured: the finalise step reads it."""
    timer: WindowTimer
    log: StepLog
    rows_f: IO  # steps.jsonl (os.devnull on ranks other than the main one)
    before: dict  # earlier processes' clocks (a resumed run)
    t_train: float = 0.0
    train_s: float = 0.0
    eval_s: float = 0.0
    state_s: float = 0.0
    first_step_s: float | None = None
    dead_step: int | None = None  # a continued divergence stopped here: the weights hold inf/nan
    state_by: float | None = None  # a time budget's (``resume.STATE_BY_ENV``): save once at a logged step past it


def _train(cfg: RunConfig, device: torch.device, out: Path, rec: dict, progress: bool,
           progress_desc: str | None, dist: Strategy) -> None:
    """Setup, loop and finalise: fills ``rec`` (its data, model, metrics, status)."""
    run = _setup(cfg, device, out, rec, dist)
    lp = _loop(cfg, device, out, run, dist, progress, progress_desc)
    _finalise(cfg, device, out, rec, run, lp, dist)


def _setup(cfg: RunConfig, device: torch.device, out: Path, rec: dict, dist: Strategy) -> _Run:
    """Everything before the first step: data, model, wrapping and compilation, optimizer, loss
    scaler, batches, and the state of a run stopped part-way (``state_every``)."""
    dtype: DtypeConfig = cfg.dtype
    t_setup = time.perf_counter()
    set_matmul_flags(dtype)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    data = load_task_data(cfg)
    data_s = time.perf_counter() - t_setup
    rec["data"] = {"source": data.source, "vocab_size": data.vocab_size, "num_labels": data.num_labels,
                   "loss_floor": data.loss_floor, **{k: v for k, v in data.meta.items()
                                                      if isinstance(v, (int, float, str, bool, type(None)))}}
    _mark_passes(cfg, rec["data"], dist.world)
    model, model_s, to_device_s = _build(cfg, device, rec, data)
    fpt = model.flops_per_token(cfg.seq_len)  # before sharding hides parameter sizes
    # ddp / fsdp wrap (and shard) before the optimizer sees the parameters
    if cfg.compile == "on":
        # each run compiles afresh: several runs in one process (a notebook, `bench`) would
        # otherwise pile up recompilations until dynamo silently falls back to eager
        torch._dynamo.reset()
    if cfg.compile == "on" or cfg.cudagraphs:
        rec["env"]["compile_cache_dir"] = compile_cache.by_autocast(dtype.autocast_dtype)
    compiled_before = compile_cache.counters()
    step_model: Callable = dist.wrap(model, compile=cfg.compile == "on" and not cfg.cudagraphs)
    if cfg.cudagraphs:  # single process only (RunConfig checks)
        step_model = torch.compile(step_model, mode="reduce-overhead")
    opt = dist.regroup(build_optimizer(model, dtype, cfg.lr, cfg.weight_decay, cfg.beta2, device))
    # the tensors the optimizer steps, in the model's order (FSDP2 with dist.local_shards: the local
    # shards, which dist.before_optimizer hands their gradients): unscaled, clipped and watched
    params = dist.stepped([p for p in model.parameters() if p.requires_grad])
    scaler = dist.loss_scaler(LossScaler(dtype, device))
    next_batch = data.sampler(cfg.batch_size, device, dist.data_seed(cfg.seed))
    # evaluation keeps no activations for backward: classification evaluates 4 micro-batches at
    # once (its logits are small); LM keeps the training micro-batch ([B, T, V] logits)
    val = data.val_batches(cfg.batch_size * (1 if cfg.scn.is_lm else 4), cfg.eval_batches, device)
    forensics = Forensics(params, opt) if cfg.forensics else None
    run = _Run(data, model, step_model, params, opt, scaler, next_batch, val, forensics,
               autocast_context(device.type, dtype.autocast_dtype), fpt, compiled_before, data_s, model_s, to_device_s)
    saved, why = resume.load(out, cfg) if cfg.state_every else (None, None)
    if saved is not None:  # continue a run stopped part-way: the state after step saved["step"]
        resume.restore(saved, model, opt, scaler)
        run.saved, run.start = saved, saved["step"] + 1
        for _ in range(run.start * cfg.grad_accum):  # the batches the saved steps used
            next_batch()
        rec["resumed"] = {"from_step": run.start, "saved": saved["date"], "before": saved["loop"]}
    elif why:
        rec["resumed"] = {"from_step": 0, "not_loaded": why}
    run.setup_s = time.perf_counter() - t_setup
    return run


def _mark_passes(cfg: RunConfig, data: dict, world: int) -> None:
    """A language-model run says how often its steps read the training corpus over
    (``corpus_passes``: tokens read / training tokens) and from which step on a pass's worth is read
    (``one_pass_step``): every logged step from there reads text it may have read already. Windows
    are drawn at random, with replacement, so some text recurs sooner and some is never read."""
    n = data.get("n_train_tokens")
    if cfg.scn.is_lm and n:
        per_step = cfg.batch_size * cfg.grad_accum * cfg.seq_len * world
        data.update(tokens_per_step=per_step, corpus_passes=cfg.steps * per_step / n,
                    one_pass_step=math.ceil(n / per_step))


def _build(cfg: RunConfig, device: torch.device, rec: dict, data: TaskData) -> tuple[BenchModel, float, float]:
    """The model on ``device`` (FP8 where asked), described in ``rec``; seconds to build and to move."""
    torch.manual_seed(cfg.seed)
    t_model = time.perf_counter()
    model = build_model(ModelSpec.for_run(cfg, data), cfg.dtype)
    model_s = time.perf_counter() - t_model
    if model.pretrained_info is not None:
        rec["pretrained"] = model.pretrained_info
    built = getattr(model, "build_info", {})
    rec["metrics"].update({f"time/model_{k}": v for k, v in built.items() if k in ("import_s", "init_s")})
    if built.get("cached") is not None:
        rec["metrics"]["time/model_init_cached"] = int(built["cached"])
    _describe_trained(rec, cfg, data, model)
    bias = head_bias(data) if cfg.head_init == "prior" else None
    if bias is not None:  # start classification at the trivial predictor, not at random logits
        with torch.no_grad():
            model.head.bias.copy_(bias.to(model.head.bias.dtype))
    model.to(device)  # the first CUDA allocation: creates the context
    if cfg.dtype.fp8 != "none":
        convert_fp8(model, cfg.dtype.fp8)
    return model, model_s, time.perf_counter() - t_model - model_s


def _is_save_step(cfg: RunConfig, s: int) -> bool:
    return bool(cfg.state_every) and (s + 1) % cfg.state_every == 0 and s != cfg.steps - 1


def _is_log_step(cfg: RunConfig, s: int) -> bool:
    return s == 0 or (s + 1) % cfg.log_every == 0 or s == cfg.steps - 1 or _is_save_step(cfg, s)


def _loop(cfg: RunConfig, device: torch.device, out: Path, run: _Run, dist: Strategy, progress: bool,
          progress_desc: str | None) -> _Loop:
    """The steps this process runs (all, or those after a resumed state; the timed windows span
    them); stops early at a divergence (``on_divergence``)."""
    steps, start, saved = cfg.steps, run.start, run.saved
    timer = WindowTimer(device, min(_auto_warmup(cfg, device), steps - start - 1), steps - start, cfg.timing_windows)
    rows_f = open(out / "steps.jsonl" if dist.is_main else os.devnull, "w")
    log = StepLog(steps, device, rows_f, cfg.diverge_ratio, dist.all_reduce_mean_)
    if saved is not None:
        rows_f.write(saved["rows"])
        log.restore(saved["log"])
    lp = _Loop(timer, log, rows_f, saved["loop"] if saved is not None else {"train_s": 0.0, "eval_s": 0.0})
    lp.state_by = resume.state_by() if cfg.state_every else None
    # CUDA graphs and gradient accumulation: a .grad that is None takes the graph's output
    # buffer itself, which the next micro-batch's replay overwrites. Gradients kept allocated
    # (zeroed, not freed) are added into instead.
    keep_grads = cfg.cudagraphs and cfg.grad_accum > 1
    if keep_grads:
        for p in run.params:
            p.grad = torch.zeros_like(p)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=steps, initial=start, desc=progress_desc or cfg.run_id, leave=True, dynamic_ncols=True)
    lp.t_train = time.perf_counter()
    try:
        for step in range(start, steps):
            _step(cfg, device, run, lp, dist, step, keep_grads, bar)
            if bar is not None:
                bar.update(1)
            _between_steps(cfg, out, run, lp, dist, step)
    except Diverged:
        pass
    finally:
        if bar is not None:
            bar.refresh()  # the last redraw may be throttled: show the final count in executed notebooks
            bar.close()
    log.finish()
    timer.finish()
    lp.train_s = time.perf_counter() - lp.t_train
    return lp


def _step(cfg: RunConfig, device: torch.device, run: _Run, lp: _Loop, dist: Strategy, step: int,
          keep_grads: bool, bar) -> None:
    """One optimizer step over ``grad_accum`` micro-batches; on a logged step the log is flushed
    and a divergence raises ``Diverged``."""
    timer, log, start = lp.timer, lp.log, run.start
    timer.before_step(step - start)
    t_step = time.perf_counter()
    lr = lr_at(step, cfg.lr, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
    _set_lr(run.opt, lr)
    log_now = _is_log_step(cfg, step)
    loss_sum, logit_max = _micro_batches(cfg, run, dist)
    if step == start:
        check_compute_dtype(cfg, logit_max.dtype)
    gnorm, extras = _optimizer_step(run.opt, run.scaler, run.params, dist, cfg.grad_clip, timer,
                                    run.forensics if log_now else None, log_now)
    run.opt.zero_grad(set_to_none=not keep_grads)
    log.record(step, loss_sum, gnorm)
    timer.after_step(step - start)
    if step == start:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        lp.first_step_s = time.perf_counter() - t_step
    if log_now:
        log.flush(step, lr, {"max_logit": logit_max, "loss_scale": run.scaler.current_scale(), **extras})
        if log.diverged_step is not None and (cfg.on_divergence == "stop" or
                                              _weights_nonfinite(run.params, dist.all_reduce_mean_)):
            lp.dead_step = step if cfg.on_divergence == "continue" else None
            raise Diverged()
        if bar is not None and log.losses:
            bar.set_postfix(loss=f"{log.losses[-1]:.4g}", gnorm=f"{log.grad_norms[-1]:.3g}")


class ComputeDtypeError(RuntimeError):
    """The model computed its logits in another dtype than the run's config asks."""


def check_compute_dtype(cfg: RunConfig, got: torch.dtype) -> None:
    """Refuse a run whose first step's logits are not in its config's dtype (the head's, else
    autocast's, else the weights'): a compiled graph of another config ran, as torch 2.11's
    compile cache once served fp16 graphs to bf16 runs (``compile_cache.by_autocast``). One
    process only: a sharded strategy's mixed-precision policy casts on its own."""
    want = cfg.dtype.head_dtype or cfg.dtype.autocast_dtype
    want = TORCH_DTYPES[want] if want else cfg.dtype.torch_param_dtype
    if cfg.dist.strategy == "single" and got != want:
        raise ComputeDtypeError(f"{cfg.config}: the first step's logits came out in {got}, where the config computes "
                                f"them in {want}: another config's compiled graph ran (a stale torch.compile cache?)")


def _micro_batches(cfg: RunConfig, run: _Run, dist: Strategy) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward over the step's micro-batches: the summed loss and the largest
    |logit|, both on the device."""
    logit_max = loss_sum = None
    for micro in range(cfg.grad_accum):
        batch = run.next_batch()
        dist.set_grad_sync(run.step_model, micro == cfg.grad_accum - 1)
        if cfg.cudagraphs:
            # a new replay reuses the graph's output memory: the values kept across
            # micro-batches below are copies
            torch.compiler.cudagraph_mark_step_begin()
        with run.amp:
            # the max |logit| on every step keeps one compiled graph (logged steps only: a second)
            loss, lm = run.step_model(batch, logit_stats=True)
        logit_max = lm.clone() if logit_max is None else torch.maximum(logit_max, lm)
        if cfg.grad_accum > 1:
            loss = loss / cfg.grad_accum
        run.scaler.scale(loss).backward()
        loss_sum = loss.detach().clone() if loss_sum is None else loss_sum + loss.detach()
    return loss_sum, logit_max


def _between_steps(cfg: RunConfig, out: Path, run: _Run, lp: _Loop, dist: Strategy, step: int) -> None:
    """An evaluation (``eval_every``) and a saved state (``state_every``, or once at a logged step
    past a time budget's ``state_by``) after ``step``, both outside the timed windows."""
    if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step != cfg.steps - 1:
        with lp.timer.pause():
            te = time.perf_counter()
            q, _ = evaluate(run.model, run.val, cfg.scn.task, run.amp)
            lp.eval_s += time.perf_counter() - te
        lp.rows_f.write(json.dumps({"step": step, "eval": q}) + "\n")
    late = (lp.state_by is not None and _is_log_step(cfg, step) and step != cfg.steps - 1
            and time.time() >= lp.state_by)  # the time budget's deadline is near: keep the steps so far
    if late:
        lp.state_by = None
    if (_is_save_step(cfg, step) or late) and dist.is_main:
        with lp.timer.pause():
            log_state = lp.log.state()  # drains the log: steps.jsonl is complete to this step
            lp.rows_f.flush()
            trained = time.perf_counter() - lp.t_train
            lp.state_s += resume.save(out, cfg, step, run.model, run.opt, run.scaler, log_state,
                                      (out / "steps.jsonl").read_text(),
                                      {"train_s": lp.before["train_s"] + trained, "eval_s": lp.before["eval_s"] + lp.eval_s},
                                      steps_s=max(0.0, trained - (lp.first_step_s or 0.0) - lp.eval_s - lp.state_s))


def _finalise(cfg: RunConfig, device: torch.device, out: Path, rec: dict, run: _Run, lp: _Loop,
              dist: Strategy) -> None:
    """The final evaluation (and serving), then the record: metrics, status and reason, and the
    saved model (``save_model``)."""
    steps_done = len(lp.log.losses)  # a resumed run's included
    diverged_step = lp.log.diverged_step
    te = time.perf_counter()
    # evaluated even after a divergence: the record then shows what the diverged weights give
    quality, per_example = evaluate(run.model, run.val, cfg.scn.task, run.amp)
    eval_s = lp.eval_s + time.perf_counter() - te
    base_quality, base_per = evaluate_baseline(run.data, run.val)
    broken = diverged_step is None and not math.isfinite(quality.get("val_loss", 0.0))
    if broken:  # the last step wrote non-finite weights after the last loss was checked
        diverged_step = steps_done - 1
    if cfg.serve_list:  # trained in this config, served in another
        from benchlib.training.inference import serve_quality
        ts = time.perf_counter()
        rec["serve"] = serve_quality(run.model, run.val, cfg.serve_list, device, quality)
        eval_s += time.perf_counter() - ts
    lp.rows_f.write(json.dumps({"step": steps_done - 1, "eval": quality}) + "\n")
    lp.rows_f.close()

    m = rec["metrics"]
    m.update(speed_metrics(cfg, lp.timer, device, rec["env"].get("device_name"), run.fpt))
    m.update(memory_metrics(device, run.opt))
    m.update(quality_metrics(cfg, quality, per_example, base_quality, base_per, run.data.floors(run.val)))
    m.update(stability_metrics(lp.log, diverged_step, run.scaler))
    _time_metrics(m, cfg, run, lp, eval_s)
    dist.report(rec, out, cfg, lp.timer, lp.log.losses, run.opt)  # per-rank windows; multi-GPU aggregates
    status, reason, health = verdict(lp.log.losses, diverged_step, m["quality/beats_baseline"])
    m.update(health)
    rec["status"], rec["reason"] = status, reason
    if status == "diverged":
        rec["reason"] = _diverged_reason(cfg, broken, diverged_step, steps_done, lp.dead_step)
        if lp.dead_step is not None:
            m["stability/nonfinite_weights_step"] = lp.dead_step
    if cfg.save_model and dist.is_main:
        from benchlib.training.checkpoints import save_pretrained
        save_pretrained(run.model, out / "model", {"run_id": cfg.run_id, "scenario": cfg.scenario, "config": cfg.config,
                                                  "seed": cfg.seed, "steps": steps_done, "status": status,
                                                  "quality": quality, "commit": rec["env"].get("git_commit"),
                                                  "date": rec["env"].get("date")})
        rec["checkpoint"] = str(out / "model")
    # non-finite values as None: JSON readers reject NaN
    m.update({k: None for k, v in m.items() if isinstance(v, float) and not math.isfinite(v)})


def _time_metrics(m: dict, cfg: RunConfig, run: _Run, lp: _Loop, eval_s: float) -> None:
    """Where the run's wall time went (``time/*``), and what compiled during it."""
    m.update({"time/setup_s": run.setup_s, "time/data_s": run.data_s, "time/model_s": run.model_s,
              "time/first_step_s": lp.first_step_s, "time/train_s": lp.train_s, "time/eval_s": eval_s,
              "time/final_eval_s": eval_s - lp.eval_s})
    # the part that scales with steps: the loop's wall after the first step, less evaluations and saved
    # states (not median window x steps, which undercounts a loop on a shared GPU: docs/performance.md)
    m["time/steps_s"] = max(0.0, lp.train_s - (lp.first_step_s or 0.0) - lp.eval_s - lp.state_s)
    if cfg.state_every:
        m["time/state_s"] = lp.state_s
    m["time/to_device_s"] = run.to_device_s
    compiled = compile_cache.metrics(run.compiled_before)  # whatever compiled during the run
    if cfg.compile == "on" or compiled["compile/cache"]:
        m.update(compiled)


def _diverged_reason(cfg: RunConfig, broken: bool, diverged_step: int, steps_done: int, dead_step: int | None) -> str:
    if broken:
        return "the final evaluation's loss is non-finite: the weights hold inf/nan after the last step"
    return (f"loss non-finite or (5-step median) > {cfg.diverge_ratio}x initial at step {diverged_step}; "
            + (f"continued, then stopped after {steps_done} steps: a weight held inf/nan at step "
               f"{dead_step} (checked at logged steps), from where no step can recover"
               if dead_step is not None else
               f"{'stopped' if cfg.on_divergence == 'stop' else 'continued'} after {steps_done} steps"))


def _optimizer_step(opt: torch.optim.Optimizer, scaler: LossScaler, params: list, dist: Strategy, grad_clip: float,
                    timer: WindowTimer, forensics: Forensics | None, log_now: bool) -> tuple[torch.Tensor, dict]:
    """Unscale, clip, step (and the scaler's update): the pre-clip gradient norm and a logged step's
    extras (the largest gradient, ``forensics``' samples). Timed (``WindowTimer.optimizer``) on the
    steps that log nothing, as no other step pays for those extras."""
    extras = {}
    dist.before_optimizer()
    if forensics is not None:
        extras.update(forensics.gradients())  # as backward made them: scaled, in their dtype
    with timer.optimizer(timed=not log_now):
        scaler.unscale_(opt, params)
        if log_now:
            extras["grad_max"] = dist.grad_max([p.grad for p in params if p.grad is not None])
        gnorm = dist.clip_grad_norm_(params, grad_clip if grad_clip > 0 else float("inf"))
        if forensics is not None:
            forensics.before_step()
        scaler.step(opt)
        if forensics is not None:
            extras.update(forensics.after_step())
    return gnorm, extras


def _describe_trained(rec: dict, cfg: RunConfig, data, model: BenchModel) -> None:
    """The record says what was trained: ``run.vocab_size`` / ``num_labels`` are the data's (what
    was asked goes to ``data.asked``); ``model`` names the class, its parameters and weights."""
    asked = {k: getattr(cfg, k) for k in ("vocab_size", "num_labels")}
    trained = {"vocab_size": data.vocab_size, "num_labels": data.num_labels}
    rec["run"].update(trained)
    if asked != trained:
        rec["data"]["asked"] = asked
    bb = model.backbone
    rec["model"] = {"class": type(bb).__name__, "model_type": getattr(bb.config, "model_type", None),
                    "parameters": sum(p.numel() for p in model.parameters()),
                    "embedding_rows": bb.get_input_embeddings().weight.shape[0],
                    "num_labels": model.head.out_features if model.task in ("multilabel", "singlelabel") else None,
                    "weights": cfg.model_name_or_path or "initialised (from scratch)",
                    "matmuls": linear_shapes(bb)}


def _set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for g in opt.param_groups:
        if torch.is_tensor(g["lr"]):  # torchao keeps lr as a tensor so its compiled step never recompiles
            g["lr"].fill_(lr)
        else:
            g["lr"] = lr


@torch.no_grad()
def evaluate(model: BenchModel, val: list[dict], task: str, amp) -> tuple[dict[str, float], dict]:
    """Validation quality and its per-example values (``baselines.evaluate_predictor``)."""
    was_training = model.training
    model.eval()
    try:
        def logits(b):
            with amp:
                return model.logits(b)
        return evaluate_predictor(logits, val, task)
    finally:
        model.train(was_training)
