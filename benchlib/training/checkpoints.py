"""Pretrained checkpoints made by dtype-bench itself: the fine-tuning regime offline.

Seed 001 fine-tunes pretrained GPT-2 / RoBERTa-base for the classification scenarios. With
a hub that is ``model_name_or_path: gpt2`` / ``roberta-base``; without one, a study's
``pretrain:`` stage trains the language-model scenario of each architecture (A for GPT-2,
B for RoBERTa) and saves it here as an ordinary Hugging Face model directory, which the
classification runs then load through the same key.

    save_pretrained(model, path, meta)       BenchModel (clm / mlm) -> HF model directory, fp32
    load_pretrained(cls, arch, path, **kw)   from_pretrained + the checks below -> (model, info)
    check_checkpoint(arch, path)             before loading: config.json's model_type is the arch's
    check_loaded(arch, path, info, model)    after loading: no backbone weight missing -> a record

A saved directory holds ``config.json``, ``model.safetensors`` (fp32 whatever the run
trained in) and ``dtype_bench_checkpoint.json`` (what made it: run, config, steps, val loss,
commit, date), and loads with plain transformers (``GPT2LMHeadModel.from_pretrained``,
``GPT2Model``, ``RobertaForMaskedLM``, ``RobertaModel(add_pooling_layer=False)``).
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from benchlib.core.scenarios import SCENARIOS

META_FILE = "dtype_bench_checkpoint.json"
MODEL_DIR = "model"  # a run with save_model writes its checkpoint to <out_dir>/model
PRETRAINED = "pretrained"  # study-file value: the study's own pretrain checkpoint for the run's arch
FORMAT = 1

ARCHS = ("gpt2", "roberta")
MODEL_TYPE = {"gpt2": "gpt2", "roberta": "roberta"}  # config.json's model_type per arch
ARCH_NAME = {"gpt2": "GPT-2", "roberta": "RoBERTa"}
LM_TASK = {"gpt2": "clm", "roberta": "mlm"}
LM_SCENARIO = {a: next(s.id for s in SCENARIOS.values() if s.arch == a and s.is_lm) for a in ARCHS}
ARCH_SCENARIOS = {a: tuple(s.id for s in SCENARIOS.values() if s.arch == a) for a in ARCHS}
HF_LM_CLASS = {"gpt2": "GPT2LMHeadModel", "roberta": "RobertaForMaskedLM"}
BACKBONE_PREFIX = {"gpt2": "transformer", "roberta": "roberta"}


class CheckpointError(ValueError):
    """A checkpoint that cannot be saved or used as asked; the message is one line."""


def which_scenarios() -> str:
    return "; ".join(f"{', '.join(ARCH_SCENARIOS[a])} take {ARCH_NAME[a]} checkpoints (model_type {MODEL_TYPE[a]!r})"
                     for a in ARCHS)


# ---- saving -----------------------------------------------------------------------------
def save_pretrained(model: nn.Module, path: str | os.PathLike, meta: dict | None = None) -> Path:
    """Save a language-model ``BenchModel`` (GPT-2 clm: scenario A, RoBERTa mlm: B) as a
    Hugging Face model directory at ``path``, weights in fp32, plus ``META_FILE`` with
    ``meta`` (the caller's: run id, scenario, config, steps, val loss, commit, date).

    The directory appears complete or not at all (written beside it, then renamed); an
    existing one is replaced. Refuses a classification model (its head is over labels, not
    the vocabulary) and a sharded (FSDP) model. Call it on one process only (rank 0)."""
    if not all(hasattr(model, a) for a in ("backbone", "head", "task", "arch")):  # a BenchModel (models.py)
        raise CheckpointError(f"save_pretrained takes a benchlib BenchModel, got {type(model).__name__}")
    if model.task not in ("clm", "mlm"):
        raise CheckpointError(
            f"save_pretrained: a {model.arch} {model.task} model has a task head over labels, not a language-model "
            f"head; only the LM scenarios (A: GPT-2 causal LM, B: RoBERTa masked LM) are saved as pretrained checkpoints")
    if model.arch not in ARCHS or LM_TASK[model.arch] != model.task:
        raise CheckpointError(f"save_pretrained: arch {model.arch!r} with task {model.task!r} is not an LM scenario "
                              f"(gpt2/clm or roberta/mlm)")
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
    """The plain transformers model (``GPT2LMHeadModel`` / ``RobertaForMaskedLM``, fp32, CPU)
    that computes what the LM ``BenchModel`` does: the same config, the same weights, GPT-2's
    Linear layers transposed back to Conv1D, loaded strictly."""
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
        t = model.transform
        if not (isinstance(t, nn.Sequential) and len(t) == 3 and isinstance(t[0], nn.Linear)
                and isinstance(t[2], nn.LayerNorm)):
            raise CheckpointError("save_pretrained: a RoBERTa MLM BenchModel's transform is expected to be "
                                  "Sequential(lm_head.dense, GELU, lm_head.layer_norm)")
        pairs += [("lm_head.dense", t[0]), ("lm_head.layer_norm", t[2]), ("lm_head.decoder", model.head)]
    conv = {name for name, m in hf.named_modules() if isinstance(m, Conv1D)}
    target = hf.state_dict()
    sd: dict[str, torch.Tensor] = {}
    for prefix, sub in pairs:
        for k, v in sub.state_dict().items():
            key = f"{prefix}.{k}"
            mod_name, _, leaf = key.rpartition(".")
            v = v.detach()
            if mod_name in conv and leaf == "weight":
                owner = sub.get_submodule(k.rpartition(".")[0]) if "." in k else sub
                if isinstance(owner, nn.Linear):  # models._conv1d_to_linear stored it (out, in)
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
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch without distributed tensors
        return
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


def _check_type(arch: str, path: str, config: dict | None, scenario: str | None = None) -> None:
    if config is None:
        return
    mt = config.get("model_type")
    if mt is not None and mt != MODEL_TYPE[arch]:
        who = f"scenario {scenario} ({ARCH_NAME[arch]})" if scenario else f"a {ARCH_NAME[arch]} model"
        raise CheckpointError(f"checkpoint {str(path)!r} is a {mt!r} model ({', '.join(config.get('architectures') or [])}),"
                              f" not {MODEL_TYPE[arch]!r} as {who} needs: {which_scenarios()}")


def check_checkpoint(arch: str, path: str | os.PathLike, scenario: str | None = None) -> None:
    """Before loading: a local directory's config.json must be of ``arch``'s model_type.
    Hub ids are checked after loading (``check_loaded``), never over the network here."""
    if arch not in ARCHS:
        raise CheckpointError(f"unknown arch {arch!r}: gpt2 or roberta")
    if str(path) == PRETRAINED:
        raise CheckpointError(f"model_name_or_path {PRETRAINED!r} names a study's pretrain checkpoint: `dtype-bench "
                              f"sweep` replaces it with the checkpoint's directory; outside a sweep give that directory")
    _check_type(arch, str(path), _local_config(path), scenario)


def check_loaded(arch: str, path: str | os.PathLike, loading_info: dict, model: nn.Module,
                 scenario: str | None = None) -> dict:
    """After ``from_pretrained(path, output_loading_info=True)``: raise (one line) when a
    backbone weight is missing or mismatched, or the checkpoint is another architecture;
    else return what the record keeps. A missing task head (a classification head, an MLM
    head on a backbone-only checkpoint) is expected: it is trained from scratch."""
    path = str(path)
    config = _local_config(path) if Path(path).expanduser().is_dir() else _cached_config(path)
    _check_type(arch, path, config, scenario)
    prefix = getattr(model, "base_model_prefix", "") or ""
    nested = bool(prefix) and isinstance(getattr(model, prefix, None), nn.Module)

    def in_backbone(key: str) -> bool:
        return not nested or key.startswith(prefix + ".")

    backbone = getattr(model, prefix) if nested else model
    total = sum(p.numel() for p in backbone.parameters())
    names = dict(model.named_parameters())
    missing = sorted(k for k in (loading_info.get("missing_keys") or ()) if in_backbone(k))
    mismatched = sorted({(m[0] if isinstance(m, (tuple, list)) else m)
                         for m in (loading_info.get("mismatched_keys") or ())})
    mismatched = [k for k in mismatched if in_backbone(k)]
    bad = missing + [k for k in mismatched if k not in missing]
    if bad:
        lost = sum(names[k].numel() for k in bad if k in names)
        archs = ", ".join((config or {}).get("architectures") or []) or "unknown architecture"
        raise CheckpointError(
            f"checkpoint {path!r} ({archs}) lacks {len(bad)} {ARCH_NAME[arch]} backbone weights "
            f"({100 * lost / max(total, 1):.0f}% of its parameters; e.g. {', '.join(bad[:4])}"
            f"{' ...' if len(bad) > 4 else ''}): not a {ARCH_NAME[arch]} checkpoint? {which_scenarios()}")
    new_head = sorted(k for k in (loading_info.get("missing_keys") or ()) if not in_backbone(k))
    cfg_arch = (config or {}).get("architectures") or getattr(model.config, "architectures", None) or []
    out: dict[str, Any] = {
        "path": path,
        "architecture": cfg_arch[0] if cfg_arch else None,
        "model_type": (config or {}).get("model_type", MODEL_TYPE[arch]),
        "backbone_parameters": total,
        "loaded_fraction": 1.0,
        "new_weights": new_head,  # initialised fresh: the task head
    }
    meta = read_meta(path) if Path(path).expanduser().is_dir() else None
    if meta:
        out["checkpoint"] = {k: meta.get(k) for k in ("run_id", "scenario", "config", "seed", "steps", "status",
                                                       "val_loss", "quality", "commit", "date", "trained_param_dtype")
                             if k in meta}
    return out


def load_pretrained(hf_class: type, arch: str, path: str | os.PathLike, scenario: str | None = None,
                    **kwargs) -> tuple[nn.Module, dict]:
    """``hf_class.from_pretrained(path, **kwargs)`` with the checks around it: the model and
    the dict for the record (``check_loaded``)."""
    check_checkpoint(arch, path, scenario)
    model, loading = hf_class.from_pretrained(str(path), output_loading_info=True, **kwargs)
    return model, check_loaded(arch, path, loading, model, scenario)


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
