"""A study's HTML index in a real browser (headless Chromium through Playwright): the overview
charts draw, carry their titles as alternative text, and the page logs no error. CI installs
Debian's chromium (.ci/run); elsewhere the test is skipped unless DTYPE_BENCH_BROWSER=required."""
import os
import shutil

import pytest
from conftest import REPO

from benchlib.study import sweep

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
    assert sweep.main([str(REPO / "params/quick.yaml"), "--out", str(root), "--analysis-only", "--no-analysis"]) == 0
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
        first_heading = page.eval_on_selector("h2", "e => e.textContent")
        browser.close()
    assert first_heading == "Overview"  # the first thing the index shows
    assert [f[0] for f in figures] == ["quality_vs_throughput", "where_configs_break", "flips"]
    assert all(width > 100 for _, _, width in figures), figures  # each image decoded and drawn
    assert all(alt and alt != "chart" for _, alt, _ in figures), figures
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
