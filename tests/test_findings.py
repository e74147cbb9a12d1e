"""``dtype-bench findings``: the README's Findings section comes from a study's comparison.json
and its records (the committed H200 quick study here), never from hand-written text."""
import json
import subprocess
import sys

import pytest
from conftest import REPO

from benchlib.analysis import findings
from benchlib.core.errors import UserError

QUICK = REPO / "executed" / "h200" / "quick" / "comparison" / "comparison.json"


def test_findings_say_what_the_comparison_says():
    comp = json.loads(QUICK.read_text())
    text = findings.render([("quick", comp, QUICK.parent.parent)], ["x.json"])
    assert text.startswith("## Findings") and "`dtype-bench findings x.json`" in text
    assert "26 runs on NVIDIA H200" in text and "24c3be0d64ca" in text  # device and commits from the records
    assert comp["recommendations"]["universal"][0] in text  # the default (here: why there is none)
    assert "no flip beyond seed noise" in text and comp["flips"] == []
    assert "fp16_naive on A: degraded 1/1" in text
    assert "on D no config can be judged" in text and "amp_bf16 on D" not in text  # D did not learn
    for hid, h in comp["hypotheses"].items():
        assert f"| {hid} | {h['claim']} | {h['verdict']} | - | `quick` |" in text


def test_a_changed_comparison_changes_the_findings():
    comp = json.loads(QUICK.read_text())
    comp["flips"] = [{"interpretation": "bf16_pure ranks 1st on A but 9th on D"}]
    comp["recommendations"]["universal"] = ["amp_bf16: safe on every scenario"]
    text = findings.render([("quick", comp, QUICK.parent.parent)], ["x.json"])
    assert "- bf16_pure ranks 1st on A but 9th on D" in text and "- amp_bf16: safe on every scenario" in text


def test_each_hypothesis_comes_from_the_study_that_decides_it(tmp_path):
    quality = json.loads(QUICK.read_text())
    speed = json.loads(QUICK.read_text())
    speed["hypotheses"]["seed001.H4"].update(verdict="rejected", effect={
        "estimate": 0.0, "ci_low": 0.0, "ci_high": 0.0, "unit": "0-1"})
    speed["excluded"] = {"A": {"fp16_naive_noscale": "diverged 2/2 (median step 40)"}}
    text = findings.render([("reference", quality, QUICK.parent.parent), ("reference_speed", speed, tmp_path)],
                           ["q.json", "s.json"])
    assert "| seed001.H4 | " in text and "| rejected | 0 [0, 0] 0-1 | `reference_speed` |" in text
    assert "| seed001.H1 | " in text and "| inconclusive | - | `reference` |" in text
    assert "- `reference_speed`: fp16_naive_noscale on A: diverged 2/2" in text
    assert "no records under" in text  # the second study's folder has none: said, not invented


def test_the_readme_block_is_replaced_in_place_and_a_rerun_changes_nothing(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nintro\n\n{findings.START}\nold text\n{findings.END}\n\n## Later section\n")
    assert findings.main([str(QUICK), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "old text" not in text and "## Findings" in text and text.endswith("## Later section\n")
    assert text.index("intro") < text.index("## Findings") < text.index("## Later section")
    assert findings.main([str(QUICK), "--readme", str(readme)]) == 0
    assert readme.read_text() == text and "unchanged" in capsys.readouterr().out


def test_a_readme_without_markers_gets_the_block_at_its_end(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n")
    findings.main([str(QUICK), "--readme", str(readme)])
    assert readme.read_text().rstrip().endswith(findings.END)


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "comparison.json"
    bad.write_text("{}")
    with pytest.raises(UserError, match="not a comparison.json"):
        findings.main([str(bad)])
    r = subprocess.run([sys.executable, "-m", "benchlib", "findings", str(tmp_path / "none.json")],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode != 0 and r.stderr.strip().count("\n") == 0 and "dtype-bench compare" in r.stderr
