"""The command lines' argument parser: a mistake is one line on stderr (what is wrong, the
closest flag, where the help is) and exit status 2, and a flag is never matched by a prefix
(``--step`` is not ``--steps``)."""
from __future__ import annotations

import argparse
import sys

from benchlib.core.dtypes import closest


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


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every --flag of the parser and its subcommands (the top parser reports their unknowns)."""
    out = []
    for a in parser._actions:
        out += [s for s in a.option_strings if s.startswith("--")]
        for sub in (a.choices or {}).values() if isinstance(a, argparse._SubParsersAction) else ():
            out += _flags(sub)
    return list(dict.fromkeys(out))
