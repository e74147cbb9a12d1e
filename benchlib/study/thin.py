"""``dtype-bench thin STUDY_DIR``: make a study's executed run notebooks small enough to commit
by the hundred. A run notebook's curves chart used to carry its Vega-Lite spec (a copy of the
run's ``steps.jsonl``) and a PNG; since then it is written as one SVG (``notebook.show_chart``),
and this rewrites older notebooks the same way: each chart output with a spec becomes the SVG
rendered from that spec, an output's plain-text copy beside an HTML or Markdown form goes, and a progress bar's redraws become its last state; nothing else changes (the
record output, the other text, the cells); a curve of more than
``notebook.MAX_POINTS`` steps is drawn binned, as new notebooks draw it. Each run's
``steps.jsonl`` becomes ``steps.jsonl.gz`` with at most ``KEEP_ROWS`` evenly spaced plain rows
and every richer row (what the analysis reads: its curves are binned to 120 points). Then
``dtype-bench sweep <study file> --out <root> --analysis-only`` re-exports the HTML pages of
the notebooks it changed. A run's ``run.log`` (a run without a notebook, ``cellrun``) keeps
each progress bar's last state and its last ``KEEP_LOG_LINES`` lines. Running it twice changes
nothing the second time.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from benchlib.core.errors import UserError


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
    from benchlib.study.html_export import coalesce_streams
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
"""A committed step log keeps at most this many plain (step, loss, grad_norm) rows, evenly
spaced, and every row that holds more (the interval rows with the forensic counters and the
timing, evaluations, non-finite losses, the last step)."""


def thin_steps(path: Path, keep: int = KEEP_ROWS) -> tuple[int, int]:
    """Replace a run's ``steps.jsonl`` by ``steps.jsonl.gz``, thinned as ``KEEP_ROWS`` says;
    values unchanged. A ``steps.jsonl.gz`` is thinned in place, and left as it is (not even
    recompressed) when it holds no more plain rows than that. (bytes before, bytes after)."""
    import gzip
    import json
    import math

    from benchlib.core.records import read_steps
    before = path.stat().st_size
    rows = read_steps(path)
    plain = [r for r in rows if set(r) <= {"step", "loss", "grad_norm"}
             and all(isinstance(v, (int, float)) and math.isfinite(v) for v in r.values())]
    every = max(1, math.ceil(len(plain) / keep))
    drop = {id(r) for i, r in enumerate(plain) if i % every and r is not rows[-1]}
    zipped = path.suffix == ".gz"
    if zipped and len(plain) <= keep + 1:  # thinned already: at most keep rows, and the last
        return before, before
    out = path if zipped else path.with_name(path.name + ".gz")
    tmp = out.with_name(out.name + ".tmp")
    # no name and no time in the gzip header: the same rows give the same bytes, so a log that
    # comes back from a GPU host a second time (a warm host keeps its uncompressed copy) and is
    # thinned again leaves git nothing to commit
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as z:
        z.write("".join(json.dumps(r) + "\n" for r in rows if id(r) not in drop).encode())
    tmp.replace(out)
    if not zipped:
        path.unlink()
    return before, out.stat().st_size


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


def thin_study(study_dir: Path) -> tuple[int, int, int]:
    """Thin every run notebook and step log under ``study_dir/runs`` (and its pretrain folder):
    (files changed, bytes before, after)."""
    from benchlib.analysis.charts import renderer_available
    if not renderer_available():
        raise UserError("thin renders SVG with vl-convert, which is not installed: pip install vl-convert-python")
    n = total_before = total_after = 0
    folders = [study_dir / "runs", study_dir.with_name(study_dir.name + ".pretrain")]
    for f in folders:
        for nb in sorted(f.rglob("*.ipynb")):
            before, after = thin_notebook(nb)
            n += before != after
            total_before, total_after = total_before + before, total_after + after
        for log in sorted(f.rglob("steps.jsonl")):
            before, after = thin_steps(log)
            n, total_before, total_after = n + 1, total_before + before, total_after + after
        for log in sorted(f.rglob("run.log")):
            before, after = thin_log(log)
            n, total_before, total_after = n + (before != after), total_before + before, total_after + after
    return n, total_before, total_after


def drop_notebooks(study_dir: Path, keep_seeds: set[int]) -> tuple[int, int]:
    """Remove the run notebooks (``runs/<scenario>/<config>/seed<k>.ipynb``) of seeds not in
    ``keep_seeds`` whose run has a finished record beside them: the record, the step log and
    papermill's log stay, and are what the analysis reads. A run without a finished record
    keeps its notebook (it may be all there is of a failure). (notebooks removed, bytes)."""
    from benchlib.core.records import FINISHED, CorruptRecord, read_record
    n = size = 0
    for nb in sorted((study_dir / "runs").rglob("seed*.ipynb")):
        seed = nb.stem[len("seed"):]
        if not seed.isdigit() or int(seed) in keep_seeds:
            continue
        try:
            finished = read_record(nb.with_suffix("") / "result.json")["status"] in FINISHED
        except CorruptRecord:
            finished = False
        if finished:
            n, size = n + 1, size + nb.stat().st_size
            nb.unlink()
    return n, size


def _seeds(text: str) -> set[int]:
    try:
        return {int(s) for s in text.split(",") if s.strip()}
    except ValueError:
        raise UserError(f"--notebook-seeds {text!r}: expected seeds such as 0 or 0,1") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dtype-bench thin", description=__doc__.split("\n\n")[0])
    p.add_argument("study_dir", help="a study folder, e.g. executed/h200/quick")
    p.add_argument("--notebook-seeds", metavar="SEEDS", default=None,
                   help="keep the run notebooks of these seeds only (e.g. 0); the other seeds' runs keep their "
                        "record and logs (for studies of hundreds of runs; see drop_notebooks)")
    p.add_argument("--step-logs-only", action="store_true",
                   help="thin every steps.jsonl[.gz] under the folder and nothing else: run folders that are not a "
                        "study's, such as docs/calibration/<session>/")
    ns = p.parse_args(argv)
    study = Path(ns.study_dir)
    if ns.step_logs_only:
        logs = sorted([*study.rglob("steps.jsonl"), *study.rglob("steps.jsonl.gz")])
        if not logs:
            raise UserError(f"{study}: no steps.jsonl or steps.jsonl.gz below it")
        sizes = [thin_steps(log) for log in logs]
        changed = sum(b != a for b, a in sizes)
        print(f"{study}: {changed} of {len(logs)} step logs thinned, {sum(b for b, _ in sizes) / 2**20:.1f} MiB -> "
              f"{sum(a for _, a in sizes) / 2**20:.1f} MiB")
        return 0
    if not (study / "runs").is_dir():
        raise UserError(f"{study}: no runs/ folder: not a study written by dtype-bench sweep")
    keep = _seeds(ns.notebook_seeds) if ns.notebook_seeds is not None else None
    n, before, after = thin_study(study)
    print(f"{study}: {n} run notebooks and step logs rewritten, {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB; "
          f"re-export their HTML with `dtype-bench sweep <study file> --out {study.parent} --analysis-only`")
    if keep is not None:
        k, size = drop_notebooks(study, keep)
        print(f"{study}: {k} run notebooks of seeds other than {', '.join(map(str, sorted(keep)))} removed "
              f"({size / 2**20:.1f} MiB); their records and logs stay")
    return 0
