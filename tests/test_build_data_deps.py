"""``build_data deps``: descriptions labelled with the packages they depend on (thousands of labels
on the real archive, the premise of seed 001's H1 and H3), here from small index files of the real
schema written by the test. The relation fields are parsed as Debian writes them, a label needs
``min_docs`` training descriptions, the splits follow the description's MD5 alone, and the
loaders and a tiny run read the output as they read debtags."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from benchlib.core.runconfig import RunConfig, resolved
from benchlib.data.load import load_task_data
from benchlib.data.tasks import BadDataError
from benchlib.data.files import read_provenance
from dtype_bench import build_data
from dtype_bench.cli import main as cli_main

pytest.importorskip("debian")
TOPICS = {"python": "python3:any (>= 3.11~)", "perl": "perl (>= 5.36)", "qt": "libqt5core5a (>= 5.15.1) [amd64]",
          "gtk": "libgtk-3-0 | libgtk2.0-0"}
"""A description's topic word -> the relation its package writes for it (qualifier, versions,
an arch restriction, alternatives): the text predicts the label."""
LIBRARY = {"python": "python3", "perl": "perl", "qt": "libqt5core5a", "gtk": "libgtk-3-0"}
WORDS = "a small program that reads files and writes reports for the user on the command line".split()


def _stanzas(n: int = 400) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """Packages and Translation-en stanzas, and each description's dependencies as the test
    expects them (before the threshold). Every package depends on its topic's library and on
    ``librare<i>`` (its own, always under the threshold); most on libc6, some on mail and dpkg."""
    packages, translations, expected = [], [], {}
    for i in range(n):
        topic = list(TOPICS)[i % 4]
        md5 = f"{i:032x}"
        rels = [TOPICS[topic], f"librare{i} (= 1.{i})"] + ["libc6 (>= 2.34)"] * (i % 3 != 0)
        rels += ["default-mta | mail-transport-agent"] * (i % 5 == 0)
        pre = "Pre-Depends: dpkg (>= 1.19.1)\n" if i % 6 == 0 else ""
        packages.append(f"Package: pkg{i}\nVersion: 1.{i}\nSection: misc\n{pre}Depends: {', '.join(rels)}\n"
                        f"Description: x\nDescription-md5: {md5}\n")
        text = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(12))
        translations.append(f"Package: pkg{i}\nDescription-md5: {md5}\nDescription-en: {topic} tool {i}\n"
                            f" The {topic} {text}.\n .\n Written for {topic}.\n")
        wanted = [LIBRARY[topic], f"librare{i}", "libc6" if i % 3 else "", "default-mta" if i % 5 == 0 else "",
                  "dpkg" if i % 6 == 0 else ""]
        expected[md5] = sorted(x for x in wanted if x)
    # a package with no dependency and one whose description another shares: neither adds a document
    packages.append(f"Package: nodeps\nSection: misc\nDescription: x\nDescription-md5: {'e' * 32}\n")
    translations.append(f"Package: nodeps\nDescription-md5: {'e' * 32}\nDescription-en: data only\n fonts.\n")
    packages.append(f"Package: pkg0-extra\nDepends: libsecond\nDescription: x\nDescription-md5: {0:032x}\n")
    return packages, translations, expected


@pytest.fixture(scope="module")
def deps_indices(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("deps")
    packages, translations, _ = _stanzas()
    (d / "Packages").write_text("\n".join(packages))
    (d / "Translation-en").write_text("\n".join(translations))
    return {k: d / k for k in ("Packages", "Translation-en")}


def _build(idx: dict, out: Path, **kw) -> dict:
    return build_data.build_deps([idx["Packages"]], [idx["Translation-en"]], out, **kw)


def _rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh]


@pytest.mark.parametrize("fields, names", [
    ({"Depends": "libc6 (>= 2.34), libgcc-s1 (>= 3.0)"}, ["libc6", "libgcc-s1"]),
    ({"Depends": "python3:any (>= 3.11~), perl:native"}, ["perl", "python3"]),
    ({"Depends": "default-mta | mail-transport-agent, debconf (>= 0.5) | debconf-2.0"}, ["debconf", "default-mta"]),
    ({"Depends": "libfoo1 [amd64 i386],libbar2(>=1)"}, ["libbar2", "libfoo1"]),
    ({"Pre-Depends": "dpkg (>= 1.19.1)", "Depends": "dpkg, awk"}, ["awk", "dpkg"]),
    ({"Recommends": "less", "Suggests": "vim", "Section": "misc"}, []),
    ({"Depends": ""}, []),
])
def test_dependencies_are_the_first_alternative_of_each_relation_without_versions_or_qualifiers(fields, names):
    assert build_data.dependencies(fields) == names


def test_a_label_needs_min_docs_training_descriptions_and_a_document_needs_a_label(deps_indices, tmp_path):
    _, _, expected = _stanzas()
    train = Counter(x for k, d in expected.items()
                    if build_data.split_of_key(k, build_data.LABEL_SPLIT) == "train" for x in d)
    for k in (3, 60):
        facts = _build(deps_indices, tmp_path / str(k), min_docs=k)
        kept = {x for x, n in train.items() if n >= k}
        rows = {s: _rows(tmp_path / f"{k}/{s}.jsonl.gz") for s in ("train", "validation", "test")}
        seen = {x for s in rows.values() for r in s for x in r["labels"]}
        assert seen == {x for x in kept if any(x in d for d in expected.values())} and not any("librare" in x for x in seen)
        assert facts["distinct_labels"] == len(kept) and facts["min_label_docs"] == k
        assert all(r["labels"] == sorted(r["labels"]) and r["labels"] for s in rows.values() for r in s)
        # a description whose labels all fall under the threshold is no document
        n_docs = sum(bool(set(d) & kept) for d in expected.values())
        assert sum(map(len, rows.values())) == sum(facts["documents"].values()) == n_docs
        assert facts["descriptions_without_kept_label"] == len(expected) - n_docs
        assert facts["label_cardinality"] == round(sum(train[x] for x in kept) / len(rows["train"]), 3)
        assert facts["built_by"].startswith(f"python -m dtype_bench.build_data deps OUT --min_label_docs {k}")
    # pkg0's description is pkg0's document: the later pkg0-extra (libsecond) adds nothing
    assert not any("libsecond" in r["labels"] for s in ("train", "validation", "test")
                   for r in _rows(tmp_path / f"3/{s}.jsonl.gz"))
    with pytest.raises(BadDataError, match="no description has a dependency that 1000 training descriptions share"):
        _build(deps_indices, tmp_path / "none", min_docs=1000)


def test_the_splits_follow_each_description_alone_and_rebuild_to_the_same_bytes(deps_indices, tmp_path):
    _build(deps_indices, tmp_path / "a", min_docs=3)
    _build(deps_indices, tmp_path / "b", min_docs=3)
    files = ("train.jsonl.gz", "validation.jsonl.gz", "test.jsonl.gz", "provenance.yaml")
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    for split in ("train", "validation", "test"):
        for r in _rows(tmp_path / f"a/{split}.jsonl.gz"):
            i = int(r["text"].split()[2])  # "<topic> tool <i>"
            assert build_data.split_of_key(f"{i:032x}", build_data.LABEL_SPLIT) == split


def test_the_command_line_builds_it_and_the_classification_loader_reads_it(deps_indices, tmp_path):
    out = tmp_path / "debdeps"
    assert build_data.main(["deps", str(out), "--packages", str(deps_indices["Packages"]), "--translations",
                            str(deps_indices["Translation-en"]), "--min_label_docs", "3"]) == 0
    facts = read_provenance(out)
    d = load_task_data(resolved(RunConfig(scenario="C", data=str(out), cache_dir=str(tmp_path / "cache"), seq_len=32)))
    assert d.num_labels == facts["distinct_labels"]
    assert (d.meta["n_train"], d.meta["n_val"]) == (facts["documents"]["train"], facts["documents"]["validation"])
    assert d.meta["provenance_min_label_docs"] == 3 and d.meta["val_labels_unseen_dropped"] == 0


def test_a_tiny_run_learns_the_dependencies_from_the_descriptions(deps_indices, tmp_path):
    data = tmp_path / "debdeps"
    _build(deps_indices, data, min_docs=3)
    rc = cli_main(["run", "--scenario", "C", "--config", "fp32_baseline", "--data", str(data), "--size", "tiny",
                   "--steps", "60", "--lr", "3e-3", "--device", "cpu", "--seq_len", "32", "--log_every", "20",
                   "--cache_dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run"), "--quiet"])
    rec = json.loads((tmp_path / "run/result.json").read_text())
    assert rc == 0 and rec["status"] == "ok", rec.get("reason")  # ok: it clearly beat label frequency
    m = rec["metrics"]
    assert m["quality/p_at_1"] > m["baseline/p_at_1"] and m["quality/micro_f1"] > m["baseline/micro_f1"]
    assert rec["data"]["num_labels"] == read_provenance(data)["distinct_labels"]


def test_the_premise_study_is_reference_reals_c_with_the_dependency_labels(tmp_path, monkeypatch):
    """params/premise_labels.yaml changes one thing of reference_real's C, the labels, so that a
    verdict that differs from reference_real's is the label space's; its configs pair what H1 and H3 compare."""
    from conftest import REPO
    from benchlib.study.studyfile import load_study
    monkeypatch.chdir(tmp_path)  # folders named relative to where the sweep starts
    mine, ref = (load_study(REPO / f"params/{n}.yaml") for n in ("premise_labels", "reference_real"))
    runs = {(r.cfg.config, r.cfg.seed): r.cfg for r in mine.runs()}
    ref_c = {(r.cfg.config, r.cfg.seed): r.cfg for r in ref.runs() if r.cfg.scenario == "C"}
    assert {(c.scenario, c.data) for c in runs.values()} == {("C", "data/real/debdeps")}
    assert {"amp_bf16", "amp_bf16_fp32_head", "bf16_pure", "bf16_body_fp32_head", "amp_bf16_8bit_adam",
            "fp32_tf32_matmul", "amp_bf16_eps1e4", "fp16_naive_noscale"} == {c for c, _ in runs}
    assert {k for c, k in runs if c == "amp_bf16_8bit_adam"} == set(range(12))  # H3's pair: its seeds
    assert {k for c, k in runs if c == "amp_bf16_eps1e4"} == {0, 1, 2}
    # its controls are the ones that came out degraded on reference_real's C (the gates' sensitivity)
    from benchlib.core.dtypes import REGISTRY
    controls = {c for c, _ in runs if REGISTRY[c].role == "control"}
    detects = json.loads((REPO / "executed/h100/reference_real/comparison_all/comparison.json").read_text())
    assert controls and controls <= set(detects["reliability"]["C"]["detects"])

    def recipe(c):
        return {k: v for k, v in c.to_dict().items() if k not in ("data", "extra", "out_dir")}
    shared = sorted(set(runs) & set(ref_c))
    assert shared and all(recipe(runs[k]) == recipe(ref_c[k]) for k in shared)
    (pre,), (ref_pre,) = (sum(s.pretrain_runs().values(), []) for s in (mine, ref))
    assert recipe(pre.cfg) == recipe(ref_pre.cfg) and pre.cfg.data == ref_pre.cfg.data
