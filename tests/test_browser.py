"""A study's HTML index in a real browser (headless Chromium through Playwright): the answer table
comes before any other table or chart and is the README's, the overview charts draw with their
titles as alternative text, run links open rendered pages, and the page logs no error. CI installs
Debian's chromium (.ci/run); elsewhere the test is skipped unless DTYPE_BENCH_BROWSER=required."""
import os
import shutil

import pytest
from conftest import REPO

from dtype_bench.study import sweep
from dtype_bench import findings_cmd

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
try:
    from playwright.sync_api import sync_playwright
except ImportError:
    sync_playwright = None
READY = bool(CHROMIUM and sync_playwright)
if not READY and os.environ.get("DTYPE_BENCH_BROWSER") == "required":
    raise RuntimeError("DTYPE_BENCH_BROWSER=required but no chromium or no playwright here")
pytestmark = pytest.mark.skipif(not READY, reason="needs chromium and playwright (CI installs both)")


def test_the_overview_page_draws_every_chart_with_its_title_and_no_error(tmp_path):
    # the committed GPU study, its HTML exported afresh by this code
    root = tmp_path / "h200"
    shutil.copytree(REPO / "executed/h200/quick", root / "quick", ignore=shutil.ignore_patterns("html", "overview"))
    assert sweep.main([str(REPO / "params/quick.yaml"), "--out", str(root), "--analysis_only", "--no_analysis"]) == 0
    index = root / "quick/html/index.html"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(index.as_uri())
        page.wait_for_load_state("load")
        figures = page.eval_on_selector_all(
            "figure", "els => els.map(f => [f.id, f.querySelector('img').alt, f.querySelector('img').naturalWidth])")
        headings = page.eval_on_selector_all("h2", "els => els.map(e => e.textContent)")
        browser.close()
    assert headings == ["Answer", "Where each config breaks", "Speed and memory", "Detail"]
    assert [f[0] for f in figures] == ["where_configs_break", "quality_vs_throughput", "flips"]
    assert all(width > 100 for _, _, width in figures), figures  # each image decoded and drawn
    assert all(alt and alt != "chart" for _, alt, _ in figures), figures
    assert errors == []


def _answer_of(*studies: str) -> list[list[str]]:
    """The answer table `dtype-bench findings` writes from these studies' comparisons (the first's
    quality, the speed study's speed), as the README shows one: a list of cells per row, header first."""
    args = [str(REPO / "executed/h100" / s / "comparison/comparison.json") for s in studies]
    lines = findings_cmd.generate(findings_cmd.parser().parse_args(args)).splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| config | A |"))
    rows = lines[head:next(i for i in range(head, len(lines)) if not lines[i].startswith("|"))]
    return [[c.strip().replace("**", "").replace("<br>", " ") for c in ln.strip("|").split("|")]
            for k, ln in enumerate(rows) if k != 1]


def test_the_reference_report_opens_with_its_answer_table_and_its_runs_open_as_pages(tmp_path):
    """The committed reference study compacted again by this code (as `dtype-bench compact` does
    before a commit): the first table or chart of its index is the answer table, cell for cell the
    one `dtype-bench findings` writes from the study (and its speed study) for a README; then where each config breaks, speed and memory, the detail. No link opens a
    notebook's raw JSON: each run link opens a rendered page."""
    from dtype_bench.study import compact
    for name in ("reference", "reference_speed"):  # the speed study beside it gives the answer its speed
        shutil.copytree(REPO / "executed/h100" / name, tmp_path / "h100" / name)
    compact.compact(tmp_path / "h100/reference", tmp_path)
    index = tmp_path / "h100/reference/html/index.html"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(index.as_uri())
        page.wait_for_load_state("load")
        first = page.evaluate("() => { const e = document.querySelector('table, figure, img, svg, canvas');"
                              " return e.tagName.toLowerCase() + '#' + e.id }")
        order = page.evaluate("""() => [...document.querySelectorAll('h2, table#answer, figure')].map(
            e => e.tagName === 'H2' ? e.textContent : e.id)""")
        shown = page.eval_on_selector_all("table#answer tr", """rows => rows.map(r => [...r.children].map(
            c => c.innerText.replace(/\s+/g, ' ').trim()))""")
        hrefs = page.eval_on_selector_all("a", "els => els.map(a => a.getAttribute('href'))")
        runs = page.eval_on_selector_all("table:last-of-type a", "els => els.map(a => a.href)")
        pages = []
        for href in runs:
            page.goto(href)
            pages.append((page.evaluate("() => document.contentType"), page.locator("main .highlight").count() > 0))
        browser.close()
    assert first == "table#answer"
    assert order[:4] == ["Answer", "answer", "Where each config breaks", "where_configs_break"]
    assert order.index("Speed and memory") < order.index("Detail")
    assert shown == _answer_of("reference", "reference_speed")
    assert not [h for h in hrefs if h and h.endswith(".ipynb")]
    assert runs and all(h.endswith(".html") for h in runs)  # the kept example notebooks, rendered
    assert pages == [("text/html", True)] * len(runs), pages  # a page of the notebook's cells, its code shown
    assert errors == []


def test_a_training_notebook_run_all_in_jupyterlab_draws_an_interactive_chart(tmp_path):
    """JupyterLab (headless Chromium), Run All on a copy of the LM training notebook at its
    defaults (tiny, CPU): its chart is a Vega embed (interactive), not the PNG fallback."""
    import socket
    import subprocess
    import sys
    import time
    shutil.copytree(REPO / "notebooks", tmp_path / "notebooks")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    server = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--allow-root",
                               "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={tmp_path}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        for _ in range(120):
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/lab/tree/notebooks/01_train_lm.ipynb")
            page.wait_for_selector(".jp-Notebook", timeout=90_000)
            time.sleep(3)  # the kernel starts
            page.keyboard.press("Escape")
            page.keyboard.press("Control+Shift+C")  # the command palette
            page.keyboard.type("Run All Cells")
            page.keyboard.press("Enter")
            page.wait_for_selector(".jp-OutputArea-output .vega-embed", timeout=300_000)
            drawn = page.eval_on_selector_all(".jp-OutputArea-output .vega-embed svg, "
                                              ".jp-OutputArea-output .vega-embed canvas", "els => els.length")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert drawn >= 1  # JupyterLab's Vega renderer drew it (its PNG fallback has no .vega-embed)
