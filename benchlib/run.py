"""One run from the command line: ``RunConfig`` as flags (``add_run_args``), the folder it writes
(``run_folder``) and the run with its summary (``run_command``). ``dtype-bench run`` is this
command; torchrun starts ``python -m benchlib.run <flags>`` in each rank of a multi-process run
(``benchlib.parallel.launch``), so a run never needs the tool around the library.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path

from benchlib.core.argparser import ArgumentParser, field_help, field_metavar
from benchlib.core.records import RESULT, TRAINED, CorruptRecord, fmt, last_line, read_record
from benchlib.core.runconfig import SECTIONS, ConfigError, RunConfig, first_sentence
from benchlib.core.scenarios import SCENARIOS, TASK_ALIASES

# seed 002's flag names -> RunConfig keys
LEGACY_FLAGS = {"dtype_config": "config", "max_steps": "steps"}


def add_run_args(p: argparse.ArgumentParser) -> None:
    """One flag per RunConfig key (``--dist.*`` for the sub-configuration's), its help line the
    field's docstring (``field_help``), then the flags that are not configuration fields."""
    groups = {"": p.add_argument_group("the run (RunConfig; study files and notebooks take the same keys)")}
    for name, cls in SECTIONS.items():
        groups[name] = p.add_argument_group(f"{name}.*: {first_sentence(cls.__doc__)}")
    for key in RunConfig.keys():
        if key == "out_dir":  # --out, below
            continue
        section, dot, field = key.rpartition(".")
        cls = SECTIONS[section] if dot else RunConfig
        groups[section].add_argument(f"--{key}", dest=key, default=None, metavar=field_metavar(cls, field),
                                     help=field_help(cls, field))
    own = p.add_argument_group("the command")
    own.add_argument("--out", dest="out_dir", default=None, metavar="DIR", help=field_help(RunConfig, "out_dir"))
    own.add_argument("--quiet", action="store_true", help="No progress bar.")
    old = p.add_argument_group("seed 002's spellings")
    archs, tasks = (",".join(dict.fromkeys(v)) for v in ((s.arch for s in SCENARIOS.values()), TASK_ALIASES.values()))
    old.add_argument("--model_arch", default=None, metavar=f"{{{archs}}}",
                     help="The model family; with --task, another way to name the scenario.")
    old.add_argument("--task", default=None, metavar=f"{{{tasks}}}",
                     help="The task; with --model_arch, another way to name the scenario.")
    for name, new in LEGACY_FLAGS.items():
        old.add_argument(f"--{name}", dest=name, default=None, metavar=new.upper(), help=f"The same as --{new}.")


def run_config_from_args(ns: argparse.Namespace) -> RunConfig:
    from benchlib.core.scenarios import scenario_for
    d = {}
    for key in RunConfig.keys():
        v = getattr(ns, key, None)
        if v is not None and key != "out_dir":
            d[key] = RunConfig.parse_text(key, v)
    for old, new in LEGACY_FLAGS.items():
        v = getattr(ns, old, None)
        if v is not None:
            d[new] = RunConfig.parse_text(new, v)
    if ns.model_arch or ns.task:
        if not (ns.model_arch and ns.task):
            raise ConfigError("--model_arch and --task go together (seed 002), or use --scenario")
        d["scenario"] = scenario_for(ns.model_arch, ns.task).id
    return RunConfig.from_dict(d)


def add_out_args(p: argparse.ArgumentParser) -> None:
    """What ``run`` does with a --out that holds a run already (``run_folder``)."""
    own = next(g for g in p._action_groups if g.title == "the command")
    own.add_argument("--overwrite", action="store_true",
                     help="Train again in an --out that holds a run's record (result.json): the new record replaces "
                          "it, and a state saved there (state.pt) is dropped, not continued.")
    own.add_argument("--resume", action="store_true",
                     help="Continue the run whose training state --out holds (state.pt, saved every --state_every "
                          "steps), with the settings it was started with, whatever record the folder holds.")


def run_folder(ns: argparse.Namespace, cfg: RunConfig) -> str:
    """The folder ``run`` writes to: --out, refused where it holds a run's record (unless
    --overwrite, or --resume with a state saved there), else a new temporary folder. Not checked
    in a rank under torchrun: the command that launched it was."""
    from benchlib.training import resume
    if ns.resume and ns.overwrite:
        raise ConfigError("--resume continues the run saved in --out, --overwrite trains it again: give one")
    if ns.out_dir is None:
        if ns.resume:
            raise ConfigError("--resume: give the --out of the run to continue")
        return tempfile.mkdtemp(prefix="dtype-bench-")
    out = Path(ns.out_dir)
    if "WORLD_SIZE" in os.environ:
        return ns.out_dir
    if ns.resume:
        if problem := resume.resume_problem(out, cfg):
            raise ConfigError(f"--resume: {problem}")
    elif ns.overwrite:
        if out.is_dir():
            resume.clear(out)  # trained again from step 0, not from a state of the run it replaces
    elif (out / RESULT).is_file():
        saved = ", --resume to continue the state saved there" if (out / resume.STATE_FILE).is_file() else ""
        raise ConfigError(f"--out {ns.out_dir}: it holds {_held(out / RESULT)} already: give --overwrite to train "
                          f"again and replace it{saved}, or another --out")
    return ns.out_dir


def _held(record: Path) -> str:
    try:
        rec = read_record(record)
    except CorruptRecord:
        return f"an unreadable {record.name}"
    return f"the record of {rec['run_id']} ({rec['status']})"


def interrupted_line(ns: argparse.Namespace, out: str) -> str:
    """The one line a Ctrl-C ends ``run`` with: how far it got, and the command that goes on."""
    from benchlib.training import resume
    state = resume.saved_step(Path(out))
    argv = [a for a in ns.argv if a not in ("--overwrite", "--resume")]
    if not any(a == "--out" or a.startswith("--out=") for a in argv):
        argv += ["--out", out]
    if state:
        said = f"its state after {state['step'] + 1} of {state['steps']} steps is saved; continue it with"
        argv.append("--resume")
    else:
        said = "no state saved (--state_every N saves one); train it again with"
        argv += ["--overwrite"] if (Path(out) / RESULT).is_file() else []
    return f"dtype-bench run: interrupted: {said}: dtype-bench {shlex.join(argv)}"


def run_command(ns: argparse.Namespace) -> int:
    """``dtype-bench run``: train the run the flags name, print its summary; 0 for a trained run."""
    from benchlib.training.loop import run
    cfg = run_config_from_args(ns)
    out = run_folder(ns, cfg)
    if cfg.dist.strategy != "single" and cfg.dist.nproc == 1 and "WORLD_SIZE" not in os.environ:
        print(f"note: dist.strategy={cfg.dist.strategy} with dist.nproc=1 runs ONE process under torchrun "
              f"(the strategy's overhead, no parallelism); give --dist.nproc N for N processes", file=sys.stderr)
    try:
        rec = run(cfg, out_dir=out, progress=not ns.quiet)
    except KeyboardInterrupt:
        print(interrupted_line(ns, out), file=sys.stderr)
        return 130
    where = (f"record: {rec['_path']}" if rec.get("_path") else
             f"existing record kept: {rec['_kept']}" if rec.get("_kept") else "no record written")
    if rec["status"] not in TRAINED:  # nothing was measured: the reason is the message
        print(f"  {where}")
        # skipped: the device or the installed packages cannot run the config (its record says
        # so for a study), a refusal of what was asked, like an error
        print(f"dtype-bench run: {rec['run_id']}: {rec['status']}: {last_line(rec['reason'])}", file=sys.stderr)
        return 1
    m = rec["metrics"]
    print(f"{rec['run_id']}: {rec['status']}" + (f" ({last_line(rec['reason'])})" if rec["reason"] else ""))
    print(f"  {m.get('quality_name')}={fmt(m.get('quality'))}  throughput={fmt(m.get('throughput'))} "
          f"{m.get('throughput_unit')}  memory={fmt(m.get('memory'))} GiB  step={fmt(m.get('step_ms'))} ms")
    from benchlib.study.notebook import result_summary
    for line in result_summary(rec).splitlines()[1:]:  # the data; vs the trivial baseline; forensics
        print(f"  {line}")
    print(f"  {where}")
    # a finished run, whatever it measured (stalled, degraded, diverged), is not a failure of the command
    return 0


def build_parser() -> ArgumentParser:
    """``python -m benchlib.run``'s parser: the flags of ``dtype-bench run``."""
    p = ArgumentParser(prog="python -m benchlib.run", description="Train one (scenario, config, seed) and write its record.")
    add_run_args(p)
    add_out_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ns = build_parser().parse_args(argv)
    ns.argv = ["run", *argv]  # the command as ``dtype-bench`` takes it (interrupted_line)
    try:
        return run_command(ns)
    except (ConfigError, ValueError) as e:
        print(f"dtype-bench: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
