"""``dtype-bench compact FOLDER...``: a study folder as it is committed, small enough to travel.

Compacting keeps what the analysis reads and one copy of everything else: the records in one
table (``records.jsonl.gz``), the step logs thinned in another (``steps.parquet``; rank logs
only in studies with arms), one example run notebook per (scenario, config) and arm (``--examples``)
and every notebook of a run without a finished record (the logs of finished runs and analysis
notebooks go), each chart once as a file that the analysis notebooks link, and one HTML report
whose style sheet lies once in ``--root``. ``<root>/README.md`` is then written again where this
command wrote it before (or with ``--readme``). The sweep refuses a compacted study but for
``--analysis_only``; ``--expand`` writes its records back as files, and the sweep resumes it.
Compacting twice changes nothing the second time.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from benchlib.analysis.svg import lean_svg as lean_svg_text
from benchlib.core.argparser import ArgumentParser
from benchlib.core.errors import UserError
from benchlib.core.records import (FINISHED, KEEP_ROWS, RECORDS_TABLE, SIDECAR, STAGE_SUFFIX, STEPS_FILES,  # noqa: F401
                                   find_records, kept_rows, load_records, read_table, write_record, write_table)

CHART_SUFFIXES = (".svg", ".png", ".vl.json")
"""A chart's files, in the order one is kept (the Vega-Lite spec only where there is no image)."""
RUN_LOGS = ("papermill.log", "run.log", "cell.log")


@dataclass
class Compacted:
    folder: Path
    before: int
    after: int = 0
    counts: dict = field(default_factory=dict)

    def line(self) -> str:
        what = ", ".join(f"{v} {k}" for k, v in self.counts.items() if v)
        return f"{self.folder}: {_mib(self.before)} -> {_mib(self.after)} ({what or 'nothing to change'})"


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def compact(folder: Path, root: Path, examples: int = 1) -> Compacted:
    """Compact one study (or pretrain, or measurement) folder below ``root`` in place."""
    folder = Path(folder)
    records = load_records(folder)
    if not records:
        raise UserError(f"{folder}: no result.json and no {RECORDS_TABLE} below it: not a folder of runs")
    if stale := stale_notebooks({Path(r["_path"]).parent: r for r in records}):
        raise UserError(stale[0] + (f" (and {len(stale) - 1} more)" if len(stale) > 1 else ""))
    done = Compacted(folder, folder_size(folder))
    files = find_records(folder)
    if files:
        write_table(folder / RECORDS_TABLE, records)
        for f in files:  # the table holds each record with its sidecar laid over it
            f.unlink()
            f.with_name(SIDECAR).unlink(missing_ok=True)
    runs = {Path(r["_path"]).parent: r for r in records}
    done.counts["records in the table"] = len(records) if files else 0
    done.counts["step logs into the steps table"] = _steps_into_table(folder)
    done.counts["logs removed"] = _drop_logs(folder, runs)
    done.counts["run notebooks removed"] = _keep_examples(folder, runs, examples)
    overview, removed, linked = _charts_once(folder)
    done.counts["chart files removed"], done.counts["charts linked"] = removed, linked
    for d in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(d.iterdir()):  # a run folder whose files are all in the tables now
            d.rmdir()
    if (folder / "html").is_dir():  # a study of cell runs alone has no runs/ left, but its report
        _export_html(folder, root, overview)
    done.after = folder_size(folder)
    return done


NOTEBOOK_SLACK_S = 60
"""How long before its record's date a run notebook may end (clocks of one host; a notebook ends after
its run starts, and a replayed one is rendered later still)."""


def stale_notebooks(runs: dict[Path, dict]) -> list[str]:
    """Run notebooks (``<run>.ipynb`` beside the run folder) that ended before their run's record was
    made: an earlier run's notebook beside a later record. A GPU job's copy of the tree brings the
    committed notebook back over the one the job wrote, so of a study rerun over several calls only
    the archive of the call that ran a notebook holds it. One line each, saying what to do."""
    out = []
    for run, rec in sorted(runs.items()):
        notebook = run.with_suffix(".ipynb")
        if not notebook.is_file():
            continue
        try:
            end = _utc(json.loads(notebook.read_text())["metadata"]["papermill"]["end_time"])
            made = _utc((rec.get("env") or {})["date"])
        except (KeyError, TypeError, ValueError):  # not a papermill notebook, or a record without a date
            continue
        if (made - end).total_seconds() > NOTEBOOK_SLACK_S:
            out.append(f"{notebook}: it ran until {end:%Y-%m-%d %H:%M} UTC, before its record was made "
                       f"({made:%Y-%m-%d %H:%M}): an earlier run's notebook; put this run's in its place "
                       f"(`dtype-bench unpack` the archive of the call that ran it) or delete it, then compact again")
    return out


def _utc(text: str) -> datetime:
    t = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _steps_into_table(folder: Path) -> int:
    """Move (and count) every run's step log below ``folder`` into its steps table, thinned."""
    import json

    from benchlib.core.records import STEPS_TABLE, read_steps, read_steps_table, write_steps_table
    table = folder / STEPS_TABLE
    before = read_steps_table(table) if table.exists() else {}
    files = sorted(p for n in STEPS_FILES for p in folder.rglob(n) if "html" not in p.relative_to(folder).parts)
    logs = {**before, **{f.parent.relative_to(folder).as_posix(): read_steps(f) for f in files}}
    logs = {run: kept_rows(rows) for run, rows in logs.items() if rows}
    if logs and json.dumps(logs, sort_keys=True) != json.dumps(before, sort_keys=True):
        write_steps_table(table, logs)
    for f in files:
        f.unlink()
    return len(files)


def _drop_logs(folder: Path, runs: dict) -> int:
    """Remove the logs of finished runs (their rank logs unless the study has arms, which the
    scaling analysis reads) and of the analysis notebooks; thin those of unfinished runs."""
    arms = any(r.is_relative_to(folder / "runs") and len(r.relative_to(folder / "runs").parts) == 4 for r in runs)
    n = 0
    for run, rec in runs.items():
        finished = rec["status"] in FINISHED
        logs = [run / name for name in RUN_LOGS] + ([] if arms else sorted(run.glob("rank*.jsonl")))
        for log in (p for p in logs if p.exists()):
            if finished:
                log.unlink()
                n += 1
            elif log.suffix == ".log":
                thin_log(log)
    for log in sorted((folder / "analysis").glob("*.log")):
        if log.with_suffix(".ipynb").exists():
            log.unlink()
            n += 1
    return n


def _keep_examples(folder: Path, runs: dict, examples: int) -> int:
    """Keep ``examples`` run notebooks per (arm, scenario, config) (ok first, then the lowest seed),
    so a reader can open how each cell of the answer was made, and those of runs without a
    finished record; remove (and count) the others."""
    notebooks = {run.with_suffix(".ipynb"): rec for run, rec in runs.items() if run.with_suffix(".ipynb").exists()}
    ranked = sorted(notebooks, key=lambda nb: (notebooks[nb]["status"] != "ok", notebooks[nb]["seed"], nb.parts))
    kept, shown = [], Counter()
    for nb in ranked:  # a notebook's folder is its cell's: runs/[<arm>/]<scenario>/<config>/seed<k>.ipynb
        if notebooks[nb]["status"] not in FINISHED or shown[nb.parent] < examples:
            shown[nb.parent] += notebooks[nb]["status"] in FINISHED
            kept.append(nb)
    for nb in kept:
        thin_notebook(nb)
    gone = [nb for nb in notebooks if nb not in kept]
    for nb in gone:
        nb.unlink()
    return len(gone)


def _chart_files(folder: Path) -> dict[tuple[Path, str], list[Path]]:
    """The study's chart files outside html/ and runs/, by (folder, stem), in ``CHART_SUFFIXES`` order."""
    groups: dict[tuple[Path, str], list[Path]] = {}
    skip = {folder / "html", folder / "runs"}
    for f in sorted(folder.rglob("*")):
        suffix = next((s for s in CHART_SUFFIXES if f.name.endswith(s)), None)
        if suffix and f.is_file() and not any(d == f or d in f.parents for d in skip):
            groups.setdefault((f.parent, f.name[:-len(suffix)]), []).append(f)
    return {k: sorted(v, key=lambda f: next(i for i, s in enumerate(CHART_SUFFIXES) if f.name.endswith(s)))
            for k, v in groups.items()}


def _charts_once(folder: Path) -> tuple[dict, int, int]:
    """Keep one file per chart and one of byte-identical charts; each analysis notebook output
    that is a chart file becomes a link to the file kept. Returns the overview charts (name ->
    (title, [file])) for the HTML index, the files removed and the outputs linked."""
    groups = _chart_files(folder)
    kept: dict[str, Path] = {}  # content hash -> the file kept
    target: dict[Path, Path] = {}  # every chart file -> the file kept for it
    for files in groups.values():
        first = files[0]
        digest = hashlib.sha256(first.read_bytes()).hexdigest()
        keep = kept.setdefault(digest, first)
        for f in files:
            target[f] = keep
    by_hash = {_digest(f): keep for f, keep in target.items()}
    linked = sum(_link_charts(nb, by_hash) for nb in sorted((folder / "analysis").glob("*.ipynb")))
    shown = _overview_shown(folder / "html" / "index.html")  # in the order the index showed them
    drawn = {stem: target[files[0]] for (parent, stem), files in groups.items()
             if parent == folder / "overview" / "plots"}
    files = {name: drawn.get(name) or target.get(f, f) for name, (_, f) in shown.items()
             if name in drawn or (f is not None and f.exists())}
    files.update({name: f for name, f in drawn.items() if name not in files})
    overview = {name: (shown.get(name, (name.replace("_", " "), None))[0], [f]) for name, f in files.items()}
    removed = 0
    for f, keep in target.items():
        if f != keep:
            f.unlink()
            removed += 1
        elif f.suffix == ".svg":
            lean_svg(f)
    for d in sorted({f.parent for f in target}, key=lambda p: -len(p.parts)):
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    return overview, removed, linked


def lean_svg(path: Path) -> None:
    """Rewrite a chart's SVG file lean (``svg.lean_svg``: one drawn before charts were lean)."""
    text = path.read_text()
    lean = lean_svg_text(text)
    if lean != text:
        path.write_text(lean)


def _digest(f: Path) -> str:
    """A chart file's content hash (a Vega-Lite spec's: ``_spec_digest``)."""
    if f.name.endswith(".vl.json"):
        import json
        try:
            return _spec_digest(json.loads(f.read_text()))
        except ValueError:  # not a spec after all: its bytes
            pass
    return hashlib.sha256(f.read_bytes()).hexdigest()


def _spec_digest(spec: dict) -> str:
    """A Vega-Lite spec's hash, its ``$schema`` left out (a notebook's output has none)."""
    import json
    canonical = json.dumps({k: v for k, v in spec.items() if k != "$schema"}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _link_charts(notebook: Path, by_hash: dict[str, Path]) -> int:
    """Replace (and count) each chart output of an analysis notebook that is one of the study's
    chart files (SVG, PNG or Vega-Lite spec) by a link to the file kept; then ``thin_notebook``."""
    import base64

    import nbformat

    from dtype_bench.study.html_export import CHART_TEXT, chart_link
    nb = nbformat.read(str(notebook), as_version=4)
    n = 0
    for cell in nb.cells:
        for i, out in enumerate(cell.get("outputs", [])):
            data = out.get("data") or {}
            svg, png = data.get("image/svg+xml"), data.get("image/png")
            spec = next((v for k, v in data.items() if k.startswith("application/vnd.vegalite")), None)
            raw = ("".join(svg) if isinstance(svg, list) else svg).encode() if svg else \
                base64.b64decode("".join(png) if isinstance(png, list) else png) if png else None
            digests = ([hashlib.sha256(raw).hexdigest()] if raw is not None else []) + \
                ([_spec_digest(dict(spec))] if isinstance(spec, dict) else [])  # a spec alone: shown without vl-convert
            file = next((by_hash[d] for d in digests if d in by_hash), None)
            if file is None:
                continue
            m = CHART_TEXT.match(str(data.get("text/plain") or "").strip())
            cell["outputs"][i] = nbformat.from_dict(chart_link(file, notebook, m.group(1) if m else file.stem))
            n += 1
    if n:
        nbformat.write(nb, str(notebook))
    thin_notebook(notebook)
    return n


def _overview_shown(index: Path) -> dict[str, tuple[str, Path | None]]:
    """The overview figures of an HTML index written before, by id: (title, file linked or None)."""
    if not index.exists():
        return {}
    from html import unescape
    found = re.finditer(r'<figure id="([^"]+)">(?:<a href="([^"]*)">)?<img alt="([^"]*)"', index.read_text())
    return {m.group(1): (unescape(m.group(3)), (index.parent / unescape(m.group(2))).resolve() if m.group(2) else None)
            for m in found}


def _export_html(folder: Path, root: Path, overview: dict) -> None:
    """The study's HTML again, from the compacted layout, its style sheet in ``root``."""
    from dtype_bench.study.html_export import export_study_html, prune_css
    html = folder / "html"
    shutil.rmtree(html / "runs", ignore_errors=True)
    for css in html.glob("notebook-*.css"):
        css.unlink()
    export_study_html(folder, overview=overview, css_root=root, run_pages=False)
    prune_css(root)


def expand(folder: Path) -> int:
    """Write (and count) a compacted folder's records back as ``result.json`` files (never over
    one that is there) and remove its table."""
    table = Path(folder) / RECORDS_TABLE
    if not table.exists():
        raise UserError(f"{folder}: no {RECORDS_TABLE}: not a compacted folder")
    n = 0
    for rec in read_table(table, strict=True):
        path = Path(rec["_path"])
        if not path.exists():
            write_record(path.parent, rec)
            n += 1
    table.unlink()
    return n


def main(argv: list[str] | None = None) -> int:
    import sys
    p = ArgumentParser(prog="dtype-bench compact", description=__doc__.split("\n\n")[0])
    p.add_argument("folders", type=Path, nargs="*", help="Study folders, e.g. executed/h100/reference "
                   "(and executed/h100/reference.pretrain).")
    p.add_argument("--root", type=Path, default=Path("executed"),
                   help="The folder of all studies: its README.md is written again, the HTML style sheet goes there "
                        "(default: executed).")
    p.add_argument("--examples", type=int, default=1, metavar="N",
                   help="Run notebooks kept per (arm, scenario, config) (default: 1).")
    p.add_argument("--readme", action="store_true",
                   help="Write <root>/README.md from the studies there (without folders: only that); without it, the "
                        "README is written again where this command wrote it before.")
    p.add_argument("--replay", action="store_true",
                   help="First give each (scenario, config) that has no run notebook (its runs trained in a cell "
                        "process) one, rendered on this machine from its lowest seed's record and step log by the "
                        "training notebook in replay mode (it does not train); about 60 KB a cell with its HTML.")
    p.add_argument("--expand", action="store_true",
                   help="Write a compacted folder's records back as result.json files, so that a sweep can resume it.")
    ns = p.parse_args(sys.argv[1:] if argv is None else argv)
    if ns.expand:
        for f in ns.folders:
            with _unused(f):
                print(f"{f}: {expand(f)} records written back as result.json; resume with dtype-bench sweep, "
                      f"then compact again")
        return 0
    if not ns.folders and not ns.readme:
        p.error("give the study folders to compact, or --readme")
    if not ns.root.is_dir():
        raise UserError(f"--root {ns.root}: no such folder")
    for f in ns.folders:
        if not f.is_dir():
            raise UserError(f"{f}: no such folder")
        if not f.resolve().is_relative_to(ns.root.resolve()):
            raise UserError(f"{f} is not below --root {ns.root}: the style sheet and README.md go there")
        with _unused(f):
            if ns.replay:
                from dtype_bench.study.replay import render_missing
                print(f"{f}: {render_missing(f)} run notebook(s) rendered from their records")
            print(compact(f, ns.root, ns.examples).line())
    from dtype_bench.study.readme import is_generated, write_readme
    if ns.readme or is_generated(ns.root / "README.md"):
        print(f"{write_readme(ns.root)}: written from the studies there")
    return 0


@contextlib.contextmanager
def _unused(folder: Path):
    """Hold the study folder's sweep lock while its files are rewritten (for ``<study>.pretrain``,
    its study's, which the sweep that writes both holds): a sweep writing there meanwhile (its
    runs' records, its analysis) would lose them or find a layout it refuses."""
    from dtype_bench.study.lock import StudyInUse, holder, study_lock
    study = folder.with_name(folder.name.removesuffix(STAGE_SUFFIX))
    if study != folder and not study.is_dir():  # no sweep of the study writes its pretrain stage now
        yield
        return
    try:
        with study_lock(study):
            yield
    except StudyInUse:
        raise UserError(f"{folder}: a sweep (pid {holder(study) or 'unknown'}) is writing this study's folders; "
                        f"compact it once that sweep has ended") from None


# ---- thinning one file (each function changes nothing the second time) ----------------------
def _binned(spec: dict) -> dict:
    """A run notebook's curves chart drawn again binned (``notebook.MAX_POINTS``) where its spec
    holds more points; any other spec as it is."""
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


TABLE_SPACE = re.compile(r"(?<=>)\s+(?=</?(?:table|thead|tbody|tr|th|td)\b)")
"""Whitespace before a table's tags (pandas indents every cell on a line of its own): a browser shows none of it."""
RICHER = {"text/html", "text/markdown"}
"""An output holding one of these drops its ``text/plain`` copy (a chart keeps ``<chart: title>``)."""


def thin_notebook(path: Path) -> tuple[int, int]:
    """Rewrite one executed notebook's chart outputs as lean SVG (``svg.lean_svg``), drop the
    plain-text copies of richer outputs and the indentation of tables, collapse its progress-bar
    redraws, and write its JSON without indentation; (bytes before, bytes after)."""
    import json

    import nbformat

    from benchlib.analysis.charts import render
    from dtype_bench.study.html_export import CHART_LINK, coalesce_streams
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
            html = data.get("text/html")
            html = "".join(html) if isinstance(html, list) else html
            if html and (lean := TABLE_SPACE.sub("", html)) != html:  # a table's indentation: nothing shown
                data["text/html"], changed = lean, True
            key = next((k for k in data if k.startswith("application/vnd.vegalite")), None)
            if key is None:
                svg = data.get("image/svg+xml")
                text = "".join(svg) if isinstance(svg, list) else svg
                if text and (lean := lean_svg_text(text)) != text:  # drawn before charts were this lean
                    data["image/svg+xml"], changed = lean, True
                continue
            svg = render(_binned(dict(data[key])), "svg").decode()
            out["data"] = {"text/plain": data.get("text/plain", "<chart>"), "image/svg+xml": svg}
            out.get("metadata", {}).pop("image/png", None)
            changed = True
    nbformat.validate(nb)
    text = json.dumps(nb, ensure_ascii=False, separators=(",", ":"), sort_keys=True) + "\n"
    if changed or text != path.read_text():  # without the indentation: every reader parses it the same
        path.write_text(text)
    return before, path.stat().st_size


KEEP_LOG_LINES = 200


def thin_log(path: Path, keep: int = KEEP_LOG_LINES) -> tuple[int, int]:
    """Each carriage-returned progress line reduced to its last state, the last ``keep`` lines
    kept (where the last state and any traceback are): (bytes before, after)."""
    text = path.read_bytes().decode(errors="replace")  # read_text would turn each \r into a line
    lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]  # splitlines() would split at \r too
    lines = [line for line in lines if line.strip()][-keep:]
    out = "\n".join(lines) + ("\n" if lines else "")
    if out != text:
        path.write_bytes(out.encode())
    return len(text.encode()), len(out.encode())
