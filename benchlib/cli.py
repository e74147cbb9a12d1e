"""``dtype-bench`` / ``python -m benchlib``: one CLI over the package.

Subcommands whose code lives in other modules are dispatched lazily (``module:function``
taking ``argv``), so ``dtype-bench configs`` does not import the analysis stack.
"""
from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
import tempfile
from pathlib import Path

from benchlib.core.argparser import ArgumentParser, field_help, field_metavar
from benchlib.core.records import RESULT, TRAINED, CorruptRecord, read_record
from benchlib.core.runconfig import LEGACY_KEYS, SECTIONS, ConfigError, RunConfig, first_sentence
from benchlib.core.scenarios import SCENARIOS, TASK_ALIASES
from benchlib.study.html_export import fmt, last_line

# subcommand -> (module:function, one-line help)
LAZY = {
    "sweep": ("benchlib.host.sweep:main", "run a study file (params/*.yaml) through papermill"),
    "analyze": ("benchlib.analysis.report:main_analyze", "per-experiment summary tables and charts"),
    "compare": ("benchlib.analysis.report:main_compare", "cross-experiment ranking flips and hypotheses"),
    "arms": ("benchlib.analysis.arms:main", "what one setting (an arm) costs or gains against a baseline, paired run by run"),
    "transfer": ("benchlib.analysis.transfer:main", "a synthetic study's effects next to a real-data study's: where each verdict comes from"),
    "findings": ("benchlib.analysis.findings:main", "the README's Findings section from a study's comparison.json"),
    "scaling": ("benchlib.analysis.scaling:main", "multi-GPU scaling analysis"),
    "rejudge": ("benchlib.study.rejudge:main", "judge finished runs again by today's health rules, from their logged losses"),
    "compact": ("benchlib.study.compact:main", "a study folder as committed: one records table, thinned logs, each chart once"),
    "pack": ("benchlib.host.pack:main_pack", "one archive of a study's new records, to carry back from a GPU host"),
    "unpack": ("benchlib.host.pack:main_unpack", "put a pack archive's files in place (never over different ones)"),
}

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
    for old, new in LEGACY_KEYS.items():  # --strategy, --nproc: older spellings of --dist.*
        p.add_argument(f"--{old}", dest=new, default=None, help=argparse.SUPPRESS)
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


def _cmd_run(ns: argparse.Namespace) -> int:
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


def _cmd_infer(ns: argparse.Namespace) -> int:
    from benchlib.training.inference import infer
    cfg = run_config_from_args(ns)
    rec = infer(cfg, [m for m in ns.modes.split(",") if m], out_dir=ns.out_dir, iters=ns.iters,
                prompt_len=ns.prompt_len, new_tokens=ns.new_tokens)
    print(f"{cfg.scenario} {cfg.size} on {rec['env']['device_name']}: {rec['weights']}")
    for r in rec["modes"]:
        if r["status"] != "ok":
            print(f"  {r['mode']:14s} {r['status']}: {r['reason']}")
            continue
        q = next(((k.split('/', 1)[1], v) for k, v in r.items() if k in ("quality/val_loss", "quality/accuracy",
                                                                         "quality/micro_f1")), ("-", None))
        line = (f"  {r['mode']:14s} forward {fmt(r['forward_ms'])} ms  {fmt(r['throughput'])} {r['throughput_unit']}"
                f"  {q[0]}={fmt(q[1])}  memory={fmt(r['memory/peak_gib'])} GiB")
        if "prefill_ms" in r:
            line += f"  prefill {fmt(r['prefill_ms'])} ms  decode {fmt(r['decode_ms_per_token'])} ms/token"
        print(line)
    if ns.out_dir:
        print(f"  record: {Path(ns.out_dir) / 'inference.json'}")
    return 0


SUPPORT_MARKERS = ("<!-- support:start -->", "<!-- support:end -->")


def _cmd_settings(ns: argparse.Namespace) -> int:
    """``configs --settings``: each candidate (``--all``: every config) as the settings of plain PyTorch,
    HF, Lightning and torchao."""
    from benchlib.core import settings
    roles = settings.ALL_ROLES if ns.all else ("candidate",)
    if ns.readme:
        from benchlib.analysis.findings import replace_block
        path = Path(ns.readme)
        path.write_text(replace_block(path.read_text(), settings.readme_block(roles), *settings.SETTINGS_MARKERS))
        print(f"{path}: settings table updated")
        return 0
    print(settings.settings_markdown(roles=roles))
    return 0


def _cmd_configs(ns: argparse.Namespace) -> int:
    from benchlib.core.dtypes import ALIASES, config_table, support_markdown
    if ns.settings:
        if ns.support or ns.capability:
            raise ConfigError("--settings and --support are two tables: give one")
        return _cmd_settings(ns)
    if ns.all:
        raise ConfigError("--all goes with --settings (the plain table already lists every config)")
    if ns.support or ns.capability or ns.readme:
        cap, name = ns.capability, None
        if cap is None:
            from benchlib.core import env
            device = env.pick_device("auto")
            cap, name = env.capability(device), env.device_name(device)
        if ns.readme:  # the README's block is the table of generations, whatever GPU is here
            from benchlib.analysis.findings import replace_block
            path = Path(ns.readme)
            path.write_text(replace_block(path.read_text(), support_markdown() + "\n", *SUPPORT_MARKERS))
            print(f"{path}: support matrix updated")
            return 0
        print(support_markdown(cap, name) if cap else support_markdown())
        if cap is None:
            print("No CUDA GPU here: --capability X.Y (e.g. 7.5 for a T4) adds a column for a card.")
        return 0
    import pandas as pd
    with pd.option_context("display.max_colwidth", 90, "display.width", 250):
        print(config_table().to_string())
    print("aliases: " + ", ".join(f"{a} -> {b}" for a, b in ALIASES.items()))
    print("which GPU runs which config: dtype-bench configs --support")
    print("each config in plain PyTorch's, HF Trainer's, Lightning's and torchao's settings: dtype-bench configs --settings")
    return 0


def _capability(text: str) -> tuple[int, int]:
    major, dot, minor = text.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a compute capability such as 8.0 or 7.5, got {text!r}")
    return int(major), int(minor)


def _cmd_scenarios(ns: argparse.Namespace) -> int:
    for s in SCENARIOS.values():
        print(f"{s.id}  {s.arch:8s} {s.task:12s} {s.loss:16s} {s.data:12s} quality={s.quality}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in LAZY:
        target, _ = LAZY[argv[0]]
        mod, fn = target.split(":")
        try:
            return int(getattr(importlib.import_module(mod), fn)(argv[1:]) or 0)
        except (ConfigError, ValueError, FileNotFoundError) as e:
            print(f"dtype-bench {argv[0]}: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # where the verb says nothing of its own (the sweep does)
            print(f"dtype-bench {argv[0]}: interrupted: run again with: dtype-bench {shlex.join(argv)}",
                  file=sys.stderr)
            return 130
    ns = build_parser().parse_args(argv)
    ns.argv = argv  # the command as typed (interrupted_line)
    try:
        return ns.fn(ns)
    except (ConfigError, ValueError) as e:
        print(f"dtype-bench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before run's own (interrupted_line), or another verb
        print(f"dtype-bench {ns.cmd}: interrupted: run again with: dtype-bench {shlex.join(argv)}", file=sys.stderr)
        return 130


def build_parser() -> ArgumentParser:
    """The parser of the subcommands defined here (those of ``LAZY`` parse their own argv)."""
    parser = ArgumentParser(prog="dtype-bench", description="Which floating-point setup to train with, measured.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_run = sub.add_parser("run", help="train one (scenario, config, seed) and write its record")
    add_run_args(p_run)
    add_out_args(p_run)
    p_run.set_defaults(fn=_cmd_run)
    p_inf = sub.add_parser("infer", help="inference speed, memory and quality per inference precision")
    add_run_args(p_inf)
    p_inf.add_argument("--modes", default="fp32,autocast_bf16,autocast_fp16,bf16,fp16",
                       help="Inference precisions, comma-separated (benchlib.training.inference.MODES).")
    p_inf.add_argument("--iters", type=int, default=10, help="Timed forward passes per mode (default: 10).")
    p_inf.add_argument("--prompt_len", type=int, default=128, help="GPT-2 causal LM: prompt tokens (default: 128).")
    p_inf.add_argument("--new_tokens", type=int, default=32, help="GPT-2 causal LM: tokens decoded with the KV cache (default: 32).")
    p_inf.set_defaults(fn=_cmd_infer)
    p_cfg = sub.add_parser("configs", help="table of dtype configurations; --support: which GPU runs which; "
                           "--settings: each as other libraries' settings",
                           description="The dtype configurations (benchlib/core/dtypes.py REGISTRY). With no flag: "
                           "every config's fields, role and definition hash. --support: which GPU generation runs "
                           "which config. --settings: what each candidate is in plain PyTorch, HF Trainer, "
                           "Lightning and torchao settings (--all: every config). --readme writes either table "
                           "into a README.")
    p_cfg.add_argument("--support", action="store_true",
                       help="Which configs each GPU generation runs, and this machine's GPU (a markdown table).")
    p_cfg.add_argument("--capability", type=_capability, default=None, metavar="X.Y",
                       help="With --support: a column for a GPU of this compute capability (e.g. 7.5, a T4).")
    p_cfg.add_argument("--settings", action="store_true",
                       help="Each candidate config as the settings people type: plain PyTorch (torch.autocast, "
                       "GradScaler, TF32 flags, the optimizer), HF Trainer (TrainingArguments bf16/fp16/tf32/optim), "
                       "Lightning (Trainer precision=) and torchao (_AdamW bf16_stochastic_round, float8), with "
                       "\"no equivalent\" where a library cannot express one, and which setups a test checks "
                       "(a markdown table; what every row shares is said once in the notes under it). Candidates "
                       "only, unless --all.")
    p_cfg.add_argument("--all", action="store_true",
                       help="With --settings: every config of the registry, controls and ablations too (they "
                       "isolate one mechanism or switch one feature off; they are not setups to choose), not "
                       "only the candidates; with --readme too.")
    p_cfg.add_argument("--readme", default=None, metavar="PATH",
                       help="With --support: write the support matrix between the support markers of this file "
                       "(README.md); with --settings: the settings table between <!-- settings:start --> and "
                       "<!-- settings:end -->.")
    p_cfg.set_defaults(fn=_cmd_configs)
    sub.add_parser("scenarios", help="the six scenarios A-F").set_defaults(fn=_cmd_scenarios)
    for name, (_, help_) in LAZY.items():
        sub.add_parser(name, help=help_, add_help=False)
    return parser
