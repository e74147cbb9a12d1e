"""``dtype-bench thin``: a study's run notebooks lose the copies of their data (the chart's
Vega-Lite spec and PNG become one SVG) and keep everything else, once."""
import subprocess
import sys

import altair as alt
import nbformat
import pandas as pd
from conftest import REPO

from benchlib.analysis import charts
from benchlib.study import thin
from benchlib.study.notebook import RECORD_MIME, read_notebook_record


def _run_notebook(path):
    chart = alt.Chart(pd.DataFrame({"step": range(300), "loss": [4 - k / 100 for k in range(300)]})).mark_line()
    chart = chart.encode(x="step", y="loss").properties(title="A/amp_bf16/seed0 (ok)")
    bundle = charts.show(chart)._repr_mimebundle_()  # spec + PNG, as run notebooks were written before
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("nb.plot_curves(result)", outputs=[
                    nbformat.v4.new_output("display_data", data=bundle)]),
                nbformat.v4.new_code_cell("nb.store_result(result)", outputs=[
                    nbformat.v4.new_output("display_data", data={RECORD_MIME: {"run_id": "A/amp_bf16/seed0"},
                                                                  "text/plain": "record"}),
                    nbformat.v4.new_output("stream", name="stdout", text="status ok\n")]),
                nbformat.v4.new_code_cell("nb.train(cfg)", outputs=[
                    nbformat.v4.new_output("stream", name="stderr", text=f"\rA/amp_bf16/seed0: {k:3d}%|")
                    for k in range(0, 101, 10)])]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def test_thin_rewrites_charts_as_svg_and_keeps_the_rest(tmp_path):
    nb_path = tmp_path / "study" / "runs" / "A" / "amp_bf16" / "seed0.ipynb"
    _run_notebook(nb_path)
    n, before, after = thin.thin_study(tmp_path / "study")
    assert n == 1 and after < before / 2
    nb = nbformat.read(str(nb_path), as_version=4)
    chart = nb.cells[0].outputs[0]["data"]
    assert set(chart) == {"text/plain", "image/svg+xml"} and chart["text/plain"] == "<chart: A/amp_bf16/seed0 (ok)>"
    assert chart["image/svg+xml"].lstrip().startswith("<svg")
    assert read_notebook_record(nb_path) == {"run_id": "A/amp_bf16/seed0"}
    assert nb.cells[1].outputs[1]["text"] == "status ok\n" and nb.cells[0].source == "nb.plot_curves(result)"
    assert [o["text"] for o in nb.cells[2].outputs] == ["A/amp_bf16/seed0: 100%|"]  # the bar's last state
    assert thin.thin_study(tmp_path / "study") == (0, after, after)  # a second pass changes nothing


def test_thin_refuses_a_folder_that_is_no_study(tmp_path):
    r = subprocess.run([sys.executable, "-m", "benchlib", "thin", str(tmp_path)], capture_output=True, text=True,
                       cwd=REPO)
    assert r.returncode != 0 and "no runs/ folder" in r.stderr and r.stderr.strip().count("\n") == 0


def test_a_large_study_links_run_notebooks_instead_of_writing_a_page_per_run(tmp_path, monkeypatch):
    """Above RUN_PAGES_MAX runs the HTML export writes no page per run (they would repeat the
    notebooks in every GPU job's tree) and the index links each run's .ipynb; at or below it,
    pages as before, and a page left from when the study was smaller is removed."""
    from types import SimpleNamespace

    from fixtures.records import make_record, write_run

    from benchlib.study import html_export
    study = tmp_path / "study"
    items = []
    for k in range(2):
        result = write_run(study, make_record("A", "amp_bf16", k))
        notebook = study / "runs" / "A" / "amp_bf16" / f"seed{k}.ipynb"
        _run_notebook(notebook)
        items.append(SimpleNamespace(run_id=f"A/amp_bf16/seed{k}", notebook=notebook, result=result))
    index = html_export.export_study_html(study, items, [], overview=False)
    page = study / "html" / "runs" / "A" / "amp_bf16" / "seed0.html"
    assert page.exists() and 'href="runs/A/amp_bf16/seed0.html"' in index.read_text()
    monkeypatch.setattr(html_export, "RUN_PAGES_MAX", 1)
    text = html_export.export_study_html(study, items, [], overview=False).read_text()
    assert not page.exists() and 'href="../runs/A/amp_bf16/seed0.ipynb"' in text
    assert "more than 1 runs: each links its .ipynb" in text
