"""The result record: the contract between training, sweep and analysis.

One run writes ``result.json`` (this schema) and ``steps.jsonl`` (one row per logged step).
Metric keys are flat and namespaced (``quality/val_loss``, ``memory/peak_allocated_gib``);
seed 000's headline columns are ``throughput``, ``memory`` and ``quality``.

Statuses: ``ok``; ``degraded`` (the training loss rose from its minimum and stayed up:
``health``); ``stalled`` (did not clearly beat the trivial baseline: ``baselines.evidence``);
``diverged`` (non-finite loss, or one far above the initial loss); ``oom``; ``error``;
``skipped`` (this hardware or installation cannot run the config). Degraded and stalled runs
trained every step and carry every metric.

Optional sections (``OPTIONAL_KEYS``): ``data`` (source, split rule, and under ``asked`` what a
run asked for where the data decided otherwise), ``model`` (class, parameters, where its weights
came from), ``pretrained`` (``checkpoints.check_loaded``), ``checkpoint`` (``save_model``'s
folder), ``dist`` and ``ranks`` (multi-process runs), ``sweep`` (from the sidecar: ``SIDECAR``),
``backfill`` (older records), ``resumed`` (``training.resume``) and ``serve``
(``inference.serve_quality``). ``wall_s`` is the training process's time; a run resumed from saved
state counts only its last part there (``resumed.before`` holds the training and evaluation seconds
of the parts before). A run that shared its GPU (``sweep.runs_per_gpu`` > 1) has a
quality but no speed: ``records_frame`` blanks its ``SPEED_METRICS``.
"""
from __future__ import annotations

import contextlib
import functools
import gzip
import json
import math
import os
import sys
import uuid
from pathlib import Path
from typing import Any, Iterable, Iterator

from benchlib.core import env as envmod

SCHEMA_VERSION = 1
STATUSES = ("ok", "degraded", "stalled", "diverged", "oom", "error", "skipped")
# A sweep resumes past these; `error` (and anything unreadable) is run again.
FINISHED = ("ok", "degraded", "stalled", "diverged", "oom", "skipped")
# These trained to their end (or to their divergence) and carry measurements: throughput,
# memory, quality, the step log.
TRAINED = ("ok", "degraded", "stalled", "diverged")
# These ran every step: their speed and memory are measurements, whatever their quality.
COMPLETED = ("ok", "degraded", "stalled")

RECORD_KEYS = ("schema", "run_id", "status", "reason", "scenario", "config", "seed",
               "run", "dtype", "env", "metrics", "wall_s")
# Optional top-level keys, and the type each must have when present (None allowed).
OPTIONAL_KEYS = {"data": dict, "model": dict, "pretrained": dict, "checkpoint": str, "dist": dict, "ranks": list,
                 "sweep": dict, "backfill": dict, "resumed": dict, "serve": dict}

# Every metric a record may carry, with its meaning. Analysis reads only these names. Values
# are numbers, except the strings (`throughput_unit`, `quality_name`, `quality/learned_metric`,
# `baseline/name`) and booleans (`quality_higher_is_better`, `quality/beats_baseline`); any may
# be None (not measured, or non-finite). Each forensic `*_mean` is followed by its `*_max`.
METRICS = {
    "throughput": "tokens/s (LM) or samples/s (classification), mean over timed windows",
    "throughput_std": "std of throughput over timed windows",
    "throughput_unit": "'tokens/s' or 'samples/s'",
    "tokens_per_s": "tokens per second (all scenarios)",
    "samples_per_s": "sequences per second (all scenarios)",
    "step_ms": "median optimizer-step time in the timed windows (ms)",
    "step_ms_std": "std of per-window mean step time (ms)",
    "time/optimizer_ms": "the optimizer step (gradients ready to weights updated: unscale, clip, step, scaler "
                         "update), mean per unlogged step of a timed window, median over windows (ms; ``timing``)",
    "time/optimizer_share": "time/optimizer_ms over the window's mean step time, median over windows: the "
                            "share of a step a larger batch would amortise",
    "timed_steps": "steps inside the timed windows",
    "flops_per_token": "6N + 12*L*D*T training FLOPs per token (nanoGPT convention)",
    "mfu_pct": "model FLOPs utilisation vs the GPU's dense bf16 peak (%)",
    "mfu_matched_pct": "MFU vs the dense peak of the config's compute dtype (%)",
    "peak_tflops_bf16": "dense bf16 peak of the device used for mfu_pct",
    "memory": "headline memory (GiB): peak allocated on GPU, peak RSS on CPU",
    "memory/peak_allocated_gib": "torch.cuda.max_memory_allocated",
    "memory/peak_reserved_gib": "torch.cuda.max_memory_reserved",
    "memory/peak_rss_gib": "process peak resident set size",
    "memory/optimizer_state_bytes": "bytes held by optimizer state tensors",
    "quality": "headline quality: val_loss (LM), micro_f1 (multi-label), accuracy (single-label)",
    "quality_name": "which metric `quality` is",
    "quality_higher_is_better": "direction of `quality`",
    "quality/val_loss": "validation loss (fp32 reduction)",
    "quality/perplexity": "exp(val_loss)",
    "quality/loss_floor": "Bayes floor of val loss where the data's generator knows it (synthetic data: LM "
                          "entropy rate or MLM posterior; classification the posterior's expected BCE / CE)",
    "quality/excess_loss": "val_loss - loss_floor",
    "quality/micro_f1": "multi-label micro-F1 at threshold 0.5",
    "quality/macro_f1": "macro-F1 (multi-label: over labels present; single-label: over classes)",
    "quality/p_at_1": "precision@1: true labels among the top k scored, / k (single-label: P@1 = accuracy)",
    "quality/p_at_3": "precision@3", "quality/p_at_5": "precision@5",
    "quality/accuracy": "single-label accuracy",
    "quality_se": "standard error of `quality` over the evaluation examples (None where not estimated)",
    "quality/val_loss_se": "standard error of val_loss over the evaluation examples (LM: token-weighted per sequence)",
    "quality/p_at_1_se": "standard error of P@1 over the evaluation documents",
    "quality/p_at_3_se": "standard error of P@3 over the evaluation documents",
    "quality/p_at_5_se": "standard error of P@5 over the evaluation documents",
    "quality/macro_f1_se": "standard error of macro-F1 (bootstrap over the evaluation documents)",
    "quality/micro_f1_se": "standard error of micro-F1 (bootstrap over the evaluation documents)",
    "quality/accuracy_se": "standard error of accuracy over the evaluation examples",
    "quality/n_eval": "evaluation examples (sequences or documents) behind the quality metrics",
    "quality/learned_metric": "the threshold-free metric that decides whether the run learned: "
                              "val_loss (LM), p_at_1 (multi-label), accuracy (single-label)",
    "quality/baseline_gain": "paired mean gain of the learned metric over the trivial baseline, "
                             "oriented so that > 0 is better",
    "quality/baseline_gain_se": "standard error of the paired per-example difference behind baseline_gain",
    "quality/baseline_gain_needed": "gain needed to count as beating the baseline: max(5% of the "
                                    "baseline's value, 3 standard errors)",
    "quality/beats_baseline": "true when baseline_gain > baseline_gain_needed (false: status stalled, unless diverged)",
    "quality/floor": "the best value the learned metric can reach on this data, where known (the Bayes "
                     "floor of val loss, or the Bayes-optimal P@1 / accuracy of a synthetic generator)",
    "quality/gap_closed": "share of the gap between the trivial baseline and quality/floor that the run "
                          "closed on the learned metric: 0 = the baseline, 1 = the floor (None without a floor)",
    "baseline/name": "the trivial, input-blind predictor fitted on the training split: unigram (LM), "
                     "label_frequency (multi-label), majority_class (single-label)",
    "baseline/quality": "the trivial predictor's value of the headline `quality` metric",
    "baseline/val_loss": "the trivial predictor's val loss on the same evaluation examples",
    "baseline/perplexity": "the trivial predictor's perplexity (LM)",
    "baseline/micro_f1": "the trivial predictor's micro-F1 (multi-label)",
    "baseline/macro_f1": "the trivial predictor's macro-F1",
    "baseline/p_at_1": "the trivial predictor's precision@1 (classification)",
    "baseline/p_at_3": "the trivial predictor's precision@3 (classification)",
    "baseline/p_at_5": "the trivial predictor's precision@5 (classification)",
    "baseline/accuracy": "the trivial predictor's accuracy (single-label)",
    "stability/initial_loss": "training loss at step 0, before the first update",
    "stability/final_train_loss": "mean training loss of the last logged window",
    "stability/diverged_step": "first step whose loss was non-finite, or that began 5 steps whose median loss was > diverge_ratio x initial",
    "stability/degraded_step": "step of the loss minimum from which the smoothed training loss rose "
                               "by over 10% and stayed there to the end (health.degradation), or None",
    "stability/stalled_step": "stalled runs: first step whose smoothed training loss came within 1% of "
                              "its lowest (where it stopped improving), else None",
    "stability/nonfinite_steps": "optimizer steps whose gradients held inf/nan",
    "stability/nonfinite_weights_step": "on_divergence continue: the logged step at which a weight held inf/nan "
                                        "and the run stopped (no later step can recover)",
    "stability/skipped_steps": "steps skipped by the dynamic loss scaler",
    "stability/final_loss_scale": "loss scale at the end (1 when unscaled)",
    "stability/max_grad_norm": "largest pre-clip gradient L2 norm seen",
    "stability/max_logit": "largest |logit| of the first sequence of the batch, at the logged steps",
    # forensics (train.forensics): over a strided sample of elements, at the logged steps;
    # gradients as backward made them (scaled, in their dtype)
    "forensics/grad_zero_frac_mean": "fraction of gradient elements exactly 0, mean over logged steps",
    "forensics/grad_fp16_subnormal_frac_mean": "fraction of gradient elements with 0 < |g| < 6.1e-5 "
                                               "(below fp16's smallest normal), mean over logged steps",
    "forensics/grad_fp16_flush_frac_mean": "fraction of gradient elements with 0 < |g| < 2^-25 (0 once "
                                           "stored in fp16), mean over logged steps",
    "forensics/grad_nonfinite_frac_mean": "fraction of gradient elements inf/nan, mean over logged steps",
    "forensics/exp_avg_sq_zero_frac_mean": "fraction of Adam second-moment entries stored as exactly 0 after the "
                                           "step where the gradient was finite and non-zero (underflow: in exact "
                                           "arithmetic v >= (1-beta2) g^2 > 0), mean over logged steps; None "
                                           "where the states are not floats (8-bit)",
    "forensics/exp_avg_sq_stuck_frac_mean": "fraction of Adam second-moment entries stored bit-identical after "
                                            "the step among those whose gradient had g^2 < v (in exact arithmetic "
                                            "v beta2 + (1-beta2) g^2 < v: v should shrink); ~1 for bf16 rounded to "
                                            "nearest at beta2 0.999 ((1-beta2) v below half a bf16 ulp: v never "
                                            "decays), ~0 for fp32; high under stochastic rounding too, where a step leaves most entries unchanged "
                                            "and moves a few by an ulp (unbiased: v decays on average), so it diagnoses "
                                            "round-to-nearest storage only; mean over logged steps (skipped steps and steps "
                                            "where no sampled v should shrink left out); None where the states are "
                                            "not floats (8-bit)",
    "forensics/update_unchanged_frac_mean": "fraction of weights an optimizer step left bit-identical, "
                                            "mean over logged steps (skipped steps left out)",
    "forensics/update_lost_frac_mean": "share of the intended update's mass the weights did not receive: "
                                       "sum((intended - applied) * sign(intended)) / sum(|intended|), intended = "
                                       "AdamW in fp32 from the stored states, gradient and hyper-parameters, "
                                       "applied = weight after - before in fp32; ~1 where updates round away, ~0 "
                                       "for fp32 weights and (in expectation) stochastic rounding, < 0 where the "
                                       "weights moved further than asked; mean over logged steps (skipped steps "
                                       "left out); None for optimizers other than AdamW on float states",
    "forensics/update_lost_frac_decay_mean": "update_lost_frac over the parameter groups with weight decay "
                                             "(matrices), mean over logged steps",
    "forensics/update_lost_frac_no_decay_mean": "update_lost_frac over the parameter groups without weight "
                                                "decay (biases, norms), mean over logged steps",
    "energy/joules": "GPU energy over the timed windows (NVML total-energy counter of the run's GPU, env.energy_gpu_uuid)",
    "energy/j_per_unit": "joules per token (LM) or per sample (classification)",
    "time/startup_s": "from the process start (interpreter / notebook kernel) to the run's start: imports",
    "time/setup_s": "model + data + optimizer construction",
    "time/data_s": "loading the data (from the disk cache when warm), part of setup",
    "time/model_s": "building the model on the CPU (importing transformers), or loading it built (training.init_cache), part of setup",
    "time/model_import_s": "importing transformers' model classes, part of model_s",
    "time/model_init_s": "building the from-scratch model's initial weights, or loading them (training.init_cache), part of model_s",
    "time/model_init_cached": "1 when the initial weights came from training.init_cache, 0 when built (and stored)",
    "time/to_device_s": "moving the model to the device (the first CUDA allocation creates the context), part of setup",
    "time/first_step_s": "first optimizer step (includes compilation)",
    # compiled runs (training.compile_cache): torch.compile's on-disk caches, folder env.compile_cache_dir
    "compile/graph_cache_hits": "compiled graphs Inductor loaded from its cache (FX graph cache) in this run",
    "compile/graph_cache_misses": "compiled graphs Inductor had to compile (not in its cache) in this run",
    "compile/autograd_cache_hits": "forward-backward graphs AOTAutograd loaded from its cache in this run",
    "compile/autograd_cache_misses": "forward-backward graphs AOTAutograd had to build in this run",
    "compile/cache": "hit: every compiled graph came from the cache; miss: none did; partial: some did",
    "time/train_s": "all training steps",
    "time/steps_s": "the training loop's wall after the first step, less its evaluations: the part of a run that scales with steps (before 2026-11-24: the median timed window x the steps after the first)",
    "time/eval_s": "all evaluation",
    "time/final_eval_s": "the evaluation (and serving) after the last step, part of time/eval_s but not of time/train_s",
    "time/state_s": "writing the training state (state_every), left out of time/steps_s and the timed windows",
    # multi-process runs (benchlib.parallel.launch); seed 003's aggregation over rank{r}.jsonl:
    # per timed window, time averaged over ranks and rates summed over ranks, the first
    # window excluded, then mean and std over windows
    "dist/world_size": "processes (GPUs) the run trained on; 1 for single",
    "dist/windows": "timed windows in the dist/ aggregates (the first excluded when there are two or more)",
    "dist/time_s": "window time, mean over ranks, mean over windows (s)",
    "dist/time_s_std": "std over windows of dist/time_s",
    "dist/step_ms": "step time, mean over ranks, mean over windows (ms)",
    "dist/step_ms_std": "std over windows of dist/step_ms",
    "dist/tokens_per_s": "tokens/s summed over ranks, mean over windows",
    "dist/tokens_per_s_std": "std over windows of dist/tokens_per_s",
    "dist/samples_per_s": "sequences/s summed over ranks, mean over windows",
    "dist/samples_per_s_std": "std over windows of dist/samples_per_s",
    "dist/throughput": "dist/tokens_per_s (LM) or dist/samples_per_s (classification)",
    "dist/throughput_std": "std over windows of dist/throughput",
    "dist/straggler_pct": "slowest rank's median step time over the fastest's, minus 1 (%)",
    "dist/peak_allocated_gib_max": "largest per-device peak allocated memory over ranks (GiB)",
    "dist/peak_reserved_gib_max": "largest per-device peak reserved memory over ranks (GiB)",
    "dist/peak_rss_gib_max": "largest process peak RSS over ranks (GiB)",
    "dist/param_bytes_max": "parameter bytes held by one rank (its shards under FSDP), largest over ranks",
    "dist/optimizer_state_bytes_max": "optimizer-state bytes held by one rank, largest over ranks",
}
METRICS = {k2: v2 for k, v in METRICS.items() for k2, v2 in [(k, v)] + (
    [(k[:-5] + "_max", f"as {k[10:]}, max over logged steps")] if k.startswith("forensics/") and k.endswith("_mean") else [])}


SPEED_METRICS = ("throughput", "throughput_std", "tokens_per_s", "samples_per_s", "step_ms", "step_ms_std",
                 "mfu_pct", "mfu_matched_pct", *[k for k in METRICS if k.startswith(("time/", "energy/"))])
"""What other runs on the same GPU change: time, rates and the GPU's energy counter. Memory
stays: the allocator's peaks count this process's tensors alone."""


def shared_gpu(rec: dict) -> bool:
    """Whether the sweep ran other runs side by side on this run's GPU (``--runs_per_gpu``)."""
    return ((rec.get("sweep") or {}).get("runs_per_gpu") or 1) > 1


def split_seeds(records: list[dict]) -> set[tuple]:
    """(arm, scenario, seed) lanes of the runs dealt a GPU per lane (``sweep.seed_per_gpu``) whose
    configs nonetheless ran on several GPUs (``env.gpu_uuid``): the differences between their
    configs include between-GPU differences, which the design meant to keep out."""
    gpus: dict[tuple, set] = {}
    for r in records:
        if (r.get("sweep") or {}).get("seed_per_gpu") and (u := (r.get("env") or {}).get("gpu_uuid")):
            gpus.setdefault(_lane(r), set()).add(u)
    return {k for k, g in gpus.items() if len(g) > 1}


def _lane(rec: dict) -> tuple:
    """A run's (arm, scenario, seed): the unit ``--seed_per_gpu`` gives one GPU."""
    return ((rec.get("run") or {}).get("extra") or {}).get("arm"), rec.get("scenario"), rec.get("seed")


class CorruptRecord(ValueError):
    pass


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` (its folder made), renamed to ``path`` when the block
    completes and removed when it fails: a crash never leaves a half-written file that looks
    finished, and concurrent writers leave the last complete file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """``obj`` as JSON at ``path``, atomically (``atomic_file``) and synced to disk."""
    with atomic_file(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=_json_default, allow_nan=True)
        f.flush()
        os.fsync(f.fileno())


def json_safe(o: Any) -> Any:
    """Strict JSON values, recursively: NaN, inf, pandas NA/NaT -> None; numpy scalars -> Python;
    tuples -> lists; keys and other objects (paths) -> str. What every writer of a JSON summary uses."""
    if isinstance(o, dict):
        return {str(k): json_safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_safe(v) for v in o]
    if type(o).__name__ in ("NAType", "NaTType"):
        return None
    if hasattr(o, "item") and getattr(o, "ndim", 0) == 0:
        o = o.item()
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    return o if o is None or isinstance(o, (bool, int, str)) else str(o)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def validate(rec: Any, where: str = "record") -> dict:
    if not isinstance(rec, dict):
        raise CorruptRecord(f"{where}: not a JSON object")
    missing = [k for k in RECORD_KEYS if k not in rec]
    if missing:
        raise CorruptRecord(f"{where}: missing keys {missing}")
    if rec["schema"] != SCHEMA_VERSION:
        raise CorruptRecord(f"{where}: schema {rec['schema']} != {SCHEMA_VERSION}")
    if rec["status"] not in STATUSES:
        raise CorruptRecord(f"{where}: status {rec['status']!r} not in {STATUSES}")
    wrong = [f"{k} ({type(rec[k]).__name__}, not {t.__name__})" for k, t in OPTIONAL_KEYS.items()
             if rec.get(k) is not None and not isinstance(rec[k], t)]
    if wrong:
        raise CorruptRecord(f"{where}: wrong types {wrong}")
    if not isinstance(rec["metrics"], dict):
        raise CorruptRecord(f"{where}: metrics is not a JSON object")
    unknown = [k for k in rec["metrics"] if k not in METRICS]
    if unknown:
        raise CorruptRecord(f"{where}: unknown metric keys {unknown}")
    return rec


RESULT = "result.json"
SIDECAR = "sweep.json"
"""Beside a run's ``result.json``: what the sweep or a scheduler says of the run that training's
record cannot hold (the ``sweep`` entry: wall time, fixed cost, job, loaded checkpoint,
``runs_per_gpu``, ``lost_checkpoints``; a failed notebook's ``status`` and ``reason``; ``run`` and
``run_reading_was`` where a reading key changed). It names its record (``of``: run id and date);
``read_record`` lays its keys over that record while ``result.json`` stays as written."""


def write_record(out_dir: str | os.PathLike, rec: dict) -> Path:
    """The one writer of a run's ``result.json``: ``rec`` less its ``_`` keys, atomically."""
    path = Path(out_dir) / RESULT
    write_json_atomic(path, {k: v for k, v in rec.items() if not k.startswith("_")})
    return path


def _identity(rec: dict) -> list:
    return [rec.get("run_id"), (rec.get("env") or {}).get("date")]


def _sidecar(path: Path, rec: dict) -> dict:
    """The sidecar beside ``path`` if it belongs to ``rec`` (a stale one is ignored), less ``of``."""
    try:
        side = json.loads((path.parent / SIDECAR).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as e:
        raise CorruptRecord(f"{path.parent / SIDECAR}: {e}") from None
    return {k: v for k, v in side.items() if k != "of"} if side.get("of") == _identity(rec) else {}


def write_sidecar(out_dir: str | os.PathLike, rec: dict, **keys) -> None:
    """Lay ``keys`` over the record ``rec`` of ``out_dir`` in its sidecar (``SIDECAR``), over
    what the sidecar said of it before."""
    path = Path(out_dir) / RESULT
    old = _sidecar(path, rec) if path.exists() else {}
    write_json_atomic(path.parent / SIDECAR, {"of": _identity(rec), **old, **keys})


def read_record(path: str | os.PathLike) -> dict:
    """A run's record: its ``result.json`` with its sidecar (``SIDECAR``) laid over it."""
    try:
        with open(path) as f:
            rec = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise CorruptRecord(f"{path}: {e}") from None
    validate(rec, str(path))
    return validate({**rec, **_sidecar(Path(path), rec)}, str(path))


STEPS_FILES = ("steps.jsonl", "steps.jsonl.gz")
"""A run's step log as training writes it (older committed studies: gzipped and thinned)."""

STEPS_TABLE = "steps.parquet"
"""A compacted folder's step logs (``dtype-bench compact``): one row per logged step, ``run`` (the
run's folder relative to the table's), a typed column per number logged and ``json`` for anything
else; each value comes back as it was logged (``read_steps``)."""


def steps_file(folder: str | os.PathLike) -> Path | None:
    """The run folder's step log, or None: its file, or in a compacted folder the path that file
    had (it does not exist: ``read_steps`` reads its rows from the steps table above it)."""
    folder = Path(folder)
    found = next((folder / n for n in STEPS_FILES if (folder / n).exists()), None)
    if found is not None:
        return found
    table = _steps_table_of(folder)
    return folder / STEPS_FILES[0] if table is not None and table[1] in _steps_table(*_stamp(table[0])) else None


def read_steps(path: str | os.PathLike) -> list[dict]:
    """A step log's rows as training logged them: from its file, or (a path ``steps_file`` gave
    for a compacted run) from the steps table above it."""
    path = Path(path)
    if not path.exists():
        table = _steps_table_of(path.parent)
        rows = _steps_table(*_stamp(table[0])).get(table[1]) if table else None
        if rows is None:
            raise FileNotFoundError(f"{path}: no such step log, nor its run in a {STEPS_TABLE} above it")
        return [dict(r) for r in rows]
    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
        return [json.loads(line) for line in f if line.strip()]


KEEP_ROWS = 500


def kept_rows(rows: list[dict], keep: int = KEEP_ROWS) -> list[dict]:
    """The rows a compacted step log keeps (``dtype-bench compact``), in order: at most about
    ``keep`` plain (step, loss, grad_norm) rows evenly spaced, every row that holds more
    (intervals, evaluations, non-finite losses), the last step and the lowest loss. Keeping them
    again keeps them all, so what is drawn from a run's log (``analysis.tables.loss_curves``) is
    the same before and after its study is compacted."""
    plain = [r for r in rows if set(r) <= {"step", "loss", "grad_norm"}
             and all(isinstance(v, (int, float)) and math.isfinite(v) for v in r.values())]
    every = 1 if len(plain) <= keep + 2 else math.ceil(len(plain) / keep)  # + the last and the lowest
    best = min((r for r in plain if "loss" in r), key=lambda r: r["loss"], default=None)
    drop = {id(r) for i, r in enumerate(plain) if i % every and r is not rows[-1] and r is not best}
    return [r for r in rows if id(r) not in drop]


def _steps_table_of(folder: Path) -> tuple[Path, str] | None:
    """The steps table in a folder above ``folder`` and the run's key there, or None."""
    for up in list(folder.parents)[:6]:
        if (up / STEPS_TABLE).is_file():
            return up / STEPS_TABLE, folder.relative_to(up).as_posix()
    return None


def _stamp(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path), st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=8)
def _steps_table(path: str, mtime_ns: int, size: int) -> dict[str, list[dict]]:
    """A steps table's rows by run (cached while the file is unchanged)."""
    import pyarrow.parquet as pq
    out: dict[str, list[dict]] = {}
    for row in pq.read_table(path).to_pylist():
        run, extra = row.pop("run"), row.pop("json", None)
        rec = {k: v for k, v in row.items() if v is not None}
        out.setdefault(run, []).append({**rec, **(json.loads(extra) if extra else {})})
    return out


def read_steps_table(table: str | os.PathLike) -> dict[str, list[dict]]:
    """Every step log of a steps table: run (its folder relative to the table's) -> rows."""
    return {run: [dict(r) for r in rows] for run, rows in _steps_table(*_stamp(Path(table))).items()}


def write_steps_table(path: str | os.PathLike, logs: dict[str, list[dict]]) -> None:
    """Write step logs (run key -> rows) as a steps table (``STEPS_TABLE``), atomically; the same
    logs give the same bytes. A key's values go in a typed column when they are all ints (int64)
    or all floats (float32 where each is one exactly, else float64); other values (dicts, strings,
    booleans, None, a key with ints and floats) go in the row's ``json``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = [(run, r) for run in sorted(logs) for r in logs[run]]
    kinds: dict[str, set] = {}
    for _, r in rows:
        for k, v in r.items():
            kinds.setdefault(k, set()).add("bool" if isinstance(v, bool) else type(v).__name__)
    typed = {}
    for k, ks in kinds.items():
        if k in ("run", "json"):
            continue
        if ks == {"int"}:
            typed[k] = pa.int64()
        elif ks == {"float"}:
            exact = all(math.isnan(r[k]) or float(np.float32(r[k])) == r[k] for _, r in rows if k in r)
            typed[k] = pa.float32() if exact else pa.float64()
    columns = {"run": pa.array([run for run, _ in rows], pa.string()).dictionary_encode()}
    for k, t in typed.items():
        absent = np.array([k not in r for _, r in rows])
        columns[k] = pa.array([r.get(k, 0) for _, r in rows], t, mask=absent)
    extra = [{k: v for k, v in r.items() if k not in typed} for _, r in rows]
    columns["json"] = pa.array([json.dumps(e, allow_nan=True) if e else None for e in extra], pa.string())
    floats = [k for k, t in typed.items() if pa.types.is_floating(t)]
    # numbers in plain encoding, their bytes split by significance (the exponents compress
    # together): half the size of dictionary-encoded floats, which never repeat
    with atomic_file(path) as tmp:
        pq.write_table(pa.table(columns), tmp, compression="zstd", compression_level=19, use_dictionary=["run"],
                       use_byte_stream_split=floats or False)


RECORDS_TABLE = "records.jsonl.gz"
"""A compacted folder's records (``dtype-bench compact``): one JSON object a line, each a
``result.json`` as written plus ``_file`` (where it was, relative to the table's folder). JSON
lines keep every record exactly, older versions' keys included, where a columnar table would not."""


def compacted(*folders: str | os.PathLike) -> list[Path]:
    """Those of ``folders`` that hold a records table (``dtype-bench compact``)."""
    return [Path(f) for f in folders if (Path(f) / RECORDS_TABLE).is_file()]


STAGE_SUFFIX = ".pretrain"  # a study's pretrain stage keeps its runs in <study>.pretrain, beside the study's folder


def pretrain_folder(study_dir: str | os.PathLike) -> Path:
    """The folder of ``study_dir``'s pretrain stage (``<study>.pretrain`` beside it), whether or not it exists."""
    p = Path(study_dir)
    return p.with_name(p.name + STAGE_SUFFIX)


def find_records(root: str | os.PathLike) -> list[Path]:
    """The ``result.json`` files below ``root`` (a fresh study's records)."""
    return sorted(Path(root).rglob("result.json"))


def find_tables(root: str | os.PathLike) -> list[Path]:
    """The records tables (``RECORDS_TABLE``) at and below ``root`` (compacted folders)."""
    return sorted(Path(root).rglob(RECORDS_TABLE))


def read_table(path: str | os.PathLike, strict: bool = False) -> list[dict]:
    """The records of one records table, each with ``_path``: where its ``result.json`` was
    (it need not exist), so that the run's step log and rank logs are found beside it as in a
    fresh study. A line that is no valid record is skipped (or raises with ``strict``)."""
    path = Path(path)
    out = []
    try:
        with gzip.open(path, "rt") as f:
            lines = [line for line in f if line.strip()]
    except (OSError, EOFError) as e:
        raise CorruptRecord(f"{path}: {e}") from None
    for i, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
            file = rec.pop("_file", None) if isinstance(rec, dict) else None
            if not isinstance(file, str):
                raise CorruptRecord(f"{path}:{i}: no _file (where the record's result.json was)")
            validate(rec, f"{path}:{i}")
        except (json.JSONDecodeError, CorruptRecord) as e:
            if strict:
                raise CorruptRecord(str(e)) from None
            excluded(e if isinstance(e, CorruptRecord) else f"{path}:{i}: {e}")
            continue
        rec["_path"] = str(path.parent / file)
        out.append(rec)
    return out


def write_table(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """Write ``records`` (each with ``_path`` below the table's folder) as a records table,
    sorted by where they were, atomically; the same records give the same bytes (no name and
    no time in the gzip header)."""
    path = Path(path)
    lines = []
    for rec in records:
        file = Path(rec["_path"]).resolve().relative_to(path.parent.resolve()).as_posix()
        lines.append((file, json.dumps({"_file": file, **{k: v for k, v in rec.items() if not k.startswith("_")}},
                                       default=_json_default, allow_nan=True)))
    with atomic_file(path) as tmp, open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as z:
        z.write("".join(line + "\n" for _, line in sorted(lines)).encode())


def load_records(root: str | os.PathLike, strict: bool = False) -> list[dict]:
    """All readable records under ``root``, each with ``_path`` (its ``result.json``): a fresh
    study's ``result.json`` files and a compacted one's records tables (``read_table``), the same
    records either way. Where both hold a run, its ``result.json`` wins (a run made again since).
    Corrupt ones raise with ``strict``; else each is left out with a warning line naming its file
    (``excluded``), never silently: what reads the study (a scenario's reference config, a
    config's seeds) may change without it. Runs the sweep interrupted (``interrupted``) are left
    out too: not a failure of their config, they run again."""
    found: dict[str, dict] = {}
    for t in find_tables(root):
        for rec in read_table(t, strict):
            found[rec["_path"]] = rec
    for p in find_records(root):
        try:
            rec = read_record(p)
        except CorruptRecord as e:
            if strict:
                raise
            excluded(e)
            continue
        rec["_path"] = str(p)
        found[str(p)] = rec
    return [found[k] for k in sorted(found, key=lambda k: Path(k).parts) if not interrupted(found[k])]


def excluded(why: Exception | str) -> None:
    """Say on stderr, in one line, that an unreadable record (``why`` names its file) is left out."""
    print(f"warning: excluded {why} (not a readable record: this analysis goes on without the run; a sweep "
          f"over its study runs it again)", file=sys.stderr)


def interrupted(rec: dict) -> bool:
    """A run the sweep stopped (Ctrl-C, a time budget's deadline) after its training had written a
    record: kept as ``error`` so that the next sweep runs it again."""
    return rec.get("status") == "error" and bool((rec.get("sweep") or {}).get("interrupted"))


def corpus_passes(record: dict) -> tuple[float, int] | None:
    """For a language-model run: how many times its steps read the training corpus over (tokens read /
    the corpus's training tokens), and the step by which it has read one pass's worth of tokens
    (windows are drawn at random, with replacement, so some text recurs before it and some is unread
    after it); what the run recorded, else computed from its settings; None where the record does not
    say (a classification run reads documents)."""
    run, data = record.get("run") or {}, record.get("data") or {}
    if "one_pass_step" in data:
        return data["corpus_passes"], data["one_pass_step"]
    n, steps = data.get("n_train_tokens"), run.get("steps")
    per_step = ((run.get("batch_size") or 0) * (run.get("grad_accum") or 1) * (run.get("seq_len") or 0)
                * ((run.get("dist") or {}).get("nproc") or 1))
    if record.get("scenario") not in ("A", "B") or not n or not steps or not per_step:
        return None
    return steps * per_step / n, math.ceil(n / per_step)


def records_frame(records: Iterable[dict]) -> "pandas.DataFrame":  # noqa: F821
    """One row per record: identity columns, status, ``shared_gpu``, ``split_seed``, every metric
    (the speed of a run that shared its GPU, or of a seed dealt one GPU whose configs ran on several
    (``split_seeds``), blanked: NaN), the run parameters (prefixed ``run.``) and, for a
    language-model run, ``one_pass_step`` (``corpus_passes``)."""
    import pandas as pd
    rows, records = [], list(records)
    split = split_seeds(records)
    for r in records:
        row = {"run_id": r["run_id"], "scenario": r["scenario"], "config": r["config"],
               "seed": r["seed"], "status": r["status"], "reason": r.get("reason"),
               "device": r["env"].get("device_name"), "wall_s": r.get("wall_s"),
               "path": r.get("_path"), "shared_gpu": shared_gpu(r),
               "split_seed": _lane(r) in split}
        row.update(r["metrics"])
        if row["split_seed"]:  # its time is its own, but compares configs across GPUs: wall_s stays
            row.update({k: math.nan for k in SPEED_METRICS if k in row})
        if row["shared_gpu"]:
            row.update({k: math.nan for k in ("wall_s", *SPEED_METRICS) if k in row})
        row.update({f"run.{k}": v for k, v in r["run"].items() if not isinstance(v, dict)})
        row["one_pass_step"] = p[1] if (p := corpus_passes(r)) else None
        rows.append(row)
    return pd.DataFrame(rows)


def new_record(cfg, device) -> dict:
    """The record of a run before it runs (status ``error`` until the run says otherwise): every
    writer of a record (the trainer, the torchrun launcher, the sweep) starts from this one."""
    return {"schema": SCHEMA_VERSION, "run_id": cfg.run_id, "status": "error", "reason": None,
            "scenario": cfg.scenario, "config": cfg.dtype.name, "seed": cfg.seed,
            "run": cfg.to_dict(), "dtype": cfg.dtype.to_dict(), "env": envmod.environment(device),
            "metrics": {}, "wall_s": None, "data": {}}


def short_commit(c: str) -> str:
    """A commit as git abbreviates it (12 hex digits), a ``-dirty`` suffix kept."""
    head = c.split("-")[0]
    return head[:12] + c[len(head):]


def describe_environment(records: list[dict], brief: bool = False) -> str:
    """One line for a table's caption: device, versions, commit and dates of the records, each
    value once, commits abbreviated; ``brief`` (a chart's subtitle): more than three commits
    are counted, not listed."""
    def vals(key):
        found = {str(r["env"].get(key)) for r in records if r["env"].get(key)}
        if key == "git_commit":
            found = {short_commit(c) for c in found}
            if brief and len(found) > 3:
                return f"{len(found)} commits"
        return ", ".join(sorted(found)) or "?"
    dates = sorted(str(r["env"].get("date", ""))[:10] for r in records if r["env"].get("date"))
    when = dates[0] if dates and dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}" if dates else "?"
    cuda = f" (CUDA {vals('cuda')})" if any(r["env"].get("cuda") for r in records) else ""
    commits = vals("git_commit")
    commits = commits if commits.endswith(" commits") else f"commit {commits}"
    return (f"Device: {vals('device_name')}; torch {vals('torch')}{cuda}, torchao {vals('torchao')}; "
            f"{commits}; {when}")


def fmt(v) -> str:
    """A number for a table cell: 4 significant digits, '-' when missing."""
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def last_line(text: str | None) -> str:
    """The last non-blank line of a text (a traceback's message)."""
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""
