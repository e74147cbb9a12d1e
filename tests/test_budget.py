"""``dtype-bench sweep --time_budget``: a study done in chunks on a host whose jobs have a hard
time limit. Runs are faked (conftest's fake papermill) on a fake clock: each takes 100 s."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO, fake_papermill, line_with

from benchlib.core.errors import UserError
from benchlib.core.records import read_record, write_json_atomic
from benchlib.core.runconfig import ConfigError
from dtype_bench.host import budget, slots
from dtype_bench.host import sweep as host_sweep
from dtype_bench.study import runner, sweep
from benchlib.study.studyfile import load_study
from benchlib.training import resume

STUDY = "study: chunks\nscenarios: [A]\nconfigs: [fp32_baseline, amp_bf16]\nseeds: [0, 1]\nsize: tiny\nsteps: 10\ndevice: cpu\n"


@pytest.fixture
def chunked(tmp_path, monkeypatch):
    """A four-run study, papermill faked, every run 100 s on a clock the budget reads."""
    path, root = tmp_path / "chunks.yaml", tmp_path / "executed"
    path.write_text(STUDY)
    clock, calls = [0.0], []
    fake = fake_papermill(path, root, {}, calls, [0])

    def execute(cmd, env, log, timeout=None):
        clock[0] += 100.0
        return fake(cmd, env, log, timeout)

    monkeypatch.setattr(runner, "execute", execute)
    monkeypatch.setattr(budget, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    monkeypatch.setattr(runner, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    return SimpleNamespace(path=path, root=root, calls=calls, clock=clock,
                           argv=[str(path), "--out", str(root), "--no_html"])


@pytest.mark.parametrize("text, seconds", [("540", 540), ("540s", 540), ("9m", 540), ("1.5h", 5400), (" 90 S ", 90)])
def test_durations_read_with_or_without_a_unit(text, seconds):
    assert budget.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["9x", "-3", "0", "m", "1,5h", ""])
def test_a_bad_duration_is_one_line_naming_the_flag(text):
    with pytest.raises(UserError, match="--time_budget") as e:
        budget.parse_duration(text)
    assert "\n" not in str(e.value)


def test_a_bad_duration_on_the_command_line_fails_before_anything_runs(chunked, capsys):
    with pytest.raises(SystemExit) as e:
        host_sweep.main(chunked.argv + ["--time_budget", "9x"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert line_with(err, "--time_budget", "'9x'") and err.count("\n") == 1  # one line naming the flag and value
    assert chunked.calls == []


def test_a_budget_too_small_starts_nothing_and_exits_0_saying_so(chunked, capsys, monkeypatch):
    monkeypatch.setattr(sweep, "run_analysis", lambda *a, **k: pytest.fail("the analysis ran with runs left"))
    assert host_sweep.main(chunked.argv + ["--time_budget", "60"]) == 0  # the first run's estimate: 120 s
    out = capsys.readouterr().out
    assert chunked.calls == []
    assert line_with(out.splitlines()[-1], "time budget", "4 of 4", "same command")  # nothing ran; how to resume
    assert not (chunked.root / "chunks" / "runs").exists()


def test_a_budget_that_fits_two_of_four_runs_starts_two_in_the_study_order(chunked, capsys, monkeypatch):
    monkeypatch.setattr(sweep, "run_analysis", lambda *a, **k: pytest.fail("the analysis ran with runs left"))
    # run 1: estimate 120 s (nothing finished yet), 250 s left; run 2: estimate 1.1 x 100 + 10 = 120 s,
    # 150 s left; run 3: 50 s left
    assert host_sweep.main(chunked.argv + ["--time_budget", "250s"]) == 0
    out = capsys.readouterr().out
    assert chunked.calls == ["A/fp32_baseline/seed0", "A/amp_bf16/seed0"]  # seed-major: all of seed 0 first
    assert line_with(out, "time budget", "2 of 4", "same command")  # what is left, and how to resume
    assert line_with(out, "analysis", "HTML", "last run")  # why no analysis ran
    # the same command again resumes: the next two, estimated from the records now there
    chunked.calls.clear()
    analysed = []
    monkeypatch.setattr(sweep, "run_analysis", lambda study_dir, slot, analyses=():  analysed.append(study_dir) or ([], []))
    assert host_sweep.main(chunked.argv + ["--time_budget", "1h"]) == 0
    out = capsys.readouterr().out
    assert chunked.calls == ["A/fp32_baseline/seed1", "A/amp_bf16/seed1"]
    assert "time budget:" not in out and analysed == [chunked.root / "chunks"]


def test_the_analysis_waits_when_the_time_left_cannot_cover_it(chunked, capsys, monkeypatch):
    monkeypatch.setattr(sweep, "run_analysis", lambda *a, **k: pytest.fail("the analysis ran without the time for it"))
    assert host_sweep.main(chunked.argv + ["--time_budget", "500"]) == 0  # 4 x 100 s, 100 s left < AFTER_RUNS_S
    out = capsys.readouterr().out
    assert len(chunked.calls) == 4
    assert (f"time budget: 100 s left, the analysis notebooks and the HTML export need up to "
            f"{budget.AFTER_RUNS_S:.0f} s: run the same command with --analysis_only") in out


def test_a_run_is_estimated_from_finished_runs_of_its_kind_scaled_to_its_steps(tmp_path):
    items = sweep.plan(load_study(_write(tmp_path, STUDY.replace("[A]", "[A, B]"))), tmp_path / "executed")
    a0, b0 = items[0], next(i for i in items if i.spec.cfg.scenario == "B")
    b = budget.Budget(600)
    b.learn(items)
    assert b.estimate(a0) == budget.DEFAULT_RUN_S  # nothing finished
    rec = runner.error_record(a0.spec, a0.out_dir, None)
    rec.update(status="ok", run={**rec["run"], "steps": 5}, sweep={"wall_s": 50.0, "fixed_s": 20.0})
    write_json_atomic(a0.result, rec)
    b = budget.Budget(600)
    b.learn(items)
    # 20 s fixed + 30 s for 5 steps -> 60 s for this run's 10; x 1.1 + 10 s
    assert b.estimate(items[1]) == pytest.approx(1.1 * (20 + 60) + 10)
    # another scenario: 1.5 x the costliest finished run, scaled to its steps, if above the default
    assert b.estimate(b0) == pytest.approx(max(budget.DEFAULT_RUN_S, budget.UNSEEN_FACTOR * (20 + 3 * b0.spec.cfg.steps)))
    rec.update(sweep={"wall_s": 500.0, "fixed_s": 20.0})
    write_json_atomic(a0.result, rec)
    b = budget.Budget(600)
    b.learn(items)
    assert b.estimate(b0) == pytest.approx(budget.UNSEEN_FACTOR * (20 + 96 * b0.spec.cfg.steps))


def test_a_pretrain_with_no_record_is_costed_as_its_scenarios_runs_per_step(tmp_path):
    """A pretrain no call has made is estimated from its scenario's finished runs of the other stage,
    scaled to its steps (it was 1.5 x the costliest run of any config: 1,442 s for a pretrain that
    takes about 250 s, so a 540-s call never started it)."""
    text = STUDY + "pretrain:\n  gpt2: {config: amp_bf16, steps: 20}\n"
    items = sweep.plan(load_study(_write(tmp_path, text)), tmp_path / "executed")
    pre = next(i for i in items if i.stage == "pretrain")
    a0 = next(i for i in items if i.stage != "pretrain" and i.spec.cfg.dtype.name == "amp_bf16")
    rec = runner.error_record(a0.spec, a0.out_dir, None)
    rec.update(status="ok", run={**rec["run"], "steps": 10}, sweep={"wall_s": 50.0, "fixed_s": 20.0})
    write_json_atomic(a0.result, rec)
    b = budget.Budget(600)
    b.learn(items)
    assert b.estimate(pre) == pytest.approx(1.1 * (20 + 3 * 20) + 10)  # 3 s a step, 20 steps


def test_a_run_cut_off_with_its_state_saved_is_costed_by_the_steps_it_has_left(tmp_path):
    """The deadline cut a 10-step run off after step 4 with its state saved: the next call costs it
    at its fixed cost plus 5 steps, so it starts where a whole run would not fit. A state saved by
    another run (or one of other length) is not its: the run is costed whole."""
    items = sweep.plan(load_study(_write(tmp_path, STUDY + "state_every: 5\n")), tmp_path / "executed")
    a0, a1 = items[0], items[1]
    rec = runner.error_record(a0.spec, a0.out_dir, None)
    rec.update(status="ok", run={**rec["run"], "steps": 10}, sweep={"wall_s": 80.0, "fixed_s": 20.0})
    write_json_atomic(a0.result, rec)
    whole = 1.1 * (20 + 60) + 10
    (a1.out_dir / resume.STATE_FILE).parent.mkdir(parents=True, exist_ok=True)
    (a1.out_dir / resume.STATE_FILE).write_bytes(b"state")
    for run_id, want in ((a1.spec.cfg.run_id, 1.1 * (20 + 30) + 10), (a0.spec.cfg.run_id, whole)):
        write_json_atomic(a1.out_dir / resume.STEP_FILE, {"step": 4, "steps": 10, "run_id": run_id})
        b = budget.Budget(80)
        b.learn(items)
        assert b.estimate(a1) == pytest.approx(want)
        # its own state: it fits whole; another's: too long for any 80-s call, it starts to its first save
        assert b.first_part(a1) == (None if want <= 80 else pytest.approx(1.1 * (20 + 30) + 10))
        assert b.admit([a1])


def test_side_by_side_slots_start_only_what_fits(chunked):
    seen = []
    admit = lambda i: i < 3  # noqa: E731
    slots.run_all(list(range(6)), slots.slots_for(2, ["0", "1"]), lambda i, s: i, admit=admit,
                  on_done=lambda i, r: seen.append(i))
    assert sorted(seen) == [0, 1, 2]


def test_a_run_that_waits_for_a_deferred_pretrain_is_deferred_with_it(tmp_path):
    text = STUDY.replace("[A]", "[A, C]") + "pretrain:\n  gpt2: {config: amp_bf16, steps: 5}\n" \
                                            "overrides:\n  cls: {model_name_or_path: pretrained}\n"
    items = sweep.plan(load_study(_write(tmp_path, text)), tmp_path / "executed")
    pre, a0 = items[0], items[1]
    c0 = next(i for i in items if i.needs is pre)
    b = budget.Budget(60)  # less than a first run's estimate
    assert not b.admit([pre])
    b.seconds = 1e6
    assert b.admit([a0])
    assert not b.admit([c0])  # it would write a "waiting" record: left for the call that pretrains
    assert [i.run_id for i in b.deferred] == ["pretrain/gpt2", c0.run_id]


def test_a_run_killed_mid_way_leaves_no_record_that_looks_finished(tmp_path):
    """The host's hard limit kills the sweep (SIGKILL, no clean-up) after training wrote the
    run's record: the record has no sweep entry, so the next sweep runs it again."""
    path, root = _write(tmp_path, STUDY), tmp_path / "executed"
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from benchlib.core.records import write_json_atomic
        from dtype_bench.study import runner, sweep
        from benchlib.study.studyfile import load_study
        items = {{i.out_dir.resolve(): i for i in runner.plan(load_study({str(path)!r}), Path({str(root)!r}))}}
        def execute(cmd, env, log, timeout=None):  # training finished and wrote its record; a later cell runs
            out = Path(runner.injected(cmd)["out_dir"]).resolve()
            write_json_atomic(out / "result.json", {{**runner.error_record(items[out].spec, out, None), "status": "ok"}})
            time.sleep(600)
        runner.execute = execute
        sweep.main([{str(path)!r}, "--out", {str(root)!r}, "--no_html", "--no_analysis"])
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    first = root / "chunks/runs/A/fp32_baseline/seed0/result.json"
    try:
        deadline = time.monotonic() + 120
        while not first.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert first.exists(), "the run never wrote its record"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert read_record(first)["status"] == "ok"  # what training wrote ...
    item = sweep.plan(load_study(path), root)[0]
    assert sweep.run_state(item)[0] == "unfinished"  # ... is not taken for finished
    assert item.todo


def _write(tmp_path, text, name="chunks.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_runs_still_going_when_the_budget_is_spent_are_interrupted_and_run_again(tmp_path, monkeypatch, capsys):
    """An estimate too short must not carry the job past its limit: at the end of the budget the
    running notebook gets Ctrl-C, leaves no finished record, and the sweep exits 0 in time."""
    import threading
    path, root = tmp_path / "chunks.yaml", tmp_path / "executed"
    path.write_text(STUDY)
    calls = []
    fake = fake_papermill(path, root, {}, calls, [0])

    class Proc:  # what runner.execute registers for the deadline to interrupt
        def __init__(self):
            self.got = threading.Event()

        def send_signal(self, sig):
            assert sig == signal.SIGINT
            self.got.set()

    def execute(cmd, env, log, timeout=None):
        if calls:  # the second run hangs until interrupted
            proc = Proc()
            runner.RUNNING.add(proc)
            calls.append("hung")
            assert proc.got.wait(20), "the deadline never interrupted the run"
            runner.RUNNING.discard(proc)
            return -signal.SIGINT
        return fake(cmd, env, log, timeout)

    monkeypatch.setattr(runner, "execute", execute)
    monkeypatch.setattr(budget.Budget, "estimate", lambda self, item: 0.0)  # every run looks short
    assert host_sweep.main([str(path), "--out", str(root), "--no_html", "--time_budget", "1.5"]) == 0
    out = capsys.readouterr().out
    assert calls == ["A/fp32_baseline/seed0", "hung"]
    assert line_with(out, "time budget", "stopped", "same command")
    assert line_with(out, "time budget", "3 of 4", "same command")
    done = [p.parent.name for p in (root / "chunks" / "runs").rglob("result.json")
            if read_record(p)["status"] == "ok" and "sweep" in read_record(p)]
    assert done == ["seed0"]  # only the run that finished: the interrupted one runs again
    assert runner.run_state(sweep.plan(load_study(path), root)[1])[0] != "done:ok"


def test_a_run_the_deadline_interrupts_counts_as_interrupted_whatever_its_exit_code(tmp_path):
    """papermill answers its kernel's Ctrl-C with exit 1 ("Aborted!"), not the signal: still an
    interruption (run again next time), not a failed run."""
    child = "import signal, sys, time; signal.signal(signal.SIGINT, lambda *a: sys.exit(1)); time.sleep(30)"
    b = budget.Budget(0.5)
    timer = b.watch(runner.RUNNING)
    # the child sleeps 30 s and exits 0 unless Ctrl-C reaches it: -SIGINT says the deadline stopped it
    assert runner.execute_argv([sys.executable, "-c", child], dict(os.environ), tmp_path / "a.log") == -signal.SIGINT
    assert b.expired
    timer.cancel()
    # the same exit without the deadline is a failure
    assert runner.execute_argv([sys.executable, "-c", "import sys; sys.exit(1)"], dict(os.environ), tmp_path / "b.log") == 1


def test_a_config_unseen_in_its_scenario_costs_what_it_cost_relative_to_others_elsewhere(tmp_path):
    """fp32_baseline took 5x amp_bf16 on A: on B, where only amp_bf16 finished, fp32_baseline is
    estimated at 5x B's amp_bf16 run, not at the AMP run's cost."""
    items = sweep.plan(load_study(_write(tmp_path, STUDY.replace("[A]", "[A, B]"))), tmp_path / "executed")
    at = {(i.spec.cfg.scenario, i.spec.cfg.config): i for i in items if i.spec.cfg.seed == 0}
    for key, wall in ((("A", "fp32_baseline"), 500.0), (("A", "amp_bf16"), 100.0), (("B", "amp_bf16"), 100.0)):
        rec = runner.error_record(at[key].spec, at[key].out_dir, None)
        rec.update(status="ok", sweep={"wall_s": wall})
        write_json_atomic(at[key].result, rec)
    b = budget.Budget(600)
    b.learn(items)
    assert b.estimate(at["B", "fp32_baseline"]) == pytest.approx(1.1 * 500 + 10)
    assert b.estimate(at["B", "amp_bf16"]) == pytest.approx(1.1 * 100 + 10)
    tight = budget.Budget(500)  # fits B's amp_bf16 run (120 s) several times, not B's fp32 run (560 s)
    tight.learn(items)
    assert tight.admit([at["B", "amp_bf16"]]) and not tight.admit([at["B", "fp32_baseline"]])


def test_a_scenario_nothing_has_finished_of_is_estimated_from_its_sibling_not_the_costliest_run(tmp_path):
    """F (RoBERTa, single-label) is costed like D (RoBERTa, multi-label), not like B's long MLM
    runs: estimated from the costliest run of any kind, F's fine-tunes never fit a 500-s budget."""
    items = sweep.plan(load_study(_write(tmp_path, STUDY.replace("[A]", "[A, B, D, F]"))), tmp_path / "executed")
    first = {s: next(i for i in items if i.spec.cfg.scenario == s and i.spec.cfg.config == "amp_bf16")
             for s in "ABDF"}
    for s, wall in (("A", 900.0), ("B", 700.0), ("D", 100.0)):
        rec = runner.error_record(first[s].spec, first[s].out_dir, None)
        rec.update(status="ok", sweep={"wall_s": wall, "fixed_s": 40.0})
        write_json_atomic(first[s].result, rec)
    b = budget.Budget(600)
    b.learn(items)
    f = first["F"]
    assert b.estimate(f) == pytest.approx(max(budget.DEFAULT_RUN_S, budget.UNSEEN_FACTOR * 100.0))
    assert b.admit([f])  # fits a 600-s budget; from A's 900 s it would not
    # with no sibling finished (a study of A and F only), the costliest run of any kind
    write_json_atomic(first["D"].result, {"status": "error"})
    b = budget.Budget(600)
    b.learn(items)
    assert b.estimate(f) == pytest.approx(budget.UNSEEN_FACTOR * 900.0)


def test_pack_to_keeps_an_archive_of_the_finished_runs_while_the_sweep_goes(chunked, monkeypatch, capsys):
    """A job killed at its hard limit returns only its output folder: the archive there holds
    each run finished so far (rewritten while the next runs), and every run at the end."""
    import tarfile
    monkeypatch.chdir(chunked.root.parent)  # not a git work tree: files newer than the sweep's start
    archive = chunked.root.parent / "out" / "chunk.tgz"
    archive.parent.mkdir()
    seen_during = []
    execute = runner.execute

    def slow_second(cmd, env, log, timeout=None):
        if len(chunked.calls) == 1:  # the second run starts: wait (real time) for the packer
            for _ in range(3000):  # up to a minute; it leaves as soon as the packer wrote
                if archive.exists():
                    with tarfile.open(archive) as tar:
                        seen_during[:] = [n for n in tar.getnames() if n.endswith("result.json")]
                    if seen_during:
                        break
                time.sleep(0.02)
        return execute(cmd, env, log, timeout)

    monkeypatch.setattr(runner, "execute", slow_second)
    monkeypatch.setattr(sweep, "run_analysis", lambda *a, **k: ([], []))
    monkeypatch.setattr(host_sweep, "PACK_EVERY_S", 0.05)
    assert host_sweep.main(chunked.argv + ["--time_budget", "250s", "--pack_to", str(archive)]) == 0
    assert seen_during == ["executed/chunks/runs/A/fp32_baseline/seed0/result.json"]
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert {n for n in names if n.endswith("result.json")} == {
        "executed/chunks/runs/A/fp32_baseline/seed0/result.json", "executed/chunks/runs/A/amp_bf16/seed0/result.json"}
    assert not list(archive.parent.glob("*.partial"))
    assert f"--pack_to: packed {len(names)} files (" in capsys.readouterr().out


def test_pack_to_is_refused_for_a_scheduler(chunked):
    with pytest.raises(ConfigError, match="^--pack_to is for runs executed here"):
        host_sweep.main(chunked.argv + ["--pack_to", "x.tgz", "--executor", "slurm"])


def test_a_run_is_costed_from_runs_that_shared_the_gpu_as_it_will(tmp_path):
    """fp32 at base took 512 s beside another run and 381 s alone (H100): a sweep of one run a GPU
    costs it from the run alone, one of two a GPU from the shared run; with only one kind, from it."""
    items = sweep.plan(load_study(_write(tmp_path, STUDY)), tmp_path / "executed")
    fp32 = [i for i in items if i.spec.cfg.config == "fp32_baseline"]
    shared = runner.error_record(fp32[0].spec, fp32[0].out_dir, None)
    shared.update(status="ok", sweep={"wall_s": 512.0, "runs_per_gpu": 2})
    write_json_atomic(fp32[0].result, shared)
    alone, two = budget.Budget(555, runs_per_gpu=1), budget.Budget(555, runs_per_gpu=2)
    alone.learn(items)
    assert alone.estimate(fp32[1]) == pytest.approx(1.1 * 512 + 10)  # nothing ran alone yet: the shared run
    solo = runner.error_record(fp32[1].spec, fp32[1].out_dir, None)
    solo.update(status="ok", sweep={"wall_s": 381.0})
    write_json_atomic(fp32[1].result, solo)
    alone, two = budget.Budget(555, runs_per_gpu=1), budget.Budget(555, runs_per_gpu=2)
    alone.learn(items)
    two.learn(items)
    assert alone.estimate(fp32[1]) == pytest.approx(1.1 * 381 + 10) and alone.admit([fp32[1]])
    assert two.estimate(fp32[1]) == pytest.approx(1.1 * 512 + 10) and not two.admit([fp32[1]])


def test_costs_from_another_study_prices_runs_this_study_has_no_record_of(tmp_path, capsys):
    """A study repeating another's recipe: its first call costs fp32_baseline by the other study's
    fp32 run (1.1 x its cost + 10 s), not at the default for a run of a kind nothing finished of;
    records of another scenario or size are not taken."""
    items = sweep.plan(load_study(_write(tmp_path, STUDY)), tmp_path / "executed")
    other = sweep.plan(load_study(_write(tmp_path, STUDY.replace("[A]", "[A, B]"), "other.yaml")), tmp_path / "old")
    for item in other:
        rec = runner.error_record(item.spec, item.out_dir, None)
        rec.update(status="ok", sweep={"wall_s": 300.0 if item.spec.cfg.scenario == "A" else 900.0})
        write_json_atomic(item.result, rec)
    fresh = budget.Budget(600)
    fresh.learn(items)
    assert fresh.estimate(items[0]) == budget.DEFAULT_RUN_S
    from benchlib.core.records import load_records
    b = budget.Budget(600)
    b.learn(items)
    assert b.learn_from(load_records(tmp_path / "old"), items) > 0
    assert b.estimate(items[0]) == pytest.approx(1.1 * 300 + 10)
    with pytest.raises(SystemExit):
        host_sweep.build_parser().parse_args([str(tmp_path / "chunks.yaml"), "--costs_from", str(tmp_path / "nowhere")])
    assert "--costs_from" in capsys.readouterr().err


def test_a_run_longer_than_any_call_starts_when_its_next_save_fits_and_one_that_fits_a_call_waits(tmp_path):
    """A 6,000-step horizon run in a 540-s call: with its state saved every state_every steps it
    starts where the steps to its next save fit, and the next call on the host resumes it; without
    state_every it never starts. A run a fresh call could finish whole waits for that call."""
    def plan(extra):
        items = sweep.plan(load_study(_write(tmp_path, STUDY + extra)), tmp_path / ("saves" if extra else "plain"))
        a0 = items[0]
        rec = runner.error_record(a0.spec, a0.out_dir, None)
        rec.update(status="ok", run={**rec["run"], "steps": 10}, sweep={"wall_s": 80.0, "fixed_s": 20.0})
        write_json_atomic(a0.result, rec)
        return items
    items = plan("state_every: 5\n")
    whole, part = 1.1 * (20 + 60) + 10, 1.1 * (20 + 30) + 10  # 10 steps; 5 steps to the first save
    b = budget.Budget(70)
    b.learn(items)
    assert b.estimate(items[1]) == pytest.approx(whole) and b.first_part(items[1]) == pytest.approx(part)
    assert b.admit([items[1]])
    assert "no call of this budget starts it" not in b.left_line(4)
    b = budget.Budget(120, start=-50.0)  # a fresh call fits it whole; this one has 70 s left
    b.learn(items)
    assert b.first_part(items[1]) is None and not b.admit([items[1]])
    plain = plan("")
    b = budget.Budget(70)
    b.learn(plain)
    assert b.first_part(plain[1]) is None and not b.admit([plain[1]])
    assert "no call of this budget starts it" in b.left_line(4)


def test_a_last_call_whose_folder_alone_comes_back_starts_no_run_toward_a_save_no_call_will_resume(tmp_path):
    """A lent host's last call (--pack_to, no --carry_over): its saved states go with the host, so a
    run longer than any call waits instead of running toward its first save (the 2026-11-30 B call
    lost a run so); told it, the line names --carry_over. With --carry_over it starts as before."""
    items = sweep.plan(load_study(_write(tmp_path, STUDY + "state_every: 5\n")), tmp_path / "lent")
    rec = runner.error_record(items[0].spec, items[0].out_dir, None)
    rec.update(status="ok", run={**rec["run"], "steps": 10}, sweep={"wall_s": 80.0, "fixed_s": 20.0})
    write_json_atomic(items[0].result, rec)
    last = budget.Budget(70, keeps_state=False)
    last.learn(items)
    assert last.first_part(items[1]) is None and not last.admit([items[1]])
    assert "--carry_over" in last.left_line(4)
    more = budget.Budget(70, keeps_state=False, carry_over=True)
    more.learn(items)
    assert more.first_part(items[1]) is not None and more.admit([items[1]])
    assert host_sweep.GpuHost(host_sweep.build_parser().parse_args(
        [str(tmp_path / "chunks.yaml"), "--time_budget", "70", "--pack_to", str(tmp_path / "x.tgz")])).budget.keeps_state is False


def test_with_another_call_to_follow_a_run_that_saves_its_state_starts_though_it_cannot_finish(tmp_path):
    """``--carry_over``: a 230-s run (20 s of it fixed) with 120 s left starts where it saves its
    state, for the deadline's save keeps its steps. With 100 s left (less
    than its fixed cost, the save's lead and a minute of steps), without the flag, or without
    state_every, it waits for the next call as before."""
    def plan(extra, name):
        items = sweep.plan(load_study(_write(tmp_path, STUDY + extra, name + ".yaml")), tmp_path / name)
        rec = runner.error_record(items[0].spec, items[0].out_dir, None)
        rec.update(status="ok", run={**rec["run"], "steps": 10}, sweep={"wall_s": 200.0, "fixed_s": 20.0})
        write_json_atomic(items[0].result, rec)
        return items

    def admitted(items, left, carry_over=True):
        b = budget.Budget(400, carry_over=carry_over, start=time.monotonic() - (400 - left))
        b.learn(items)
        return b.admit([items[1]]), b

    saves, plain = plan("state_every: 5\n", "saves"), plan("", "plain")
    carried = 1.1 * 20 + 10 + budget.STATE_LEAD_S + budget.CARRY_MIN_S
    assert 100 < carried <= 120
    ok, b = admitted(saves, 120)
    assert ok and b.carried_part(saves[1]) == pytest.approx(carried)
    assert not budget.Budget(400, start=time.monotonic() - 280).admit([saves[1]])  # no flag: waits
    assert not budget.Budget(400, carry_over=True, start=time.monotonic() - 300).admit([saves[1]])  # 100 s left
    b = budget.Budget(400, carry_over=True, start=time.monotonic() - 280)
    b.learn(plain)
    assert b.carried_part(plain[1]) is None and not b.admit([plain[1]])
    with pytest.raises(SystemExit):
        host_sweep.main([str(tmp_path / "saves.yaml"), "--carry_over"])


def test_a_run_that_finished_in_a_unit_the_deadline_then_cut_still_counts_in_the_calls_efficiency(tmp_path):
    """A cell's first seed finished, its second was cut: the unit never returned, so the first's
    timing is taken from its record, if it was written during this sweep and not counted yet."""
    items = sweep.plan(load_study(_write(tmp_path, STUDY)), tmp_path / "executed")
    since = time.time() - 1
    rec = runner.error_record(items[0].spec, items[0].out_dir, None)
    rec.update(status="ok", sweep={"wall_s": 80.0, "fixed_s": 20.0})
    write_json_atomic(items[0].result, rec)
    got = sweep.finished_in_cut_units(items, [], since)
    assert got == [{"wall_s": 80.0, "fixed_s": 20.0}]
    assert sweep.finished_in_cut_units(items, got, since) == []  # already counted
    assert sweep.finished_in_cut_units(items, [], time.time() + 60) == []  # an earlier call's record


def test_a_cells_process_under_carry_over_starts_a_run_that_saves_state_where_its_fixed_cost_fits():
    from dtype_bench.host import cellrun
    now, last = time.time(), (200.0, 20.0, None)  # the run before took 200 s, 20 of them fixed
    saves, plain = {"run_config": {"state_every": 500}}, {"run_config": {"state_every": None}}
    assert cellrun._starts(saves, last, now + 300, carry_over=False)  # a whole run fits
    assert not cellrun._starts(saves, last, now + 120, carry_over=False)
    assert cellrun._starts(saves, last, now + 120, carry_over=True)
    assert not cellrun._starts(plain, last, now + 120, carry_over=True)
    assert not cellrun._starts(saves, last, now + 100, carry_over=True)


@pytest.mark.parametrize("flags, handed", [(["--time_budget", "900"], True), ([], False)])
def test_under_a_budget_each_run_is_told_when_to_save_its_state_before_the_deadline(chunked, monkeypatch, flags, handed):
    """A run that saves its state saves it once more STATE_LEAD_S before the deadline
    (resume.STATE_BY_ENV): the sweep hands that time to each run's environment, and only under a budget."""
    envs, real = [], runner.execute

    def execute(cmd, env, log, timeout=None):
        envs.append(dict(env))
        return real(cmd, env, log, timeout)
    monkeypatch.setattr(runner, "execute", execute)
    t0 = time.time()
    assert host_sweep.main(chunked.argv + flags + ["--no_analysis"]) == 0
    assert len(envs) == 4
    if not handed:
        assert all(resume.STATE_BY_ENV not in e for e in envs)
        return
    by = {float(e[resume.STATE_BY_ENV]) for e in envs}
    assert len(by) == 1  # one deadline for the whole call, not one per run
    assert t0 + 900 - budget.STATE_LEAD_S - 5 <= by.pop() <= time.time() + 900 - budget.STATE_LEAD_S + 1


def test_a_resumed_run_is_costed_by_the_steps_its_last_process_ran():
    """A record of a run that resumed at step 4,500 of 6,000 timed 1,500 steps: priced as if its wall
    covered all 6,000, a fresh run of its config would look four times cheaper than it is."""
    rec = {"status": "ok", "run": {"steps": 6000}, "resumed": {"from_step": 4500},
           "sweep": {"wall_s": 148.0, "fixed_s": 38.0}}
    assert budget.run_cost(rec, 6000) == pytest.approx(38.0 + 110.0 * 4)
    assert budget.run_cost({**rec, "resumed": {"from_step": 0}}, 6000) == pytest.approx(148.0)


def _timed(tmp_path, text: str, walls: dict) -> tuple[list, dict]:
    """The study's items, and a finished record of each ``(config, seed): (wall_s, runs_per_gpu or None)``."""
    items = sweep.plan(load_study(_write(tmp_path, text)), tmp_path / "executed")
    by = {(i.spec.cfg.config, i.spec.cfg.seed): i for i in items}
    for key, (wall, share) in walls.items():
        rec = runner.error_record(by[key].spec, by[key].out_dir, None)
        rec.update(status="ok", sweep={"wall_s": wall, **({"runs_per_gpu": share} if share else {})})
        write_json_atomic(by[key].result, rec)
    return items, by


def _estimate(items: list, item, runs_per_gpu: int) -> float:
    b = budget.Budget(555, runs_per_gpu=runs_per_gpu)
    b.learn(items)
    return b.estimate(item)


def test_a_config_that_only_ran_shared_elsewhere_is_priced_by_its_ratio_where_both_shared_alike(tmp_path):
    """--costs_from a study that ran three to a GPU: fp32 took 600 s there and amp_bf16 200 s; amp_bf16
    alone took 250 s. fp32 costs 3x amp_bf16 where both shared alike; against amp_bf16's run alone the
    ratio (2.4) would take the sharing's slowdown for the config's."""
    items, by = _timed(tmp_path, STUDY, {("fp32_baseline", 0): (600.0, 3), ("amp_bf16", 0): (200.0, 3),
                                         ("amp_bf16", 1): (250.0, None)})
    assert _estimate(items, by[("fp32_baseline", 1)], 1) == pytest.approx(1.1 * 3 * 250 + 10)
    assert _estimate(items, by[("fp32_baseline", 1)], 3) == pytest.approx(1.1 * 600 + 10)


def test_a_ratio_measured_under_one_sharing_outranks_one_that_mixes_sharings(tmp_path):
    """fp32 ran only three to a GPU (600 s), beside amp_bf16 (300 s there: fp32 costs 2x); alone,
    amp_bf16 took 250 s and bf16_pure 150 s, which never ran shared. Priced through bf16_pure, fp32
    would cost its shared 600 s again (600/150 x 150); through amp_bf16, 2 x 250 s."""
    text = STUDY.replace("configs: [fp32_baseline, amp_bf16]", "configs: [fp32_baseline, amp_bf16, bf16_pure]")
    items, by = _timed(tmp_path, text, {("fp32_baseline", 0): (600.0, 3), ("amp_bf16", 0): (300.0, 3),
                                        ("amp_bf16", 1): (250.0, None), ("bf16_pure", 1): (150.0, None)})
    assert _estimate(items, by[("fp32_baseline", 1)], 1) == pytest.approx(1.1 * 2 * 250 + 10)


def test_a_cells_next_run_is_expected_without_what_the_processs_first_run_paid_once():
    """The H200 case: seed 1 of a cell, first in its process, built the token cache and compiled
    (300 s, 135 s fixed); with 204 s left the next seed was refused though a warm one takes 211 s
    (49 s fixed). Expected without the start, data and a missed compilation it starts under
    carry_over, and a later (warm) run's timings are taken as they are."""
    from dtype_bench.host import cellrun
    cold = {"sweep": {"wall_s": 300.0, "fixed_s": 135.0},
            "metrics": {"time/startup_s": 7.0, "time/data_s": 53.0, "time/first_step_s": 32.0, "compile/cache": "miss"}}
    now, saves = time.time(), {"run_config": {"state_every": 3000}}
    assert not cellrun._starts(saves, (300.0, 135.0, None), now + 204, carry_over=True)  # as the first run measured
    wall, fixed, ran = cellrun._warm(cold, cold=True)
    assert (wall, fixed, ran) == (208.0, 43.0, None)
    assert cellrun._starts(saves, (wall, fixed, ran), now + 204, carry_over=True)
    assert not cellrun._starts(saves, (wall, fixed, ran), now + 204, carry_over=False)  # it would not finish
    hit = {**cold, "metrics": {**cold["metrics"], "compile/cache": "hit"}}
    assert cellrun._warm(hit, cold=True) == (240.0, 75.0, None)  # a compilation the cache served is paid again
    assert cellrun._warm(cold, cold=False) == (300.0, 135.0, None)


def test_a_cells_process_prices_the_next_run_by_its_steps_not_by_a_resumed_runs_few(tmp_path):
    """The run before resumed at step 5,400 of 10,000 and took 258 s for its 4,600 steps: a fresh
    10,000-step run needs ~2.2x that, so with 300 s left it waits for the next call (no carry-over);
    the same run with a state saved at step 8,000 has 2,000 steps left and starts."""
    from dtype_bench.host import cellrun
    now, last = time.time(), (258.0, 30.0, 4600)
    rc = {"scenario": "B", "config": "fp16_naive_noscale", "seed": 1, "steps": 10000, "state_every": 2000,
          "out_dir": str(tmp_path)}
    assert not cellrun._starts({"run_config": rc}, last, now + 300, carry_over=False)
    (tmp_path / resume.STEP_FILE).write_text(json.dumps({"run_id": "B/fp16_naive_noscale/seed1", "steps": 10000,
                                                          "step": 7999}))
    (tmp_path / resume.STATE_FILE).write_bytes(b"state")
    assert cellrun._starts({"run_config": rc}, last, now + 300, carry_over=False)
    assert cellrun._warm({"sweep": {"wall_s": 258.0, "fixed_s": 30.0}, "run": {"steps": 10000},
                          "resumed": {"from_step": 5400}}, cold=False) == (258.0, 30.0, 4600)



def test_a_cut_run_whose_config_never_finished_is_costed_by_its_own_step_time(tmp_path):
    """A run cut off after step 4 with its state saved, of a config with no finished run: the
    next call costs its 5 steps left at the step time its own log measured (1 s), beside the
    fixed cost of its kind, not at another config's rate (6 s a step), so a call that can finish
    it starts it. Without a timed log it is costed as before and waits."""
    items = sweep.plan(load_study(_write(tmp_path, STUDY + "state_every: 5\n")), tmp_path / "executed")
    done = next(i for i in items if i.spec.cfg.dtype.name == "fp32_baseline")
    cut = next(i for i in items if i.spec.cfg.dtype.name == "amp_bf16")
    rec = runner.error_record(done.spec, done.out_dir, None)
    rec.update(status="ok", run={**rec["run"], "steps": 10}, sweep={"wall_s": 80.0, "fixed_s": 20.0})
    write_json_atomic(done.result, rec)
    cut.out_dir.mkdir(parents=True, exist_ok=True)
    (cut.out_dir / resume.STATE_FILE).write_bytes(b"state")
    write_json_atomic(cut.out_dir / resume.STEP_FILE, {"step": 4, "steps": 10, "run_id": cut.spec.cfg.run_id})

    def costed():
        b = budget.Budget(50)
        b.learn(items)
        return b, b.estimate(cut)
    b, by_other = costed()
    assert by_other == pytest.approx(1.1 * (20 + 5 * 6) + 10) and not b.admit([cut])
    assert "no call of this budget starts it" in b.left_line(4)
    rows = [{"step": 0, "loss": 9.0, "interval_ms_per_step": 9000.0},  # the first step: compilation
            {"step": 2, "loss": 8.0, "interval_ms_per_step": 1000.0},
            {"step": 4, "loss": 7.0, "interval_ms_per_step": 1000.0}]
    (cut.out_dir / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    b, by_own = costed()
    assert by_own == pytest.approx(1.1 * 20 + 10 + 1.1 * 5 * 1.0)
    assert b.admit([cut]) and "no call of this budget starts it" not in b.left_line(4)


def test_a_sweep_says_what_share_of_its_runs_time_steps_will_take_and_how_much_longer_runs_reach_the_target(tmp_path):
    """Short runs spend their GPU time starting and compiling: before the runs start, the sweep
    estimates their share in steps from finished runs of their configs and names the steps that
    would reach the target; runs long against their fixed cost are not told to grow."""
    items = sweep.plan(load_study(_write(tmp_path, STUDY)), tmp_path / "executed")
    done = [i for i in items if i.spec.cfg.seed == 0]

    def finished(wall, fixed):
        for item in done:
            rec = runner.error_record(item.spec, item.out_dir, None)
            rec.update(status="ok", run={**rec["run"], "steps": 10}, sweep={"wall_s": wall, "fixed_s": fixed})
            write_json_atomic(item.result, rec)
        b = budget.Budget(600)
        b.learn(items)
        return b, [i for i in items if i.spec.cfg.seed == 1]
    b, todo = budget.Budget(600), [i for i in items if i.spec.cfg.seed == 1]
    b.learn(items)
    assert b.planned_share(todo) is None and b.planned_line(todo) is None  # nothing to estimate from
    b, todo = finished(wall=40.0, fixed=30.0)  # 30 s fixed, 10 s of steps a run: 25%
    share, factor, costed = b.planned_share(todo)
    assert share == pytest.approx(0.25) and costed == 2
    assert factor == pytest.approx(0.7 * 60 / (0.3 * 20))  # 7x the steps: 70 s of steps against 30 s fixed
    line = b.planned_line(todo)
    assert line_with(line, "25%", "70%", "7.0x", "70 for 10")
    b, todo = finished(wall=102.0, fixed=2.0)  # 2 s fixed, 100 s of steps: 98%
    share, factor, _ = b.planned_share(todo)
    assert share == pytest.approx(100 / 102) and factor == 1.0
    assert "would reach" not in b.planned_line(todo)


def test_the_sweep_prints_the_planned_share_before_its_runs(chunked, capsys, monkeypatch):
    monkeypatch.setattr(sweep, "run_analysis", lambda *a, **k: ([], []))
    fake = runner.execute

    def timed(cmd, env, log, timeout=None):  # each run 100 s on the clock, 30 of them in steps
        code = fake(cmd, env, log, timeout)
        result = Path(runner.injected(cmd)["out_dir"]) / "result.json"
        rec = read_record(result)
        rec["metrics"]["time/steps_s"] = 30.0
        write_json_atomic(result, rec)
        return code
    monkeypatch.setattr(runner, "execute", timed)
    assert host_sweep.main(chunked.argv + ["--time_budget", "250s"]) == 0  # two runs, nothing to estimate from
    assert "planned:" not in capsys.readouterr().out
    assert host_sweep.main(chunked.argv + ["--dry_run"]) == 0  # the other two, costed by the first two's records
    assert line_with(capsys.readouterr().out, "planned:", "~30%", "2 runs", "70%", "5.4x")  # 30 s of steps, 70 fixed
    assert len(chunked.calls) == 2  # a dry run runs nothing
    assert host_sweep.main(chunked.argv) == 0
    assert line_with(capsys.readouterr().out, "planned:", "training steps", "70%") and len(chunked.calls) == 4
