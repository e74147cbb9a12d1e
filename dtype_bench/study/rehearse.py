"""A GPU study rehearsed on a CPU first (``dtype-bench sweep STUDY --rehearse``): the same matrix
(scenarios, configs, arms, pretrain stages, ``notebook_seeds``, analyses), each config at the
study's first seed only, at ``tiny`` on synthetic data for a few steps. What a rehearsal finds is
the study's wiring, not its numbers: a fine-tuning that cannot load the checkpoint its pretrain
stage saves, a config this machine cannot build, an analysis its records do not feed. A 10-minute
GPU call is then not spent finding them.

Every place a study sets run settings (the top level, ``overrides:`` layers, ``pretrain:`` phases,
``arms:``) is rewritten by ``REHEARSAL``; data and checkpoints the CPU host may not have become
synthetic data and a model from scratch (``pretrained`` stays: the rehearsal's own pretrain)."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from benchlib.study.studyfile import PRETRAINED, STUDY_KEYS, read_yaml

# what every run of a rehearsal is: small enough that a study of 10 configs rehearses in a minute;
# steps enough that an eval, a saved state and a logged step each happen twice
REHEARSAL = {"size": "tiny", "device": "cpu", "compile": "off", "cudagraphs": False, "steps": 8, "warmup_steps": 1,
             "batch_size": 2, "grad_accum": 1, "seq_len": 32, "log_every": 2, "eval_batches": 1, "timing_warmup": 1,
             "timing_windows": 2}
SHRUNK = {"eval_every": 4, "state_every": 4}  # kept off where the study has them off (0)
DROPPED = ("tokenizer", "vocab_size", "cache_dir")  # a tokenizer file, a vocabulary of the real text
# the host's own data: the study's corpus and checkpoints are where its GPU host has them
SUFFIX = ".rehearsal"


def rehearse_settings(d: dict) -> dict:
    """One settings mapping as a rehearsal runs it (``REHEARSAL``, ``SHRUNK``, ``DROPPED``; real data
    and checkpoints replaced); keys it does not set stay."""
    out = {k: v for k, v in d.items() if k not in DROPPED}
    out.update({k: v for k, v in REHEARSAL.items() if k in d})
    out.update({k: v for k, v in SHRUNK.items() if d.get(k)})
    if "data" in out:
        out["data"] = "synthetic"
    if out.get("model_name_or_path") not in (None, PRETRAINED):
        out["model_name_or_path"] = None  # a hub id or a local checkpoint: from scratch at tiny
    return out


def rehearsal(study: dict) -> dict:
    """The study file ``study`` (a parsed mapping) as its rehearsal."""
    d = copy.deepcopy(study)
    settings = rehearse_settings({k: v for k, v in d.items() if k not in STUDY_KEYS})
    d = {k: v for k, v in d.items() if k in STUDY_KEYS}
    d.update(settings)
    d.update({k: REHEARSAL[k] for k in REHEARSAL})  # every run, whatever the file's defaults
    d["study"] = f"{d.get('study') or 'study'}{SUFFIX}"
    d["seeds"] = list(d.get("seeds") or [0])[:1]
    d.pop("config_seeds", None)  # each config at the first seed
    if d.get("notebook_seeds") is not None:
        d["notebook_seeds"] = [k for k in d["notebook_seeds"] if k in d["seeds"]]
    d.pop("executor", None)  # here, in this process
    d["overrides"] = {layer: _nested(v) for layer, v in (d.get("overrides") or {}).items()}
    d["pretrain"] = {arch: [rehearse_settings(p) for p in v] if isinstance(v, list) else rehearse_settings(v)
                     for arch, v in (d.get("pretrain") or {}).items()}
    d["arms"] = {arm: rehearse_settings(v or {}) for arm, v in (d.get("arms") or {}).items()}
    return {k: v for k, v in d.items() if v not in ({}, None) or k == "notebook_seeds"}


def _nested(v: Any) -> Any:
    """An override layer: its settings rewritten; a nested layer (``cls: {roberta: {...}}``) too."""
    if not isinstance(v, dict):
        return v
    inner = {k: _nested(x) for k, x in v.items() if isinstance(x, dict) and k != "dist"}
    return {**rehearse_settings({k: x for k, x in v.items() if k not in inner}), **inner}


def write_rehearsal(path: Path, out: Path) -> Path:
    """The rehearsal of the study file at ``path``, written into ``out`` (created) as
    ``<stem>.rehearsal.yaml``; returns its path."""
    d = read_yaml(Path(path))
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{Path(path).stem}{SUFFIX}.yaml"
    header = f"# The rehearsal of {path} (dtype-bench sweep --rehearse): written by dtype_bench.study.rehearse\n"
    target.write_text(header + yaml.safe_dump(rehearsal(d), sort_keys=False))
    return target
