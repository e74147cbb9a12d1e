"""``dtype-bench rejudge``: finished runs judged again by today's health rules from their logs."""
import pytest
from fixtures.records import make_record, write_run

from dtype_bench.cli import main as cli_main
from benchlib.core.errors import UserError
from benchlib.core.records import read_record
from dtype_bench.study.rejudge import rejudge


def _rows(losses):
    return [{"step": i, "loss": v, "grad_norm": 1.0} for i, v in enumerate(losses)]


def _climb(n=300):  # learned (11 -> 7.4), then rose to ~21 and stayed: below 3x the initial 11
    return [11 - 3.6 * i / 20 for i in range(20)] + [7.4 + 13.6 * i / 60 for i in range(60)] + [21.0] * (n - 80)


def test_a_run_recorded_by_older_rules_is_judged_again_in_its_sidecar(tmp_path, capsys):
    old = make_record("A", "fp16_naive_noscale", 0, status="diverged", diverged_step=283, steps=300,
                      **{"quality/beats_baseline": False})
    f = write_run(tmp_path, old, _rows(_climb()))
    ok = write_run(tmp_path, make_record("A", "amp_bf16", 0, steps=100))
    before = f.read_text()
    assert cli_main(["rejudge", str(tmp_path)]) == 0
    rec = read_record(f)
    assert rec["status"] == "degraded" and rec["metrics"]["stability/diverged_step"] is None
    assert rec["rejudged"]["status_was"] == "diverged"
    assert f.read_text() == before  # result.json stays as training wrote it
    assert read_record(ok)["status"] == "ok" and "rejudged" not in read_record(ok)
    assert "1 run(s) judged otherwise" in capsys.readouterr().out
    assert rejudge(tmp_path) == []  # judging twice changes nothing the second time


def test_a_run_an_older_rule_stopped_early_must_run_again(tmp_path):
    losses = [0.02, 0.03, 0.025] * 10 + [0.07]  # one heavy batch, then stopped there
    write_run(tmp_path, make_record("D", "amp_bf16", 2, status="diverged", diverged_step=30, steps=1500), _rows(losses))
    with pytest.raises(UserError, match="D/amp_bf16/seed2.*run it again"):
        rejudge(tmp_path)
