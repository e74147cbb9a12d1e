"""``dtype-bench sweep params/X.yaml``: run a study's notebooks through papermill.

Each run is one papermill process with its own kernel (a crash, OOM or dead kernel is that
run's record, and the sweep goes on) executing its scenario family's notebook into
``executed/<study>/runs/<scenario>/<config>/seed<k>.ipynb``, its files in ``seed<k>/``.
Re-running the same command resumes: finished records are skipped; errors, corrupt or stale
records run again. One run: ``dtype_bench.study.runner``; a scheduler: ``dtype_bench.study.cluster``;
what a host adds (``Host``): ``dtype_bench.host.sweep``, which is ``dtype-bench sweep``. Beside it:
``selection`` (which runs, in which order), ``sweep_args`` (the command line) and ``sweep_report``
(the plan and the summary it prints).
"""
from __future__ import annotations

import argparse
import shlex
import signal
import sys
import tempfile
import threading
import time
from argparse import ArgumentTypeError
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from benchlib.core.records import RECORDS_TABLE, TRAINED, compacted, find_records, find_tables
from benchlib.core.runconfig import ConfigError
from dtype_bench.study import runner
from benchlib.study.executor import ExecutorSettings
from dtype_bench.study.html_export import export_study_html
from benchlib.core.records import last_line as _last_line
from dtype_bench.study.lock import holder, study_lock
from dtype_bench.study.runner import (NOTEBOOK_DIR, RUNNING, WAITING, Item, _rel, cells, checkpoint_lost, cut_steps_s,
                                   execute_unit, is_waiting, kernel_env, log_tail, plan,
                                   pretrain_problem, pretrain_root, pretrain_warning, readable, recorded_here, refresh_reading,
                                   remake_lost, run_state, steps_share, stored_records)
from benchlib.core.timing import STEPS_SHARE_TARGET
from benchlib.study.studyfile import Study, load_study
from dtype_bench.study.selection import committed_reruns, select
from dtype_bench.study.sweep_args import _utc_time, executor_settings, parse_args
from dtype_bench.study.sweep_report import (_n, _print_plan, _some, compile_cache_line, html_stack_missing,
                                            notebook_stack_missing, summary)

ANALYSIS_NOTEBOOKS = {
    "scenarios": {"10_analyze_experiment.ipynb": {"scenario": None}, "11_compare_experiments.ipynb": {}},
    "scaling": {"20_scaling.ipynb": {}},
    "arm-cost": {"21_arm_cost.ipynb": {}},
    "fp8-sizes": {"22_fp8_sizes.ipynb": {}},
    "serving": {"23_serving.ipynb": {}},
    "horizon": {"24_horizon.ipynb": {}},
}
"""The notebooks of each analysis a study names (``studyfile.ANALYSES``) and their parameters
besides ``study_dir``."""


class Host:
    """The seams between the core path (plan -> execute -> record) and the host it runs on. The
    defaults run one run after another here, each in its notebook (``host.sweep.GpuHost``: more).
    ``budget``: a ``host.budget.Budget`` or None; ``run_cell``: see ``runner.execute_unit``."""
    budget = None
    run_cell = None

    def check(self, kind: str) -> None:
        """Refuse, before anything runs, an option that the executor ``kind`` cannot honour."""

    def slots(self, todo: list[Item]) -> list[dict]:
        """One environment per run that may go side by side here."""
        return [{}]

    def sweep_fields(self, slots: list[dict]) -> dict:
        """What every record's ``sweep`` entry says of how its run shared the host."""
        return {}

    def run_all(self, units: list, slots: list[dict], run, on_start, on_done, admit, stop) -> None:
        """``run(unit, slot)`` every unit that ``admit`` lets through, in order."""
        for unit in units:
            if admit(unit):
                on_start(unit, slots[0])
                on_done(unit, run(unit, slots[0]))

    def preview(self, every: list[Item], selected: list[Item]) -> None:
        """After the plan is printed, a dry run's too: what running it here is expected to cost."""

    def start(self, study_dir: Path, every: list[Item], selected: list[Item]) -> None:
        """Before the runs execute here (``every`` the study's runs, ``selected`` the filters' pick)."""

    def stop(self) -> None:
        """After the runs and the analysis."""


# ---- after the runs: analysis (the summary: sweep_report; the HTML export: html_export) ---------
def run_analysis(study_dir: Path, slot: dict, analyses: list[str] = ("scenarios",)) -> tuple[list[Path], list[str]]:
    """Execute the study's analysis notebooks that exist; a failure is reported, never fatal."""
    done, failed = [], []
    notebooks = {k: v for a in analyses for k, v in ANALYSIS_NOTEBOOKS[a].items()}
    for name, extra in notebooks.items():
        src = NOTEBOOK_DIR / name
        if not src.exists():
            continue
        out = study_dir / "analysis" / name
        cmd = ["papermill", _rel(src), _rel(out), "-p", "study_dir", _rel(study_dir)]
        for k, v in extra.items():
            cmd += ["-p", k, "None" if v is None else str(v)]
        rc = runner.execute(cmd, kernel_env(slot), out.with_suffix(".log"))
        if rc != 0:
            failed.append(f"{name}: {_last_line(log_tail(out.with_suffix('.log')))}")
        if out.exists():  # a failing notebook still shows where it stopped
            settle(out)
            done.append(out)
    return done, failed


def settle(notebook: Path) -> None:
    """Drop what papermill writes differently on every execution of an analysis notebook
    (timestamps, durations, a random id for the injected cell), so that analysing the same
    records again at the same commit leaves a committed study's files unchanged."""
    import nbformat
    nb = nbformat.read(str(notebook), as_version=4)
    for meta in [nb.metadata] + [cell.metadata for cell in nb.cells]:
        for key in ("start_time", "end_time", "duration"):
            meta.get("papermill", {}).pop(key, None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell["id"] = "injected-parameters"
    nbformat.write(nb, str(notebook))


# ---- the command (its parser: sweep_args) ----------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """The sweep with the default ``Host``: runs one after another here, each in its notebook."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ns = parse_args(argv)
    ns.argv = argv
    rehearse_if_asked(ns)
    return run(ns, Host())


def rehearse_if_asked(ns: argparse.Namespace) -> None:
    """``--rehearse``: ``ns`` names the study's rehearsal (``dtype_bench.study.rehearse``), written
    into ``--out`` (if given, else a new temporary folder), instead of the study."""
    if not ns.rehearse:
        return
    from dtype_bench.study.rehearse import needs, write_rehearsal
    if not any(a == "--out" or a.startswith("--out=") for a in getattr(ns, "argv", None) or []):
        ns.out = Path(tempfile.mkdtemp(prefix="dtype-bench-rehearsal-"))
    source, ns.study = ns.study, write_rehearsal(ns.study, ns.out)
    print(f"rehearsal of {source}: {ns.study}")
    print("  its GPU call reads, besides the repository: " + ("; ".join(needs(load_study(source))) or "nothing"))


def resume_command(ns: argparse.Namespace) -> str:
    """The command that goes on with this sweep: as typed (``ns.argv``), with its ``--out``."""
    argv = list(getattr(ns, "argv", None) or [str(ns.study)])
    if not any(a == "--out" or a.startswith("--out=") for a in argv):
        argv += ["--out", str(ns.out)]
    return f"dtype-bench sweep {shlex.join(argv)}"


def run(ns: argparse.Namespace, host: Host) -> int:
    """Plan the study, execute what is left (through ``host`` or a scheduler), then analyse; all
    but ``--dry_run`` and ``--status`` holding the study folder's lock (``study_lock``), and a
    Ctrl-C ends in one line naming the command that goes on."""
    study = load_study(ns.study)  # validates every run before anything executes
    study_dir = ns.out / study.name
    if ns.dry_run or ns.status:  # they read: fine while a sweep writes, and a compacted study's table
        if pid := holder(study_dir):
            print(f"  a sweep (pid {pid}) is running on {_rel(study_dir)} now: the states below change as it goes")
        return _run(ns, study, host, stored_records(study_dir, pretrain_root(study, ns.out)))
    from benchlib.training.preflight import out_problem  # --out must take the study, said before any run
    if problem := out_problem(study_dir, "--out"):
        raise ConfigError(problem)
    try:
        with study_lock(study_dir):
            return _run(ns, study, host, _stored_if_compacted(ns, study))
    except KeyboardInterrupt:
        print(f"dtype-bench sweep: interrupted: runs without a finished record run again with: {resume_command(ns)}",
              file=sys.stderr)
        return 130


def _run(ns: argparse.Namespace, study: Study, host: Host, stored: dict | None = None) -> int:
    every = plan(study, ns.out, stored)
    items = select(every, ns.only, ns.scenario, ns.config, ns.seed, study.order)
    for i in items if ns.force else []:
        if not i.todo and not i.pulled:
            i.state, i.detail = "rerun", "--force"
    if getattr(ns, "force_before", None) and ns.force_before > (now := utc_now()):
        raise ConfigError(f"--force_before {ns.force_before:%Y-%m-%dT%H:%M} is after now ({now:%Y-%m-%dT%H:%M} UTC): the "
                          f"runs this call makes would be older than it, and the same command would run them again; "
                          f"give the time the first call of this command started (at most now)")
    for i in items if getattr(ns, "force_before", None) else []:
        if not i.todo and not i.pulled and (made := _made(i)) is not None and made < ns.force_before:
            i.state, i.detail = "rerun", f"--force_before: its record is of {made.astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC"
    settings = executor_settings(ns, study)
    host.check(settings.kind)
    if ns.status:
        from dtype_bench.study.cluster import print_status
        return print_status(study, items, ns.out)
    if ns.analysis_only and (ns.out / study.name / "cluster" / "jobs.json").exists():
        from dtype_bench.study.cluster import reconcile  # runs whose job ended without a record get one
        if reconcile(study, every, ns.out):
            every = plan(study, ns.out)
            items = select(every, ns.only, ns.scenario, ns.config, ns.seed, study.order)
    study_dir = ns.out / study.name
    refreshed = Counter(", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items())
                        for _, changed in ([] if ns.dry_run else refresh_reading(items)))
    for what, n in refreshed.items():  # how the analysis reads a run: nothing trains again
        print(f"  {_n(n, 'finished record')} updated, not trained again: {what}")
    remade = [] if ns.analysis_only else remake_lost(items)  # checkpoints not carried with their records
    pending = [i for i in items if i.todo]
    if ns.analysis_only and not ns.dry_run and not (study_dir.is_dir() and (find_records(study_dir) or find_tables(study_dir))):
        raise ConfigError(f"--analysis_only: no run of {study.name} has a record under {_rel(study_dir)} yet, so "
                          f"there is nothing to analyse; run it first: dtype-bench sweep {_rel(ns.study)} --out {_rel(ns.out)}")
    if missing := [f"{i.run_id}: {p}" for i in ([] if ns.analysis_only else pending) if (p := i.spec.cfg.path_problem())]:
        problem = missing[0] + (f" (and {len(missing) - 1} more runs to execute)" if len(missing) > 1 else "")
        if not ns.dry_run:
            raise ConfigError(problem)
    if not ns.dry_run and not ns.analysis_only and (stack := notebook_stack_missing(pending)):
        raise ConfigError(stack)
    _print_plan(study, ns.study, every, items, pending, study_dir, ns.dry_run, host.run_cell is not None,
                getattr(ns, "seed_per_gpu", False))
    host.preview(every, [] if ns.analysis_only else items)
    if ns.dry_run and missing:  # the plan all the same: where it runs, the data may be there
        print(f"  not here, so a sweep here would stop: {problem}")
    if (kept := committed_reruns(pending, study.name)) and not getattr(ns, "rerun_stale", False):
        if not ns.dry_run and not ns.analysis_only:
            raise ConfigError(kept)
        if ns.dry_run:
            print(f"  a sweep here would stop: {kept}")
    for p in remade:
        users = [i.run_id for i in items if i.todo and i.needs is p]
        cells_ = {(i.spec.cfg.scenario, i.spec.cfg.seed) for i in items if i.todo and i.needs is p}
        done = [i.run_id for i in every if i.needs is p and not i.todo and readable(i) is not None
                and (i.spec.cfg.scenario, i.spec.cfg.seed) in cells_]
        print(f"  {p.run_id}: its record is here but not its checkpoint {_rel(p.model_dir)} (checkpoints are not "
              f"carried between machines): trained again for {_some(users, 3)}"
              + (f"; {_n(len(done), 'finished run')} of those seeds loaded the old one ({_some(done, 2)}) and will "
                 f"pair with none of the new (the analysis pairs a seed's runs of one checkpoint only): "
                 f"--force_before {datetime.now(timezone.utc):%Y-%m-%dT%H:%M} runs them all again" if done else ""))
    todo = [] if ns.analysis_only else pending
    if ns.analysis_only and pending:
        print(f"  --analysis_only: the {_n(len(pending), 'run')} to run stay unrun")
    if settings.kind != "inprocess" and todo:
        return _submit(ns, study, settings, todo, host.run_cell,
                       lambda wall: _after_runs(ns, study, every, items, todo, [], wall))
    if ns.dry_run:
        return 0

    slots = host.slots(todo)
    host.start(study_dir, every, items)
    try:
        return _run_here(ns, study, every, items, todo, slots, host)
    finally:
        host.stop()


def _made(item: Item) -> datetime | None:
    """When the item's record was made (its ``env.date``); None where it has no readable date."""
    try:
        return _utc_time(((readable(item) or {}).get("env") or {}).get("date") or "")
    except ArgumentTypeError:
        return None


def utc_now() -> datetime:
    """The time ``--force_before`` is checked against (a test sets it)."""
    return datetime.now(timezone.utc)


def _stored_if_compacted(ns: argparse.Namespace, study: Study) -> dict | None:
    """A compacted study's records (``dtype-bench compact``: one table, no ``result.json`` files),
    which the plan reads as done: a sweep resumes past them, its new runs write ``result.json``
    beside the table (where both hold a run, the file wins), and ``compact`` folds them in."""
    folders = compacted(ns.out / study.name, pretrain_root(study, ns.out))
    if not folders:
        return None
    print(f"  {_rel(folders[0])} is compacted: its runs are read from {RECORDS_TABLE}; runs made now write their "
          f"files beside it, and `dtype-bench compact {_rel(folders[0])}` folds them in")
    return stored_records(*folders)


def _run_here(ns: argparse.Namespace, study: Study, every: list[Item], items: list[Item], todo: list[Item],
              slots: list, host: Host) -> int:
    """Execute ``todo`` in this process's slots, then ``_after_runs``."""
    t0, since = time.perf_counter(), time.time()
    timings: list[dict] = []
    budget = host.budget
    watch = budget.watch(RUNNING) if budget else None
    restore = sigterm_interrupts()
    try:
        _execute_all(todo, items, slots, ns.timeout, timings, host)
        if budget:
            budget.defer_unrun(todo)  # what a cell's process left for want of time
    except KeyboardInterrupt:
        if not (budget and budget.expired):
            raise  # run's one line
        budget.deferred += [i for i in todo if not (recorded_here(i) and run_state(i)[0].startswith("done"))
                            and not any(i is d for d in budget.deferred)]
        timings += finished_in_cut_units(todo, timings, since)
        print("\ntime budget: spent while runs were going; they were stopped and run again with the same command")
    finally:
        restore()
        if watch:
            watch.cancel()
    return _after_runs(ns, study, every, items, todo, timings, time.perf_counter() - t0, slots[0], len(slots), budget,
                       cut_steps_s(todo, since))


def finished_in_cut_units(todo: list[Item], timings: list[dict], since: float) -> list[dict]:
    """The sweep timings of runs that finished during this sweep (record written after ``since``,
    ``time.time()``) in a unit the deadline then interrupted, e.g. the first seed of a cell whose
    second was cut: the unit never returned, so its finished runs reached no ``timings``."""
    out = []
    for item in todo:
        rec = readable(item)
        t = (rec or {}).get("sweep") or {}
        if (rec and rec["status"] in TRAINED and t.get("fixed_s") is not None and t not in timings
                and item.result.exists() and item.result.stat().st_mtime >= since):
            out.append(t)
    return out


def sigterm_interrupts() -> Callable[[], object]:
    """While the runs go, SIGTERM (``timeout``'s, ``kill``'s, a scheduler's) stops them as Ctrl-C
    does: each run is interrupted, keeps its last saved state and runs again with the same command.
    Returns what puts the previous handler back (nothing to do outside the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    old = signal.signal(signal.SIGTERM, signal.default_int_handler)
    return lambda: signal.signal(signal.SIGTERM, old)


def _submit(ns: argparse.Namespace, study: Study, settings: ExecutorSettings, todo: list[Item], run_cell,
            after) -> int:
    """Hand ``todo`` to submitit (``dtype_bench.study.cluster``); analyse here once the local
    executor (or ``--wait``) is through."""
    from dtype_bench.study import cluster
    cluster.require_submitit()
    sub = cluster.Submission(study, ns.out, settings, ns.timeout, run_cell)
    todo, flying = sub.pending(todo)
    if flying:
        print(f"  in flight, not submitted again: {_some([i.run_id for i in flying])}")
    if ns.dry_run:
        print(f"would submit {_n(len(todo), 'run')} ({settings.kind}):\n{sub.dry_run(todo)}" if todo else "nothing to submit")
        return 0
    if not todo:
        print("nothing to submit: every selected run is finished or in flight")
        return 0
    t0 = time.perf_counter()
    try:
        sub.submit(todo, wait=ns.wait, flying=flying)
    except KeyboardInterrupt:
        print(f"dtype-bench sweep: interrupted: what was submitted stays queued (see it with --status); the same "
              f"command submits the rest: {resume_command(ns)}", file=sys.stderr)
        return 130
    if settings.kind == "slurm" and not ns.wait:
        print(f"\nsubmitted {_n(len(todo), 'run')}; jobs: {_rel(cluster.cluster_dir(study, ns.out) / cluster.LEDGER)}\n"
              f"  progress:  dtype-bench sweep {_rel(ns.study)} --status\n"
              f"  resubmit what failed:  dtype-bench sweep {_rel(ns.study)} --executor slurm")
        return 0
    return after(time.perf_counter() - t0)


def _after_runs(ns: argparse.Namespace, study: Study, every: list[Item], items: list[Item], todo: list[Item],
                timings: list[dict], wall: float, slot: dict | None = None, n_slots: int = 1,
                budget=None, cut: tuple[float, int] = (0.0, 0)) -> int:
    """The analysis notebooks, the HTML export and the summary, after the runs (with a time
    budget, the first two only once every run is done and there is time for them); ``cut``: the
    steps' seconds and the number of runs cut with their state saved (``cut_steps_s``)."""
    study_dir = ns.out / study.name
    later = list(budget.deferred) if budget else []
    todo = [i for i in todo if not any(i is d for d in later)]  # what ran
    late = budget.why_no_analysis() if budget and not (ns.no_analysis and ns.no_html) else ""
    if late:
        print(late)

    analysis, failed = [], []
    if not ns.no_analysis and not late and (todo or ns.analysis_only or not (study_dir / "analysis").exists()):
        analysis, failed = run_analysis(study_dir, slot or {}, study.analyses)
    analysis = analysis or sorted((study_dir / "analysis").glob("*.ipynb"))
    runs = [i for i in every if i.stage == "run"]
    pre = [i for i in every if i.stage == "pretrain"]
    bare = "" if ns.no_html or late else html_stack_missing()
    if bare:
        print(f"{bare}; the records stand, and `dtype-bench sweep {_rel(ns.study)} --out {_rel(ns.out)} "
              f"--analysis_only` makes the HTML where it is installed", file=sys.stderr)
    index = None if ns.no_html or late or bare else export_study_html(study_dir, runs, analysis,
                                                                      overview=not study.arms)
    print("\n" + summary(runs))
    from benchlib.analysis.answer import study_answer  # the summary ends with the study's answer table
    sys.stdout.write(f"\n{a}\n" if (a := study_answer(study_dir)) else "")
    for p in pre:
        print(f"{p.run_id}: " + ("its checkpoint is not here (its record was carried without it); made again when "
                                 "a run still to run loads it" if checkpoint_lost(p) else
                                 pretrain_problem(p) or "checkpoint " + _rel(p.model_dir)))
        if pretrain_warning(p):
            print(pretrain_warning(p), file=sys.stderr)
    if todo or cut[1]:
        print(f"\nexecuted {len(todo)} runs in {wall:.0f} s")
        if timings:
            import pandas as pd
            fixed = pd.Series([t["fixed_s"] for t in timings])
            nbo = pd.Series([t["notebook_overhead_s"] for t in timings])
            print(f"fixed cost per run (all but the steps after the first: kernel start, imports, data, model, "
                  f"compilation, evaluation, charts): median {fixed.median():.1f} s, range {fixed.min():.1f}-"
                  f"{fixed.max():.1f} s over {len(fixed)} runs; of which the notebook around the training "
                  f"(kernel start, imports, charts) median {nbo.median():.1f} s")
            cached = compile_cache_line(todo)
            if cached:
                print(cached)
        share = steps_share(timings, wall, n_slots, cut[0])
        if share is not None:
            kept = f", with the saved steps of {_n(cut[1], 'run')} it cut" if cut[1] else ""
            print(f"study efficiency: {100 * share:.0f}% of the runs' {_n(n_slots, 'slot')} x {wall:.0f} s was spent in "
                  f"training steps{kept} (the reference study's target: >= {100 * STEPS_SHARE_TARGET:.0f}%)")
        if timings:
            from benchlib.analysis.overhead import where_it_went
            split = where_it_went([r for i in todo if (r := readable(i)) is not None])
            if split:
                print(split)
    for f in failed:
        print(f"analysis failed: {f}", file=sys.stderr)
    if failed:
        print(f"  the runs' records stand; once fixed: dtype-bench sweep {_rel(ns.study)} --out {_rel(ns.out)} "
              f"--analysis_only", file=sys.stderr)
    arm = "<arm>/" if study.arms else ""
    print(f"\nwhere to look:\n  runs:     {_rel(study_dir / 'runs')}/{arm}<scenario>/<config>/seed<k>.ipynb"
          " (+ seed<k>/result.json)")
    if index:
        print(f"  html:     {_rel(index)}")
    if analysis:
        print(f"  analysis: {_rel(study_dir / 'analysis')}")
    if pre:
        print(f"  pretrain: {_rel(pretrain_root(study, ns.out))}/<arch>.ipynb (+ <arch>/model: the checkpoint"
              + ("; earlier phases: <arch>.phase<k>/" if any(p.phase > 1 for p in pre) else "") + ")")
    states = {i.run_id: run_state(i)[0] for i in items if not any(i is d for d in later)}  # left for later: not failed
    errors = [r for r, s in states.items() if s == "error"]
    corrupt = [r for r, s in states.items() if s == "corrupt"]
    waiting = [r for r, s in states.items() if s == "waiting"]
    if errors:
        print(f"\n{len(errors)} run(s) ended in error (see their notebooks, or run.log of a run without one): "
              f"{_some(errors)}", file=sys.stderr)
    if corrupt:
        print(f"\n{len(corrupt)} run(s) with a corrupt record (an unreadable result.json, left out of the analysis; "
              f"the next sweep runs them again): {_some(corrupt)}", file=sys.stderr)
    if waiting:
        print(f"\n{len(waiting)} run(s) skipped, {WAITING} ({_some(waiting)}):"
              f" the next sweep runs them once it exists", file=sys.stderr)
    if later:
        print(budget.left_line(len(items)))
    return 1 if errors or corrupt or waiting or failed else 0


class Dependencies:
    """The order of one sweep's runs: every pretrain phase first, then the runs that load no
    checkpoint, then those that do (runs without a notebook as ``cells``). A run that loads a
    checkpoint this sweep makes waits for it before it starts, so the slots the pretrain stage
    leaves free train runs of their own meanwhile."""

    def __init__(self, todo: list[Item], admit, slots: int = 1) -> None:
        pre = sorted((i for i in todo if i.stage == "pretrain"), key=lambda i: i.phase)
        runs = [i for i in todo if i.stage != "pretrain"]
        self.units = [[i] for i in pre] + cells([i for i in runs if i.needs is None], slots) \
            + cells([i for i in runs if i.needs is not None], slots)
        self.settled = {id(i): threading.Event() for i in pre}
        self.stop = threading.Event()
        self._admit = admit

    def admit(self, unit: list[Item]) -> bool:
        """Wait (holding the slot) for the pretrain items this unit loads, then ask the budget."""
        for item in unit:
            ev = self.settled.get(id(item.needs))
            while ev is not None and not ev.wait(0.5):
                if self.stop.is_set():
                    return False
        items = list(unit)  # the budget drops from ``unit`` what it defers
        ok = self._admit(unit)
        if not ok:
            self._settle(items)  # a deferred pretrain: the runs that load it are deferred with it
        return ok

    def done(self, on_done):
        def wrapped(unit: list[Item], results) -> None:
            try:
                on_done(unit, results)
            finally:
                self._settle(unit)
        return wrapped

    def _settle(self, unit: list[Item]) -> None:
        for item in unit:
            if id(item) in self.settled:
                self.settled[id(item)].set()


def _execute_all(todo: list[Item], items: list[Item], slots: list[dict], timeout: int | None, timings: list[dict],
                 host: Host) -> None:
    from tqdm import tqdm

    from benchlib.study.notebook import data_line
    budget = host.budget
    bar = tqdm(total=len(items), initial=len(items) - len(todo), unit="run", dynamic_ncols=True)
    running: dict[str, str] = {}
    said: set[str] = set()

    def on_start(unit: list[Item], slot: dict) -> None:
        for item in unit:
            running[item.run_id] = slot.get("CUDA_VISIBLE_DEVICES", "")
        bar.set_description(" ".join(running))

    def on_done(unit: list[Item], results: list[tuple[Item, dict]]) -> None:
        for item in unit:
            running.pop(item.run_id, None)
        for item, rec in results:
            data = data_line(rec, evaluated=False)
            if data and data not in said:  # which split rule real data was read with, once per source
                said.add(data)
                bar.write(f"{item.run_id}: {data}")
            if rec["status"] in TRAINED and rec["sweep"]["fixed_s"] is not None:
                timings.append(rec["sweep"])
            if budget:
                budget.observe(item, rec)  # the next estimate of its kind knows it
            bar.set_postfix_str(f"last: {item.run_id} {rec['status']}")
            if rec["status"] == "error":
                bar.write(f"{item.run_id}: error: {_last_line(rec['reason'])[:200]}")
            elif is_waiting(rec):
                bar.write(f"{item.run_id}: skipped: {_last_line(rec['reason'])[:300]}")
            elif item.stage == "pretrain" and pretrain_warning(item):
                bar.write(pretrain_warning(item))
            bar.update(1)
        bar.set_description(" ".join(running) or "done")

    try:
        extra = host.sweep_fields(slots) or None
        run = lambda unit, slot: execute_unit(unit, slot, timeout, extra, host.run_cell)  # noqa: E731
        order = Dependencies(todo, budget.admit if budget else (lambda unit: True), len(slots))  # the pretrain stage first
        host.run_all(order.units, slots, run, on_start, order.done(on_done), order.admit, order.stop)
    finally:
        bar.close()


if __name__ == "__main__":
    sys.exit(main())
