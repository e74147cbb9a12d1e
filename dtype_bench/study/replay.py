"""``dtype-bench compact --replay``: a rendered run notebook for each (scenario, config) of a study
that has none, its runs having trained in a cell process without a notebook. The training notebook
is executed with ``REPLAY_ENV`` set: it renders the run's finished record and step log (settings,
curves, result) instead of training, so that a reader can open how a cell of the answer was made."""
from __future__ import annotations

import tempfile
from pathlib import Path

from benchlib.core.records import TRAINED, load_records
from benchlib.study.notebook import REPLAY_ENV
from dtype_bench.study.runner import _rel, execute, kernel_env, notebook_command


def missing(folder: Path) -> list[dict]:
    """Per (scenario, config) run folder with no run notebook beside its runs: the record of its
    lowest seed that trained (a curve to draw), in study order."""
    cells: dict[Path, dict] = {}
    for r in load_records(folder):
        run = Path(r["_path"]).parent
        if r.get("status") in TRAINED and not any(run.parent.glob("*.ipynb")):
            if run.parent not in cells or r["seed"] < cells[run.parent]["seed"]:
                cells[run.parent] = r
    return [cells[k] for k in sorted(cells)]


def render(rec: dict, timeout: int = 600) -> Path:
    """The run notebook of ``rec``'s run, executed in replay mode beside its run folder."""
    run = Path(rec["_path"]).parent
    notebook = run.with_suffix(".ipynb")
    notebook.parent.mkdir(parents=True, exist_ok=True)  # a compacted study keeps no empty run folders
    cmd = notebook_command(rec["scenario"], notebook, {**rec["run"], "out_dir": _rel(run)})
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "papermill.log"
        rc = execute(cmd, {**kernel_env({"CUDA_VISIBLE_DEVICES": ""}), REPLAY_ENV: "1"}, log, timeout)
        if rc != 0:
            notebook.unlink(missing_ok=True)
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise RuntimeError(f"{rec['run_id']}: its replay notebook failed (exit {rc}): {' '.join(tail)}")
    return notebook


def render_missing(folder: Path) -> int:
    """Render every (scenario, config) of ``folder`` that has no run notebook; how many were."""
    todo = missing(folder)
    for i, rec in enumerate(todo, 1):
        print(f"  replay {i}/{len(todo)}: {rec['run_id']}", flush=True)
        render(rec)
    return len(todo)
