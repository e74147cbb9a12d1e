"""The backfill of old records (benchlib.host.backfill)."""
import json
import shutil

import pytest

from benchlib.host.backfill import backfill_record, main as backfill_main
from benchlib.training.loop import run


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cal")
    run({"scenario": "F", "config": "fp32_baseline", "steps": 10, "eval_every": 5, "log_every": 5},
        out_dir=root / "F_run", progress=False)
    return root


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
