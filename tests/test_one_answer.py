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
