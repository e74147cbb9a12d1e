"""Pretrained checkpoints made by dtype-bench itself: the fine-tuning regime offline.

Seed 001 fine-tunes pretrained GPT-2 / RoBERTa-base for the classification scenarios. Without a
hub, a study's ``pretrain:`` stage trains each architecture's LM scenario (A: GPT-2, B: RoBERTa)
and saves it as an ordinary Hugging Face model directory (``config.json``, fp32
``model.safetensors``, and ``META_FILE``: what made it), which loads with plain transformers and
which the classification runs load through ``model_name_or_path``.

A checkpoint of another family is built as the class its ``config.json`` declares, never poured
into GPT-2's or RoBERTa's (a BERT in a RoBERTa would have every position shifted by RoBERTa's
padding offset). The masked-LM scenario B continues RoBERTa's own head: RoBERTa checkpoints only.
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from benchlib.core.errors import UserError
from benchlib.core.scenarios import SCENARIOS

META_FILE = "dtype_bench_checkpoint.json"
MODEL_DIR = "model"  # a run with save_model writes its checkpoint to <out_dir>/model
PRETRAINED = "pretrained"  # study-file value: the study's own pretrain checkpoint for the run's arch
FORMAT = 1

ARCHS = ("gpt2", "roberta")  # each arch is its config.json's model_type
ARCH_NAME = {"gpt2": "GPT-2", "roberta": "RoBERTa"}
LM_SCENARIO = {a: next(s.id for s in SCENARIOS.values() if s.arch == a and s.is_lm) for a in ARCHS}
ARCH_SCENARIOS = {a: tuple(s.id for s in SCENARIOS.values() if s.arch == a) for a in ARCHS}
HF_LM_CLASS = {"gpt2": "GPT2LMHeadModel", "roberta": "RobertaForMaskedLM"}
BACKBONE_PREFIX = {"gpt2": "transformer", "roberta": "roberta"}
ROLE = {"gpt2": "decoder", "roberta": "encoder"}  # what another family must be to stand in
ROLE_WORDS = {"decoder": "a decoder (gpt2, gpt_neo, llama, ...)", "encoder": "an encoder (roberta, bert, distilbert, ...)"}
# RoBERTa's family numbers positions from padding_idx + 1: its last two rows are not positions
OFFSET_POSITIONS = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "roberta-prelayernorm",
                    "data2vec-text", "longformer")


class CheckpointError(UserError):
    """A checkpoint that cannot be saved or used as asked; the message is one line."""


def which_scenarios() -> str:
    return ("A, C, E take GPT-2 checkpoints (model_type 'gpt2') or another decoder; B takes RoBERTa checkpoints "
            "(model_type 'roberta'), D, F those or another encoder")


# ---- saving -----------------------------------------------------------------------------
def save_pretrained(model: nn.Module, path: str | os.PathLike, meta: dict | None = None) -> Path:
    """Save a language-model ``BenchModel`` (A: GPT-2 clm, B: RoBERTa mlm) as a Hugging Face model
    directory at ``path`` (fp32 weights) with ``META_FILE`` holding ``meta``, complete or not at all
    (written beside it, then renamed; an existing one is replaced). Refuses a classification or a
    sharded (FSDP) model. Call it on one process only."""
    if not all(hasattr(model, a) for a in ("backbone", "head", "task", "arch")):  # a BenchModel (models.py)
        raise CheckpointError(f"save_pretrained takes a benchlib BenchModel, got {type(model).__name__}")
    if model.task not in ("clm", "mlm"):
        raise CheckpointError(
            f"save_pretrained: a {model.arch} {model.task} model has a task head over labels, not a language-model "
            f"head; only the LM scenarios (A: GPT-2 causal LM, B: RoBERTa masked LM) are saved as pretrained checkpoints")
    _refuse_sharded(model)
    hf = to_hf(model)
    trained_dtype = next(model.backbone.parameters()).dtype
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        hf.save_pretrained(str(tmp))
        info = {"dtype_bench_checkpoint": FORMAT, "arch": model.arch, "task": model.task,
                "hf_class": type(hf).__name__, "model_type": hf.config.model_type,
                "trained_param_dtype": str(trained_dtype).replace("torch.", ""), "saved_dtype": "float32",
                "parameters": sum(p.numel() for p in hf.parameters()), **(meta or {})}
        (tmp / META_FILE).write_text(json.dumps(info, indent=1, default=str))
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def to_hf(model: nn.Module) -> nn.Module:
    """The plain transformers LM (fp32, CPU) that computes what the LM ``BenchModel`` does: its config
    and weights, GPT-2's Linear layers transposed back to Conv1D, loaded strictly."""
    import transformers
    from transformers.pytorch_utils import Conv1D

    arch = model.arch
    cfg = copy.deepcopy(model.backbone.config)
    cfg.use_cache = True  # training turns the KV cache off; a saved model is for everyone
    cfg.tie_word_embeddings = bool(model.head_is_tied)
    cls = getattr(transformers, HF_LM_CLASS[arch])
    with torch.random.fork_rng(devices=[]):  # building initialises weights: leave the caller's RNG alone
        hf = cls(cfg).float()
    pairs = [(BACKBONE_PREFIX[arch], model.backbone)]
    if arch == "gpt2":
        pairs.append(("lm_head", model.head))
    else:
        t = model.transform  # models.build_model: Sequential(lm_head.dense, GELU, lm_head.layer_norm)
        pairs += [("lm_head.dense", t[0]), ("lm_head.layer_norm", t[2]), ("lm_head.decoder", model.head)]
    conv = {name for name, m in hf.named_modules() if isinstance(m, Conv1D)}
    target = hf.state_dict()
    sd: dict[str, torch.Tensor] = {}
    for prefix, sub in pairs:
        for k, v in sub.state_dict().items():
            key = f"{prefix}.{k}"
            mod_name, _, leaf = key.rpartition(".")
            v = v.detach()
            if mod_name in conv and leaf == "weight":  # models._conv1d_to_linear stored it (out, in)
                v = v.t()
            sd[key] = v.to("cpu", torch.float32) if v.is_floating_point() else v.to("cpu")
    if "lm_head.bias" in target and "lm_head.decoder.bias" in sd:
        sd["lm_head.bias"] = sd["lm_head.decoder.bias"]  # RoBERTa's lm_head.bias is the decoder's
    for k, v in sd.items():
        if k in target and tuple(v.shape) != tuple(target[k].shape):
            raise CheckpointError(
                f"save_pretrained: {k} has shape {tuple(v.shape)} where a {cls.__name__} has {tuple(target[k].shape)}; "
                f"the model looks sharded (FSDP keeps 1-D shards): save from a single-process or DDP run")
    try:
        hf.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        raise CheckpointError(f"save_pretrained: the weights do not map onto {cls.__name__}: "
                              f"{' '.join(str(e).split())[:400]}") from None
    return hf.eval()


def _refuse_sharded(model: nn.Module) -> None:
    from torch.distributed.tensor import DTensor
    sharded = [n for n, p in model.named_parameters() if isinstance(p, DTensor)]
    if sharded:
        raise CheckpointError(f"save_pretrained: the model is sharded (FSDP DTensor parameters, e.g. {sharded[0]}); "
                              f"save from a single-process or DDP run (strategy single or ddp)")


# ---- reading ----------------------------------------------------------------------------
def read_meta(path: str | os.PathLike) -> dict | None:
    """``META_FILE`` of a checkpoint directory, or None (a hub model, a foreign directory)."""
    f = Path(path).expanduser() / META_FILE
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


def is_complete(path: str | os.PathLike) -> bool:
    """A saved checkpoint: config, weights and the metadata written last."""
    p = Path(path)
    return (p / "config.json").is_file() and (p / META_FILE).is_file() and (
        any(p.glob("*.safetensors")) or any(p.glob("*.bin")))


def _local_config(path: str | os.PathLike) -> dict | None:
    p = Path(str(path)).expanduser()
    if p.is_dir():
        try:
            return json.loads((p / "config.json").read_text())
        except OSError:
            raise CheckpointError(f"checkpoint {str(path)!r} has no config.json: not a Hugging Face model directory") \
                from None
        except ValueError as e:
            raise CheckpointError(f"checkpoint {str(path)!r}: config.json is not valid JSON ({e})") from None
    return None


def _cached_config(path: str) -> dict | None:
    """config.json of a hub id already in the local cache (after from_pretrained); no network."""
    try:
        from transformers import PretrainedConfig
        return PretrainedConfig.get_config_dict(path, local_files_only=True)[0]
    except Exception:
        return None


def role_of(config: dict) -> str | None:
    """``encoder`` (a masked-LM family), ``decoder`` (causal LM only) or None, from transformers'
    registry of model types."""
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    mt = config.get("model_type")
    if config.get("is_encoder_decoder"):
        return None
    if mt in MODEL_FOR_MASKED_LM_MAPPING_NAMES:  # BERT-likes also register a causal-LM class
        return "encoder"
    return "decoder" if mt in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES else None


def max_positions(config: dict) -> int | None:
    """Tokens per sequence a checkpoint's position embeddings cover (None: not stated)."""
    n = config.get("n_positions") if config.get("model_type") == "gpt2" else None
    n = n or config.get("max_position_embeddings") or config.get("n_positions")
    if n and config.get("model_type") in OFFSET_POSITIONS:
        n -= (config.get("pad_token_id") or 0) + 1
    return n


def _looks_local(path: str) -> bool:
    """A hub id is ``name`` or ``org/name``; anything else names a directory."""
    return path.startswith(("/", "./", "../", "~")) or path.strip("/").count("/") > 1 or path.endswith("/")


def _refuse(arch: str, path: str, config: dict, scenario: str | None, task: str | None) -> None:
    mt, role = config.get("model_type"), role_of(config)
    archs = ", ".join(config.get("architectures") or []) or "no architectures listed"
    what = f"{'an' if role == 'encoder' else 'a'} {role}" if role else "neither an encoder nor a decoder"
    who = f"scenario {scenario}" if scenario else f"a {ARCH_NAME[arch]} {task or 'model'}"
    if role == ROLE[arch] and task == "mlm":
        raise CheckpointError(f"checkpoint {path!r} is a {mt!r} encoder ({archs}): {who} continues RoBERTa's "
                              f"masked-LM head and takes model_type 'roberta' only; fine-tune this checkpoint on D or F")
    raise CheckpointError(f"checkpoint {path!r} is a {mt!r} model ({archs}), {what}; {who} needs "
                          f"{ROLE_WORDS[ROLE[arch]]}: {which_scenarios()}")


def checkpoint_config(arch: str, path: str | os.PathLike, scenario: str | None = None,
                      task: str | None = None) -> tuple[dict | None, bool]:
    """Before anything is built: (config.json, native: the scenario's own family, else another
    family of the role it needs, loaded through the Auto classes). Refuses (one line) a missing
    local directory, the other role, and a non-RoBERTa checkpoint for B. Hub ids are checked
    after loading (``check_loaded``)."""
    if arch not in ARCHS:
        raise CheckpointError(f"unknown arch {arch!r}: gpt2 or roberta")
    path = str(path)
    if path == PRETRAINED:
        raise CheckpointError(f"model_name_or_path {PRETRAINED!r} names a study's pretrain checkpoint: `dtype-bench "
                              f"sweep` replaces it with the checkpoint's directory; outside a sweep give that directory")
    local = Path(path).expanduser()
    if not local.exists() and _looks_local(path):
        raise CheckpointError(f"model_name_or_path {path!r}: no such local directory (check the path; a hub id looks "
                              f"like 'gpt2' or 'org/name')")
    if local.exists() and not local.is_dir():
        raise CheckpointError(f"model_name_or_path {path!r} is a file: give the checkpoint's directory (config.json "
                              f"and the weights)")
    config = _local_config(path)
    if config is None:
        return None, True
    if config.get("model_type") == arch:
        return config, True
    if role_of(config) != ROLE[arch] or task == "mlm":
        _refuse(arch, path, config, scenario, task)
    return config, False


def check_loaded(arch: str, path: str | os.PathLike, loading_info: dict, model: nn.Module,
                 scenario: str | None = None) -> dict:
    """After ``from_pretrained(path, output_loading_info=True)``: raise (one line) when a backbone
    weight is missing or mismatched or the checkpoint is another architecture; else what the
    record keeps. A missing task head is expected (trained from scratch); weights of modules the
    run drops (a pooler) are neither loaded nor missed."""
    path = str(path)
    config = _local_config(path) if Path(path).expanduser().is_dir() else _cached_config(path)
    if config is not None and config.get("model_type") != arch and role_of(config) != ROLE[arch]:
        _refuse(arch, path, config, scenario, None)
    held = getattr(type(model.config), "model_type", None)  # the class's family (the instance copies the file's)
    if config is not None and config.get("model_type") not in (None, held):  # e.g. a hub BERT in RobertaModel
        raise CheckpointError(f"checkpoint {path!r} is a {config.get('model_type')!r} model loaded into "
                              f"{type(model).__name__} ({held!r}): its weights would sit under the wrong names and "
                              f"positions; give its local directory, whose family is then built as declared")
    prefix = getattr(model, "base_model_prefix", "") or ""
    nested = bool(prefix) and isinstance(getattr(model, prefix, None), nn.Module)

    def in_backbone(key: str) -> bool:
        return not nested or key.startswith(prefix + ".")

    backbone = getattr(model, prefix) if nested else model
    total = sum(p.numel() for p in backbone.parameters())
    names = dict(model.named_parameters())
    present = set(model.state_dict())
    all_missing = [k for k in (loading_info.get("missing_keys") or ()) if k in present]
    missing = sorted(k for k in all_missing if in_backbone(k))
    mismatched = {(m[0] if isinstance(m, (tuple, list)) else m) for m in (loading_info.get("mismatched_keys") or ())}
    bad = missing + sorted(k for k in mismatched - set(missing) if in_backbone(k) and k in present)
    if bad:
        lost = sum(names[k].numel() for k in bad if k in names)
        archs = ", ".join((config or {}).get("architectures") or []) or "unknown architecture"
        raise CheckpointError(
            f"checkpoint {path!r} ({archs}) lacks {len(bad)} {ARCH_NAME[arch]} backbone weights "
            f"({100 * lost / max(total, 1):.0f}% of its parameters; e.g. {', '.join(bad[:4])}"
            f"{' ...' if len(bad) > 4 else ''}): not a {ARCH_NAME[arch]} checkpoint? {which_scenarios()}")
    new_head = sorted(k for k in all_missing if not in_backbone(k))
    fresh = sum(names[k].numel() for k in new_head if k in names)
    unused = sorted(loading_info.get("unexpected_keys") or ())
    cfg_arch = (config or {}).get("architectures") or getattr(model.config, "architectures", None) or []
    out: dict[str, Any] = {
        "path": path,
        "architecture": cfg_arch[0] if cfg_arch else None,
        "model_type": (config or {}).get("model_type", getattr(model.config, "model_type", arch)),
        "model_class": type(backbone).__name__,
        "backbone_parameters": total,
        "loaded_fraction": 1.0,  # of the backbone: anything less was refused above
        "loaded_parameters": sum(p.numel() for p in model.parameters()) - fresh,
        "new_weights": new_head,  # initialised fresh: the task head
        "unused_checkpoint_weights": len(unused),  # e.g. the MLM head of a checkpoint fine-tuned for classes
    }
    local = Path(path).expanduser()
    if local.is_dir():  # a checkpoint converted from a package (dtype_bench.build_data) names it, as data folders do
        from benchlib.data.files import read_provenance
        out.update({f"provenance_{k}": v for k, v in read_provenance(local).items()
                    if isinstance(v, (str, int, float, bool))})
    meta = read_meta(path) if local.is_dir() else None
    if meta:
        out["checkpoint"] = {k: meta.get(k) for k in ("run_id", "scenario", "config", "seed", "steps", "status",
                                                       "val_loss", "quality", "commit", "date", "trained_param_dtype")
                             if k in meta}
    return out


@contextlib.contextmanager
def _quiet_loading():
    """transformers' loading report (unexpected / missing keys) is judged by ``check_loaded``
    and kept in the record; printed, it reads like a failure of an ordinary fine-tune."""
    from transformers.utils import logging as hf_logging
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def load_pretrained(hf_class: type, arch: str, path: str | os.PathLike, scenario: str | None = None,
                    **kwargs) -> tuple[nn.Module, dict]:
    """``hf_class.from_pretrained(path, **kwargs)`` with the checks around it: the model and
    the dict for the record (``check_loaded``)."""
    config, native = checkpoint_config(arch, path, scenario)
    if not native:  # a GPT-2 / RoBERTa class would load another family's weights under the wrong names
        raise CheckpointError(f"checkpoint {str(path)!r} is a {config.get('model_type')!r} model: "
                              f"{hf_class.__name__} holds model_type {arch!r} only "
                              f"(load_other_family builds the class the checkpoint declares)")
    with _quiet_loading():
        model, loading = hf_class.from_pretrained(str(path), output_loading_info=True, **kwargs)
    return model, check_loaded(arch, path, loading, model, scenario)


def load_other_family(arch: str, task: str, path: str | os.PathLike, scenario: str | None = None
                      ) -> tuple[nn.Module, dict]:
    """A checkpoint of another encoder (D, F) or decoder family (A, C, E): ``AutoModel``
    (``AutoModelForCausalLM`` for A, whose output projection becomes the head), pooler dropped."""
    from transformers import AutoModel, AutoModelForCausalLM
    checkpoint_config(arch, path, scenario, task)
    cls = AutoModelForCausalLM if task == "clm" else AutoModel
    with _quiet_loading():
        model, loading = cls.from_pretrained(str(path), output_loading_info=True)
    if getattr(model, "pooler", None) is not None:
        model.pooler = None  # BERT's pooler: unused (the run pools the first token's state)
    return model, {**check_loaded(arch, path, loading, model, scenario), "family": "other"}


# ---- the study stage ----------------------------------------------------------------------
def model_dir(run_out_dir: str | os.PathLike) -> Path:
    """Where a run with ``save_model`` leaves its checkpoint."""
    return Path(run_out_dir) / MODEL_DIR


def resolve(value: Any, arch: str, checkpoints: dict[str, str]) -> Any:
    """A run's ``model_name_or_path``: the value ``pretrained`` becomes the study's checkpoint
    directory for the run's arch (``checkpoints``: arch -> directory); anything else is kept."""
    if value != PRETRAINED:
        return value
    if arch not in checkpoints:
        raise CheckpointError(f"model_name_or_path {PRETRAINED!r}: the study has no pretrain.{arch} section")
    return str(checkpoints[arch])
