"""Multi-process arms planned, resumed and fault-isolated by the one sweep (seeds 003 and 004's
studies): each arm's runs get their own folder and inline parameters, a run that needs several
processes is launched through torchrun by the training notebook, a failing arm leaves an
``error`` record while the others finish, and a second sweep runs only what failed."""
import shlex

import pytest
from conftest import COMPLETED

from benchlib.core.records import read_record, validate
from dtype_bench.host import slots
from dtype_bench.study import runner, sweep
from benchlib.study.studyfile import load_study

TINY = ("scenarios: [A]\nconfigs: [fp32_baseline]\nseeds: [0]\nsize: tiny\nsteps: 4\nlog_every: 2\n"
        "eval_batches: 2\ntiming_windows: 2\ndevice: cpu\n")


def _study(tmp_path, arms: str, name="arms.yaml"):
    path = tmp_path / name
    path.write_text(f"study: {path.stem}\n" + TINY + "arms:\n" + arms)
    return path


def test_arms_plan_one_folder_each_with_their_settings_inline(tmp_path):
    path = _study(tmp_path, "  single: {}\n  ddp_2: {dist: {strategy: ddp, nproc: 2, bucket_cap_mb: 25}}\n")
    items = sweep.plan(load_study(path), tmp_path / "executed")
    assert [i.run_id for i in items] == ["single/A/fp32_baseline/seed0", "ddp_2/A/fp32_baseline/seed0"]
    ddp = items[1]
    assert ddp.out_dir == tmp_path / "executed" / "arms" / "runs" / "ddp_2" / "A" / "fp32_baseline" / "seed0"
    given = runner.injected(runner.papermill_command(ddp))
    assert (given["dist"]["strategy"], given["dist"]["nproc"], given["dist"]["bucket_cap_mb"], given["extra"]["arm"]) \
        == ("ddp", 2, 25, "ddp_2")
    assert ddp.spec.cfg.dist.bucket_cap_mb == 25.0 and ddp.spec.cfg.extra["arm"] == "ddp_2"


def test_a_changed_arm_setting_makes_its_record_stale_and_only_its_own(tmp_path):
    path = _study(tmp_path, "  ddp_2: {dist: {strategy: ddp, nproc: 2}}\n")
    item = sweep.plan(load_study(path), tmp_path)[0]
    ran = {"run": {**item.spec.cfg.to_dict(), "dist": {**item.spec.cfg.to_dict()["dist"], "reshard": "none"}}}
    assert runner.stale_keys(ran, item.spec.params) == []  # a lever the arm does not set
    ran["run"]["dist"]["nproc"] = 1
    assert runner.stale_keys(ran, item.spec.params) == ["dist.nproc 1 -> 2"]


def test_multi_gpu_arms_get_as_many_gpus_per_slot_as_they_have_processes():
    assert slots.slots_for(2, ["0", "1", "2", "3"], per_run=2) == [{"CUDA_VISIBLE_DEVICES": "0,1"},
                                                                   {"CUDA_VISIBLE_DEVICES": "2,3"}]
    assert slots.slots_for(2, ["0", "1"], per_run=2) == [{}]  # one run at a time, on both GPUs


def test_arms_and_pretrain_do_not_mix(tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text(TINY + "pretrain: {gpt2: {steps: 2}}\narms: {single: {}}\n")
    with pytest.raises(ValueError, match="arms and pretrain cannot be combined"):
        load_study(path)


@pytest.mark.timeout(900)
def test_the_sweep_runs_arms_under_torchrun_isolates_a_failing_one_and_resumes_only_it(tmp_path, capsys):
    empty = tmp_path / "no_checkpoint_here"
    empty.mkdir()
    path = _study(tmp_path, "  single: {}\n"
                            "  ddp_2: {dist: {strategy: ddp, nproc: 2, timeout_s: 60}}\n"
                            f"  broken_2: {{model_name_or_path: {shlex.quote(str(empty))}, "
                            "dist: {strategy: ddp, nproc: 2, timeout_s: 60}}\n")
    root = tmp_path / "executed"
    assert sweep.main([str(path), "--out", str(root), "--no_html"]) == 1  # one arm failed
    runs = root / "arms" / "runs"
    single = validate(read_record(runs / "single/A/fp32_baseline/seed0/result.json"))
    ddp = validate(read_record(runs / "ddp_2/A/fp32_baseline/seed0/result.json"))
    broken = validate(read_record(runs / "broken_2/A/fp32_baseline/seed0/result.json"))
    assert single["status"] in COMPLETED and single["dist"]["world_size"] == 1
    assert ddp["status"] in COMPLETED and ddp["metrics"]["dist/world_size"] == 2, ddp["reason"]
    assert ddp["run"]["dist"]["strategy"] == "ddp" and ddp["run"]["extra"]["arm"] == "ddp_2"
    assert {p.name for p in (runs / "ddp_2/A/fp32_baseline/seed0").glob("rank*.jsonl")} == {"rank0.jsonl", "rank1.jsonl"}
    assert broken["status"] == "error" and str(empty) in broken["reason"]
    err = capsys.readouterr().err
    assert "1 run(s) ended in error" in err and "broken_2/A/fp32_baseline/seed0" in err
    # the arms' analysis is the scaling notebook's, over the study's records
    assert (root / "arms" / "analysis" / "20_scaling.ipynb").exists()
    assert (root / "arms" / "scaling" / "summary.json").exists()
    # resume: only the failed arm runs again
    assert sweep.main([str(path), "--out", str(root), "--dry_run"]) == 0
    assert "done 2, to run 1 (error 1)" in capsys.readouterr().out


def test_a_record_the_sweep_did_not_complete_runs_again(tmp_path):
    """Training wrote a finished record, but the notebook around it was killed (a time limit):
    without the sweep's own entry the record is not taken as done."""
    from benchlib.core.records import write_json_atomic
    path = _study(tmp_path, "  ddp_2: {dist: {strategy: ddp, nproc: 2}}\n")
    item = sweep.plan(load_study(path), tmp_path)[0]
    rec = {**runner.error_record(item.spec, item.out_dir, None), "status": "ok"}
    write_json_atomic(item.result, rec)
    assert sweep.run_state(item)[0] == "unfinished"
    write_json_atomic(item.result, {**rec, "sweep": {"wall_s": 1.0}})
    assert sweep.run_state(item) == ("done:ok", "")


def test_the_torchrun_command_carries_the_records_notes_so_rank_0_writes_them():
    import argparse

    from benchlib.run import add_run_args, run_config_from_args
    from benchlib.core.runconfig import RunConfig
    from benchlib.parallel.launch import torchrun_command
    cfg = RunConfig.from_dict({"dist": {"strategy": "ddp", "nproc": 2}, "extra": {"study": "s", "arm": "ddp 2"}})
    cmd = torchrun_command(cfg, "out")
    p = argparse.ArgumentParser()
    add_run_args(p)
    assert run_config_from_args(p.parse_args(cmd[7:cmd.index("--out")])).extra == {"study": "s", "arm": "ddp 2"}


def test_the_scaling_analysis_finds_a_records_arm_from_its_folder_when_the_record_lacks_it():
    from benchlib.analysis import scaling
    assert scaling._arm_of_path("x/fsdp/runs/fsdp_official/A/amp_bf16/seed0/result.json") == "fsdp_official"
    assert scaling._arm_of_path("x/smoke/runs/A/amp_bf16/seed0/result.json") is None  # a study without arms
