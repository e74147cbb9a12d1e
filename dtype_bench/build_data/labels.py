"""Labelled descriptions from the Debian archive's indices (Packages + Translation-en): ``labels``
(debtags, C and D; section, E and F) and ``deps`` (the packages a description depends on, thousands
of labels)."""
from __future__ import annotations

import gzip
import io
import lzma
import re
from collections import Counter
from pathlib import Path
from typing import Iterator

from benchlib.data.tasks import BadDataError
from dtype_bench.build_data.splits import LABEL_SPLIT, split_of_key, split_rule, write_provenance, write_splits


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


def build_labels(packages: list[Path], translations: list[Path], out: Path, release: Path | None = None,
                 max_train_docs: int | None = None) -> dict:
    """``out/debtags`` (multi-label: the package's debtags) and ``out/debsection`` (single
    label: its section) of {text, labels|label}, one document per distinct description; with
    ``max_train_docs``, a training subsample of each (``write_splits``), for a smaller transfer."""
    texts = _texts(translations, max_train_docs)
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
    facts = _index_facts(packages, translations, release, missing, "labels OUT")
    done = {}
    for name, docs, field in (("debtags", tagged, "labels"), ("debsection", sectioned, "label")):
        counts = write_splits(out / name, docs, LABEL_SPLIT, max_train_docs)
        sub = _subsample_facts(docs, counts, facts["built_by"], max_train_docs)
        freq = Counter(x for d in docs.values() for x in (d[field] if field == "labels" else [d[field]]))
        done[name] = {**facts, "task": "multi-label (C, D)" if field == "labels" else "single-label (E, F)",
                      "text": "the package's English description (Translation-en Description-en)",
                      "labels": "debtags Tag: values" if field == "labels" else "Section: (archive area dropped)",
                      "documents": counts, "distinct_labels": len(freq),
                      "labels_under_10_documents": sum(c < 10 for c in freq.values()),
                      "top_label_share": round(freq.most_common(1)[0][1] / len(docs), 3), **sub}
        write_provenance(out / name, done[name])
    return done


def _texts(translations: list[Path], max_train_docs: int | None) -> dict[str, str]:  # Description-md5 -> text
    if max_train_docs is not None and max_train_docs < 1:
        raise BadDataError(f"--max_train_docs {max_train_docs}: give a positive number of documents")
    return {p["Description-md5"]: _description(p["Description-en"]) for p in _paragraphs(translations)
            if "Description-md5" in p and "Description-en" in p}


def _index_facts(packages: list[Path], translations: list[Path], release: Path | None, missing: int, verb: str) -> dict:
    """What every set built from the indices records (``verb``: the command line's, OUT included)."""
    return {"origin": "Debian archive indices", "licence": _ARCHIVE_LICENCE,
            **_release_facts(release), "index_files": ", ".join(p.name.split("_dists_")[-1] for p in packages + translations),
            "index_bytes": sum(p.stat().st_size for p in packages + translations), "packages_without_description": missing,
            "split": split_rule("the description's MD5 (Description-md5)", LABEL_SPLIT),
            "built_by": f"python -m dtype_bench.build_data {verb} --packages .. --translations .."}


def _subsample_facts(docs: dict, counts: dict, built_by: str, max_train_docs: int | None) -> dict:
    if max_train_docs is None:
        return {}
    whole = sum(split_of_key(k, LABEL_SPLIT) == "train" for k in docs)
    return {"train_subsample": f"{counts['train']} of {whole} training documents, those of lowest SHA-256 "
                               f"of 'subsample:' + the description's MD5; validation and test whole",
            "built_by": built_by + f" --max_train_docs {max_train_docs}"}


DEP_FIELDS = ("Pre-Depends", "Depends")


MIN_LABEL_DOCS = 6
"""A dependency is a label where this many training descriptions have it (docs/data/README.md: why 6)."""


_DEP_NAME = re.compile(r"\s*([^\s(:\[<|,]+)")


def dependencies(stanza) -> list[str]:
    """The packages a ``Packages`` stanza hard-depends on (``DEP_FIELDS``), sorted: version
    constraints, ``:any``/``:native`` qualifiers and ``[arch]`` restrictions dropped; of
    alternatives ``a | b`` the first (the one apt installs); virtual packages kept by name."""
    rels = (rel.split("|")[0] for f in DEP_FIELDS for rel in stanza.get(f, "").split(","))
    return sorted({m.group(1) for rel in rels if (m := _DEP_NAME.match(rel))})


def build_deps(packages: list[Path], translations: list[Path], out: Path, release: Path | None = None,
               min_docs: int = MIN_LABEL_DOCS, max_train_docs: int | None = None) -> dict:
    """``out`` (multi-label, C and D; {text, labels}): one document per distinct description, its
    labels the ``dependencies`` of its first package (index order) that has any, those that at least
    ``min_docs`` training descriptions share; descriptions left with none are dropped."""
    texts, deps, missing = _texts(translations, max_train_docs), {}, 0
    for p in _paragraphs(packages):
        missing += (md5 := p.get("Description-md5")) is not None and md5 not in texts
        if md5 in texts and md5 not in deps and (d := dependencies(p)):
            deps[md5] = d
    freq = Counter(x for k, d in deps.items() if split_of_key(k, LABEL_SPLIT) == "train" for x in d)
    kept = {x: n for x, n in freq.items() if n >= min_docs}
    docs = {k: {"text": texts[k], "labels": ls} for k, d in deps.items() if (ls := [x for x in d if x in kept])}
    if not docs:
        raise BadDataError(f"no description has a dependency that {min_docs} training descriptions share")
    facts = _index_facts(packages, translations, release, missing, f"deps OUT --min_label_docs {min_docs}")
    counts = write_splits(out, docs, LABEL_SPLIT, max_train_docs)
    train = sum(split_of_key(k, LABEL_SPLIT) == "train" for k in docs)
    facts.update({"task": "multi-label (C, D)", "text": "the package's English description (Translation-en Description-en)",
                  "labels": f"the packages it depends on ({', '.join(DEP_FIELDS)}; versions and architecture qualifiers "
                            f"dropped; of alternatives the first), those of >= {min_docs} training descriptions",
                  "documents": counts, "distinct_labels": len(kept), "min_label_docs": min_docs,
                  "labels_under_min_docs": len(freq) - len(kept), "descriptions_without_kept_label": len(deps) - len(docs),
                  "label_cardinality": round(sum(kept.values()) / train, 3), "top_label_share": round(max(kept.values()) / train, 3),
                  **_subsample_facts(docs, counts, facts["built_by"], max_train_docs)})
    write_provenance(out, facts)
    return facts


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
