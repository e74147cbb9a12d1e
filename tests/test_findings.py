"""``dtype-bench findings``: the README's Findings section comes from a study's comparison.json
and its records (the committed H200 quick study here), never from hand-written text."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, line_with

from benchlib.analysis import answer, contrasts, findings, hypothesis_scope, seed_plans
from benchlib.analysis.gates import NOT_JUDGED
from benchlib.core.errors import UserError
from dtype_bench import findings_cmd

QUICK = REPO / "executed" / "h200" / "quick" / "comparison" / "comparison.json"


def test_findings_say_what_the_comparison_says():
    comp = json.loads(QUICK.read_text())
    text = findings.render([("quick", comp, QUICK.parent.parent)], ["x.json"])
    assert text.startswith("## Findings") and "`dtype-bench findings x.json`" in text
    assert "26 runs on NVIDIA H200" in text and "24c3be0d64ca" not in text  # device from the records; no hashes
    assert "**No default" in text or "**Default: " in text  # the default, or why there is none
    assert "none passed the rules" in text and comp["flips"] == []
    for hid, h in comp["hypotheses"].items():
        assert f"| {hid} | {h['claim']} | {h['verdict']} | " in text and text.count(f"| {hid} |") == 1


def test_a_changed_comparison_changes_the_findings():
    comp = json.loads(QUICK.read_text())
    comp["flips"] = [{"interpretation": "bf16_pure ranks 1st on A but 9th on D"}]
    cell = next(r for r in comp["recommendation_evidence"] if r["role"] == "candidate" and r["verdict"] != "reference")
    cell.update(verdict="degraded", safe=False, reason="degraded 3/3 (test)")
    text = findings.render([("quick", comp, QUICK.parent.parent)], ["x.json"])
    assert "bf16_pure ranks 1st on A but 9th on D" in text
    assert f"- {cell['config']} at beta2 0.95: degraded on {cell['scenario']}" in text


def test_each_hypothesis_comes_from_the_study_that_decides_it(tmp_path):
    quality = json.loads(QUICK.read_text())
    speed = json.loads(QUICK.read_text())
    speed["hypotheses"]["seed001.H4"].update(verdict="rejected", reason="CI [0, 0] inside +-0: no effect", effect={
        "estimate": 0.0, "ci_low": 0.0, "ci_high": 0.0, "unit": "0-1"}, evidence={})
    text = findings.render([("reference", quality, QUICK.parent.parent), ("reference_speed", speed, tmp_path)],
                           ["q.json", "s.json"])
    row = next(ln for ln in text.splitlines() if ln.startswith("| seed001.H4 |"))
    assert "| rejected | CI [0, 0] inside +-0: no effect | " in row and row.endswith("| `reference_speed` |")
    h1 = quality["hypotheses"]["seed001.H1"]
    assert f"| seed001.H1 | {h1['claim']} | {h1['verdict']} | " in text and text.count("| seed001.H1 |") == 1
    assert "`reference_speed` (no records here)" in text  # the second study's folder has none: said, not invented


def test_a_speed_studys_verdict_names_the_configs_it_rests_on_that_the_quality_study_rejects(tmp_path):
    """H4 supported by a frontier of configs that fail on quality: the table says so."""
    quality = json.loads(QUICK.read_text())
    row = {"role": "candidate", "ok": 3, "runs": 3, "gap_pct": None, "ci_low": None, "ci_high": None}
    quality["recommendation_evidence"] = [
        {**row, "scenario": "A", "config": "bf16_naive", "safe": False, "verdict": "degraded", "reason": "degraded 3/3"},
        {**row, "scenario": "D", "config": "bf16_naive", "safe": None, "verdict": "untestable", "reason": "x"},
        {**row, "scenario": "A", "config": "amp_bf16", "safe": True, "verdict": "safe", "reason": "y"}]
    speed = json.loads(QUICK.read_text())
    speed["hypotheses"]["seed001.H4"].update(verdict="supported", effect={
        "estimate": 0.5, "ci_low": 0.5, "ci_high": 0.5, "unit": "0-1"}, evidence={
        "frontiers": {"A-D": {"A": ["bf16_naive"], "D": ["amp_bf16"]}},
        "summary": "frontiers differ on A-D (A: bf16_naive; D: amp_bf16)"})
    text = findings.render([("reference", quality, QUICK.parent.parent), ("reference_speed", speed, tmp_path)],
                           ["q.json", "s.json"])
    row = next(ln for ln in text.splitlines() if ln.startswith("| seed001.H4 |"))
    assert ("| supported | frontiers differ on A-D (A: bf16_naive; D: amp_bf16); "
            "bf16_naive unsafe on A in `reference` | ") in row and row.endswith("| `reference_speed` |")


def test_the_readme_block_is_replaced_in_place_and_a_rerun_changes_nothing(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nintro\n\n{findings.START}\nold text\n{findings.END}\n\n## Later section\n")
    assert findings_cmd.main([str(QUICK), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "old text" not in text and "## Findings" in text and text.endswith("## Later section\n")
    assert text.index("intro") < text.index("## Findings") < text.index("## Later section")
    assert findings_cmd.main([str(QUICK), "--readme", str(readme)]) == 0
    assert readme.read_text() == text and "unchanged" in capsys.readouterr().out


def test_a_readme_without_markers_gets_the_block_at_its_end(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n")
    findings_cmd.main([str(QUICK), "--readme", str(readme)])
    assert readme.read_text().rstrip().endswith(findings.END)


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "comparison.json"
    bad.write_text("{}")
    with pytest.raises(UserError, match="not a comparison.json"):
        findings_cmd.main([str(bad)])
    r = subprocess.run([sys.executable, "-m", "dtype_bench", "findings", str(tmp_path / "none.json")],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode != 0 and r.stderr.strip().count("\n") == 0 and "dtype-bench compare" in r.stderr


def test_the_readme_findings_are_what_the_command_writes_from_the_committed_comparisons():
    """The README's block is generated, never edited: re-rendering it from the comparisons it
    names gives the same text."""
    import re
    text = (REPO / "README.md").read_text()
    block = text[text.index(findings.START) + len(findings.START) + 1:text.index(findings.END)]
    args = re.search(r"Generated by `dtype-bench findings ([^`]+)`", block).group(1).split()
    ns = findings_cmd.parser().parse_args(args)
    assert ns.fp8_sizes and ns.arm_cost  # the README carries both extra studies' sections
    cwd = Path.cwd()
    try:
        os.chdir(REPO)  # the sources are paths relative to the repository
        assert block == findings_cmd.generate(ns)
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
    assert text.startswith("`fp8_sizes` (4 runs on NVIDIA H100 80GB HBM3") and text.count("\n") == 0
    assert line_with(text, "amp_bf16_fp8", "from xl", "1.25x")  # the smallest size it pays at, and by how much
    ck = tmp_path / "checkpointing"
    for arm, ms, gib in (("plain", 100.0, 10.0), ("checkpointed", 120.0, 6.0)):
        rec = _fp8_record("base", "fp32_tf32_matmul", ms, "checkpointing")
        rec["run"]["extra"]["arm"], rec["metrics"]["memory"], rec["run_id"] = arm, gib, f"{arm}/A/fp32_tf32_matmul/seed0"
        d = ck / "runs" / arm / "A" / "fp32_tf32_matmul" / "seed0"
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps(rec))
    text = "\n".join(findings.arm_cost_section(ck))
    assert line_with(text, "`checkpointed`", "+20%", "40%", "`plain`")  # 120 vs 100 ms, 6 vs 10 GiB
    assert text.count("\n") == 0
    with pytest.raises(UserError, match="--fp8_sizes .*no study folder"):
        findings_cmd.main([str(QUICK), "--fp8_sizes", str(tmp_path / "nowhere")])


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


def evidence(cells: dict[str, dict[str, str]]) -> dict:
    """QUICK's comparison with its per-cell verdicts replaced: ``cells[config][scenario]``."""
    comp = json.loads(QUICK.read_text())
    from benchlib.core.dtypes import REGISTRY
    comp["recommendation_evidence"] = [
        {"scenario": s, "config": c, "role": REGISTRY[c].role, "verdict": v, "safe": v in ("safe", "reference"),
         "reason": f"{v} (test)", "gap_pct": None, "ci_low": None, "ci_high": None}
        for c, by in cells.items() for s, v in by.items()]
    comp["reliability"] = {}
    return comp


def _default_line(text: str) -> str:
    return next(ln for ln in text.splitlines() if ln.startswith("**No default") or ln.startswith("**Default"))


SAFE_AD = {"A": "safe", "D": "safe"}


def test_the_default_is_the_fastest_candidate_safe_wherever_tested(tmp_path):
    """The speed study picks among the candidates safe wherever quality entered verdicts: a faster
    config that degraded or failed, or a control, is never the default; 0.6% is no difference."""
    comp = evidence({"fp32_baseline": {"A": "reference", "D": "reference"}, "amp_fp16": SAFE_AD, "amp_bf16": SAFE_AD,
                     "fp16_fp16_states": {"A": "degraded", "D": "safe"}, "bf16_naive": {"A": "safe", "D": "failed"},
                     "amp_bf16_eps1e4": SAFE_AD})
    speeds = {"fp32_baseline": 1.0, "amp_fp16": 9.0, "amp_bf16": 8.95, "fp16_fp16_states": 20.0, "bf16_naive": 19.0,
              "amp_bf16_eps1e4": 25.0}
    text = findings.render([("quick", comp, QUICK.parent.parent), speed_study(tmp_path, {"A": speeds, "D": speeds})],
                           ["r.json", "s.json"])
    default = _default_line(text)
    assert default.startswith("**Default: amp_fp16 and amp_bf16** (tied by the rule)")
    for never in ("fp16_fp16_states", "bf16_naive", "eps1e4", "fp32_baseline"):
        assert never not in default
    assert line_with(text, "**The rule.**", "a seed's two runs shared a GPU, else Welch's), on more of the speed studies' scenarios (A, D)")


def test_a_speed_studys_throughput_flips_join_the_quality_studys_flips(tmp_path):
    """The quality study timed nothing: which config is faster flipping between tasks comes from
    the speed study, named; its quality flips (there are none to read) would not be listed."""
    ref = json.loads(QUICK.read_text())
    name, comp, folder = speed_study(tmp_path, {"A": {c: 2.0 for c in ref["configs"]}})
    comp["flips"] = [{"metric": "throughput", "interpretation": "x beats y on throughput by 9% on A but trails it on C"},
                     {"metric": "quality", "interpretation": "x beats y on quality (not read in a speed study)"}]
    text = findings.render([("quick", ref, QUICK.parent.parent), (name, comp, folder)], ["r.json", "s.json"])
    flips = next(ln for ln in text.splitlines() if ln.startswith("**Flips between tasks**"))
    assert "`reference_speed`: x beats y on throughput by 9% on A but trails it on C" in flips
    assert "not read in a speed study" not in flips and f"({len(ref['flips']) + 1})" in flips


def test_reversals_the_rules_could_not_test_are_counted_not_shown_absent(tmp_path):
    """A speed study whose scenarios were timed on different hosts has order reversals the noise test
    cannot take: the flips line counts them and says why, so "no flip" is not read as "none"."""
    ref = json.loads(QUICK.read_text())
    ref["flips"] = []
    ref["method"]["reversals"] = {"quality": {"reversed_pairs": 2, "testable": 2, "significant": 0, "flips": 0}}
    name, comp, folder = speed_study(tmp_path, {"A": {c: 2.0 for c in ref["configs"]}})
    comp["flips"] = []
    comp["method"]["reversals"] = {"throughput": {"reversed_pairs": 5, "testable": 1, "significant": 0, "flips": 0},
                                   "memory": {"reversed_pairs": 2, "testable": 2, "significant": 0, "flips": 0}}

    def flips_line():
        text = findings.render([("quick", ref, QUICK.parent.parent), (name, comp, folder)], ["r.json", "s.json"])
        return next(ln for ln in text.splitlines() if ln.startswith("**Flips between tasks**"))

    line = flips_line()
    assert "Not tested: `reference_speed`: 4 throughput reversal(s) between scenarios" in line
    assert "timed on one host, >= 3 seeds a cell" in line and "quality flip" not in line  # quality: all tested
    assert "memory flip" not in line  # memory: all tested
    comp["method"]["reversals"]["memory"]["testable"] = 1
    assert "one GPU model and software stack, >= 3 seeds a cell" in flips_line()
    comp["method"]["reversals"]["throughput"]["testable"] = 5
    assert "speed flip" not in flips_line()
    comp["method"]["reversals"]["memory"]["testable"] = 2
    assert "not tested" not in flips_line().lower()


def test_faster_on_one_scenario_and_slower_on_another_is_a_tie_named_with_both(tmp_path):
    """amp_bf16 3% behind amp_fp16 on A and 3% ahead on D, equal memory: no mean over scenarios decides."""
    comp = evidence({"fp32_baseline": {"A": "reference", "D": "reference"}, "amp_fp16": SAFE_AD, "amp_bf16": SAFE_AD})
    speeds = {"A": {"fp32_baseline": 1.0, "amp_fp16": 9.0, "amp_bf16": 8.73},
              "D": {"fp32_baseline": 1.0, "amp_fp16": 3.0, "amp_bf16": 3.09}}
    default = _default_line(findings.render([("quick", comp, QUICK.parent.parent), speed_study(tmp_path, speeds)],
                                            ["r.json", "s.json"]))
    assert default.startswith("**Default: amp_fp16 and amp_bf16** (tied by the rule)")


def test_a_safe_config_the_speed_study_did_not_time_is_never_the_default(tmp_path):
    comp = evidence({"fp32_baseline": {"A": "reference", "B": "reference"}, "amp_bf16": {"A": "safe", "B": "safe"},
                     "bf16_body_fp32_head": {"A": "safe", "B": "safe"}})
    part = {"fp32_baseline": 1.0, "amp_bf16": 3.0}
    text = findings.render([("quick", comp, QUICK.parent.parent),
                            speed_study(tmp_path, {"A": {**part, "bf16_body_fp32_head": 5.0}, "B": part})],
                           ["r.json", "s.json"])
    assert line_with(_default_line(text), "Default: amp_bf16", "not timed: bf16_body_fp32_head")


def test_a_config_safe_at_one_beta2_only_is_not_the_default_at_both(tmp_path):
    """A second quality study at another beta2 is an arm: its columns sit beside the first's and a
    default must be safe in both."""
    first = evidence({"fp32_baseline": {"A": "reference"}, "amp_bf16": {"A": "safe"}, "bf16_pure": {"A": "safe"}})
    second = evidence({"fp32_baseline": {"A": "reference"}, "amp_bf16": {"A": "safe"}, "bf16_pure": {"A": "degraded"}})
    second["recipe"] = {"A": {"beta2": 0.999, "steps": [100], "seeds": [3, 3], "metric": "val_loss", "metric2": None,
                              "data": ["x"], "tokens_per_step": [64], "size": ["tiny"], "model": []}}
    first["recipe"] = {"A": {**second["recipe"]["A"], "beta2": 0.95}}
    speeds = {"A": {"fp32_baseline": 1.0, "amp_bf16": 3.0, "bf16_pure": 4.0}}
    text = findings.render([("quick", first, QUICK.parent.parent), ("b999", second, QUICK.parent.parent),
                            speed_study(tmp_path, speeds)], ["r.json", "b.json", "s.json"])
    assert _default_line(text).startswith("**Default: amp_bf16**")
    assert line_with(text, "| config | A | A beta2 0.999 |") and "- bf16_pure at beta2 0.999: degraded on A" in text


def test_a_stand_in_verdict_does_not_overrule_the_first_studys_test_of_the_config_itself():
    """seed 002 H1 names fp16_naive: the real arms ran it and saw no instability (untestable); the
    synthetic study decided it with fp16_fp16_states. The row keeps the real arms' verdict and names
    the stand-in's; a study that decides it with the config itself still fills an undecided row."""
    own = {"verdict": "untestable", "reason": "0 against 0", "evidence": {"config": "fp16_naive", "stand_in": False}}
    stand_in = {"verdict": "supported", "reason": "r", "evidence": {"config": "fp16_fp16_states", "stand_in": True}}
    same_cfg = {"verdict": "supported", "reason": "r", "evidence": {"config": "fp16_naive", "stand_in": False}}
    got = hypothesis_scope.merged_hypotheses([("real", {"hypotheses": {"H": own}}), ("syn", {"hypotheses": {"H": stand_in}})])
    assert got["H"][0] == "real" and got["H"][1]["verdict"] == "untestable"
    assert "`syn` supported it only with a stand-in (fp16_fp16_states)" in got["H"][1]["reason"]
    got = hypothesis_scope.merged_hypotheses([("real", {"hypotheses": {"H": own}}), ("other", {"hypotheses": {"H": same_cfg}})])
    assert got["H"] == ("other", same_cfg)


def test_a_later_study_does_not_decide_what_the_first_measured_and_left_open():
    """seed 002 H3: the real arms measured the contrast, but their models differ in size
    (inconclusive, with an effect); the synthetic study rejects it on its own arms. The row keeps
    the real arms' verdict and names the other; with no effect measured first, the later decides."""
    open_ = {"verdict": "inconclusive", "reason": "size confounds architecture", "effect": {"estimate": -1.3}}
    decided = {"verdict": "rejected", "reason": "r", "effect": {"estimate": -0.6}}
    got = hypothesis_scope.merged_hypotheses([("real", {"hypotheses": {"H": open_}}), ("syn", {"hypotheses": {"H": decided}})])
    assert got["H"][0] == "real" and got["H"][1]["verdict"] == "inconclusive"
    assert "`syn` rejected it on its own arms" in got["H"][1]["reason"]
    short = {"verdict": "inconclusive", "reason": "not enough data", "effect": None}
    got = hypothesis_scope.merged_hypotheses([("real", {"hypotheses": {"H": short}}), ("syn", {"hypotheses": {"H": decided}})])
    assert got["H"] == ("syn", decided)


def test_a_size_confounded_speed_verdict_is_settled_by_a_speed_study_of_matched_sizes_only():
    """seed 002 H2: the real speed part's RoBERTa stand-in is 5x smaller than GPT-2 (inconclusive,
    size confounds architecture); a later speed study of one size decides it. A later quality
    study (e.g. the synthetic one) does not settle a confounded row, whatever it decided."""
    open_ = {"verdict": "inconclusive", "reason": "size confounds architecture", "effect": {"estimate": -1.3},
             "evidence": {"size_confounded": ["E gpt2 124.5M vs F bert 22.6M"]}}
    matched = {"verdict": "rejected", "reason": "CI below 0", "effect": {"estimate": -0.96}, "evidence": {}}
    speed = {"hypotheses": {"H": matched}, "learned": {"E": {"reason": NOT_JUDGED}, "F": {"reason": NOT_JUDGED}}}
    quality = {"hypotheses": {"H": matched}, "learned": {"E": {"reason": "learned"}}}
    got = hypothesis_scope.merged_hypotheses([("real_speed", {"hypotheses": {"H": open_}}), ("matched", speed)])
    assert got["H"][0] == "matched" and got["H"][1]["verdict"] == "rejected"
    assert "E gpt2 124.5M vs F bert 22.6M" in got["H"][1]["reason"]  # says what it settled
    got = hypothesis_scope.merged_hypotheses([("real_speed", {"hypotheses": {"H": open_}}), ("syn", quality)])
    assert got["H"][0] == "real_speed" and got["H"][1]["verdict"] == "inconclusive"


def test_a_size_confounded_quality_verdict_is_settled_only_by_a_study_keeping_the_first_arms():
    """seed 002 H3 at one size: reference_real's GPT-2 arms (C, E) beside reference_real_roberta's
    RoBERTa-base (D, F) on the same data settle what the 22M encoder left open. A quality study
    without the first's runs, or with a pair scenario on other data, does not."""
    open_ = {"verdict": "inconclusive", "reason": "size confounds architecture", "effect": {"estimate": -2.1},
             "evidence": {"size_confounded": ["C gpt2 124.9M vs D bert 22.8M"], "used": ["C-D/amp_bf16"]}}
    first = {"sources": ["executed/h100/reference_real", "executed/h100/reference_real_encoder"],
             "recipe": {"C": {"data": ["data/real/debtags"]}, "D": {"data": ["data/real/debtags"]}},
             "hypotheses": {"H": open_}, "learned": {"C": {"reason": "learned"}}}
    matched = {"verdict": "rejected", "reason": "CI below 0", "effect": {"estimate": -0.4},
               "evidence": {"used": ["C-D/amp_bf16", "C-D/bf16_pure"]}}
    one_size = {"sources": ["executed/h100/reference_real", "executed/h200/reference_real_roberta"],
                "recipe": {"C": {"data": ["data/real/debtags"]}, "D": {"data": ["data/real/debtags"]}},
                "hypotheses": {"H": matched}, "learned": {"C": {"reason": "learned"}}}
    got = hypothesis_scope.merged_hypotheses([("all", first), ("roberta", one_size)])
    assert got["H"][0] == "roberta" and got["H"][1]["verdict"] == "rejected"
    assert "C gpt2 124.9M vs D bert 22.8M" in got["H"][1]["reason"]
    elsewhere = {**one_size, "sources": ["executed/h100/reference", "executed/h200/reference_real_roberta"]}
    got = hypothesis_scope.merged_hypotheses([("all", first), ("syn", elsewhere)])
    assert got["H"][0] == "all" and got["H"][1]["verdict"] == "inconclusive"
    other_data = {**one_size, "recipe": {"C": {"data": ["data/real/debtags"]}, "D": {"data": ["data/real/debdeps"]}}}
    got = hypothesis_scope.merged_hypotheses([("all", first), ("roberta", other_data)])
    assert got["H"][0] == "all" and got["H"][1]["verdict"] == "inconclusive"


def test_a_comparison_written_away_from_its_studies_reads_them_and_a_stray_one_is_refused(tmp_path, monkeypatch):
    """`compare --output_dir /tmp/x` then `findings /tmp/x/comparison.json`: the studies are the
    comparison's sources here (named as the GPU host wrote them), not whatever lies under /tmp; a
    comparison none of whose sources is here, outside a study folder, is refused in one line."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "executed/h100/real").mkdir(parents=True)
    (tmp_path / "executed/h100/real/records.jsonl.gz").write_bytes(b"")
    away = tmp_path / "scratch/cmp/comparison.json"
    away.parent.mkdir(parents=True)
    comp = {"sources": ["/root/work/executed/h100/real"], "recommendations": {"universal": None}}
    away.write_text(json.dumps(comp))
    studies, _, _, first, _ = findings_cmd.inputs(findings_cmd.parser().parse_args([str(away)]))
    assert [(n, d) for n, _, d in studies] == [("real", Path("executed/h100/real"))] and first == [Path("executed/h100/real")]
    away.write_text(json.dumps({**comp, "sources": ["/root/work/executed/h100/gone"]}))
    with pytest.raises(UserError, match="not a study folder.*executed/h100/gone"):
        findings_cmd.inputs(findings_cmd.parser().parse_args([str(away)]))


def test_the_architecture_rows_premise_names_each_in_study_pretraining_and_its_depth():
    """seed 002 H3 over in-study checkpoints: GPT-2 pretrained on A closed 43% of its unigram gap,
    RoBERTa on B 19% (B's runs absent: its loss alone); objectives and depths differ, so the
    verdict's scope says so. A checkpoint from a package (no in-study pretraining) adds nothing."""
    def rec(s, arch, params, ck=None, base=None):
        return {"scenario": s, "run": {"steps": 1500, "beta2": 0.95}, "model": {"model_type": arch, "parameters": params},
                "metrics": {"baseline/val_loss": base} if base else {},
                "pretrained": {"model_type": arch, "checkpoint": ck} if ck else {"model_type": arch, "path": "pkg"}}
    gpt = {"scenario": "A", "steps": 3000, "quality": {"val_loss": 4.296}}
    rob = {"scenario": "B", "steps": 3500, "quality": {"val_loss": 6.06}}
    quality = [rec("A", "gpt2", 124e6, base=7.48), rec("C", "gpt2", 124e6, gpt), rec("D", "roberta", 125e6, rob)]
    cell = hypothesis_scope.premise("seed002.H3", quality, quality)
    assert "gpt2 on A 3,000 steps (val loss 4.30, 43% of its unigram gap)" in cell
    assert "roberta on B 3,500 steps (val loss 6.06)" in cell
    packaged = [rec("C", "gpt2", 124e6, gpt), rec("D", "bert", 22e6)]
    assert "bert on" not in hypothesis_scope.premise("seed002.H3", packaged, packaged)
    assert "pretrained" not in hypothesis_scope.premise("seed002.H2", quality, quality)


def test_an_in_study_pretraining_takes_its_depth_from_its_own_record_where_no_run_of_its_scenario_is_here(tmp_path, monkeypatch):
    """reference_real_roberta fine-tunes a checkpoint of its pretrain stage and runs no B cell: the
    share of the unigram gap comes from the record beside the checkpoint (<run>/result.json)."""
    run = tmp_path / "study.pretrain" / "roberta"
    (run / "model").mkdir(parents=True)
    ck = {"scenario": "B", "steps": 3500, "quality": {"val_loss": 6.07}}
    rec = {"scenario": "D", "run": {"steps": 1500, "beta2": 0.95}, "model": {"model_type": "roberta", "parameters": 125e6},
           "metrics": {}, "pretrained": {"model_type": "roberta", "checkpoint": ck, "path": str(run / "model")}}
    assert "roberta on B 3,500 steps (val loss 6.07)" in hypothesis_scope.premise("seed002.H3", [rec], [rec])
    (run / "result.json").write_text(json.dumps({"metrics": {"baseline/val_loss": 7.49}}))
    assert "roberta on B 3,500 steps (val loss 6.07, 19% of its unigram gap)" in hypothesis_scope.premise("seed002.H3", [rec], [rec])
    (run / "result.json").unlink()  # compacted: the stage's records table holds the record
    ck["run_id"] = "B/amp_bf16/seed0"
    monkeypatch.setattr(hypothesis_scope, "load_records", lambda d: [{"run_id": "B/amp_bf16/seed0",
                                                                      "metrics": {"baseline/val_loss": 7.49}}])
    assert "19% of its unigram gap" in hypothesis_scope.premise("seed002.H3", [rec], [rec])


def test_the_pretrainings_unigram_share_comes_from_its_scenarios_runs_though_the_test_used_only_fine_tunes():
    """Seed 002 H3 uses C and D (``drew_on``): A's runs, which give A's unigram baseline, are not in its
    records but in every record; the scope still says how much of A's gap the GPT-2 checkpoint closed."""
    ck = {"scenario": "A", "steps": 3000, "quality": {"val_loss": 4.30}}
    fine = {"scenario": "C", "run": {"steps": 1500, "beta2": 0.95}, "model": {"model_type": "gpt2", "parameters": 125e6},
            "metrics": {}, "pretrained": {"model_type": "gpt2", "checkpoint": ck, "path": "/nowhere"}}
    lm = {"scenario": "A", "run": {"steps": 1500, "beta2": 0.95}, "metrics": {"baseline/val_loss": 7.55}}
    assert "unigram gap" not in hypothesis_scope.premise("seed002.H3", [fine], [fine])
    assert "gpt2 on A 3,000 steps (val loss 4.30, 43% of its unigram gap)" in hypothesis_scope.premise("seed002.H3", [fine],
                                                                                              [fine, lm])


def test_a_later_comparison_of_several_studies_is_named_and_read_as_all_of_them(tmp_path, monkeypatch):
    """`compare reference_real reference_real_roberta --output_dir reference_real_roberta/...`: the row it
    decides names both studies and its scope reads both's records (GPT-2 and RoBERTa-base), not the
    folder it was written in alone."""
    monkeypatch.chdir(tmp_path)
    def rec(s, arch):
        return {"scenario": s, "run": {"steps": 1500, "beta2": 0.95}, "model": {"model_type": arch, "parameters": 124.5e6}}
    folders = {"real": [rec("C", "gpt2")], "rob": [rec("D", "roberta")]}
    for d in ("executed/h100/real", "executed/h200/rob"):
        (tmp_path / d).mkdir(parents=True)
    monkeypatch.setattr(findings, "load_records", lambda d: folders[Path(d).name])
    monkeypatch.setattr(hypothesis_scope, "load_records", lambda d: folders[Path(d).name])
    comp = {"sources": ["/host/executed/h100/real", "/host/executed/h200/rob"]}
    named = findings._named([("rob", comp, Path("executed/h200/rob")), ("alone", {}, Path("executed/h200/rob"))])
    assert [n for n, _, _ in named] == ["real + rob", "alone"]
    lm_from_real = {**comp, "tasks": {"/host/executed/h100/real": ["A"]}}  # compare --lm_results: A only
    assert findings._named([("rob", lm_from_real, Path("executed/h200/rob"))])[0][0] == "rob"
    assert findings._records_of(lm_from_real, Path("executed/h200/rob")) == folders["rob"]
    recs = findings._records_of(comp, Path("executed/h200/rob"))
    assert {r["scenario"] for r in recs} == {"C", "D"}
    cell = hypothesis_scope.premise("seed002.H3", recs, recs)
    assert "gpt2 124.5M" in cell and "roberta 124.5M" in cell
    monkeypatch.setattr(findings, "efficiency_line", lambda name, records: f"`{name}` {len(records)} runs")
    shown = findings._efficiency([("real", Path("executed/h100/real")), ("rob", Path("executed/h200/rob")),
                                  ("real", Path("executed/h100/real"))])
    assert shown.count("`real` 1 runs") == 1 and "`rob` 1 runs" in shown  # a study's line once, though two comparisons read it


def test_a_later_comparisons_supporting_line_is_left_out_only_where_it_breaks_nothing_the_answer_does_not_name(monkeypatch):
    """reference_real + reference_real_roberta decides seed 002 H3 and its row links the report: its line under
    Supporting studies would repeat "bf16_naive degraded", which the answer names, so it is left out; a
    config the answer does not name as breaking keeps the line, and so does a study no row links. Only
    its own scenarios count (reference_real's A, C, E are the answer's already)."""
    import pandas as pd
    cells = pd.DataFrame([{"scenario": "A", "config": "fp16_naive", "verdict": "degraded"},
                          {"scenario": "D", "config": "bf16_naive", "verdict": "degraded"},
                          {"scenario": "F", "config": "amp_bf16", "verdict": "safe"}])
    monkeypatch.setattr(findings.answer, "cells", lambda comparison, stats: cells)
    monkeypatch.setattr(hypothesis_scope, "load_records", lambda d: [{"scenario": "D", "run": {}}, {"scenario": "F", "run": {}}])
    comp, name = {"sources": ["executed/h100/real", "executed/h200/rob"]}, "real + rob"
    assert findings._said_in_rows(name, comp, Path("executed/h200/rob"), {name}, {"bf16_naive"})
    assert not findings._said_in_rows(name, comp, Path("executed/h200/rob"), set(), {"bf16_naive"})
    assert not findings._said_in_rows(name, comp, Path("executed/h200/rob"), {name}, set())
    cells.loc[2, "verdict"] = "degraded"  # amp_bf16 breaks on F: not in the answer's list
    assert not findings._said_in_rows(name, comp, Path("executed/h200/rob"), {name}, {"bf16_naive"})


def test_an_architecture_rows_scope_names_the_metric_and_seeds_of_the_pairs_it_compared():
    """seed 002 H3 pools (C, D) and (E, F) pairs: its scope names each task's metric and the seeds, as a
    row over LM and classification sides does."""
    recipe = {s: {"metric": m} for s, m in zip("CDEF", ["micro_f1", "micro_f1", "accuracy", "accuracy"])}
    h = {"effect": {"unit": "% of quality"}, "evidence": {"used": ["C-D/amp_bf16", "E-F/bf16_pure"], "seeds": 3}}
    got = hypothesis_scope.measured_on(h, [("both", {"recipe": recipe}, None)], "both", {})
    assert got == "; micro_f1 on C/D, accuracy on E/F, 3 seeds"
    assert hypothesis_scope.measured_on({**h, "effect": {"unit": "x"}}, [("both", {"recipe": recipe}, None)], "both", {}) == ""


def test_a_supporting_study_says_how_its_long_fp16_runs_ended_and_only_those():
    rows = [{"config": "fp16_naive", "scenario": "A", "train_steps": 10000,
             "summary": "did not diverge in 3 run(s) of 10000 steps"},
            {"config": "fp16_naive_noscale", "scenario": "A", "train_steps": 10000,
             "summary": "diverged in 3/3 runs at step(s) 1570, 2332, 2626"},
            {"config": "fp16_naive", "scenario": "C", "train_steps": 1500, "summary": "did not diverge in 3 run(s)"}]
    text = findings._long_stability({"hypotheses": {"seed001.H2": {"evidence": {"divergence": rows}}}})
    assert "fp16_naive_noscale on A diverged in 3/3 runs at step(s) 1570, 2332, 2626" in text
    assert "fp16_naive on A did not diverge" in text and " on C " not in text
    assert findings._long_stability({"hypotheses": {}}) == ""


def test_the_answer_chart_draws_every_judged_cell_of_the_table_and_no_reference():
    """A panel per column of the answer table, in its order, each candidate's gap and interval."""
    import re
    text = (REPO / "README.md").read_text()
    args = re.search(r"Generated by `dtype-bench findings ([^`]+)`", text).group(1).split()
    cwd = Path.cwd()
    try:
        os.chdir(REPO)
        spec = findings_cmd.answer_chart(findings_cmd.parser().parse_args(args)).to_dict()
    finally:
        os.chdir(cwd)
    rows = next(iter(spec["datasets"].values()))
    header = next(ln for ln in text.splitlines() if ln.startswith("| config | A |"))
    columns = [c.strip().removesuffix(" (1)") for c in header.strip("|").split("|")[1:]]
    drawn = list(dict.fromkeys(r["column"] for r in rows))
    assert drawn == [c for c in columns if c in drawn] and len(drawn) >= len(columns) - 1
    assert all(r["verdict"] != "reference" and r["lo"] <= r["delta_pct"] <= r["hi"] for r in rows)


def test_each_scenario_takes_its_speed_from_the_first_speed_study_that_timed_it(tmp_path):
    """Two speed studies: A from the first, C from the second (the first did not time it); A's configs
    are never mixed across the two. Without fp32 with TF32 off on C, its multiplier is '-', the others shown."""
    comp = evidence({"fp32_baseline": {"A": "reference", "C": "reference"}, "amp_bf16": {"A": "safe", "C": "safe"},
                     "bf16_pure": {"A": "safe", "C": "safe"}})
    first = speed_study(tmp_path / "s1", {"A": {"fp32_baseline": 1.0, "amp_bf16": 8.0, "bf16_pure": 9.0}}, cv=0.01)
    second = speed_study(tmp_path / "s2", {"A": {"fp32_baseline": 1.0, "amp_bf16": 9.0, "bf16_pure": 3.0},
                                            "C": {"fp32_tf32_matmul": 2.0, "amp_bf16": 4.0, "bf16_pure": 4.4}}, cv=0.01)
    first, second = ("speed_one",) + first[1:], ("speed_two",) + second[1:]
    text = findings.render([("quick", comp, QUICK.parent.parent), first, second], ["r.json", "s1.json", "s2.json"])
    rows = {ln.split("|")[1].strip(): ln.split("|") for ln in text.splitlines() if ln.startswith("| bf16_pure |")}
    header = next(ln for ln in text.splitlines() if ln.startswith("| config |")).split("|")
    cell = dict(zip([h.strip() for h in header], rows["bf16_pure"]))
    assert "9.00x / - / 1.12x" in cell["A"]  # the first study's A, not the second's 3.0
    assert "- / 2.20x / 1.10x" in cell["C"]  # the second's C, no fp32 baseline there
    assert "`speed_one` (A), `speed_two` (C)" in text
    assert _default_line(text).startswith("**Default: bf16_pure**")  # faster on A and on C by >= 1%


def _cls_record(scenario, labels, width, steps=1500, beta2=0.95):
    return {"scenario": scenario, "config": "amp_bf16", "run": {"steps": steps, "beta2": beta2, "data": "d"},
            "model": {"model_type": "bert", "parameters": 22_000_000, "num_labels": labels,
                      "matmuls": [{"in": width, "out": width}]}}


def test_a_head_hypothesis_below_the_seeds_premise_is_untestable_here_naming_what_is_missing():
    """Seed 001's H1 needs ~4k labels and H3 a ~3.3M-parameter head: 595 labels on a 384-wide encoder
    reach neither; 4,300 labels on a 768-wide one reach both."""
    small = [_cls_record("D", 595, 384)]
    assert "595" in hypothesis_scope.unmet_premise("seed001.H1", small)
    assert "229k" in hypothesis_scope.unmet_premise("seed001.H3", small)
    big = [_cls_record("C", 4_300, 768)]
    assert hypothesis_scope.unmet_premise("seed001.H1", big) == "" and hypothesis_scope.unmet_premise("seed001.H3", big) == ""
    assert hypothesis_scope.unmet_premise("seed001.H4", small) == ""  # no head premise
    scope = hypothesis_scope.premise("seed001.H3", small, small)
    assert "1,500 steps" in scope and "beta2 0.95" in scope and "not reached" in scope


def test_a_rows_scope_states_the_steps_of_the_scenarios_its_test_used_not_of_a_joined_study_left_out():
    """B's 10,000-step study joined to the 1,500-step answer, its control one seed short: seed 001
    H2 counts A's runs only, so its scope says 1,500 steps; once B's runs enter, 1,500-10,000."""
    recs = [_cls_record("A", 0, 768), _cls_record("C", 4_300, 768), _cls_record("B", 0, 768, steps=10_000)]
    h = {"evidence": {"lm": {"used": ["A"], "missing": ["B/fp16_naive_noscale (1 of 3 seeds)"]},
                      "cls": {"used": ["C"], "missing": []}, "config": "fp16_naive_noscale"}}
    assert hypothesis_scope.premise("seed001.H2", hypothesis_scope.drew_on(h, recs), recs).startswith("1,500 steps")
    h["evidence"]["lm"]["used"] = ["A", "B"]
    assert hypothesis_scope.premise("seed001.H2", hypothesis_scope.drew_on(h, recs), recs).startswith("1,500-10,000 steps")
    pair = {"evidence": {"used": ["C-B/amp_bf16"], "missing": []}}  # a pair's scenarios, as seed 002 H3 lists them
    assert {r["scenario"] for r in hypothesis_scope.drew_on(pair, recs)} == {"B", "C"}
    assert hypothesis_scope.drew_on({"evidence": {"lm": ["A", "B"]}}, recs) == recs  # lists no "used": every record
    frontier = {"evidence": {"lm": ["A", "B"], "cls": ["C"], "pairs": {"A-C": ["amp_bf16", "bf16_pure"]}}}  # H4
    assert {r["scenario"] for r in hypothesis_scope.drew_on(frontier, recs)} == {"A", "C"}


def test_a_row_below_the_premise_names_the_quality_study_that_reached_it_and_what_it_found():
    """The README's H1/H3 row comes from the study that decides it; when that study ran below the
    premise and another quality study reached it, the scope says what that study found there. A
    speed study (no quality judged) that reached it says nothing about quality and is passed over."""
    small, big = [_cls_record("D", 595, 384)], [_cls_record("C", 4_417, 768)]
    at = {"verdict": "untestable", "reason": "no control degraded there"}
    speed = {"learned": {"C": {"established": False, "reason": NOT_JUDGED}},
             "hypotheses": {"seed001.H1": {"verdict": "untestable", "reason": "speed only"}}}
    quality = {"hypotheses": {"seed001.H1": at}}
    studies = [("first", {}, None), ("timing", speed, None), ("premise", quality, None)]
    by = {"first": small, "timing": big, "premise": big}
    line = hypothesis_scope.premise_elsewhere("seed001.H1", "first", studies, by)
    assert "`premise`" in line and "4,417 labels" in line and "no control degraded there" in line
    assert "timing" not in line
    assert hypothesis_scope.premise_elsewhere("seed001.H1", "premise", studies, by) == ""  # decided at the premise
    assert hypothesis_scope.premise_elsewhere("seed001.H4", "first", studies, by) == ""  # no head premise
    assert hypothesis_scope.premise_elsewhere("seed001.H1", "first", studies[:2], by) == ""  # none reached it


def test_a_head_hypothesis_measured_at_the_premise_is_decided_there_and_names_what_was_below():
    """Where a quality study reached seed 001's premise and measured H1's effect (a CI, here an
    inconclusive one), the row is that study's: its verdict and scope are the seed's. The study
    below the premise is named with what it found there; one that measured nothing at the premise
    (untestable there) leaves the row to the first study."""
    small, big = [_cls_record("D", 595, 384)], [_cls_record("C", 4_417, 768)]
    below = {"verdict": "untestable here", "measured_verdict": "rejected",
             "reason": "needs ~4,000 labels; measured below it: rejected (CI [-0.1, 0.2] inside +-0.5: no effect)"}
    measured = {"verdict": "inconclusive", "reason": "CI [-0.58, 0.43] includes 0",
                "effect": {"estimate": -0.1, "ci_low": -0.58, "ci_high": 0.43}}
    studies = [("first", {}, None), ("premise", {"hypotheses": {"seed001.H1": measured}}, None)]
    by = {"first": small, "premise": big}
    name, h, note = hypothesis_scope.at_premise("seed001.H1", "first", below, studies, by)
    assert (name, h["verdict"]) == ("premise", "inconclusive")
    assert "`first`" in note and "595" in note and "rejected" in note and "CI [-0.1, 0.2]" in note
    gated = [("first", {}, None), ("premise", {"hypotheses": {"seed001.H1": {"verdict": "untestable",
                                                                           "reason": "no control"}}}, None)]
    assert hypothesis_scope.at_premise("seed001.H1", "first", below, gated, by) == ("first", below, "")
    assert hypothesis_scope.at_premise("seed001.H2", "first", below, studies, by) == ("first", below, "")  # no head premise


def test_a_quality_hypothesis_row_names_the_metric_and_seeds_of_each_side():
    h = {"effect": {"unit": "%"}, "evidence": {"cls": {"used": ["C", "E"], "seeds": 12},
                                               "lm": {"used": ["A"], "seeds": 3}}}
    comp = {"recipe": {"A": {"metric": "val_loss"}, "C": {"metric": "micro_f1"}, "E": {"metric": "accuracy"}}}
    got = hypothesis_scope.measured_on(h, [("s", comp, None)], "s", {})
    assert got == "; micro_f1 on C, accuracy on E, 12 seeds; val_loss on A, 3 seeds"
    assert hypothesis_scope.measured_on({**h, "effect": {"unit": "share of runs"}}, [("s", comp, None)], "s", {}) == ""


def test_the_unscaled_fp16_timing_is_said_per_lm_scenario_against_the_seeds_5_to_10k_steps():
    """Seed 001 H2's scope: where unscaled fp16 turned and diverged on each LM (GPT-2 on A, RoBERTa's
    masked LM on B fail apart), and whether that is inside the seed's 5-10k-step window."""
    def run(s, steps, turned, died):
        return {"scenario": s, "config": "fp16_naive_noscale", "run": {"steps": steps, "beta2": 0.95},
                "metrics": {"stability/degraded_step": turned, "stability/diverged_step": died}}
    every = [run("A", 1500, 8, 1570), run("A", 1500, 53, 2626), run("B", 10_000, 211, None)]
    cell = hypothesis_scope.premise("seed001.H2", every, every)
    assert "A: loss turned up at step 8-53, diverged at 1,570-2,626" in cell
    assert "B: loss turned up at step 211, no divergence in runs of up to 10,000 steps" in cell
    assert "refuted" in cell
    late = [run("A", 10_000, 6_000, 7_500)]
    assert "consistent with the seed's" in hypothesis_scope.premise("seed001.H2", late, late)
    assert "unscaled fp16" not in hypothesis_scope.premise("seed001.H2", [], [])


def test_the_gates_line_says_a_scenario_with_every_cell_untested_lacks_seeds_not_evidence_of_learning():
    """B learned (its reference past the gate) on one fp32 seed: every cell "not tested", so the line
    says too few seeds; a scenario where a cell was compared but quality was not established says so."""
    import pandas as pd
    cells = pd.DataFrame({"scenario": ["A", "A", "B", "B", "F"], "config": ["fp32", "amp_bf16"] * 2 + ["amp_bf16"],
                          "verdict": ["reference", "safe", "not tested", "not tested", "not tested"]})
    comp = {"learned": {"A": {"learned": True}, "B": {"learned": True}, "F": {"learned": False}}, "reliability": {}}
    line = findings._gates(cells, comp, [Path("executed/x")])
    assert "on A;" in line and "B: too few seeds" in line and "F: did not learn" in line
    assert "[the report](executed/x/html/index.html)" in line
    cells.loc[3, "verdict"] = "inconclusive"  # compared once: the scenario's gate, not its seeds
    assert "too few seeds" not in findings._gates(cells, comp, [Path("executed/x")])


def test_the_gates_line_of_a_comparison_of_several_studies_links_each_studys_report_with_its_scenarios(
        tmp_path, monkeypatch):
    """comparison_all joins reference_real (A, C, E), the encoder study (D, F) and B's study: each
    scenario's gate is in its own study's report, so the line links all three, not the first alone."""
    import pandas as pd
    held = {"one": ["A", "C"], "two": ["D"], "three": ["B"]}
    monkeypatch.setattr(findings, "load_records", lambda f: [{"scenario": s} for s in held[Path(f).name]])
    cells = pd.DataFrame({"scenario": ["A", "B", "C", "D"], "config": ["amp_bf16"] * 4,
                          "verdict": ["safe", "not tested", "safe", "inconclusive"]})
    line = findings._gates(cells, {"learned": {}}, [tmp_path / n for n in held])
    assert f"[`two`]({tmp_path}/two/html/index.html) (D)" in line
    assert "`one`" in line and "(A, C)" in line and "`three`" in line and "(B)" in line


def test_a_study_the_gates_kept_from_every_verdict_is_no_supporting_line():
    """"No candidate failed" would misread a study whose quality entered no verdict anywhere."""
    learned = {"C": {"learned": True, "reason": "learned"}}
    shut = {"learned": learned, "reliability": {"C": {"told_apart": False, "detects": []}}}
    opened = {"learned": learned, "reliability": {"C": {"told_apart": False, "detects": ["amp_bf16_eps1e4"]}}}
    apart = {"learned": learned, "reliability": {"C": {"told_apart": True}}}
    speed = {"learned": {"C": {"learned": False, "reason": NOT_JUDGED}}, "reliability": {}}
    assert findings._gated_out(shut) and findings._gated_out({"learned": {"C": {"learned": False}}})
    assert not any(findings._gated_out(c) for c in (opened, apart, speed, {}))


def test_unscaled_fp16_failing_long_before_5k_steps_refutes_the_seeds_timing():
    def lm(degraded, diverged, steps):
        return {"scenario": "A", "config": "fp16_naive_noscale", "run": {"steps": steps, "beta2": 0.95},
                "metrics": {"stability/degraded_step": degraded, "stability/diverged_step": diverged}}
    early = hypothesis_scope.premise("seed001.H2", [], [lm(45, None, 1500), lm(30, 2000, 10_000)])
    assert "45" in early and "2,000" in early and "refuted" in early
    late = hypothesis_scope.premise("seed001.H2", [], [lm(None, 7000, 10_000)])
    assert "consistent" in late and "refuted" not in late


def test_a_speed_study_on_other_data_gives_no_scenario_its_speed(tmp_path, monkeypatch):
    """A synthetic study's C beside a real answer: C's speed comes from the study that timed C on the
    answer's data, whatever order the studies come in."""
    def recs(scenarios, data, size="base"):
        return [{"scenario": s, "run": {"data": data, "size": size}} for s in scenarios]
    folders = {"q": recs("AC", "data/real/debtags"), "syn": recs("AC", "synthetic"), "real": recs("C", "data/real/debtags")}
    monkeypatch.setattr(findings, "load_records", lambda d: folders[Path(d).name])
    syn = speed_study(tmp_path / "syn", {"A": {"fp32_baseline": 1.0}, "C": {"fp32_baseline": 1.0}})
    real = speed_study(tmp_path / "real", {"C": {"fp32_baseline": 1.0}})
    got = findings._speed_sources([("syn",) + syn[1:], ("real",) + real[1:]], [Path("q")])
    assert [(n, scns) for n, _, _, scns in got] == [("real", ["C"])]


def test_a_frontier_hypothesis_says_which_task_pairs_keep_one_model():
    def rec(s, kind, params):
        return {"scenario": s, "model": {"model_type": kind, "parameters": params}}
    text = hypothesis_scope.task_pairs([rec("A", "gpt2", 124e6), rec("E", "gpt2", 125e6), rec("F", "bert", 22e6)])
    assert "E against LM: one model" in text and "F against LM: architecture or size differ" in text
    assert hypothesis_scope.task_pairs([rec("E", "gpt2", 124e6)]) == ""  # no LM scenario: nothing to pair


def test_the_seed_plan_line_names_the_seeds_each_inconclusive_cell_needs_or_that_none_would_do():
    from benchlib.analysis.seed_plans import seeds_line
    ev = [{"scenario": "A", "config": "amp_bf16", "verdict": "inconclusive", "paired": True, "n_paired": 3,
           "gap_pct": 0.1, "ci_low": -0.2, "ci_high": 0.4},
          {"scenario": "A", "config": "bf16_pure", "verdict": "inconclusive", "paired": True, "n_paired": 3,
           "gap_pct": 0.6, "ci_low": -0.2, "ci_high": 1.4},  # measured beyond the 0.5% of a loss
          {"scenario": "C", "config": "amp_bf16", "verdict": "inconclusive", "paired": True, "n_paired": 3,
           "gap_pct": 0.1, "ci_low": -0.2, "ci_high": 0.4, "metric2": "macro_f1", "judged2": True,
           "gap2_pct": 1.5, "ci2_low": -2.0, "ci2_high": 5.0},  # fine on micro-F1, beyond 1% on macro-F1
          {"scenario": "A", "config": "amp_fp16", "verdict": "safe", "paired": True, "n_paired": 3,
           "gap_pct": 0.0, "ci_low": -0.1, "ci_high": 0.1}]
    comp = {"recommendation_evidence": ev, "quality_metric": {"A": {"name": "val_loss"}, "C": {"name": "micro_f1"}}}
    line = seeds_line([{"label": "beta2 0.95", "comparison": comp}])
    assert "A amp_bf16 3 -> " in line and "A bf16_pure 3 -> never" in line and "C amp_bf16 3 -> never" in line
    assert "amp_fp16" not in line  # decided cells need no plan
    planned, cautious = line.split("A amp_bf16 3 -> ")[1].split(",")[0].split(" (")
    assert int(planned) > 3
    # in brackets the cautious plan (gap and spread at their upper bounds): never fewer seeds
    assert cautious.rstrip(")") in ("never", f"more than {contrasts.MOST_SEEDS}") or int(cautious.rstrip(")")) >= int(planned)
    assert seeds_line([{"label": "beta2 0.95", "comparison": {"recommendation_evidence": ev[3:]}}]) == ""


def test_a_studys_own_comparison_says_untestable_here_below_the_premise_as_the_answer_does():
    """The per-study comparison (its report and notebook) applies the same premise as the README:
    below ~4k labels H1's measured verdict is kept only as ``measured_verdict``."""
    import pandas as pd
    from benchlib.analysis import hypotheses as hy
    from benchlib.analysis.tables import head_params
    measured = {"seed001.H1": {"verdict": "rejected", "reason": "no effect", "claim": "c", "effect": None},
                "seed001.H4": {"verdict": "rejected", "reason": "same frontier", "claim": "c", "effect": None}}

    def frame(labels, width):
        rec = _cls_record("D", labels, width)
        return pd.DataFrame([{"scenario": "D", "run.num_labels": labels, "model.head_params": head_params(rec)}])
    small = hy.at_premise(measured, frame(595, 384))
    assert small["seed001.H1"]["verdict"] == hy.UNTESTABLE_HERE and small["seed001.H1"]["measured_verdict"] == "rejected"
    assert "595" in small["seed001.H1"]["reason"] and small["seed001.H4"] == measured["seed001.H4"]
    assert hy.at_premise(measured, frame(4_300, 768)) == measured


def test_a_frame_without_head_sizes_leaves_the_hypotheses_as_measured():
    import pandas as pd
    from benchlib.analysis import hypotheses as hy
    measured = {"seed001.H1": {"verdict": "rejected", "reason": "no effect", "claim": "c", "effect": None}}
    assert hy.at_premise(measured, pd.DataFrame([{"scenario": "D", "run.num_labels": 595}])) == measured


def test_a_cell_whose_measured_loss_reaches_the_minimum_effect_keeps_its_config_from_the_provisional_pick():
    """``seed_plans.past_min_effect``: a judged metric's measured gap at or beyond the minimum effect; a reported-only
    metric (judged2 false) or an interval missing does not count."""

    def cell(config, **kw):
        return {"scenario": "C", "config": config, "verdict": "inconclusive", "paired": True, "n_paired": 3,
                "gap_pct": 0.2, "ci_low": -0.3, "ci_high": 0.7, "metric2": "macro_f1", **kw}
    comp = {"quality_metric": {"C": {"name": "micro_f1"}}, "recommendation_evidence": [
        cell("micro_reaches", gap_pct=1.2),
        cell("macro_reaches", judged2=True, gap2_pct=1.5, ci2_low=-0.5, ci2_high=3.5),
        cell("macro_reported_only", judged2=False, gap2_pct=1.5),
        cell("inside", judged2=True, gap2_pct=0.4, ci2_low=None, ci2_high=None),
        {**cell("degraded_counts_as_broken", gap_pct=1.2), "verdict": "degraded"}]}
    beyond = seed_plans.past_min_effect([{"label": "beta2 0.999", "comparison": comp}])
    assert beyond == {"micro_reaches": ["beta2 0.999 on C"], "macro_reaches": ["beta2 0.999 on C"]}


def test_a_reported_metric_worse_beyond_seed_noise_is_named_where_the_verdict_does_not_say_so():
    """E's macro-F1 is reported, not judged: bf16_pure_fp32v at beta2 0.999 is safe on accuracy while
    its macro-F1 interval lies below 0. A judged metric, an interval that reaches 0, or a verdict that
    already says the config breaks are not listed."""
    import pandas as pd

    from benchlib.analysis.findings import _reported_worse
    row = dict(scenario="E", config="bf16_pure_fp32v", verdict="safe", metric2="macro_f1", judged2=False,
               delta2_pct=-1.58, delta2_lo=-2.57, delta2_hi=-0.58)
    cells = pd.DataFrame([row,
                          {**row, "config": "amp_bf16", "delta2_hi": 0.4},               # reaches 0
                          {**row, "scenario": "C", "config": "bf16_pure", "judged2": True},  # judged: in the verdict
                          {**row, "config": "bf16_naive", "verdict": "degraded"},         # already breaks
                          {**row, "config": "amp_fp16", "metric2": None}])
    [line] = _reported_worse(cells, "beta2 0.999")
    assert line.startswith("bf16_pure_fp32v at beta2 0.999: E (safe)") and "-1.58% [-2.57, -0.58]" in line


def test_closest_to_a_default_lists_the_candidates_more_seeds_alone_could_show_safe_everywhere():
    """amp_fp16 at the real study: inconclusive cells whose measured gap is small are decidable by more
    paired seeds; a cell whose loss reaches the minimum effect, or a degraded one, is not."""
    import pandas as pd

    from benchlib.analysis.seed_plans import closest
    cells = pd.DataFrame([("A", "fp32_baseline", "reference"), ("C", "fp32_baseline", "reference"),
                          ("A", "amp_fp16", "safe"), ("C", "amp_fp16", "inconclusive"),
                          ("A", "bf16_pure", "safe"), ("C", "bf16_pure", "inconclusive"),
                          ("A", "fp16_naive", "degraded"), ("C", "fp16_naive", "safe")],
                         columns=["scenario", "config", "verdict"])
    near = dict(verdict="inconclusive", paired=True, n_paired=3, gap_pct=0.1, ci_low=-0.6, ci_high=0.8)
    comparison = {"quality_metric": {"A": {"name": "val_loss"}, "C": {"name": "micro_f1"}},
                  "recommendation_evidence": [
                      {"scenario": "A", "config": "amp_fp16", "verdict": "safe"},
                      {"scenario": "C", "config": "amp_fp16", **near},
                      {"scenario": "A", "config": "bf16_pure", "verdict": "safe"},
                      {"scenario": "C", "config": "bf16_pure", **near, "gap_pct": 1.2, "ci_high": 1.9},  # never
                      {"scenario": "A", "config": "fp16_naive", "verdict": "degraded"},
                      {"scenario": "C", "config": "fp16_naive", "verdict": "safe"}]}
    line = closest([{"label": "beta2 0.95", "cells": cells, "comparison": comparison}], cells)
    assert "amp_fp16, " in line and "bf16_pure" not in line and "fp16_naive" not in line
    extra = int(line.split("amp_fp16, ")[1].split(" ")[0])
    assert extra > 0 and f"beta2 0.95 C +{extra}" in line
    safe = cells[cells["config"] != "fp16_naive"].assign(verdict=lambda d: d["verdict"].replace("inconclusive", "safe"))
    assert closest([{"label": "x", "cells": safe, "comparison": comparison}], safe) == ""  # nothing left to decide


def test_closest_to_a_default_names_what_must_run_first_when_no_candidate_is_decidable_by_seeds_alone():
    """A scenario enters verdicts with one candidate not run there and one at 2 seeds: no candidate is
    decidable by seeds alone, and the answer names the cells to run rather than falling silent; a
    candidate with a cell no number of seeds decides is not named."""
    import pandas as pd

    from benchlib.analysis.seed_plans import closest
    cells = pd.DataFrame([("A", "fp32_baseline", "reference"), ("B", "fp32_tf32_matmul", "reference"),
                          ("A", "amp_bf16", "safe"), ("B", "amp_bf16", "not tested"),
                          ("A", "amp_bf16_fp32_head", "inconclusive"),
                          ("A", "bf16_pure", "inconclusive"), ("B", "bf16_pure", "not tested")],
                         columns=["scenario", "config", "verdict"])
    near = dict(verdict="inconclusive", paired=True, n_paired=3, gap_pct=0.1, ci_low=-0.6, ci_high=0.8)
    comparison = {"quality_metric": {"A": {"name": "val_loss"}, "B": {"name": "val_loss"}},
                  "recommendation_evidence": [
                      {"scenario": "B", "config": "amp_bf16", "verdict": "not tested", "n_paired": 2.0},
                      {"scenario": "A", "config": "amp_bf16_fp32_head", **near},
                      {"scenario": "A", "config": "bf16_pure", **near, "gap_pct": 0.6, "ci_high": 1.2},  # never
                      {"scenario": "B", "config": "bf16_pure", "verdict": "not tested", "n_paired": 2.0}]}
    arm = [{"label": "beta2 0.95", "cells": cells, "comparison": comparison}]
    line = closest(arm, cells)
    assert line.startswith("Closest to a default: none is decidable")
    assert "amp_bf16 (beta2 0.95 B not tested, 2 paired seeds)" in line
    head = line.split("amp_bf16_fp32_head (")[1].split(")")[0]
    assert head.startswith("beta2 0.95 B not run; then ") and int(head.split("then ")[1].split(" ")[0]) > 0
    assert line.index("amp_bf16 (") < line.index("amp_bf16_fp32_head (")  # no seeds left to plan comes first
    assert "bf16_pure" not in line
    ran = pd.concat([cells.assign(verdict=lambda d: d["verdict"].replace("not tested", "safe")),
                     pd.DataFrame([("B", "amp_bf16_fp32_head", "safe")], columns=cells.columns)])
    assert closest([{**arm[0], "cells": ran}], ran).startswith("Closest to a default (every cell safe")


def test_the_checkpoint_line_names_cells_whose_gap_moves_with_the_checkpoint_after_holm():
    from benchlib.analysis.findings import _checkpoint_line

    def arm(*evidence):
        return {"label": "beta2 0.999", "comparison": {"quality_metric": {"C": {"name": "micro_f1"}},
                                                       "recommendation_evidence": list(evidence)}}
    moved = {"scenario": "C", "config": "amp_fp16", "p_checkpoint": 0.001, "checkpoint_gaps": "+0.30 (3) / -0.43 (6)",
             "metric2": "macro_f1", "p2_checkpoint": 0.4, "checkpoint2_gaps": "+0.4 (3) / -1.4 (6)"}
    still = {"scenario": "C", "config": "amp_bf16", "p_checkpoint": 0.03, "checkpoint_gaps": "+0.1 (3) / -0.1 (3)"}
    line = _checkpoint_line([arm(moved, still)])
    assert "amp_fp16 micro-F1 +0.30 (3) / -0.43 (6)" in line and "3 (cell, metric)s" in line
    assert "amp_bf16" not in line  # 0.03 is not below alpha after Holm over three
    alone = _checkpoint_line([arm(still)])
    assert "amp_bf16 micro-F1" in alone  # tested alone, 0.03 is below alpha
    noise = _checkpoint_line([arm({**still, "p_checkpoint": 0.2})])
    assert "none shown to differ" in noise and "amp_bf16" not in noise
    assert _checkpoint_line([arm({"scenario": "C", "config": "amp_bf16", "p_checkpoint": float("nan")})]) == ""


def test_a_supporting_speed_study_names_the_study_the_answers_speed_comes_from():
    """A speed study whose scenarios the answer times from another study keeps its own line, with the
    scenarios the answer takes elsewhere and from where: its multipliers are not the answer's."""
    folder = REPO / "executed" / "h200" / "reference_real_speed"
    comparison = json.loads((folder / "comparison" / "comparison.json").read_text())
    alone = findings._supporting("reference_real_speed", comparison, folder, {})
    moved = findings._supporting("reference_real_speed", comparison, folder, {"E": "onegpu", "F": "onegpu", "C": "other"})
    assert "answer's speed" not in alone
    assert "answer's speed: E, F from `onegpu`" in moved and "`other`" not in moved  # it timed no C
    assert moved.replace(" (the answer's speed: E, F from `onegpu`)", "") == alone


def test_a_supporting_line_of_a_study_compared_beside_another_studys_scenarios_speaks_of_its_own():
    """premise_labels' comparison_lm takes A from reference_real as H1/H3's LM side, and bf16_naive is
    degraded on that A: the study's own line lists only its C, never the other study's breaks."""
    folder = REPO / "executed" / "h200" / "premise_labels"
    comparison = json.loads((folder / "comparison_lm" / "comparison.json").read_text())
    cells = answer.cells(comparison, None)
    assert comparison["tasks"] and ((cells["scenario"] == "A") & (cells["verdict"] == "degraded")).any()
    line = findings._supporting("premise_labels", comparison, folder, {})
    assert "scenarios C" in line and " on A" not in line
    # no candidate of its own broke: where it decides hypothesis rows at the premise, they stand for its line
    assert findings._said_in_rows("premise_labels", comparison, folder, {"premise_labels"})
    assert not findings._said_in_rows("premise_labels", comparison, folder, set())
    reference = REPO / "executed" / "h100" / "reference"  # its candidates broke: its line stays
    assert not findings._said_in_rows("reference", json.loads((reference / "comparison" / "comparison.json").read_text()),
                                      reference, {"reference"})


def test_an_undecided_row_gives_its_interval_beside_the_seeds_that_would_settle_it():
    h = {"verdict": "inconclusive", "reason": "CI includes 0",
         "effect": {"name": "gain", "unit": "%", "estimate": -0.097, "ci_low": -0.577, "ci_high": 0.43,
                    "seeds_to_settle": 354}}
    why = findings._to_settle(h)
    assert "[-0.577, +0.43]" in why and "~354 seeds" in why
    assert findings._to_settle({**h, "verdict": "rejected"}) == ""  # a decided row gives its evidence instead
    huge = findings._to_settle({**h, "effect": {**h["effect"], "seeds_to_settle": 1798}})
    assert "too small to matter" in huge and "1798" not in huge  # as the verdict's own reason says it


def test_a_supporting_speed_line_names_an_untimed_config_instead_of_printing_nan(tmp_path):
    """A config whose every run diverged has no throughput, one timed seed has no spread: the line
    says so in words, never "nanx (nan%; nan)"."""
    import pandas as pd
    rows = [{"scenario": "A", "config": c, "metric": m, "mean": v, "std": sd}
            for c, v, sd, gib in (("amp_bf16", 100.0, 1.0, 6.8), ("bf16_pure", 110.0, float("nan"), 5.5),
                                  ("fp16_fp16_states", float("nan"), float("nan"), float("nan")))
            for m, v, sd in (("throughput", v, sd), ("memory", gib, 0.0))]
    (tmp_path / "comparison").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "comparison" / "config_stats.csv", index=False)
    line = findings._speed_line(tmp_path)
    assert "bf16_pure 1.10x (one seed; 5.5)" in line
    assert "fp16_fp16_states not timed (no run finished)" in line
    assert "nan" not in line.lower()


def test_an_undecided_frontier_row_says_which_pair_and_configs_it_compared_and_what_it_saw():
    h = {"verdict": "inconclusive", "reason": "CI [0, 0.5] includes 0; scenario(s) A, E count for speed only",
         "effect": {"estimate": 0.5, "ci_low": 0.0, "ci_high": 0.5},
         "evidence": {"pairs": {"A-E": ["amp_bf16", "bf16_pure", "fp32_baseline"]},
                      "summary": "frontiers differ on A-E (A: bf16_pure; E: amp_bf16, bf16_pure)"}}
    cell = findings._to_settle(h)
    assert cell.startswith("CI [0, 0.5] includes 0: frontiers differ on A-E (A: bf16_pure; E: amp_bf16, bf16_pure)")
    assert cell.endswith("among amp_bf16, bf16_pure, fp32_baseline") and "speed only" not in cell
    assert findings._to_settle({**h, "evidence": {}}) == "CI [0, 0.5] includes 0"


def test_h4_is_timed_by_the_first_speed_study_with_an_lm_and_a_classification_scenario(tmp_path, monkeypatch):
    """A speed study of one scenario listed first (B alone) cannot compare frontiers between tasks:
    H4 comes from the next speed study that timed both kinds, not an 'inconclusive' from the first."""
    quality = json.loads(QUICK.read_text())
    quality["hypotheses"]["seed001.H4"].update(verdict="untestable", reason="no speed here")
    not_judged = {"reason": NOT_JUDGED}
    only_b = {"learned": {"B": not_judged}, "hypotheses": {}}
    a_and_e = {"learned": {"A": not_judged, "E": not_judged}, "hypotheses": {}}
    asked = []

    def frontier(comp, speed_dir):
        asked.append(speed_dir.name)
        return {"claim": "c", "verdict": "supported", "reason": f"from {speed_dir.name}", "effect": None, "evidence": {}}
    monkeypatch.setattr(findings, "frontier_across", frontier)
    studies = [("reference", quality, QUICK.parent.parent), ("speed_b", only_b, tmp_path / "speed_b"),
               ("speed_ae", a_and_e, tmp_path / "speed_ae")]
    label, h4 = findings._hypotheses(studies, quality)["seed001.H4"]
    assert asked == ["speed_ae"] and label == "speed_ae x reference" and h4["reason"] == "from speed_ae"
    label, h4 = findings._hypotheses(studies[:2], quality)["seed001.H4"]  # no study timed both: the quality study's own
    assert label == "reference" and h4["verdict"] == "untestable"


def test_the_efficiency_line_counts_a_studys_pretrain_stage_after_the_study(tmp_path, monkeypatch):
    """A study's pretrain stage (``<study>.pretrain``, beside it) is GPU time the study spent too: the Efficiency
    line gives its share after the study's; a study without a stage gets no such entry."""
    for d in ("real", "real.pretrain", "rob"):
        (tmp_path / d).mkdir()
    monkeypatch.setattr(findings, "load_records", lambda d: [Path(d).name])
    monkeypatch.setattr(findings, "efficiency_line", lambda name, records: f"`{name}` read {records[0]}")
    shown = findings._efficiency([("real", tmp_path / "real"), ("rob", tmp_path / "rob")])
    assert "`real.pretrain` read real.pretrain" in shown
    assert shown.index("`real` read real;") < shown.index("`real.pretrain`") < shown.index("`rob` read rob")
    assert "rob.pretrain" not in shown
