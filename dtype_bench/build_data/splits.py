"""The data builders are deterministic: documents are written in sorted order into gzip files with no
timestamp, and a document's split is a hash of its key (the file's path in the package, which
Debian lets no two packages share; the
description's MD5 that Debian publishes, so identical descriptions never straddle splits):
``split_of_key``. The split files are named train / validation / test, which ``files`` reads
as such (test is never read by the loaders).

How the builders write: gzip-compressed JSON lines in sorted order, a ``provenance.yaml`` beside
them (``write_provenance``)."""
from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Iterable

import yaml

from benchlib.core.records import atomic_file
from benchlib.data.files import PROVENANCE
from benchlib.data.tasks import BadDataError


TEXT_SPLIT = {"validation": 5}
"""Percent of documents per held-out split; the rest is train."""


LABEL_SPLIT = {"validation": 10, "test": 10}


MIN_CHARS = 200
"""Shorter documents (index pages, stubs) are left out of the LM text."""


def split_of_key(key: str, percents: dict[str, int]) -> str:
    """The split of a document, from the first 8 hex digits of SHA-256(key) mod 100: stable
    under reordering, adding or removing other documents."""
    bucket = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 100
    edge = 0
    for name, pct in percents.items():
        edge += pct
        if bucket < edge:
            return name
    return "train"


def _write_jsonl_gz(path: Path, rows: Iterable[dict]) -> int:
    """JSON lines, gzip with no name or mtime in the header: the same rows give the same bytes."""
    n = 0
    with atomic_file(path) as tmp, open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                                          mtime=0) as gz:
        for row in rows:
            gz.write((json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n").encode())
            n += 1
    return n


def write_splits(out: Path, docs: dict[str, dict], percents: dict[str, int],
                  max_train: int | None = None) -> dict[str, int]:
    """``docs`` (key -> row) into ``out/<split>.jsonl.gz``; the documents per split. With
    ``max_train``, train keeps the ``max_train`` documents of lowest ``subsample_rank`` (held-out
    splits are never cut, so a subsample is evaluated as the whole set is)."""
    out.mkdir(parents=True, exist_ok=True)
    by_split: dict[str, list[str]] = {name: [] for name in ("train", *percents)}
    for key in sorted(docs):
        by_split[split_of_key(key, percents)].append(key)
    if max_train is not None and len(by_split["train"]) > max_train:
        keep = set(sorted(by_split["train"], key=subsample_rank)[:max_train])
        by_split["train"] = [k for k in by_split["train"] if k in keep]
    counts = {name: _write_jsonl_gz(out / f"{name}.jsonl.gz", (docs[k] for k in keys))
              for name, keys in by_split.items()}
    if not all(counts.values()):
        raise BadDataError(f"{out}: an empty split ({counts}): too few documents to split")
    return counts


def subsample_rank(key: str) -> str:
    """Order of a training subsample: SHA-256 of ``subsample:<key>``, salted so that it does not
    follow the split's own hash; a document's rank depends on its key alone."""
    return hashlib.sha256(f"subsample:{key}".encode()).hexdigest()


def write_provenance(out: Path, facts: dict) -> None:
    (out / PROVENANCE).write_text(yaml.safe_dump(facts, sort_keys=False, width=100))


def split_rule(key: str, percents: dict[str, int]) -> str:
    held = ", ".join(f"{k} {v}%" for k, v in percents.items())
    return f"SHA-256 of {key}, first 8 hex digits mod 100: {held}, the rest train"
