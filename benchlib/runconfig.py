"""One typed run configuration: the notebook's parameters, the CLI flags, the study
files and the result record all map onto ``RunConfig``. Unknown keys and values of the
wrong type fail loudly, naming the key, the closest valid key and the expected type.
"""
from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from .configs import UnknownNameError, closest, get_config
from .scenarios import get_scenario

Size = Literal["tiny", "small", "base"]


class ConfigError(ValueError):
    """A bad run parameter: the message names the key, the value and what is valid."""


@dataclass
class RunConfig:
    scenario: str = "A"
    """Scenario id A-F (seed 002)."""
    config: str = "amp_bf16"
    """Dtype configuration name (``dtype-bench configs`` lists them)."""
    seed: int = 0
    size: Size = "tiny"
    """Model size: tiny (CPU seconds), small, base (GPT-2 124M / RoBERTa-base shapes)."""
    steps: int = 50
    """Optimizer steps (each of ``grad_accum`` micro-batches)."""
    batch_size: Optional[int] = None
    """Micro-batch size; None = the size's default."""
    grad_accum: int = 1
    seq_len: Optional[int] = None
    """Tokens per sequence; None = the size's default."""
    lr: float = 6e-4
    min_lr_ratio: float = 0.1
    warmup_steps: Optional[int] = None
    """Linear LR warm-up before the cosine decay; None = 10% of steps."""
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    beta2: float = 0.95
    data: str = "synthetic"
    """synthetic (embedded, no network), hub (OpenWebText / EUR-Lex by hub id) or a local
    path: a text file / folder for A-B, a JSONL of {text, labels} for C-F."""
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
    eval_every: int = 0
    """Evaluate every N steps (0 = only at the end)."""
    eval_batches: Optional[int] = None
    """Evaluation batches (of the training micro-batch for LM, of 4 micro-batches for
    classification); None = the whole validation split (a fixed random sample of
    ``data.EVAL_MAX_SEQUENCES`` when larger). The record states the size and standard errors."""
    log_every: int = 10
    """Host sync for logging/divergence checks every N steps; per-step values still recorded."""
    forensics: bool = True
    """At the logged steps, the gradients' fp16 zero/subnormal/non-finite fractions and the share
    of weights an optimizer step left unchanged (``forensics``); sampled, off the hot path."""
    head_init: Literal["prior", "default"] = "prior"
    """Classification head bias: prior = the trivial predictor's logits (label log-odds, class
    log-prior), so training starts from the baseline; default = the layer's own init."""
    save_model: bool = False
    """Save the trained model as a Hugging Face directory ``<out_dir>/model`` (LM scenarios: the
    checkpoint that classification runs fine-tune, through ``model_name_or_path``)."""
    timing_warmup: Optional[int] = None
    """Steps excluded from speed measurement (compile, first steps); None = automatic."""
    timing_windows: int = 5
    diverge_ratio: float = 3.0
    """A loss above this x the initial loss (or non-finite) marks the run diverged."""
    on_divergence: Literal["stop", "continue"] = "stop"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    compile: Literal["auto", "on", "off"] = "auto"
    """auto = the dtype config's choice on CUDA, off on CPU (compiling tiny CPU runs costs more than it saves)."""
    cudagraphs: bool = False
    """Where the run compiles on CUDA, replay the compiled forward and backward as CUDA graphs
    (torch.compile mode="reduce-overhead"): for launch-bound steps, where the device idles
    between small kernels (RoBERTa at B=8, T=512). Single-process runs only."""
    strategy: Literal["single", "ddp", "fsdp2", "fsdp1", "fsdp_manual"] = "single"
    nproc: int = 1
    activation_checkpointing: bool = False
    limit_all_gathers: bool = True
    out_dir: Optional[str] = None
    extra: dict = field(default_factory=dict)
    """Free-form notes carried into the record (e.g. the study name); never read by training."""

    def __post_init__(self) -> None:
        _check_types(self)
        self.scenario = get_scenario(self.scenario).id
        try:
            get_config(self.config)
        except UnknownNameError as e:
            raise ConfigError(f"config: {e}") from None
        for k in ("steps", "grad_accum", "log_every", "timing_windows", "nproc"):
            if getattr(self, k) < 1:
                raise ConfigError(f"{k} must be >= 1, got {getattr(self, k)}")
        for k in ("batch_size", "seq_len", "vocab_size", "num_labels", "eval_batches"):
            v = getattr(self, k)
            if v is not None and v < 1:
                raise ConfigError(f"{k} must be >= 1, got {v}")
        if self.data not in ("synthetic", "hub") and not os.path.exists(os.path.expanduser(self.data)):
            raise ConfigError(f"data={self.data!r}: no such file or directory "
                              f"(use 'synthetic', 'hub' or the path of a local corpus)")
        if self.cudagraphs and self.strategy != "single":
            raise ConfigError(f"cudagraphs=True works with strategy='single' only, got strategy={self.strategy!r} "
                              f"(DDP and FSDP communicate between the graphs' kernels)")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")

    # ---- mapping in and out -------------------------------------------------------
    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "") -> "RunConfig":
        valid = cls.keys()
        for k in d:
            if k not in valid:
                raise ConfigError(f"{where}unknown parameter {k!r}.{closest(k, valid)} Valid: {', '.join(valid)}")
        try:
            return cls(**d)
        except ConfigError as e:
            raise ConfigError(f"{where}{e}") from None
        except UnknownNameError as e:
            raise ConfigError(f"{where}scenario: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **kw) -> "RunConfig":
        return RunConfig.from_dict({**self.to_dict(), **kw})

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


def _check_types(cfg: RunConfig) -> None:
    hints = typing.get_type_hints(RunConfig)
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        tp = hints[f.name]
        # ints are fine where floats are expected; keep them as float for the record
        if tp is float and isinstance(v, int) and not isinstance(v, bool):
            setattr(cfg, f.name, float(v))
            continue
        if not _type_ok(v, tp):
            raise ConfigError(f"{f.name}={v!r} has the wrong type: expected {_describe(tp)}")


SIZE_DEFAULTS = {
    # size: (batch_size, seq_len, synthetic vocab, synthetic labels)
    "tiny": (8, 64, 256, 64),
    "small": (16, 256, 8192, 1000),
    "base": (12, 1024, 50304, 4271),
}
CLS_BATCH = {"tiny": 8, "small": 16, "base": 8}  # seed 001: CLS bs 8
CLS_SEQ = {"tiny": 64, "small": 256, "base": 512}


def resolved(cfg: RunConfig) -> RunConfig:
    """Fill size-dependent defaults (batch, seq_len, vocab, labels, warmup)."""
    bs, T, V, L = SIZE_DEFAULTS[cfg.size]
    lm = cfg.scn.is_lm
    if cfg.scn.arch == "roberta" and cfg.size == "base":
        T = 512  # RoBERTa's 514 positions
    kw = dict(
        batch_size=cfg.batch_size or (bs if lm else CLS_BATCH[cfg.size]),
        seq_len=cfg.seq_len or (T if lm else CLS_SEQ[cfg.size]),
        vocab_size=cfg.vocab_size or V,
        num_labels=cfg.num_labels or L,
        warmup_steps=cfg.warmup_steps if cfg.warmup_steps is not None else max(1, cfg.steps // 10),
    )
    return cfg.replace(**kw)
