"""``dtype-bench findings``: the README's Findings block, ``executed/ANSWER.md`` and the answer's
chart written from the answer studies' ``comparison.json`` (``benchlib.analysis.findings.render``
composes the text; this command reads its inputs and writes the files):

    dtype-bench findings executed/h100/reference/comparison/comparison.json \
        executed/h100/reference_speed/comparison/comparison.json --readme README.md

The first study is the answer (its quality verdicts); the first later one built for speed gives
throughput and memory; each hypothesis comes from the study that decides it; the others, and
``--fp8_sizes`` / ``--arm_cost`` (``arms.compare``), are supporting lines, as are ``--transfer``
(``transfer.findings_line``) and ``--horizon`` (``horizon.findings_line``). ``--readme`` replaces the
block between the ``findings`` markers (appended when absent), so a rerun rewrites nothing.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from benchlib.analysis import answer, transfer
from benchlib.analysis.findings import (ANSWER_FILE, CHART, END, START, answer_arms, arm_cost_section, fp8_section,
                                        horizon_section, render, showing_another_answer, study_sources)
from benchlib.analysis.stats import Rules
from benchlib.core.argparser import ArgumentParser, existing_file
from benchlib.core.blocks import replace_block
from benchlib.core.errors import UserError

if TYPE_CHECKING:
    import altair as alt


def answer_text(body: str) -> str:
    """The answer alone from a Findings section: its opening (scope, default, table, legend, rule,
    absolute speed, where it breaks) and its provenance line, under its own title."""
    head = body[:body.index("\n**Hypotheses**")].removeprefix("## Findings\n").strip("\n")
    foot = body.rstrip("\n").splitlines()[-1]
    head = re.sub(r"\n\n!\[[^\n]*", "", head)  # the chart is a file beside it
    head, foot = (re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", x) for x in (head, foot))  # links: relative to README
    return ("# The answer\n\n<!-- Written by `dtype-bench findings --answer` (README's Findings command); edit the "
            "studies, not this file. -->\n\n" + head + "\n\n" + foot + "\n")


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="dtype-bench findings",
                                description="The README's Findings section from a study's comparison.json")
    p.add_argument("comparison", nargs="+", help="<study>/comparison/comparison.json (written by dtype-bench "
                   "compare); several: the first one's recommendation, each hypothesis from the study that decides it.")
    p.add_argument("--fp8_sizes", metavar="STUDY", help="Also where FP8 pays, from this fp8_sizes study's records.")
    p.add_argument("--arm_cost", metavar="STUDY", help="Also what this study's arms cost against its plain arm "
                   "(e.g. executed/h100/checkpointing).")
    p.add_argument("--transfer", metavar="DIR", help="Also where verdicts come from: DIR/transfer.csv (dtype-bench transfer).")
    p.add_argument("--horizon", metavar="STUDY", nargs="+", help="Also whether the gaps grow with training, from "
                   "these horizon studies' evaluations (e.g. executed/h200/reference_horizon_source_b999); two that "
                   "differ only in beta2 also get a line comparing each config's loss across beta2.")
    p.add_argument("--readme", type=existing_file, help="Rewrite this file's findings block instead of printing.")
    p.add_argument("--answer", metavar="FILE", help=f"Also write the answer alone (scope, default, table, rule, "
                   f"where it breaks) to FILE, e.g. {ANSWER_FILE}: the reports and notebooks of the studies it is made "
                   f"of show it.")
    return p


def generate(ns: argparse.Namespace) -> str:
    """The section for parsed arguments (``parser``): the comparisons, then the extra studies."""
    return render(*inputs(ns))


def inputs(ns: argparse.Namespace) -> tuple:
    """(studies, sources, extra lines, the first comparison's folders, horizon studies) for ``render``."""
    extra, sources = [], list(ns.comparison)
    for flag, folder, section in (("--fp8_sizes", ns.fp8_sizes, fp8_section), ("--arm_cost", ns.arm_cost, arm_cost_section),
                                  ("--transfer", ns.transfer, transfer.findings_line),
                                  ("--horizon", ns.horizon, horizon_section)):
        if folder:
            several = isinstance(folder, list)
            try:
                extra += section([Path(f) for f in folder] if several else Path(folder))
            except (FileNotFoundError, ValueError) as e:
                raise UserError(f"{flag} {' '.join(folder) if several else folder}: {e}") from None
            sources += [flag, *(folder if several else [folder])]
    studies = []
    for source in ns.comparison:
        path = Path(source)
        if not path.is_file():
            raise UserError(f"no comparison file {str(path)!r}: run `dtype-bench compare <study>` first")
        try:
            comparison = json.loads(path.read_text())
            comparison["recommendations"]["universal"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise UserError(f"{path}: not a comparison.json written by dtype-bench compare "
                            f"({type(e).__name__}: {e})") from None
        study_dir = path.parent.parent
        srcs = study_sources(comparison, study_dir)
        if study_dir.resolve() not in {p.resolve() for p in srcs}:  # written away from its studies
            study_dir = srcs[0]
        studies.append((study_dir.name, comparison, study_dir))
    first = study_sources(studies[0][1], studies[0][2])
    return studies, sources, extra, first, [Path(f) for f in ns.horizon or []]


def answer_chart(ns: argparse.Namespace) -> alt.Chart:
    """The answer table as a chart (``overview.answer_gaps``): a panel per column of the table."""
    from benchlib.analysis.overview import answer_gaps
    from benchlib.analysis.stats import is_loss
    studies, _, _, first, _ = inputs(ns)
    arms = answer_arms(studies, first)
    rows, minimum = [], {}
    for i, a in enumerate(arms):
        cells = answer.cells(a["comparison"], None)
        for s, g in cells.groupby("scenario"):
            col = s if i == 0 else f"{s} {a['label']}"
            metric = (a["recipe"].get(s) or {}).get("metric")
            minimum[col] = Rules.min_effect_loss_pct if is_loss(metric) else Rules.min_effect_score_pct
            rows.append((s, i, g[g["verdict"] != "reference"].assign(column=col)))
    return answer_gaps(pd.concat([g for _, _, g in sorted(rows, key=lambda r: r[:2])]), minimum)  # the table's order


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    body = generate(ns)
    if ns.answer:
        path = Path(ns.answer)
        text = answer_text(body)
        changed = not path.exists() or path.read_text() != text
        if changed:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        print(f"{path}: answer {'updated' if changed else 'unchanged'}")
        from benchlib.analysis.charts import save
        print(f"{save(answer_chart(ns), CHART.with_suffix(''), ('svg',))[0]}: the answer as a chart")
        if stale := showing_another_answer(text):
            print(f"{len(stale)} of its studies' notebooks and reports show another answer until each is analysed "
                  f"again (dtype-bench sweep STUDY_FILE --out ROOT --analysis_only, then compact): {', '.join(stale)}")
    if ns.readme:
        readme = Path(ns.readme)
        old = readme.read_text() if readme.exists() else ""
        new = replace_block(old, body, START, END)
        if new != old:
            readme.write_text(new)
        print(f"{readme}: findings {'updated' if new != old else 'unchanged'}")
    else:
        print(body, end="")
    return 0
