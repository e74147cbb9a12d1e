"""GPT-2 and RoBERTa through transformers, wrapped so that the output head's precision is the
dtype config's to decide. ``BenchModel`` = backbone (GPT2Model / RobertaModel, or the class a
checkpoint of another family declares) -> [MLM transform] -> head (the tied vocabulary projection,
or a linear layer over the labels) -> loss.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from benchlib.core.dtypes import TORCH_DTYPES, DtypeConfig
from benchlib.core.sizes import Shape, shape
from benchlib.training.init_cache import initialised

UNCACHED_SIZES = ("tiny", "small")
"""Sizes whose models build in well under a second: not worth a cache entry."""


def padded_vocab(v: int, multiple: int = 64) -> int:
    """Embedding rows rounded up to a multiple of 64: the vocabulary matmul then tiles
    evenly on tensor cores (GPT-2's 50257 -> 50304); the extra rows are never a target."""
    return -(-v // multiple) * multiple


def _conv1d_to_linear(module: nn.Module) -> None:
    """GPT-2's Conv1D is x @ W + b with W stored (in, out); swap each for the same function
    as nn.Linear so that float8 conversion, FSDP policies and fused kernels see Linear layers."""
    from transformers.pytorch_utils import Conv1D
    for name, child in list(module.named_children()):
        if isinstance(child, Conv1D):
            lin = nn.Linear(child.weight.shape[0], child.weight.shape[1], bias=child.bias is not None,
                            device=child.weight.device, dtype=child.weight.dtype)
            with torch.no_grad():
                lin.weight.copy_(child.weight.t())
                if child.bias is not None:
                    lin.bias.copy_(child.bias)
            setattr(module, name, lin)
        else:
            _conv1d_to_linear(child)


class BenchModel(nn.Module):
    def __init__(self, backbone: nn.Module, head: nn.Linear, task: str, arch: str,
                 transform: nn.Module | None = None, head_dtype: torch.dtype | None = None):
        super().__init__()
        self.backbone, self.head, self.transform = backbone, head, transform
        self.task, self.arch = task, arch
        self.head_dtype = head_dtype  # None: the head runs like the body

    @property
    def head_is_tied(self) -> bool:
        emb = self.backbone.get_input_embeddings().weight
        return self.head.weight is emb

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        if self.head_dtype is None:
            return self.head(h)
        # fp32 head: autocast off, input and weight in the head dtype (a no-op cast when the
        # weight is stored in it; an upcast when it is tied to a low-precision embedding).
        dt = self.head_dtype
        with torch.autocast(h.device.type, enabled=False):
            b = self.head.bias.to(dt) if self.head.bias is not None else None
            return F.linear(h.to(dt), self.head.weight.to(dt), b)

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["input_ids"]
        if self.task in ("clm", "mlm"):
            h = self.backbone(input_ids=ids).last_hidden_state
            if self.transform is not None:
                h = self.transform(h)
            return self._head(h)
        if self.arch == "gpt2":
            # Causal attention with right padding: pad tokens sit after the pooled token and
            # can never reach it, so no mask is needed (and flash attention stays available).
            h = self.backbone(input_ids=ids).last_hidden_state
            last = batch["attention_mask"].sum(1) - 1  # seed 002's last-token bottleneck
            pooled = h[torch.arange(h.shape[0], device=h.device), last]
        else:
            h = self.backbone(input_ids=ids, attention_mask=batch["attention_mask"]).last_hidden_state
            pooled = h[:, 0]  # <s>
        return self._head(pooled)

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        y = batch["labels"]
        if self.task in ("clm", "mlm", "singlelabel"):
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
        return F.binary_cross_entropy_with_logits(logits, y.to(logits.dtype))

    def forward(self, batch: dict[str, torch.Tensor], logit_stats: bool = False):
        logits = self.logits(batch)
        loss = self.loss(logits, batch)
        if logit_stats:
            # the batch's first sequence: 1/batch of the whole batch's cost (~0.7 ms of a 27 ms GPT-2 step, H200)
            # in the logits' own dtype: the loop checks it against the config's (check_compute_dtype)
            return loss, logits[0].detach().abs().amax()
        return loss, None

    def flops_per_token(self, seq_len: int) -> float:
        """nanoGPT's 6N + 12*L*D*T, N without the parameters that cost no per-token matmul:
        position embeddings, an untied token embedding, a head applied once per sequence."""
        cfg = self.backbone.config
        n = sum(p.numel() for p in self.parameters())
        pos = getattr(self.backbone, "wpe", None)  # GPT-2 / GPT-Neo; BERT-likes keep it under embeddings
        if pos is None:
            pos = getattr(getattr(self.backbone, "embeddings", None), "position_embeddings", None)
        if isinstance(pos, nn.Embedding):
            n -= pos.weight.numel()
        if not self.head_is_tied:
            # an untied input embedding is a lookup, not a matmul (classification): no FLOPs
            n -= self.backbone.get_input_embeddings().weight.numel()
            if self.task in ("multilabel", "singlelabel"):
                n -= self.head.weight.numel()  # applied once per sequence, not per token
        return 6 * n + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq_len


ATTN = "bench_sdpa"


def _attn_implementation() -> str:
    """SDPA attention whose mask is None whenever the batch has no padding mask: under dynamo
    (torch < 2.14) transformers builds an explicit causal mask, which keeps SDPA off its flash
    kernel, where ``is_causal`` says the same. Plain "sdpa" on transformers without the registries."""
    try:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:
        return "sdpa"

    def mask_or_none(*args, attention_mask=None, **kw):
        if attention_mask is None:
            return None
        return sdpa_mask(*args, attention_mask=attention_mask, **kw)

    AttentionInterface.register(ATTN, sdpa_attention_forward)
    AttentionMaskInterface.register(ATTN, mask_or_none)
    return ATTN


def _gpt2_config(shape: Shape, vocab: int, seq_len: int, pad_id: int):
    from transformers import GPT2Config
    return GPT2Config(vocab_size=vocab, n_positions=max(seq_len, 1024 if shape.width >= 768 else seq_len),
                      n_embd=shape.width, n_layer=shape.layers, n_head=shape.heads,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=pad_id,
                      bos_token_id=None, eos_token_id=None, attn_implementation=_attn_implementation(),
                      use_cache=False)


def _roberta_config(shape: Shape, vocab: int, seq_len: int, pad_id: int, bos_id: int):
    """RoBERTa-base keeps its 514 positions whatever the run's sequence length (as GPT-2 keeps
    1024): a checkpoint pretrained on short sequences (BERT's first phase, 128 tokens) then
    fine-tunes at 512, the rows beyond its training length starting from their initialisation."""
    from transformers import RobertaConfig
    return RobertaConfig(vocab_size=vocab, hidden_size=shape.width, num_hidden_layers=shape.layers,
                         num_attention_heads=shape.heads, intermediate_size=4 * shape.width,
                         max_position_embeddings=max(seq_len, 512 if shape.width >= 768 else seq_len) + pad_id + 2,
                         type_vocab_size=1,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                         pad_token_id=pad_id, bos_token_id=bos_id, eos_token_id=None,
                         attn_implementation=_attn_implementation(), use_cache=False)


@dataclass(frozen=True)
class ModelSpec:
    """What model a run trains: the architecture and task (its scenario), the shapes, the
    tokenizer's special ids, and where its weights come from."""

    arch: str  # gpt2 | roberta
    task: str  # clm | mlm | multilabel | singlelabel
    size: str  # core.sizes.SHAPES (RoBERTa: up to large)
    vocab_size: int
    seq_len: int
    pad_id: int = 0
    bos_id: int = 1
    num_labels: int | None = None  # classification: the task head's width
    model_name_or_path: str | None = None  # pretrained weights (hub id or directory); None: from scratch
    activation_checkpointing: bool = False
    init_cache: str | None = None  # folder of built initial models (``init_cache``); None: build every time

    @classmethod
    def for_run(cls, cfg, data) -> "ModelSpec":
        """The model of a run configuration (``RunConfig``) over its data (``TaskData``)."""
        cache = None if cfg.size in UNCACHED_SIZES else str(Path(cfg.cache_dir).expanduser() / "init")
        return cls(cfg.scn.arch, cfg.scn.task, cfg.size, data.vocab_size, cfg.seq_len, data.pad_id, data.bos_id,
                   data.num_labels, cfg.model_name_or_path, cfg.activation_checkpointing, cache)


def build_model(spec: ModelSpec, dtype: DtypeConfig) -> BenchModel:
    """Build on CPU in fp32 (so a seed gives the same initial weights on every device),
    then cast to the config's parameter dtype; the head gets ``dtype.head_dtype``."""
    arch, task, path = spec.arch, spec.task, spec.model_name_or_path
    t0 = time.perf_counter()
    from transformers import GPT2LMHeadModel, GPT2Model, RobertaForMaskedLM, RobertaModel
    from benchlib.training.checkpoints import checkpoint_config, load_pretrained
    seen = {"import_s": time.perf_counter() - t0, "cached": None}  # for the record: where model_s goes
    lm = task in ("clm", "mlm")
    loaded: dict | None = None
    head = transform = None
    if path and not checkpoint_config(arch, path, task=task)[1]:
        backbone, head, transform, loaded = _other_family(arch, task, path)
    elif arch not in ("gpt2", "roberta"):
        raise ValueError(f"unknown arch {arch!r}: gpt2 or roberta")
    else:
        cls = {"gpt2": (GPT2Model, GPT2LMHeadModel), "roberta": (RobertaModel, RobertaForMaskedLM)}[arch][lm]
        more = {"add_pooling_layer": False} if cls is RobertaModel else {}
        if path:
            backbone, loaded = load_pretrained(cls, arch, path, attn_implementation=_attn_implementation(), **more)
        else:
            backbone = _scratch(spec, cls, more, seen)
        if arch == "gpt2":
            if lm:
                backbone, head = backbone.transformer, backbone.lm_head
            _conv1d_to_linear(backbone)
        elif lm:
            backbone, lmh = backbone.roberta, backbone.lm_head
            head, transform = lmh.decoder, nn.Sequential(lmh.dense, nn.GELU(), lmh.layer_norm)
    # no KV cache in training: compiled blocks (FSDP2) recompiled on each layer's cache state until
    # dynamo ran them eagerly (2xH200)
    backbone.config.use_cache = False
    if backbone.get_input_embeddings().weight.shape[0] < spec.vocab_size:
        backbone.resize_token_embeddings(padded_vocab(spec.vocab_size))
    if not lm:
        head = nn.Linear(backbone.config.hidden_size, spec.num_labels)
    model = BenchModel(backbone, head, task, arch, transform,
                       head_dtype=TORCH_DTYPES[dtype.head_dtype] if dtype.head_dtype else None)
    return _ready(model, spec, dtype, loaded, seen)


def _scratch(spec: ModelSpec, cls: type, more: dict, seen: dict) -> nn.Module:
    """A from-scratch backbone (with its LM head), built once per (configuration, random state):
    ``init_cache``."""
    vocab, shp = padded_vocab(spec.vocab_size), shape(spec.arch, spec.size)
    config = (_gpt2_config(shp, vocab, spec.seq_len, spec.pad_id) if spec.arch == "gpt2"
              else _roberta_config(shp, vocab, spec.seq_len, spec.pad_id, spec.bos_id))

    def make():
        m = cls(config, **more)
        if spec.arch == "gpt2":
            _conv1d_to_linear(m)  # its fresh Linear layers draw from the random state too
        return m
    t = time.perf_counter()
    m = initialised(make, f"{cls.__name__} {more} {config.to_json_string()}", spec.init_cache, seen)
    seen["init_s"] = time.perf_counter() - t
    return m


def _ready(model: BenchModel, spec: ModelSpec, dtype: DtypeConfig, loaded: dict | None, seen: dict
           ) -> BenchModel:
    """The built model as a run trains it: what it was built from noted, cast to the config's
    dtypes, activation checkpointing on where asked, in train mode."""
    if loaded is not None:  # the share of the trained model that came from the checkpoint
        n = sum(p.numel() for p in model.parameters())
        loaded["parameters"] = n
        loaded["loaded_fraction_of_model"] = round(min(loaded.pop("loaded_parameters"), n) / n, 6)
    model.pretrained_info = loaded  # what the checkpoint gave (checkpoints.check_loaded), for the record
    model.build_info = seen
    model.to(dtype.torch_param_dtype)
    if dtype.head_dtype and not model.head_is_tied:
        model.head.to(TORCH_DTYPES[dtype.head_dtype])
    if spec.activation_checkpointing:
        enable = getattr(model.backbone, "activation_checkpointing_enable", None)  # transformers >= 5's name
        if enable is not None:
            enable({"use_reentrant": False})
        else:
            model.backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # from_pretrained gives eval mode; block checkpointing (and a checkpoint's dropout) needs train
    # mode from the first step
    return model.train()


def _other_family(arch: str, task: str, path: str):
    """Backbone, head and MLM transform (None) of a checkpoint of another family
    (``checkpoints.load_other_family``). A decoder for A keeps its output projection as the head,
    once a few tokens show that it alone maps the last hidden state to the logits (no scaling or
    soft-capping outside it that the split would lose)."""
    from benchlib.training.checkpoints import CheckpointError, load_other_family
    model, info = load_other_family(arch, task, path)
    if task != "clm":
        return model, None, None, info
    backbone, head = model.base_model, model.get_output_embeddings()
    if not isinstance(head, nn.Linear) or backbone is model:
        raise CheckpointError(f"checkpoint {path!r} ({info['architecture']}): its causal-LM head is not a linear "
                              f"layer over the backbone; fine-tune it on C or E instead")
    ids = torch.arange(1, 9).remainder(head.out_features)[None]
    with torch.no_grad():
        whole = model.eval()(input_ids=ids).logits
        split = head(backbone(input_ids=ids).last_hidden_state)
    if not torch.allclose(whole.float(), split.float(), atol=1e-4, rtol=1e-4):
        raise CheckpointError(f"checkpoint {path!r} ({info['architecture']}): its logits are not the output "
                              f"projection of the backbone's last hidden state, which scenario A trains; fine-tune "
                              f"it on C or E instead")
    return backbone, head, None, info


def autocast_context(device_type: str, autocast: str | None):
    """torch.autocast in ``autocast`` ("bf16" / "fp16"), a null context for None (nanoGPT's pattern)."""
    if autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=TORCH_DTYPES[autocast])
