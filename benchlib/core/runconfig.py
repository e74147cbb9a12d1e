"""One typed run configuration: the notebook's parameters, the CLI flags, the study
files and the result record all map onto ``RunConfig``. Unknown keys and values of the
wrong type fail loudly, naming the key, the closest valid key and the expected type.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import os
import re
import textwrap
import types
import typing
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from benchlib.core.errors import UserError
from benchlib.core.dtypes import UnknownNameError, closest, get_config, get_mode
from benchlib.core.scenarios import DATASETS, dataset_problem, get_scenario
from benchlib.core.sizes import LARGE_SIZES, SHAPES, SYNTH_NUM_LABELS, Size, micro_batch, shape

_CHECK_PATHS: ContextVar[bool] = ContextVar("check_paths", default=True)


@contextmanager
def paths_unchecked():
    """Within: a RunConfig's local ``data`` path need not exist yet (a study file names every
    scenario's corpus; a sweep checks the paths of the runs it will execute, ``path_problem``)."""
    token = _CHECK_PATHS.set(False)
    try:
        yield
    finally:
        _CHECK_PATHS.reset(token)


class ConfigError(UserError):
    """A bad run parameter: the message names the key, the value and what is valid."""

Strategy = Literal["single", "ddp", "fsdp2", "fsdp1", "fsdp_manual"]


@dataclass
class DistConfig:
    """How one run spreads over processes (seeds 003 and 004): ``strategy`` and ``nproc``, then
    performance levers, recorded with every run (docs/multi_gpu.md measured them on 2x H200)."""

    strategy: Strategy = "single"
    """How the processes share the model: single (one process), ddp, fsdp2 (fully_shard), fsdp1
    (FullyShardedDataParallel) or fsdp_manual (benchlib.parallel.fsdp_manual)."""
    nproc: int = 1
    """Processes (GPUs) on this host; torchrun is launched when > 1 or strategy != single."""
    limit_all_gathers: bool = True
    """FSDP1: rate-limit all-gathers so at most two blocks' weights are gathered at once."""
    timeout_s: float = 600.0
    """Process-group timeout: a collective that waits longer fails the run instead of hanging."""
    bucket_cap_mb: float = 100.0
    """DDP gradient bucket size in MB. Smaller buckets start the all-reduce earlier in
    backward but, under torch.compile, split the graph into more pieces (DDPOptimizer cuts at
    bucket boundaries). 100 was the fastest of 25/50/100/200 for GPT-2 124M on 2x H200."""
    static_graph: bool = True
    """DDP: the set of used parameters never changes, so DDP can skip per-step bookkeeping.
    Only without gradient accumulation: DDP's static graph does not support no_sync."""
    reshard: Literal["all", "all_but_last", "none"] = "all_but_last"
    """FSDP2: which blocks free their gathered weights after forward (all, all_but_last or
    none; ``reshard_after_forward``): all = least memory, one more all-gather in backward; none =
    DDP-like parameter memory, fewest collectives. The root never reshards after forward."""
    prefetch: int = 1
    """FSDP2: explicit forward/backward prefetch of the next N blocks (0 = FSDP's implicit
    prefetch only); FSDP1: forward_prefetch on when > 0."""
    local_shards: bool = False
    """FSDP2: the optimizer and gradient clipping work on each parameter's local shard, a plain
    tensor sharing the DTensor's storage, instead of the DTensors themselves. Same numbers
    (per-element AdamW on the same shards; the norm's squares summed over ranks), without
    DTensor's per-op, per-tensor dispatch on the host."""
    mp: Literal["policy", "autocast"] = "policy"
    """FSDP2/manual with AMP configs: policy = gather weights in the autocast dtype, reduce
    gradients in fp32 (MixedPrecisionPolicy); autocast = gather fp32 weights, cast per op.
    autocast is exactly the single-device numerics, at twice the all-gather bytes."""
    compile_unit: Literal["model", "blocks"] = "model"
    """Where the run compiles (``compile``): one graph of the whole wrapped model, or one per
    transformer block. Per block works with DDP, FSDP2 and manual: the root's embedding, head
    and loss run eager, and DDP's bucket hooks fire between the compiled blocks' backwards."""
    optimize_ddp: Literal["ddp_optimizer", "python_reducer", "no_optimization"] = "ddp_optimizer"
    """DDP under torch.compile: how the all-reduces meet backward
    (``torch._dynamo.config.optimize_ddp``). ddp_optimizer = dynamo splits the graph at bucket
    boundaries so each bucket's all-reduce overlaps the rest of backward; python_reducer = one
    graph, backward traced by compiled autograd with the all-reduces in it; no_optimization =
    one graph, every all-reduce after backward."""

    def __post_init__(self) -> None:
        _check_types(self)
        if self.nproc < 1:
            raise ConfigError(f"dist.nproc must be >= 1, got {self.nproc}")
        if self.strategy == "single" and self.nproc > 1:
            raise ConfigError(f"dist.strategy='single' runs one process; dist.nproc={self.nproc} needs "
                              f"ddp|fsdp2|fsdp1|fsdp_manual")
        if self.timeout_s <= 0 or self.bucket_cap_mb <= 0 or self.prefetch < 0:
            raise ConfigError("dist.timeout_s and dist.bucket_cap_mb must be > 0 and dist.prefetch >= 0")


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field of the dataclass ``cls`` that has an attribute docstring (the string right
    below it) -> that docstring: the CLI's help and the fields' documentation are one text."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__).body
    docs = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\bcf)(?<!\bet al)\.(?=\s|$)")


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring as one line of plain text (``code`` marks dropped):
    up to the first full stop followed by a space, not counting "e.g.", "et al." and the like."""
    text = " ".join(doc.replace("``", "").split())
    end = _SENTENCE_END.search(text)
    return text[:end.end()] if end else text


SECTIONS = {"dist": DistConfig}
"""Sub-configurations of ``RunConfig``: key -> dataclass. A study file, a notebook parameter or
``to_dict`` gives them as a nested mapping; the CLI as dotted flags (``--dist.strategy ddp``)."""
LEGACY_KEYS = {"strategy": "dist.strategy", "nproc": "dist.nproc", "limit_all_gathers": "dist.limit_all_gathers",
               "gradient_checkpointing": "activation_checkpointing"}
"""Other spellings of a key: the flat keys of records and study files written before ``dist``
was a sub-configuration, and transformers' name for activation checkpointing."""


def flatten(d: dict[str, Any]) -> dict[str, Any]:
    """A mapping of RunConfig keys with each sub-configuration's as dotted keys and older flat
    spellings renamed (``{"dist": {"nproc": 2}}``, ``{"nproc": 2}`` -> ``{"dist.nproc": 2}``);
    nothing is validated: for comparing a record's settings with a study's."""
    out = {}
    for k, v in d.items():
        if k in SECTIONS and isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        else:
            out[LEGACY_KEYS.get(k, k)] = v
    return out


@dataclass
class RunConfig:
    """One training run: what is trained, on what data, for how long, and how it is measured.
    Each field's docstring is its documentation everywhere: the first sentence is the CLI's
    help line for ``--<field>`` (``field_docs``), so the two cannot drift."""

    scenario: str = "A"
    """Scenario id A-F: the model and task (seed 002; ``dtype-bench scenarios`` lists them)."""
    config: str = "amp_bf16"
    """Dtype configuration name (``dtype-bench configs`` lists them)."""
    seed: int = 0
    """Random seed of the weights' initialisation and the data order. A study repeats each run
    over several seeds to separate a config's effect from run-to-run noise."""
    size: Size = "tiny"
    """Model size: tiny (CPU seconds), small, base, medium, large or xl (``core.sizes``).
    tiny is the default so that a bare command finishes on a CPU."""
    steps: int = 50
    """Optimizer steps (each of ``grad_accum`` micro-batches)."""
    batch_size: Optional[int] = None
    """Micro-batch size (sequences per forward); None = the size's default. For medium/large/xl
    that default is what an 80 GB GPU holds by ``core.sizes``' memory estimate."""
    grad_accum: Optional[int] = None
    """Micro-batches per optimizer step; None = the size's default. That is 1, except for
    medium/large/xl with the default ``batch_size``: they accumulate to base's tokens per step."""
    seq_len: Optional[int] = None
    """Tokens per sequence; None = the size's default."""
    lr: float = 6e-4
    """Peak learning rate of AdamW, reached after the warm-up: GPT-3's for its 125M model (Brown
    et al. 2020, table 2.1), one value for every config so that configs differ only in precision."""
    min_lr_ratio: float = 0.1
    """Where the cosine decay ends, as a fraction of ``lr`` (1.0 = constant after warm-up);
    0.1 follows GPT-3's schedule (decay to 10% of the peak)."""
    warmup_steps: Optional[int] = None
    """Linear LR warm-up before the cosine decay; None = 10% of steps."""
    weight_decay: float = 0.1
    """AdamW's decoupled weight decay (0.1, GPT-3's value)."""
    grad_clip: float = 1.0
    """Clip the gradients' global L2 norm to this value (0 = no clipping); 1.0 is GPT-3's value.
    The norm before clipping is recorded either way."""
    beta2: float = 0.95
    """AdamW's second-moment decay (0.95, GPT-3's value). Its average spans ~20 steps rather
    than torch's default 0.999's ~1000, so it follows a change in the gradients' scale sooner."""
    data: str = "synthetic"
    """Training data: synthetic, hub, a hub data set by name, or a local path. synthetic is
    embedded (no network) and the default, so any machine can run; hub is the scenario's own
    (OpenWebText for A-B, EUR-Lex for C-F); by name: openwebtext, eurlex, ag_news or imdb (the
    last two single-label: E-F); a local path has the same schema: a text file / folder for A-B,
    a JSONL / parquet of {text, labels} or {text, label} for C-F."""
    vocab_size: Optional[int] = None
    """Synthetic data only: vocabulary size; None = the size's default."""
    num_labels: Optional[int] = None
    """Synthetic classification only: number of labels; None = the size's default."""
    model_name_or_path: Optional[str] = None
    """Pretrained weights by hub id or local directory; None = train from scratch."""
    tokenizer: Optional[str] = None
    """Tokenizer hub id or directory for real data; None = the model's, else a byte-level BPE
    trained on the local corpus and cached."""
    cache_dir: str = "~/.cache/dtype-bench"
    """Folder for what is costly to make and safe to reuse: tokenised corpora, trained
    tokenizers, downloaded data sets and built initial weights (keyed by what made them)."""
    eval_every: int = 0
    """Evaluate every N steps (0 = only at the end)."""
    eval_batches: Optional[int] = None
    """Evaluation batches; None = the whole validation split (a fixed random sample of
    ``data.EVAL_MAX_SEQUENCES`` when larger). A batch is the training micro-batch for LM, 4
    micro-batches for classification."""
    log_every: int = 10
    """Host sync for logging/divergence checks every N steps; per-step values still recorded."""
    forensics: bool = True
    """Record, at the logged steps, the gradients' fp16 zero/subnormal/non-finite fractions and
    the share of weights an optimizer step left unchanged. Sampled, off the hot path
    (``forensics``)."""
    judge_quality: bool = True
    """Judge the run's quality; False = speed and memory only (a speed study's short runs): no
    quality ranking, verdict or safety label, and a stalled run keeps its place among the speed
    results. Training is the same either way (``study.runner.refresh_reading``)."""
    head_init: Literal["prior", "default"] = "prior"
    """Classification head bias: prior = the trivial predictor's logits (label log-odds, class
    log-prior), so training starts from the baseline; default = the layer's own init."""
    save_model: bool = False
    """Save the trained model as a Hugging Face directory ``<out_dir>/model`` (LM scenarios: the
    checkpoint that classification runs fine-tune, through ``model_name_or_path``)."""
    state_every: int = 0
    """Save the training state to ``<out_dir>/state.pt`` every N steps (0 = never). A run
    stopped part-way and started again with the same settings and out_dir continues from its last
    save (``training.resume``). Single-process runs only; each save is timed (``time/state_s``)."""
    timing_warmup: Optional[int] = None
    """Steps excluded from speed measurement (compile, first steps); None = automatic."""
    timing_windows: int = 5
    """Windows the timed steps are cut into (``throughput_std`` is the spread across them).
    Throughput itself is over all of them; 5 gives a spread without windows too short to time."""
    diverge_ratio: float = 3.0
    """A loss whose median over 5 steps is above this x the initial loss (step 0's, before any
    update), or a non-finite loss, marks the run diverged (``core.steplog.first_divergence``)."""
    on_divergence: Literal["stop", "continue"] = "stop"
    """What a divergence does: stop = end the run there; continue = train on (does it recover?)
    until a weight holds inf/nan. From there no step can recover: the run stops
    (``stability/nonfinite_weights_step``)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the run trains: auto = a CUDA GPU when one is visible, else the CPU. The CPU is
    for tiny models: its numbers test the code and are never a benchmark."""
    compile: Literal["auto", "on", "off"] = "auto"
    """torch.compile the model: auto = the dtype config's choice on CUDA, off on CPU (compiling
    tiny CPU runs costs more than it saves)."""
    cudagraphs: bool = False
    """Replay the compiled forward and backward as CUDA graphs (torch.compile
    mode="reduce-overhead") where the run compiles on CUDA. For launch-bound steps, where the
    device idles between small kernels (RoBERTa at B=8, T=512). Single-process runs only."""
    activation_checkpointing: bool = False
    """Gradient (activation) checkpointing: keep only each transformer block's input in forward
    and recompute the block in backward, trading about one more forward for the activations'
    memory. Every strategy reads this field. Also accepted as ``gradient_checkpointing``."""
    serve_modes: str = ""
    """Inference precisions the trained model is also evaluated in (comma-separated, e.g.
    ``fp16,bf16``: ``dtype-bench infer``'s modes), after training on the run's own validation
    batches; the record's ``serve`` section holds each. Single-process runs only."""
    dist: DistConfig = field(default_factory=lambda: DistConfig())
    """How the run spreads over processes (``dist.strategy``, ``dist.nproc``, tuning levers)."""
    out_dir: Optional[str] = None
    """Folder for the run's ``result.json`` and ``steps.jsonl`` (the CLI's ``--out``); None = a
    new temporary folder."""
    extra: dict = field(default_factory=dict)
    """Free-form notes carried into the record (e.g. the study name); never read by training."""

    def __post_init__(self) -> None:
        _check_types(self)
        self.scenario = get_scenario(self.scenario).id
        try:
            get_config(self.config)
        except UnknownNameError as e:
            raise ConfigError(f"config: {e}") from None
        for low, keys in ((1, ("steps", "log_every", "timing_windows", "batch_size", "grad_accum", "seq_len",
                               "vocab_size", "num_labels", "eval_batches")),
                          (0, ("seed", "warmup_steps", "timing_warmup", "eval_every", "state_every"))):
            for k in keys:
                if getattr(self, k) is not None and getattr(self, k) < low:
                    raise ConfigError(f"{k} must be >= {low}, got {getattr(self, k)}")
        if self.size not in SHAPES[self.scn.arch]:
            raise ConfigError(f"size={self.size!r} does not exist for {self.scn.arch} (scenario {self.scenario}): "
                              f"use one of {', '.join(SHAPES[self.scn.arch])}")
        if self.data in DATASETS:
            problem = dataset_problem(self.data, self.scn)
            if problem:
                raise ConfigError(problem)
        elif _CHECK_PATHS.get() and (problem := self.path_problem()):
            raise ConfigError(problem)
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        for mode in self.serve_list:
            try:
                get_mode(mode)
            except UnknownNameError as e:
                raise ConfigError(f"serve_modes: {e}") from None
        for k, on, why in (("cudagraphs=True", self.cudagraphs, " (DDP and FSDP communicate between the graphs' kernels)"),
                           ("state_every", self.state_every, " (each rank would need its own shard of the state)"),
                           ("serve_modes", self.serve_list, "")):
            if on and self.dist.strategy != "single":
                raise ConfigError(f"{k} works with dist.strategy='single' only, got {self.dist.strategy!r}{why}")

    def path_problem(self) -> str | None:
        """Why ``data`` names no corpus here (a local path that does not exist), else None."""
        if self.data in DATASETS or self.data in ("synthetic", "hub") or os.path.exists(os.path.expanduser(self.data)):
            return None
        return (f"data={self.data!r}: no such file or directory (use 'synthetic', 'hub', "
                f"{', '.join(map(repr, DATASETS))} or the path of a local corpus)")

    @property
    def serve_list(self) -> list[str]:
        """``serve_modes`` as a list of names."""
        return [m.strip() for m in self.serve_modes.split(",") if m.strip()]

    # ---- mapping in and out -------------------------------------------------------
    @classmethod
    def keys(cls) -> list[str]:
        """Every settable key: the fields, with each sub-configuration's as ``section.field``."""
        out = []
        for f in dataclasses.fields(cls):
            sub = SECTIONS.get(f.name)
            out += [f"{f.name}.{g.name}" for g in dataclasses.fields(sub)] if sub else [f.name]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "") -> "RunConfig":
        """A RunConfig from a mapping: top-level keys, a nested mapping per sub-configuration
        (``{"dist": {"strategy": "ddp"}}``), dotted keys (``"dist.strategy"``) or the flat keys
        of older records (``strategy``, ``nproc``). Unknown keys fail, naming the closest."""
        flat, sections = {}, {name: {} for name in SECTIONS}
        for k, v in flatten(d).items():
            section, dot, sub = k.partition(".")
            if section in SECTIONS and not dot:
                raise ConfigError(f"{where}{section}: expected a mapping of "
                                  f"{', '.join(f.name for f in dataclasses.fields(SECTIONS[section]))}, got {v!r}")
            _check_key(k, cls.keys(), where)
            if section in SECTIONS:
                sections[section][sub] = v
            else:
                flat[k] = v
        try:
            built = {name: SECTIONS[name](**kw) for name, kw in sections.items()}
            return cls(**flat, **built)
        except ConfigError as e:
            raise ConfigError(f"{where}{e}") from None
        except UnknownNameError as e:
            raise ConfigError(f"{where}scenario: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def flat(self) -> dict[str, Any]:
        """``to_dict`` with each sub-configuration's fields as dotted keys (the CLI's flags)."""
        return flatten(self.to_dict())

    @classmethod
    def field_type(cls, key: str) -> Any:
        """The declared type of a key (``"lr"``, ``"dist.reshard"``)."""
        section, dot, sub = key.partition(".")
        return typing.get_type_hints(SECTIONS[section])[sub] if dot else typing.get_type_hints(cls)[key]

    @classmethod
    def parse_text(cls, key: str, text: str) -> Any:
        """A command-line string read by the key's declared type (bool, int, float, None, JSON
        for a dict; anything else stays a string for the constructor to check)."""
        tp = cls.field_type(key)
        args = typing.get_args(tp)
        if text.lower() in ("none", "null") and type(None) in args:
            return None
        base = next((a for a in args if a is not type(None)), tp) if args and typing.get_origin(tp) is not Literal else tp
        try:
            if base is bool:
                return {"1": True, "true": True, "yes": True, "on": True,
                        "0": False, "false": False, "no": False, "off": False}[text.lower()]
            if base in (int, float):
                return base(text)
            if base is dict:
                return json.loads(text)
        except (ValueError, KeyError):
            raise ConfigError(f"--{key}: cannot read {text!r} as {getattr(base, '__name__', base)}") from None
        return text

    def replace(self, **kw) -> "RunConfig":
        """A copy with ``kw`` laid over; a sub-configuration's mapping (or dotted keys, passed as
        ``**{"dist.nproc": 2}``) is merged into its current values."""
        return RunConfig.from_dict({**self.flat(), **flatten(kw)})

    @property
    def dtype(self):
        return get_config(self.config)

    @property
    def scn(self):
        return get_scenario(self.scenario)

    @property
    def run_id(self) -> str:
        return f"{self.scenario}/{self.dtype.name}/seed{self.seed}"


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin is Literal:
        return value in typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    return isinstance(value, tp)


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _check_key(key: str, valid: list[str], where: str) -> None:
    if key not in valid:
        raise ConfigError(f"{where}unknown parameter {key!r}.{closest(key, valid)} Valid: {', '.join(valid)}")


EXPONENT_FLOAT = re.compile(r"[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+")
"""A number in exponent form without a dot: a float in YAML 1.2, text to YAML 1.1's loaders."""


def _check_types(cfg) -> None:
    hints = typing.get_type_hints(type(cfg))
    prefix = next((f"{k}." for k, v in SECTIONS.items() if isinstance(cfg, v)), "")
    for f in dataclasses.fields(cfg):
        if f.name in SECTIONS:
            continue
        v = getattr(cfg, f.name)
        tp = hints[f.name]
        # ints are fine where floats are expected; keep them as float for the record
        if tp is float and isinstance(v, int) and not isinstance(v, bool):
            setattr(cfg, f.name, float(v))
            continue
        if float in (tp, *typing.get_args(tp)) and isinstance(v, str) and EXPONENT_FLOAT.fullmatch(v):
            setattr(cfg, f.name, float(v))  # lr: 1e-3, which YAML 1.1 (PyYAML, papermill -f) reads as text
            continue
        if not _type_ok(v, tp):
            raise ConfigError(_type_problem(f"{prefix}{f.name}", v, tp))


def _type_problem(key: str, value: Any, tp: Any) -> str:
    """Why ``value`` does not fit ``key``'s type ``tp``: a name that is not one of a Literal's is
    told the valid names and the closest; anything else, the type expected."""
    names = [a for a in (typing.get_args(tp) if typing.get_origin(tp) is Literal else ()) if isinstance(a, str)]
    if names and isinstance(value, str):
        return f"{key}={value!r} is not one of {', '.join(map(repr, names))}.{closest(value, names)}"
    return f"{key}={value!r} has the wrong type: expected {_describe(tp)}"


SIZE_DEFAULTS = {
    # size: (batch_size, seq_len, synthetic vocab, synthetic labels)
    "tiny": (8, 64, 256, SYNTH_NUM_LABELS["tiny"]),
    "small": (16, 256, 8192, SYNTH_NUM_LABELS["small"]),
    "base": (12, 1024, 50304, SYNTH_NUM_LABELS["base"]),
}
CLS_BATCH = {"tiny": 8, "small": 16, "base": 8}  # seed 001: CLS bs 8
CLS_SEQ = {"tiny": 64, "small": 256, "base": 512}


@dataclass
class ResolvedRun(RunConfig):
    """A ``RunConfig`` with its size-dependent defaults filled in, made only by ``resolved``: the
    one configuration a run is handed (a notebook's ``run_config``, a cell's, a Slurm task's) and
    trains with, so nothing below the entry resolves it again. ``replace`` keeps it resolved."""

    def replace(self, **kw) -> "ResolvedRun":
        return resolved(super().replace(**kw))


def resolved(cfg: RunConfig) -> ResolvedRun:
    """Fill size-dependent defaults (batch, accumulation, seq_len, vocab, labels, warmup); a
    ``ResolvedRun`` as it is.

    medium, large and xl take base's data defaults and tokens per optimizer step; their
    micro-batch is the largest that ``core.sizes.micro_batch`` estimates to fit an 80 GB GPU."""
    if isinstance(cfg, ResolvedRun):
        return cfg
    data_size = "base" if cfg.size in LARGE_SIZES else cfg.size
    bs, T, V, L = SIZE_DEFAULTS[data_size]
    lm = cfg.scn.is_lm
    if cfg.scn.arch == "roberta" and data_size == "base":
        T = 512  # RoBERTa's 514 positions
    seq_len = cfg.seq_len or (T if lm else CLS_SEQ[data_size])
    batch, accum = cfg.batch_size, cfg.grad_accum or 1
    if batch is None:
        batch = bs if lm else CLS_BATCH[data_size]
        if cfg.size in LARGE_SIZES:
            batch, per_step = micro_batch(shape(cfg.scn.arch, cfg.size), cfg.vocab_size or V, batch, seq_len, lm)
            accum = cfg.grad_accum or per_step
    done = cfg.replace(batch_size=batch, grad_accum=accum, seq_len=seq_len, vocab_size=cfg.vocab_size or V,
                       num_labels=cfg.num_labels or L,
                       warmup_steps=cfg.warmup_steps if cfg.warmup_steps is not None else max(1, cfg.steps // 10))
    return ResolvedRun(**{f.name: getattr(done, f.name) for f in dataclasses.fields(done)})
