"""Calibration tables and the backfill of old records (benchlib.study.calibration, benchlib.host.backfill)."""
import gzip
import json
import shutil

import pytest

from benchlib.host.backfill import backfill_record, main as backfill_main
from benchlib.study.calibration import calibration_table, main as calibration_main, meets_target, to_markdown
from benchlib.training.loop import run


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cal")
    run({"scenario": "A", "config": "fp32_baseline", "steps": 20, "eval_every": 10, "log_every": 5},
        out_dir=root / "A_run", progress=False)
    run({"scenario": "F", "config": "fp32_baseline", "steps": 10, "eval_every": 5, "log_every": 5},
        out_dir=root / "F_run", progress=False)
    return root


def test_the_table_has_a_row_per_run_with_its_curve_baseline_and_target(tiny_runs):
    df = calibration_table(tiny_runs)
    a = df.set_index("run").loc["A_run"]
    assert a.scenario == "A" and a.metric == "val_loss" and sorted(a.curve) == [10, 20]
    assert a.baseline > a.floor and a.init == "scratch" and a.target_met in (True, False)
    assert "val_loss: 10:" in to_markdown(df)


def test_a_run_cut_off_before_its_record_still_gives_its_curve(tiny_runs, tmp_path):
    cut = tmp_path / "F_cut"
    cut.mkdir()
    with open(tiny_runs / "F_run" / "steps.jsonl", "rb") as f, gzip.open(cut / "steps.jsonl.gz", "wb") as g:
        g.write(f.read())
    row = calibration_table(tmp_path).iloc[0]
    assert row.status == "cut off (no record)" and row.target_met is None and row.metric == "accuracy"
    assert list(row.curve) == [5, 10]


def test_targets_follow_the_issue():
    assert meets_target("clm", {"quality/val_loss": 2.6, "quality/loss_floor": 2.19}) is True
    assert meets_target("clm", {"quality/val_loss": 2.8, "quality/loss_floor": 2.19}) is False
    ml = {"quality/micro_f1": 0.44, "quality/p_at_1": 0.84, "baseline/p_at_1": 0.12}
    assert meets_target("multilabel", ml) is True
    assert meets_target("multilabel", {**ml, "quality/micro_f1": 0.2}) is False
    assert meets_target("singlelabel", {"quality/accuracy": 0.3, "baseline/accuracy": 0.12}) is False
    assert meets_target("singlelabel", {}) is None


def test_the_cli_names_a_missing_folder_in_one_line(capsys, tmp_path):
    assert calibration_main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert "nope" in err and "\n" not in err


def test_backfill_gives_an_old_record_its_baseline_and_rejudges_its_status(tiny_runs, tmp_path):
    folder = tmp_path / "old"
    shutil.copytree(tiny_runs / "F_run", folder)
    path = folder / "result.json"
    rec = json.loads(path.read_text())
    new = {k: v for k, v in rec["metrics"].items()
           if not k.startswith(("baseline/", "quality/beats", "quality/baseline", "quality/learned"))}
    rec["metrics"] = new
    rec["status"] = "ok"  # as records were written before the detectors
    rec["run"]["eval_batches"] = 8
    path.write_text(json.dumps(rec))
    said = backfill_record(path)
    after = json.loads(path.read_text())
    m = after["metrics"]
    assert m["baseline/name"] == "majority_class" and "baseline/accuracy" in m
    assert m["quality/n_eval"] == 64  # the run's own evaluation set then: 8 batches of 8
    assert after["backfill"]["status_was"] == "ok" and after["status"] in ("ok", "stalled", "degraded")
    assert after["status"] in said
    assert backfill_record(path) == "has a baseline already"  # idempotent


def test_backfill_leaves_real_data_and_unfinished_records_alone(tmp_path):
    p = tmp_path / "r" / "result.json"
    p.parent.mkdir()
    p.write_text(json.dumps({"status": "error", "metrics": {}, "run": {}}))
    assert "nothing to compare" in backfill_record(p)
    assert backfill_main([str(tmp_path / "empty")]) == 2
