"""``dtype-bench sweep params/X.yaml``: run a study's notebooks through papermill.

The sweep's command line (``build_parser``) and the scheduler settings it resolves from the study
file with ``--set`` over it (``executor_settings``); ``dtype_bench.study.sweep`` runs what it parses.
"""
from __future__ import annotations

import argparse
from argparse import ArgumentTypeError
from datetime import datetime, timezone
from pathlib import Path

from benchlib.core.argparser import ArgumentParser
from benchlib.core.runconfig import ConfigError
from benchlib.study.executor import KINDS, ExecutorSettings
from benchlib.study.studyfile import Study


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _utc_time(text: str) -> datetime:
    """An ISO date or time, read as UTC where it names no zone."""
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise ArgumentTypeError(f"{text!r} is not an ISO date or time, e.g. 2026-11-30T03:00") from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def parse_args(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def build_parser() -> ArgumentParser:
    """The sweep's command line. Its own options' help is written here; a flag that sets a field
    of the study file's ``executor:`` section takes its help from that field's docstring
    (``ExecutorSettings``, through ``field_help``)."""
    p = ArgumentParser(prog="dtype-bench sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("study", type=Path, help="The study file, e.g. params/smoke.yaml.")
    p.add_argument("--dry_run", action="store_true",
                   help="Print what would run (the papermill commands) and what is done; run nothing.")
    p.add_argument("--rehearse", action="store_true",
                   help="Run the study's rehearsal here instead: every config at the first seed, at tiny on this CPU "
                        "with synthetic data and 8 steps, pretrain stages and analyses included, into "
                        "OUT/<study>.rehearsal (default OUT: a new temporary folder). It checks the study's wiring "
                        "before a GPU call, not its numbers.")
    sel = p.add_argument_group("which runs (default: every run of the study)")
    sel.add_argument("--only", action="append", default=[], metavar="GLOB",
                     help="Run ids to select, e.g. 'A/*' or '*/amp_bf16/seed0' (repeatable; the runs of "
                          "each pattern start before the next's: under a time budget, the one named first "
                          "is the first to get in).")
    sel.add_argument("--scenario", type=_csv, default=[], metavar="A,B,...", help="Scenarios to select.")
    sel.add_argument("--config", type=_csv, default=[], metavar="NAME,...", help="Dtype configs to select.")
    sel.add_argument("--seed", type=lambda t: [int(x) for x in _csv(t)], default=[], metavar="N,...",
                     help="Seeds to select, in the order they run: --seed 2,0,1 runs every selected "
                          "config's seed 2 first.")
    sel.add_argument("--force", action="store_true", help="Run the selected runs again even if finished.")
    sel.add_argument("--force_before", type=_utc_time, default=None, metavar="TIME",
                     help="Run the selected runs again whose record was made before TIME (UTC, e.g. "
                          "2026-11-30T03:00), keeping those made since: unlike --force, the same command resumes "
                          "where a call or a time budget stopped it. TIME is when its first call started: a time "
                          "after now is refused (that call's own runs would be older than it).")
    sel.add_argument("--rerun_stale", action="store_true",
                     help="Run again the finished runs of a compacted (committed) study whose record is stale (made "
                          "under other settings, or from a checkpoint that trains again), replacing their records; "
                          "without it such a sweep stops before it runs anything and names them.")
    sel.add_argument("--timeout", type=int, default=None, metavar="SECONDS",
                     help="Seconds one notebook cell may run before the run fails (default: no limit).")
    out = p.add_argument_group("results")
    out.add_argument("--out", type=Path, default=Path("executed"), metavar="DIR",
                     help="Root of executed studies (default: executed).")
    out.add_argument("--no_analysis", action="store_true", help="Skip the analysis notebooks at the end.")
    out.add_argument("--no_html", action="store_true", help="Skip the HTML export.")
    out.add_argument("--analysis_only", action="store_true",
                     help="Execute nothing: run the analysis notebooks (and the HTML export) over the records "
                          "there, e.g. results copied from a GPU host.")
    c = p.add_argument_group("scheduler (submitit; settings also from the study file's executor: section)")
    c.add_argument("--executor", choices=KINDS, default=None,
                   help="inprocess: run here, one notebook after another; local: submitit's local executor; "
                        "slurm: submit the pending runs as a Slurm job array (default: the study file's, "
                        "else inprocess).")
    c.add_argument("--status", action="store_true", help="Each run's state from its record and the scheduler.")
    c.add_argument("--wait", action="store_true", help="Slurm: stay until the jobs end, then analyse here.")
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="executor_set",
                   help="One key of the study file's executor: section for this sweep (repeatable): "
                        + ", ".join(k for k in ExecutorSettings.keys() if k != "kind")
                        + "; e.g. --set partition=gpu --set time_min=90.")
    return p


def executor_settings(ns: argparse.Namespace, study: Study) -> ExecutorSettings:
    """The study file's ``executor:`` section with the command line's ``--set`` over it."""
    import yaml
    changes = {}
    for pair in ns.executor_set:
        key, eq, value = pair.partition("=")
        if not eq or key.strip() == "kind":
            raise ConfigError(f"--set {pair!r}: KEY=VALUE is expected, e.g. --set time_min=90 (the kind: --executor)")
        changes[key.strip()] = yaml.safe_load(value)
    ExecutorSettings.from_dict(changes, "--set: ")  # names a bad key
    return study.executor.replace(**changes, kind=ns.executor)
