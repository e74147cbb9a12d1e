"""One run of a study as every executor runs it: the plan (``Item``, the pretrain stage first),
each run's state on resume, what it is handed (``run_config``) and its execution into a record
(an ``error`` record for a notebook that died before writing one); the sweep's word on a run
goes into its sidecar (``sweep_says``).

The ``pretrain:`` stage runs first, into ``executed/<study>.pretrain/`` (outside the analysis),
each run saving ``<arch>/model``, which runs with ``model_name_or_path: pretrained`` load
(``Item.needs``); a phase that runs again makes the later ones and their runs stale. A run
whose checkpoint is missing gets a ``skipped`` record (``sweep.waiting_for``) and the next sweep
retries it. Records carried from another machine resume as if made here (no absolute path
decides a state); checkpoints are never carried: a lost one that a run still needs is trained
again (``remake``), its record listing the lost one's date under ``sweep.lost_checkpoints`` so
that the runs that loaded it stay finished.
"""
from __future__ import annotations

import importlib.metadata
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib.core.records import (COMPLETED, FINISHED, RECORDS_TABLE, RESULT, SIDECAR, STEPS_FILES, CorruptRecord,
                                   compacted, pretrain_folder, read_record, read_table, write_record, write_sidecar)
from benchlib.core.runconfig import RunConfig, flatten, resolved
from benchlib.core.records import last_line as _last_line
from benchlib.study.studyfile import GROUPS, RunSpec, Study
from benchlib.training.checkpoints import ARCHS, is_complete, model_dir, read_meta

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = {"lm": NOTEBOOK_DIR / "01_train_lm.ipynb", "cls": NOTEBOOK_DIR / "02_train_cls.ipynb"}
TAIL_LINES = 25
WAITING = "waiting for the pretrained checkpoint"  # the reason of a run skipped for want of it
# A pretrain run ending stalled or degraded still saved its model (used, with a warning)
USABLE_PRETRAIN = COMPLETED
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class Item:
    """One run of the sweep: what to execute and where its files go."""
    spec: RunSpec
    notebook: Path  # the executed notebook
    out_dir: Path   # its sidecar folder: result.json, steps.jsonl, papermill.log
    state: str = "new"
    detail: str = ""
    stage: str = "run"            # "pretrain": saves the checkpoint that runs of the study load
    needs: "Item | None" = None   # the pretrain item whose checkpoint this run (or later phase) loads
    label: str | None = None      # pretrain items: pretrain/<arch>, an earlier phase pretrain/<arch>/phase<k>
    phase: int = 0                # pretrain items: which phase (1, 2, ...) of its arch's pretraining
    arch: str | None = None       # pretrain items: the architecture whose checkpoint it makes
    pulled: bool = False          # selected only because a selected run needs it
    stored: dict | None = None    # its record in a compacted study's table (no result.json): read, never run

    @property
    def run_id(self) -> str:
        return self.label or self.spec.run_id

    @property
    def model_dir(self) -> Path:
        """Where a pretrain item's run saves its checkpoint."""
        return model_dir(self.out_dir)

    @property
    def result(self) -> Path:
        return self.out_dir / "result.json"

    @property
    def in_notebook(self) -> bool:
        """Runs through papermill (pretrain phases always); else a cell run (``cells``)."""
        return self.spec.notebook or self.stage == "pretrain"

    @property
    def todo(self) -> bool:
        return not self.state.startswith("done")


def recorded_here(item: Item) -> bool:
    """Whether ``item``, one of this call's runs (its folder cleared before it ran), has a record of
    its own: a readable ``result.json``. A compacted study's old record in its table does not count
    (``readable`` gives that one): a rerun the deadline or an interrupt left unstarted or cut has none."""
    return item.result.exists() and readable(item) is not None


def readable(item: Item) -> dict | None:
    """The item's record, or None where it has none or it is unreadable."""
    if item.stored is not None and not item.result.exists():
        return item.stored
    try:
        return read_record(item.result)
    except CorruptRecord:
        return None


def source_notebook(scenario: str) -> Path:
    return next(NOTEBOOKS[g] for g, members in GROUPS.items() if scenario in members)


def pretrain_root(study: Study, root: Path) -> Path:
    """The pretrain stage's folder: beside the study's, whose records the analysis reads."""
    return pretrain_folder(Path(root) / study.name)


def plan(study: Study, root: Path, stored: dict[Path, dict] | None = None) -> list[Item]:
    """The pretrain items first, phase by phase, then the study's runs (``pretrained`` resolved);
    ``stored``: records of a compacted study by their ``result.json`` path (``stored_records``)."""
    stored = stored or {}
    pre = {arch: pretrain_items(study, root, arch, stored) for arch in ARCHS if arch in study.pretrain}
    checkpoints = {arch: _rel(phases[-1].model_dir) for arch, phases in pre.items()}
    items = []
    for spec in study.runs(checkpoints):
        c = spec.cfg
        base = root / study.name / "runs" / (spec.arm or "") / c.scenario / c.dtype.name
        arch = study.needs_pretrained(c.scenario)
        item = Item(spec, base / f"seed{c.seed}.ipynb", base / f"seed{c.seed}", needs=pre[arch][-1] if arch else None)
        item.stored = stored.get((base / f"seed{c.seed}" / "result.json").resolve())
        _set_state(item)
        items.append(item)
    stage = sorted((i for phases in pre.values() for i in phases), key=lambda i: i.phase)  # stable: GPT-2 first
    return stage + items


def stored_records(*folders: Path) -> dict[Path, dict]:
    """The records of compacted study folders (their tables) by the ``result.json`` path each had."""
    return {Path(r["_path"]).resolve(): r for f in compacted(*folders) for r in read_table(f / RECORDS_TABLE)}


def pretrain_items(study: Study, root: Path, arch: str, stored: dict[Path, dict] | None = None) -> list[Item]:
    """The items of ``arch``'s pretrain phases, in order."""
    base, n, out = pretrain_root(study, root), study.pretrain_phases(arch), []
    for k in range(1, n + 1):
        name, label = (arch, f"pretrain/{arch}") if k == n else (f"{arch}.phase{k}", f"pretrain/{arch}/phase{k}")
        prev = out[-1] if out else None
        spec = study.pretrain_run(arch, k, _rel(prev.model_dir) if prev else None)
        item = Item(spec, base / f"{name}.ipynb", base / name, stage="pretrain", needs=prev, label=label,
                    phase=k, arch=arch, stored=(stored or {}).get((base / name / "result.json").resolve()))
        _set_state(item)
        out.append(item)
    return out


def _set_state(item: Item) -> None:
    """The item's state from its record (stale where its checkpoint is trained again)."""
    item.state, item.detail = run_state(item)
    if item.needs is not None and not item.todo:
        changed = checkpoint_changed(item)
        if changed:
            item.state, item.detail = "stale", changed


def checkpoint_changed(item: Item) -> str:
    """Why a finished run that loads a pretrain checkpoint must run again, or '' (a ``remake``
    of a lost checkpoint changes nothing)."""
    pre = item.needs
    if pre.todo and pre.state != "remake":
        return f"its pretrain run {pre.run_id} runs again"
    mine, now = readable(item), readable(pre)
    if mine is None or now is None:
        return ""
    used = (mine.get("sweep") or {}).get("pretrained") or {}
    # the checkpoint on disk says which training made it (a host may keep a remade model/ whose
    # record it does not have)
    on_disk = (read_meta(pre.model_dir) or {}).get("date") if is_complete(pre.model_dir) else None
    dates = {now["env"].get("date"), on_disk, *((now.get("sweep") or {}).get("lost_checkpoints") or [])} - {None}
    if used.get("date") and now["env"].get("date") and used["date"] not in dates:
        return f"its checkpoint was retrained ({pre.run_id} of {now['env']['date']}, this run loaded {used['date']}'s)"
    return ""


def checkpoint_lost(pre: Item) -> bool:
    """The pretrain item's record says it made a usable checkpoint, which is not here."""
    rec = readable(pre)
    return rec is not None and rec["status"] in USABLE_PRETRAIN and not is_complete(pre.model_dir)


def remake_lost(items: list[Item]) -> list[Item]:
    """Mark ``remake`` (and return) the finished pretrain items whose checkpoint is lost and which
    an item still to run loads or starts from."""
    remade: list[Item] = []
    for item in reversed(items):  # the runs, then the pretrain phases from the last
        pre = item.needs
        if item.todo and pre is not None and not pre.todo and checkpoint_lost(pre):
            pre.state, pre.detail = "remake", f"its checkpoint {_rel(pre.model_dir)} is not here"
            remade.append(pre)
    return remade[::-1]


def pretrain_problem(pre: Item) -> str | None:
    """Why the pretrain item's checkpoint cannot be loaded, or None."""
    rec = readable(pre)
    if rec is None:
        return f"pretrain run {pre.run_id} has no readable record ({_rel(pre.result)})"
    if rec["status"] not in USABLE_PRETRAIN:
        return f"pretrain run {pre.run_id} ({rec['run_id']}) ended {rec['status']}: {_last_line(rec.get('reason'))[:200]}"
    if not is_complete(pre.model_dir):
        return (f"pretrain run {pre.run_id} ({rec['run_id']}) ended {rec['status']} but saved no checkpoint in "
                f"{_rel(pre.model_dir)}")
    return None


def pretrain_warning(pre: Item) -> str | None:
    """A warning where a pretrain checkpoint is used though its run ended degraded or stalled."""
    rec = readable(pre)
    if rec is None or rec["status"] == "ok" or rec["status"] not in USABLE_PRETRAIN or pretrain_problem(pre):
        return None
    return (f"warning: pretrain run {pre.run_id} ({rec['run_id']}) ended {rec['status']}"
            f"{': ' + _last_line(rec.get('reason'))[:200] if rec.get('reason') else ''}; its checkpoint is "
            f"loaded all the same (the records of the runs that load it say pretrained.checkpoint.status "
            f"{rec['status']!r})")


def clear(out_dir: Path) -> None:
    """A run's files from before it runs again: its record, sidecar and step log."""
    for old in (RESULT, SIDECAR, *STEPS_FILES):
        (out_dir / old).unlink(missing_ok=True)


def sweep_says(out_dir: Path, rec: dict, written: bool = True, **keys) -> dict:
    """``rec`` with ``keys`` laid over it in its sidecar (``records.SIDECAR``); a record training
    did not write (``written`` False) is written first."""
    if not written:
        write_record(out_dir, rec)
    write_sidecar(out_dir, rec, **keys)
    return {**rec, **keys}


def waiting_record(item: Item, problem: str) -> dict:
    """A ``skipped`` record for a run whose checkpoint is missing; the next sweep retries it."""
    clear(item.out_dir)
    rec = error_record(item.spec, item.out_dir, f"{WAITING}: {problem}; the next sweep runs it once "
                                                f"{_rel(item.needs.model_dir)} exists")
    return sweep_says(item.out_dir, {**rec, "status": "skipped"}, False, sweep={
        "wall_s": 0.0, "fixed_s": None, "notebook_overhead_s": None, "waiting_for": item.needs.run_id})


def is_waiting(rec: dict) -> bool:
    return rec.get("status") == "skipped" and bool((rec.get("sweep") or {}).get("waiting_for"))


MISSING_PACKAGE = re.compile(r"\(pip install ([\w.-]+)\)")
"""In a ``skipped`` record's reason (``core.env.unsupported_reason``): the package its run lacked."""


def package_now_here(rec: dict) -> str | None:
    """The package a ``skipped`` run lacked (its reason names it, its record's ``env`` has no
    version of it) that this environment now has, else None: such a run is retried. A package
    present but broken leaves a record with its version, which is not retried again."""
    m = MISSING_PACKAGE.search(str(rec.get("reason") or "")) if rec.get("status") == "skipped" else None
    if not m or (rec.get("env") or {}).get(m.group(1)) is not None:
        return None
    try:
        return f"{m.group(1)} {importlib.metadata.version(m.group(1))}"
    except importlib.metadata.PackageNotFoundError:
        return None


def run_state(item: Item) -> tuple[str, str]:
    """(state, detail): done:<status> (skipped on resume), or why it runs: new / error / corrupt
    / stale / unfinished / waiting / retry (skipped for want of a package installed now)."""
    if not item.result.exists() and item.stored is None:
        return "new", ""
    try:
        rec = read_record(item.result) if item.result.exists() else item.stored
    except CorruptRecord as e:
        return "corrupt", str(e)
    if is_waiting(rec):
        return "waiting", _last_line(rec.get("reason"))
    if rec["status"] not in FINISHED:
        return "error", _last_line(rec.get("reason"))
    if pkg := package_now_here(rec):
        return "retry", f"skipped for want of a package, {pkg} is installed now"
    # where the checkpoint lies depends on the machine (which one it loaded: checkpoint_changed)
    changed = stale_keys(rec, item.spec.params, ("model_name_or_path",) if item.needs is not None else ())
    if changed:
        return "stale", "parameters changed: " + ", ".join(changed)
    if "sweep" not in rec:
        # training wrote its record but the notebook around it never finished: run it again
        return "unfinished", "the record has no sweep entry: its notebook did not finish"
    return f"done:{rec['status']}", ""


READING_KEYS = ("judge_quality",)
"""RunConfig keys that decide how the analysis reads a run, not what it trains."""


def refresh_reading(items: list[Item]) -> list[tuple[Item, dict]]:
    """Finished runs whose record holds other ``READING_KEYS`` than the study asks: the record's
    ``run`` takes the study's values (the old under ``run_reading_was``), nothing trains again.
    Returns (item, {key: (old, new)})."""
    done = []
    for item in items:
        rec = None if item.todo else readable(item)
        if rec is None:
            continue
        had = {k: rec["run"].get(k, RunConfig.__dataclass_fields__[k].default) for k in READING_KEYS}
        changed = {k: (had[k], getattr(item.spec.cfg, k)) for k in READING_KEYS if had[k] != getattr(item.spec.cfg, k)}
        if changed:
            sweep_says(item.out_dir, rec, run={**rec["run"], **{k: new for k, (_, new) in changed.items()}},
                       run_reading_was={**rec.get("run_reading_was", {}), **{k: old for k, (old, _) in changed.items()}})
            done.append((item, changed))
    return done


def stale_keys(rec: dict, params: dict, skip: tuple = ()) -> list[str]:
    """Settings of the study that the record was not run with, but for ``skip`` and its place."""
    # run holds what was trained (the data's vocabulary and labels); data.asked what was asked
    ran = {**flatten(rec.get("run", {})), **((rec.get("data") or {}).get("asked") or {})}
    skip = ("out_dir", "extra", "scenario", "config", "state_every", *READING_KEYS, *skip)
    return [f"{k} {ran.get(k)!r} -> {v!r}" for k, v in flatten(params).items()
            if k not in skip and v is not None and v != "auto" and ran.get(k) != v and not _inapplicable(k, v, ran)]


def _inapplicable(key: str, asked, ran: dict) -> bool:
    """A request the run could not apply and records as off (CUDA graphs of an uncompiled or CPU
    run): running it again would record the same."""
    return key == "cudagraphs" and asked is True and (ran.get("compile") == "off" or ran.get("device") != "cuda")


# ---- executing one run ----------------------------------------------------------------
def run_config(item: Item) -> dict:
    """What every run is handed (notebook, cell or Slurm task): its resolved configuration."""
    return resolved(item.spec.cfg).replace(out_dir=_rel(item.out_dir)).to_dict()


def papermill_command(item: Item) -> list[str]:
    """The papermill command of one run: ``run_config`` injected as the notebook's parameter."""
    return notebook_command(item.spec.cfg.scenario, item.notebook, run_config(item))


def notebook_command(scenario: str, notebook: Path, config: dict) -> list[str]:
    """papermill executing ``scenario``'s training notebook into ``notebook`` with ``config`` injected."""
    import yaml
    inline = yaml.safe_dump({"run_config": config}, default_flow_style=True, sort_keys=False, width=1 << 20)
    return ["papermill", _rel(source_notebook(scenario)), _rel(notebook), "-y", inline.strip()]


def injected(cmd: list[str]) -> dict:
    """The ``run_config`` a ``papermill_command`` injects."""
    import yaml
    return yaml.safe_load(cmd[cmd.index("-y") + 1])["run_config"]


def _rel(p: Path) -> str:
    """Relative to the current directory when below it (readable, copy-pastable), else absolute."""
    p = Path(p).absolute()
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def kernel_env(slot: dict) -> dict:
    """The run's environment: this benchlib importable, the slot's GPU, static charts."""
    from benchlib.core.env import STATIC_CHARTS_ENV
    env = dict(os.environ, **slot, PYTHONUNBUFFERED="1", **{STATIC_CHARTS_ENV: "1"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


# papermill's command line without rfc3987_syntax (~1.4 s of grammar for no schema here) and with
# SIGUSR2 ignored: a scheduler's warning is for the task around papermill, which writes the record.
PAPERMILL_MAIN = ("import sys, signal; sys.modules.setdefault('rfc3987_syntax', None); "
                  "signal.signal(signal.SIGUSR2, signal.SIG_IGN); "
                  "signal.signal(signal.SIGINT, lambda n, f: (signal.signal(n, signal.SIG_IGN), "
                  "signal.default_int_handler(n, f))); "  # sigint_once, inline: importing it would load torch here
                  "sys.argv[0] = 'papermill'; from papermill.cli import papermill; papermill()")


RUNNING: set = set()  # the processes running now: what a time budget's deadline interrupts


def interrupt(procs) -> None:
    """Ctrl-C to each of ``procs``, marked ``interrupted`` (whatever its exit code, it reads as an
    interruption: ``execute_argv``). The sweep's children hear of an interruption only so: a
    SIGINT sent to the sweep alone (``timeout -s INT``, ``kill -INT``, a scheduler, a deadline)
    reaches no child, and the sweep would wait for each to train to its end."""
    for proc in list(procs):
        proc.interrupted = True
        try:
            proc.send_signal(signal.SIGINT)
        except (OSError, ValueError):  # already gone
            pass


def sigint_once(signum, frame) -> None:
    """A child's SIGINT handler: the first one stops it (KeyboardInterrupt), later ones are
    ignored, so that a Ctrl-C typed at a terminal (which reaches the whole process group) and the
    same Ctrl-C forwarded by the sweep (``interrupt``) stop it once and let it write what it keeps."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.default_int_handler(signum, frame)


INTERRUPT_WAIT_S = 60  # how long an interrupted child may take to stop (papermill shuts its kernel down)
START_TIMEOUT_S = 300  # papermill's wait for a kernel (its 60 s: too short for 12 starting together)


def execute(cmd: list[str], env: dict, log: Path, timeout: int | None = None) -> int:
    """Run papermill as a child process, its output to ``log`` (``execute_argv``)."""
    argv = [sys.executable, "-c", PAPERMILL_MAIN, *cmd[1:], "--no-progress-bar", "--start-timeout", str(START_TIMEOUT_S)]
    if timeout:
        argv += ["--execution-timeout", str(timeout)]
    return execute_argv(argv, env, log)


CPUS_ENV = "DTYPE_BENCH_CPUS"
"""A slot's cores (``--cpus``): ``execute_argv`` starts the run's process pinned to them, so its
threads and the compiler's workers stay off the cores of runs timed beside it."""


def parse_cpus(text: str, allowed: set[int] | None = None) -> list[int]:
    """The cores of a list such as ``0-15,32-47``, in order; a one-line error naming what is
    malformed or outside the cores this process may use (``allowed``, default its affinity)."""
    cores: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        lo, _, hi = part.partition("-")
        if not (lo.isdigit() and (not hi or hi.isdigit())) or (hi and int(hi) < int(lo)):
            raise ValueError(f"--cpus {text}: {part or 'an empty item'!r} is not a core or a range like 0-15")
        cores.update(range(int(lo), int(hi or lo) + 1))
    allowed = set(os.sched_getaffinity(0)) if allowed is None else allowed
    if cores - allowed:
        raise ValueError(f"--cpus {text}: core(s) {format_cpus(sorted(cores - allowed))} are not available here "
                         f"(this process may use {format_cpus(sorted(allowed))})")
    return sorted(cores)


def format_cpus(cores: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    runs: list[list[int]] = []
    for c in cores:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


# Pins itself to the cores of argv[1], then becomes argv[2:] (exec keeps the affinity): the sweep's
# threads start runs, and a preexec_fn is not safe in a process with threads.
PIN_AND_EXEC = ("import os, sys; os.sched_setaffinity(0, [int(c) for c in sys.argv[1].split(',')]); "
                "os.execvp(sys.argv[2], sys.argv[2:])")


def execute_argv(argv: list[str], env: dict, log: Path, timeout: float | None = None) -> int:
    """Run ``argv`` as a child process (one of ``RUNNING``), its output to ``log``, killed after
    ``timeout`` seconds (exit -9); a Ctrl-C here is passed on to it (``interrupt``) and we wait
    for it to stop (``INTERRUPT_WAIT_S``, then it is killed)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        if env.get(CPUS_ENV):  # the slot's cores (--cpus): the process and all it starts stay on them
            argv = [sys.executable, "-c", PIN_AND_EXEC, ",".join(map(str, parse_cpus(env[CPUS_ENV]))), *argv]
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
        RUNNING.add(proc)
        try:
            rc = proc.wait(timeout=timeout)
            # Ctrl-C sent by a time budget (Budget.watch): papermill exits 1 ("Aborted!") when the
            # kernel's socket closes under it; the run was interrupted, not failed
            return -signal.SIGINT if getattr(proc, "interrupted", False) else rc
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                interrupt([proc])  # a SIGINT sent to this process alone reached no child
            else:
                proc.terminate()
            try:
                proc.wait(timeout=INTERRUPT_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
        finally:
            RUNNING.discard(proc)


def log_tail(log: Path, n: int = TAIL_LINES) -> str:
    try:
        lines = _ANSI.sub("", log.read_text(errors="replace")).splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def error_record(spec: RunSpec, out_dir: Path, reason: str) -> dict:
    """A complete ``error`` record for a run whose notebook died before writing one."""
    import torch

    from benchlib.core.env import pick_device
    from benchlib.core.records import new_record
    try:
        device = pick_device(spec.cfg.device)
    except RuntimeError:
        device = torch.device("cpu")
    cfg = resolved(spec.cfg).replace(out_dir=str(out_dir))
    return {**new_record(cfg, device), "reason": reason}


KERNEL_START_RETRIES = 2
KERNEL_NEVER_STARTED = "Kernel died before replying to kernel_info"
"""nbclient's error when the notebook's kernel dies while starting, before any cell ran. Kernels
started in the same second can collide: jupyter_client picks the kernel's ports before the kernel
binds them (jupyter/jupyter_client#154). Seen on an H200 host when two sweeps started a notebook
at once; ``run_one`` starts such a notebook again."""


def kernel_never_started(item: Item, log: Path) -> bool:
    """Whether a failed notebook's kernel died before running a cell (nothing trained, no record)."""
    return not item.result.exists() and KERNEL_NEVER_STARTED in log_tail(log)


def run_one(item: Item, slot: dict, timeout: int | None = None,
            sweep_extra: dict | None = None) -> dict:
    """Execute one run's notebook and return its record (an ``error`` one with papermill's last
    lines where it failed); ``sweep_extra`` goes into the record's ``sweep`` entry."""
    clear(item.out_dir)
    log = item.out_dir / "papermill.log"
    t0 = time.perf_counter()
    restarts = 0
    while True:
        try:
            rc = execute(papermill_command(item), kernel_env(slot), log, timeout)
        except KeyboardInterrupt:
            _mark_interrupted(item)
            raise
        except OSError as e:
            rc = 1
            log.write_text(f"could not start papermill: {e}")
        if rc == 0 or restarts >= KERNEL_START_RETRIES or not kernel_never_started(item, log):
            break
        restarts += 1  # nothing ran: start the same notebook again, a moment later
        time.sleep(random.uniform(1.0, 5.0))
    if restarts:
        sweep_extra = {**(sweep_extra or {}), "kernel_restarts": restarts}
    rec, unreadable, over = None, "it wrote no result.json", {}
    try:
        rec = read_record(item.result)
    except CorruptRecord as e:
        if item.result.exists():
            unreadable = f"its result.json is unreadable: {e}"
    written = rec is not None
    if rc != 0:
        if rc == -signal.SIGINT:
            _mark_interrupted(item)
            raise KeyboardInterrupt
        how = f"killed by {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.valid_signals() else "failed"
        reason = f"notebook {how} (papermill exit {rc}):\n{log_tail(log)}"
        if rec is not None:
            over = {"status": "error", "reason": reason + f"\n(the training itself had ended with status {rec['status']!r})"}
        else:
            rec = error_record(item.spec, item.out_dir, reason)
    elif rec is None:
        rec = error_record(item.spec, item.out_dir, f"the notebook ran but {unreadable}\n{log_tail(log)}")
    sweep = {**sweep_timing(rec, time.perf_counter() - t0), **(sweep_extra or {})}
    return sweep_says(item.out_dir, rec, written, sweep=sweep, **over)


def execute_unit(unit: list[Item], slot: dict, timeout: int | None = None,
                 sweep_extra: dict | None = None, run_cell=None) -> list[tuple[Item, dict]]:
    """Execute a unit (``cells``) and return [(item, record)]: a run with a notebook through it;
    the runs without go to ``run_cell(items, slot, timeout, sweep_extra)`` (the host's), else
    each through its notebook. A run whose checkpoint is missing gets a ``waiting`` record."""
    extra, out, cell = dict(sweep_extra or {}), [], []
    for item in unit:
        if item.stage == "pretrain" and checkpoint_lost(item):  # the runs that loaded the lost one stay valid
            old = read_record(item.result)
            lost = [*((old.get("sweep") or {}).get("lost_checkpoints") or []), old["env"].get("date")]
            extra["lost_checkpoints"] = lost
        problem = pretrain_problem(item.needs) if item.needs is not None else None
        if problem:
            out.append((item, waiting_record(item, problem)))
        elif item.in_notebook or run_cell is None:
            out.append((item, run_one(item, slot, timeout, {**loaded(item), **extra})))
        else:
            cell.append(item)
    if cell:
        out += run_cell(cell, slot, timeout, extra)
    return out


def loaded(item: Item) -> dict:
    """``sweep.pretrained`` of a run that loads a checkpoint: which training made it."""
    pre = item.needs
    if pre is None:
        return {}
    rec = readable(pre)
    return {"pretrained": None} if rec is None else {"pretrained": {
        "run": pre.run_id, "run_id": rec["run_id"], "date": rec["env"].get("date"), "model": _rel(pre.model_dir)}}


def cells(items: list[Item], slots: int = 1) -> list[list[Item]]:
    """``items`` as units of execution, in order: each run with a notebook alone; the runs
    without of one (arm, scenario, config) cell together, where the first of them stood. Where
    there are fewer units than ``slots``, the longest cell is halved (seeds in order) until every
    slot has one or no cell has two runs: one process a cell would leave the other slots idle."""
    units: list[list[Item]] = []
    by_cell: dict[tuple, list[Item]] = {}
    for item in items:
        if item.in_notebook:
            units.append([item])
            continue
        c = item.spec.cfg
        key = (item.spec.arm, c.scenario, c.dtype.name)
        if key not in by_cell:
            by_cell[key] = []
            units.append(by_cell[key])
        by_cell[key].append(item)
    while units and len(units) < slots:
        k = max(range(len(units)), key=lambda j: len(units[j]))
        if len(units[k]) < 2:
            break
        half = (len(units[k]) + 1) // 2
        units[k:k + 1] = [units[k][:half], units[k][half:]]
    return units


def sweep_timing(rec: dict, wall_s: float) -> dict:
    """What one run cost the sweep: its wall time and the part that does not scale with steps,
    ``fixed_s`` = wall - ``time/steps_s``."""
    steps_s = rec.get("metrics", {}).get("time/steps_s")
    return {"wall_s": wall_s, "fixed_s": None if steps_s is None else wall_s - steps_s,
            "notebook_overhead_s": None if rec.get("wall_s") is None else wall_s - rec["wall_s"]}


def steps_share(timings: list[dict], wall_s: float, slots: int = 1, cut_s: float = 0.0) -> float | None:
    """The share of the sweep's slot time (``slots`` x wall) spent in training steps, or None:
    the finished runs' steps and ``cut_s``, those of runs it cut that their saved state keeps."""
    steps = sum(t["wall_s"] - t["fixed_s"] for t in timings if t.get("fixed_s") is not None) + cut_s
    return steps / (wall_s * max(slots, 1)) if wall_s > 0 and (timings or cut_s) else None


def cut_steps_s(items: list[Item], since: float) -> tuple[float, int]:
    """The seconds of training steps that runs of ``items`` without a finished record made in
    their last process and kept in a state saved after ``since`` (``time.time()``: a sweep's
    start), e.g. at a time budget's deadline (``resume.STEP_FILE``); and how many such runs."""
    from benchlib.training.resume import saved_step
    total, n = 0.0, 0
    for item in items:
        s = saved_step(item.out_dir)
        if readable(item) is None and s and (s.get("date") or 0) >= since and s.get("steps_s") is not None:
            total, n = total + float(s["steps_s"]), n + 1
    return total, n


def _mark_interrupted(item: Item) -> None:
    """A run is finished only when its notebook is: a record written before Ctrl-C becomes an error."""
    rec = readable(item)
    if rec is not None:
        sweep_says(item.out_dir, rec, status="error",
                   reason=f"interrupted before the notebook finished (training ended {rec['status']!r})",
                   sweep={**(rec.get("sweep") or {}), "interrupted": True})  # not run yet: no analysis reads it
