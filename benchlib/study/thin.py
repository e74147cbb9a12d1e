"""Thinning one file of a study, for ``dtype-bench compact`` (``benchlib.study.compact``); each
function changes nothing the second time.

- ``thin_notebook``: an executed notebook's chart outputs with a Vega-Lite spec (a copy of the
  run's step log) become the SVG rendered from it (binned past ``notebook.MAX_POINTS`` steps, as
  new notebooks draw it), an output's plain-text copy beside an HTML or Markdown form goes, and a
  progress bar's redraws become its last state; nothing else changes (the record output, the
  other text, the cells).
- ``kept_rows``: the rows of a step log that a compacted study keeps (``records.STEPS_TABLE``).
- ``thin_log``: a run's log keeps each progress bar's last state and its last ``KEEP_LOG_LINES`` lines.
"""
from __future__ import annotations

from pathlib import Path


def _spec_key(data: dict) -> str | None:
    return next((k for k in data if k.startswith("application/vnd.vegalite")), None)


def _binned(spec: dict) -> dict:
    """A run notebook's curves chart drawn again from at most ``notebook.MAX_POINTS`` binned
    points per curve when its spec holds more (a run of thousands of steps); any other spec
    as it is."""
    import pandas as pd

    from benchlib.study.notebook import MAX_POINTS, bin_curves, curves_chart
    rows = [r for values in (spec.get("datasets") or {}).values() for r in values]
    frame = pd.DataFrame(rows)
    if not {"step", "metric", "value"} <= set(frame) or frame.groupby("metric").size().max() <= MAX_POINTS:
        return spec
    title = spec.get("title")
    title = title.get("text", "") if isinstance(title, dict) else title or ""
    frame = frame.assign(run=frame["run"] if "run" in frame else "")
    return curves_chart(bin_curves(frame), title=title).to_dict(validate=False)


RICHER = {"text/html", "text/markdown"}
"""An output holding one of these drops its ``text/plain`` copy: JupyterLab, nbconvert's HTML
and code-hosting sites show the richer form (a table's plain-text copy was ~2 MiB of the
committed notebooks). A chart keeps its one-line text, ``<chart: title>``: the HTML export's
alternative text for the image."""


def thin_notebook(path: Path) -> tuple[int, int]:
    """Rewrite one executed notebook's chart outputs as SVG, drop the plain-text copies of
    richer outputs and collapse its progress-bar redraws; (bytes before, bytes after)."""
    import nbformat

    from benchlib.analysis.charts import render
    from benchlib.study.html_export import CHART_LINK, coalesce_streams
    before = path.stat().st_size
    nb = nbformat.read(str(path), as_version=4)
    changed = False
    for cell in nb.cells:
        if "outputs" in cell:  # a progress bar's redraws: what a terminal shows after them
            merged = coalesce_streams([dict(o) for o in cell["outputs"]])
            if [o.get("text") for o in merged] != [o.get("text") for o in cell["outputs"]]:
                cell["outputs"], changed = [nbformat.from_dict(o) for o in merged], True
        for out in cell.get("outputs", []):
            data = out.get("data") or {}
            if CHART_LINK in (out.get("metadata") or {}):  # a chart shown by its file: its text is its title
                continue
            if "text/plain" in data and RICHER & set(data):  # every reader shows the richer form
                del data["text/plain"]
                changed = True
            key = _spec_key(data)
            if key is None:
                continue
            svg = render(_binned(dict(data[key])), "svg").decode()
            out["data"] = {"text/plain": data.get("text/plain", "<chart>"), "image/svg+xml": svg}
            out.get("metadata", {}).pop("image/png", None)
            changed = True
    if changed:
        nbformat.write(nb, str(path))
    return before, path.stat().st_size


KEEP_ROWS = 500
"""A compacted step log keeps at most this many plain (step, loss, grad_norm) rows, evenly
spaced, and every row that holds more (the interval rows with the forensic counters and the
timing, evaluations, non-finite losses), the last step and the lowest loss (the analysis bins
each scenario's curves to at most 120 points, ~4 of these rows a bin at 4,000 steps; the
scaling analysis reads the final and the best loss)."""


def kept_rows(rows: list[dict], keep: int = KEEP_ROWS) -> list[dict]:
    """The rows ``KEEP_ROWS`` says a compacted step log keeps, in their order."""
    import math
    plain = [r for r in rows if set(r) <= {"step", "loss", "grad_norm"}
             and all(isinstance(v, (int, float)) and math.isfinite(v) for v in r.values())]
    every = max(1, math.ceil(len(plain) / keep))
    best = min((r for r in plain if "loss" in r), key=lambda r: r["loss"], default=None)
    drop = {id(r) for i, r in enumerate(plain) if i % every and r is not rows[-1] and r is not best}
    return [r for r in rows if id(r) not in drop]


KEEP_LOG_LINES = 200
"""A run log's lines kept by ``thin_log``: the end, where a run's last state and any traceback are."""


def thin_log(path: Path, keep: int = KEEP_LOG_LINES) -> tuple[int, int]:
    """Each carriage-returned progress line reduced to its last state, the last ``keep`` lines
    kept: (bytes before, after). Runs before 2026-11-24 logged every redraw of their bar (up to
    250 KB a run)."""
    text = path.read_bytes().decode(errors="replace")  # read_text would turn each \r into a line
    lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]  # splitlines() would split at \r too
    lines = [line for line in lines if line.strip()][-keep:]
    out = "\n".join(lines) + ("\n" if lines else "")
    if out != text:
        path.write_bytes(out.encode())
    return len(text.encode()), len(out.encode())
