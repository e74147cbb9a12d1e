"""``dtype-bench sweep X.yaml --time_budget 9m``: a study done in chunks on a host whose jobs
have a hard time limit. Each call starts only the runs that can finish in the time left (as
estimated from the study's finished records, ``Budget.estimate``), in order, and exits 0 saying
how many are left; the next call resumes. The analysis runs only once every run is done and
``AFTER_RUNS_S`` is left. Runs still going when the budget ends are interrupted (``Budget.watch``).
"""
from __future__ import annotations

import math
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchlib.core.errors import UserError
from benchlib.core.records import COMPLETED, read_steps, steps_file
from benchlib.core.scenarios import SCENARIOS
from benchlib.core.timing import STEPS_SHARE_TARGET
from dtype_bench.study.runner import interrupt, readable, recorded_here
from benchlib.training.resume import saved_share

DEFAULT_RUN_S = 120.0
"""A run's estimate when no comparable run has finished (about six times a run's fixed cost)."""
UNSEEN_FACTOR = 1.5  # a run of a kind nothing has finished of: this x the costliest finished run
MARGIN = (1.1, 10.0)  # the longest comparable run x 1.1 + 10 s: timing noise, a slower first kernel
AFTER_RUNS_S = 240.0  # what the analysis notebooks and the HTML export may take
STATE_LEAD_S = 20.0
"""How long before the deadline a run that saves its state saves it once more (``resume.STATE_BY_ENV``,
in each slot's environment): its next logged step (every 50 steps: under 4 s at the H200's 73-ms fp32
step), an evaluation (~2 s) and a ~2-s save fit; the steps after the save are what the cut loses."""
CARRY_MIN_S = 60.0
"""Under ``carry_over``, the steps a cut run must still get in (seconds) for its start to be worth
its fixed cost twice (set-up, compilation, a save, its resumption in the next call)."""
UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """Seconds from ``540``, ``540s``, ``9m``, ``1.5h``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", str(text).lower())
    if not m or m.group(2) not in UNITS or float(m.group(1)) <= 0:
        raise UserError(f"--time_budget {text!r}: expected a positive duration such as 540, 540s, 9m or 1.5h")
    return float(m.group(1)) * UNITS[m.group(2)]


def _key(item) -> tuple:
    c = item.spec.cfg
    return item.stage, c.scenario, item.spec.arm, c.size


def _kind(scn) -> tuple | None:
    """What makes two scenarios cost alike: the model and whether the task is a language model."""
    return None if scn is None else (scn.arch, scn.is_lm)


def run_cost(rec: dict, steps: int) -> float | None:
    """What a completed record's run cost the sweep, scaled to ``steps``; None where untimed. A run
    that resumed from a saved state timed only the steps after it (its ``resumed.from_step``)."""
    s = rec.get("sweep") or {}
    wall, fixed, ran = s.get("wall_s"), s.get("fixed_s"), _steps_timed(rec)
    if rec.get("status") not in COMPLETED or not wall:
        return None
    if fixed is None or not ran:
        return float(wall)
    return fixed + (wall - fixed) * steps / ran


def _steps_timed(rec: dict) -> int:
    """The steps a record's sweep wall covers: its run's, less those before the state it resumed from."""
    ran = (rec.get("run") or {}).get("steps") or 0
    return ran - ((rec.get("resumed") or {}).get("from_step") or 0) if ran else 0


def _sharing(rec: dict) -> int:
    """How many runs shared the GPU with the record's (itself included), as its sweep ran it."""
    return int((rec.get("sweep") or {}).get("runs_per_gpu") or 1)


@dataclass
class Budget:
    """The time a sweep may take, counted from its start, and the runs it left for later."""
    seconds: float
    runs_per_gpu: int = 1  # this sweep's: a run is costed from runs that shared the GPU as it will
    start: float = field(default_factory=lambda: time.monotonic())
    deferred: list = field(default_factory=list)
    seen: dict = field(default_factory=dict)  # (stage, scenario, arm, size) -> [(record, ...)]
    expired: bool = False  # the deadline came while runs were going (``watch``)
    carry_over: bool = False  # another call on this host follows: a run that saves its state may be cut (``carried_part``)
    keeps_state: bool = True
    """Whether a state saved here outlives this call for a later one (``first_part``): not on a job whose
    output folder alone comes back (``--pack_to``) unless another call on its host follows (``carry_over``)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def learn(self, items: list) -> None:
        """Take the records already there (every item of the plan, selected or not)."""
        for item in items:
            if (rec := readable(item)) is not None:
                self.observe(item, rec)

    def learn_from(self, records: list[dict], items: list) -> int:
        """Take ``records`` of another study (``sweep --costs_from``) as runs of this plan's items
        of the same scenario, config and size: a study that repeats another's recipe (the same
        speed runs on one GPU) is costed by it before it has records of its own. How many were taken."""
        taken = 0
        for item in items:
            cfg = item.spec.cfg
            for rec in records:
                if (item.stage == "run" and (rec.get("scenario"), rec.get("config")) == (cfg.scenario, cfg.dtype.name)
                        and (rec.get("run") or {}).get("size") == cfg.size and run_cost(rec, 1) is not None):
                    self.seen.setdefault(_key(item), []).append(rec)
                    taken += 1
        return taken

    def observe(self, item, rec: dict) -> None:
        if run_cost(rec, 1) is not None:
            self.seen.setdefault(_key(item), []).append(rec)

    def watch(self, running: set) -> threading.Timer:
        """Interrupt (SIGINT) every process in ``running`` when the budget is spent: the timer started."""
        def expire():
            self.expired = True
            interrupt(running)  # whatever its exit code: papermill may die of its kernel's Ctrl-C
        timer = threading.Timer(max(self.left(), 0.0), expire)
        timer.daemon = True
        timer.start()
        return timer

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def estimate(self, item, steps: float | None = None) -> float:
        """Seconds ``item`` is expected to take for the steps it has left (``steps_left``), or for
        ``steps``: the longest ``run_cost`` of a finished run of its stage, scenario, arm and size
        (its own config's if any) with ``MARGIN``; with none, of its scenario, arm and size in the
        other stage (a pretrain with no record of its own costs what
        its scenario's runs cost per step); else ``UNSEEN_FACTOR`` x the costliest of a sibling (same
        model and kind of task), else of any run, never below ``DEFAULT_RUN_S``. A run cut off with
        its state saved whose config has no finished run of its kind is costed by its own step time
        (``own_ms_per_step``) for the steps it has left, beside the fixed cost of its kind."""
        cfg = item.spec.cfg
        steps = self.steps_left(item) if steps is None else steps
        recs = self.seen.get(_key(item), [])
        if steps and not any(r.get("config") == cfg.dtype.name for r in recs) \
                and (ms := self.own_ms_per_step(item)) is not None:
            return self.estimate(item, 0) + MARGIN[0] * steps * ms / 1000
        own = self._costs(recs, item, steps)
        if own:
            return MARGIN[0] * max(own) + MARGIN[1]
        stage, scenario, arm, size = _key(item)
        staged = [r for (st, sc, a, sz), recs in self.seen.items() for r in recs  # a pretrain as its scenario's runs
                  if (sc, a, sz) == (scenario, arm, size) and st != stage]
        if staged and (alike := self._costs(staged, item, steps)):
            return MARGIN[0] * max(alike) + MARGIN[1]
        siblings = [r for (st, sc, a, sz), recs in self.seen.items() for r in recs
                    if (st, a, sz) == (stage, arm, size) and sc != scenario
                    and _kind(SCENARIOS.get(sc)) == _kind(cfg.scn)]
        costs = (self._costs(siblings, item, steps)
                 or [run_cost(r, steps) for recs in self.seen.values() for r in recs])
        return max([DEFAULT_RUN_S] + [UNSEEN_FACTOR * c for c in costs])

    @staticmethod
    def steps_left(item) -> float:
        """The steps ``item`` still has to train: all of them, less those its saved state holds
        (``resume.saved_share``: a run the last call's deadline cut off resumes there)."""
        cfg = item.spec.cfg
        return cfg.steps * (1 - (saved_share(Path(item.out_dir), cfg.run_id, cfg.steps) if cfg.state_every else 0.0))

    @staticmethod
    def own_ms_per_step(item) -> float | None:
        """The step time a run cut off with its state saved measured itself (the median
        ``interval_ms_per_step`` of the step log beside that state, the first interval, with its
        compilation, left out), or None. On the host that saved the state it is a better guide than
        other configs' runs: costed from them (fp32's among them), a B run of fp16_naive, which no
        finished run of its config costed, read 648 s for the steps it had left, and a last call of
        500 s let it wait, its state lost with the host (2026-12-01)."""
        cfg = item.spec.cfg
        if not cfg.state_every or not saved_share(Path(item.out_dir), cfg.run_id, cfg.steps):
            return None
        try:
            path = steps_file(item.out_dir)
            ms = [v for r in (read_steps(path) if path else []) if (r.get("step") or 0) > 0
                  and isinstance(v := r.get("interval_ms_per_step"), (int, float)) and 0 < v < float("inf")]
        except (OSError, ValueError):  # a log cut mid-line by the deadline: no guide
            return None
        return float(statistics.median(ms)) if ms else None

    def planned_share(self, todo: list) -> tuple[float, float, int] | None:
        """The share of their time the runs ``todo`` are expected to spend in training steps, from
        finished runs of their own configs (``seen``, ``--costs_from`` included): each run's mean
        fixed cost (``sweep.fixed_s``: start, data, compilation, evaluation) against its steps at the
        mean seconds a step. The mean, not the median: a config's first run on a host compiles
        (~20-30 s) and its later seeds load the compiled graphs (~2 s), and a plan pays both as
        often as the runs it is costed from did. Returns (share, factor, runs costed), ``factor``
        how many times its steps every run would need for the share to reach
        ``STEPS_SHARE_TARGET`` (1 where it does; a floor where evaluations every ``eval_every``
        steps grow the fixed cost with them); None where no run of ``todo`` has a finished run of
        its config. A study of short runs spends its GPU time compiling and loading (C and D's
        speed study: 43%, 2026-11-29)."""
        fixed = steps_s = 0.0
        costed = 0
        for item in todo:
            name = item.spec.cfg.dtype.name
            own = [(s["fixed_s"], (s["wall_s"] - s["fixed_s"]) / ran) for r in self.seen.get(_key(item), [])
                   if r.get("config") == name and (s := r.get("sweep") or {}).get("fixed_s") is not None
                   and s.get("wall_s") and (ran := _steps_timed(r)) > 0]
            if own:
                costed += 1
                fixed += statistics.fmean(f for f, _ in own)
                steps_s += self.steps_left(item) * max(0.0, statistics.fmean(p for _, p in own))
        if not costed or fixed + steps_s <= 0:
            return None
        target = STEPS_SHARE_TARGET
        factor = max(1.0, target * fixed / ((1 - target) * steps_s)) if steps_s else float("inf")
        return steps_s / (fixed + steps_s), factor, costed

    def planned_line(self, todo: list) -> str | None:
        """``planned_share`` as the sweep prints it before its runs start, or None."""
        if (plan := self.planned_share(todo)) is None:
            return None
        share, factor, costed = plan
        steps = sorted({i.spec.cfg.steps for i in todo})
        line = (f"planned: ~{100 * share:.0f}% of {'these' if costed == len(todo) else f'{costed} of these'} "
                f"{len(todo)} runs' time in training steps (estimated from finished runs of their configs: each "
                f"one's fixed cost and seconds a step); the target is >= {100 * STEPS_SHARE_TARGET:.0f}%")
        if factor > 1.0:
            longer = ", ".join(f"{math.ceil(factor * n):,} for {n:,}" for n in steps) if math.isfinite(factor) else "-"
            line += f"; runs with {factor:.1f}x the steps would reach it ({longer})"
        return line

    def first_part(self, item) -> float | None:
        """For a run that saves its state (``state_every``) and that no call of this budget could
        finish (its estimate is more than the whole budget, e.g. a 6,000-step horizon run in a
        540-s call): the estimate of its steps up to its next save, from which the next call on this
        host resumes it. None for any other run, or where no later call will find the state
        (``keeps_state``): it starts only where it fits whole."""
        cfg = item.spec.cfg
        if not cfg.state_every or not (self.keeps_state or self.carry_over) or self.estimate(item) <= self.seconds:
            return None
        left = self.steps_left(item)
        done = cfg.steps - left
        return self.estimate(item, min(left, cfg.state_every - done % cfg.state_every))

    def carried_part(self, item) -> float | None:
        """Under ``carry_over`` (``sweep --carry_over``: another call on this host follows this
        one), for a run that saves its state: the least time left in which it may start though it
        cannot finish, its fixed cost (``estimate`` of no steps) with ``STATE_LEAD_S`` and
        ``CARRY_MIN_S`` of steps; the deadline's save keeps those steps for the next call, where
        waiting for that call would leave its GPU idle now. None otherwise."""
        if not (self.carry_over and item.spec.cfg.state_every):
            return None
        return self.estimate(item, 0) + STATE_LEAD_S + CARRY_MIN_S

    def _costs(self, recs: list, item, steps: float) -> list:
        """The costs of ``recs`` scaled to ``item``'s steps: those of its own config if any, else
        each other config's x how much more ``item``'s config cost than it elsewhere (``_ratio``).
        Only runs that shared their GPU as this sweep's will (``runs_per_gpu``) where any did: an
        fp32 run at `base` took 512 s beside another and 381 s alone (H100), so neither predicts
        the other."""
        name = item.spec.cfg.dtype.name
        recs = [r for r in recs if _sharing(r) == self.runs_per_gpu] or recs
        own = [run_cost(r, steps) for r in recs if r.get("config") == name]
        if own:
            return own
        alike, mixed = [], []  # through configs whose ratio to ``item``'s was measured under one sharing, where any was
        for r in recs:
            ratio, same_sharing = self._ratio(name, r.get("config"))
            (alike if same_sharing else mixed).append(run_cost(r, steps) * ratio)
        return alike or mixed

    def _ratio(self, config: str, other: str) -> tuple[float, bool]:
        """The largest cost ratio ``config`` / ``other`` over the keys where both finished a run
        (an fp32 run costs 5-8x an AMP one at ``base``: estimated like the AMP run of its scenario,
        it was started with too little time left and cut off), from runs that shared their GPU alike
        where any did (then True); 1 where no key has both."""
        alike, ratios = [], []  # from runs that shared their GPU alike (a run 3 to a GPU costs 2x one alone)
        for recs in self.seen.values():
            for share in {_sharing(r) for r in recs}:
                a = [run_cost(r, 1000) for r in recs if r.get("config") == config and _sharing(r) == share]
                b = [run_cost(r, 1000) for r in recs if r.get("config") == other and _sharing(r) == share]
                if a and b:
                    alike.append(max(a) / max(b))
            a = [run_cost(r, 1000) for r in recs if r.get("config") == config]
            b = [run_cost(r, 1000) for r in recs if r.get("config") == other]
            if a and b:
                ratios.append(max(a) / max(b))
        return max(alike or ratios, default=1.0), bool(alike)

    def admit(self, unit: list) -> bool:
        """Whether items of ``unit`` may start now: ``unit`` keeps its longest start that fits in
        the time left and loads no deferred checkpoint; the rest joins ``deferred``. Of a cell
        (runs in one process, ``cellrun``) only the first must fit by its estimate: the process
        starts each later one only if the run before it says it fits (``deadline``), a better
        guide than a first estimate (``DEFAULT_RUN_S`` alone would cut a cell of 60-s runs to
        four in a 540-s budget, and its fifth would pay a process start and compilation again).
        Under ``carry_over`` a run that saves its state starts where its ``carried_part`` fits."""
        with self._lock:
            left, n = self.left(), 0
            cell = len(unit) > 1 and not any(i.in_notebook for i in unit)
            for item in unit:
                if item.needs is not None and any(item.needs is d for d in self.deferred):
                    break
                if n == 0 or not cell:
                    need = self.estimate(item)
                    part = self.first_part(item) if need > left else None
                    left -= need if part is None else part  # a run too long for any call: to its next save
                    if left < 0 and (carry := self.carried_part(item)) is not None and left + (part or need) >= carry:
                        left = 0.0  # cut at the deadline, resumed by the next call: it takes what is left
                    if left < 0:
                        break
                n += 1
            self.deferred.extend(unit[n:])
            del unit[n:]
            return n > 0

    def deadline(self) -> float:
        """When the budget ends, as ``time.time()`` reads it in any process of this machine."""
        return time.time() + self.left()

    def defer_unrun(self, items: list) -> None:
        """``items`` a cell's process left without a record for want of time join ``deferred``."""
        with self._lock:
            self.deferred += [i for i in items if not recorded_here(i) and not any(i is d for d in self.deferred)]

    def left_line(self, total: int) -> str:
        """How many runs are left, and the first of them no call of this budget would start: its
        estimate (from no finished run of its kind, ``estimate``) is more than the whole budget."""
        line = f"time budget: {len(self.deferred)} of {total} runs left; run the same command again to resume"
        never = next(((i, e) for i in self.deferred if (e := self.estimate(i)) > self.seconds
                      and ((p := self.first_part(i)) is None or p > self.seconds)), None)
        if never:
            line += (f"; but {never[0].run_id} is estimated at {never[1]:.0f} s, more than the whole budget "
                     f"({self.seconds:.0f} s), so no call of this budget starts it (nor the runs that load it): "
                     "give it a longer --time_budget or none, or a state_every it can reach"
                     + ("" if self.keeps_state or not never[0].spec.cfg.state_every else
                        ", or --carry_over where another call on this host follows (its saves would resume there)"))
        cut = [i.run_id for i in self.deferred if self.steps_left(i) < i.spec.cfg.steps]
        if cut:
            line += (f"; {len(cut)} resume from the state they saved ({cut[0]}{', ...' if len(cut) > 1 else ''}): "
                     "it is on this host only, so run the next call here")
        return line

    def why_no_analysis(self) -> str:
        """Why the analysis and the HTML export wait for a later call, or ''."""
        if self.deferred:
            return ("time budget: the analysis notebooks and the HTML export wait for the call that finishes "
                    "the last run (or --analysis_only)")
        if self.left() < AFTER_RUNS_S:
            return (f"time budget: {max(self.left(), 0):.0f} s left, the analysis notebooks and the HTML export "
                    f"need up to {AFTER_RUNS_S:.0f} s: run the same command with --analysis_only")
        return ""
