"""LM text from the Python source of the installed distributions (``python -m dtype_bench.build_data
source``): built on the GPU host from its own packages, for a corpus too large to carry."""
from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

from benchlib.data.files import PROVENANCE
from benchlib.data.tasks import BadDataError
from dtype_bench.build_data.splits import MIN_CHARS, TEXT_SPLIT, split_rule, write_provenance, write_splits


# ---- LM text from installed Python distributions ---------------------------------------------
MAX_SOURCE_BYTES = 200_000
"""Larger ``.py`` files (generated tables, vendored data) are left out of ``source`` text."""


def _dist_licence(meta) -> str:
    """A distribution's licence: its License-Expression, else the first line of License, else its
    licence classifiers, else 'not stated'."""
    text = meta.get("License-Expression") or (meta.get("License") or "").strip().splitlines()[:1]
    text = text if isinstance(text, str) else (text[0][:80] if text else "")
    classes = [c.split(" :: ")[-1] for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    return text or "; ".join(classes) or "not stated"


def _pinned(pin: Path, dists: dict) -> list[str]:
    """The distributions ``pin`` (a source corpus's provenance.yaml) names, each installed here at
    the version it names; else a one-line error naming (up to three of) those missing or different."""
    f = pin / PROVENANCE if pin.is_dir() else pin
    if not f.is_file():
        raise BadDataError(f"--pin {pin}: no such file (an earlier build's {PROVENANCE})")
    facts = yaml.safe_load(f.read_text()) or {}
    want = {str(p["name"]).lower(): str(p["version"]) for p in (facts.get("packages") if isinstance(facts, dict) else
                                                                 None) or [] if isinstance(p, dict) and "name" in p}
    if not want:
        raise BadDataError(f"--pin {pin}: names no packages (a provenance.yaml that build_data source wrote)")
    missing = [f"{n} {v}" for n, v in want.items() if n not in dists]
    other = [f"{n} {dists[n].version} (pinned {v})" for n, v in want.items() if n in dists and dists[n].version != v]
    if missing or other:
        raise BadDataError(f"--pin {pin}: this interpreter's packages give another corpus: "
                           + "; ".join(x for x in (f"{len(missing)} missing ({', '.join(missing[:3])})" if missing else "",
                                                   f"{len(other)} at another version ({', '.join(other[:3])})"
                                                   if other else "") if x))
    return sorted(want)


def build_source(out: Path, roots: list[Path] | None = None, pin: Path | None = None) -> dict:
    """``out/{train,validation}.jsonl.gz`` and ``provenance.yaml`` from the Python source of the
    distributions installed under ``roots`` (default this interpreter's site-packages): one document
    per ``.py`` file a distribution's RECORD lists, as written; files under ``MIN_CHARS`` or over
    ``MAX_SOURCE_BYTES``, not UTF-8, or identical to one kept (in key order) left out. Built on the
    host that trains, from its own packages, so a corpus of 100M tokens and more needs nothing carried
    to it; its provenance names every distribution, version and licence. With ``pin`` (an earlier
    build's provenance.yaml), only the distributions it names, refused unless each is installed at
    its version: a host image with other packages gives the same corpus or none."""
    import importlib.metadata as md
    import sysconfig
    roots = list(roots or dict.fromkeys(Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")))
    dists = {}
    for d in md.distributions(path=[str(r) for r in roots]):
        dists.setdefault((d.metadata["Name"] or "").lower(), d)  # the first on the path, as imports find it
    keys = _pinned(pin, dists) if pin else sorted(k for k in dists if k)
    packages, rows, seen = [], {}, set()
    for key in keys:
        d = dists[key]
        p = {"name": d.metadata["Name"], "version": d.version, "licence": _dist_licence(d.metadata),
             "documents": 0, "characters": 0, "left_out": 0}
        for f in sorted((f for f in d.files or [] if f.suffix == ".py"), key=str):
            try:
                raw = Path(f.locate()).read_bytes()
                text = raw.decode()
            except (OSError, UnicodeDecodeError):
                raw = text = None
            digest = hashlib.sha256(raw).digest() if raw is not None else None
            if text is None or not MIN_CHARS <= len(raw) <= MAX_SOURCE_BYTES or digest in seen:
                p["left_out"] += 1
                continue
            seen.add(digest)
            rows[f"{p['name']}/{f}"] = {"text": text}
            p["documents"] += 1
            p["characters"] += len(text)
        if p["documents"]:
            packages.append(p)
    if not rows:
        raise BadDataError(f"no Python source of an installed distribution under {', '.join(map(str, roots))}")
    counts = write_splits(out, rows, TEXT_SPLIT)
    facts = {"origin": "installed Python distributions (PyPI)", "package": f"{len(packages)} distributions (packages)",
             "version": "per package (packages)",
             "licence": "per package (packages): " + "; ".join(sorted({p["licence"] for p in packages})[:12])
                        + ("; ..." if len({p["licence"] for p in packages}) > 12 else ""),
             "documents": counts, "characters": sum(p["characters"] for p in packages),
             "selection": f".py files each distribution's RECORD lists, as written; files under {MIN_CHARS} "
                          f"characters or over {MAX_SOURCE_BYTES:,} bytes, not UTF-8, or identical to one kept "
                          f"(in key order) left out",
             "split": split_rule("<distribution>/<file's path in its RECORD>", TEXT_SPLIT),
             "built_by": "python -m dtype_bench.build_data source OUT" + "".join(f" --root {r}" for r in roots)
                         + (f" --pin {pin}" if pin else ""),
             "packages": packages}
    write_provenance(out, facts)
    return facts
