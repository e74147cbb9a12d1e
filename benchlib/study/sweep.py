"""``dtype-bench sweep params/X.yaml``: run a study's notebooks through papermill.

Each run is one papermill process with its own kernel (a crash, OOM or dead kernel is that
run's record, and the sweep goes on) executing the scenario family's notebook into
``executed/<study>/runs/<scenario>/<config>/seed<k>.ipynb``; its record and step log land
in the sidecar folder ``seed<k>/`` (``result.json``, ``steps.jsonl``, ``papermill.log``).
Re-running the same command resumes: finished records (ok / degraded / stalled / diverged /
oom / skipped) are skipped, errors, corrupt or stale records are run again. Seed 004: ``--dry-run`` previews
the exact commands.

A study with a ``pretrain:`` stage (``benchlib.study.studyfile``) runs it first, as ordinary runs
executed into ``executed/<study>.pretrain/<arch>.ipynb`` + ``<arch>/`` (beside the study's
folder, so its records never enter the study's analysis), each saving its model to
``<arch>/model``. Runs with ``model_name_or_path: pretrained`` get that directory in their
configuration (and record), and run with every setting given inline (``papermill -y``).
Where the checkpoint is missing (its pretrain run failed), they get a ``skipped`` record
whose ``sweep.waiting_for`` names the pretrain run, and the next sweep tries them again. A
pretrain run that ended degraded or stalled still hands its checkpoint on, with a warning;
the runs that load it say so in ``pretrained.checkpoint.status`` of their records.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from benchlib.core.argparser import ArgumentParser
from benchlib.core.dtypes import ALIASES
from benchlib.study.html_export import export_study_html
from benchlib.study.html_export import fmt as _fmt
from benchlib.study.html_export import last_line as _last_line
from benchlib.training.checkpoints import is_complete, model_dir
from benchlib.core.records import COMPLETED, FINISHED, TRAINED, CorruptRecord, read_record, write_json_atomic
from benchlib.core.runconfig import flatten, ConfigError
from benchlib.study.studyfile import GROUPS, RunSpec, Study, load_study

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = {"lm": NOTEBOOK_DIR / "01_train_lm.ipynb", "cls": NOTEBOOK_DIR / "02_train_cls.ipynb"}
ANALYSIS = {"10_analyze_experiment.ipynb": {"scenario": None}, "11_compare_experiments.ipynb": {}}
ARMS_ANALYSIS = {"20_scaling.ipynb": {}}
"""A study with ``arms:`` compares strategies rather than dtype configs: its analysis is the
scaling notebook's."""
TAIL_LINES = 25
# The reason of a run skipped because the checkpoint it loads is not there (yet); such a
# record also carries sweep.waiting_for, and resume runs it again (state "waiting").
WAITING = "waiting for the pretrained checkpoint"
# A pretrain run whose record ends in one of these hands its checkpoint on: one that did not
# beat its trivial baseline (stalled) or got worse after its best (degraded) still trained to
# the end and saved its model (with a warning); a diverged one did not.
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
    needs: "Item | None" = None   # the pretrain item whose checkpoint this run loads
    label: str | None = None      # pretrain items: pretrain/<arch>
    pulled: bool = False          # selected only because a selected run needs it

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
    def todo(self) -> bool:
        return not self.state.startswith("done")


def source_notebook(scenario: str) -> Path:
    return next(NOTEBOOKS[g] for g, members in GROUPS.items() if scenario in members)


def pretrain_root(study: Study, root: Path) -> Path:
    """The pretrain stage's folder: beside the study's, whose records the analysis reads."""
    return Path(root) / f"{study.name}.pretrain"


def plan(study: Study, root: Path) -> list[Item]:
    """The pretrain items first (one per arch of ``pretrain:``), then the study's runs, with
    ``pretrained`` resolved to the pretrain item's model directory."""
    pre: dict[str, Item] = {}
    for arch, spec in study.pretrain_runs().items():
        base = pretrain_root(study, root)
        item = Item(spec, base / f"{arch}.ipynb", base / arch, stage="pretrain", label=f"pretrain/{arch}")
        item.state, item.detail = run_state(item)
        pre[arch] = item
    checkpoints = {arch: _rel(i.model_dir) for arch, i in pre.items()}
    items = []
    for spec in study.runs(checkpoints):
        c = spec.cfg
        base = root / study.name / "runs" / (spec.arm or "") / c.scenario / c.dtype.name
        arch = study.needs_pretrained(c.scenario)
        item = Item(spec, base / f"seed{c.seed}.ipynb", base / f"seed{c.seed}", needs=pre.get(arch) if arch else None)
        item.state, item.detail = run_state(item)
        if item.needs is not None and not item.todo:
            changed = checkpoint_changed(item)
            if changed:
                item.state, item.detail = "stale", changed
        items.append(item)
    return list(pre.values()) + items


def pretrain_stamp(pre: Item) -> dict | None:
    """Which training made the pretrain item's checkpoint (kept in the records of the runs
    that loaded it): its run, record date and model directory."""
    try:
        rec = read_record(pre.result)
    except CorruptRecord:
        return None
    return {"run": pre.run_id, "run_id": rec["run_id"], "date": rec["env"].get("date"), "model": _rel(pre.model_dir)}


def checkpoint_changed(item: Item) -> str:
    """Why a finished run that loads a pretrain checkpoint must run again, or ''."""
    pre = item.needs
    if pre.todo:
        return f"its pretrain run {pre.run_id} runs again"
    try:
        used = (read_record(item.result).get("sweep") or {}).get("pretrained") or {}
    except CorruptRecord:
        return ""
    now = pretrain_stamp(pre) or {}
    if used.get("date") and now.get("date") and used["date"] != now["date"]:
        return f"its checkpoint was retrained ({pre.run_id} of {now['date']}, this run loaded {used['date']}'s)"
    return ""


def pretrain_problem(pre: Item) -> str | None:
    """Why the pretrain item's checkpoint cannot be loaded, or None."""
    try:
        rec = read_record(pre.result)
    except CorruptRecord:
        return f"pretrain run {pre.run_id} has no readable record ({_rel(pre.result)})"
    if rec["status"] not in USABLE_PRETRAIN:
        return f"pretrain run {pre.run_id} ({rec['run_id']}) ended {rec['status']}: {_last_line(rec.get('reason'))[:200]}"
    if not is_complete(pre.model_dir):
        return (f"pretrain run {pre.run_id} ({rec['run_id']}) ended {rec['status']} but saved no checkpoint in "
                f"{_rel(pre.model_dir)}")
    return None


def pretrain_warning(pre: Item) -> str | None:
    """A warning line when a pretrain item's checkpoint is usable but its run did not end ok
    (degraded, stalled), else None."""
    try:
        rec = read_record(pre.result)
    except CorruptRecord:
        return None
    if rec["status"] == "ok" or rec["status"] not in USABLE_PRETRAIN or pretrain_problem(pre):
        return None
    return (f"warning: pretrain run {pre.run_id} ({rec['run_id']}) ended {rec['status']}"
            f"{': ' + _last_line(rec.get('reason'))[:200] if rec.get('reason') else ''}; its checkpoint is "
            f"loaded all the same (the records of the runs that load it say pretrained.checkpoint.status "
            f"{rec['status']!r})")


def waiting_record(item: Item, problem: str) -> dict:
    """A ``skipped`` record for a run whose checkpoint is missing; the next sweep retries it."""
    for old in ("result.json", "steps.jsonl"):
        (item.out_dir / old).unlink(missing_ok=True)
    rec = error_record(item.spec, item.out_dir, f"{WAITING}: {problem}; the next sweep runs it once "
                                                f"{_rel(item.needs.model_dir)} exists")
    rec["status"] = "skipped"
    rec["sweep"] = {"wall_s": 0.0, "fixed_s": None, "notebook_overhead_s": None, "waiting_for": item.needs.run_id}
    write_json_atomic(item.result, rec)
    return rec


def is_waiting(rec: dict) -> bool:
    return rec.get("status") == "skipped" and bool((rec.get("sweep") or {}).get("waiting_for")
                                                   or str(rec.get("reason") or "").startswith(WAITING))


def run_state(item: Item) -> tuple[str, str]:
    """done:<status> (skipped on resume), or why it runs: new / error / corrupt / stale /
    unfinished (a record the sweep did not complete) / waiting (skipped for want of its
    pretrained checkpoint)."""
    if not item.result.exists():
        return "new", ""
    try:
        rec = read_record(item.result)
    except CorruptRecord as e:
        return "corrupt", str(e)
    if is_waiting(rec):
        return "waiting", _last_line(rec.get("reason"))
    if rec["status"] not in FINISHED:
        return "error", _last_line(rec.get("reason"))
    changed = stale_keys(rec, item.spec.params)
    if changed:
        return "stale", "parameters changed: " + ", ".join(changed)
    if "sweep" not in rec:
        # training wrote its record but the notebook around it never finished (the sweep was
        # killed, e.g. by a time limit, before it could add its own entry): run it again
        return "unfinished", "the record has no sweep entry: its notebook did not finish"
    return f"done:{rec['status']}", ""


def stale_keys(rec: dict, params: dict) -> list[str]:
    """Settings of the study that the record was not run with (the study file changed)."""
    # run holds what was trained (the data's vocabulary and labels); data.asked what was asked
    ran = {**flatten(rec.get("run", {})), **((rec.get("data") or {}).get("asked") or {})}
    skip = ("out_dir", "extra", "scenario", "config")
    return [f"{k} {ran.get(k)!r} -> {v!r}" for k, v in flatten(params).items()
            if k not in skip and v is not None and v != "auto" and ran.get(k) != v]


def select(items: list[Item], only: list[str], scenarios: list[str], configs: list[str],
           seeds: list[int]) -> list[Item]:
    """The runs the filters pick, after the pretrain items they need (``pulled``). Pretrain
    items are picked by --only (pretrain/<arch>), by a picked run that loads their checkpoint,
    or when nothing is filtered."""
    pre = [i for i in items if i.stage == "pretrain"]
    items = [i for i in items if i.stage != "pretrain"]
    filtered = bool(only or scenarios or configs or seeds)
    picked_pre = [p for p in pre if not filtered or any(fnmatch.fnmatchcase(p.run_id, g) for g in only)]
    scenarios = [s.upper() for s in scenarios]
    configs = [ALIASES.get(c, c) for c in configs]
    study_vals = {"--scenario": {i.spec.cfg.scenario for i in items}, "--config": {i.spec.cfg.dtype.name for i in items},
                  "--seed": {i.spec.cfg.seed for i in items}}
    for flag, wanted in (("--scenario", scenarios), ("--config", configs), ("--seed", seeds)):
        bad = [w for w in wanted if w not in study_vals[flag]]
        if bad:
            valid = ", ".join(map(str, sorted(study_vals[flag])))
            raise ConfigError(f"{flag} {bad[0]!r} is not in this study. Valid: {valid}")
    out = [i for i in items
           if (not only or any(fnmatch.fnmatchcase(i.run_id, p) for p in only))
           and (not scenarios or i.spec.cfg.scenario in scenarios)
           and (not configs or i.spec.cfg.dtype.name in configs)
           and (not seeds or i.spec.cfg.seed in seeds)]
    if not out and not picked_pre:
        raise ConfigError(f"no run of the study matches --only {' '.join(only)} (run ids look like A/amp_bf16/seed0)")
    for p in pre:
        p.pulled = p not in picked_pre and any(i.needs is p for i in out)
    return [p for p in pre if p in picked_pre or p.pulled] + out


# ---- executing one run ----------------------------------------------------------------
def papermill_command(item: Item, study_file: Path) -> list[str]:
    """The plain papermill command of one run: the study file supplies the settings, -p the
    run's identity. Paths are relative to the current directory where possible. A pretrain
    run, and a run that loads its checkpoint, get every setting inline instead (-y): their
    settings are not the study file's for that scenario."""
    c = item.spec.cfg
    if item.stage == "pretrain" or item.needs is not None or item.spec.arm:
        import yaml
        params = {k: v for k, v in item.spec.params.items() if k != "out_dir"}
        inline = yaml.safe_dump(params, default_flow_style=True, sort_keys=False, width=1 << 20).strip()
        return ["papermill", _rel(source_notebook(c.scenario)), _rel(item.notebook), "-y", inline,
                "-p", "out_dir", _rel(item.out_dir)]
    return ["papermill", _rel(source_notebook(c.scenario)), _rel(item.notebook), "-f", _rel(study_file),
            "-p", "scenario", c.scenario, "-p", "config", c.dtype.name, "-p", "seed", str(c.seed),
            "-p", "out_dir", _rel(item.out_dir)]


def _rel(p: Path) -> str:
    """Relative to the current directory when below it (readable, copy-pastable), else absolute."""
    p = Path(p).absolute()
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _n(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def kernel_env(slot: dict) -> dict:
    """The run's environment: this benchlib importable from the kernel, the slot's GPU."""
    env = dict(os.environ, **slot, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


# papermill's own command line, minus a second of import time: jsonschema (under nbformat
# and altair) imports rfc3987_syntax when installed (JupyterLab's environment has it) only to
# check "iri" string formats, which no notebook or chart schema uses; building its grammar
# takes ~1.4 s in every process (benchlib/__init__.py does the same inside the kernel).
PAPERMILL_MAIN = ("import sys; sys.modules.setdefault('rfc3987_syntax', None); "
                  "sys.argv[0] = 'papermill'; from papermill.cli import papermill; papermill()")


def execute(cmd: list[str], env: dict, log: Path, timeout: int | None = None) -> int:
    """Run papermill as a child process, its output to ``log``; Ctrl-C reaches it too
    (same process group), and we wait for it to shut its kernel down."""
    argv = [sys.executable, "-c", PAPERMILL_MAIN, *cmd[1:], "--no-progress-bar"]
    if timeout:
        argv += ["--execution-timeout", str(timeout)]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
        try:
            return proc.wait()
        except BaseException:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise


def log_tail(log: Path, n: int = TAIL_LINES) -> str:
    try:
        lines = _ANSI.sub("", log.read_text(errors="replace")).splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def error_record(spec: RunSpec, out_dir: Path, reason: str) -> dict:
    """A complete ``error`` record (every key ``records.validate`` requires) for a run whose
    notebook died before writing one."""
    import torch

    from benchlib.core.env import pick_device
    from benchlib.core.runconfig import resolved
    from benchlib.core.records import new_record
    try:
        device = pick_device(spec.cfg.device)
    except RuntimeError:
        device = torch.device("cpu")
    cfg = resolved(spec.cfg).replace(out_dir=str(out_dir))
    return {**new_record(cfg, device), "reason": reason}


def run_one(item: Item, study_file: Path, slot: dict, timeout: int | None = None,
            sweep_extra: dict | None = None) -> dict:
    """Execute one run's notebook and return its record; a failed notebook becomes an
    ``error`` record holding the last lines of papermill's output. ``sweep_extra`` goes into
    the record's ``sweep`` entry."""
    for old in ("result.json", "steps.jsonl"):
        (item.out_dir / old).unlink(missing_ok=True)
    log = item.out_dir / "papermill.log"
    t0 = time.perf_counter()
    try:
        rc = execute(papermill_command(item, study_file), kernel_env(slot), log, timeout)
    except KeyboardInterrupt:
        _mark_interrupted(item)
        raise
    except OSError as e:
        rc = 1
        log.write_text(f"could not start papermill: {e}")
    rec, unreadable = None, "it wrote no result.json"
    try:
        rec = read_record(item.result)
    except CorruptRecord as e:
        if item.result.exists():
            unreadable = f"its result.json is unreadable: {e}"
    if rc != 0:
        if rc == -signal.SIGINT:
            _mark_interrupted(item)
            raise KeyboardInterrupt
        reason = f"notebook failed (papermill exit {rc}):\n{log_tail(log)}"
        if rec is not None:
            reason += f"\n(the training itself had ended with status {rec['status']!r})"
            rec = {**rec, "status": "error", "reason": reason}
        else:
            rec = error_record(item.spec, item.out_dir, reason)
    elif rec is None:
        rec = error_record(item.spec, item.out_dir, f"the notebook ran but {unreadable}\n{log_tail(log)}")
    rec["sweep"] = {**sweep_timing(rec, time.perf_counter() - t0), **(sweep_extra or {})}
    write_json_atomic(item.result, rec)
    return rec


def sweep_timing(rec: dict, wall_s: float) -> dict:
    """What one run cost the sweep: its wall time (papermill, kernel, notebook) and the part
    that does not scale with steps, ``fixed_s`` = wall - ``time/steps_s`` (kernel start,
    imports, data, model, compilation and the first step, evaluation, charts, writing)."""
    steps_s = rec.get("metrics", {}).get("time/steps_s")
    return {"wall_s": wall_s, "fixed_s": None if steps_s is None else wall_s - steps_s,
            "notebook_overhead_s": None if rec.get("wall_s") is None else wall_s - rec["wall_s"]}


def _mark_interrupted(item: Item) -> None:
    """Training may have written a finished record before Ctrl-C stopped the notebook; the
    run is finished only when its notebook is, so the record becomes an ``error``."""
    try:
        rec = read_record(item.result)
    except CorruptRecord:
        return
    write_json_atomic(item.result, {**rec, "status": "error",
                                    "reason": f"interrupted before the notebook finished (training ended {rec['status']!r})"})


# ---- scheduling ---------------------------------------------------------------------
def visible_gpus() -> list[str]:
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return [g.strip() for g in cvd.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import torch
        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


def slots_for(jobs: int, gpus: list[str], per_run: int = 1) -> list[dict]:
    """One slot per concurrent run: ``per_run`` GPUs each (CUDA_VISIBLE_DEVICES; a multi-process
    arm needs as many as its ``dist.nproc``); on CPU a single slot, since side-by-side CPU runs
    would only measure each other."""
    if jobs <= 1 or not gpus or len(gpus) < 2 * per_run:
        return [{}]
    groups = [gpus[i:i + per_run] for i in range(0, len(gpus) - per_run + 1, per_run)]
    return [{"CUDA_VISIBLE_DEVICES": ",".join(g)} for g in groups[:jobs]]


def run_all(items: list, slots: list[dict], fn: Callable, on_start: Callable = lambda i, s: None,
            on_done: Callable = lambda i, r: None) -> None:
    """Run ``fn(item, slot)`` for every item, at most one at a time per slot."""
    free: queue.Queue = queue.Queue()
    for s in slots:
        free.put(s)

    def task(item):
        slot = free.get()
        try:
            on_start(item, slot)
            return item, fn(item, slot)
        finally:
            free.put(slot)

    if len(slots) == 1:
        for item in items:
            on_done(*task(item))
        return
    pool = ThreadPoolExecutor(len(slots))
    try:
        for f in as_completed([pool.submit(task, i) for i in items]):
            on_done(*f.result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# ---- after the runs: analysis, summary (the HTML export: benchlib.study.html_export) ---------
def run_analysis(study_dir: Path, slot: dict, arms: bool = False) -> tuple[list[Path], list[str]]:
    """Execute the analysis notebooks that exist (the scaling notebook for a study with arms);
    a failure is reported, never fatal."""
    done, failed = [], []
    for name, extra in (ARMS_ANALYSIS if arms else ANALYSIS).items():
        src = NOTEBOOK_DIR / name
        if not src.exists():
            continue
        out = study_dir / "analysis" / name
        cmd = ["papermill", _rel(src), _rel(out), "-p", "study_dir", _rel(study_dir)]
        for k, v in extra.items():
            cmd += ["-p", k, "None" if v is None else str(v)]
        rc = execute(cmd, kernel_env(slot), out.with_suffix(".log"))
        if rc != 0:
            failed.append(f"{name}: {_last_line(log_tail(out.with_suffix('.log')))}")
        if out.exists():
            done.append(out)  # a failing notebook still shows where it stopped
    return done, failed


def summary(items: list[Item]) -> str:
    """Status counts, then per scenario: each config's throughput, memory and quality
    (mean over seeds, +- std where there are several)."""
    import pandas as pd

    from benchlib.core.records import records_frame
    recs, arms = [], []
    for i in items:
        try:
            recs.append(read_record(i.result))
            arms.append(i.spec.arm)
        except CorruptRecord:
            pass
    counts = pd.Series([r["status"] for r in recs]).value_counts()
    lines = ["status: " + ", ".join(f"{k} {v}" for k, v in counts.items())
             + (f", no record {len(items) - len(recs)}" if len(recs) < len(items) else "")]
    if not recs:
        return "\n".join(lines)
    df = records_frame(recs)
    for col in ("throughput", "memory", "quality"):
        if col not in df:
            df[col] = float("nan")
    df["arm"] = arms
    by = "arm" if df["arm"].notna().any() else "config"  # a study with arms compares arms
    for sid, g in df.groupby("scenario", sort=True):
        ok = g[g["status"].isin(TRAINED)]
        qname = ok["quality_name"].dropna().iloc[0] if "quality_name" in ok and ok["quality_name"].notna().any() else "quality"
        unit = ok["throughput_unit"].dropna().iloc[0] if "throughput_unit" in ok and ok["throughput_unit"].notna().any() else ""
        rows = []
        for key, c in g.groupby(by, sort=False):
            fin = c[c["status"].isin(TRAINED)]
            rows.append({by: key, "status": " ".join(f"{k}x{v}" if v > 1 else k for k, v in c["status"].value_counts().items()),
                         f"throughput {unit}": _mean_std(fin["throughput"]), "memory GiB": _mean_std(fin["memory"]),
                         qname: _mean_std(fin["quality"])})
        lines += ["", f"scenario {sid}:", pd.DataFrame(rows).set_index(by).to_string()]
    return "\n".join(lines)


def _mean_std(s) -> str:
    s = s.dropna().astype(float)
    if s.empty:
        return "-"
    return _fmt(s.mean()) + (f" ±{_fmt(s.std())}" if len(s) > 1 else "")


# ---- command line ----------------------------------------------------------------------
def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _at_least_one(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (runs side by side), got {n}")
    return n


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = ArgumentParser(prog="dtype-bench sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("study", type=Path, help="study file, e.g. params/smoke.yaml")
    p.add_argument("--dry-run", action="store_true", help="print what would run (the papermill commands) and what is done")
    p.add_argument("--only", action="append", default=[], metavar="GLOB",
                   help="run ids to select, e.g. 'A/*' or '*/amp_bf16/seed0' (repeatable)")
    p.add_argument("--scenario", type=_csv, default=[], help="comma list of scenarios to select")
    p.add_argument("--config", type=_csv, default=[], help="comma list of dtype configs to select")
    p.add_argument("--seed", type=lambda t: [int(x) for x in _csv(t)], default=[], help="comma list of seeds")
    p.add_argument("--jobs", type=_at_least_one, default=1, help="runs side by side, one per GPU (CPU: always 1)")
    p.add_argument("--gpus", type=_csv, default=None, help="GPU ids to use (default: all visible)")
    p.add_argument("--out", type=Path, default=Path("executed"), help="root of executed studies (default: executed)")
    p.add_argument("--force", action="store_true", help="run the selected runs again even if finished")
    p.add_argument("--timeout", type=int, default=None, help="seconds one notebook cell may run before the run fails")
    p.add_argument("--no-analysis", action="store_true", help="skip the analysis notebooks at the end")
    p.add_argument("--no-html", action="store_true", help="skip the HTML export")
    p.add_argument("--analysis-only", action="store_true",
                   help="execute nothing: run the analysis notebooks (and the HTML export) over the records "
                        "there, e.g. results copied from a GPU host")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(list(sys.argv[1:] if argv is None else argv))
    study = load_study(ns.study)  # validates every run before anything executes
    every = plan(study, ns.out)
    items = select(every, ns.only, ns.scenario, ns.config, ns.seed)
    for i in items if ns.force else []:
        if not i.todo and not i.pulled:
            i.state, i.detail = "rerun", "--force"
    study_dir = ns.out / study.name
    pending = [i for i in items if i.todo]
    _print_plan(study, ns.study, every, items, pending, study_dir, commands=ns.dry_run)
    todo = [] if ns.analysis_only else pending
    if ns.analysis_only and pending:
        print(f"  --analysis-only: the {_n(len(pending), 'run')} to run stay unrun")
    if ns.dry_run:
        return 0

    if todo:
        _check_writable(study_dir)
    slots = _slots(ns, todo)
    t0 = time.perf_counter()
    timings: list[dict] = []
    try:
        _execute_all(todo, items, study, slots, ns.timeout, timings)
    except KeyboardInterrupt:
        print(f"\ninterrupted: runs without a finished record run again with the same command:\n"
              f"  dtype-bench sweep {_rel(ns.study)}", file=sys.stderr)
        return 130
    wall = time.perf_counter() - t0

    analysis, failed = [], []
    if not ns.no_analysis and (todo or ns.analysis_only or not (study_dir / "analysis").exists()):
        analysis, failed = run_analysis(study_dir, slots[0], arms=bool(study.arms))
    analysis = analysis or sorted((study_dir / "analysis").glob("*.ipynb"))
    runs = [i for i in every if i.stage == "run"]
    pre = [i for i in every if i.stage == "pretrain"]
    index = None if ns.no_html else export_study_html(study_dir, runs, analysis)
    print("\n" + summary(runs))
    for p in pre:
        print(f"{p.run_id}: {pretrain_problem(p) or 'checkpoint ' + _rel(p.model_dir)}")
        if pretrain_warning(p):
            print(pretrain_warning(p), file=sys.stderr)
    if todo:
        print(f"\nexecuted {len(todo)} runs in {wall:.0f} s")
        if timings:
            import pandas as pd
            fixed = pd.Series([t["fixed_s"] for t in timings])
            nbo = pd.Series([t["notebook_overhead_s"] for t in timings])
            print(f"fixed cost per run (all but the steps after the first: kernel start, imports, data, model, "
                  f"compilation, evaluation, charts): median {fixed.median():.1f} s, range {fixed.min():.1f}-"
                  f"{fixed.max():.1f} s over {len(fixed)} runs; of which the notebook around the training "
                  f"(kernel start, imports, charts) median {nbo.median():.1f} s")
    for f in failed:
        print(f"analysis failed: {f}", file=sys.stderr)
    arm = "<arm>/" if study.arms else ""
    print(f"\nwhere to look:\n  runs:     {_rel(study_dir / 'runs')}/{arm}<scenario>/<config>/seed<k>.ipynb"
          " (+ seed<k>/result.json)")
    if index:
        print(f"  html:     {_rel(index)}")
    if analysis:
        print(f"  analysis: {_rel(study_dir / 'analysis')}")
    if pre:
        print(f"  pretrain: {_rel(pretrain_root(study, ns.out))}/<arch>.ipynb (+ <arch>/model: the checkpoint)")
    states = {i.run_id: run_state(i)[0] for i in items}
    errors = [r for r, s in states.items() if s in ("error", "corrupt")]
    waiting = [r for r, s in states.items() if s == "waiting"]
    if errors:
        print(f"\n{len(errors)} run(s) ended in error (see their notebooks): {', '.join(errors[:8])}"
              f"{' ...' if len(errors) > 8 else ''}", file=sys.stderr)
    if waiting:
        print(f"\n{len(waiting)} run(s) skipped, {WAITING} ({', '.join(waiting[:8])}{' ...' if len(waiting) > 8 else ''}):"
              f" the next sweep runs them once it exists", file=sys.stderr)
    return 1 if errors or waiting else 0


def _print_plan(study: Study, path: Path, every: list[Item], items: list[Item], todo: list[Item],
                study_dir: Path, commands: bool) -> None:
    shape = f"{_n(len(study.scenarios), 'scenario')} x {_n(len(study.configs), 'config')} x {_n(len(study.seeds), 'seed')}"
    if study.arms:
        shape = f"{_n(len(study.arms), 'arm')} x {_n(len(study.scenarios), 'scenario')} x {_n(len(study.seeds), 'seed')}"
    selected = f", {len(items)} selected" if len(items) < len(every) else ""
    runs = [i for i in every if i.stage == "run"]
    pre = [i for i in items if i.stage == "pretrain"]
    print(f"study {study.name} ({_rel(path)}): {len(runs)} runs ({shape}{selected}) -> {_rel(study_dir)}")
    if pre:
        root = pre[0].out_dir.parent
        print(f"  pretrain stage first, its checkpoints under {_rel(root)}: "
              + ", ".join(f"{p.run_id} ({p.spec.run_id}, {p.spec.cfg.steps} steps): {p.state}" for p in pre))
    why = ", ".join(f"{s} {sum(i.state == s for i in todo)}" for s in dict.fromkeys(i.state for i in todo))
    print(f"  done {len(items) - len(todo)}, to run {len(todo)}" + (f" ({why})" if todo else ""))
    for i in items if commands else []:
        detail = i.detail or (f"loads {i.needs.run_id}'s checkpoint" if i.needs is not None else "")
        print(f"  {i.state:13s} {i.run_id}" + (f"  ({detail})" if i.todo and detail else ""))
        if i.todo:
            print(f"      {shlex.join(papermill_command(i, study.path))}")


def _check_writable(folder: Path) -> None:
    """--out must take the study's folder: said before any run starts, not as a failed log."""
    from benchlib.training.preflight import out_problem
    problem = out_problem(folder, "--out")
    if problem:
        raise ConfigError(problem)


def _slots(ns: argparse.Namespace, todo: list[Item]) -> list[dict]:
    gpus = ns.gpus if ns.gpus is not None else visible_gpus()
    if todo and all(i.spec.cfg.device == "cpu" for i in todo):
        gpus = []  # CPU runs side by side would only measure each other
    if not gpus and any(i.spec.cfg.device == "cuda" for i in todo):
        raise ConfigError(f"{_rel(ns.study)}: its runs ask for device: cuda and no GPU is visible here "
                          "(smoke.yaml runs on the CPU)")
    per_run = max((i.spec.cfg.dist.nproc for i in todo), default=1)
    if gpus and per_run > len(gpus):
        raise ConfigError(f"{_rel(ns.study)}: an arm runs on {per_run} processes and {len(gpus)} GPU(s) are visible here")
    slots = slots_for(ns.jobs, gpus, per_run)
    if ns.jobs > 1 and len(slots) == 1:
        print(f"  --jobs {ns.jobs}: CPU runs, one at a time")
    return slots


def _execute_all(todo: list[Item], items: list[Item], study: Study, slots: list[dict], timeout: int | None,
                 timings: list[dict]) -> None:
    from tqdm import tqdm

    from benchlib.study.notebook import data_line
    bar = tqdm(total=len(items), initial=len(items) - len(todo), unit="run", dynamic_ncols=True)
    running: dict[str, str] = {}
    said: set[str] = set()

    def on_start(item: Item, slot: dict) -> None:
        running[item.run_id] = slot.get("CUDA_VISIBLE_DEVICES", "")
        bar.set_description(" ".join(running))

    def on_done(item: Item, rec: dict) -> None:
        running.pop(item.run_id, None)
        data = data_line(rec, evaluated=False)
        if data and data not in said:  # which split rule real data was read with, once per source
            said.add(data)
            bar.write(f"{item.run_id}: {data}")
        if rec["status"] in TRAINED and rec["sweep"]["fixed_s"] is not None:
            timings.append(rec["sweep"])
        bar.set_description(" ".join(running) or "done")
        bar.set_postfix_str(f"last: {item.run_id} {rec['status']}")
        if rec["status"] == "error":
            bar.write(f"{item.run_id}: error: {_last_line(rec['reason'])[:200]}")
        elif is_waiting(rec):
            bar.write(f"{item.run_id}: skipped: {_last_line(rec['reason'])[:300]}")
        elif item.stage == "pretrain" and pretrain_warning(item):
            bar.write(pretrain_warning(item))
        bar.update(1)

    def run_or_wait(item: Item, slot: dict) -> dict:
        if item.needs is None:
            return run_one(item, study.path, slot, timeout)
        problem = pretrain_problem(item.needs)
        if problem:
            return waiting_record(item, problem)
        return run_one(item, study.path, slot, timeout, sweep_extra={"pretrained": pretrain_stamp(item.needs)})

    try:
        # the pretrain stage first: the runs after it load its checkpoints
        run_all([i for i in todo if i.stage == "pretrain"], slots,
                lambda item, slot: run_one(item, study.path, slot, timeout), on_start, on_done)
        run_all([i for i in todo if i.stage != "pretrain"], slots, run_or_wait, on_start, on_done)
    finally:
        bar.close()


if __name__ == "__main__":
    sys.exit(main())
