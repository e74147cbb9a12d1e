"""Every committed study's comparison (``executed/**/comparison*/comparison.json``) is what the
analysis gives today from its studies' own records (its ``sources``: one study, or several compared
together, e.g. the decoder and encoder studies on real data) (its records table: the studies are committed
compacted): tables, flips, recommendations and verdicts are reproduced (floats to a relative
1e-6; the bootstrap is seeded). A code change that moves a committed verdict fails here until the
study's analysis is run again and committed (``dtype-bench sweep params/<study>.yaml --out
executed/<gpu> --analysis_only``, then ``dtype-bench compact executed/<gpu>/<study>``).
``executed/README.md`` is what ``dtype-bench compact --readme`` writes from the studies there."""
import json
import math
import re
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

from benchlib.analysis.report import compare, load_study

TRACKED = subprocess.run(["git", "ls-files", "executed"], capture_output=True, text=True, cwd=REPO).stdout.split()
COMMITTED = [REPO / p for p in TRACKED if p.endswith("/comparison.json") and p.split("/")[-2].startswith("comparison")]
STUDIES = sorted({(REPO / p).parent for p in TRACKED if p.endswith("/records.jsonl.gz")})
"""Every committed folder of runs (a study, its pretrain, a measurement): its records table."""


def sources_of(comparison: dict) -> list:
    """The study folders a comparison was computed from, in this checkout (older comparisons named
    them by the absolute paths of the machine that ran it)."""
    return [REPO / s[s.rindex("executed/"):] for s in comparison["sources"]]


def tasks_of(comparison: dict) -> dict:
    """Source folder -> the kind of scenario taken from it ("lm", "cls"), for a comparison made with
    ``--lm_results``/``--cls_results``; {} where every scenario of every source was taken."""
    return {REPO / s[s.rindex("executed/"):]: t for s, t in (comparison.get("tasks") or {}).items()}


def same(a, b, where="") -> list[str]:
    """Where two JSON values differ (floats within a relative 1e-6)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in same(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b)) \
            else [f"{where}: {a} vs {b}"]
    return [] if a == b else [f"{where}: {str(a)[:120]!r} vs {str(b)[:120]!r}"]


def test_there_is_a_committed_study_to_check():
    assert COMMITTED, "no committed comparison.json: this test would check nothing"


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(REPO)) for p in COMMITTED])
def test_a_committed_comparison_is_reproduced_from_its_records(path):
    committed = json.loads(path.read_text())
    studies = sources_of(committed)
    assert path.parent.parent in studies, f"{path} was not computed from the study it lies in: {studies}"
    tasks = tasks_of(committed)
    again = json.loads(json.dumps(compare(load_study(*studies, tasks=tasks), None, sources=studies, tasks=tasks).result,
                                  default=str))
    diffs = same(committed, again)  # sources too: named from the repository, as in every clone
    assert not diffs, f"{len(diffs)} differences, first: " + "; ".join(diffs[:5])


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(REPO)) for p in COMMITTED])
def test_a_config_named_safe_on_a_scenario_was_tested_safe_there_not_its_reference(path):
    """A scenario's reference passes without a test: "safe on the most scenarios" counts only
    cells a config was shown safe in (the beta2 0.999 studies' reference is a candidate)."""
    comp = json.loads(path.read_text())
    verdict = {(e["scenario"], e["config"]): e["verdict"] for e in comp.get("recommendation_evidence", [])}
    for line in comp["recommendations"]["universal"]:
        m = re.match(r"safe on the most scenarios: (\S+) \(\d+/\d+: ([^)]*)\)", line)
        if m:
            assert all(verdict.get((s, m.group(1))) == "safe" for s in m.group(2).split(", ")), line
        m = re.match(r"safe on every scenario whose quality is established \(([^)]*)\): (.*)", line)
        for c in re.findall(r"(?:^|; )(\S+) \(", m.group(2)) if m else []:
            assert all(verdict.get((s, c)) == "safe" for s in m.group(1).split(", ")), line


def test_the_check_sees_a_changed_verdict():
    a = {"hypotheses": {"H1": {"verdict": "supported", "effect": {"estimate": 0.5}}}}
    b = {"hypotheses": {"H1": {"verdict": "inconclusive", "effect": {"estimate": 0.5 + 1e-3}}}}
    assert same(a, b) == [".hypotheses.H1.effect.estimate: 0.5 vs 0.501", ".hypotheses.H1.verdict: 'supported' vs "
                                                                          "'inconclusive'"]
    assert same(a, json.loads(json.dumps(a))) == []


def test_every_committed_study_is_compacted_and_the_readme_is_what_compact_writes():
    from benchlib.core.records import RECORDS_TABLE, STEPS_TABLE
    from dtype_bench.study.readme import readme_text
    assert TRACKED, "nothing committed under executed/: this test would check nothing"
    loose = [p for p in TRACKED if p.endswith(("/result.json", "/steps.jsonl", "/steps.jsonl.gz"))]
    assert not loose, f"{len(loose)} files of a fresh layout committed, e.g. {loose[:3]}: run dtype-bench compact"
    tables = [p for p in TRACKED if p.endswith("/" + RECORDS_TABLE)]
    assert len(tables) >= len(COMMITTED) and all(p.replace(RECORDS_TABLE, STEPS_TABLE) in TRACKED for p in tables)
    readme = REPO / "executed" / "README.md"
    assert readme.read_text() == readme_text(REPO / "executed"), \
        "executed/README.md is not what `dtype-bench compact --readme` writes: run it"


@pytest.mark.parametrize("study", ["reference_real_speed_pure", "reference_real_b999"])
def test_analyze_on_a_committed_study_rewrites_nothing(tmp_path, study):
    """`dtype-bench analyze` on a compacted committed study draws its tables and charts again to the
    same bytes and adds no file: a read-only look leaves the tree clean (reference_real_b999: its
    loss curves, drawn from the step rows a compacted study keeps)."""
    import filecmp
    import shutil
    from benchlib.analysis import report
    src = REPO / "executed" / "h200" / study
    copy = tmp_path / src.name
    shutil.copytree(src, copy)
    assert report.main_analyze([str(copy)]) == 0
    before = {p.relative_to(src) for p in src.rglob("*") if p.is_file()}
    after = {p.relative_to(copy) for p in copy.rglob("*") if p.is_file()}
    assert after == before
    changed = [str(p) for p in sorted(before) if not filecmp.cmp(src / p, copy / p, shallow=False)]
    assert not changed


def test_the_readmes_multi_gpu_findings_are_what_the_committed_multi_gpu_studies_give(monkeypatch):
    from benchlib.analysis import scaling
    from benchlib.core.blocks import replace_block
    monkeypatch.chdir(REPO)  # the block names the studies as the README's command does
    studies = ["executed/2xh200/strategies", "executed/2xh200/scaling"]
    if not all((REPO / s / "records.jsonl.gz").is_file() for s in studies):
        pytest.skip("no committed multi-GPU study")
    body = scaling.multi_gpu_findings(*studies, "docs/bench/parity_audit_2xh200_2026-11-29")
    assert not re.search(r"\{[A-Za-z_][^}]*\}", body), "a placeholder was left unformatted in the block"
    readme = (REPO / "README.md").read_text()
    assert replace_block(readme, body, *scaling.MULTI_GPU_MARKERS) == readme, \
        "README's multi-GPU findings differ from the committed studies: run the command above the block"
    # the check can fail: a changed record changes the block
    assert scaling.multi_gpu_findings(studies[0], studies[0]) != body


@pytest.mark.parametrize("folder", STUDIES, ids=[str(p.relative_to(REPO)) for p in STUDIES])
def test_every_committed_run_notebook_is_its_records_run(folder):
    """No committed run notebook ended before its record was made (an earlier run's, left beside a
    rerun's record: ``compact.stale_notebooks``)."""
    from dtype_bench.study.compact import stale_notebooks
    from benchlib.core.records import load_records
    assert stale_notebooks({Path(r["_path"]).parent: r for r in load_records(folder)}) == []


HORIZONS = sorted((REPO / p).parent.parent for p in TRACKED if p.endswith("/horizon/trend.csv"))


@pytest.mark.parametrize("study", HORIZONS, ids=[str(p.relative_to(REPO)) for p in HORIZONS])
def test_a_committed_horizon_is_reproduced_from_its_records(study):
    """The gap against the step and its trend (``horizon/``) are what the analysis gives today from
    the study's compacted records."""
    import io
    import pandas as pd
    from benchlib.analysis import horizon
    ev = horizon.evaluations(load_study(study))
    for name, fresh in (("gaps", horizon.gaps(ev)), ("trend", horizon.trend(ev))):
        kept = pd.read_csv(study / "horizon" / f"{name}.csv")
        assert len(kept) and list(kept.columns) == list(fresh.columns)
        again = pd.read_csv(io.StringIO(fresh.to_csv(index=False)))  # as the notebook wrote it
        pd.testing.assert_frame_equal(again, kept, check_dtype=False, rtol=1e-6)


def test_every_committed_analysis_notebook_links_its_charts_rather_than_holding_them():
    """An analysis run again (``--analysis_only``) writes its charts into the notebooks; ``compact``
    replaces each by a link to the study's chart file. A re-analysis committed without the compact
    adds ~1,000 lines a notebook: caught here."""
    notebooks = [p for p in TRACKED if "/analysis/" in p and p.endswith(".ipynb")]
    assert notebooks, "no analysis notebook committed: this test would check nothing"
    inline = {}
    for p in notebooks:
        cells = json.loads((REPO / p).read_text())["cells"]
        n = sum(1 for c in cells for o in c.get("outputs", []) for k in (o.get("data") or {})
                if k in ("image/svg+xml", "image/png") or k.startswith("application/vnd.vegalite"))
        if n:
            inline[p] = n
    assert not inline, f"charts held inline (run `dtype-bench compact <study>`): {inline}"
