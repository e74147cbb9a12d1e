"""Local data files read before ``datasets`` sees them: a mistake becomes one line naming the
file, the line and the expected shape, where ``datasets`` would say ``StopIteration``, or quietly
accept labels of the wrong shape (``"labels": "a,b,c"`` read as five one-character labels; an int
label turning a multi-label task into a single-label one).
"""
from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Any, Iterator

from benchlib.data.tasks import BadDataError

SPLIT_NAMES = {"train": "train", "validation": "validation", "val": "validation",
               "valid": "validation", "dev": "validation", "test": "test", "unsupervised": "unsupervised"}
"""File-name words -> split. ``unsupervised`` is IMDB's split of unlabelled reviews (label -1 on
the hub): named so that it is recognised and never read, rather than taken for training data."""
EXPECTED = {
    "multilabel": 'a list of labels, e.g. "labels": ["tax", "trade"] (strings or ints)',
    "singlelabel": 'one label, e.g. "label": "tax", or a list ("labels": [...]; the most frequent training label '
                   'of the document is its target)',
}
LABEL_KEYS = ("eurovoc_concepts", "labels", "label")  # the order ``files._docs`` reads them in


def split_of(path: str | Path) -> str | None:
    """train / validation / test / unsupervised when a word of the file's name says so (``eurlex.dev.jsonl``,
    ``train-2024.txt``, ``valid.jsonl``), else None. A name with two different split words
    is refused: which one it is cannot be guessed."""
    words = {SPLIT_NAMES[w] for w in re.split(r"[^a-z]+", Path(path).name.lower()) if w in SPLIT_NAMES}
    if len(words) > 1:
        raise BadDataError(f"{path}: the file name names several splits ({', '.join(sorted(words))}): rename it "
                           f"so that one of train / validation / test appears in it")
    return words.pop() if words else None


def data_suffix(path: str | Path) -> str:
    """A data file's type suffix, lower case; a trailing ``.gz`` (gzip, read as is) aside."""
    suffixes = [s.lower() for s in Path(path).suffixes[-2:]]
    if len(suffixes) == 2 and suffixes[1] == ".gz":
        return suffixes[0]
    return suffixes[-1] if suffixes else ""


def open_text(path: Path):
    """A data file as text, gzip-compressed or not."""
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def check_files(files: list[str], builder: str, task: str) -> None:
    """Raise ``BadDataError`` (one line) at the first problem in any of ``files``."""
    for f in files:
        try:
            if builder == "text":
                _check_text(Path(f))
            elif builder == "json":
                _check_json(Path(f), task)
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise BadDataError(f"{f}: not a complete gzip file ({e}); rebuild or re-copy it") from None


def _check_text(path: Path) -> None:
    with open_text(path) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), ""):
            if chunk.strip():
                return
    raise BadDataError(f"{path} is empty: no text to train on (documents are blank-line separated paragraphs)")


def json_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, parsed value) per document: JSON lines, or the items of one JSON array."""
    with open_text(path) as fh:
        head = fh.read(1 << 16).lstrip()
    if head.startswith("["):
        try:
            with open_text(path) as fh:
                items = json.load(fh)
        except ValueError as e:
            raise BadDataError(f"{path}: not valid JSON ({e})") from None
        for i, item in enumerate(items if isinstance(items, list) else [items]):
            yield f"{path} item {i}", item
        return
    with open_text(path) as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield f"{path} line {n}", json.loads(line)
            except ValueError as e:
                raise BadDataError(f"{path} line {n}: not valid JSON ({e.msg if hasattr(e, 'msg') else e}); "
                                   f"each line must be one JSON object") from None


def _check_json(path: Path, task: str) -> None:
    seen, kinds = 0, {}
    for where, row in json_rows(path):
        seen += 1
        if not isinstance(row, dict):
            raise BadDataError(f"{where}: expected a JSON object like {{\"text\": ...}}, got {_show(row)}")
        if "text" not in row or not isinstance(row["text"], (str, type(None))):
            raise BadDataError(f"{where}: expected a string field 'text', "
                               f"{'got ' + _show(row['text']) if 'text' in row else 'found ' + str(sorted(row))}")
        if task in ("multilabel", "singlelabel"):
            key = next((k for k in LABEL_KEYS if k in row), None)
            if key is None:
                raise BadDataError(f"{where}: no labels: expected {EXPECTED[task]}")
            problem = label_problem(key, row[key], task)
            if problem:
                raise BadDataError(f"{where}: {problem}")
            for x in row[key] if isinstance(row[key], list) else [row[key]]:
                kind = type(x).__name__
                if kind not in kinds:
                    kinds[kind] = where
            if len(kinds) > 1:
                raise BadDataError(f"{where}: labels mix strings and ints ({', '.join(f'{k} first at {w}' for k, w in kinds.items())}):"
                                   f" use one kind, so that 7 and \"7\" are not two labels")
    if seen == 0:
        raise BadDataError(f"{path} is empty: no documents (expected one JSON object per line)")


def label_problem(key: str, value: Any, task: str) -> str | None:
    def label(x):
        return isinstance(x, (str, int)) and not isinstance(x, bool)
    if value is None:
        return None  # a document without labels: counted, and dropped where a target is needed
    if isinstance(value, list):
        bad = [x for x in value if not label(x)]
        return f"{key!r} holds {_show(bad[0])}: labels are strings or ints" if bad else None
    if label(value):
        if task == "singlelabel":
            return None
        hint = (f'; to split the string, write "{key}": {json.dumps(value.split(","))}'
                if isinstance(value, str) and "," in value else "")
        return (f"{key!r} is {_show(value)}, one {type(value).__name__}: multi-label scenarios (C, D) need "
                f"{EXPECTED[task]}{hint}; one label per document is single-label data (E, F)")
    return f"{key!r} is {_show(value)}: expected {EXPECTED[task]}"


def _show(v: Any) -> str:
    text = json.dumps(v)
    return text if len(text) <= 60 else text[:57] + "..."
