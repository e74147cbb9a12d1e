"""``dtype-bench findings``: the README's Findings section comes from a study's comparison.json
and its records (the committed H200 quick study here), never from hand-written text."""
import json
import os
import subprocess
import sys
from pathlib import Path

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
        # one seed: no CI, and what would settle it is the verdict's own reason
        assert f"| {hid} | {h['claim']} | {h['verdict']} | - | {h['reason'].split('; ')[0][:120]} | `quick` |" in text


def test_a_changed_comparison_changes_the_findings():
    comp = json.loads(QUICK.read_text())
    comp["flips"] = [{"interpretation": "bf16_pure ranks 1st on A but 9th on D"}]
    comp["recommendations"]["universal"] = ["amp_bf16: safe on every scenario"]
    text = findings.render([("quick", comp, QUICK.parent.parent)], ["x.json"])
    assert "- bf16_pure ranks 1st on A but 9th on D" in text and "- amp_bf16: safe on every scenario" in text


def test_each_hypothesis_comes_from_the_study_that_decides_it(tmp_path):
    quality = json.loads(QUICK.read_text())
    speed = json.loads(QUICK.read_text())
    speed["hypotheses"]["seed001.H4"].update(verdict="rejected", reason="CI [0, 0] inside +-0: no effect", effect={
        "estimate": 0.0, "ci_low": 0.0, "ci_high": 0.0, "unit": "0-1"}, evidence={})
    speed["excluded"] = {"A": {"fp16_naive_noscale": "diverged 2/2 (median step 40)"}}
    text = findings.render([("reference", quality, QUICK.parent.parent), ("reference_speed", speed, tmp_path)],
                           ["q.json", "s.json"])
    assert "| seed001.H4 | " in text and "| rejected | 0 [0, 0] 0-1 | CI [0, 0] inside +-0: no effect | `reference_speed` |" in text
    h1 = quality["hypotheses"]["seed001.H1"]["reason"].split("; ")[0]
    assert "| seed001.H1 | " in text and f"| inconclusive | - | {h1} | `reference` |" in text
    assert "- `reference_speed`: fp16_naive_noscale on A: diverged 2/2" in text
    assert "no records under" in text  # the second study's folder has none: said, not invented


def test_a_speed_studys_verdict_names_the_configs_it_rests_on_that_the_quality_study_rejects(tmp_path):
    """H4 supported by a frontier of configs that fail on quality: the table says so."""
    quality = json.loads(QUICK.read_text())
    quality["recommendation_evidence"] = [{"scenario": "A", "config": "bf16_naive", "safe": False},
                                          {"scenario": "D", "config": "bf16_naive", "safe": None},
                                          {"scenario": "A", "config": "amp_bf16", "safe": True}]
    speed = json.loads(QUICK.read_text())
    speed["hypotheses"]["seed001.H4"].update(verdict="supported", effect={
        "estimate": 0.5, "ci_low": 0.5, "ci_high": 0.5, "unit": "0-1"}, evidence={
        "frontiers": {"A-D": {"A": ["bf16_naive"], "D": ["amp_bf16"]}},
        "summary": "frontiers differ on A-D (A: bf16_naive; D: amp_bf16)"})
    text = findings.render([("reference", quality, QUICK.parent.parent), ("reference_speed", speed, tmp_path)],
                           ["q.json", "s.json"])
    assert ("| supported | 0.5 [0.5, 0.5] 0-1 | frontiers differ on A-D (A: bf16_naive; D: amp_bf16); "
            "bf16_naive unsafe on A in `reference` | `reference_speed` |") in text


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


def test_the_readme_findings_are_what_the_command_writes_from_the_committed_comparisons():
    """The README's block is generated, never edited: re-rendering it from the comparisons it
    names gives the same text."""
    import re
    text = (REPO / "README.md").read_text()
    block = text[text.index(findings.START) + len(findings.START) + 1:text.index(findings.END)]
    args = re.search(r"Generated by `dtype-bench findings ([^`]+)`", block).group(1).split()
    ns = findings._parser().parse_args(args)
    assert ns.fp8_sizes and ns.arm_cost  # the README carries both extra studies' sections
    cwd = Path.cwd()
    try:
        os.chdir(REPO)  # the sources are paths relative to the repository
        assert block == findings.generate(ns)
    finally:
        os.chdir(cwd)


def _fp8_record(size, config, step_ms, study):
    return {"schema": 1, "run_id": f"{size}/A/{config}/seed0", "status": "ok", "reason": None, "scenario": "A",
            "config": config, "seed": 0, "dtype": {}, "wall_s": 1.0, "metrics": {"step_ms": step_ms, "step_ms_std": 1.0, "timed_steps": 50, "memory": 10.0},
            "run": {"size": size, "batch_size": 4, "grad_accum": 1, "seq_len": 16, "timing_windows": 5,
                    "extra": {"study": study, "arm": size}},
            "env": {"device_name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "git_commit": "abc123",
                    "date": "2026-11-24T10:00:00+00:00"}, "model": {"matmuls": []}}


def test_the_fp8_and_arm_cost_sections_come_from_those_studies_records(tmp_path):
    fp8 = tmp_path / "fp8_sizes"
    for size, ms in (("base", 125.0), ("xl", 80.0)):  # float8 slower at base, faster at xl
        for config, t in (("amp_bf16", 100.0), ("amp_bf16_fp8", ms)):
            d = fp8 / "runs" / size / "A" / config / "seed0"
            d.mkdir(parents=True)
            (d / "result.json").write_text(json.dumps(_fp8_record(size, config, t, "fp8_sizes")))
    text = "\n".join(findings.fp8_section(fp8))
    assert "**Where FP8 pays** (`fp8_sizes`: 4 runs on NVIDIA H100 80GB HBM3" in text
    assert "- amp_bf16_fp8: pays from xl (1.25x there); speed-up over amp_bf16" in text
    assert "base 0.80 [" in text and "xl 1.25 [" in text
    ck = tmp_path / "checkpointing"
    for arm, ms, gib in (("plain", 100.0, 10.0), ("checkpointed", 120.0, 6.0)):
        rec = _fp8_record("base", "fp32_tf32_matmul", ms, "checkpointing")
        rec["run"]["extra"]["arm"], rec["metrics"]["memory"], rec["run_id"] = arm, gib, f"{arm}/A/fp32_tf32_matmul/seed0"
        d = ck / "runs" / arm / "A" / "fp32_tf32_matmul" / "seed0"
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps(rec))
    text = "\n".join(findings.arm_cost_section(ck))
    assert "- A fp32_tf32_matmul checkpointed: step time +20.0 [" in text and "peak memory -40% (10.00 -> 6.00 GiB)" in text
    with pytest.raises(UserError, match="--fp8-sizes .*no study folder"):
        findings.main([str(QUICK), "--fp8-sizes", str(tmp_path / "nowhere")])


REFERENCE = REPO / "executed" / "h100" / "reference" / "comparison" / "comparison.json"


def speed_study(tmp_path, measured: dict[str, dict[str, float]], cv: float | None = None, runs: int = 2,
                cv_of: dict[str, float] | None = None):
    """A speed study's comparison (every scenario not judged) and its config_stats.csv:
    ``measured[scenario][config]`` = throughput x fp32; memory 1 for all. With ``cv``, every
    config has ``runs`` runs whose throughput spreads by that coefficient of variation."""
    import pandas as pd
    from benchlib.analysis.tables import NOT_JUDGED
    rows = []
    noise = {} if cv is None else {"n": runs}
    for s, rel in measured.items():
        order = sorted(rel, key=rel.get, reverse=True)
        for c, x in rel.items():
            if cv is not None:
                noise.update(mean=100.0 * x, std=(cv_of or {}).get(c, cv) * 100.0 * x if runs > 1 else None)
            rows += [{"scenario": s, "config": c, "metric": "throughput", "rank": order.index(c) + 1.0, "rel": x,
                      "gain_pct": None, **noise},
                     {"scenario": s, "config": c, "metric": "memory", "rank": 1.0, "rel": 1.0, "gain_pct": None},
                     {"scenario": s, "config": c, "metric": "quality", "rank": None, "rel": None, "gain_pct": None}]
    (tmp_path / "comparison").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(tmp_path / "comparison" / "config_stats.csv", index=False)
    comp = json.loads(QUICK.read_text())
    comp["learned"] = {s: {"learned": None, "reason": NOT_JUDGED} for s in measured}
    return ("reference_speed", comp, tmp_path)


def test_the_default_is_the_fastest_universally_safe_config_of_the_speed_study(tmp_path):
    """The reference study calls 11 configs safe everywhere and measured no speed; the speed
    study's ranks pick the default among those 11 only (fp16_naive is faster and unsafe)."""
    ref = json.loads(REFERENCE.read_text())
    safe = sorted({r["config"] for r in ref["recommendation_evidence"]}
                  - {r["config"] for r in ref["recommendation_evidence"] if r["safe"] is not True})
    assert len(safe) == 11 and "amp_fp16" in safe and "fp16_naive" not in safe
    speeds = {c: 2.0 + 0.1 * i for i, c in enumerate(ref["configs"])}  # every config measured
    speeds["amp_fp16"], speeds["fp16_naive"], speeds["bf16_pure"] = 9.0, 20.0, 8.95
    text = findings.render([("reference", ref, REFERENCE.parent.parent),
                            speed_study(tmp_path, {"A": speeds, "D": speeds})], ["r.json", "s.json"])
    assert "**Recommended default** (quality: `reference`, speed and memory: `reference_speed`)" in text
    assert "- default: amp_fp16 - safe on all 6 scenarios; `reference_speed`: throughput 9.00x fp32" in text
    assert "default: fp16_naive" not in text and "no default yet" not in text
    assert "- A: fastest safe config amp_fp16 (`reference_speed`: throughput 9.00x fp32 on A" in text
    assert "as fast within 1%: bf16_pure (8.95x))" in text  # 0.6% slower: no reason to choose between them
    assert "- A: a safe config" not in text and "- B: a safe config amp_bf16" in text  # B: no speed measured
    assert "- A: avoid bf16_naive" in text  # the quality study's failures stay


def test_a_speed_studys_throughput_flips_join_the_quality_studys_flips(tmp_path):
    """The quality study timed nothing: which config is faster flipping between tasks comes from
    the speed study, named; its quality flips (there are none to read) would not be listed."""
    ref = json.loads(REFERENCE.read_text())
    name, comp, folder = speed_study(tmp_path, {"A": {c: 2.0 for c in ref["configs"]}})
    comp["flips"] = [{"metric": "throughput", "interpretation": "x beats y on throughput by 9% on A but trails it on C"},
                     {"metric": "quality", "interpretation": "x beats y on quality (not read in a speed study)"}]
    text = findings.render([("reference", ref, REFERENCE.parent.parent), (name, comp, folder)], ["r.json", "s.json"])
    flips = text[text.index("**What flips between tasks**"):text.index("**Where each configuration breaks**")]
    assert "- `reference_speed`: x beats y on throughput by 9% on A but trails it on C" in flips
    assert "not read in a speed study" not in flips
    assert len([ln for ln in flips.splitlines() if ln.startswith("- `reference`: ")]) == len(ref["flips"])


def test_a_speed_gap_within_seed_noise_is_a_tie(tmp_path):
    """amp_bf16 3% behind amp_fp16: a tie where seeds spread by 4% (1.96 standard errors of the
    gap: 7.8%), a difference where they spread by 0.5% (1%); one run each: noise unknown, said."""
    ref = json.loads(REFERENCE.read_text())
    speeds = {c: 2.0 for c in ref["configs"]}
    speeds["amp_fp16"], speeds["amp_bf16"] = 9.0, 8.73

    def line(folder, cv, runs=2):
        text = findings.render([("reference", ref, REFERENCE.parent.parent),
                                speed_study(tmp_path / folder, {"A": speeds}, cv, runs)], ["r.json", "s.json"])
        return next(ln for ln in text.splitlines() if ln.startswith("- A: fastest safe config"))
    assert line("noisy", 0.04).endswith("as fast within 1% or seed noise: amp_bf16 (8.73x))")
    assert line("quiet", 0.005).endswith("memory 1.00x fp32)")
    assert line("one", 0.04, runs=1).endswith("seed noise not estimated yet (no config with 2 runs))")
    # the scenario's seeds agree to 0.5%, amp_bf16's own two to 5%: its gap is within its own noise
    text = findings.render([("reference", ref, REFERENCE.parent.parent),
                            speed_study(tmp_path / "own", {"A": speeds}, 0.005, 2, {"amp_bf16": 0.05})], ["r", "s"])
    assert "as fast within 1% or seed noise: amp_bf16 (8.73x))" in text


def test_no_default_while_the_speed_study_misses_a_safe_config(tmp_path):
    ref = json.loads(REFERENCE.read_text())
    safe = sorted({r["config"] for r in ref["recommendation_evidence"]}
                  - {r["config"] for r in ref["recommendation_evidence"] if r["safe"] is not True})
    part = {c: 3.0 for c in safe if c != "bf16_pure"}
    text = findings.render([("reference", ref, REFERENCE.parent.parent),
                            speed_study(tmp_path, {"A": {c: 3.0 for c in safe}, "B": part})], ["r.json", "s.json"])
    assert "- no default yet: 11 configs are safe on every scenario; `reference_speed` has measured 10 of them" in text
    assert "missing: bf16_pure on B" in text and "default: " not in text
    assert "- B: fastest safe config not known yet: `reference_speed` has not measured bf16_pure on B" in text
