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

from benchlib.core.dtypes import get_config
from benchlib.study.studyfile import PRETRAINED, STUDY_KEYS, Study, read_yaml

# what every run of a rehearsal is: small enough that a study of 10 configs rehearses in a minute;
# steps enough that an eval, a saved state and a logged step each happen twice
REHEARSAL = {"size": "tiny", "device": "cpu", "compile": "off", "cudagraphs": False, "steps": 8, "warmup_steps": 1,
             "batch_size": 2, "grad_accum": 1, "seq_len": 32, "log_every": 2, "eval_batches": 1, "timing_warmup": 1,
             "timing_windows": 2}
SHRUNK = {"eval_every": 4, "state_every": 4}  # kept off where the study has them off (0)
DROPPED = ("tokenizer", "vocab_size", "cache_dir")  # a tokenizer file, a vocabulary of the real text
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
    if d.get("notebook_seeds"):  # a study that executes notebooks rehearses each cell in one
        d["notebook_seeds"] = d["seeds"]
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


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def needs(study: Study) -> list[str]:
    """What a GPU call of ``study`` (the real one) reads besides the repository, one line each:
    every local corpus, tokenizer and checkpoint its runs and pretrain stages name, with its size
    here (or that it is not here), then the packages beyond torch and transformers it needs."""
    runs = study.runs() + [r for rs in study.pretrain_runs().values() for r in rs]
    paths = {v for r in runs for v in (r.cfg.data, r.cfg.tokenizer, r.cfg.model_name_or_path)
             if v and ("/" in v or Path(v).exists()) and v != PRETRAINED and not v.startswith("<")}
    here = [p for p in sorted(paths) if Path(p).exists()]
    lines = [f"{p}: {_size(Path(p)) / 2**20:.1f} MiB" if p in here else f"{p}: not here (build it first: "
             f"docs/data/README.md)" for p in sorted(paths)]
    if len(here) > 1:
        lines.append(f"in all {sum(_size(Path(p)) for p in here) / 2**20:.1f} MiB")
    eight_bit = sorted({r.cfg.config for r in runs if "bitsandbytes" in get_config(r.cfg.config).requirements()})
    if eight_bit:
        lines.append(f"bitsandbytes (for {', '.join(eight_bit)})")
    notebooks = sum(r.notebook for r in study.runs()) + sum(len(v) for v in study.pretrain_runs().values())
    if notebooks:
        lines.append(f"the notebook stack (papermill, ipykernel; {notebooks} run{'s' * (notebooks > 1)} execute"
                     f"{'s' * (notebooks == 1)} a notebook)")
    return lines
