"""The command lines' argument parser: a mistake is one line on stderr (what is wrong, the
closest flag, where the help is) and exit status 2, and a flag is never matched by a prefix
(``--step`` is not ``--steps``). A flag that sets a configuration field takes its help line
from the field's docstring (``field_help``), so the help and the documentation are one text.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from typing import Any, Literal

from benchlib.core.dtypes import closest
from benchlib.core.runconfig import field_docs, first_sentence


class ArgumentParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        hint = ""
        if message.startswith("unrecognized arguments:"):
            flags = _flags(self)
            unknown = next((w for w in message.split(":", 1)[1].split() if w.startswith("-")), None)
            hint = closest(unknown.split("=")[0], flags) if unknown and flags else ""
        print(f"{self.prog}: error: {message}.{hint} See {self.prog} --help", file=sys.stderr)
        self.exit(2)


def existing_file(text: str) -> str:
    """A flag's file that must be there already (a README whose block is rewritten): a path
    mistyped is refused rather than written as a new file."""
    from pathlib import Path
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text} (it rewrites a block of a file that exists)")
    return text


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every --flag of the parser and its subcommands (the top parser reports their unknowns)."""
    out = []
    for a in parser._actions:
        out += [s for s in a.option_strings if s.startswith("--")]
        for sub in (a.choices or {}).values() if isinstance(a, argparse._SubParsersAction) else ():
            out += _flags(sub)
    return list(dict.fromkeys(out))


def field_help(cls: type, name: str, default: str | None = None) -> str:
    """The help line of the flag that sets field ``name`` of the dataclass ``cls``: the first
    sentence of the field's docstring, then its default (``default``, where given, says it in
    words instead: e.g. where a study file can set it too). Empty where the field has no
    docstring (tests/test_cli_help.py keeps every flag's help non-empty)."""
    doc = field_docs(cls).get(name)
    if not doc:
        return ""
    if default is None:
        f = next(f for f in dataclasses.fields(cls) if f.name == name)
        default = _shown(f.default if f.default is not dataclasses.MISSING else f.default_factory())
    return f"{first_sentence(doc)} (default: {default})".replace("%", "%%")  # argparse %-formats help


def field_metavar(cls: type, name: str) -> str:
    """What the flag's value looks like: its choices for a Literal or a bool, else its name."""
    tp = typing.get_type_hints(cls)[name]
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is Literal:
        return "{" + ",".join(map(str, args)) + "}"
    if bool in (tp, *args):
        return "{true,false}"
    return name.upper()


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if value == "" else str(value)
