"""``make smoke`` answers: params/smoke.yaml, executed end to end (training notebooks, records,
analysis notebooks, HTML), learns a scenario under the learned gate, sees a config break, and its
summary ends with the study's answer table, labelled a smoke answer."""
import json

import pytest


@pytest.fixture
def smoke(smoke_study):
    """params/smoke.yaml executed once (conftest), with what it printed."""
    return smoke_study


def test_smoke_learns_a_scenario_and_sees_a_config_break(smoke):
    rc, study, _ = smoke
    assert rc == 0
    comp = json.loads((study / "comparison" / "comparison.json").read_text())
    learned = [s for s, v in comp["learned"].items() if v["learned"] is True]
    assert learned, {s: v["reason"] for s, v in comp["learned"].items()}
    broke = [(e["scenario"], e["config"]) for e in comp["recommendation_evidence"]
             if e["verdict"] == "failed" and e["role"] == "candidate"]
    assert broke, comp["recommendation_evidence"]
    # the config that broke where a scenario learned is not the reference that learned it
    assert {c for s, c in broke if s in learned} - {comp["learned"][s]["reference"] for s in learned}
    assert (study / "html" / "index.html").exists()
    assert (study / "analysis" / "11_compare_experiments.ipynb").exists()


def test_smoke_summary_ends_with_the_labelled_answer_table(smoke):
    _, study, out = smoke
    comp = json.loads((study / "comparison" / "comparison.json").read_text())
    lines = out.splitlines()
    last_scenario = max(i for i, ln in enumerate(lines) if ln.startswith("scenario "))
    label = next(i for i, ln in enumerate(lines) if "Smoke answer, not a recommendation" in ln)
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| config | "))
    assert last_scenario < label < head < next(i for i, ln in enumerate(lines) if ln.startswith("where to look"))
    assert lines[head] == "| config | " + " | ".join(comp["scenarios"]) + " |"
    rows = {ln.split("|")[1].strip(): ln for ln in lines[head + 2:] if ln.startswith("| ")}
    for e in comp["recommendation_evidence"]:
        if e["role"] == "candidate":  # each candidate's cell shows the comparison's own verdict
            cell = rows[e["config"]].split("|")[2 + comp["scenarios"].index(e["scenario"])]
            assert f"**{e['verdict']}" in cell, (e, cell)
