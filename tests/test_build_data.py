"""dtype_bench.build_data: real data built from Debian's archive, here from small synthetic
inputs of the same formats (a .deb built with dpkg-deb; Packages and Translation-en index
files), no network. The builders are deterministic, the splits disjoint, the loaders read what
they write and every record names the package it came from."""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchlib.core.runconfig import RunConfig, resolved
from benchlib.data.files import PROVENANCE, read_provenance
from dtype_bench import build_data
from benchlib.data.checks import check_files, json_rows
from benchlib.data.load import load_task_data
from benchlib.data.tasks import BadDataError, DataUnavailableError

pytest.importorskip("debian")
WORDS = ("the driver maps each buffer into memory before the device reads it and the kernel frees "
         "it when the request completes so a caller never sees a stale page").split()


def _prose(rng, n_words: int) -> str:
    return " ".join(rng.choice(WORDS, n_words))


def make_deb(folder: Path, name: str, files: dict[str, bytes | str], version: str = "1.2-3",
             licence: str | None = "GPL-2") -> Path:
    """``folder/<name>_<version>_all.deb`` built with dpkg-deb: ``files`` (path in the package ->
    content) and, with ``licence``, a Debian copyright file whose ``Files: *`` stanza names it."""
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is needed to build the fixture package")
    root = folder / f"{name}-root"
    if licence is not None:
        files = {**files, f"usr/share/doc/{name}/copyright": "Format: copyright-format 1.0\n\n"
                 f"Files: *\nCopyright: 2020 Someone\nLicense: {licence}\n\nFiles: debian/*\nLicense: MIT\n"}
    for path, content in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(content.encode() if isinstance(content, str) else content)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN/control").write_text(f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
                                         "Maintainer: A <a@example.org>\nDescription: pages\n pages.\n")
    out = folder / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)],
                   check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def deb(tmp_path_factory) -> Path:
    """A documentation package of linux-doc's layout: 80 .rst.gz pages, two short stubs, a
    non-matching file and a Debian copyright file."""
    rng = np.random.default_rng(0)
    files = {}
    for i in range(82):
        body = _prose(rng, 80) if i < 80 else "stub"
        files[f"usr/share/doc/fake-doc/Documentation/area{i % 7}/page{i}.rst.gz"] = gzip.compress(
            f".. SPDX-License-Identifier: GPL-2.0\n\nTitle {i}\n========\n\n"
            f".. toctree::\n   :maxdepth: 2\n\n{body}\n   :c:func:`kfree` frees it.\n".encode(), mtime=0)
    files["usr/share/doc/fake-doc/Documentation/Makefile"] = "all:\n"
    return make_deb(tmp_path_factory.mktemp("pkg"), "fake-doc", files)


@pytest.fixture(scope="module")
def indices(tmp_path_factory) -> dict[str, Path]:
    """Packages and Translation-en of 60 packages: tags on most, sections with an archive area,
    two packages sharing one description, one package without a translation."""
    d = tmp_path_factory.mktemp("indices")
    rng = np.random.default_rng(1)
    tags = ["role::program", "role::shared-lib", "use::gameplaying", "game::arcade", "devel::library"]
    packages, translations = [], []
    for i in range(60):
        md5 = f"{i:032x}" if i != 59 else f"{58:032x}"  # pkg59 shares pkg58's description
        section = ["libs", "games", "contrib/net", "devel"][i % 4]
        tag = f"Tag: {', '.join(sorted(rng.choice(tags, 1 + i % 3, replace=False)))}\n" if i % 5 else ""
        packages.append(f"Package: pkg{i}\nVersion: 1.{i}\nSection: {section}\nDescription: short {i}\n"
                        f"Description-md5: {md5}\n{tag}")
        if i < 59:
            translations.append(f"Package: pkg{i}\nDescription-md5: {md5}\nDescription-en: synopsis {i}\n"
                                f" {_prose(rng, 20)}\n .\n {_prose(rng, 10)}\n")
    packages.append(f"Package: orphan\nSection: misc\nDescription: x\nDescription-md5: {'f' * 32}\n")
    (d / "Packages").write_text("\n".join(packages))
    (d / "Translation-en").write_text("\n".join(translations))
    (d / "InRelease").write_text("Origin: Debian\nVersion: 12.1\nCodename: bookworm\nDate: Sat, 01 Jan 2000 00:00:00 UTC\n")
    return {k: d / k for k in ("Packages", "Translation-en", "InRelease")}


def _rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh]


def _tree_bytes(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_split_of_key_is_stable_and_near_its_percentages():
    keys = [f"doc/{i}.rst" for i in range(20_000)]
    splits = [build_data.split_of_key(k, build_data.LABEL_SPLIT) for k in keys]
    share = {s: splits.count(s) / len(keys) for s in ("train", "validation", "test")}
    assert share["validation"] == pytest.approx(0.10, abs=0.01) and share["test"] == pytest.approx(0.10, abs=0.01)
    # a key's split depends on the key alone: another corpus around it does not move it
    assert [build_data.split_of_key(k, build_data.LABEL_SPLIT) for k in keys[::-7]] == splits[::-7]


def test_text_builder_is_deterministic_splits_by_path_and_records_the_package(deb, tmp_path):
    facts = build_data.build_text(deb, tmp_path / "a")
    build_data.build_text(deb, tmp_path / "b")
    assert _tree_bytes(tmp_path / "a") == _tree_bytes(tmp_path / "b")
    assert (facts["package"], facts["version"], facts["licence"]) == ("fake-doc", "1.2-3", "GPL-2")
    train, val = _rows(tmp_path / "a/train.jsonl.gz"), _rows(tmp_path / "a/validation.jsonl.gz")
    assert facts["documents"] == {"train": len(train), "validation": len(val)} and len(train) + len(val) == 80
    assert val and not {r["text"] for r in train} & {r["text"] for r in val}
    want_val = sum(build_data.split_of_key(f"usr/share/doc/fake-doc/Documentation/area{i % 7}/page{i}.rst.gz",
                                         build_data.TEXT_SPLIT) == "validation" for i in range(80))
    assert len(val) == want_val
    text = train[0]["text"]  # markup lines gone, prose kept
    assert "SPDX" not in text and "toctree" not in text and "maxdepth" not in text and "=====" not in text
    assert ":c:func:`kfree` frees it." in text
    assert text.startswith("Title ") and sum(w in text.split() for w in WORDS) > 10


def test_labels_builder_writes_tags_and_sections_with_disjoint_splits(indices, tmp_path):
    done = build_data.build_labels([indices["Packages"]], [indices["Translation-en"]], tmp_path,
                                 release=indices["InRelease"])
    assert done["debtags"]["version"] == "Debian 12.1 bookworm of Sat, 01 Jan 2000 00:00:00 UTC"
    assert done["debsection"]["package"].startswith("Debian archive indices")
    tags = {s: _rows(tmp_path / f"debtags/{s}.jsonl.gz") for s in ("train", "validation", "test")}
    secs = {s: _rows(tmp_path / f"debsection/{s}.jsonl.gz") for s in ("train", "validation", "test")}
    # 59 descriptions (pkg59 shares pkg58's; orphan has none); tags on i % 5 != 0
    assert sum(map(len, secs.values())) == 59 and done["debsection"]["packages_without_description"] == 1
    assert sum(map(len, tags.values())) == sum(1 for i in range(59) if i % 5)
    for rows in (tags, secs):
        texts = [{r["text"] for r in rows[s]} for s in rows]
        assert all(not (a & b) for i, a in enumerate(texts) for b in texts[i + 1:])
    every = [r for s in secs.values() for r in s]
    assert {r["label"] for r in every} == {"libs", "games", "net", "devel"}
    one = next(r for r in every if r["text"].startswith("synopsis 6\n"))
    assert one["label"] == "net" and "\n\n" in one["text"]  # " ." became a paragraph break
    assert all(isinstance(r["labels"], list) and r["labels"] for s in tags.values() for r in s)
    assert done["debtags"]["distinct_labels"] == len({x for s in tags.values() for r in s for x in r["labels"]})


def test_labels_builder_is_deterministic(indices, tmp_path):
    for out in ("a", "b"):
        build_data.build_labels([indices["Packages"]], [indices["Translation-en"]], tmp_path / out)
    assert _tree_bytes(tmp_path / "a") == _tree_bytes(tmp_path / "b")


def _cfg(scenario: str, data: Path, tmp_path: Path, **kw) -> RunConfig:
    return resolved(RunConfig(scenario=scenario, data=str(data), cache_dir=str(tmp_path / "cache"), **kw))


def test_the_lm_loader_reads_the_built_text_and_names_the_package(deb, tmp_path):
    build_data.build_text(deb, tmp_path / "text")
    d = load_task_data(_cfg("A", tmp_path / "text", tmp_path, seq_len=32))
    assert d.meta["provenance_package"] == "fake-doc" and d.meta["provenance_version"] == "1.2-3"
    assert d.meta["provenance_licence"] == "GPL-2" and len(d.meta["data_hash"]) == 16
    assert d.meta["val_rule"].startswith("split files: train = train.jsonl.gz; validation = validation.jsonl.gz")
    assert d.meta["n_train_tokens"] > d.meta["n_val_tokens"] > 0


@pytest.mark.parametrize("scenario, folder", [("C", "debtags"), ("E", "debsection")])
def test_the_classification_loader_reads_the_built_sets(indices, tmp_path, scenario, folder):
    build_data.build_labels([indices["Packages"]], [indices["Translation-en"]], tmp_path / "cls")
    d = load_task_data(_cfg(scenario, tmp_path / "cls" / folder, tmp_path, seq_len=32))
    n = read_provenance(tmp_path / "cls" / folder)["documents"]
    assert (d.meta["n_train"], d.meta["n_val"]) == (n["train"], n["validation"])  # test never read
    assert d.meta["provenance_origin"] == "Debian archive indices" and d.meta["data_hash"]
    assert d.meta["provenance_package"].startswith("Debian archive indices") and d.meta["provenance_version"]
    assert d.num_labels == (4 if folder == "debsection" else len(
        {x for r in _rows(tmp_path / "cls/debtags/train.jsonl.gz") for x in r["labels"]}))


def test_a_gzipped_file_with_a_bad_line_is_named_with_its_line(tmp_path):
    path = tmp_path / "train.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "a", "labels": ["x"]}\n{"text": "b", "labels": "x,y"}\n'))
    with pytest.raises(BadDataError, match=r"train\.jsonl\.gz line 2: 'labels' is \"x,y\""):
        check_files([str(path)], "json", "multilabel")


def test_a_truncated_gzip_file_is_one_clear_error(tmp_path):
    path = tmp_path / "train.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "a", "labels": ["x"]}\n' * 100)[:40])
    with pytest.raises(BadDataError, match=r"train\.jsonl\.gz: not a complete gzip file"):
        check_files([str(path)], "json", "multilabel")


def test_errors_name_the_missing_file_or_the_unread_format(tmp_path, deb, indices):
    with pytest.raises(BadDataError, match=r"package file not found: .*nope\.deb .*apt-get download"):
        build_data.build_text(tmp_path / "nope.deb", tmp_path / "out")
    with pytest.raises(BadDataError, match=r"no file matches --include 'nothing-matches'"):
        build_data.build_text(deb, tmp_path / "out", include="nothing-matches")
    lz4 = tmp_path / "Translation-en.lz4"
    lz4.write_bytes(b"\x04\x22\x4d\x18")
    with pytest.raises(BadDataError, match=r"lz4 is not read here; .*apt-helper cat-file"):
        build_data.build_labels([indices["Packages"]], [lz4], tmp_path / "out")
    with pytest.raises(BadDataError, match=r"index file not found: .*Missing"):
        build_data.build_labels([tmp_path / "Missing"], [indices["Translation-en"]], tmp_path / "out")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / PROVENANCE).write_text("- a list\n")
    with pytest.raises(BadDataError, match=r"provenance\.yaml: expected a mapping"):
        read_provenance(tmp_path / "bad")


def test_the_command_line_reports_an_error_in_one_line(tmp_path, capsys):
    assert build_data.main(["text", str(tmp_path / "nope.deb"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: package file not found") and "\n" not in err


def test_the_real_data_study_expands_with_each_scenario_on_its_built_data(deb, indices, tmp_path, monkeypatch):
    """params/reference_real.yaml names the folders docs/data/README.md builds, relative to the
    directory the sweep starts in."""
    from conftest import REPO
    from benchlib.study.studyfile import load_study
    build_data.build_text(deb, tmp_path / "data/real/linux-doc")
    build_data.build_labels([indices["Packages"]], [indices["Translation-en"]], tmp_path / "data/real")
    monkeypatch.chdir(tmp_path)
    study = load_study(REPO / "params/reference_real.yaml")
    runs = study.runs()
    data = {r.cfg.scenario: r.cfg.data for r in runs}
    assert data == {"A": "data/real/linux-doc", "C": "data/real/debtags", "E": "data/real/train28k/debsection"}
    assert {r.cfg.size for r in runs} == {"base"}
    assert {r.cfg.seed for r in runs if r.cfg.config == "amp_bf16"} == {0, 1, 2}  # amp_fp16's cells have more
    pretrain = [spec.cfg for specs in study.pretrain_runs().values() for spec in specs]
    assert [(c.scenario, c.data) for c in pretrain] == [("A", "data/real/linux-doc")]
    assert {c.tokenizer for c in [r.cfg for r in runs] + pretrain} == {"data/real/tokenizer-bpe-50304"}


def test_a_tokenizer_built_on_the_text_gives_lm_and_classification_runs_one_vocabulary(deb, indices, tmp_path):
    build_data.build_text(deb, tmp_path / "text")
    build_data.build_labels([indices["Packages"]], [indices["Translation-en"]], tmp_path / "cls")
    facts = build_data.build_tokenizer(tmp_path / "text", tmp_path / "tok", 600)
    assert facts["package"] == "fake-doc" and facts["tokenizer"].startswith("byte-level BPE")
    tok = str(tmp_path / "tok")
    lm = load_task_data(_cfg("A", tmp_path / "text", tmp_path, seq_len=32, tokenizer=tok))
    cls = load_task_data(_cfg("C", tmp_path / "cls/debtags", tmp_path, seq_len=32, tokenizer=tok))
    own = load_task_data(_cfg("C", tmp_path / "cls/debtags", tmp_path, seq_len=32))  # a BPE of its own corpus
    assert lm.meta["tokenizer_fingerprint"] == cls.meta["tokenizer_fingerprint"] != own.meta["tokenizer_fingerprint"]
    assert lm.vocab_size == cls.vocab_size and f"{lm.vocab_size} tokens" in facts["tokenizer"]
    assert lm.special_ids == (0, 1, 2, 3) and 256 < lm.vocab_size <= 600  # bytes + merges, at most as asked
    with pytest.raises(BadDataError, match=r"train\.jsonl\.gz not found: build the text first"):
        build_data.build_tokenizer(tmp_path / "nothing", tmp_path / "tok2", 600)


@pytest.mark.parametrize("scenario, built", [("A", "text"), ("C", "debtags"), ("E", "debsection")])
def test_json_lines_load_the_same_without_the_datasets_package(deb, indices, tmp_path, monkeypatch, scenario, built):
    """An offline GPU host may have no ``datasets``: local JSON lines then load without it, to the
    same tokens, labels and data hash."""
    build_data.build_text(deb, tmp_path / "text")
    build_data.build_labels([indices["Packages"]], [indices["Translation-en"]], tmp_path)
    folder = tmp_path / built
    with_ds = load_task_data(_cfg(scenario, folder, tmp_path, seq_len=32))
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    without = load_task_data(_cfg(scenario, folder, tmp_path / "again", seq_len=32))  # a fresh cache
    assert without.meta["data_hash"] == with_ds.meta["data_hash"]
    a, b = with_ds.train, without.train
    for k in (a if isinstance(a, dict) else [None]):
        x, y = (a, b) if k is None else (a[k], b[k])
        assert np.array_equal(np.asarray(x), np.asarray(y)), k
    def facts(m):  # where the caches are and how long each step took differ, nothing else
        return {k: Path(v).name if k == "tokenizer" else v for k, v in m.items() if "cache" not in k and not k.endswith("_s")}
    assert facts(without.meta) == facts(with_ds.meta)


def test_a_second_run_on_the_same_corpus_parses_no_document_where_its_tokens_are_cached(deb, tmp_path, monkeypatch):
    """Without ``datasets`` (an offline GPU host) every run parsed the whole corpus twice, to check it
    and to hold its rows, although its tokens came from the cache: ~9 s a run on the 99M-token corpus.
    Bytes that passed the check and whose tokens are cached are not parsed again, and load the same."""
    from benchlib.data import files
    build_data.build_text(deb, tmp_path / "text")
    monkeypatch.setitem(sys.modules, "datasets", None)
    parsed = []
    def counted(path):
        for where, row in json_rows(path):
            parsed.append(where)
            yield where, row
    monkeypatch.setattr(files, "json_rows", counted)
    monkeypatch.setattr("benchlib.data.checks.json_rows", counted)
    first = load_task_data(_cfg("A", tmp_path / "text", tmp_path, seq_len=32))
    assert first.meta["token_cache"] == "built"
    first_parsed, parsed[:] = list(parsed), []
    again = load_task_data(_cfg("A", tmp_path / "text", tmp_path, seq_len=32))
    assert len(parsed) <= 2 < len(first_parsed) and again.meta["token_cache"] == "hit"  # a split's first row: its fields
    assert np.array_equal(np.asarray(first.train), np.asarray(again.train)) and again.meta["data_hash"] == first.meta["data_hash"]


def test_a_file_changed_after_its_check_passed_is_checked_again(tmp_path):
    """The check is skipped only for the very bytes that passed it: a broken line written later is
    refused, naming the file and line."""
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"text": f"doc {i} " * 20}) + "\n" for i in range(40)))
    load_task_data(_cfg("A", data, tmp_path, seq_len=8))
    with open(data, "a") as fh:
        fh.write('{"text": "a broken line"\n')
    with pytest.raises(BadDataError, match=r"train\.jsonl line 41: not valid JSON"):
        load_task_data(_cfg("A", data, tmp_path, seq_len=8))


def test_without_datasets_a_parquet_file_is_refused_in_one_line(tmp_path, monkeypatch):
    pd = pytest.importorskip("pandas")
    pd.DataFrame({"text": ["a b c", "d e f"] * 20}).to_parquet(tmp_path / "train.parquet")
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DataUnavailableError, match="datasets package"):
        load_task_data(_cfg("A", tmp_path / "train.parquet", tmp_path, seq_len=8))


def test_a_training_subsample_keeps_the_lowest_ranked_documents_and_the_held_out_splits_whole(indices, tmp_path):
    """``--max_train_docs``: a smaller set to carry to a host, evaluated on the same validation."""
    whole = build_data.build_labels([indices["Packages"]], [indices["Translation-en"]], tmp_path / "whole")
    sub = build_data.build_labels([indices["Packages"]], [indices["Translation-en"]], tmp_path / "sub", max_train_docs=20)
    full = _rows(tmp_path / "whole/debsection/train.jsonl.gz")
    md5 = {f"synopsis {i}\n": f"{i:032x}" for i in range(59)}  # the fixture's keys, from each text's first line
    ranked = sorted(full, key=lambda r: build_data.subsample_rank(md5[r["text"].split("\n")[0] + "\n"]))
    assert _rows(tmp_path / "sub/debsection/train.jsonl.gz") == [r for r in full if r in ranked[:20]]
    assert sub["debsection"]["documents"]["train"] == 20 < whole["debsection"]["documents"]["train"]
    for name in ("debtags", "debsection"):
        for split in ("validation", "test"):
            assert (tmp_path / f"sub/{name}/{split}.jsonl.gz").read_bytes() == (
                tmp_path / f"whole/{name}/{split}.jsonl.gz").read_bytes()
    assert sub["debsection"]["train_subsample"].startswith(f"20 of {len(full)} training documents")
    assert sub["debsection"]["built_by"].endswith("--max_train_docs 20") and "train_subsample" not in whole["debsection"]
    with pytest.raises(BadDataError, match=r"--max_train_docs 0: give a positive number"):
        build_data.build_labels([indices["Packages"]], [indices["Translation-en"]], tmp_path / "x", max_train_docs=0)
