"""``text``, one corpus from several packages: ``python -m dtype_bench.build_data text A.deb B.deb ... OUT``.
Which files are read is a named ``--selection`` (``SELECTIONS``): ``linux-doc`` (the default, as
this verb always read: ``Documentation/*.rst`` of the kernel's documentation, every language) or
``docs`` (documentation of every kind below under ``usr/share/doc`` and a few other documentation
folders; Sphinx sources, ``src/`` trees, index pages and licence files left out; documents under 15%
English function words left out, ``english_share``); ``--include`` / ``--exclude`` / ``--min_english``
replace a part of it, ``--kinds`` narrows the kinds. A file's kind is its suffix (``.gz`` read
decompressed): rst (``clean_rst``), md (``clean_markdown``), txt (``clean_text``), html
(``clean_html``, the standard library's ``html.parser``), pod (``clean_pod``); PDF is not read. Where
a package ships one document in two kinds at one path, the first of ``KIND_ORDER`` is read. A text
identical to one already kept (in key order, across packages) is kept once; documents under
``MIN_CHARS`` are left out. ``provenance.yaml`` names every package (version, licence from its
copyright file, .deb bytes, documents and characters kept, what was left out) under ``packages``;
built from one package with the linux-doc selection, it holds the facts it always did."""
from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path
from typing import Iterable

from benchlib.data.tasks import BadDataError
from dtype_bench.build_data.cleaners import CONVERTERS, KIND_ORDER, english_share, kind_of
from dtype_bench.build_data.splits import MIN_CHARS, TEXT_SPLIT, split_rule, write_provenance, write_splits


DEFAULT_INCLUDE = r"/Documentation/.*\.rst(\.gz)?$"


DOCS_INCLUDE = r"(?i)^/usr/share/(doc|perl5?|perl/[^/]+/pod|libreoffice/help)/.*\.(rst|rest|md|markdown|txt|text|html?|xhtml|pod)(\.gz)?$"


DOCS_EXCLUDE = (r"(?i)/(_sources|_static|_modules|_images|src|static)/|/(genindex|doc-index|py-modindex|search|"
                r"searchindex|objects)[^/]*$|/(copyright|changelog[^/]*|license[^/]*|licence[^/]*|copying[^/]*|"
                r"news[^/]*|authors[^/]*|thanks[^/]*|requirements[^/]*|robots\.txt|cmakelists\.txt)$")


SELECTIONS = {"linux-doc": (DEFAULT_INCLUDE, None, 0.0), "docs": (DOCS_INCLUDE, DOCS_EXCLUDE, 0.15)}
"""Named selection rules: (include, exclude) regexes on a file's path in the package ("/" + path)
and the least ``english_share`` a document needs (0: every language kept, as linux-doc always was)."""


def _licence(copyright_text: str) -> str:
    """The ``License:`` (or ``Licence:``) of the ``Files: *`` stanza of a Debian copyright file."""
    stanza = re.search(r"^Files:\s*\*\s*$(.*?)(?:\n\n|\Z)", copyright_text, re.M | re.S)
    found = re.search(r"^Licen[cs]e:\s*(\S.*)$", stanza.group(1) if stanza else "", re.M)
    return found.group(1).strip() if found else "see the package's copyright file"


def _fetch_hint(deb: Path) -> str:
    name = deb.name.removesuffix(".deb").split("_")[0]
    return f"apt-get download {name}" if name and name != deb.name else "apt-get download NAME"


def _read_deb(deb: Path, include: re.Pattern, exclude: re.Pattern | None, kinds: tuple[str, ...]) -> tuple[dict, dict]:
    """One package's facts (name, version, licence, bytes) and its documents: path -> prose,
    one converter a file by its kind, at most one kind per document (``KIND_ORDER``)."""
    from debian.arfile import ArError
    from debian.debfile import DebFile, DebError
    if not deb.is_file():
        raise BadDataError(f"package file not found: {deb} (fetch it with: {_fetch_hint(deb)})")
    try:
        pkg = DebFile(str(deb))
        control = pkg.debcontrol()
    except (ArError, DebError, OSError, KeyError, ValueError) as e:
        raise BadDataError(f"{deb}: not a readable Debian package ({e})") from None
    name, version = control["Package"], control["Version"]
    licence, chosen, matched = f"no copyright file in the package (usr/share/doc/{name}/copyright)", {}, 0
    with pkg.data.tgz() as tar:
        for member in tar:
            if not member.isfile():
                continue
            path = member.name.lstrip("./")
            if path == f"usr/share/doc/{name}/copyright":
                licence = _licence(tar.extractfile(member).read().decode("utf-8", "replace"))
                continue
            if not include.search("/" + path) or (exclude is not None and exclude.search("/" + path)):
                continue
            kind = kind_of(path)
            if kind not in kinds:
                continue
            matched += 1
            stem = re.sub(r"\.[^./]+$", "", path.lower().removesuffix(".gz"))
            if stem in chosen and KIND_ORDER.index(chosen[stem][1]) <= KIND_ORDER.index(kind):
                continue
            data = tar.extractfile(member).read()
            raw = (gzip.decompress(data) if path.endswith(".gz") else data).decode("utf-8", "replace")
            chosen[stem] = (path, kind, CONVERTERS[kind](raw))
    facts = {"name": name, "version": version, "licence": licence, "package_bytes": deb.stat().st_size,
             "matched_files": matched}
    return facts, {path: text for path, _, text in chosen.values()}


def build_text(debs: Path | list[Path], out: Path, include: str | None = None, exclude: str | None = None,
               selection: str = "linux-doc", kinds: Iterable[str] = tuple(CONVERTERS),
               min_english: float | None = None) -> dict:
    """``out/{train,validation}.jsonl.gz`` ({"text"}) and ``out/provenance.yaml`` from the
    files of one or more ``.deb`` whose path matches ``include`` and not ``exclude`` (by default
    those of the named ``selection``, ``SELECTIONS``), each converted to prose by its kind
    (``CONVERTERS``); documents under ``MIN_CHARS`` characters, those whose ``english_share`` is
    under ``min_english`` (by default the selection's) and every repeat of a text already kept (in
    key order) left out. Returns the provenance facts."""
    debs = [debs] if isinstance(debs, Path) else list(debs)
    if selection not in SELECTIONS:
        raise BadDataError(f"--selection {selection!r}: one of {', '.join(SELECTIONS)}")
    kinds = tuple(kinds)
    if not kinds or set(kinds) - set(CONVERTERS):
        raise BadDataError(f"--kinds {','.join(kinds)!r}: a comma-separated list of {', '.join(CONVERTERS)}")
    include = SELECTIONS[selection][0] if include is None else include
    exclude = SELECTIONS[selection][1] if exclude is None else (exclude or None)
    min_english = SELECTIONS[selection][2] if min_english is None else min_english
    if not 0 <= min_english < 1:
        raise BadDataError(f"--min_english {min_english}: a share of words from 0 (every document) to under 1")
    try:
        inc, exc = re.compile(include), re.compile(exclude) if exclude else None
    except re.error as e:
        raise BadDataError(f"--include / --exclude: not a regular expression ({e})") from None
    packages, owner, docs = [], {}, {}
    for deb in debs:
        facts, texts = _read_deb(deb, inc, exc, kinds)
        if not facts["matched_files"]:
            raise BadDataError(f"{deb}: no file matches --include {include!r}"
                               + (f" and not --exclude {exclude!r}" if exclude else ""))
        if facts["name"] in {p["name"] for p in packages}:
            raise BadDataError(f"{deb}: package {facts['name']} given twice")
        for path, text in texts.items():
            if path in owner:
                raise BadDataError(f"{path} is in both {owner[path]} and {facts['name']}: give one of them")
            owner[path] = facts["name"]
            docs[path] = text
        packages.append({**facts, "documents": 0, "characters": 0, "short_dropped": 0, "non_english_dropped": 0,
                         "duplicates_dropped": 0})
    by_name, seen, rows = {p["name"]: p for p in packages}, set(), {}
    for path in sorted(docs):
        text, p = docs[path], by_name[owner[path]]
        digest = hashlib.sha256(text.encode()).digest()
        if len(text) < MIN_CHARS:
            p["short_dropped"] += 1
        elif min_english and english_share(text) < min_english:
            p["non_english_dropped"] += 1
        elif digest in seen:
            p["duplicates_dropped"] += 1
        else:
            seen.add(digest)
            rows[path] = {"text": text}
            p["documents"] += 1
            p["characters"] += len(text)
    for p in packages:
        if not p["documents"]:
            raise BadDataError(f"package {p['name']}: none of its {p['matched_files']} matching files gives a "
                               f"new document of at least {MIN_CHARS} characters"
                               + (f" and English share {min_english}" if min_english else ""))
    counts = write_splits(out, rows, TEXT_SPLIT)
    facts = _text_facts(debs, packages, counts, include, exclude, selection, kinds, min_english)
    write_provenance(out, facts)
    return facts


def _text_facts(debs: list[Path], packages: list[dict], counts: dict, include: str, exclude: str | None,
                selection: str, kinds: tuple[str, ...], min_english: float) -> dict:
    """The provenance of a text corpus: one package's facts as they always were; for several,
    totals and ``packages``, one entry a package."""
    flags = "" if selection == "linux-doc" else f" --selection {selection}"
    if include != SELECTIONS[selection][0]:
        flags += f" --include '{include}'"
    if (exclude or None) != SELECTIONS[selection][1]:
        flags += f" --exclude '{exclude or ''}'"
    if kinds != tuple(CONVERTERS):
        flags += f" --kinds {','.join(kinds)}"
    if min_english != SELECTIONS[selection][2]:
        flags += f" --min_english {min_english}"
    built_by = f"python -m dtype_bench.build_data text {' '.join(d.name for d in debs)} OUT{flags}"
    selected = f"files matching {include!r}" + (f" and not {exclude!r}" if exclude else "")
    split = split_rule("the file's path in the package", TEXT_SPLIT)
    if len(packages) == 1 and selection == "linux-doc" and kinds == tuple(CONVERTERS) and not exclude and not min_english:
        p = packages[0]
        return {"origin": "Debian package", "package": p["name"], "version": p["version"], "licence": p["licence"],
                "package_bytes": p["package_bytes"], "documents": counts, "characters": p["characters"],
                "selection": f"{selected}, reStructuredText markup lines dropped, "
                             f"documents under {MIN_CHARS} characters left out",
                "split": split, "built_by": built_by}
    licences = sorted({p["licence"] for p in packages})
    return {"origin": "Debian packages", "package": ", ".join(p["name"] for p in packages),
            "version": "per package (packages)", "licence": "per package (packages): " + "; ".join(licences),
            "package_bytes": sum(p["package_bytes"] for p in packages), "documents": counts,
            "characters": sum(p["characters"] for p in packages),
            "non_english_dropped": sum(p["non_english_dropped"] for p in packages),
            "duplicates_dropped": sum(p["duplicates_dropped"] for p in packages),
            "selection": f"{selected}; kinds {', '.join(kinds)} by suffix (.gz read decompressed), each "
                         f"converted to prose (build_data.CONVERTERS: markup, code and navigation dropped); one "
                         f"kind a document where a package ships several ({' > '.join(KIND_ORDER)}); documents "
                         f"under {MIN_CHARS} characters"
                         + (f" or of English share (build_data.english_share) under {min_english}" if min_english else "")
                         + f" left out; a text identical to one already kept (in key "
                         f"order) left out",
            "split": split, "built_by": built_by,
            "packages": [{k: p[k] for k in ("name", "version", "licence", "package_bytes", "matched_files",
                                            "documents", "characters", "short_dropped", "non_english_dropped",
                                            "duplicates_dropped")}
                         for p in packages]}
