"""``build_data source``: LM text from the Python source of installed distributions, built on the
GPU host from its own packages (a corpus too large to carry there). Tested on a site-packages
folder made here: two distributions with METADATA and RECORD, as pip leaves them."""
import gzip
import json

import pytest
import yaml

from benchlib.data.tasks import BadDataError
from dtype_bench import build_data

BODY = "def f(x):\n    '''Return x doubled.'''\n    return 2 * x\n" * 10


def _dist(site, name, version, files, licence=None, classifier=None):
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"License-Expression: {licence}"] if licence else []
    meta += [f"Classifier: License :: OSI Approved :: {classifier}"] if classifier else []
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(text if isinstance(text, bytes) else text.encode())
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in [*files, f"{info.name}/METADATA"]))


@pytest.fixture
def site(tmp_path):
    s = tmp_path / "site-packages"
    _dist(s, "alpha", "1.0", {f"alpha/m{i}.py": BODY + f"# module {i}\n" for i in range(40)}
          | {"alpha/tiny.py": "x = 1\n", "alpha/huge.py": "#" * (build_data.MAX_SOURCE_BYTES + 1),
             "alpha/latin.py": b"# caf\xe9\n" + BODY.encode(), "alpha/notes.txt": BODY}, licence="MIT")
    _dist(s, "beta", "2.3", {f"beta/n{i}.py": BODY + f"# beta {i}\n" for i in range(20)}
          | {"beta/copy.py": BODY + "# module 0\n"}, classifier="BSD License")  # the same text as alpha/m0.py
    return s


def _rows(path):
    return [json.loads(line) for line in gzip.open(path, "rt")]


def test_each_python_file_of_each_distribution_is_a_document_and_the_provenance_names_them(site, tmp_path):
    facts = build_data.build_source(tmp_path / "out", [site])
    out = tmp_path / "out"
    rows = _rows(out / "train.jsonl.gz") + _rows(out / "validation.jsonl.gz")
    assert len(rows) == 40 + 20 and all(r["text"].startswith("def f(x)") for r in rows)
    assert sum(facts["documents"].values()) == 60 and facts["documents"]["validation"] > 0
    by = {p["name"]: p for p in facts["packages"]}
    assert (by["alpha"]["version"], by["alpha"]["licence"], by["alpha"]["documents"]) == ("1.0", "MIT", 40)
    assert by["alpha"]["left_out"] == 3  # too short, too large, not UTF-8; .txt is not read
    assert (by["beta"]["licence"], by["beta"]["documents"], by["beta"]["left_out"]) == ("BSD License", 20, 1)
    assert yaml.safe_load((out / "provenance.yaml").read_text())["characters"] == sum(len(r["text"]) for r in rows)
    assert f"--root {site}" in facts["built_by"]


def test_the_corpus_is_the_same_bytes_when_built_again(site, tmp_path):
    build_data.build_source(tmp_path / "a", [site])
    build_data.build_source(tmp_path / "b", [site])
    for name in ("train.jsonl.gz", "validation.jsonl.gz", "provenance.yaml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_folder_without_installed_source_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert build_data.main(["source", str(tmp_path / "out"), "--root", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no Python source") and str(tmp_path / "empty") in err and "\n" not in err


def test_the_lm_loader_reads_the_source_corpus(site, tmp_path):
    from test_build_data import _cfg
    from benchlib.data.load import load_task_data
    build_data.build_source(tmp_path / "c", [site])
    d = load_task_data(_cfg("A", tmp_path / "c", tmp_path, seq_len=32))
    assert d.meta["provenance_origin"] == "installed Python distributions (PyPI)"
    assert d.meta["n_train_tokens"] > d.meta["n_val_tokens"] > 0


def test_a_pinned_build_reads_only_the_pinned_distributions_and_gives_the_same_bytes(site, tmp_path):
    """A host image with one more distribution gives the same corpus when pinned to an earlier
    build's provenance, and another one when not."""
    build_data.build_source(tmp_path / "first", [site])
    _dist(site, "gamma", "0.1", {f"gamma/g{i}.py": BODY + f"# gamma {i}\n" for i in range(10)}, licence="MIT")
    pin = tmp_path / "first" / "provenance.yaml"
    build_data.build_source(tmp_path / "pinned", [site], pin=pin)
    build_data.build_source(tmp_path / "loose", [site])
    for name in ("train.jsonl.gz", "validation.jsonl.gz"):
        assert (tmp_path / "pinned" / name).read_bytes() == (tmp_path / "first" / name).read_bytes()
    assert len(_rows(tmp_path / "loose" / "train.jsonl.gz")) > len(_rows(tmp_path / "first" / "train.jsonl.gz"))
    assert f"--pin {pin}" in yaml.safe_load((tmp_path / "pinned" / "provenance.yaml").read_text())["built_by"]


def test_a_pinned_distribution_missing_or_at_another_version_refuses_the_build_naming_it(site, tmp_path, capsys):
    build_data.build_source(tmp_path / "first", [site])
    facts = yaml.safe_load((tmp_path / "first" / "provenance.yaml").read_text())
    facts["packages"][1]["version"] = "9.9"  # beta
    pin = tmp_path / "pin.yaml"
    pin.write_text(yaml.safe_dump(facts))
    args = ["source", str(tmp_path / "out"), "--root", str(site), "--pin", str(pin)]
    assert build_data.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "beta 2.3 (pinned 9.9)" in err and "\n" not in err and not (tmp_path / "out" / "train.jsonl.gz").exists()
    facts["packages"].append({"name": "delta", "version": "1"})
    facts["packages"][1]["version"] = "2.3"
    pin.write_text(yaml.safe_dump(facts))
    assert build_data.main(args) == 2
    assert "1 missing (delta 1)" in capsys.readouterr().err


def test_the_committed_pin_is_a_build_that_a_matching_host_accepts_and_one_other_version_refuses():
    """docs/data/pysource.provenance.yaml, the horizon study's first build, pins the later ones: it
    names each distribution with a version and licence and counts that add up; a host with exactly
    those versions gets its list, one with a single other version (torch) a refusal."""
    from pathlib import Path
    from types import SimpleNamespace
    pin = Path(__file__).resolve().parents[1] / "docs" / "data" / "pysource.provenance.yaml"
    facts = yaml.safe_load(pin.read_text())
    pkgs = facts["packages"]
    assert len(pkgs) > 100 and all(p["version"] and p["licence"] for p in pkgs)
    assert sum(p["characters"] for p in pkgs) == facts["characters"]
    assert sum(p["documents"] for p in pkgs) == sum(facts["documents"].values())
    same = {p["name"].lower(): SimpleNamespace(version=str(p["version"])) for p in pkgs}
    assert build_data.source._pinned(pin, same) == sorted(same)
    with pytest.raises(BadDataError, match="another corpus"):
        build_data.source._pinned(pin, {**same, "torch": SimpleNamespace(version="0.0")})
