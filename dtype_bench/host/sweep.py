"""``dtype-bench sweep``: the core sweep (``dtype_bench.study.sweep``) with what one GPU host adds,
every option of it here (``build_parser``) and each seam of the sweep filled in by ``GpuHost``."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from benchlib.core.env import COMPILE_CACHE_ENV
from benchlib.core.errors import UserError
from benchlib.core.records import load_records
from benchlib.core.runconfig import ConfigError
from benchlib.training.resume import STATE_BY_ENV
from dtype_bench.host.budget import STATE_LEAD_S, Budget, parse_duration
from dtype_bench.host.cellrun import execute_cell
from dtype_bench.host.pack import Packer
from dtype_bench.host.slots import cpu_share, gpu_sharing, pin_slots, run_all, slots_for, visible_gpus
from dtype_bench.study import sweep
from dtype_bench.study.sweep_args import build_parser as study_parser
from dtype_bench.study.runner import CPUS_ENV, INTERRUPT_WAIT_S, Item, _rel, parse_cpus

BYTECODE_CACHE_ENV = "PYTHONPYCACHEPREFIX"  # where Python writes the bytecode of what it imports
DEFAULT_BYTECODE_CACHE = Path("~/.cache/dtype-bench/pycache")  # beside the runs' cache_dir (RunConfig)
PACK_EVERY_S = 60.0
"""How often ``--pack_to`` rewrites its archive while the runs go."""


def _at_least_one(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (runs side by side), got {n}")
    return n


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--time_budget ")) from None


def _cpus(text: str) -> list[int]:
    try:
        return parse_cpus(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix(f"--cpus {text}: ")) from None


def _gpus(text: str) -> list[str]:
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    twice = sorted({g for g in gpus if gpus.count(g) > 1})
    if twice:  # two slots on one GPU would time each other: that is --runs_per_gpu, which says so
        raise argparse.ArgumentTypeError(f"GPU {', '.join(twice)} named twice; for runs side by side on one GPU "
                                         f"use --runs_per_gpu N")
    return gpus


def _study_dir(text: str) -> Path:
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"no such folder: {text}")
    return Path(text)


def build_parser() -> argparse.ArgumentParser:
    p = study_parser()
    here = p.add_argument_group("this host (runs executed here)")
    here.add_argument("--gpus", type=_gpus, default=None,
                      metavar="ID,...", help="GPUs to use, a run on each at a time (default: the first visible "
                                             "one; with --runs_per_gpu, all visible).")
    here.add_argument("--runs_per_gpu", type=_at_least_one, default=1, metavar="N",
                      help="N runs side by side on each GPU, for quality-only runs of small models: their "
                           "records say so (sweep.runs_per_gpu) and the analysis blanks their speed (default: 1).")
    here.add_argument("--seed_per_gpu", action="store_true",
                      help="Run each seed's configs of a scenario on one GPU (one slot), one after another, the "
                           "(scenario, seed) pairs dealt to the GPUs in order, the same whichever runs are left: a "
                           "speed study's configs then compare on one device within a seed, and between-GPU "
                           "differences fall in the seed noise. Every other GPU takes its runs in "
                           "reverse order, so each loads the graphs the other compiled. Records say so "
                           "(sweep.seed_per_gpu).")
    here.add_argument("--cpus", type=_cpus, default=None, metavar="LIST",
                      help="Cores for this sweep's runs (0-15 or 0-7,32-39), split evenly between runs side by "
                           "side, each run's process and its compiler's workers pinned to its share: sweeps "
                           "timing runs on a host's other GPUs at the same time then do not take each other's "
                           "cores. Records say how many (sweep.cpus_per_run). Default: no pinning.")
    here.add_argument("--time_budget", type=_duration, default=None, metavar="DURATION",
                      help="Start no run that cannot finish within DURATION of the sweep's start (540, 540s, "
                           "9m, 1.5h; estimated from the study's finished records), then exit 0 saying how many "
                           "runs are left: the same command resumes (default: no limit). Runs still going at its "
                           f"end get Ctrl-C and up to {INTERRUPT_WAIT_S} s to stop, then --pack_to packs: under a "
                           "hard limit, give DURATION that much less, and a margin.")
    here.add_argument("--carry_over", action="store_true",
                      help="With --time_budget: another call on this host follows this one, so a run that saves its "
                           "state (state_every) starts whenever the time left covers its fixed cost and a minute of "
                           "steps, though it cannot finish: the save just before the deadline keeps its steps and the "
                           "next call resumes it, where waiting would leave its GPU idle. Leave it off on a "
                           "session's last call: a cut run's state stays on the host. With --pack_to and without "
                           "this flag, no run starts that this call cannot finish.")
    here.add_argument("--costs_from", type=_study_dir, action="append", default=[], metavar="STUDY_DIR",
                      help="With --time_budget: also cost this study's runs by the finished records of STUDY_DIR "
                           "(another study run with the same recipe) for the same scenario, config and size, so a "
                           "first call does not price runs it has no record of at 1.5x the costliest one; read "
                           "only. Repeat for several.")
    here.add_argument("--compile_cache", type=Path, default=None, metavar="DIR",
                      help="torch.compile's cache folder for every run (TORCHINDUCTOR_CACHE_DIR): a folder kept, "
                           "copied from another host of the same GPU, or shared by a cluster's nodes loads "
                           "compiled graphs instead of compiling them; records say what hit (compile/cache).")
    here.add_argument("--bytecode_cache", type=Path, default=None, metavar="DIR",
                      help="Python's bytecode folder for every run (PYTHONPYCACHEPREFIX, and PYTHONDONTWRITEBYTECODE "
                           "unset): on a host whose packages ship no .pyc, the first run compiles what it imports "
                           "and the others load it (8-12 s a run on the H100 hosts, docs/performance.md); records "
                           "say where (env.python_bytecode). Default: where PYTHONDONTWRITEBYTECODE is set, "
                           "~/.cache/dtype-bench/pycache; 'off' keeps none.")
    here.add_argument("--pack_to", type=Path, default=None, metavar="FILE",
                      help=f"Keep FILE an archive of the study's new records while the runs go (every "
                           f"{PACK_EVERY_S:.0f} s, dtype-bench pack), and once more at the end: for a job with a "
                           f"hard limit whose output folder alone comes back.")
    return p


class GpuHost(sweep.Host):
    """The sweep's seams on a GPU host, from ``build_parser``'s flags."""

    def __init__(self, ns: argparse.Namespace):
        self.ns = ns
        self.budget = (Budget(ns.time_budget, ns.runs_per_gpu, carry_over=ns.carry_over,
                              keeps_state=ns.pack_to is None)
                       if ns.time_budget else None)  # its clock starts now
        self.packer = None
        self.lanes: list[tuple] = []  # the selected (arm, scenario, seed) (start): --seed_per_gpu deals them to GPUs

    def run_cell(self, items: list[Item], slot: dict, timeout: int | None = None,
                 sweep_extra: dict | None = None) -> list:
        """A cell's runs in one process, which starts no run the budget's deadline would cut."""
        return execute_cell(items, slot, timeout, sweep_extra, self.budget.deadline() if self.budget else None,
                            bool(self.budget and self.budget.carry_over))

    def check(self, kind: str) -> None:
        if kind == "inprocess":
            return
        if self.ns.seed_per_gpu:
            raise ConfigError(f"--seed_per_gpu places runs on this host's GPUs; --executor {kind} places its own")
        if self.ns.pack_to:
            raise ConfigError(f"--pack_to is for runs executed here; --executor {kind}'s jobs write their records "
                              f"where this machine reads them")
        if self.budget:
            raise ConfigError(f"--time_budget is for runs executed here; a scheduler's task has its own limit "
                              f"(executor.time_min), not --executor {kind}")

    def slots(self, todo: list[Item]) -> list[dict]:
        ns, n = self.ns, self.ns.runs_per_gpu
        gpus = ns.gpus if ns.gpus is not None else visible_gpus()
        if todo and all(i.spec.cfg.device == "cpu" for i in todo):
            gpus = []  # CPU runs side by side would only measure each other
        if not gpus and any(i.spec.cfg.device == "cuda" for i in todo):
            raise ConfigError(f"{_rel(ns.study)}: its runs ask for device: cuda and no GPU is visible here "
                              "(smoke.yaml runs on the CPU)")
        per_run = max((i.spec.cfg.dist.nproc for i in todo), default=1)
        if gpus and per_run > len(gpus):
            raise ConfigError(f"{_rel(ns.study)}: an arm runs on {per_run} processes and {len(gpus)} GPU(s) are visible here")
        if n > 1 and per_run > 1:
            raise ConfigError(f"--runs_per_gpu {n}: an arm on {per_run} processes measures its GPUs' "
                              f"speed, and runs sharing them would measure each other; use it for single-process runs")
        jobs = len(gpus) * n if (ns.gpus is not None or n > 1) else 1
        slots = slots_for(jobs, gpus, per_run, n)
        if ns.gpus is not None and gpus and slots == [{}]:  # one run at a time, on the GPU(s) named, not GPU 0
            slots = [{"CUDA_VISIBLE_DEVICES": ",".join(gpus)}]
        if ns.cpus is not None:  # each run on its own cores
            try:
                slots = pin_slots(slots, ns.cpus)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        else:
            slots = [{**s, **cpu_share(len(slots))} for s in slots]  # side-by-side runs split the cores
        if (jobs > 1 or n > 1) and len(slots) == 1:
            print(f"  {f'--runs_per_gpu {n}' if n > 1 else '--gpus'}: {'CPU runs' if not gpus else 'one slot'}, "
                  f"one at a time")
        if self.budget:  # a run that saves its state saves it once more just before the deadline
            slots = [{**s, STATE_BY_ENV: f"{self.budget.deadline() - STATE_LEAD_S:.0f}"} for s in slots]
        return slots

    def run_all(self, units: list, slots: list[dict], run, on_start, on_done, admit, stop) -> None:
        """Side by side in the slots; with --seed_per_gpu, each seed's runs in one slot (a cell's
        seeds in one process each), every other slot's in reverse order (``alternate``)."""
        if not self.ns.seed_per_gpu:
            return run_all(units, slots, run, on_start, on_done, admit, stop)
        seed = lambda i: i.spec.cfg.seed  # noqa: E731
        lane = lambda i: (i.spec.arm or "", i.spec.cfg.scenario, i.spec.cfg.seed)  # noqa: E731
        per_seed = [[i for i in u if seed(i) == k] for u in units for k in dict.fromkeys(map(seed, u))]
        # a lane's slot from its place among the selected (scenario, seed) pairs, not among the runs
        # left: a resumed sweep puts the rest of a seed's configs on the GPU its first ones ran on
        lanes = self.lanes + sorted({lane(u[0]) for u in per_seed} - set(self.lanes))  # any not selected: after
        run_all(per_seed, slots, run, on_start, on_done, admit, stop, key=lambda u: lane(u[0]), lane_order=alternate,
                slot_of=lanes.index)

    def sweep_fields(self, slots: list[dict]) -> dict:
        extra = {"seed_per_gpu": True} if self.ns.seed_per_gpu and len(slots) > 1 else {}
        if gpu_sharing(slots) > 1:  # runs side by side on one GPU time each other: their records say so
            extra["runs_per_gpu"] = gpu_sharing(slots)
        if "OMP_NUM_THREADS" in slots[0] and len(slots) > 1:  # cpu_share's split, not the user's setting
            extra["cpu_threads"] = int(slots[0]["OMP_NUM_THREADS"])
        if CPUS_ENV in slots[0]:
            extra["cpus_per_run"] = len(parse_cpus(slots[0][CPUS_ENV]))
        return extra

    def preview(self, every: list[Item], selected: list[Item]) -> None:
        """The runs' costs from the records there and --costs_from's (the budget's, where one is
        set), and the share of their time they are expected to spend in steps."""
        costs = self.budget or Budget(0.0)  # without --time_budget, only for the planned share
        costs.learn(every)
        for folder in self.ns.costs_from:
            costs.learn_from(load_records(folder), every)
        if line := costs.planned_line([i for i in selected if i.todo]):
            print(f"  {line}")

    def start(self, study_dir: Path, every: list[Item], selected: list[Item]) -> None:
        self.lanes = sorted({(i.spec.arm or "", i.spec.cfg.scenario, i.spec.cfg.seed) for i in selected})
        if self.ns.pack_to:
            self.packer = Packer(study_dir, self.ns.pack_to, PACK_EVERY_S).start()

    def stop(self) -> None:
        if self.packer:
            print(f"--pack_to: {self.packer.stop()}")


def _folder(path: Path, flag: str) -> str:
    """``path`` made if missing, absolute; a folder that cannot be made is named with its flag."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot create it ({e.strerror})") from None
    return str(path.resolve())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ns = build_parser().parse_args(argv)
    ns.argv = argv  # the command that goes on after a Ctrl-C (sweep.resume_command)
    if ns.carry_over and not ns.time_budget:
        build_parser().error("--carry_over says another call follows a --time_budget one: give --time_budget too")
    sweep.rehearse_if_asked(ns)
    # the caches below are environment variables: the runs' kernels, cell processes and jobs inherit them
    if ns.compile_cache:
        os.environ[COMPILE_CACHE_ENV] = _folder(ns.compile_cache, "--compile_cache")
    runs = not (ns.analysis_only or ns.status or ns.dry_run)
    if str(ns.bytecode_cache) == "off":
        ns.bytecode_cache = None
    elif ns.bytecode_cache is None and os.environ.get("PYTHONDONTWRITEBYTECODE") and runs:
        ns.bytecode_cache = DEFAULT_BYTECODE_CACHE.expanduser()
        print(f"PYTHONDONTWRITEBYTECODE is set: without bytecode each run would compile again every module it imports "
              f"(8-12 s a run on the H100 hosts); the runs keep it in {ns.bytecode_cache} (--bytecode_cache DIR "
              f"chooses the folder, --bytecode_cache off keeps none)")
    if ns.bytecode_cache:
        os.environ[BYTECODE_CACHE_ENV] = _folder(ns.bytecode_cache, "--bytecode_cache")
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    return sweep.run(ns, GpuHost(ns))


def alternate(k: int, lane: list) -> list:
    """Slot ``k``'s units, reversed where ``k`` is odd within each stage (pretrain, then runs that
    load no checkpoint, then those that do, so no unit waits on one behind it in its own slot):
    two GPUs' seeds meet their configs from opposite ends, so past the middle each run loads the
    graphs the other GPU compiled (torch.compile's cache is the host's), and a config's place in
    the order, with what the host did before it, differs between seeds."""
    if k % 2 == 0:
        return lane
    stage = lambda u: 0 if u[0].stage == "pretrain" else 1 if u[0].needs is None else 2  # noqa: E731
    return [u for s in (0, 1, 2) for u in reversed([u for u in lane if stage(u) == s])]


if __name__ == "__main__":
    sys.exit(main())
