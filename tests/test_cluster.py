"""``dtype-bench sweep --executor local | slurm``: the study's runs handed to submitit, each task
the same papermill command and record as the in-process sweep; resubmission runs only what did
not finish; a job the scheduler ended without a record leaves one that says why."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import COMPLETED, REPO, line_with

from benchlib.core.records import FINISHED, read_record, write_json_atomic
from benchlib.core.runconfig import ConfigError
from dtype_bench.study import cluster, runner, sweep
from benchlib.study.executor import ExecutorSettings
from benchlib.study.studyfile import load_study

submitit = pytest.importorskip("submitit")

MINI = """study: mini
scenarios: [A, D]
configs: [fp32_baseline]
size: tiny
steps: 4
device: cpu
log_every: 2
eval_batches: 2
"""


def _write(tmp_path, text, name="mini.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _records(root):
    return {str(p.parent.relative_to(root / "runs")): read_record(p) for p in sorted((root / "runs").rglob("result.json"))}


def _items(study_file, root):
    study = load_study(study_file)
    return study, sweep.plan(study, root)


# ---- settings ------------------------------------------------------------------------
def test_executor_section_is_validated_with_the_key_named(tmp_path):
    with pytest.raises(ConfigError, match=r"executor: unknown key 'partion'\. Did you mean 'partition'\?"):
        load_study(_write(tmp_path, MINI + "executor: {partion: gpu}\n"))
    with pytest.raises(ConfigError, match=r"executor: time_min must be a whole number >= 1, got 0"):
        load_study(_write(tmp_path, MINI + "executor: {time_min: 0}\n"))
    with pytest.raises(ConfigError, match=r"kind 'pbs' is not one of inprocess, local, slurm"):
        load_study(_write(tmp_path, MINI + "executor: {kind: pbs}\n"))


def test_flags_lay_over_the_study_files_executor_section(tmp_path):
    study = load_study(_write(tmp_path, MINI + "executor: {partition: gpu, account: lab, time_min: 30}\n"))
    ns = sweep.parse_args([str(study.path), "--executor", "slurm", "--set", "time_min=90", "--set", "gpus_per_task=2"])
    s = sweep.executor_settings(ns, study)
    assert (s.kind, s.partition, s.account, s.time_min, s.gpus_per_task) == ("slurm", "gpu", "lab", 90, 2)
    with pytest.raises(ConfigError, match="unknown key 'time_mins'"):
        sweep.executor_settings(sweep.parse_args([str(study.path), "--set", "time_mins=90"]), study)
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        sweep.executor_settings(sweep.parse_args([str(study.path), "--set", "time_min"]), study)


def test_the_training_notebook_ignores_the_executor_section(tmp_path):
    from benchlib.study.notebook import validate_params
    study = {"study": "mini", "scenarios": ["A"], "configs": ["fp32_baseline"], "executor": {"partition": "gpu"},
             "size": "tiny", "steps": 4}
    cfg = validate_params({**study, "scenario": "A", "config": "fp32_baseline", "seed": 0})
    assert (cfg.scenario, cfg.steps) == ("A", 4)


def test_gpus_per_task_follow_the_runs_processes_on_a_gpu_and_are_none_on_cpu():
    s = ExecutorSettings()
    assert (s.gpus_for(2, "cuda"), s.gpus_for(1, "auto"), s.gpus_for(1, "cpu")) == (2, 1, 0)
    assert ExecutorSettings(gpus_per_task=4).gpus_for(1, "cpu") == 4


# ---- the generated submission --------------------------------------------------------
ARMS = """study: scale
scenarios: [A]
configs: [amp_bf16]
seeds: [0, 1]
size: tiny
steps: 4
device: cuda
arms:
  single: {}
  ddp_2: {dist: {strategy: ddp, nproc: 2}}
executor: {partition: gpu, account: lab, time_min: 45, cpus_per_task: 8, mem_gb: 64, array_parallelism: 3,
           setup: ["source .venv/bin/activate"], sbatch: {constraint: h100}}
"""


def test_each_resource_shape_is_one_array_with_its_gpus(tmp_path):
    study, items = _items(_write(tmp_path, ARMS), tmp_path / "executed")
    shapes = [(stage, gpus, sorted(i.run_id for i in runs)) for stage, gpus, runs in cluster.arrays(items, study.executor)]
    assert shapes == [("run", 1, ["single/A/amp_bf16/seed0", "single/A/amp_bf16/seed1"]),
                      ("run", 2, ["ddp_2/A/amp_bf16/seed0", "ddp_2/A/amp_bf16/seed1"])]


def test_sbatch_script_carries_the_study_files_resources(tmp_path):
    study, items = _items(_write(tmp_path, ARMS), tmp_path / "executed")
    text = cluster.sbatch_script(study.executor, 2, 5, tmp_path / "logs", "dtype-bench.scale", "afterany:41")
    flags = dict(re.findall(r"#SBATCH --([\w-]+)=(\S+)", text))
    assert flags["array"] == "0-4%3"  # 5 tasks, at most 3 at once
    assert (flags["partition"], flags["account"], flags["time"], flags["gpus-per-node"]) == ("gpu", "lab", "45", "2")
    assert (flags["cpus-per-task"], flags["mem"], flags["constraint"]) == ("8", "65536MB", "h100")
    assert flags["dependency"] == "afterany:41" and flags["job-name"] == "dtype-bench.scale"
    assert "source .venv/bin/activate" in text and "srun" in text


def test_dry_run_shows_each_array_and_submits_nothing(tmp_path, capsys):
    path = _write(tmp_path, ARMS)
    assert sweep.main([str(path), "--out", str(tmp_path / "executed"), "--executor", "slurm", "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert "would submit 4 runs (slurm)" in out
    assert "--- run array: 2 task(s), 1 GPU(s) each" in out and "--- run array: 2 task(s), 2 GPU(s) each" in out
    assert out.count("#SBATCH --partition=gpu") == 2
    assert "papermill" in out  # the per-task commands
    assert not (tmp_path / "executed" / "scale" / "cluster").exists()


def test_a_task_runs_exactly_the_sweeps_papermill_command(tmp_path, monkeypatch):
    path = _write(tmp_path, MINI)
    root = tmp_path / "executed"
    study, items = _items(path, root)
    seen = []

    def fake_execute(cmd, env, log, timeout=None):
        seen.append(cmd)
        out = Path(runner.injected(cmd)["out_dir"])
        item = next(i for i in items if i.run_id == "D/fp32_baseline/seed0")
        write_json_atomic(out / "result.json", {**runner.error_record(item.spec, out, None), "status": "ok"})
        return 0

    monkeypatch.setattr(runner, "execute", fake_execute)
    assert cluster.run_task(str(path), str(root), "D/fp32_baseline/seed0", os.getcwd()) == "ok"
    item = next(i for i in items if i.run_id == "D/fp32_baseline/seed0")
    assert seen == [runner.papermill_command(item)]
    rec = read_record(item.result)
    assert rec["sweep"]["job"]["executor"] == "inprocess"  # not inside a submitit task here


def test_a_stopped_task_leaves_an_error_record_saying_why(tmp_path, monkeypatch):
    path = _write(tmp_path, MINI)
    root = tmp_path / "executed"

    def timed_out(cmd, env, log, timeout=None):
        raise submitit.core.utils.UncompletedJobError("Job not requeued because: timed-out and not checkpointable.")

    monkeypatch.setattr(runner, "execute", timed_out)
    with pytest.raises(submitit.core.utils.UncompletedJobError):
        cluster.run_task(str(path), str(root), "A/fp32_baseline/seed0", os.getcwd())
    rec = _records(root / "mini")["A/fp32_baseline/seed0"]
    assert rec["status"] == "error" and "reached its time limit" in rec["reason"] and "executor.time_min" in rec["reason"]


# ---- the scheduler's verdicts ----------------------------------------------------------
def _ledger(study, root, entries):
    path = cluster.cluster_dir(study, root) / cluster.LEDGER
    write_json_atomic(path, {r: {"executor": "slurm", "job_id": j, "folder": str(root / "logs" / "%j"),
                                 "submitted": "2026-11-23T00:00:00", "out_dir": ""} for r, j in entries.items()})


def test_a_job_ended_without_a_record_gets_one_naming_the_schedulers_state(tmp_path, monkeypatch):
    path = _write(tmp_path, MINI)
    root = tmp_path / "executed"
    study, items = _items(path, root)
    _ledger(study, root, {"A/fp32_baseline/seed0": "7_0", "D/fp32_baseline/seed0": "7_1"})
    monkeypatch.setattr(cluster, "job_states", lambda ledger: {"A/fp32_baseline/seed0": "OUT_OF_MEMORY",
                                                               "D/fp32_baseline/seed0": "RUNNING"})
    assert cluster.reconcile(study, items, root) == ["A/fp32_baseline/seed0"]
    rec = _records(root / "mini")["A/fp32_baseline/seed0"]
    assert rec["status"] == "error" and rec["sweep"]["job"] == {"executor": "slurm", "job_id": "7_0", "state": "OUT_OF_MEMORY"}
    assert line_with(rec["reason"], "slurm job 7_0", "memory", "executor.mem_gb")  # the job, the cause, the key to raise
    # resubmission: the failed run goes again, the one still running does not
    todo, flying = cluster.Submission(study, root, ExecutorSettings(kind="slurm")).pending([i for i in items if i.todo])
    assert [i.run_id for i in todo] == ["A/fp32_baseline/seed0"] and [i.run_id for i in flying] == ["D/fp32_baseline/seed0"]


def test_a_task_killed_by_slurms_warning_signal_is_recorded_as_its_time_limit(tmp_path, monkeypatch):
    """The warning (SIGUSR2) can reach a task before submitit handles it (a limit shorter than the
    warning's 90 s, a loaded node): Slurm then says FAILED, and the task log names the signal."""
    path = _write(tmp_path, MINI)
    root = tmp_path / "executed"
    study, items = _items(path, root)
    _ledger(study, root, {"A/fp32_baseline/seed0": "8"})
    monkeypatch.setattr(cluster, "job_states", lambda ledger: {"A/fp32_baseline/seed0": "FAILED"})
    monkeypatch.setattr(cluster, "_log_tail", lambda entry: "\n(task log x.err):\nsrun: error: n1: task 0: User defined signal 2")
    assert cluster.reconcile(study, items, root) == ["A/fp32_baseline/seed0"]
    reason = _records(root / "mini")["A/fp32_baseline/seed0"]["reason"]
    assert line_with(reason, "slurm job 8", "time limit", "SIGUSR2")
    assert cluster.ended_how("FAILED", "Traceback: boom") == "failed"  # any other failure stays one


def test_the_schedulers_reason_heads_the_record_a_stopped_task_wrote(tmp_path, monkeypatch):
    path = _write(tmp_path, MINI)
    root = tmp_path / "executed"
    study, items = _items(path, root)
    item = items[0]
    rec = {**runner.error_record(item.spec, item.out_dir, "notebook killed by SIGTERM (papermill exit -15):"),
           "sweep": {"wall_s": 3.0, "fixed_s": None, "notebook_overhead_s": None,
                     "job": {"executor": "slurm", "job_id": "9", "host": "n1"}}}
    write_json_atomic(item.result, rec)
    _ledger(study, root, {item.run_id: "9"})
    monkeypatch.setattr(cluster, "job_states", lambda ledger: {item.run_id: "TIMEOUT"})
    cluster.reconcile(study, items, root)
    cluster.reconcile(study, items, root)  # said once
    rec = read_record(item.result)
    assert rec["reason"].count("slurm job 9 reached its time limit") == 1
    assert rec["reason"].endswith("notebook killed by SIGTERM (papermill exit -15):")


def test_analysis_only_first_records_the_runs_whose_job_ended_without_one(tmp_path, monkeypatch, capsys):
    path = _write(tmp_path, MINI)
    root = tmp_path / "executed"
    study, items = _items(path, root)
    _ledger(study, root, {"A/fp32_baseline/seed0": "8_0"})
    monkeypatch.setattr(cluster, "job_states", lambda ledger: {"A/fp32_baseline/seed0": "NODE_FAIL"})
    monkeypatch.setattr(sweep, "run_analysis", lambda study_dir, slot, analyses=():  ([], []))
    assert sweep.main([str(path), "--out", str(root), "--analysis_only", "--no_html"]) == 1
    rec = _records(root / "mini")["A/fp32_baseline/seed0"]
    assert rec["status"] == "error" and rec["reason"].startswith("slurm job 8_0 lost its node")
    assert "1 run(s) ended in error" in capsys.readouterr().err


def test_status_lists_each_runs_state_from_records_and_scheduler(tmp_path, monkeypatch, capsys):
    path = _write(tmp_path, MINI.replace("configs: [fp32_baseline]", "configs: [fp32_baseline, amp_bf16]"))
    root = tmp_path / "executed"
    study, items = _items(path, root)
    by_id = {i.run_id: i for i in items}
    done = by_id["A/fp32_baseline/seed0"]
    write_json_atomic(done.result, {**runner.error_record(done.spec, done.out_dir, None), "status": "ok",
                                    "sweep": {"wall_s": 1.0, "fixed_s": None, "notebook_overhead_s": None}})
    _ledger(study, root, {"A/fp32_baseline/seed0": "5_0", "A/amp_bf16/seed0": "5_1", "D/fp32_baseline/seed0": "5_2"})
    monkeypatch.setattr(cluster, "job_states", lambda ledger: {"A/fp32_baseline/seed0": "COMPLETED",
                                                               "A/amp_bf16/seed0": "PENDING",
                                                               "D/fp32_baseline/seed0": "RUNNING"})
    assert sweep.main([str(path), "--out", str(root), "--status"]) == 0
    out = capsys.readouterr().out
    assert "study mini: " in out
    states = {line.split()[0]: line.split()[1] for line in out.splitlines()[2:]}
    assert states == {"A/fp32_baseline/seed0": "done", "A/amp_bf16/seed0": "pending",
                      "D/fp32_baseline/seed0": "running", "D/amp_bf16/seed0": "not"}  # not submitted
    assert not (root / "mini" / "runs" / "D").exists()  # --status writes nothing


def test_without_submitit_one_line_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    from dtype_bench import cli
    monkeypatch.setitem(sys.modules, "submitit", None)
    assert cli.main(["sweep", str(_write(tmp_path, MINI)), "--out", str(tmp_path / "x"), "--executor", "slurm"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install -e '.[slurm]'" in err


@pytest.mark.skipif(subprocess.run(["which", "srun"], capture_output=True).returncode == 0,
                    reason="this machine has Slurm")
def test_slurm_without_slurm_is_one_line(tmp_path, capsys):
    from dtype_bench import cli
    assert cli.main(["sweep", str(_write(tmp_path, MINI)), "--out", str(tmp_path / "x"), "--executor", "slurm"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no Slurm on this machine" in err and "--dry_run" in err


# ---- end to end through submitit's local executor --------------------------------------
def test_local_executor_runs_the_study_resubmits_nothing_then_only_the_failed_run(tmp_path, capsys):
    root = tmp_path / "executed"
    # D asks for a GPU this machine does not have: its task fails, A's does not
    path = _write(tmp_path, MINI + "overrides: {D: {device: cuda}}\n")
    rc = sweep.main([str(path), "--out", str(root), "--executor", "local", "--no_analysis", "--no_html"])
    assert rc == 1
    recs = _records(root / "mini")
    assert recs["A/fp32_baseline/seed0"]["status"] in COMPLETED
    assert recs["D/fp32_baseline/seed0"]["status"] == "error"
    for rec in recs.values():
        assert rec["sweep"]["job"]["executor"] == "local" and rec["sweep"]["job"]["job_id"]
    ledger = read_record_json(cluster.cluster_dir(load_study(path), root) / cluster.LEDGER)
    assert set(ledger) == {"A/fp32_baseline/seed0", "D/fp32_baseline/seed0"}
    a_mtime = (root / "mini/runs/A/fp32_baseline/seed0/result.json").stat().st_mtime_ns
    capsys.readouterr()

    # the fix: D on the CPU; resubmitting runs D alone
    path.write_text(MINI)
    assert sweep.main([str(path), "--out", str(root), "--executor", "local", "--no_analysis", "--no_html"]) == 0
    out = capsys.readouterr().out
    assert "done 1, to run 1 (error 1)" in out and "local job" in out and out.count("local job") == 1
    assert _records(root / "mini")["D/fp32_baseline/seed0"]["status"] in COMPLETED
    assert (root / "mini/runs/A/fp32_baseline/seed0/result.json").stat().st_mtime_ns == a_mtime
    after = read_record_json(cluster.cluster_dir(load_study(path), root) / cluster.LEDGER)
    assert after["A/fp32_baseline/seed0"] == ledger["A/fp32_baseline/seed0"]
    assert after["D/fp32_baseline/seed0"]["job_id"] != ledger["D/fp32_baseline/seed0"]["job_id"]

    # and once more: nothing to submit
    assert sweep.main([str(path), "--out", str(root), "--executor", "local", "--no_analysis", "--no_html"]) == 0
    out = capsys.readouterr().out
    assert "done 2, to run 0" in out and "local job" not in out


def read_record_json(path):
    import json
    return json.loads(Path(path).read_text())


def test_a_local_task_that_died_without_a_record_gets_one(tmp_path):
    path = _write(tmp_path, MINI)
    root = tmp_path / "executed"
    study, items = _items(path, root)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    write_json_atomic(cluster.cluster_dir(study, root) / cluster.LEDGER,
                      {"A/fp32_baseline/seed0": {"executor": "local", "job_id": str(gone.pid),
                                                 "folder": str(root / "logs/%j"), "submitted": "", "out_dir": ""}})
    assert cluster.reconcile(study, items, root) == ["A/fp32_baseline/seed0"]
    rec = _records(root / "mini")["A/fp32_baseline/seed0"]
    assert rec["status"] == "error" and line_with(rec["reason"], f"local job {gone.pid}", "ended", "record")


# ---- a real Slurm (.ci/slurm-up.sh starts one on the CI machine) -------------------------
def _slurm_up() -> bool:
    try:
        return subprocess.run(["sinfo", "-h", "-o", "%a"], capture_output=True, text=True, timeout=20).stdout.strip() == "up"
    except (OSError, subprocess.TimeoutExpired):
        return False


SLURM = _slurm_up()
if not SLURM and os.environ.get("DTYPE_BENCH_SLURM") == "required":
    raise RuntimeError("DTYPE_BENCH_SLURM=required but no Slurm answers (sinfo): see .ci/slurm-up.sh's log")
live = pytest.mark.skipif(not SLURM, reason="no Slurm here (CI starts one with .ci/slurm-up.sh)")


@live
def test_the_smoke_study_through_a_real_slurm(tmp_path, capsys):
    root = tmp_path / "executed"
    smoke = REPO / "params" / "smoke.yaml"
    rc = sweep.main([str(smoke), "--out", str(root), "--executor", "slurm", "--wait", "--no_analysis", "--no_html"])
    recs = _records(root / "smoke")
    assert rc == 0, {k: r["reason"] for k, r in recs.items() if r["status"] == "error"}
    # every run finished through Slurm; which of them diverge (fp16_naive on A, near its edge at
    # tiny on a CPU: transformers' initialisation decides) is the runs' business, not Slurm's
    assert len(recs) == 18 and all(r["status"] in FINISHED for r in recs.values())
    jobs = {r["sweep"]["job"]["job_id"] for r in recs.values()}
    assert len(jobs) == 18 and all(r["sweep"]["job"]["executor"] == "slurm" for r in recs.values())
    assert len({j.split("_")[0] for j in jobs}) == 1  # one array
    capsys.readouterr()
    assert sweep.main([str(smoke), "--out", str(root), "--executor", "slurm", "--no_analysis", "--no_html"]) == 0
    assert "done 18, to run 0" in capsys.readouterr().out
    assert sweep.main([str(smoke), "--out", str(root), "--status"]) == 0
    assert "study smoke: done 18" in capsys.readouterr().out


@live
def test_a_run_over_its_slurm_time_limit_is_recorded_as_such(tmp_path):
    root = tmp_path / "executed"
    # a one-minute limit: Slurm's warning (90 s before the end) comes at once. Slurm enforces limits
    # on a periodic check (30-60 s late), so the run must be far longer than that: 3,000 steps
    # finished in 75 s on a 2-core CI machine before the check came; 40,000 would take ~15 min
    path = _write(tmp_path, MINI.replace("scenarios: [A, D]", "scenarios: [A]").replace("steps: 4", "steps: 40000"))
    assert sweep.main([str(path), "--out", str(root), "--executor", "slurm", "--set", "time_min=1", "--wait",
                       "--no_analysis", "--no_html"]) == 1
    rec = _records(root / "mini")["A/fp32_baseline/seed0"]
    assert rec["status"] == "error" and "time limit" in rec["reason"]


# ---- the submission's shape, against a stand-in for submitit's SlurmExecutor ------------------
PRETRAIN = """study: ft
scenarios: [A, C]
configs: [fp32_baseline, amp_bf16]
size: tiny
steps: 3
device: cpu
pretrain:
  gpt2: {config: amp_bf16, steps: 5}
overrides:
  cls: {model_name_or_path: pretrained}
executor: {partition: gpu}
"""


def test_slurm_submission_runs_after_the_pretrain_array_and_the_analysis_after_all(tmp_path, fake_slurm):
    path = _write(tmp_path, PRETRAIN)
    root = tmp_path / "executed"
    assert sweep.main([str(path), "--out", str(root), "--executor", "slurm"]) == 0
    (k1, f1, p1, a1), (k2, f2, p2, a2), (k3, f3, p3, a3), (k4, f4, p4, _) = fake_slurm
    assert (k1, f1, [a[2] for a in a1]) == ("array", "run_task", ["pretrain/gpt2"])
    assert "dependency" not in p1 and p1["partition"] == "gpu"
    # A's runs start at once; C's load the pretrain checkpoint and wait for its array
    assert (k2, sorted(a[2] for a in a2), "dependency" in p2) == ("array", ["A/amp_bf16/seed0", "A/fp32_baseline/seed0"], False)
    assert (k3, sorted(a[2] for a in a3), p3["dependency"]) == ("array", ["C/amp_bf16/seed0", "C/fp32_baseline/seed0"],
                                                                "afterany:41")
    assert k4 == "job" and p4["dependency"] == "afterany:41:42:43"
    assert f4 == [sys.executable, "-m", "dtype_bench", "sweep", str(path), "--out", str(root), "--analysis_only"]
    ledger = read_record_json(cluster.cluster_dir(load_study(path), root) / cluster.LEDGER)
    assert ledger["pretrain/gpt2"]["job_id"] == "41_0" and len(ledger) == 5


def test_arrays_put_the_pretrain_stage_first(tmp_path):
    study, items = _items(_write(tmp_path, PRETRAIN), tmp_path / "executed")
    assert [(stage, len(runs)) for stage, _, runs in cluster.arrays(items, study.executor)] == [("pretrain", 1), ("run", 2), ("run", 2)]
