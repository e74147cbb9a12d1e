"""One answer everywhere: the README's Findings, executed/ANSWER.md, executed/README.md, and the HTML
report and executed comparison notebook of every study the answer is made of state the same default
and the same verdict table (issue 53: the report once said "default: amp_bf16" where the README
said another)."""
import json
import re

import pytest
from conftest import REPO

from benchlib.analysis import findings

ANSWER = REPO / findings.ANSWER_FILE


def _block() -> str:
    text = (REPO / "README.md").read_text()
    return text[text.index(findings.START):text.index(findings.END)]


def _default(text: str) -> str:
    """The default sentence: the line that opens with the rule's verdict."""
    return next(ln for ln in text.splitlines() if re.match(r"\**(No default|Default)", ln.lstrip("> ")))


def _table(text: str) -> list[str]:
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| config |"))
    end = next(i for i in range(head, len(lines)) if not lines[i].startswith("|"))
    return lines[head:end]


def test_the_committed_answer_is_the_readmes_and_names_its_studies():
    answer = ANSWER.read_text()
    assert _default(answer) == _default(_block()) and _table(answer) == _table(_block())
    studies = findings.answer_studies(answer)
    assert studies and studies == findings.answer_studies(_block())
    assert all((REPO / s).is_dir() for s in studies)


def test_executed_readme_states_the_same_answer():
    text = (REPO / "executed" / "README.md").read_text()
    assert _default(text) == _default(ANSWER.read_text()) and _table(text) == _table(ANSWER.read_text())


NUMBERS = r"(?:-|\d+\.\d\dx) / \d+\.\d\dx / \d+\.\d\dx|[+-]\d+\.\d\d% \[[+-]\d+\.\d\d, [+-]\d+\.\d\d\]"
"""A verdict table's numbers: each cell's speed multipliers and each quality change with its interval."""


def _numbers_after(text: str, anchor: str, n: int) -> list[str]:
    """The first ``n`` verdict-table numbers from the answer's default sentence on."""
    flat = text.replace("\n", " ").replace("**", "")
    assert anchor in flat
    return re.findall(NUMBERS, flat[flat.index(anchor):])[:n]


@pytest.mark.parametrize("study", findings.answer_studies(ANSWER.read_text()) if ANSWER.exists() else [])
def test_each_studys_report_and_notebook_show_the_answers_numbers(study):
    """Not only its default: every multiplier and interval of the table, in order (an analysis run
    before the findings that changed the answer shows the answer before them)."""
    answer = ANSWER.read_text()
    numbers = re.findall(NUMBERS, answer)
    anchor = _default(answer).replace("**", "").split(":")[0].strip()  # "No default under the rules" / "Default"
    assert numbers
    html = re.sub(r"<[^>]+>", " ", (REPO / study / "html" / "index.html").read_text())
    assert _numbers_after(re.sub(r" +", " ", html), anchor, len(numbers)) == numbers, f"{study}: its report"
    nb = REPO / study / "analysis" / "11_compare_experiments.ipynb"
    if nb.exists():
        cells = json.loads(nb.read_text())["cells"]
        shown = "".join(str(o.get("data", {}).get("text/markdown", "")) for c in cells for o in c.get("outputs", []))
        assert _numbers_after(shown, anchor, len(numbers)) == numbers, f"{study}: its comparison notebook"


@pytest.mark.parametrize("study", findings.answer_studies(ANSWER.read_text()) if ANSWER.exists() else [])
def test_each_studys_report_and_notebook_state_the_same_default(study):
    raw = _default(ANSWER.read_text())
    default = raw.replace("**", "")
    pick = re.search(r"\*\*((?:Provisional|Default): [^*]+)\*\*", raw)  # the configs the answer names
    html = (REPO / study / "html" / "index.html").read_text()
    plain = re.sub(r"<[^>]+>", "", html)
    assert default.split(" - ")[0].split(":")[0] in plain  # "No default under the rules" / "Default"
    assert default.split(" - ")[0][:60] in plain.replace("\n", " ")
    assert pick is None or pick.group(1) in plain.replace("\n", " ")
    nb = REPO / study / "analysis" / "11_compare_experiments.ipynb"
    if nb.exists():
        cells = json.loads(nb.read_text())["cells"]
        shown = "".join(str(o.get("data", {}).get("text/markdown", "")) for c in cells for o in c.get("outputs", []))
        assert default.split(" - ")[0][:60] in shown.replace("\n", " ").replace("**", "")
        assert pick is None or pick.group(1) in shown.replace("\n", " ").replace("**", "")


def test_no_output_of_an_answer_study_names_another_default():
    """Each study's own lines say what it alone picks, never "default:" (the word is the answer's)."""
    for study in findings.answer_studies(ANSWER.read_text()):
        comp = REPO / study / "comparison" / "comparison.json"
        if comp.exists():
            lines = json.loads(comp.read_text())["recommendations"]["universal"]
            assert not any(line.startswith("default:") for line in lines), study


def test_findings_names_the_studies_whose_notebooks_show_another_answer(tmp_path):
    """`findings --answer` says which of the answer's studies must be analysed again: those whose
    comparison notebook shows a row of an earlier answer."""
    answer = (f"{findings.STUDIES_MARK} executed/h1/one executed/h1/two -->\n\n**No default under the rules**\n\n"
              "| config | A |\n|---|---|\n| amp_bf16 | **safe**<br>8.37x / 2.70x / 1.00x |\n")

    def analysed(study, row):
        nb = tmp_path / study / "analysis" / "11_compare_experiments.ipynb"
        nb.parent.mkdir(parents=True)
        out = {"output_type": "display_data", "data": {"text/markdown": answer.replace(
            "| amp_bf16 | **safe**<br>8.37x / 2.70x / 1.00x |", row)}, "metadata": {}}
        nb.write_text(json.dumps({"cells": [{"cell_type": "code", "outputs": [out]}]}))
    analysed("executed/h1/one", "| amp_bf16 | **safe**<br>8.37x / 2.70x / 1.00x |")
    analysed("executed/h1/two", "| amp_bf16 | **safe**<br>4.31x / 1.50x / 1.00x |")
    assert findings.showing_another_answer(answer, tmp_path) == ["executed/h1/two"]


def test_findings_names_a_study_whose_notebook_shows_another_legend(tmp_path):
    """The legend under the table ("Cell: ...") is part of the answer: a notebook analysed before a
    legend change (e.g. the hosts the speed was timed on) shows another answer too."""
    legend = "Cell: the verdict; each scenario's configs timed on one host, each config's runs alone on a GPU"
    answer = (f"{findings.STUDIES_MARK} executed/h1/one -->\n\n| config | A |\n|---|---|\n"
              f"| amp_bf16 | **safe** |\n\n{legend}\n")
    nb = tmp_path / "executed/h1/one/analysis/11_compare_experiments.ipynb"
    nb.parent.mkdir(parents=True)

    def shows(text):
        out = {"output_type": "display_data", "data": {"text/markdown": text}, "metadata": {}}
        nb.write_text(json.dumps({"cells": [{"cell_type": "code", "outputs": [out]}]}))
    shows(answer)
    assert findings.showing_another_answer(answer, tmp_path) == []
    shows(answer.replace("on one host,", "on one host except B (on 2 hosts),"))
    assert findings.showing_another_answer(answer, tmp_path) == ["executed/h1/one"]


def test_no_committed_answer_study_shows_another_scope_table_or_legend():
    assert findings.showing_another_answer(ANSWER.read_text(), REPO) == []
