"""Static HTML of a study (``export_study_html``, after a sweep and after ``dtype-bench compact``):
every executed notebook as a page that reads offline inside the study folder, and an
``index.html`` that reads as the reference reports do: the answer table first, then where each
config breaks, speed and memory, and the detail (every run with its cell's verdict).
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from benchlib.core.records import fmt, last_line, shared_gpu


def export_html(notebook: Path, html: Path, css_root: Path | None = None, charts: dict[str, Path] | None = None) -> None:
    """Static HTML that reads offline: the notebook through ``PAGE_TEMPLATE`` (its cells without
    JupyterLab's wrappers), styled by ``PAGE_CSS``, progress-bar redraws collapsed. With
    ``css_root``, the style is written once there and linked (``_shared_css``); with ``charts``
    (``saved_charts``), an SVG output that is one of the study's chart files byte for byte links
    that file instead of repeating it."""
    import nbformat
    nb = nbformat.read(str(notebook), as_version=4)
    for cell in nb.cells:
        if "outputs" in cell:
            cell["outputs"] = coalesce_streams(cell["outputs"])
    if charts:
        _link_saved_charts(nb, html, charts)
    _relink_charts(nb, notebook, html)
    body = with_alt_text(_unstyled_tokens(_page(nb, notebook.stem)), _png_titles(nb))
    html.parent.mkdir(parents=True, exist_ok=True)
    if css_root is not None:
        body = _shared_css(body, css_root, html)
    html.write_text(body)


PAGE_TEMPLATE = """{%- extends 'classic/base.html.j2' -%}
{% from 'mathjax.html.j2' import mathjax %}
{%- block header -%}
<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ resources.page.title | escape_html }}</title><style>{{ resources.page.css }}</style>
{%- if resources.page.scripts %}<script src="{{ resources.jquery_url }}"></script>
<script src="{{ resources.require_js_url }}"></script>{% endif %}
{%- if resources.page.math %}{{ mathjax(resources.mathjax_url) }}{% endif %}
</head><body><main>
{%- endblock header -%}
{%- block footer -%}{{ super() }}</main></body></html>{%- endblock footer -%}
{%- block codecell -%}{{ super.super() }}{%- endblock codecell -%}
{%- block input_group -%}{{ super.super() }}{%- endblock input_group -%}
{%- block output_group -%}{{ super.super() }}{%- endblock output_group -%}
{%- block input -%}{{ cell.source | highlight_code(metadata=cell.metadata) | clean_html }}{%- endblock input -%}
{%- block output -%}{{ super.super() }}{%- endblock output -%}
{%- block markdowncell scoped -%}
{%- set html_value = cell.source | markdown2html | strip_files_prefix -%}
<div class="md">{{ html_value | clean_html if resources.should_sanitize_html else html_value }}</div>
{%- endblock markdowncell -%}
{%- block stream_stdout -%}<pre class="out">{{ output.text | ansi2html }}</pre>{%- endblock stream_stdout -%}
{%- block stream_stderr -%}<pre class="out err">{{ output.text | ansi2html }}</pre>{%- endblock stream_stderr -%}
{%- block error -%}<pre class="out err">{{ super.super() }}</pre>{%- endblock error -%}
{%- block data_text scoped -%}<pre class="out">{{ output.data['text/plain'] | ansi2html }}</pre>{%- endblock data_text -%}
{%- block data_html scoped -%}
{%- set html_value = output.data['text/html'] -%}
<div class="out">{{ html_value | clean_html if resources.should_sanitize_html else html_value }}</div>
{%- endblock data_html -%}
{%- block data_markdown scoped -%}
{%- set html_value = output.data['text/markdown'] | markdown2html -%}
<div class="out md">{{ html_value | clean_html if resources.should_sanitize_html else html_value }}</div>
{%- endblock data_markdown -%}
{%- block data_svg scoped -%}
<div class="out"><img alt="{{ output.data | chart_title | escape_html }}"
 src="{{ output.data['image/svg+xml'] | svg_data_uri }}"></div>
{%- endblock data_svg -%}
"""
"""The page of a notebook: nbconvert's classic cells without their wrappers and prompts (a
markdown cell a ``div.md``, a code cell its highlighted source, each output a ``pre.out`` or
``div.out``), the style inline (``export_html`` moves it to a shared file), MathJax and
require.js only where ``_page`` finds them needed; the rarer outputs (PNG, LaTeX, JavaScript,
widgets) as the classic template writes them."""

PAGE_CSS = """\
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#1f2328;\
margin:0 auto;padding:1em 2em 3em;max-width:80em}
h1,h2,h3,h4{line-height:1.25;margin:1.4em 0 .5em}
a{color:#0b5cad}
a.anchor-link{margin-left:.3em;text-decoration:none;visibility:hidden}
:hover>a.anchor-link{visibility:visible}
code,pre{font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace}
code{background:#f2f3f5;border-radius:3px;padding:0 .25em}
pre{margin:0;white-space:pre-wrap;overflow-wrap:anywhere}
pre code{background:none;padding:0}
blockquote{border-left:4px solid #d0d4d9;color:#444;margin:1em 0;padding:0 1em}
img{max-width:100%;height:auto}
table{border-collapse:collapse;margin:.6em 0;font-size:13px}
th,td{border:1px solid #c8ccd1;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eef0f3}
tbody tr:nth-child(even){background:#f8f9fa}
.dataframe td,.dataframe thead th{text-align:right}
.dataframe tbody tr th:only-of-type{vertical-align:middle}
.highlight{background:#f4f6fa;border-left:3px solid #5b84c4;margin:1.2em 0 .3em;padding:.5em .8em;overflow-x:auto}
.highlight pre{white-space:pre;overflow-wrap:normal}
.out{margin:.3em 0 1em;padding:0 .8em 0 calc(.8em + 3px);overflow-x:auto}
.err{background:#fff3f2;border-left:3px solid #d9534f;padding:.4em .8em}
.highlight .c1,.highlight .c,.highlight .cm{color:#6a737d;font-style:italic}
.highlight .k,.highlight .kn,.highlight .kc,.highlight .ow{color:#7a2fa8;font-weight:600}
.highlight .s1,.highlight .s2,.highlight .sa,.highlight .se,.highlight .si,.highlight .sd{color:#1a7f37}
.highlight .mi,.highlight .mf{color:#0550ae}
.highlight .nf,.highlight .nc{color:#8250df}
.ansi-red-fg{color:#c62828}.ansi-green-fg{color:#2e7d32}.ansi-yellow-fg{color:#9a6700}.ansi-blue-fg{color:#1565c0}
.ansi-bold{font-weight:bold}
@media print{.highlight,.out{break-inside:avoid}}
"""
"""The pages' style, written for this project: readable text, tables with borders, code distinct
from its outputs (a tinted block with a blue edge; an output indented to its text, an error red),
images no wider than the page, and colours for the few highlighter tokens worth telling apart
(comments, keywords, strings, numbers, names defined): ``_unstyled_tokens`` drops the others'
spans."""


def _page(nb, title: str) -> str:
    """The notebook ``nb`` as one HTML page (``PAGE_TEMPLATE``) titled ``title``."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    exporter = HTMLExporter(template_name="classic", template_file="page.html.j2", exclude_input_prompt=True,
                            exclude_output_prompt=True, extra_loaders=[DictLoader({"page.html.j2": PAGE_TEMPLATE})],
                            filters={"svg_data_uri": svg_data_uri, "chart_title": chart_title})
    math, scripts = _needs(nb)
    body, _ = exporter.from_notebook_node(nb, resources={"page": {"title": title, "css": PAGE_CSS, "math": math,
                                                                  "scripts": scripts}})
    return _without_pandas_style(body)


MATH = re.compile(r"\$|\\\(|\\\[")


def _needs(nb) -> tuple[bool, bool]:
    """Whether a page needs MathJax (a markdown cell or output holds TeX: ``$``, ``\\(``,
    ``\\[``, or an output is LaTeX) and require.js with jQuery (an output is JavaScript or a
    widget): nbconvert would load both in every page (~2 kB, and two scripts from the web)."""
    data = [o.get("data") or {} for c in nb.cells for o in c.get("outputs", [])]
    kinds = {k for d in data for k in d}
    texts = [c.source for c in nb.cells if c.cell_type == "markdown"] + [str(d["text/markdown"]) for d in data
                                                                         if "text/markdown" in d]
    math = "text/latex" in kinds or any(MATH.search(t) for t in texts)
    return math, any("javascript" in k or "widget" in k for k in kinds)


def svg_data_uri(svg) -> str:
    """An SVG as a ``data:`` URI for an ``<img>`` src, escaped only where a URL or the attribute
    needs it (a sixth smaller than the base64 nbconvert writes)."""
    from urllib.parse import quote
    text = "".join(svg) if isinstance(svg, list) else svg
    return "data:image/svg+xml," + quote(text, safe=" !$'()*+,-./:;=?@[]^_`{|}~")


PANDAS_STYLE = re.compile(r'<style scoped(?:="")?>\s*\.dataframe tbody tr th:only-of-type \{\s*vertical-align: middle;'
                          r'\s*\}\s*\.dataframe tbody tr th \{\s*vertical-align: top;\s*\}'
                          r'\s*\.dataframe thead th \{\s*text-align: right;\s*\}\s*</style>\s*')
"""pandas' style block in every table output, its rules in ``PAGE_CSS`` already."""


def _without_pandas_style(body: str) -> str:
    """The page without ``PANDAS_STYLE``'s blocks (an output's other style is kept)."""
    return PANDAS_STYLE.sub("", body)


def _unstyled_tokens(body: str) -> str:
    """The page without the highlighter's spans around code tokens its style gives no rule (names,
    operators, punctuation, whitespace: most of a page's spans): their text alone, shown the same."""
    styled = set(re.findall(r"\.highlight \.(\w+)\b", "".join(re.findall(r"<style[^>]*>.*?</style>", body, re.S))))

    def plain(code: re.Match) -> str:
        return re.sub(r'<span class="(\w+)">([^<]*)</span>', lambda m: m[0] if m[1] in styled else m[2], code[0])
    return re.sub(r'<div class="highlight[^"]*"><pre>.*?</pre>', plain, body, flags=re.S)


def _shared_css(body: str, css_root: Path, html: Path) -> str:
    """Move the page's distinct ``<style>`` blocks (``PAGE_CSS``, and an output's own) to
    ``css_root/notebook-<hash>.css`` (named by its content: one file for all the pages that share
    it) and link it."""
    import hashlib
    styles = re.findall(r"<style[^>]*>.*?</style>", body, re.S)
    if not styles:
        return body
    # each table output brings its own copy of pandas' style block: once is enough, and pages
    # with one table or five then share one file
    text = "\n".join(dict.fromkeys(re.sub(r"^<style[^>]*>|</style>$", "", st) for st in styles))
    css = css_root / f"notebook-{hashlib.sha256(text.encode()).hexdigest()[:10]}.css"
    if not css.exists():
        css.parent.mkdir(parents=True, exist_ok=True)
        css.write_text(text)
    for st in styles[1:]:
        body = body.replace(st, "", 1)
    href = Path(os.path.relpath(css, html.parent)).as_posix()
    return body.replace(styles[0], f'<link rel="stylesheet" href="{href}">', 1)


CHART_TEXT = re.compile(r"^<chart: (.*)>$", re.S)


def saved_charts(study_dir: Path) -> dict[str, Path]:
    """sha256 of each SVG chart file of a study (not its HTML) -> the file."""
    import hashlib
    html = study_dir / "html"
    return {hashlib.sha256(f.read_bytes()).hexdigest(): f for f in sorted(study_dir.rglob("*.svg"))
            if html not in f.parents}


def _img(href: str, alt: str) -> str:
    from html import escape
    return f'<a href="{escape(href)}"><img src="{escape(href)}" alt="{escape(alt)}"></a>'


def _link_saved_charts(nb, html: Path, charts: dict[str, Path]) -> None:
    """Each SVG output of ``nb`` that is a file of ``charts`` becomes an ``<img>`` linking that
    file from the page ``html``, the chart's title its alternative text."""
    import hashlib
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data") or {}
            svg = data.get("image/svg+xml")
            if svg is None:
                continue
            text = "".join(svg) if isinstance(svg, list) else svg
            target = charts.get(hashlib.sha256(text.encode()).hexdigest())
            if target is None:
                continue
            plain = str(data.get("text/plain") or "").strip()
            m = CHART_TEXT.match(plain)
            alt = (m.group(1) if m else plain) or target.stem.replace("_", " ")
            data["text/html"] = _img(Path(os.path.relpath(target, html.parent)).as_posix(), alt)
            del data["image/svg+xml"]


CHART_LINK = "dtype-bench/chart"
"""Output metadata key of a chart shown by a link to its file (``chart_link``): the file's path
relative to the notebook's folder."""


def chart_link(target: Path, notebook: Path, alt: str) -> dict:
    """A display output that shows the chart file ``target`` from ``notebook`` by a relative link
    (``export_html`` rewrites it for the page's folder)."""
    href = Path(os.path.relpath(target, notebook.parent)).as_posix()
    return {"output_type": "display_data", "metadata": {CHART_LINK: href},
            "data": {"text/html": _img(href, alt), "text/plain": f"<chart: {alt}>"}}


def _relink_charts(nb, notebook: Path, html: Path) -> None:
    """The ``chart_link`` outputs of ``nb`` (read from ``notebook``) pointed at from the page ``html``."""
    from html import unescape
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            rel = (out.get("metadata") or {}).get(CHART_LINK)
            if not rel:
                continue
            href = Path(os.path.relpath(notebook.parent / rel, html.parent)).as_posix()
            m = re.search(r'alt="([^"]*)"', str((out.get("data") or {}).get("text/html") or ""))
            alt = unescape(m.group(1)) if m else Path(rel).stem.replace("_", " ")
            out["data"]["text/html"] = _img(href, alt)


def chart_title(data: dict) -> str:
    """A chart output's title (its ``text/plain``, ``<chart: title>`` as ``analysis.show`` writes
    it), its alternative text; "chart" where it has none."""
    text = str(data.get("text/plain") or "").strip()
    m = CHART_TEXT.match(text)
    return (m.group(1) if m else text) or "chart"


def _png_titles(nb) -> dict[str, str]:
    """Alternative text for each PNG output, keyed by the start of its data."""
    return {data["image/png"].strip()[:200]: chart_title(data) for cell in nb.cells for out in cell.get("outputs", [])
            if "image/png" in (data := out.get("data", {}))}


def with_alt_text(body: str, titles: dict[str, str]) -> str:
    """The HTML with an ``alt`` attribute on every inline PNG (nbconvert writes none)."""
    from html import escape

    def add(m: re.Match) -> str:
        alt = escape(titles.get(m.group(2).strip()[:200], "chart"))
        return f'<img alt="{alt}"{m.group(1)}src="data:image/png;base64,{m.group(2)}'
    # nbconvert's own alt text, where it writes one, says only that there is none
    body = re.sub(r'<img alt="No description has been provided for this image"', "<img", body)
    return re.sub(r'<img((?:\s+(?!src=|alt=)[\w-]+="[^"]*")*\s+)src="data:image/png;base64,([^"]+)', add, body)


def coalesce_streams(outputs: list) -> list:
    """Merge consecutive stream chunks and keep what a terminal shows after each carriage
    return (nbconvert's own coalescing keeps a bar's erasure rather than its last drawing)."""
    merged: list = []
    for out in outputs:
        if out.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream" \
                and merged[-1]["name"] == out["name"]:
            merged[-1]["text"] += out["text"]
        else:
            merged.append(out)
    for out in merged:
        if out.get("output_type") == "stream":
            text = "\n".join(_last_drawn(line) for line in out["text"].split("\n"))
            out["text"] = re.sub(r"\n{3,}", "\n\n", text)
    return [o for o in merged if o.get("output_type") != "stream" or o["text"].strip()]


def _last_drawn(line: str) -> str:
    """The last non-blank redraw of a carriage-return line: a finished bar, not its erasure."""
    drawn = [seg for seg in line.split("\r") if seg.strip()]
    return drawn[-1] if drawn else ""


def study_overview(study_dir: Path) -> tuple[dict, str]:
    """The overview charts of a study (``analysis.report.write_overview``), or why there are none."""
    from benchlib.analysis.report import write_overview
    try:
        return write_overview(study_dir), ""
    except FileNotFoundError as e:  # no readable record yet
        return {}, str(e)
    except Exception as e:  # the overview must never cost the export: say why it is missing
        print(f"  overview failed: {type(e).__name__}: {e}", file=sys.stderr)
        return {}, f"the overview could not be drawn: {type(e).__name__}: {e}"


RUN_PAGES_MAX = 20
"""A fresh study of more runs gets no HTML page per run (~30 kB each)."""


def export_study_html(study_dir: Path, items: list | None = None, analysis: list[Path] | None = None,
                      overview: bool | dict = True, css_root: Path | None = None, run_pages: bool = True) -> Path:
    """``<study>/html/``: ``index.html`` and a page per analysis notebook and per run notebook
    (where it exists and the study is compacted or has at most ``RUN_PAGES_MAX`` runs and
    ``run_pages``); returns the index. ``overview``: True draws the overview charts, a dict
    (``study_overview``'s) gives them, False: none. ``items`` (each with ``run_id``, ``notebook``,
    ``result``): default every record's run; ``analysis``: default ``<study>/analysis/*.ipynb``;
    ``css_root``: where the shared style sheet goes (default ``html/``)."""
    from benchlib.core.records import RECORDS_TABLE, load_records
    html_dir = study_dir / "html"
    css_root = css_root or html_dir
    records = {Path(r["_path"]).resolve(): r for r in load_records(study_dir)}
    items = record_items(study_dir, records.values()) if items is None else items
    analysis = sorted((study_dir / "analysis").glob("*.ipynb")) if analysis is None else analysis
    compacted = (study_dir / RECORDS_TABLE).exists()
    pages = compacted or (run_pages and len(items) <= RUN_PAGES_MAX)
    rows = []
    for item in items:
        target = html_dir / item.notebook.relative_to(study_dir).with_suffix(".html")
        if not (pages and item.notebook.exists()):
            target.unlink(missing_ok=True)  # a page from when the study was smaller
        elif not target.exists() or target.stat().st_mtime < item.notebook.stat().st_mtime:
            try:
                export_html(item.notebook, target, css_root)
            except Exception as e:  # an unreadable half-written notebook: say so, go on
                print(f"  html export failed for {item.run_id}: {e}", file=sys.stderr)
        rows.append((item, records.get(Path(item.result).resolve()), target))
    saved = saved_charts(study_dir)
    for nb in analysis:
        export_html(nb, html_dir / "analysis" / nb.with_suffix(".html").name, css_root, saved)
    index = html_dir / "index.html"
    index.parent.mkdir(parents=True, exist_ok=True)
    charts, why = (overview, "") if isinstance(overview, dict) else study_overview(study_dir) if overview else ({}, "")
    links = [html_dir / "analysis" / nb.with_suffix(".html").name for nb in analysis]
    index.write_text(_index_html(study_dir, rows, links, _figures(charts, why, html_dir), compacted))
    prune_css(css_root)
    return index


def record_items(study_dir: Path, records) -> list:
    """One item per record (``run_id``, ``notebook``, ``result``), in the order of their folders."""
    from types import SimpleNamespace
    items = []
    for rec in records:
        result = Path(rec["_path"])
        folder = result.parent.relative_to(study_dir)
        label = folder.relative_to("runs") if folder.parts[:1] == ("runs",) else folder
        items.append(SimpleNamespace(run_id=label.as_posix(), notebook=result.parent.with_suffix(".ipynb"),
                                     result=result))
    return sorted(items, key=lambda i: Path(i.run_id).parts)


def prune_css(html_dir: Path) -> list[Path]:
    """Remove (and return) the shared ``notebook-<hash>.css`` files no page links any more."""
    used = {m for page in html_dir.rglob("*.html") for m in re.findall(r"notebook-[0-9a-f]+\.css", page.read_text())}
    gone = [css for css in html_dir.glob("notebook-*.css") if css.name not in used]
    for css in gone:
        css.unlink()
    return gone


def _figures(charts: dict, why: str, html_dir: Path) -> dict[str, str]:
    """Each overview chart as a figure linking its file (SVG first), by name; ``_why``: why none."""
    from html import escape
    if not charts:
        return {"_why": f"<p>No overview charts: {escape(why)}</p>" if why else ""}
    figs = {}
    for name, (title, files) in charts.items():
        image = next((f for f in sorted(files, key=lambda f: f.suffix != ".svg") if f.suffix in (".svg", ".png")), None)
        if image is not None:
            href = escape(Path(os.path.relpath(image, html_dir)).as_posix())
            figs[name] = (f'<figure id="{escape(name)}"><a href="{href}"><img alt="{escape(title)}" src="{href}"></a>'
                          f"<figcaption>{escape(name.replace('_', ' '))}</figcaption></figure>")
    return figs


def _markdown(lines: list[str]) -> str:
    """Markdown as HTML (nbconvert's renderer), each answer cell marked with its verdict's colour."""
    import mistune
    body = mistune.create_markdown(escape=False, plugins=["table"])("\n".join(lines))
    return re.sub(r"<td><strong>(\w[\w ]*)", lambda m: f'<td class="v-{m.group(1).replace(" ", "-")}"><strong>'
                  f"{m.group(1)}", body)


def _answer_html(study_dir: Path, figures: dict) -> tuple[str, str]:
    """The answer section (``report.answer_markdown``) and the speed-and-memory section (or a
    link to the report of the speed study it takes its speed from), or why there is none."""
    from html import escape

    from benchlib.analysis.report import answer_markdown
    try:
        answer, absolute, speed = answer_markdown(study_dir)
    except (FileNotFoundError, ValueError, KeyError) as e:  # no comparison, or one without per-cell verdicts
        return f"<p>No answer table: {escape(str(e))}</p>", figures.get("quality_vs_throughput", "")
    body = _markdown(answer).replace("<table>", '<table id="answer">', 1)
    from benchlib.analysis.findings import answer_for
    if (whole := answer_for(study_dir)) is not None:  # the project's answer first: every output says the same
        body = ('<p>The answer this study is part of (<code>executed/ANSWER.md</code>, as the README\'s Findings '
                'state it):</p>' + _markdown(whole.splitlines()[1:]).replace("<table>", '<table id="answer">', 1)
                + "<h3>This study's own verdicts</h3>" + _markdown(answer).replace("<table>", '<table id="own">', 1))
    rest = _markdown(absolute)
    if speed is not None and speed != study_dir:
        report = Path(os.path.relpath(speed / "html" / "index.html", study_dir / "html")).as_posix()
        rest += f'<p>Speed and memory of every run: <a href="{escape(report)}">the report of {escape(speed.name)}</a>.</p>'
    else:
        rest += figures.get("quality_vs_throughput", "")
    return body, rest


def _verdicts(study_dir: Path) -> tuple[dict, dict]:
    """From ``comparison.json``: (scenario, config) -> its verdict's mark, and run id -> (health,
    reason) of each unhealthy run; empty where there is no comparison."""
    import json

    from benchlib.analysis.answer import mark
    path = study_dir / "comparison" / "comparison.json"
    comp = json.loads(path.read_text()) if path.is_file() else {}
    marks = {(r["scenario"], r["config"]): mark(r["verdict"], str(r.get("reason") or ""))
             for r in comp.get("recommendation_evidence", []) if "verdict" in r}
    health = {r["run_id"]: (r["health"], r.get("health_reason") or "") for r in comp.get("health", {}).get("not_ok", [])}
    return marks, health


def _style() -> str:
    from benchlib.analysis.charts import VERDICT  # altair: only where an index is written
    return ("body{font-family:sans-serif;margin:2em;max-width:110em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}th{background:#eee}"
            "blockquote{border-left:4px solid #ccc;margin:1em 0;padding:0 1em}figure{margin:1em 0}"
            "figure img{max-width:100%}figcaption{color:#555;font-size:90%}"
            + "".join(f"td.v-{v.replace(' ', '-')}{{border-left:6px solid {c}}}" for v, c in VERDICT.items()))


def _index_html(study_dir: Path, rows: list, analysis: list[Path], figures: dict, compacted: bool = False) -> str:
    from html import escape
    html_dir = study_dir / "html"
    marks, health = _verdicts(study_dir)
    trs = []
    for item, rec, target in rows:
        if rec is not None:
            m = rec["metrics"]
            shared = shared_gpu(rec)  # timed against its neighbours on the GPU: no speed of its own
            verdict = marks.get((rec.get("scenario"), rec.get("config")), "")
            state, why = health.get(item.run_id, (rec["status"], rec.get("reason")))
            cells = [state, fmt(m.get("quality")), m.get("quality_name", ""), baseline_cell(m),
                     fmt(None if shared else m.get("throughput")),
                     "(shared GPU)" if shared else m.get("throughput_unit", ""), fmt(m.get("memory")),
                     last_line(why)[:120]]
        else:
            verdict, cells = "", ["no record", "", "", "", "", "", "", ""]
        link = (f'<a href="{escape(os.path.relpath(target, html_dir))}">{escape(item.run_id)}</a>'
                if target.exists() else escape(item.run_id))
        kind = verdict.split("(")[0].replace(" ", "-")
        trs.append("<tr><td>" + link + f'</td><td class="v-{kind}">{escape(verdict)}</td>'
                   + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
    links = "".join(f'<li><a href="{escape(str(a.relative_to(html_dir)))}">{escape(a.stem)}</a></li>'
                    for a in analysis if a.exists())
    n_pages = sum(t.exists() for _, _, t in rows)
    if compacted:
        intro = ("The study as committed (<code>dtype-bench compact</code>): every run's record is a line of "
                 "<code>records.jsonl.gz</code>, its step log rows of <code>steps.parquet</code>; "
                 f"{n_pages} example run(s) keep their executed notebook, linked below as a page.")
    else:
        intro = ("Every run's executed notebook is linked as a page" if n_pages == len(rows) else
                 f"{n_pages} of {len(rows)} runs have a page (more than {RUN_PAGES_MAX} runs: no page per run)") + \
                "; records in <code>runs/&lt;scenario&gt;/&lt;config&gt;/seed&lt;k&gt;/result.json</code>."
    answer, speed = _answer_html(study_dir, figures)
    where = figures.get("where_configs_break", "")
    if "quality_vs_throughput" in figures and figures["quality_vs_throughput"] not in speed:
        where += figures["quality_vs_throughput"]  # quality per config, where the runs timed nothing
    rest = "".join(f for n, f in figures.items() if n not in ("where_configs_break", "quality_vs_throughput"))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>dtype-bench: {escape(study_dir.name)}</title>
<style>{_style()}</style></head><body>
<h1>Study {escape(study_dir.name)}</h1>
<h2>Answer</h2>{answer}
<h2>Where each config breaks</h2>{where or "<p>No chart.</p>"}
<h2>Speed and memory</h2>{speed or "<p>No chart.</p>"}
<h2>Detail</h2><p>{intro}</p>{rest}
{'<h3>Analysis</h3><ul>' + links + '</ul>' if links else ''}
<h3>Runs</h3><p>verdict: the comparison's for the run's (scenario, config), as in the answer; health: the run's own.</p>
<table><tr><th>run</th><th>verdict</th><th>health</th><th>quality</th><th>metric</th><th>trivial baseline</th>
<th>throughput</th><th>unit</th><th>memory GiB</th><th>reason</th></tr>{''.join(trs)}</table></body></html>"""


def baseline_cell(m: dict) -> str:
    """The trivial baseline's value and name, and whether the run beat it ('' where none)."""
    if m.get("baseline/quality") is None:
        return ""
    beat = {True: "beaten", False: "not beaten"}.get(m.get("quality/beats_baseline"), "")
    return f"{fmt(m['baseline/quality'])} {str(m.get('baseline/name') or '').replace('_', '-')}" + (f" ({beat})" if beat else "")
