"""dtype_bench.build_data text from several documentation packages (``--selection docs``): each
file kind's converter keeps prose and drops markup and code; packages merge into one corpus that
names every package; a text shipped twice is kept once; the build is deterministic; a bad input is
named. Tiny .deb files built in the test (``make_deb``), no network."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from benchlib.data.files import read_provenance
from dtype_bench import build_data
from benchlib.data.tasks import BadDataError
from test_build_data import WORDS, _prose, _rows, _tree_bytes, make_deb

pytest.importorskip("debian")
PROSE = ("The server reads its configuration once at start and keeps it in memory, so a change to "
         "the file takes effect when the service is restarted by the administrator of the host.")


def _page(rng, n: int = 60) -> str:
    return f"{PROSE} {_prose(rng, n)}."


@pytest.fixture(scope="module")
def debs(tmp_path_factory) -> dict[str, Path]:
    """Two documentation packages: HTML, Markdown, text and POD pages; one page shipped by both;
    a page in HTML and text at one path; a German page; an index page and a stub left out."""
    folder, rng = tmp_path_factory.mktemp("debs"), np.random.default_rng(3)
    shared = f"<html><body><p>{PROSE} Shared page of both packages and the same words.</p></body></html>"
    alpha = {f"usr/share/doc/alpha-doc/html/page{i}.html":
             f"<html><head><title>Page {i}</title><script>var x = 1;</script></head><body>"
             f"<div class=\"sphinxsidebar\"><p>Navigation sidebar link text here</p></div>"
             f"<h1>Section {i}</h1><p>{_page(rng)}</p><pre>int main(void) {{ return 0; }}</pre></body></html>"
             for i in range(12)}
    alpha["usr/share/doc/alpha-doc/html/shared.html"] = shared
    alpha["usr/share/doc/alpha-doc/html/genindex.html"] = f"<p>{_page(rng)}</p>"
    alpha["usr/share/doc/alpha-doc/guide.md.gz"] = gzip.compress(
        f"# Guide\n\n{_page(rng)} See [the manual](http://example.org/m).\n\n```\nmake install\n```\n".encode(), mtime=0)
    alpha["usr/share/doc/alpha-doc/stub.txt"] = "too short"
    beta = {f"usr/share/doc/beta-doc/notes{i}.txt": f"Notes {i}\n========\n\n{_page(rng)}\n" for i in range(12)}
    beta["usr/share/doc/beta-doc/shared.html"] = shared
    beta["usr/share/doc/beta-doc/tool.html"] = f"<p>{_page(rng)} in HTML</p>"
    beta["usr/share/doc/beta-doc/tool.txt"] = f"{_page(rng)} in text\n"
    beta["usr/share/doc/beta-doc/de.html"] = "<p>" + "Der Server liest die Datei beim Start und behält sie im Speicher. " * 8 + "</p>"
    beta["usr/share/perl/5.36/pod/perlbeta.pod"] = (
        f"=head1 NAME\n\nperlbeta - B<bold> words and C<< $x->y >>\n\n=head1 DESCRIPTION\n\n{_page(rng)}\n\n"
        f"    my $code = 1;\n    print $code;\n\n=over 4\n\n=item * L<perlfunc/open>\n\n=back\n\n=cut\n")
    return {"alpha": make_deb(folder, "alpha-doc", alpha, licence="Apache-2.0"),
            "beta": make_deb(folder, "beta-doc", beta, version="2.0-1", licence="GPL-2+"),
            "empty": make_deb(folder, "empty-doc", {"usr/share/doc/empty-doc/data.bin": b"\0" * 300})}


def _all_rows(out: Path) -> list[dict]:
    return [r for split in ("train", "validation") for r in _rows(out / f"{split}.jsonl.gz")]


def test_each_converter_keeps_prose_and_drops_markup_and_code():
    html = build_data.clean_html("<html><head><title>T</title><style>p {}</style></head><body><nav><a>Home</a> "
                                 "<a>Next page link</a></nav><h2>Usage<a class=\"headerlink\">#</a></h2>"
                                 f"<p>{PROSE} Call <code>open</code> first.</p><pre>x = open('f')</pre>"
                                 "<div class=\"highlight\"><span>for x in y: pass</span></div>"
                                 "<ul><li>an item of a list with words</li></ul><p>Next</p></body></html>")
    assert PROSE in html and "Usage" in html and "Call open first." in html and "an item of a list" in html
    assert not any(s in html for s in ("p {}", "Home", "Next", "x = open", "for x in y", "#", "<"))
    md = build_data.clean_markdown(f"## Install\n\n{PROSE} Read **the** [manual](http://x.org).\n\n"
                                   "```sh\nmake install\n```\n\n![logo](logo.png)\n")
    assert "Install" in md and "Read the manual." in md and PROSE in md
    assert not any(s in md for s in ("##", "make install", "http", "logo", "**"))
    pod = build_data.clean_pod(f"=head1 NAME\n\nperlx - does B<things> with L<the docs|perlfunc>\n\n=over 4\n\n"
                               f"=item * E<lt>itemE<gt>\n\n{PROSE}\n\n    my $x = 1;\n\n=back\n\n=begin html\n\n<p>raw</p>\n\n"
                               "=end html\n\n=cut\n\nsub x { 1 }\n")
    assert "NAME" in pod and "perlx - does things with the docs" in pod and "<item>" in pod and PROSE in pod
    assert not any(s in pod for s in ("=head", "=over", "=item", "my $x", "raw", "sub x", "B<"))
    txt = build_data.clean_text(f"Title\n=====\n\n\n\n{PROSE}   \n\f\n------\nEnd of it.\n")
    assert txt == f"Title\n\n{PROSE}\n\nEnd of it."
    rst = build_data.clean_rst(f"Title\n=====\n\n.. note::\n\n{PROSE}\n")
    assert rst.startswith("Title") and PROSE in rst and ".. note" not in rst
    assert build_data.english_share(PROSE) > 0.25 > 0.05 > build_data.english_share("Der Server liest die Datei")


def test_two_packages_make_one_corpus_that_names_both(debs, tmp_path):
    facts = build_data.build_text([debs["alpha"], debs["beta"]], tmp_path / "c", selection="docs")
    rows = _all_rows(tmp_path / "c")
    texts = [r["text"] for r in rows]
    assert facts["documents"] == {"train": len(_rows(tmp_path / "c/train.jsonl.gz")),
                                  "validation": len(_rows(tmp_path / "c/validation.jsonl.gz"))}
    assert yaml.safe_load((tmp_path / "c/provenance.yaml").read_text()) == json.loads(json.dumps(facts))
    pk = {p["name"]: p for p in facts["packages"]}
    assert set(pk) == {"alpha-doc", "beta-doc"} and facts["package"] == "alpha-doc, beta-doc"
    assert (pk["alpha-doc"]["licence"], pk["beta-doc"]["licence"], pk["beta-doc"]["version"]) == ("Apache-2.0", "GPL-2+", "2.0-1")
    assert pk["alpha-doc"]["package_bytes"] == debs["alpha"].stat().st_size
    assert sum(p["documents"] for p in pk.values()) == len(rows) and facts["characters"] == sum(map(len, texts))
    assert all(p["characters"] > 0 for p in pk.values())
    # alpha: 12 pages + shared + guide (genindex excluded, stub short); beta: 12 notes + tool + pod (shared
    # is alpha's already, German dropped)
    assert (pk["alpha-doc"]["documents"], pk["beta-doc"]["documents"]) == (14, 14)
    assert pk["beta-doc"]["duplicates_dropped"] == 1 and pk["beta-doc"]["non_english_dropped"] == 1
    assert pk["alpha-doc"]["short_dropped"] == 1
    assert sum("Shared page of both packages" in t for t in texts) == 1
    assert sum("in HTML" in t for t in texts) == 1 and not any("in text" in t for t in texts)  # one kind a document
    assert not any("Der Server" in t or "int main" in t or "var x" in t or "Navigation sidebar" in t for t in texts)
    assert any("perlbeta - bold words and $x->y" in t and "my $code" not in t for t in texts)
    assert any(t.startswith("Guide") and "make install" not in t for t in texts)
    assert facts["built_by"] == ("python -m dtype_bench.build_data text alpha-doc_1.2-3_all.deb "
                                 "beta-doc_2.0-1_all.deb OUT --selection docs")


def test_the_corpus_is_deterministic_and_split_by_each_file_path(debs, tmp_path):
    build_data.build_text([debs["alpha"], debs["beta"]], tmp_path / "a", selection="docs")
    build_data.build_text([debs["beta"], debs["alpha"]], tmp_path / "b", selection="docs")  # order given
    assert _tree_bytes(tmp_path / "a") != {}
    a, b = _tree_bytes(tmp_path / "a"), _tree_bytes(tmp_path / "b")
    assert {k: v for k, v in a.items() if k != "provenance.yaml"} == {k: v for k, v in b.items() if k != "provenance.yaml"}
    build_data.build_text([debs["alpha"], debs["beta"]], tmp_path / "c", selection="docs")
    assert _tree_bytes(tmp_path / "a") == _tree_bytes(tmp_path / "c")
    val = {r["text"] for r in _rows(tmp_path / "a/validation.jsonl.gz")}
    want = {i for i in range(12) if build_data.split_of_key(f"usr/share/doc/beta-doc/notes{i}.txt",
                                                             build_data.TEXT_SPLIT) == "validation"}
    assert {i for i in range(12) if any(t.startswith(f"Notes {i}\n") for t in val)} == want


def test_the_licence_is_read_in_either_spelling_and_a_missing_file_is_said():
    assert build_data.debdocs._licence("Files: *\nCopyright: 2000 X\nLicence: LGPL 2.1+\n text\n\nFiles: a/*\nLicense: MIT\n") == "LGPL 2.1+"
    assert build_data.debdocs._licence("Upstream: free text, no stanzas\n") == "see the package's copyright file"


def test_a_package_without_a_copyright_file_says_so(tmp_path):
    rng = np.random.default_rng(4)
    bare = make_deb(tmp_path, "bare-doc", {f"usr/share/doc/bare-doc/{i}.txt": _page(rng) for i in range(100)}, licence=None)
    facts = build_data.build_text([bare], tmp_path / "o", selection="docs")
    assert facts["licence"] == "per package (packages): no copyright file in the package (usr/share/doc/bare-doc/copyright)"


def test_errors_name_the_bad_input(debs, tmp_path):
    with pytest.raises(BadDataError, match=r"package file not found: .*gone-doc_1\.0_all\.deb .*apt-get download gone-doc\)"):
        build_data.build_text([debs["alpha"], tmp_path / "gone-doc_1.0_all.deb"], tmp_path / "o", selection="docs")
    with pytest.raises(BadDataError, match=r"empty-doc_1\.2-3_all\.deb: no file matches --include"):
        build_data.build_text([debs["alpha"], debs["empty"]], tmp_path / "o", selection="docs")
    with pytest.raises(BadDataError, match=r"--kinds 'rst,tex'"):
        build_data.build_text([debs["alpha"]], tmp_path / "o", selection="docs", kinds=("rst", "tex"))
    bad = tmp_path / "bad_1_all.deb"
    bad.write_bytes(b"not an archive")
    with pytest.raises(BadDataError, match=r"bad_1_all\.deb: not a readable Debian package"):
        build_data.build_text([bad], tmp_path / "o", selection="docs")
    assert not (tmp_path / "o").exists()


def test_the_command_line_takes_several_packages_and_its_flags(debs, tmp_path, capsys):
    out = tmp_path / "cli"
    assert build_data.main(["text", str(debs["alpha"]), str(debs["beta"]), str(out), "--selection", "docs",
                            "--kinds", "html,txt", "--min_english", "0"]) == 0
    facts = read_provenance(out)
    assert facts["built_by"].endswith("OUT --selection docs --kinds html,txt --min_english 0.0")
    texts = [r["text"] for r in _all_rows(out)]
    assert any("Der Server" in t for t in texts) and not any(t.startswith("Guide") for t in texts)
    assert {p["name"] for p in facts["packages"]} == {"alpha-doc", "beta-doc"}
    capsys.readouterr()
    assert build_data.main(["text", str(tmp_path / "gone-doc_1.0_all.deb"), str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: package file not found") and "apt-get download gone-doc" in err and "\n" not in err


def test_the_lm_loader_reads_a_corpus_of_several_packages_and_names_them(debs, tmp_path):
    from test_build_data import _cfg
    from benchlib.data.load import load_task_data
    build_data.build_text([debs["alpha"], debs["beta"]], tmp_path / "c", selection="docs")
    d = load_task_data(_cfg("A", tmp_path / "c", tmp_path, seq_len=32))
    assert d.meta["provenance_package"] == "alpha-doc, beta-doc" and d.meta["provenance_origin"] == "Debian packages"
    assert d.meta["provenance_licence"] == "per package (packages): Apache-2.0; GPL-2+"
    assert d.meta["n_train_tokens"] > d.meta["n_val_tokens"] > 0 and "provenance_packages" not in d.meta
