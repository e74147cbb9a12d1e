"""``dtype-bench sweep X.yaml --executor slurm | local``: the study's pending runs handed to a
scheduler through submitit, each task executing what the in-process sweep executes for that run
(``runner.execute_unit``) and writing the same record.

- **slurm**: one job array per resource shape and stage (each pretrain phase, then the runs that
  load its checkpoints, each waiting for the one before, ``afterany``), then one small job for
  the analysis; the command returns once submitted (``--wait`` stays).
- **local**: submitit's local executor, one task at a time (runs side by side would measure
  each other); the command waits, then analyses.

Which job ran which run is kept in ``<study>/cluster/jobs.json`` (submitit's files under
``logs/``). A run is submitted again only when its record is not finished and no job of it is
queued or running; a job that ended without a finished record leaves an ``error`` record naming
the scheduler's state, so the next submission runs exactly those.
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from pathlib import Path

from benchlib.core.records import write_json_atomic
from benchlib.core.runconfig import ConfigError
from benchlib.study.executor import ExecutorSettings
from dtype_bench.study.runner import (Item, _rel, error_record, execute_unit, log_tail, plan, readable, run_state,
                                   sweep_says)
from benchlib.study.studyfile import Study, load_study

LEDGER = "jobs.json"
# Scheduler states of a job that may still write its record (Slurm's names).
ACTIVE = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING",
          "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD"}
# What the record of a run whose job ended without one says, by the scheduler's final state.
ENDED = {
    "OUT_OF_MEMORY": "was killed for exceeding its memory (raise executor.mem_gb)",
    "TIMEOUT": "reached its time limit (raise executor.time_min, or lower steps)",
    "NODE_FAIL": "lost its node (node failure); it runs again on resubmission",
    "PREEMPTED": "was preempted and not requeued; it runs again on resubmission",
    "CANCELLED": "was cancelled",
    "BOOT_FAIL": "could not start its node",
    "DEADLINE": "passed its deadline",
    "FAILED": "failed",
}


def require_submitit():
    """submitit, or one line saying how to get it (an optional dependency)."""
    try:
        import submitit
    except ImportError:
        raise ConfigError("--executor needs submitit, an optional dependency: pip install -e '.[slurm]' "
                          "(or pip install submitit)") from None
    return submitit


def cluster_dir(study: Study, root: Path) -> Path:
    return Path(root) / study.name / "cluster"


# ---- one task: what runs on the node --------------------------------------------------
def run_task(study_file: str, out_root: str, run_id: str, cwd: str, timeout: int | None = None,
             run_cell=None) -> str:
    """Execute one run of the study (planned afresh from its file) in a scheduler's task and
    return its record's status; a time limit or preemption leaves an ``error`` record saying so."""
    os.chdir(cwd)
    study = load_study(study_file)
    item = _find(plan(study, Path(out_root)), run_id)
    job = task_identity()
    try:
        rec = execute_unit([item], {}, timeout, {"job": job}, run_cell)[0][1]
    except BaseException as e:
        _write_ended(item, job, _interruption(e))
        raise
    return rec["status"]


def analysis_command(study_file: str, out_root: str) -> list[str]:
    """The job after the arrays: the sweep's ``--analysis_only`` over the records there."""
    import sys
    return [sys.executable, "-m", "dtype_bench", "sweep", study_file, "--out", out_root, "--analysis_only"]


def task_identity() -> dict:
    """Which scheduler job this task is (the record's ``sweep.job``)."""
    try:
        import submitit
        env = submitit.JobEnvironment()
        job_id, kind = env.job_id, os.environ.get("SUBMITIT_EXECUTOR", "local")
    except Exception:  # not inside a submitit task
        job_id, kind = None, "inprocess"
    return {"executor": kind, "job_id": job_id, "host": socket.gethostname()}


def _interruption(e: BaseException) -> str:
    name = type(e).__name__
    if name == "UncompletedJobError":  # submitit: the time limit's warning signal, not requeued
        return f"the task reached its time limit before the notebook finished ({e}); raise executor.time_min"
    if isinstance(e, SystemExit):  # submitit requeues a preempted task, then exits
        return "the task was preempted; the scheduler requeued it and it runs again"
    return f"the task stopped before the notebook finished: {name}: {e}"


def _find(items: list[Item], run_id: str) -> Item:
    for i in items:
        if i.run_id == run_id:
            return i
    raise ConfigError(f"run {run_id!r} is not in the study any more (was the study file edited?)")


# ---- the ledger: which job ran which run ------------------------------------------------
def read_ledger(study: Study, root: Path) -> dict:
    path = cluster_dir(study, root) / LEDGER
    try:
        return json.loads(path.read_text()) if path.exists() else {}
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{_rel(path)} is unreadable ({e}): it says which job ran which run; restore it, or "
                          f"delete it once no job of the study is queued or running") from None


def job_states(ledger: dict) -> dict[str, str]:
    """run id -> the scheduler's state of its latest job (first word), UNKNOWN where it cannot tell."""
    slurm = {r: e for r, e in ledger.items() if e["executor"] == "slurm"}
    states = {r: ("RUNNING" if _alive(e["job_id"]) else "ENDED") for r, e in ledger.items() if e["executor"] == "local"}
    if slurm:
        submitit = require_submitit()
        jobs = {r: submitit.SlurmJob(folder=e["folder"], job_id=e["job_id"]) for r, e in slurm.items()}
        submitit.SlurmJob.watcher.update()  # one sacct call for every job
        for r, j in jobs.items():
            states[r] = (j.get_info(mode="cache").get("State") or "UNKNOWN").split()[0]
    return states


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
        return True
    except (OSError, ValueError):
        return False


def reconcile(study: Study, items: list[Item], root: Path) -> list[str]:
    """Give (and return) every run whose job ended without a finished record an ``error`` record."""
    ledger = read_ledger(study, root)
    mine = {i.run_id: i for i in items if i.run_id in ledger}
    if not mine:
        return []
    states = job_states({r: ledger[r] for r in mine})
    ended = []
    for run_id, item in mine.items():
        state, entry = states.get(run_id, "UNKNOWN"), ledger[run_id]
        job = {"executor": entry["executor"], "job_id": entry["job_id"], "state": state}
        rs = run_state(item)[0]
        if state in ACTIVE or state == "UNKNOWN":
            continue
        tail = _log_tail(entry)
        what = f"{entry['executor']} job {entry['job_id']} " + ended_how(state, tail)
        if rs in ("new", "unfinished", "corrupt"):
            _write_ended(item, job, f"{what} before its notebook wrote a record{tail}")
            ended.append(run_id)
        elif rs == "error" and state in ENDED and state != "FAILED":
            _annotate(item, job, what)  # the task wrote its record as it was stopped: say by what
    return ended


WARNING_SIGNAL_DIED = "User defined signal 2"
"""What srun logs for a task that Slurm's warning signal (SIGUSR2, 90 s before a time limit or a
preemption) killed before submitit had installed its handler."""


def ended_how(state: str, log_tail: str = "") -> str:
    """The end of a job by the scheduler's final state (and its log: ``WARNING_SIGNAL_DIED``)."""
    if state == "FAILED" and WARNING_SIGNAL_DIED in log_tail:
        return ("reached its time limit or was preempted: Slurm's warning signal (SIGUSR2) stopped the task "
                "before it could record why (raise executor.time_min)")
    return ENDED.get(state, f"ended {state}" if state != "ENDED" else "ended")


def _annotate(item: Item, job: dict, what: str) -> None:
    """Put the scheduler's reason first in the ``error`` record the stopped task wrote."""
    rec = readable(item)
    if rec is None:
        return
    ran = (rec.get("sweep") or {}).get("job") or {}
    if ran.get("job_id") != job["job_id"] or ran.get("state"):
        return
    sweep_says(item.out_dir, rec, sweep={**rec["sweep"], "job": {**ran, "state": job["state"]}},
               reason=f"{what}\n{rec.get('reason') or ''}")


def _log_tail(entry: dict) -> str:
    from submitit.core.utils import JobPaths
    err = JobPaths(entry["folder"], job_id=entry["job_id"], task_id=0).stderr
    tail = log_tail(err, 10) if err.exists() else ""
    return f"\n(task log {_rel(err)}):\n{tail}" if tail else ""


def _write_ended(item: Item, job: dict, reason: str) -> None:
    """An ``error`` record for a run its task could not finish (kept if the notebook wrote one)."""
    sweep = {"wall_s": None, "fixed_s": None, "notebook_overhead_s": None, "job": job}
    rec = readable(item)
    if rec is None:
        sweep_says(item.out_dir, error_record(item.spec, item.out_dir, reason), False, sweep=sweep)
    elif "sweep" not in rec:  # with it, the notebook finished and the sweep recorded it: nothing was lost
        sweep_says(item.out_dir, rec, sweep=sweep, status="error",
                   reason=f"{reason}\n(the training itself had ended {rec['status']!r})")


# ---- submitting ----------------------------------------------------------------------
def slurm_parameters(settings: ExecutorSettings, gpus: int, name: str, dependency: str | None = None) -> dict:
    """submitit's SlurmExecutor parameters (sbatch's own names) for one array."""
    p = {"job_name": name, "time": settings.time_min, "array_parallelism": settings.array_parallelism,
         "partition": settings.partition, "account": settings.account, "qos": settings.qos,
         "gpus_per_node": gpus or None, "cpus_per_task": settings.cpus_per_task,
         "mem": None if settings.mem_gb is None else f"{int(settings.mem_gb * 1024)}MB",
         "setup": list(settings.setup) or None, "additional_parameters": dict(settings.sbatch) or None,
         "dependency": dependency}
    return {k: v for k, v in p.items() if v is not None}


def sbatch_script(settings: ExecutorSettings, gpus: int, n_tasks: int, folder: Path, name: str,
                  dependency: str | None = None) -> str:
    """The sbatch file submitit writes for an array of ``n_tasks`` (``--dry_run``)."""
    from submitit.slurm.slurm import _make_sbatch_string  # the text SlurmExecutor submits
    import shlex
    import sys
    cmd = f"{shlex.quote(sys.executable)} -u -m submitit.core._submit {shlex.quote(str(folder))}"
    return _make_sbatch_string(command=cmd, folder=folder, map_count=n_tasks if n_tasks > 1 else None,
                               **slurm_parameters(settings, gpus, name, dependency))


def arrays(items: list[Item], settings: ExecutorSettings) -> list[tuple[str, int, list[Item]]]:
    """The submission's arrays: (stage, GPUs per task, runs): one per pretrain phase (``pretrain``
    or ``pretrain.phase<k>``), then the runs, those that load a checkpoint apart."""
    pre = [i for i in items if i.stage == "pretrain"]
    phased = any(i.phase > 1 or i.label != f"pretrain/{i.arch}" for i in pre)
    stages = [(f"pretrain.phase{k}" if phased else "pretrain", [i for i in pre if i.phase == k])
              for k in sorted({i.phase for i in pre})]
    stages.append(("run", [i for i in items if i.stage != "pretrain"]))
    out = []
    for stage, members in stages:
        groups: dict[tuple[bool, int], list[Item]] = {}
        for i in members:
            c = i.spec.cfg
            groups.setdefault((i.needs is not None, settings.gpus_for(c.dist.nproc, c.device)), []).append(i)
        out += [(stage, gpus, runs) for (_, gpus), runs in sorted(groups.items())]
    return out


def _before(runs: list[Item], phase_ids: dict[int, list[str]]) -> str | None:
    """The array's dependency on the pretrain jobs of every phase before it (``afterany:...``), or None."""
    if all(i.needs is None for i in runs):
        return None
    last = runs[0].phase if runs[0].stage == "pretrain" else float("inf")
    ids = dict.fromkeys(j for k, ids in sorted(phase_ids.items()) if k < last for j in ids)
    return f"afterany:{':'.join(ids)}" if ids else None


@dataclasses.dataclass
class Submission:
    study: Study
    root: Path
    settings: ExecutorSettings
    timeout: int | None = None
    run_cell: object = None

    @property
    def folder(self) -> Path:
        return cluster_dir(self.study, self.root) / "logs"

    def task_args(self, item: Item) -> tuple:
        return (str(self.study.path), str(self.root), item.run_id, os.getcwd(), self.timeout, self.run_cell)

    def pending(self, todo: list[Item]) -> tuple[list[Item], list[Item]]:
        """(runs to submit, runs in flight), after ``reconcile``."""
        reconcile(self.study, todo, self.root)
        ledger = read_ledger(self.study, self.root)
        states = job_states({i.run_id: ledger[i.run_id] for i in todo if i.run_id in ledger})
        flying = [i for i in todo if states.get(i.run_id) in ACTIVE]
        return [i for i in todo if i not in flying], flying

    def dry_run(self, todo: list[Item]) -> str:
        if self.settings.kind != "slurm":
            return f"submitit local executor: {len(todo)} task(s), one at a time, each the papermill command above"
        lines = []
        submitted = {i.phase: [f"<the {stage} array>"] for stage, _, runs in arrays(todo, self.settings)
                     for i in runs if i.stage == "pretrain"}
        for stage, gpus, runs in arrays(todo, self.settings):
            dep = _before(runs, submitted)
            lines += [f"--- {stage} array: {len(runs)} task(s), {gpus} GPU(s) each: "
                      + ", ".join(i.run_id for i in runs[:6]) + (" ..." if len(runs) > 6 else ""),
                      sbatch_script(self.settings, gpus, len(runs), self.folder / "%j", self._name(stage), dep)]
        return "\n".join(lines)

    def _name(self, stage: str) -> str:
        return f"dtype-bench.{self.study.name}" + (f".{stage}" if stage.startswith("pretrain") else "")

    def submit(self, todo: list[Item], wait: bool, flying: list[Item] = ()) -> list:
        """Submit ``todo``; with the local executor (or ``wait``) return once every job ended.
        Runs that load a checkpoint wait for its array or its job still in flight (``flying``)."""
        submitit = require_submitit()
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.settings.kind == "local":
            return self._local(submitit, todo)
        try:
            ex = submitit.SlurmExecutor(folder=self.folder / "%j")
        except RuntimeError as e:  # submitit: srun not found
            raise ConfigError(f"--executor slurm: no Slurm on this machine ({e}); submit from the cluster's "
                              f"login node, or look at the submission with --dry_run") from None
        ledger = read_ledger(self.study, self.root)
        jobs, phase_ids = [], {}  # pretrain phase -> the job ids of its arrays (and of its jobs in flight)
        for i in flying:
            if i.stage == "pretrain":
                phase_ids.setdefault(i.phase, []).append(ledger[i.run_id]["job_id"].split("_")[0])
        for stage, gpus, runs in arrays(todo, self.settings):
            dep = _before(runs, phase_ids)
            ex.update_parameters(**slurm_parameters(self.settings, gpus, self._name(stage), dep))
            got = ex.map_array(run_task, *zip(*(self.task_args(i) for i in runs)))
            self._record(runs, got, "slurm")
            jobs += got
            if stage != "run":
                phase_ids.setdefault(runs[0].phase, []).append(got[0].job_id.split("_")[0])
        if wait:
            self._wait(jobs)
            reconcile(self.study, todo, self.root)
        elif jobs:  # the sweep's analysis, once every array has ended
            ex.update_parameters(**slurm_parameters(dataclasses.replace(self.settings, array_parallelism=1), 0,
                                                    f"dtype-bench.{self.study.name}.analysis",
                                                    "afterany:" + ":".join(dict.fromkeys(j.job_id.split("_")[0] for j in jobs))))
            command = submitit.helpers.CommandFunction(analysis_command(str(self.study.path), str(self.root)),
                                                       cwd=os.getcwd())
            analysis = ex.submit(command)
            print(f"  analysis job {analysis.job_id} runs after them (notebooks, HTML export)")
        return jobs

    def _local(self, submitit, todo: list[Item]) -> list:
        ex = submitit.LocalExecutor(folder=self.folder / "%j")
        jobs = []
        for stage, gpus, runs in arrays(todo, self.settings):
            ex.update_parameters(timeout_min=self.settings.time_min, gpus_per_node=gpus)
            for item in runs:  # one at a time: see the module's docstring
                job = ex.submit(run_task, *self.task_args(item))
                self._record([item], [job], "local")
                jobs.append(job)
                self._wait([job], quiet=True)
        reconcile(self.study, todo, self.root)
        return jobs

    def _record(self, items: list[Item], jobs: list, kind: str) -> None:
        path = cluster_dir(self.study, self.root) / LEDGER
        ledger = read_ledger(self.study, self.root)
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        for i, j in zip(items, jobs):
            ledger[i.run_id] = {"executor": kind, "job_id": str(j.job_id), "folder": str(self.folder / "%j"),
                                "submitted": now, "out_dir": _rel(i.out_dir)}
            print(f"  {kind} job {j.job_id}: {i.run_id}")
        write_json_atomic(path, ledger)

    def _wait(self, jobs: list, quiet: bool = False) -> None:
        from tqdm import tqdm
        bar = None if quiet else tqdm(total=len(jobs), unit="job", desc="jobs ended", dynamic_ncols=True)
        left = list(jobs)
        delay = 1.0
        while left:
            left = [j for j in left if not j.done(force_check=True)]
            if bar is not None:
                bar.update(len(jobs) - len(left) - bar.n)
            if left:
                time.sleep(delay)
                delay = min(delay * 1.5, 30.0)
        if bar is not None:
            bar.close()


# ---- --status --------------------------------------------------------------------------
def status_table(study: Study, items: list[Item], root: Path):
    """Each run's state (done, failed, running, pending, not submitted) and its latest job."""
    import pandas as pd
    ledger = read_ledger(study, root)
    states = job_states({i.run_id: ledger[i.run_id] for i in items if i.run_id in ledger}) if ledger else {}
    rows = []
    for i in items:
        rs, detail = run_state(i)
        sched = states.get(i.run_id)
        if rs.startswith("done"):
            state, detail = "done", rs.split(":", 1)[1]
        elif sched in ACTIVE:
            state, detail = ("pending" if sched in ("PENDING", "REQUEUED", "REQUEUE_HOLD") else "running"), sched.lower()
        elif rs in ("error", "corrupt", "waiting"):
            state = "failed" if rs != "waiting" else "waiting"
            detail = str((readable(i) or {}).get("reason") or "").strip().split("\n")[0] or detail
            if sched in ENDED and sched != "FAILED" and not detail.startswith(ledger[i.run_id]["executor"]):
                detail = f"job {sched}: {detail}"
        else:
            state = "not submitted" if i.run_id not in ledger else "failed"
            detail = detail or (f"job ended {sched} without a record" if i.run_id in ledger else "")
        job = ledger.get(i.run_id, {})
        rows.append({"run": i.run_id, "state": state, "job": f"{job.get('executor', '')} {job.get('job_id', '')}".strip(),
                     "detail": detail[:100]})
    return pd.DataFrame(rows)


def print_status(study: Study, items: list[Item], root: Path) -> int:
    df = status_table(study, items, root)
    counts = df["state"].value_counts()
    print(f"study {study.name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    import pandas as pd
    with pd.option_context("display.max_colwidth", 100, "display.width", 200):
        print(df.to_string(index=False))
    return 0
