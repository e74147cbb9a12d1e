"""Static HTML of a study: every executed notebook as a page that reads offline inside the
study folder (PNG charts inline, progress-bar redraws collapsed; an analysis page links the
chart files of the study folder it shows rather than repeating them) and an ``index.html`` with
the overview charts (linked) and every run's status and headline numbers. ``dtype-bench sweep``
calls ``export_study_html`` after the runs; ``dtype-bench compact`` again on the compacted
layout (records in ``records.jsonl.gz``, a few example run notebooks, no page per run).
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from benchlib.core.records import shared_gpu


def export_html(notebook: Path, html: Path, css_root: Path | None = None, charts: dict[str, Path] | None = None) -> None:
    """Static HTML that reads offline: PNG charts inline, progress-bar redraws collapsed. With
    ``css_root``, the page style (~260 kB, the same on every page) is written once there as
    ``notebook.css`` and linked, rather than repeated in each page of a study. With ``charts``
    (``saved_charts``), an SVG output that is one of the study's chart files byte for byte
    links that file instead of repeating it (the analysis notebooks show each chart they save)."""
    import nbformat
    from nbconvert import HTMLExporter
    nb = nbformat.read(str(notebook), as_version=4)
    for cell in nb.cells:
        if "outputs" in cell:
            cell["outputs"] = coalesce_streams(cell["outputs"])
    if charts:
        _link_saved_charts(nb, html, charts)
    _relink_charts(nb, notebook, html)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    html.parent.mkdir(parents=True, exist_ok=True)
    body = with_alt_text(body, _png_titles(nb))
    if css_root is not None:
        body = _shared_css(body, css_root, html)
    html.write_text(body)


def _shared_css(body: str, css_root: Path, html: Path) -> str:
    """Move the page's ``<style>`` blocks, each distinct one once, to
    ``css_root/notebook-<hash>.css`` (named by its content: written once for all the pages that
    share it) and link it relatively."""
    import hashlib
    import os
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
    """sha256 of each SVG chart file of a study (``<scenario>/plots``, ``comparison/plots``,
    ``overview/plots``; not its HTML) -> the file."""
    import hashlib
    html = study_dir / "html"
    return {hashlib.sha256(f.read_bytes()).hexdigest(): f for f in sorted(study_dir.rglob("*.svg"))
            if html not in f.parents}


def _link_saved_charts(nb, html: Path, charts: dict[str, Path]) -> int:
    """Each SVG output of ``nb`` that is a file of ``charts`` becomes an ``<img>`` linking that
    file, relative to the page ``html``, with the chart's title as its alternative text; how
    many. The SVG of a study's analysis pages was ~1.6 MB of the reference study's 2.2-MB page."""
    import hashlib
    from html import escape
    n = 0
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
            href = Path(os.path.relpath(target, html.parent)).as_posix()
            data["text/html"] = f'<a href="{escape(href)}"><img src="{escape(href)}" alt="{escape(alt)}"></a>'
            del data["image/svg+xml"]
            n += 1
    return n


CHART_LINK = "dtype-bench/chart"
"""Output metadata key of a chart shown by a link to its file (``chart_link``): the file's path
relative to the notebook's folder."""


def chart_link(target: Path, notebook: Path, alt: str) -> dict:
    """A display output that shows the chart file ``target`` from the notebook ``notebook`` by a
    relative link (JupyterLab resolves it beside the notebook; the HTML export rewrites it for
    the page's folder): a compacted study keeps each chart once, as its file."""
    from html import escape
    href = Path(os.path.relpath(target, notebook.parent)).as_posix()
    return {"output_type": "display_data", "metadata": {CHART_LINK: href},
            "data": {"text/html": f'<a href="{escape(href)}"><img src="{escape(href)}" alt="{escape(alt)}"></a>',
                     "text/plain": f"<chart: {alt}>"}}


def _relink_charts(nb, notebook: Path, html: Path) -> None:
    """The ``chart_link`` outputs of ``nb`` (read from ``notebook``) pointed at their file from
    the page ``html`` instead."""
    from html import escape, unescape
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            rel = (out.get("metadata") or {}).get(CHART_LINK)
            if not rel:
                continue
            href = Path(os.path.relpath(notebook.parent / rel, html.parent)).as_posix()
            m = re.search(r'alt="([^"]*)"', str((out.get("data") or {}).get("text/html") or ""))
            alt = unescape(m.group(1)) if m else Path(rel).stem.replace("_", " ")
            out["data"]["text/html"] = f'<a href="{escape(href)}"><img src="{escape(href)}" alt="{escape(alt)}"></a>'


def _png_titles(nb) -> dict[str, str]:
    """Alternative text for each PNG output, keyed by the start of its data: a chart's title
    (its text/plain is ``<chart: title>``), else the output's plain text."""
    titles = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "image/png" in data:
                text = str(data.get("text/plain") or "").strip()
                m = CHART_TEXT.match(text)
                titles[data["image/png"].strip()[:200]] = (m.group(1) if m else text) or "chart"
    return titles


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
    """Merge consecutive stdout/stderr chunks and keep what a terminal would show after
    each carriage return (a tqdm bar is dozens of redraws)."""
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
    """The overview charts of a study (``analysis.report.write_overview``, written under
    ``<study>/overview/plots``), or why there are none."""
    from benchlib.analysis.report import write_overview
    try:
        return write_overview(study_dir), ""
    except FileNotFoundError as e:  # no readable record yet
        return {}, str(e)
    except Exception as e:  # the overview must never cost the export: say why it is missing
        print(f"  overview failed: {type(e).__name__}: {e}", file=sys.stderr)
        return {}, f"the overview could not be drawn: {type(e).__name__}: {e}"


RUN_PAGES_MAX = 20
"""A study of more runs gets no HTML page per run: its index links each run's executed notebook
(which code-hosting sites and JupyterLab render) instead. A page repeats its notebook (~110 kB
each), and every tracked file travels with each GPU job under a 64 MiB limit: the 26 pages of
`executed/h200/quick` alone were 2.9 MB. A user's own small sweep still reads page by page."""


def export_study_html(study_dir: Path, items: list | None = None, analysis: list[Path] | None = None,
                      overview: bool | dict = True, css_root: Path | None = None, run_pages: bool = True) -> Path:
    """``<study>/html/``: every executed notebook as a page and ``index.html``, which opens
    with the study's overview charts (``overview``: True draws them from the records, a dict
    ``study_overview`` gives them as files, False: none, for a study of arms, whose reading is
    the scaling notebook), then links the analysis and every run (its page; above
    ``RUN_PAGES_MAX`` runs or without ``run_pages``, its notebook where there is one). ``items``
    (each with ``run_id``, ``notebook``, ``result``): the sweep's runs, by default every record's
    run; ``analysis``: by default the notebooks in ``<study>/analysis``; ``css_root``: where the
    pages' shared style sheet goes (default ``html/``)."""
    from benchlib.core.records import RECORDS_TABLE, load_records
    html_dir = study_dir / "html"
    css_root = css_root or html_dir
    records = {Path(r["_path"]).resolve(): r for r in load_records(study_dir)}
    items = record_items(study_dir, records.values()) if items is None else items
    analysis = sorted((study_dir / "analysis").glob("*.ipynb")) if analysis is None else analysis
    rows = []
    pages = run_pages and len(items) <= RUN_PAGES_MAX
    for item in items:
        rec = records.get(Path(item.result).resolve())
        target = html_dir / item.notebook.relative_to(study_dir).with_suffix(".html")
        if not pages:
            target.unlink(missing_ok=True)  # a page from when the study was smaller
            # a run whose notebook was not kept: its record, where it is a file of its own
            kept = item.notebook.exists() or not item.result.exists()
            rows.append((item, rec, item.notebook if kept else item.result))
            continue
        if item.notebook.exists() and (not target.exists() or target.stat().st_mtime < item.notebook.stat().st_mtime):
            try:
                export_html(item.notebook, target, css_root)
            except Exception as e:  # an unreadable half-written notebook: say so, go on
                print(f"  html export failed for {item.run_id}: {e}", file=sys.stderr)
        rows.append((item, rec, target))
    saved = saved_charts(study_dir)
    for nb in analysis:
        export_html(nb, html_dir / "analysis" / nb.with_suffix(".html").name, css_root, saved)
    index = html_dir / "index.html"
    index.parent.mkdir(parents=True, exist_ok=True)
    charts, why = (overview, "") if isinstance(overview, dict) else study_overview(study_dir) if overview else ({}, "")
    pages = [html_dir / "analysis" / nb.with_suffix(".html").name for nb in analysis]
    index.write_text(_index_html(study_dir.name, rows, pages, html_dir, _overview_html(charts, why, html_dir),
                                 compacted=(study_dir / RECORDS_TABLE).exists()))
    prune_css(css_root)
    return index


def record_items(study_dir: Path, records) -> list:
    """One item per record (``run_id``: its run folder below ``runs/``, or below the study;
    ``notebook``, ``result``), in the order of their folders: the runs of a study without the
    study file that planned them."""
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
    """Remove the shared ``notebook-<hash>.css`` files no page links any more (pages exported
    again with another nbconvert style moved to a new one; ~260 KB each); return them."""
    used = {m for page in html_dir.rglob("*.html") for m in re.findall(r"notebook-[0-9a-f]+\.css", page.read_text())}
    gone = [css for css in html_dir.glob("notebook-*.css") if css.name not in used]
    for css in gone:
        css.unlink()
    return gone


def _overview_html(charts: dict, why: str, html_dir: Path) -> str:
    """The overview section: each chart linked from its file (SVG where there is one), its title
    as the image's alternative text."""
    from html import escape
    if not charts:
        return f"<h2>Overview</h2><p>No overview: {escape(why)}</p>" if why else ""
    figs = []
    for name, (title, files) in charts.items():
        image = next((f for f in sorted(files, key=lambda f: f.suffix != ".svg") if f.suffix in (".svg", ".png")), None)
        if image is None:
            continue
        href = escape(Path(os.path.relpath(image, html_dir)).as_posix())
        figs.append(f'<figure id="{escape(name)}"><a href="{href}"><img alt="{escape(title)}" src="{href}"></a>'
                    f"<figcaption>{escape(name.replace('_', ' '))}</figcaption></figure>")
    return ("<h2>Overview</h2><p>Read these first: quality against throughput per scenario (the recommended "
            "config ringed), where each configuration breaks, and what flips between tasks. The analysis "
            "notebooks below have the detail and the evidence.</p>" + "".join(figs))


def _index_html(name: str, rows: list, analysis: list[Path], html_dir: Path, overview: str = "",
                compacted: bool = False) -> str:
    from html import escape
    trs = []
    for item, rec, target in rows:
        if rec is not None:
            m = rec["metrics"]
            shared = shared_gpu(rec)  # timed against its neighbours on the GPU: no speed of its own
            cells = [rec["status"], fmt(m.get("quality")), m.get("quality_name", ""), baseline_cell(m),
                     fmt(None if shared else m.get("throughput")),
                     "(shared GPU)" if shared else m.get("throughput_unit", ""), fmt(m.get("memory")),
                     last_line(rec.get("reason"))[:120]]
        else:
            cells = ["no record", "", "", "", "", "", "", ""]
        link = (f'<a href="{escape(os.path.relpath(target, html_dir))}">{escape(item.run_id)}</a>'
                if target is not None and target.exists() else escape(item.run_id))
        trs.append("<tr><td>" + link + "</td>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
    links = "".join(f'<li><a href="{escape(str(a.relative_to(html_dir)))}">{escape(a.stem)}</a></li>'
                    for a in analysis if a.exists())
    if compacted:
        intro = ("The study as committed (<code>dtype-bench compact</code>): every run's record is a line of "
                 "<code>records.jsonl.gz</code>, its step log rows of <code>steps.parquet</code>; a few runs keep "
                 "their executed notebook as examples (linked below).")
    else:
        pages_note = ("" if all(t.suffix == ".html" for _, _, t in rows) else
                      f" (more than {RUN_PAGES_MAX} runs: each links its .ipynb, which code-hosting sites and "
                      f"JupyterLab render, rather than an HTML page of its own"
                      + ("; a run whose notebook was not kept links its record"
                         if any(t.suffix == ".json" for _, _, t in rows) else "") + ")")
        intro = (f"Every run's executed notebook{pages_note}; records in "
                 "<code>runs/&lt;scenario&gt;/&lt;config&gt;/seed&lt;k&gt;/result.json</code>.")
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>dtype-bench: {escape(name)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}th{{background:#eee}}
figure{{margin:1em 0}}figure img{{max-width:100%}}figcaption{{color:#555;font-size:90%}}</style></head><body>
<h1>Study {escape(name)}</h1><p>{intro}</p>
{overview}
{'<h2>Analysis</h2><ul>' + links + '</ul>' if links else ''}
<h2>Runs</h2><table><tr><th>run</th><th>status</th><th>quality</th><th>metric</th><th>trivial baseline</th>
<th>throughput</th><th>unit</th>
<th>memory GiB</th><th>reason</th></tr>{''.join(trs)}</table></body></html>"""


def baseline_cell(m: dict) -> str:
    """The trivial baseline's value of the headline quality, its name, and whether the run
    beat it ('' for records from before baselines)."""
    if m.get("baseline/quality") is None:
        return ""
    beat = {True: "beaten", False: "not beaten"}.get(m.get("quality/beats_baseline"), "")
    return f"{fmt(m['baseline/quality'])} {str(m.get('baseline/name') or '').replace('_', '-')}" + (f" ({beat})" if beat else "")


def fmt(v) -> str:
    """A number for a table cell: 4 significant digits, '-' when missing."""
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def last_line(text: str | None) -> str:
    """The last non-blank line of a text (a traceback's message)."""
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""
