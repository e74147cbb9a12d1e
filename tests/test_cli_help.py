"""The command lines' help: every flag of every verb says what it does in whole sentences, and a
flag that sets a configuration field says it in the field's own docstring (its first sentence),
so the help and the documentation cannot drift apart."""
import argparse
import dataclasses
import importlib
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional
from unittest import mock

import pytest

from benchlib.analysis.stats import Rules
from dtype_bench.cli import LAZY, build_parser
from benchlib.core.argparser import ArgumentParser, field_help, field_metavar
from benchlib.core.runconfig import SECTIONS, DistConfig, RunConfig, field_docs, first_sentence
from dtype_bench.host import sweep
from benchlib.study.executor import ExecutorSettings

ROOT = Path(__file__).resolve().parents[1]


def _sub(name: str) -> argparse.ArgumentParser:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


PARSERS = {"run": lambda: _sub("run"), "infer": lambda: _sub("infer"), "sweep": sweep.build_parser}


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.option_strings[-1]: a for a in parser._actions
            if a.option_strings and not isinstance(a, argparse._HelpAction)}


@pytest.mark.parametrize("command", list(PARSERS))
def test_every_flag_has_help_and_none_is_hidden(command):
    flags = _flags(PARSERS[command]())
    for flag, action in flags.items():  # no hidden older spelling: one name a flag
        assert action.help != argparse.SUPPRESS and action.help and action.help.strip(), f"{command} {flag}"
    assert len(flags) > 15


def _field_of(flag: str, parser_name: str):
    """The (dataclass, field) a flag sets, or None for the command's own options."""
    key = flag.removeprefix("--")
    if parser_name == "sweep":  # the executor: section's keys, through --set
        return None
    if key not in RunConfig.keys():
        return None
    section, dot, name = key.rpartition(".")
    return (SECTIONS[section], name) if dot else (RunConfig, name)


@pytest.mark.parametrize("command", list(PARSERS))
def test_a_field_flag_s_help_is_the_first_sentence_of_the_field_s_docstring(command):
    fields = 0
    for flag, action in _flags(PARSERS[command]()).items():
        target = _field_of(flag, command)
        if target is None or action.help == argparse.SUPPRESS:
            continue
        cls, name = target
        shown = action.help.replace("%%", "%")
        assert shown.startswith(first_sentence(field_docs(cls)[name]) + " (default: "), (flag, shown)
        fields += 1
    assert fields >= {"run": len(RunConfig.keys()) - 1, "infer": len(RunConfig.keys()) - 1, "sweep": 0}[command]


def test_every_flag_of_configs_has_help():
    flags = _flags(_sub("configs"))
    assert {"--support", "--settings", "--all", "--readme"} <= set(flags)
    assert all(a.help and a.help.strip() for a in flags.values())
    assert "--settings" in flags["--all"].help and "--all" in flags["--settings"].help


def test_the_sweep_s_set_flag_names_every_key_of_the_executor_section():
    shown = _flags(sweep.build_parser())["--set"].help
    assert all(k in shown for k in ExecutorSettings.keys() if k != "kind")


@pytest.mark.parametrize("cls", [RunConfig, DistConfig, ExecutorSettings])
def test_every_configuration_field_has_a_docstring(cls):
    docs = field_docs(cls)
    assert [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)] == []


# ---- the mechanism, on dataclasses of the test's own ---------------------------------------
@dataclass
class Knobs:
    speed: float = 1.5
    """How fast, in m/s. A second sentence the help line leaves out."""
    mode: Literal["slow", "fast"] = "slow"
    """Mode, e.g. fast for 10% more ``speed``; slow otherwise. Details follow."""
    limit: Optional[int] = None
    verbose: bool = False
    """Say more."""


@dataclass
class KnobsReworded:
    speed: float = 2.5
    """Metres per second, at most."""


def test_the_help_line_is_the_docstring_s_first_sentence_and_the_default():
    assert field_help(Knobs, "speed") == "How fast, in m/s. (default: 1.5)"
    # "e.g." does not end the sentence, code marks are dropped, and % is escaped for argparse
    assert field_help(Knobs, "mode") == "Mode, e.g. fast for 10%% more speed; slow otherwise. (default: slow)"
    assert field_help(Knobs, "verbose") == "Say more. (default: false)"
    assert field_help(Knobs, "mode", default="the study's").endswith("(default: the study's)")
    assert field_metavar(Knobs, "mode") == "{slow,fast}" and field_metavar(Knobs, "verbose") == "{true,false}"
    assert field_metavar(Knobs, "limit") == "LIMIT"


def test_a_changed_docstring_changes_the_help_and_a_missing_one_leaves_it_empty():
    assert field_help(KnobsReworded, "speed") == "Metres per second, at most. (default: 2.5)"
    assert field_docs(Knobs)["speed"] != field_docs(KnobsReworded)["speed"]
    assert "limit" not in field_docs(Knobs) and field_help(Knobs, "limit") == ""


def test_argparse_prints_the_help_line_as_written():
    p = ArgumentParser(prog="knobs")
    p.add_argument("--mode", metavar=field_metavar(Knobs, "mode"), help=field_help(Knobs, "mode"))
    text = " ".join(p.format_help().split())
    assert "--mode {slow,fast} Mode, e.g. fast for 10% more speed; slow otherwise. (default: slow)" in text


@pytest.mark.parametrize("argv", [["run", "--help"], ["sweep", "--help"], ["--help"]])
def test_python_dash_m_benchlib_help_exits_0(argv):
    out = subprocess.run([sys.executable, "-m", "dtype_bench", *argv], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "usage: dtype-bench" in out.stdout
    if argv[0] == "run":
        assert first_sentence(field_docs(RunConfig)["seed"]) in " ".join(out.stdout.split())


# ---- every verb ---------------------------------------------------------------------------
class _Built(Exception):
    """Carries the parser a verb's main built, stopped before it parsed anything."""


def verb_parser(verb: str) -> argparse.ArgumentParser:
    """The parser of ``dtype-bench <verb>``: the CLI's own, or the one a lazy verb's main builds."""
    if verb not in LAZY:
        return _sub(verb)
    mod, fn = LAZY[verb][0].split(":")
    main = getattr(importlib.import_module(mod), fn)

    def built(parser, *args, **kwargs):
        raise _Built(parser)
    with mock.patch.object(argparse.ArgumentParser, "parse_args", built):
        try:
            main([])
        except _Built as b:
            return b.args[0]
    raise AssertionError(f"dtype-bench {verb} parsed no arguments")


VERBS = ["run", "infer", "configs", "scenarios", *LAZY]


def help_problem(text: str | None) -> str | None:
    """Why a help text is not whole: empty, cut off (unbalanced brackets), or not ending a sentence."""
    text = (text or "").strip()
    if not text:
        return "no help"
    if any(text.count(a) != text.count(b) for a, b in ("()", "[]", "{}")):
        return f"unbalanced brackets (cut mid-sentence?): {text!r}"
    if not text.endswith((".", ")", "]")):
        return f"does not end with a full stop or a closing bracket: {text!r}"
    return None


@pytest.mark.parametrize("verb", VERBS)
def test_every_flag_and_argument_of_every_verb_has_whole_help(verb):
    parser = verb_parser(verb)
    problems = [f"dtype-bench {verb} {a.option_strings[-1] if a.option_strings else a.dest}: {why}"
                for a in parser._actions
                if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS
                and (why := help_problem(a.help))]
    assert not problems, "\n".join(problems)


def test_the_help_check_finds_missing_and_cut_help():
    assert help_problem(None) == "no help" and help_problem("  ") == "no help"
    assert "unbalanced" in help_problem("Peak learning rate: GPT-3's (Brown et al.")
    assert "full stop" in help_problem("the study folder")
    assert help_problem("The study folder.") is None and help_problem("Seeds (default: 0)") is None


@pytest.mark.parametrize("cls", [RunConfig, DistConfig, ExecutorSettings, Rules])
def test_every_field_s_first_sentence_is_whole(cls):
    cut = {name: first_sentence(doc) for name, doc in field_docs(cls).items() if help_problem(first_sentence(doc))}
    assert not cut, cut


def test_et_al_does_not_end_a_sentence():
    assert first_sentence("GPT-3's value (Brown et al. 2020, table 2.1), for all. More.") == \
        "GPT-3's value (Brown et al. 2020, table 2.1), for all."


def test_compare_s_statistics_flags_say_what_they_set():
    flags = _flags(verb_parser("compare"))
    for flag in ("--n_boot", "--min_seeds"):
        assert flags[flag].help.startswith(first_sentence(field_docs(Rules)[flag[2:]])), flags[flag].help


SCRIPTS = {"audit": "benchlib.parallel.audit:main", "parity": "dtype_bench.parity:main",
           "build_data": "dtype_bench.build_data:main"}


def script_parser(name: str) -> argparse.ArgumentParser:
    mod, fn = SCRIPTS[name].split(":")
    main = getattr(importlib.import_module(mod), fn)

    def built(parser, *args, **kwargs):
        raise _Built(parser)
    with mock.patch.object(argparse.ArgumentParser, "parse_args", built), \
            mock.patch.object(argparse.ArgumentParser, "parse_known_args", built):
        try:
            main([])
        except _Built as b:
            return b.args[0]
    raise AssertionError(f"{name} parsed no arguments")


def snake_case_problems(parser: argparse.ArgumentParser, where: str) -> list[str]:
    """Flags not spelled as the run configuration's keys are (``--time_budget``, ``--dist.nproc``),
    in the parser and its subcommands."""
    out = []
    for a in parser._actions:
        out += [f"{where} {s}" for s in a.option_strings if s.startswith("--") and not re.fullmatch(r"--[a-z0-9_.]+", s)]
        for name, sub in (a.choices or {}).items() if isinstance(a, argparse._SubParsersAction) else ():
            out += snake_case_problems(sub, f"{where} {name}")
    return out


@pytest.mark.parametrize("command", [*VERBS, *SCRIPTS])
def test_every_command_spells_its_flags_one_way_snake_case(command):
    parser = script_parser(command) if command in SCRIPTS else verb_parser(command)
    assert not snake_case_problems(parser, command)


def test_the_spelling_check_finds_a_kebab_flag():
    p = ArgumentParser(prog="x")
    p.add_argument("--time-budget", help="A budget.")
    assert snake_case_problems(p, "x") == ["x --time-budget"]


@pytest.mark.parametrize("command", [*VERBS, *SCRIPTS])
def test_every_command_refuses_a_flag_s_prefix_in_one_line(command):
    """`compare --n_boo 5` once ran as --n_boot 5 (argparse's own parser matches prefixes) and a
    mistake printed its usage too: every command's parser is the project's."""
    parser = script_parser(command) if command in SCRIPTS else verb_parser(command)
    assert isinstance(parser, ArgumentParser) and parser.allow_abbrev is False


@pytest.mark.parametrize("verb, argv", [
    ("findings", ["executed/h200/reference_real_speed_pure/comparison/comparison.json", "--readme", "READ_ME.md"]),
    ("scaling", ["executed/2xh200/strategies", "--findings", "a", "b", "--readme", "READ_ME.md"]),
])
def test_a_mistyped_readme_is_refused_not_written(verb, argv, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    from dtype_bench.cli import main
    with pytest.raises(SystemExit) as e:
        main([verb, *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "READ_ME.md" in err and "no such file" in err and len(err.strip().splitlines()) == 1
    assert not (ROOT / "READ_ME.md").exists()
