"""Runs without a notebook (``notebook_seeds:``): a cell's seeds trained one after another in one
process (``dtype_bench.host.cellrun``), each with the record and step log its notebook would write."""
import json

import pytest
from conftest import line_with

from benchlib.core.records import TRAINED, read_record, steps_file, write_json_atomic
from benchlib.core.runconfig import ConfigError
from dtype_bench.host import budget, cellrun
from dtype_bench.host import sweep as host_sweep
from dtype_bench.study import runner, sweep
from benchlib.study.studyfile import load_study, parse_study

STUDY = ("study: cells\nscenarios: [A]\nconfigs: [fp32_baseline]\nseeds: [0, 1]\nnotebook_seeds: []\n"
         "size: tiny\nsteps: 3\ndevice: cpu\n")


def _plan(tmp_path, text=STUDY):
    path = tmp_path / "cells.yaml"
    path.write_text(text)
    return path, sweep.plan(load_study(path), tmp_path / "executed")


def _finished(item, wall: float, fixed: float = 0.5) -> None:
    """``item``'s record as a cell's process leaves a run it finished (status ok, its sweep timing)."""
    rec = runner.error_record(item.spec, item.out_dir, None)
    rec.update(status="ok", sweep={"wall_s": wall, "fixed_s": fixed, "notebook": False})
    write_json_atomic(item.result, rec)


def test_seeds_outside_notebook_seeds_run_without_a_notebook_and_a_bad_seed_is_named(tmp_path):
    runs = parse_study({"seeds": [0, 1, 2], "notebook_seeds": [0], "scenarios": ["A"], "configs": ["amp_bf16"]}).runs()
    assert [(r.cfg.seed, r.notebook) for r in runs] == [(0, True), (1, False), (2, False)]
    assert all(r.notebook for r in parse_study({"seeds": [0, 1], "scenarios": ["A"], "configs": ["amp_bf16"]}).runs())
    with pytest.raises(ConfigError, match=r"notebook_seeds: seed 5 is not one of the study's seeds \[0, 1\]"):
        parse_study({"seeds": [0, 1], "notebook_seeds": [5]})


def test_a_cells_seeds_form_one_unit_and_notebook_runs_stay_alone(tmp_path):
    text = STUDY.replace("[fp32_baseline]", "[fp32_baseline, amp_bf16]").replace("seeds: [0, 1]", "seeds: [0, 1, 2]")
    _, items = _plan(tmp_path, text.replace("notebook_seeds: []", "notebook_seeds: [0]"))
    units = [[i.run_id for i in u] for u in runner.cells(items)]
    assert units == [["A/fp32_baseline/seed0"], ["A/amp_bf16/seed0"],
                     ["A/fp32_baseline/seed1", "A/fp32_baseline/seed2"], ["A/amp_bf16/seed1", "A/amp_bf16/seed2"]]


def test_the_dry_run_shows_a_papermill_command_only_for_runs_with_a_notebook(tmp_path, capsys):
    path, _ = _plan(tmp_path, STUDY.replace("notebook_seeds: []", "notebook_seeds: [0]"))
    assert host_sweep.main([str(path), "--out", str(tmp_path / "executed"), "--dry_run"]) == 0
    out = capsys.readouterr().out.split("A/fp32_baseline/seed1")
    assert "papermill notebooks/01_train_lm.ipynb" in out[0]
    assert "papermill" not in out[1] and "a cell run without a notebook" in out[1]


def test_a_cell_trains_its_seeds_in_one_process_and_a_rerun_skips_them(tmp_path, capsys):
    path, items = _plan(tmp_path)
    assert host_sweep.main([str(path), "--out", str(tmp_path / "executed"), "--no_html", "--no_analysis"]) == 0
    recs = [read_record(i.result) for i in items]
    assert all(r["status"] in TRAINED for r in recs)  # 3 steps: trained, if not far
    for item, rec in zip(items, recs):
        assert not item.notebook.exists() and steps_file(item.out_dir) is not None
        assert rec["sweep"]["notebook"] is False and rec["sweep"]["fixed_s"] is not None
        assert (item.out_dir / cellrun.RUN_LOG).exists()  # its warnings and tracebacks, in its own log
    # one process: the second seed paid no interpreter start or imports, the first did
    assert recs[1]["metrics"]["time/startup_s"] < 0.5 * recs[0]["metrics"]["time/startup_s"]
    cell_log = (items[0].out_dir / cellrun.CELL_LOG).read_text()
    assert [line.split(":")[0] for line in cell_log.splitlines()] == ["A/fp32_baseline/seed0", "A/fp32_baseline/seed1"]
    capsys.readouterr()
    assert host_sweep.main([str(path), "--out", str(tmp_path / "executed"), "--no_html", "--no_analysis"]) == 0
    assert "done 2, to run 0" in capsys.readouterr().out


def test_a_run_in_error_ends_the_process_and_leaves_the_rest_for_a_new_one(tmp_path):
    _, items = _plan(tmp_path)
    bad = {**runner.run_config(items[0]), "model_name_or_path": str(tmp_path / "no-such-checkpoint")}
    spec = {"runs": [{"run_config": bad, "sweep": {}}, {"run_config": runner.run_config(items[1]), "sweep": {}}]}
    assert cellrun.run_cell(spec) == cellrun.STOP_AFTER_ERROR
    rec = read_record(items[0].result)
    assert rec["status"] == "error" and "no-such-checkpoint" in rec["reason"] and rec["sweep"]["notebook"] is False
    assert not items[1].result.exists()


def test_a_process_that_dies_costs_its_run_an_error_record_and_the_rest_go_on(tmp_path, monkeypatch):
    """The first process writes one record and dies (SIGSEGV); the run it was on gets an error
    record naming that, the one after runs in a second process."""
    path, items = _plan(tmp_path, STUDY.replace("seeds: [0, 1]", "seeds: [0, 1, 2]"))
    calls = []

    def fake(argv, env, log, timeout=None):
        runs = json.loads(open(argv[-1]).read())["runs"]
        calls.append([r["run_config"]["out_dir"] for r in runs])
        for r in runs[:1] if len(calls) == 1 else runs:
            item = next(i for i in items if str(i.out_dir) == r["run_config"]["out_dir"])
            rec = runner.error_record(item.spec, item.out_dir, None)
            rec.update(status="ok", sweep={"wall_s": 1.0, "fixed_s": 0.5, "notebook": False})
            write_json_atomic(item.result, rec)
        return -11 if len(calls) == 1 else 0

    monkeypatch.setattr(cellrun, "execute_argv", fake)
    out = cellrun.execute_cell(items, {})
    assert [(i.run_id, r["status"]) for i, r in out] == [
        ("A/fp32_baseline/seed0", "ok"), ("A/fp32_baseline/seed1", "error"), ("A/fp32_baseline/seed2", "ok")]
    assert line_with(out[1][1]["reason"], "killed", "SIGSEGV")  # the crash, by its signal, on the run it stopped
    assert calls[1] == [str(items[2].out_dir)]  # the second process ran only what was left
    assert read_record(items[1].result)["status"] == "error"


def test_after_a_run_in_error_the_next_ones_start_in_a_new_process_unharmed(tmp_path, monkeypatch):
    _, items = _plan(tmp_path, STUDY.replace("seeds: [0, 1]", "seeds: [0, 1, 2]"))
    calls = []

    def fake(argv, env, log, timeout=None):  # cellrun's behaviour: the first run fails, the process stops
        runs = json.loads(open(argv[-1]).read())["runs"]
        calls.append(len(runs))
        for k, r in enumerate(runs):
            item = next(i for i in items if str(i.out_dir) == r["run_config"]["out_dir"])
            rec = runner.error_record(item.spec, item.out_dir, "CUDA error" if len(calls) == 1 else None)
            rec.update(status="error" if len(calls) == 1 else "ok", sweep={"wall_s": 1.0, "fixed_s": None})
            write_json_atomic(item.result, rec)
            if len(calls) == 1:
                return cellrun.STOP_AFTER_ERROR
        return 0

    monkeypatch.setattr(cellrun, "execute_argv", fake)
    out = cellrun.execute_cell(items, {})
    assert [r["status"] for _, r in out] == ["error", "ok", "ok"] and calls == [3, 2]
    assert out[0][1]["reason"] == "CUDA error"  # its own reason, not the process's


def test_a_budget_admits_a_cell_whose_first_run_fits_and_its_process_decides_the_rest(tmp_path):
    _, items = _plan(tmp_path, STUDY.replace("seeds: [0, 1]", "seeds: [0, 1, 2]"))
    unit = list(items)
    # one run's first estimate fits, three do not: the cell starts whole, its process stops in time
    b = budget.Budget(1.5 * budget.DEFAULT_RUN_S)
    assert b.admit(unit) and unit == items and b.deferred == []
    unit = list(items)
    b = budget.Budget(0.5 * budget.DEFAULT_RUN_S)  # not even the first
    assert not b.admit(unit) and unit == [] and b.deferred == items
    nb = [i for i in sweep.plan(load_study(_plan(tmp_path, STUDY.replace("notebook_seeds: []", "notebook_seeds: [0]"))[0]),
                               tmp_path / "executed") if i.in_notebook]
    unit = nb[:1]  # a run with a notebook is a unit of its own, admitted by its estimate as before
    assert budget.Budget(1.5 * budget.DEFAULT_RUN_S).admit(unit) and not budget.Budget(10.0).admit(nb[:1])


def test_a_cells_process_starts_no_run_the_deadline_would_cut(tmp_path):
    import time
    _, items = _plan(tmp_path)
    spec = lambda deadline: {"runs": [{"run_config": runner.run_config(i), "sweep": {}} for i in items],  # noqa: E731
                             "deadline": deadline}
    # the first run starts whatever the time (the budget admitted it); the second would need the
    # first's wall x 1.1 + 10 s, more than the 5 s left
    assert cellrun.run_cell(spec(time.time() + 5.0)) == cellrun.STOP_FOR_DEADLINE
    assert read_record(items[0].result)["status"] in TRAINED and not items[1].result.exists()
    for i in items:
        runner.clear(i.out_dir)
    assert cellrun.run_cell(spec(time.time() + 3600.0)) == 0  # an hour: both
    assert all(read_record(i.result)["status"] in TRAINED for i in items)


def test_runs_a_cell_left_for_want_of_time_get_no_record_and_wait_for_the_next_call(tmp_path, monkeypatch):
    _, items = _plan(tmp_path, STUDY.replace("seeds: [0, 1]", "seeds: [0, 1, 2]"))
    calls, seen = [], {}

    def fake(argv, env, log, timeout=None):  # cellrun's behaviour: one run, then no time for the next
        spec = json.loads(open(argv[-1]).read())
        calls.append(len(spec["runs"]))
        seen["deadline"] = spec["deadline"]
        _finished(next(i for i in items if str(i.out_dir) == spec["runs"][0]["run_config"]["out_dir"]), 1.0)
        return cellrun.STOP_FOR_DEADLINE

    monkeypatch.setattr(cellrun, "execute_argv", fake)
    monkeypatch.setattr(host_sweep, "execute_cell", cellrun.execute_cell)
    ns = host_sweep.build_parser().parse_args([str(tmp_path / "cells.yaml"), "--time_budget", "600"])
    host = host_sweep.GpuHost(ns)
    out = host.run_cell(items, {})
    assert [(i.run_id, r["status"]) for i, r in out] == [("A/fp32_baseline/seed0", "ok")] and calls == [3]
    assert 0 < seen["deadline"] - __import__("time").time() <= 600  # the budget's end, for the process to read
    assert not items[1].result.exists() and not items[2].result.exists()  # no error record: not run
    host.budget.defer_unrun(items)
    assert host.budget.deferred == items[1:] and host.budget.left_line(3).startswith("time budget: 2 of 3 runs left")


def test_an_estimate_prefers_finished_runs_of_its_own_config(tmp_path):
    text = STUDY.replace("[fp32_baseline]", "[fp32_baseline, amp_bf16]")
    _, items = _plan(tmp_path, text)
    fp32, bf16 = (next(i for i in items if i.spec.cfg.config == c and i.spec.cfg.seed == 0)
                  for c in ("fp32_baseline", "amp_bf16"))
    for item, wall in ((fp32, 400.0), (bf16, 200.0)):
        rec = runner.error_record(item.spec, item.out_dir, None)
        rec.update(status="ok", sweep={"wall_s": wall, "fixed_s": 50.0})
        write_json_atomic(item.result, rec)
    b = budget.Budget(1000)
    b.learn(items)
    bf16_seed1 = next(i for i in items if i.spec.cfg.config == "amp_bf16" and i.spec.cfg.seed == 1)
    assert b.estimate(bf16_seed1) == pytest.approx(1.1 * 200 + 10)  # not fp32's 400 s


@pytest.mark.slow
def test_cell_runs_and_their_summary_need_no_notebook_stack(tmp_path):
    # a GPU host with torch alone (no papermill, nbformat, Altair, datasets) runs a cell-run study
    import os
    import subprocess
    import sys
    from conftest import REPO
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in ("papermill", "nbformat", "nbclient", "jupyter_client", "ipykernel", "altair", "datasets"):
        (blocked / f"{name}.py").write_text(f"raise ImportError('{name} is not installed here')\n")
    path, _ = _plan(tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocked), str(REPO)]))
    done = subprocess.run([sys.executable, "-m", "dtype_bench", "sweep", str(path), "--out", str(tmp_path / "executed"),
                           "--no_analysis", "--no_html"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [read_record(tmp_path / f"executed/cells/runs/A/fp32_baseline/seed{k}/result.json") for k in (0, 1)]
    assert [r["status"] in TRAINED for r in records] == [True, True]
    assert "scenario A:" in done.stdout  # the summary table, without Altair


def test_a_cell_run_gets_a_rendered_notebook_from_its_record_without_training_again(tmp_path):
    """``compact --replay``: each (scenario, config) whose runs trained without a notebook gets one,
    executed in replay mode: it shows the run's own record (status, curves) and trains nothing, the
    record left as it was; a cell that has a notebook gets none; a compacted study replays from its
    tables."""
    from dtype_bench.study import compact, replay
    path, items = _plan(tmp_path, STUDY.replace("seeds: [0, 1]", "seeds: [0, 1]\nconfig_seeds: {amp_bf16: [0]}")
                        .replace("[fp32_baseline]", "[fp32_baseline, amp_bf16]"))
    root = tmp_path / "executed"
    assert host_sweep.main([str(path), "--out", str(root), "--no_html", "--no_analysis"]) == 0
    study = root / "cells"
    before = {i.run_id: i.result.read_bytes() for i in items if i.result.exists()}
    assert [r["run_id"] for r in replay.missing(study)] == ["A/amp_bf16/seed0", "A/fp32_baseline/seed0"]
    compact.compact(study, root)  # the records and steps now in tables: the replay reads them there
    assert compact.main([str(study), "--root", str(root), "--replay"]) == 0
    nb = json.loads((study / "runs" / "A" / "fp32_baseline" / "seed0.ipynb").read_text())
    shown = "".join(o.get("text", "") if isinstance(o.get("text"), str) else "".join(o.get("text", []))
                    for c in nb["cells"] for o in c.get("outputs", []))
    assert "replayed, not trained here" in shown and "in a cell process without a notebook" in shown
    assert (study / "runs" / "A" / "amp_bf16" / "seed0.ipynb").exists() and replay.missing(study) == []
    assert compact.main([str(study), "--root", str(root), "--replay"]) == 0  # nothing left to render
    from benchlib.core.records import load_records
    now = {r["run_id"]: r for r in load_records(study)}
    assert set(now) == set(before) and all(now[k]["status"] == json.loads(v)["status"] for k, v in before.items())
    assert not any((study / "runs" / "A" / c / "seed0" / "result.json").exists() for c in ("fp32_baseline", "amp_bf16"))


def test_a_rerun_of_a_compacted_studys_cell_cut_by_the_deadline_is_deferred_not_read_as_done(tmp_path, monkeypatch):
    """--force_before on a committed (compacted) study: the cell's process trains seed 0, then the
    deadline leaves seed 1 unstarted. Seed 1's old record in the study's table must not pass for a
    run this process made (there is no file to read): it waits for the next call."""
    from dtype_bench.study import compact
    path, items = _plan(tmp_path)
    root = tmp_path / "executed"
    for item in items:
        _finished(item, 1.0)
    compact.compact(root / "cells", root)
    items = sweep.plan(load_study(path), root, runner.stored_records(root / "cells"))
    assert all(i.stored is not None and not i.result.exists() for i in items)

    def fake(argv, env, log, timeout=None):  # seed 0 trained again, then no time for seed 1
        _finished(items[0], 2.0)
        return cellrun.STOP_FOR_DEADLINE

    monkeypatch.setattr(cellrun, "execute_argv", fake)
    monkeypatch.setattr(host_sweep, "execute_cell", cellrun.execute_cell)
    host = host_sweep.GpuHost(host_sweep.build_parser().parse_args([str(path), "--time_budget", "600"]))
    out = host.run_cell(items, {})
    assert [(i.run_id, r["sweep"]["wall_s"]) for i, r in out] == [("A/fp32_baseline/seed0", 2.0)]
    host.budget.defer_unrun(items)
    assert host.budget.deferred == items[1:]
