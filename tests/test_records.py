"""The record contract (benchlib.core.records): every status and metric key that training writes is
known and documented, finished runs are resumed past, and the notebook / HTML / CLI displays
read the new evidence fields (status with its reason, quality beside its trivial baseline,
forensic means)."""
import math

import numpy as np
import pytest
import torch
from conftest import line_with
from fixtures.records import make_record

from dtype_bench.study import html_export
from benchlib.study import notebook
from benchlib.core import records
from benchlib.training.baselines import evaluate_predictor, evidence
from benchlib.training.forensics import Forensics
from benchlib.training.health import verdict
from benchlib.core.records import FINISHED, METRICS, STATUSES, TRAINED, CorruptRecord, validate


def test_degraded_and_stalled_are_finished_and_measured_runs():
    for s in ("degraded", "stalled"):
        assert s in STATUSES and s in FINISHED and s in TRAINED
    assert "error" not in FINISHED  # run again on resume
    assert set(TRAINED) <= set(FINISHED) <= set(STATUSES)
    assert set(STATUSES) - set(FINISHED) == {"error"}


def _batches(task: str, n: int = 12, labels: int = 6, vocab: int = 16, seq: int = 5):
    g = torch.Generator().manual_seed(0)
    if task in ("clm", "mlm"):
        y = torch.randint(0, vocab, (n, seq), generator=g)
        y[:, 0] = -100
        return [{"labels": y[:6]}, {"labels": y[6:]}], lambda b: torch.randn(*b["labels"].shape, vocab, generator=g)
    if task == "multilabel":
        y = (torch.rand(n, labels, generator=g) < 0.3).long()
        y[:, 0] = 1
    else:
        y = torch.randint(0, labels, (n,), generator=g)
    return [{"labels": y[:6]}, {"labels": y[6:]}], lambda b: torch.randn(len(b["labels"]), labels, generator=g)


@pytest.mark.parametrize("task", ["clm", "mlm", "multilabel", "singlelabel"])
def test_every_key_training_writes_is_documented(task):
    """What train.py puts into ``metrics``: quality/<m>, baselines.evidence (baseline/<m>,
    standard errors, the paired gain, beats_baseline), health.verdict and the forensic summary."""
    val, logits = _batches(task)
    quality, per = evaluate_predictor(logits, val, task)
    base, base_per = evaluate_predictor(logits, val, task)
    keys = {f"quality/{k}" for k in quality}
    keys |= set(evidence(quality, per, base, base_per, task))
    keys |= set(verdict([3.0, 2.0, 1.0] * 10, None, False)[2])
    keys |= {f"forensics/{k}_{s}" for k in Forensics.KEYS for s in ("mean", "max")}
    keys |= {"quality_se", "baseline/quality"}
    assert sorted(k for k in keys if k not in METRICS) == []
    assert all(isinstance(METRICS[k], str) and METRICS[k] for k in keys)


def test_records_with_booleans_strings_and_the_new_top_level_keys_validate():
    rec = make_record("D", "amp_bf16", **{
        "baseline/name": "label_frequency", "baseline/p_at_1": 0.12, "baseline/quality": 0.0,
        "quality/learned_metric": "p_at_1", "quality/beats_baseline": True, "quality/n_eval": 512,
        "quality/p_at_1": 0.84, "quality/p_at_1_se": 0.01, "quality_se": None,
        "stability/degraded_step": None, "stability/stalled_step": None,
        "forensics/update_unchanged_frac_mean": 0.0})
    rec.update(status="stalled", pretrained={"path": "x/model", "checkpoint": {"status": "stalled"}},
               checkpoint="runs/A/model")
    assert validate(rec) is rec
    with pytest.raises(CorruptRecord, match="checkpoint"):
        validate({**rec, "checkpoint": {"path": "x"}})
    with pytest.raises(CorruptRecord, match="pretrained"):
        validate({**rec, "pretrained": "x/model"})
    with pytest.raises(CorruptRecord, match="unknown metric keys"):
        validate({**rec, "metrics": {**rec["metrics"], "quality/p_at_2": 0.5}})
    with pytest.raises(CorruptRecord, match="status 'finished'"):
        validate({**rec, "status": "finished"})


def _evidence_record(beats=True, status="ok", reason=None, forensics=True):
    m = {"quality/p_at_1": 0.84, "quality/p_at_1_se": 0.012, "quality/micro_f1": 0.5, "quality_se": 0.02,
         "quality/micro_f1_se": 0.02, "baseline/name": "label_frequency", "baseline/p_at_1": 0.12,
         "baseline/micro_f1": 0.0, "baseline/quality": 0.0, "quality/learned_metric": "p_at_1",
         "quality/n_eval": 512, "quality/baseline_gain": 0.72 if beats else 0.0, "quality/baseline_gain_se": 0.02,
         "quality/baseline_gain_needed": 0.06, "quality/beats_baseline": beats,
         "stability/degraded_step": None, "stability/stalled_step": None if beats else 7}
    if forensics:
        m.update({f"forensics/{k}_mean": 0.01 * (i + 1) for i, k in enumerate(Forensics.KEYS)})
        m.update({f"forensics/{k}_max": 0.02 * (i + 1) for i, k in enumerate(Forensics.KEYS)})
    rec = make_record("D", "amp_bf16", quality=0.5, **m)
    rec.update(status=status, reason=reason)
    return validate(rec)


def test_result_summary_shows_status_reason_baseline_verdict_and_forensics():
    text = notebook.result_summary(_evidence_record())
    lines = text.splitlines()
    assert lines[0] == "status: ok"
    assert "P@1 0.84 ± 0.012 vs label-frequency 0.12" in lines[1] and "micro-F1 0.5" in lines[1]
    assert line_with(lines[1], "beat", "0.72", "0.06", "512")  # the verdict, its gain, the margin, the sample
    assert lines[2].startswith("forensics (mean over logged steps): grads exactly 0 1%")
    assert "weights an update left unchanged 5%" in lines[2]

    stalled = _evidence_record(beats=False, status="stalled", forensics=False,
                               reason="did not clearly beat the trivial baseline; training loss stopped improving at step 7")
    lines = notebook.result_summary(stalled).splitlines()
    assert lines[0] == ("status: stalled (did not clearly beat the trivial baseline; training loss stopped "
                        "improving at step 7)")
    assert "did not clearly beat it" in lines[1] and len(lines) == 2  # no forensics recorded: no line

    old = make_record("A", "amp_bf16", quality=3.2)  # a record from before baselines
    assert line_with(notebook.result_summary(old).splitlines()[1], "val loss 3.2", "no trivial baseline")


def test_result_table_reads_every_evidence_key_with_baseline_and_se_columns(tmp_path):
    rec = _evidence_record()
    table = notebook.result_table(notebook.TrainResult(rec, notebook.pd.DataFrame(), tmp_path))
    assert list(table.columns) == ["value", "se", "baseline", "meaning"]
    assert table.loc["status", "value"] == "ok"
    assert (table.loc["quality/p_at_1", "value"], table.loc["quality/p_at_1", "se"],
            table.loc["quality/p_at_1", "baseline"]) == (0.84, 0.012, 0.12)
    assert table.loc["quality/beats_baseline", "value"] is True
    for k in ("quality/baseline_gain", "quality/baseline_gain_needed", "forensics/grad_zero_frac_mean"):
        assert table.loc[k, "meaning"] == METRICS[k]
    assert not any(k.endswith("_se") for k in table.index)  # standard errors are a column, not rows
    assert table.loc["quality/baseline_gain", "se"] == 0.02
    # a record without baselines: no empty columns
    old = make_record("A", "amp_bf16", quality=3.2)
    assert list(notebook.result_table(notebook.TrainResult(old, notebook.pd.DataFrame(), tmp_path)).columns) \
        == ["value", "meaning"]


def test_html_index_cell_names_the_baseline_and_whether_it_was_beaten():
    assert html_export.baseline_cell(_evidence_record()["metrics"]) == "0 label-frequency (beaten)"
    assert html_export.baseline_cell(_evidence_record(beats=False)["metrics"]) == "0 label-frequency (not beaten)"
    assert html_export.baseline_cell(make_record("A", "amp_bf16")["metrics"]) == ""


def test_records_frame_carries_the_evidence_columns():
    df = records.records_frame([_evidence_record(), _evidence_record(beats=False, status="stalled")])
    assert list(df["status"]) == ["ok", "stalled"]
    assert list(df["quality/beats_baseline"]) == [True, False]
    assert all(math.isclose(v, 0.12) for v in df["baseline/p_at_1"])
    assert np.isfinite(df["forensics/grad_zero_frac_mean"]).all()


def test_the_sidecar_lays_the_sweep_s_word_over_the_record_it_names_and_no_other(tmp_path):
    rec = {**make_record("A", "amp_bf16"), "env": {"date": "2030-01-01T00:00:00+00:00"}}
    path = records.write_record(tmp_path, {**rec, "_path": "not written"})
    written = path.read_bytes()
    assert "_path" not in records.read_record(path)
    records.write_sidecar(tmp_path, rec, sweep={"wall_s": 3.0})
    records.write_sidecar(tmp_path, rec, status="error", reason="notebook failed")  # over what it said before
    merged = records.read_record(path)
    assert (merged["sweep"], merged["status"], merged["reason"]) == ({"wall_s": 3.0}, "error", "notebook failed")
    assert path.read_bytes() == written  # the record stays as written
    assert [r["status"] for r in records.load_records(tmp_path)] == ["error"]
    # a record written again (another run in the folder) is not the one the sidecar names
    records.write_record(tmp_path, {**rec, "env": {"date": "2030-01-02T00:00:00+00:00"}})
    assert "sweep" not in records.read_record(path) and records.read_record(path)["status"] == rec["status"]
    (tmp_path / records.SIDECAR).write_text("{not json")
    with pytest.raises(CorruptRecord, match="sweep.json"):
        records.read_record(path)
