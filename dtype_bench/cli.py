"""``dtype-bench`` / ``python -m dtype_bench``: one CLI over benchlib and the study tooling.

``run`` is ``benchlib.run``'s command. Subcommands whose code lives in other modules are
dispatched lazily (``module:function`` taking ``argv``), so ``dtype-bench configs`` does not
import the analysis stack.
"""
from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from pathlib import Path

from benchlib.core.argparser import ArgumentParser
from benchlib.core.records import fmt
from benchlib.core.runconfig import ConfigError
from benchlib.core.scenarios import SCENARIOS
from benchlib.run import add_out_args, add_run_args, run_command, run_config_from_args

# subcommand -> (module:function, one-line help)
LAZY = {
    "sweep": ("dtype_bench.host.sweep:main", "run a study file (params/*.yaml) through papermill"),
    "analyze": ("benchlib.analysis.report:main_analyze", "per-experiment summary tables and charts"),
    "compare": ("benchlib.analysis.report:main_compare", "cross-experiment ranking flips and hypotheses"),
    "arms": ("benchlib.analysis.arms:main", "what one setting (an arm) costs or gains against a baseline, paired run by run"),
    "transfer": ("benchlib.analysis.transfer:main", "a synthetic study's effects next to a real-data study's: where each verdict comes from"),
    "findings": ("dtype_bench.findings_cmd:main", "the README's Findings section from a study's comparison.json"),
    "scaling": ("benchlib.analysis.scaling:main", "multi-GPU scaling analysis"),
    "rejudge": ("dtype_bench.study.rejudge:main", "judge finished runs again by today's health rules, from their logged losses"),
    "compact": ("dtype_bench.study.compact:main", "a study folder as committed: one records table, thinned logs, each chart once"),
    "refresh": ("dtype_bench.refresh:main", "the answer again after new runs: analyse, compare, findings, "
                "until each of its studies shows it"),
    "pack": ("dtype_bench.host.pack:main_pack", "one archive of a study's new records, to carry back from a GPU host"),
    "unpack": ("dtype_bench.host.pack:main_unpack", "put a pack archive's files in place (never over different ones)"),
}

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
        from benchlib.core.blocks import replace_block
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
            from benchlib.core.blocks import replace_block
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
    p_run.set_defaults(fn=run_command)
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
