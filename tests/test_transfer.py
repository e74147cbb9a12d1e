"""The transfer table: a synthetic arm's effects next to a real arm's, and where each verdict
comes from. Hand-built records of scenario A (val loss, lower is better) with known effects."""
from __future__ import annotations

import pandas as pd
import pytest

from dtype_bench import cli
from benchlib.analysis import tables, transfer
from benchlib.analysis.stats import Rules
from fixtures.records import make_record, write_study

FAST = Rules(n_boot=400)
NOISE = (0.0, 0.012, -0.009)  # the reference's seed-to-seed noise; configs share it (paired by seed)


def learned(rec: dict) -> dict:
    """As training writes an LM run that beat its unigram predictor (7.5 nats)."""
    rec["metrics"].update({"baseline/name": "unigram", "quality/learned_metric": "val_loss",
                           "baseline/val_loss": 7.5, "quality/beats_baseline": rec["status"] == "ok"})
    return rec


def arm(ref: float, gaps: dict, seeds=(0, 1, 2), diverged=(), real=False) -> list[dict]:
    """Runs of A: fp32_baseline at ``ref`` (+ seed noise), each config of ``gaps`` that many % worse
    on every seed (+ a little noise of its own); ``diverged`` configs diverge at step 40."""
    recs = []
    for c, g in {"fp32_baseline": 0.0, **gaps}.items():
        for k in seeds:
            q = ref * (1 + g / 100) + NOISE[k] + (0.001 * k if g else 0.0)
            recs.append(learned(make_record("A", c, k, quality=q, status="diverged" if c in diverged else "ok",
                                            diverged_step=40 if c in diverged else None)))
            if real:
                recs[-1]["data"] = {"source": "/data/real/text", "provenance_package": "some-text-package"}
    return recs


def table(syn: list[dict], real: list[dict]) -> pd.DataFrame:
    t = transfer.transfer_table(tables.study_frame(syn, FAST), tables.study_frame(real, FAST), FAST)
    return t.set_index("config")


SYN = {"bf16_pure": 2.0, "amp_fp16": 2.0, "amp_bf16": 2.0}


def test_twice_the_synthetic_effect_does_not_transfer_and_within_the_factor_does():
    t = table(arm(3.0, SYN), arm(4.0, {"bf16_pure": 4.0, "amp_fp16": 2.5, "amp_bf16": 2.0}, real=True))
    assert t.loc["bf16_pure", "syn_ci_low"] > 0 and t.loc["bf16_pure", "real_ci_low"] > 0  # both effects real
    assert t.loc["bf16_pure", "ratio"] == pytest.approx(2.0, rel=0.05)
    assert t.loc["bf16_pure", "transfers"] is False and "outside" in t.loc["bf16_pure", "transfer"]
    assert t.loc["amp_fp16", "ratio"] == pytest.approx(1.25, rel=0.05) and t.loc["amp_fp16", "transfers"] is True
    # every cell with a real verdict takes it from the real arm, whatever the synthetic said
    assert set(t.loc[["bf16_pure", "amp_fp16", "amp_bf16"], "source"]) == {"real"}


def test_a_config_that_diverged_on_real_data_does_not_transfer():
    t = table(arm(3.0, SYN), arm(4.0, {"bf16_pure": 2.0, "amp_fp16": 2.0, "amp_bf16": 2.0}, diverged=("amp_bf16",),
                                   real=True))
    assert t.loc["amp_bf16", "syn_verdict"] != "failed" and t.loc["amp_bf16", "real_verdict"] == "failed"
    assert t.loc["amp_bf16", "transfers"] is False and "real arm" in t.loc["amp_bf16", "transfer"]
    assert t.loc["bf16_pure", "transfers"] is True  # the same effect on both arms


def test_a_config_without_real_runs_takes_the_synthetic_verdict_only_where_the_scenario_transfers():
    syn = arm(3.0, {**SYN, "fp32_tf32_matmul": 0.1})
    good = table(syn, arm(4.0, SYN, real=True))
    assert good.loc["fp32_tf32_matmul", "source"].startswith("synthetic (transfers")
    bad = table(syn, arm(4.0, {**SYN, "bf16_pure": 5.0}, real=True))
    assert bad.loc["fp32_tf32_matmul", "source"].startswith("synthetic (does not transfer")
    assert "bf16_pure" in bad.loc["fp32_tf32_matmul", "source"]


def test_one_real_seed_gives_an_effect_without_ci_and_no_verdict_source():
    t = table(arm(3.0, SYN), arm(4.0, {"bf16_pure": 4.0, "amp_fp16": 2.0, "amp_bf16": 2.0}, seeds=(0,), real=True))
    row = t.loc["bf16_pure"]
    assert row["real_n"] == 1 and row["real_gap_pct"] == pytest.approx(4.0, rel=0.05)  # the point effect is shown
    assert pd.isna(row["real_ci_low"]) and pd.isna(row["real_ci_high"])
    assert row["transfers"] is None  # neither a match ...
    assert t.loc["amp_fp16", "transfers"] is None  # ... nor a mismatch, even where the points agree
    for c in SYN:  # ... nor a verdict source
        assert t.loc[c, "source"].startswith("synthetic (unverified")


def test_a_scenario_without_a_real_arm_is_unverified():
    t = transfer.transfer_table(tables.study_frame(arm(3.0, SYN), FAST),
                                tables.study_frame([learned(make_record("C", "fp32_baseline", 0, quality=0.5))], FAST),
                                FAST)
    assert set(t.loc[t["scenario"] == "A", "source"]) == {"synthetic (no real arm: unverified)"}


def test_the_findings_line_names_the_configs_that_do_not_transfer(tmp_path):
    syn = write_study(tmp_path / "syn", arm(3.0, SYN))
    real = write_study(tmp_path / "real", arm(4.0, {**SYN, "bf16_pure": 5.0}, diverged=("amp_bf16",), real=True))
    assert cli.main(["transfer", str(syn), str(real), "--out", str(tmp_path / "out")]) == 0
    line = transfer.findings_line(tmp_path / "out")[0]
    assert "A: does not transfer (amp_bf16, bf16_pure)" in line and "`real` (real data)" in line
    with pytest.raises(FileNotFoundError, match="nosuch"):
        transfer.findings_line(tmp_path / "nosuch")


def test_the_verb_writes_the_table_and_names_an_unknown_study(tmp_path, capsys):
    syn = write_study(tmp_path / "syn", arm(3.0, SYN))
    # the real study's runs on synthetic data (here: of C) are no real arm
    real = write_study(tmp_path / "real", arm(4.0, SYN, real=True) + [learned(make_record("C", "amp_bf16", 0))])
    assert cli.main(["transfer", str(syn), str(real), "--out", str(tmp_path / "out")]) == 0
    csv = pd.read_csv(tmp_path / "out" / "transfer.csv")
    assert set(csv["real_study"]) == {"real"} and (csv["source"] == "real").any()
    md = (tmp_path / "out" / "transfer.md").read_text()
    assert "C" not in set(csv["scenario"]) and "1 runs on synthetic data left out" in md
    assert "| A | bf16_pure |" in md
    assert "A: transfers (3 of 3 checked cells)" in transfer.findings_line(tmp_path / "out")[0]
    capsys.readouterr()
    assert cli.main(["transfer", str(tmp_path / "nosuch"), str(real)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "nosuch" in err
    # a "real" arm whose records carry no real data is refused, by name
    assert cli.main(["transfer", str(syn), str(syn)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(syn) in err and "real data" in err


def test_effects_against_different_references_are_not_compared():
    # the real arm has no fp32_baseline: its gaps are against amp_bf16, the synthetic's against fp32
    real = [r for r in arm(4.0, {"bf16_pure": 4.0, "amp_bf16": 2.0}, real=True) if r["config"] != "fp32_baseline"]
    t = table(arm(3.0, SYN), real)
    assert t.loc["bf16_pure", "real_reference"] == "amp_bf16" and t.loc["bf16_pure", "syn_reference"] == "fp32_baseline"
    assert t.loc["bf16_pure", "transfers"] is None and "references differ" in t.loc["bf16_pure", "transfer"]


def test_several_real_studies_count_together_and_an_unlearned_synthetic_arm_is_named(tmp_path):
    """The decoder and the encoder studies on real data are two folders: one transfer over both.
    Where the synthetic arm never established quality (C did not learn there), the scenario is
    unverified for that reason, not for want of real seeds."""
    syn = write_study(tmp_path / "syn", arm(3.0, SYN) + [make_record("C", c, k, status="stalled", quality=0.1)
                                                         for c in ("fp32_baseline", "amp_bf16") for k in range(3)])
    real_a = write_study(tmp_path / "real_a", arm(4.0, SYN, real=True))
    real_c = []
    for c, q in (("fp32_baseline", 0.5), ("amp_bf16", 0.5)):
        for k in range(3):
            rec = learned(make_record("C", c, k, quality=q + 0.001 * k))
            rec["metrics"].update({"baseline/name": "label-frequency", "quality/learned_metric": "micro_f1",
                                   "quality/beats_baseline": True})
            rec["data"] = {"source": "/data/real/tags", "provenance_package": "some-tags-package"}
            real_c.append(rec)
    real_c = write_study(tmp_path / "real_c", real_c)
    assert cli.main(["transfer", str(syn), str(real_a), str(real_c), "--out", str(tmp_path / "out")]) == 0
    csv = pd.read_csv(tmp_path / "out" / "transfer.csv")
    assert set(csv["real_study"]) == {"real_a + real_c"} and {"A", "C"} <= set(csv["scenario"])
    line = transfer.findings_line(tmp_path / "out")[0]
    assert "C: unverified (the synthetic arm did not establish quality there)" in line
