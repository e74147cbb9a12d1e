"""``dtype_bench.study.compact``'s thinning, what ``dtype-bench compact`` does to one file: a run notebook loses the
copies of its data (the chart's Vega-Lite spec and PNG become one SVG) and keeps everything else;
a step log keeps what the charts read; a run log its end; once."""
import re

import altair as alt
import nbformat
import pandas as pd

from benchlib.analysis import charts
from dtype_bench.study import compact, html_export
RECORD_MIME = "application/vnd.dtype-bench.record+json"  # the record output of notebooks run before


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
                    for k in range(0, 101, 10)]),
                nbformat.v4.new_code_cell("nb.show_result(result)", outputs=[
                    nbformat.v4.new_output("execute_result", data={"text/html": "<table></table>",
                                                                   "text/plain": "   a\n0  1"}),
                    nbformat.v4.new_output("execute_result", data={"text/plain": "12.5"})])]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def test_thin_rewrites_charts_as_svg_and_keeps_the_rest(tmp_path):
    nb_path = tmp_path / "study" / "runs" / "A" / "amp_bf16" / "seed0.ipynb"
    _run_notebook(nb_path)
    before, after = compact.thin_notebook(nb_path)
    assert after < before / 2
    nb = nbformat.read(str(nb_path), as_version=4)
    chart = nb.cells[0].outputs[0]["data"]
    assert set(chart) == {"text/plain", "image/svg+xml"} and chart["text/plain"] == "<chart: A/amp_bf16/seed0 (ok)>"
    assert chart["image/svg+xml"].lstrip().startswith("<svg")
    assert nb.cells[1].outputs[0]["data"][RECORD_MIME] == {"run_id": "A/amp_bf16/seed0"}
    assert nb.cells[1].outputs[1]["text"] == "status ok\n" and nb.cells[0].source == "nb.plot_curves(result)"
    assert [o["text"] for o in nb.cells[2].outputs] == ["A/amp_bf16/seed0: 100%|"]  # the bar's last state
    assert set(nb.cells[3].outputs[0]["data"]) == {"text/html"}  # a table's plain-text copy goes
    assert nb.cells[3].outputs[1]["data"] == {"text/plain": "12.5"}  # plain text alone stays
    assert compact.thin_notebook(nb_path) == (after, after)  # a second pass changes nothing


def test_thin_leans_an_svg_output_drawn_before_charts_were_lean(tmp_path):
    """An SVG output with what draws nothing (ARIA, a transparent text) is rewritten by
    ``charts.lean_svg``, and the notebook's JSON without indentation, once."""
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20"><g role="graphics-object" '
           'aria-roledescription="group mark container"><text opacity="0">x</text>'
           '<line x2="5" stroke="#888" stroke-width="1" aria-hidden="true" /></g></svg>')
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("nb.plot_curves(result)", outputs=[
        nbformat.v4.new_output("display_data", data={"image/svg+xml": svg, "text/plain": "<chart: curves>"})])]
    path = tmp_path / "seed0.ipynb"
    nbformat.write(nb, str(path))
    before, after = compact.thin_notebook(path)
    out = nbformat.read(str(path), as_version=4).cells[0].outputs[0]["data"]
    assert after < before and out["text/plain"] == "<chart: curves>"
    assert out["image/svg+xml"] == charts.lean_svg(svg) and "aria" not in out["image/svg+xml"]
    assert "opacity" not in out["image/svg+xml"] and "<line" in out["image/svg+xml"]
    assert compact.thin_notebook(path) == (after, after)
    assert "\n" not in path.read_text().rstrip("\n")  # its JSON on one line, no indentation


def test_thin_drops_a_tables_indentation_and_nothing_shown(tmp_path):
    """pandas writes each cell of an HTML table on an indented line of its own; thinning drops the
    whitespace before the table's tags, which no browser shows, and keeps a cell's own text."""
    table = ('<div>\n<table border="1" class="dataframe">\n  <thead>\n    <tr>\n      <th>a b</th>\n    </tr>\n'
             '  </thead>\n  <tbody>\n    <tr>\n      <td> 1 </td>\n    </tr>\n  </tbody>\n</table>\n</div>')
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("df", outputs=[
        nbformat.v4.new_output("execute_result", data={"text/html": table, "text/plain": "   a b\n0  1"})])]
    path = tmp_path / "a.ipynb"
    nbformat.write(nb, str(path))
    compact.thin_notebook(path)
    out = nbformat.read(str(path), as_version=4).cells[0].outputs[0]["data"]
    assert out == {"text/html": '<div><table border="1" class="dataframe"><thead><tr><th>a b</th></tr></thead>'
                                '<tbody><tr><td> 1 </td></tr></tbody></table>\n</div>'}


def test_a_large_study_writes_no_page_per_run_and_links_no_notebook_json(tmp_path, monkeypatch):
    """Above RUN_PAGES_MAX runs the HTML export writes no page per run (they would repeat the
    notebooks in every GPU job's tree) and its runs link nothing, never the .ipynb; at or below it,
    pages as before, and a page left from when the study was smaller is removed."""
    from types import SimpleNamespace

    from fixtures.records import make_record, write_run

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
    assert not page.exists() and ".ipynb" not in text  # a run without a page links nothing, never raw JSON
    assert "more than 1 runs: no page per run" in text


def test_a_compacted_step_log_keeps_every_rich_row_an_even_subset_of_plain_ones_the_last_and_the_lowest():
    import math
    rows = []
    for s in range(2000):
        row = {"step": s, "loss": 9.0 - s / 1000 - (s == 1333) * 5, "grad_norm": 1.0 + (s == 1234)}
        if s % 50 == 49:
            row.update(loss_scale=2.0 ** 16, grad_max=0.5, interval_ms_per_step=6.1)
        rows.append(row)
    rows[777]["loss"] = float("nan")
    rows.insert(1001, {"step": 1000, "eval": {"val_loss": 7.9}})
    kept = compact.kept_rows(rows)
    rich = [r for r in rows if set(r) - {"step", "loss", "grad_norm"} or not math.isfinite(r["loss"])]
    assert all(any(k is r for k in kept) for r in rich)  # every interval row, the evaluation, the non-finite loss
    plain = [r for r in kept if set(r) == {"step", "loss", "grad_norm"} and math.isfinite(r["loss"])]
    assert compact.KEEP_ROWS // 2 <= len(plain) <= compact.KEEP_ROWS + 2 and kept[-1] is rows[-1]
    assert any(r["step"] == 1333 for r in kept)  # the lowest loss (what the scaling analysis reads as best)
    evenly = [r for r in plain if r["step"] not in (1333, 1999)]
    assert len({b["step"] - a["step"] for a, b in zip(evenly, evenly[1:])}) <= 2  # evenly spaced
    assert [r["step"] for r in kept] == sorted(r["step"] for r in kept)  # in their order
    assert compact.kept_rows(kept) == kept  # once
    short = rows[:300]
    assert compact.kept_rows(short) == short  # nothing to drop


def test_thin_redraws_a_long_run_chart_binned():
    from benchlib.study.notebook import MAX_POINTS, curves_chart
    long = pd.DataFrame({"step": range(1000), "metric": "loss", "value": [9 - k / 200 for k in range(1000)], "run": ""})
    spec = curves_chart(long, title="A/amp_bf16/seed0 (ok)").to_dict()
    redrawn = compact._binned(spec)
    rows = [r for v in redrawn["datasets"].values() for r in v]
    assert len(rows) <= MAX_POINTS and redrawn["title"] == "A/amp_bf16/seed0 (ok)"
    short = curves_chart(long.head(50), title="x").to_dict()
    assert compact._binned(short) is short


def test_a_run_log_keeps_each_bars_last_state_and_its_end(tmp_path):
    from dtype_bench.study.compact import thin_log
    log = tmp_path / "run.log"
    bar = "\r".join(f"A/amp_bf16/seed1: {k}/400" for k in range(0, 401, 5))
    log.write_text("warning: first\n" + bar + "\n" + "\n".join(f"line {k}" for k in range(300)) + "\nTraceback: boom\n")
    before, after = thin_log(log, keep=50)
    lines = log.read_text().splitlines()
    assert after < before and len(lines) == 50 and lines[-1] == "Traceback: boom" and b"\r" not in log.read_bytes()
    assert thin_log(log, keep=50) == (after, after)  # a second time changes nothing
    short = tmp_path / "short.log"
    short.write_text("x: 0/4\rx: 4/4\nwarning: y\n")
    thin_log(short)
    assert short.read_bytes() == b"x: 4/4\nwarning: y\n"


def test_an_analysis_page_links_the_chart_files_it_shows_instead_of_repeating_them(tmp_path):
    """The analysis notebooks show each chart they save under <scenario>/plots: the page links
    that file (it reads offline inside the study folder); an SVG with no file stays inline."""
    import nbformat

    saved = '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="5" height="5"/></svg>'
    other = '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><circle r="4"/></svg>'
    study = tmp_path / "study"
    (study / "A" / "plots").mkdir(parents=True)
    (study / "A" / "plots" / "memory.svg").write_text(saved)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("show()")
    cell.outputs = [nbformat.v4.new_output("display_data", {"image/svg+xml": saved, "text/plain": "<chart: Peak memory>"}),
                    nbformat.v4.new_output("display_data", {"image/svg+xml": other, "text/plain": "<chart: Other>"})]
    nb.cells = [cell]
    (study / "analysis").mkdir()
    nbformat.write(nb, str(study / "analysis" / "10.ipynb"))
    page = study / "html" / "analysis" / "10.html"
    html_export.export_html(study / "analysis" / "10.ipynb", page, study / "html", html_export.saved_charts(study))
    text = page.read_text()
    from html import unescape
    from urllib.parse import unquote
    inline = [unquote(unescape(d)) for d in re.findall(r'src="data:image/svg\+xml,([^"]+)"', text)]
    assert inline == [other]  # an SVG output is inlined as a data URI; the saved one is linked
    img = re.search(r'<img[^>]*src="\.\./\.\./A/plots/memory\.svg"[^>]*>', text)
    assert img and 'alt="Peak memory"' in img.group(0)
    assert (page.parent / "../../A/plots/memory.svg").resolve() == (study / "A/plots/memory.svg").resolve()
