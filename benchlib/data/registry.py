"""Real data for the scenarios built offline from what Debian's package archive ships: the
local-file schema ``files`` reads, plus a ``provenance.yaml`` that ``files`` copies into every
record. ``docs/data/README.md`` says what was built from which package and how to rebuild it.

Verbs: ``text`` (LM text, A and B: one document per file of a ``.deb`` whose path matches
``--include``, by default the kernel documentation's reStructuredText, markup lines dropped),
``tokenizer`` (a byte-level BPE trained on built text, ``build_tokenizer``) and ``labels``
(``debtags``, C and D: a package's description and its debtags; ``debsection``, E and F: its section).

Both are deterministic: documents are written in sorted order into gzip files with no
timestamp, and a document's split is a hash of its key (the file's path in the package; the
description's MD5 that Debian publishes, so identical descriptions never straddle splits):
``split_of_key``. The split files are named train / validation / test, which ``files`` reads
as such (test is never read by the loaders).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import lzma
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

import yaml

from benchlib.core.records import atomic_file
from benchlib.data.files import BPE_SPECIALS, PROVENANCE, _bpe_tokenizer, _hash_files, read_provenance
from benchlib.data.tasks import BadDataError

DEFAULT_INCLUDE = r"/Documentation/.*\.rst(\.gz)?$"
TEXT_SPLIT = {"validation": 5}
"""Percent of documents per held-out split; the rest is train."""
LABEL_SPLIT = {"validation": 10, "test": 10}
MIN_CHARS = 200
"""Shorter documents (index pages, stubs) are left out of the LM text."""
_RST_DROP = re.compile(r"^\s*\.\. |^\s+:[\w -]+:(\s|$)|^\s*([=\-~^\"'`#*+<>_])\2{3,}\s*$")
"""reStructuredText markup lines: directives, comments and labels (``.. x::``), directive
options (``   :maxdepth: 2``; not prose opening with a role, ``:c:func:`x` does``) and
section under/overlines."""


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


def _write_splits(out: Path, docs: dict[str, dict], percents: dict[str, int]) -> dict[str, int]:
    """``docs`` (key -> row) into ``out/<split>.jsonl.gz``; the documents per split."""
    out.mkdir(parents=True, exist_ok=True)
    by_split: dict[str, list[dict]] = {name: [] for name in ("train", *percents)}
    for key in sorted(docs):
        by_split[split_of_key(key, percents)].append(docs[key])
    counts = {name: _write_jsonl_gz(out / f"{name}.jsonl.gz", rows) for name, rows in by_split.items()}
    if not all(counts.values()):
        raise BadDataError(f"{out}: an empty split ({counts}): too few documents to split")
    return counts


def _write_provenance(out: Path, facts: dict) -> None:
    (out / PROVENANCE).write_text(yaml.safe_dump(facts, sort_keys=False, width=100))


# ---- LM text from a documentation package ------------------------
def clean_rst(text: str) -> str:
    """reStructuredText as prose: markup-only lines dropped, runs of blank lines made one."""
    kept = [line.rstrip() for line in text.splitlines() if not _RST_DROP.match(line)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def _licence(copyright_text: str) -> str:
    """The ``License:`` of the ``Files: *`` stanza of a Debian copyright file."""
    stanza = re.search(r"^Files:\s*\*\s*$(.*?)(?:\n\n|\Z)", copyright_text, re.M | re.S)
    found = re.search(r"^License:\s*(\S.*)$", stanza.group(1) if stanza else "", re.M)
    return found.group(1).strip() if found else "see the package's copyright file"


def build_text(deb: Path, out: Path, include: str = DEFAULT_INCLUDE) -> dict:
    """``out/{train,validation}.jsonl.gz`` ({"text"}) and ``out/provenance.yaml`` from the
    files of ``deb`` whose path matches ``include``; returns the provenance facts."""
    from debian.debfile import DebFile
    if not deb.is_file():
        raise BadDataError(f"package file not found: {deb} (fetch it with: apt-get download linux-doc-6.1)")
    pkg = DebFile(str(deb))
    control = pkg.debcontrol()
    name, version = control["Package"], control["Version"]
    pattern = re.compile(include)
    docs, licence, chars = {}, "see the package's copyright file", 0
    with pkg.data.tgz() as tar:
        for member in tar:
            if not member.isfile():
                continue
            path = member.name.lstrip("./")
            if path == f"usr/share/doc/{name}/copyright":
                licence = _licence(tar.extractfile(member).read().decode("utf-8", "replace"))
            elif pattern.search("/" + path):
                data = tar.extractfile(member).read()
                text = clean_rst((gzip.decompress(data) if path.endswith(".gz") else data).decode("utf-8", "replace"))
                if len(text) >= MIN_CHARS:
                    docs[path] = {"text": text}
                    chars += len(text)
    if not docs:
        raise BadDataError(f"{deb}: no file matches --include {include!r}")
    counts = _write_splits(out, docs, TEXT_SPLIT)
    facts = {"origin": "Debian package", "package": name, "version": version, "licence": licence,
             "package_bytes": deb.stat().st_size, "documents": counts, "characters": chars,
             "selection": f"files matching {include!r}, reStructuredText markup lines dropped, "
                          f"documents under {MIN_CHARS} characters left out",
             "split": _split_rule("the file's path in the package", TEXT_SPLIT),
             "built_by": f"python -m benchlib.data.registry text {deb.name} OUT"}
    _write_provenance(out, facts)
    return facts


def _split_rule(key: str, percents: dict[str, int]) -> str:
    held = ", ".join(f"{k} {v}%" for k, v in percents.items())
    return f"SHA-256 of {key}, first 8 hex digits mod 100: {held}, the rest train"


def build_tokenizer(text: Path, out: Path, vocab_size: int) -> dict:
    """A byte-level BPE trained on ``text``'s training split (the loaders' recipe, ``files``),
    saved as a tokenizer directory at ``out``. A study names it as ``tokenizer`` for every run,
    so that the classification runs fine-tune a checkpoint pretrained on the text with the
    vocabulary it was pretrained with (a run without one trains a BPE on its own corpus)."""
    import tempfile
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    train = text / "train.jsonl.gz"
    if not train.is_file():
        raise BadDataError(f"{train} not found: build the text first (python -m benchlib.data.registry text ...)")

    def batches() -> Iterator[list[str]]:
        with gzip.open(train, "rt", encoding="utf-8") as fh:
            rows = [json.loads(line)["text"] for line in fh]
        yield from (rows[i:i + 1000] for i in range(0, len(rows), 1000))
    with tempfile.TemporaryDirectory() as cache:
        tok = _bpe_tokenizer(batches, _hash_files([str(train)]), vocab_size, Path(cache))
        fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(tok.name),
                                       **dict(zip(("pad_token", "bos_token", "eos_token", "mask_token"), BPE_SPECIALS)))
    fast.save_pretrained(str(out))
    facts = {**read_provenance(text), "tokenizer": f"byte-level BPE, {tok.vocab_size} tokens, trained on {train.name}",
             "built_by": f"python -m benchlib.data.registry tokenizer {text} OUT --vocab {vocab_size}"}
    _write_provenance(out, facts)
    return facts


# ---- Labelled descriptions from the archive's indices ------------
def _open_text(path: Path) -> io.TextIOBase:
    """Plain, .gz or .xz index files (apt keeps lz4 ones: ``/usr/lib/apt/apt-helper cat-file``
    turns them into plain text)."""
    if not path.is_file():
        raise BadDataError(f"index file not found: {path}")
    if path.suffix == ".lz4":
        raise BadDataError(f"{path}: lz4 is not read here; decompress it first: "
                           f"/usr/lib/apt/apt-helper cat-file {path} > {path.with_suffix('').name}")
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    return opener(path, "rt", encoding="utf-8", errors="replace")


def _paragraphs(paths: list[Path]) -> Iterator:
    from debian.deb822 import Deb822
    for p in paths:
        with _open_text(p) as fh:
            yield from Deb822.iter_paragraphs(fh, use_apt_pkg=False)


def _description(long_field: str) -> str:
    """Description-en as text: the synopsis line, then the body (" ." lines are paragraph breaks)."""
    first, _, body = long_field.partition("\n")
    lines = [line[1:] if line.startswith(" ") else line for line in body.splitlines()]
    paras = "\n".join("" if line.strip() == "." else line for line in lines)
    return f"{first.strip()}\n{paras.strip()}".strip()


def build_labels(packages: list[Path], translations: list[Path], out: Path, release: Path | None = None) -> dict:
    """``out/debtags`` (multi-label: the package's debtags) and ``out/debsection`` (single
    label: its section) of {text, labels|label}, one document per distinct description."""
    texts = {}
    for p in _paragraphs(translations):
        if "Description-md5" in p and "Description-en" in p:
            texts[p["Description-md5"]] = _description(p["Description-en"])
    tagged, sectioned, missing = {}, {}, 0
    for p in _paragraphs(packages):
        md5 = p.get("Description-md5")
        if md5 not in texts:
            missing += md5 is not None
            continue
        section = p.get("Section", "").split("/")[-1]  # contrib/net -> net
        if section and md5 not in sectioned:
            sectioned[md5] = {"text": texts[md5], "label": section}
        tags = sorted({t.strip() for t in p.get("Tag", "").split(",") if t.strip()})
        if tags and md5 not in tagged:
            tagged[md5] = {"text": texts[md5], "labels": tags}
    if not tagged or not sectioned:
        raise BadDataError(f"no package of {', '.join(map(str, packages))} has a description in "
                           f"{', '.join(map(str, translations))} with Tag: and Section: fields")
    facts = {"origin": "Debian archive indices", "licence": _ARCHIVE_LICENCE,
             **_release_facts(release), "index_files": ", ".join(p.name.split("_dists_")[-1] for p in packages + translations),
             "index_bytes": sum(p.stat().st_size for p in packages + translations),
             "packages_without_description": missing,
             "split": _split_rule("the description's MD5 (Description-md5)", LABEL_SPLIT),
             "built_by": "python -m benchlib.data.registry labels OUT --packages .. --translations .."}
    done = {}
    for name, docs, field in (("debtags", tagged, "labels"), ("debsection", sectioned, "label")):
        counts = _write_splits(out / name, docs, LABEL_SPLIT)
        freq = Counter(x for d in docs.values() for x in (d[field] if field == "labels" else [d[field]]))
        done[name] = {**facts, "task": "multi-label (C, D)" if field == "labels" else "single-label (E, F)",
                      "text": "the package's English description (Translation-en Description-en)",
                      "labels": "debtags Tag: values" if field == "labels" else "Section: (archive area dropped)",
                      "documents": counts, "distinct_labels": len(freq),
                      "labels_under_10_documents": sum(c < 10 for c in freq.values()),
                      "top_label_share": round(freq.most_common(1)[0][1] / len(docs), 3)}
        _write_provenance(out / name, done[name])
    return done


_ARCHIVE_LICENCE = ("per package: each description is part of a package in Debian main (DFSG-free "
                    "licences) and is published by Debian in its archive indices")


def _release_facts(release: Path | None) -> dict:
    """The archive's name and version as a package's would be recorded (``unknown`` without
    its Release file)."""
    facts = {"package": "Debian archive indices (Packages, Translation-en)", "version": "unknown"}
    if release is None:
        return facts
    from debian.deb822 import Release
    with _open_text(release) as fh:
        r = Release(fh)
    name = " ".join(str(r.get(k, "")) for k in ("Origin", "Version", "Codename")).strip()
    return {**facts, "version": f"{name} of {r.get('Date', 'unknown date')}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchlib.data.registry", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    t = sub.add_parser("text", help="LM text from a documentation .deb")
    t.set_defaults(build=lambda a: build_text(a.deb, a.out, a.include))
    t.add_argument("deb", type=Path)
    t.add_argument("out", type=Path)
    t.add_argument("--include", default=DEFAULT_INCLUDE, help="regex on the file's path in the package")
    tk = sub.add_parser("tokenizer", help="a BPE tokenizer directory trained on built text")
    tk.set_defaults(build=lambda a: build_tokenizer(a.text, a.out, a.vocab))
    tk.add_argument("text", type=Path)
    tk.add_argument("out", type=Path)
    tk.add_argument("--vocab", type=int, default=50304)
    lab = sub.add_parser("labels", help="labelled descriptions from Packages + Translation-en")
    lab.set_defaults(build=lambda a: build_labels(a.packages, a.translations, a.out, a.release))
    lab.add_argument("out", type=Path)
    lab.add_argument("--packages", type=Path, nargs="+", required=True, help="Packages index file(s)")
    lab.add_argument("--translations", type=Path, nargs="+", required=True, help="Translation-en file(s)")
    lab.add_argument("--release", type=Path, help="the archive's InRelease / Release file (recorded)")
    args = ap.parse_args(argv)
    try:
        facts = args.build(args)
    except BadDataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(yaml.safe_dump(facts, sort_keys=False, width=100))
    return 0


if __name__ == "__main__":
    sys.exit(main())
