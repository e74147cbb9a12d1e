"""``dtype-bench rejudge FOLDER...``: judge finished runs again by today's health rules
(``core.steplog.first_divergence``, ``training.health.verdict``) from the losses they logged, so
that one study does not mix the rules of the commits its runs ran at. Training is not repeated:
the new status, reason and stability metrics go in each run's sidecar (``records.SIDECAR``) with
``rejudged`` (the status before and the commit of the rules); ``result.json`` stays as written.

A run that an older rule stopped at a divergence the current rule does not see cannot be judged
from a log that ends there: it is named, and has to run again (``sweep --force``).
"""
from __future__ import annotations

from pathlib import Path

from benchlib.core.argparser import ArgumentParser
from benchlib.core.env import git_commit
from benchlib.core.errors import UserError
from benchlib.core.records import find_records, read_record, read_steps, steps_file, write_sidecar
from benchlib.core.steplog import first_divergence
from benchlib.training.health import verdict

JUDGED = ("ok", "degraded", "stalled", "diverged")
"""The statuses of runs that trained to a judgement (not oom, error, skipped)."""


def rejudge_record(rec: dict, losses: list[float]) -> dict | None:
    """The keys to lay over ``rec`` where today's rules judge it otherwise, else None. Raises
    ``UserError`` where the run stopped early at a divergence the current rule does not find."""
    if rec["status"] not in JUDGED or not losses:
        return None
    m = rec["metrics"]
    ratio = float((rec.get("run") or {}).get("diverge_ratio") or 3.0)
    diverged = first_divergence(losses, losses[0], ratio)
    planned = int((rec.get("run") or {}).get("steps") or len(losses))
    if diverged is None and len(losses) < planned:
        raise UserError(f"{rec['run_id']}: stopped at step {len(losses)} of {planned} by an older divergence rule "
                        f"that today's does not confirm; run it again (sweep --force)")
    status, reason, health = verdict(losses, diverged, m.get("quality/beats_baseline"))
    if status == "diverged":
        reason = f"loss non-finite or (5-step median) > {ratio}x initial at step {diverged} (re-judged)"
    new = {**health, "stability/diverged_step": diverged}
    if status == rec["status"] and all(m.get(k) == v for k, v in new.items()):
        return None
    return {"status": status, "reason": reason, "metrics": {**m, **new},
            "rejudged": {"status_was": rec["status"], "reason_was": rec.get("reason"), "rules_commit": git_commit()}}


def rejudge(folder: Path, dry_run: bool = False) -> list[str]:
    """Judge every run with a ``result.json`` below ``folder`` again; one line per change."""
    files = find_records(folder)
    if not files:
        raise UserError(f"{folder}: no result.json below it (a compacted folder: `dtype-bench compact --expand` first)")
    lines = []
    for f in files:
        rec, log = read_record(f), steps_file(f.parent)
        if log is None:
            continue
        losses = [r["loss"] for r in read_steps(log) if "loss" in r]
        keys = rejudge_record(rec, losses)
        if keys is None:
            continue
        lines.append(f"{rec['run_id']}: {rec['status']} -> {keys['status']}"
                     + (f" ({keys['reason']})" if keys["reason"] else ""))
        if not dry_run:
            write_sidecar(f.parent, rec, **keys)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="dtype-bench rejudge", description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="Study folders with result.json files below them.")
    ap.add_argument("--dry_run", action="store_true", help="Print what would change; write nothing.")
    args = ap.parse_args(argv)
    for folder in args.folders:
        lines = rejudge(folder, args.dry_run)
        print(f"{folder}: {len(lines)} run(s) judged otherwise" + (" (dry run)" if args.dry_run else ""))
        for line in lines:
            print("  " + line)
    return 0
