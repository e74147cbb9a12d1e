"""A notebook's HTML page (``html_export.export_html``): the cells a reader sees (markdown with its
headings, code, tables, text, charts linked or inline) without JupyterLab's wrappers, styled by
the project's own small style sheet, written once beside the pages and linked; MathJax and
require.js only where a page uses them; committed pages all link the one sheet of today's style."""
import re
import shutil
import subprocess
from html import unescape
from urllib.parse import unquote

import nbformat
import pytest
from conftest import REPO

from dtype_bench.study import html_export
from dtype_bench.study.html_export import PAGE_CSS, export_html, saved_charts

STUDY = REPO / "executed" / "h200" / "quick"
NOTEBOOK = "analysis/11_compare_experiments.ipynb"


def _notebook(path, cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    nbformat.write(nb, str(path))
    return path


@pytest.fixture(scope="module")
def committed_page(tmp_path_factory):
    """A committed analysis notebook exported as the study's report does, in a copy of its study."""
    root = tmp_path_factory.mktemp("executed")
    study = root / "h200" / "quick"
    shutil.copytree(STUDY, study, ignore=shutil.ignore_patterns("html"))
    page = study / "html" / "analysis" / "11_compare_experiments.html"
    export_html(study / NOTEBOOK, page, root, saved_charts(study))
    return study, page, nbformat.read(str(study / NOTEBOOK), as_version=4)


def test_an_analysis_page_keeps_every_heading_table_and_chart_of_its_notebook(committed_page):
    study, page, nb = committed_page
    text = page.read_text()
    outputs = [o.get("data", {}) for c in nb.cells for o in c.get("outputs", [])]
    markdown = "\n".join([c.source for c in nb.cells if c.cell_type == "markdown"]
                         + [str(d["text/markdown"]) for d in outputs if "text/markdown" in d])
    headings = [h.strip() for h in re.findall(r"^#{1,4} (.+)$", markdown, re.M)]
    shown = [re.sub(r"<[^>]+>|¶", "", unescape(h)).strip() for h in re.findall(r"<h[1-4][^>]*>(.*?)</h[1-4]>", text)]
    assert headings and [re.sub(r"[`*]", "", h) for h in headings] == shown
    tables = sum(str(d.get("text/html", "")).count("<table") for d in outputs) + \
        sum(len(re.findall(r"^\|[-:| ]+\|$", str(d.get("text/markdown", "")), re.M)) for d in outputs) + \
        len(re.findall(r"^\|[-:| ]+\|$", "\n".join(c.source for c in nb.cells if c.cell_type == "markdown"), re.M))
    assert tables and text.count("<table") == tables
    from bs4 import BeautifulSoup
    charts = [a["href"] for a in BeautifulSoup(text, "html.parser")("a", href=re.compile(r"\.svg$"))
              if a.img and a.img["src"] == a["href"] and a.img["alt"]]
    assert charts and all((page.parent / c).resolve().is_file() for c in charts)  # linked, not repeated
    assert "data:image" not in text
    code = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "code" and c.source]
    plain = unescape(re.sub(r"<[^>]+>", "", text))
    assert all(line in plain for line in code)  # every cell's code, its highlighting aside


def test_the_page_links_the_one_small_style_sheet_and_carries_no_wrappers(committed_page):
    study, page, _ = committed_page
    text = page.read_text()
    [css] = study.parents[1].glob("notebook-*.css")
    assert css.read_text() == PAGE_CSS and len(PAGE_CSS) < 4096
    assert f'<link rel="stylesheet" href="../../../../{css.name}">' in text
    assert "<style" not in text and "<script" not in text and "jp-" not in text and "In&nbsp;[" not in text
    export_html(study / NOTEBOOK, page.with_name("again.html"), study.parents[1])
    assert list(study.parents[1].glob("notebook-*.css")) == [css]  # a second page: the same file


def test_the_page_is_smaller_than_nbconverts_lab_page_without_its_style(committed_page):
    """The lab template's page of the same notebook, even with its 260 kB of style left out, is
    larger: every cell sits in five to eight wrappers there."""
    from nbconvert import HTMLExporter
    study, page, nb = committed_page
    html_export._link_saved_charts(nb, page, saved_charts(study))
    lab, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    lab = re.sub(r"<style[^>]*>.*?</style>", "", lab, flags=re.S)
    assert len(page.read_bytes()) < 0.8 * len(lab.encode())


def test_code_inputs_and_outputs_are_told_apart_and_an_inline_svg_is_a_data_uri(tmp_path):
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"><text x="1" y="8">a "b" #1 50%</text></svg>'
    path = _notebook(tmp_path / "a.ipynb", [
        nbformat.v4.new_markdown_cell("# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |"),
        nbformat.v4.new_code_cell("print('x')", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="x\n"),
            nbformat.v4.new_output("stream", name="stderr", text="warn\n"),
            nbformat.v4.new_output("display_data", {"image/svg+xml": svg, "text/plain": "<chart: Loss>"})])])
    export_html(path, tmp_path / "a.html")
    text = (tmp_path / "a.html").read_text()
    assert '<div class="highlight' in text and '<pre class="out">x\n</pre>' in text
    assert '<pre class="out err">warn' in text
    assert ".highlight{" in text and ".out{" in text and ".err{" in text  # each styled apart
    assert '<h1 id="Title">' in text and "<td>2</td>" in text
    [img] = re.findall(r"<img[^>]*>", text)
    assert 'alt="Loss"' in img
    src = unescape(re.search(r'src="([^"]+)"', img).group(1))
    assert src.startswith("data:image/svg+xml,") and unquote(src.split(",", 1)[1]) == svg


@pytest.mark.parametrize("markdown, kept", [("plain text", False), ("a loss of $\\ln V$", True)])
def test_a_page_loads_mathjax_only_where_it_holds_tex_and_never_require_js(tmp_path, markdown, kept):
    """nbconvert's lab page loads require.js and MathJax with its configuration in every page; a
    page whose notebook holds no TeX and no JavaScript output has neither."""
    path = _notebook(tmp_path / "a.ipynb", [nbformat.v4.new_markdown_cell(markdown), nbformat.v4.new_code_cell(
        "1 + 1", outputs=[nbformat.v4.new_output("execute_result", data={"text/plain": "2"})])])
    export_html(path, tmp_path / "a.html")
    page = (tmp_path / "a.html").read_text()
    assert ("mathjax" in page.lower()) == kept and "require.min.js" not in page
    assert "plain text" in page or "ln V" in page


def test_a_page_keeps_the_highlighters_spans_its_style_colours_and_no_other(tmp_path):
    path = _notebook(tmp_path / "a.ipynb", [nbformat.v4.new_code_cell("import os\ntotal = compute(1)  # why"),
                                            nbformat.v4.new_markdown_cell('<span class="note">kept</span>')])
    export_html(path, tmp_path / "a.html")
    page = (tmp_path / "a.html").read_text()
    assert ".highlight .kn" in page and not re.search(r"\.highlight \.o\b", page)  # a keyword coloured, an operator not
    assert '<span class="kn">import</span>' in page and '<span class="c1"># why</span>' in page
    assert '<span class="o">' not in page and '<span class="n">' not in page and '<span class="p">' not in page
    assert "total = compute(1)" in re.sub(r"<[^>]+>", "", page) and '<span class="note">kept</span>' in page


def test_pandas_style_block_goes_its_rules_are_the_pages(tmp_path):
    import pandas as pd
    table = pd.DataFrame({"a": [1]})._repr_html_()
    assert "<style scoped>" in table
    path = _notebook(tmp_path / "a.ipynb", [nbformat.v4.new_code_cell("df", outputs=[
        nbformat.v4.new_output("execute_result", data={"text/html": table})])])
    export_html(path, tmp_path / "a.html", tmp_path)
    assert "<style" not in (tmp_path / "a.html").read_text() and '<table border="1" class="dataframe">' in \
        (tmp_path / "a.html").read_text()
    assert [p.read_text() for p in tmp_path.glob("notebook-*.css")] == [PAGE_CSS]
    assert ".dataframe thead th" in PAGE_CSS


def test_every_committed_page_links_the_one_committed_style_sheet_of_todays_style():
    """Re-exporting a committed study's pages (``dtype-bench compact``) writes the sheet they link."""
    tracked = subprocess.run(["git", "ls-files", "executed"], capture_output=True, text=True, cwd=REPO).stdout.split()
    sheets = [p for p in tracked if p.endswith(".css")]
    pages = [p for p in tracked if re.search(r"/html/(analysis|runs)/.*\.html$", p)]
    assert pages and len(sheets) == 1 and (REPO / sheets[0]).read_text() == PAGE_CSS
    for p in pages:
        links = re.findall(r'<link rel="stylesheet" href="([^"]+)">', (REPO / p).read_text())
        assert [(REPO / p).parent.joinpath(h).resolve() for h in links] == [(REPO / sheets[0]).resolve()], p
