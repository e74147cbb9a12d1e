"""What a user gets wrong, and what they read back: every mistake below ends with a non-zero
exit status, ONE line on stderr naming the problem (and what to do), and the records already
on disk exactly as they were."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import line_with
from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

from dtype_bench.cli import main
from benchlib.core.records import read_record
from benchlib.core.runconfig import ConfigError
from dtype_bench.study import runner, sweep
from benchlib.training.checkpoints import CheckpointError

REPO = Path(__file__).resolve().parents[1]
TINY = ["--size", "tiny", "--steps", "2", "--device", "cpu", "--quiet", "--log_every", "1"]
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A folder holding the finished record of a real tiny run (made once)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(["run", "--scenario", "A", *TINY, "--out", str(out)]) == 0
    return out


@pytest.fixture
def existing(finished, tmp_path):
    """A copy of the finished run and a snapshot of its files' bytes."""
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out, {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


def untouched(existing):
    out, before = existing
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def one_line(capsys, *parts):
    """stderr is one line holding every part; returns it."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for part in parts:
        assert part in err, err
    return err


def cls_jsonl(path, rows=40, labels=lambda i: [f"l{i % 3}", "common"]):
    path.write_text("".join(json.dumps({"text": f"document {i} about topic {i % 3}", "labels": labels(i)}) + "\n"
                            for i in range(rows)))
    return path


# ---- the run command ---------------------------------------------------------------------
@pytest.mark.parametrize("argv, parts", [
    (["--config", "amp_bf17"], ["unknown dtype config 'amp_bf17'", "Did you mean 'amp_bf16'?"]),
    (["--scenario", "G"], ["unknown scenario 'G'", "Valid"]),
    (["--stepz", "3"], ["unrecognized arguments: --stepz", "Did you mean '--steps'?"]),
    (["--step", "3"], ["unrecognized arguments: --step", "Did you mean '--steps'?"]),  # no prefix matching
    (["--warmup_steps", "-5"], ["warmup_steps must be >= 0, got -5"]),
    (["--steps", "many"], ["--steps: cannot read 'many' as int"]),
])
def test_a_bad_flag_or_value_is_one_line_and_exit_2(capsys, existing, argv, parts):
    out, _ = existing
    assert exit_code(["run", "--scenario", "A", *TINY, *argv, "--out", str(out)]) == 2
    one_line(capsys, *parts)
    assert untouched(existing)


def exit_code(argv):
    """``main``'s return value, or the status argparse exits with."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@NO_GPU
def test_device_cuda_without_a_gpu_is_refused_and_the_finished_record_kept(capsys, existing):
    out, _ = existing  # even with --overwrite: a run refused before it starts replaces nothing
    assert main(["run", "--scenario", "A", *TINY, "--device", "cuda", "--out", str(out), "--overwrite"]) == 1
    err = capsys.readouterr()
    assert "existing record kept" in err.out
    assert len(err.err.strip().splitlines()) == 1 and "device='cuda' but no CUDA GPU is visible" in err.err
    assert untouched(existing)


def test_a_refused_run_writes_its_one_line_error_record_where_nothing_was_recorded(tmp_path, capsys):
    out = tmp_path / "new"
    assert main(["run", "--scenario", "A", *TINY, "--seq_len", "100000", "--out", str(out)]) == 1
    one_line(capsys, "seq_len=100000 exceeds the 8192 positions", "use seq_len 8192 or less")
    rec = read_record(out / "result.json")
    assert rec["status"] == "error" and "\n" not in rec["reason"] and not (out / "steps.jsonl").exists()


def test_an_out_that_is_a_file_is_refused_and_the_file_kept(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    assert main(["run", "--scenario", "A", *TINY, "--out", str(f)]) == 1
    one_line(capsys, str(f), "is a file, not a folder")
    assert f.read_text() == "mine"


def test_an_out_that_cannot_be_written_is_refused():
    from benchlib.training.loop import run
    rec = run({"scenario": "A", "steps": 2, "device": "cpu"}, out_dir="/proc/dtype-bench-cannot-write", progress=False)
    assert rec["status"] == "error" and "cannot write there" in rec["reason"] and rec["_path"] is None


def test_a_missing_checkpoint_path_is_named_as_a_missing_directory(tmp_path, capsys):
    gone = tmp_path / "models" / "bert"
    assert main(["run", "--scenario", "D", *TINY, "--model_name_or_path", str(gone), "--out", str(tmp_path / "o")]) == 1
    err = one_line(capsys, str(gone), "no such local directory")
    assert "repo id" not in err.lower()


def test_a_checkpoint_of_the_wrong_role_is_refused_in_one_line(tmp_path, capsys):
    BertModel(BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(tmp_path / "bert")
    capsys.readouterr()  # saving's own progress bar
    assert main(["run", "--scenario", "C", *TINY, "--model_name_or_path", str(tmp_path / "bert"),
                 "--out", str(tmp_path / "o")]) == 1
    one_line(capsys, "'bert' model", "scenario C needs a decoder")


def test_seq_len_beyond_a_checkpoints_positions_is_refused_before_anything_is_built(tmp_path, capsys, monkeypatch):
    GPT2Model(GPT2Config(vocab_size=300, n_embd=32, n_layer=1, n_head=2, n_positions=32)).save_pretrained(tmp_path / "g")
    capsys.readouterr()  # saving's own progress bar
    import benchlib.training.loop as loop
    monkeypatch.setattr(loop, "load_task_data", lambda cfg: pytest.fail("data read for a refused run"))
    assert main(["run", "--scenario", "C", *TINY, "--seq_len", "64", "--model_name_or_path", str(tmp_path / "g"),
                 "--out", str(tmp_path / "o")]) == 1
    one_line(capsys, "seq_len=64 exceeds the 32 positions of checkpoint", "use seq_len 32 or less")


def test_a_multi_process_strategy_on_one_process_says_so(tmp_path, capsys):
    # refused by the sequence length, so that no torchrun starts: the note comes first all the same
    assert main(["run", "--scenario", "A", *TINY, "--dist.strategy", "ddp", "--seq_len", "100000",
                 "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("note:") and line_with(err[0], "dist.strategy=ddp", "dist.nproc=1", "--dist.nproc N")
    assert "seq_len=100000" in err[-1] and len(err) == 2


def test_nothing_measured_prints_no_metrics_line(tmp_path, capsys):
    assert main(["run", "--scenario", "A", *TINY, "--seq_len", "100000", "--out", str(tmp_path / "o")]) == 1
    out = capsys.readouterr().out
    assert "None" not in out and "throughput" not in out and "record:" in out


# ---- real data ---------------------------------------------------------------------------
def _data_error(tmp_path, capsys, scenario, data, *parts):
    code = main(["run", "--scenario", scenario, *TINY, "--data", str(data), "--cache_dir", str(tmp_path / "cache"),
                 "--out", str(tmp_path / "o")])
    assert code == 1
    one_line(capsys, *parts)
    assert "\n" not in read_record(tmp_path / "o" / "result.json")["reason"]


def test_an_empty_jsonl_names_the_file(tmp_path, capsys):
    (tmp_path / "docs.jsonl").write_text("\n")
    _data_error(tmp_path, capsys, "D", tmp_path / "docs.jsonl", "docs.jsonl is empty: no documents")


def test_a_data_error_keeps_the_finished_record_there(tmp_path, capsys, existing):
    out, _ = existing
    (tmp_path / "docs.jsonl").write_text('{"text": "a", "labels": "x,y"}\n')
    assert main(["run", "--scenario", "D", *TINY, "--data", str(tmp_path / "docs.jsonl"), "--out", str(out),
                 "--overwrite"]) == 1
    one_line(capsys, "docs.jsonl line 1", "need a list of labels")
    assert untouched(existing)


def test_an_empty_txt_names_the_file(tmp_path, capsys):
    (tmp_path / "corpus.txt").write_text("  \n\n")
    _data_error(tmp_path, capsys, "A", tmp_path / "corpus.txt", "corpus.txt is empty: no text")


def test_a_malformed_jsonl_line_is_named_by_its_number(tmp_path, capsys):
    f = cls_jsonl(tmp_path / "docs.jsonl", rows=5)
    f.write_text(f.read_text() + '{"text": "x", "labels": ["a"]\n')
    _data_error(tmp_path, capsys, "D", f, "docs.jsonl line 6: not valid JSON")


@pytest.mark.parametrize("scenario, labels, parts", [
    ("C", lambda i: "a,b,c", ["line 1", "'labels' is \"a,b,c\", one str", "need a list of labels",
                              '"labels": ["a", "b", "c"]']),
    ("D", lambda i: 3, ["line 1", "'labels' is 3, one int", "single-label data (E, F)"]),
    ("F", lambda i: {"x": 1}, ["line 1", "'labels' is {\"x\": 1}: expected one label"]),
    ("D", lambda i: ["a", None], ["line 1", "'labels' holds null: labels are strings or ints"]),
    ("E", lambda i: ["a"] if i < 3 else [7], ["line 4", "labels mix strings and ints"]),
])
def test_labels_of_the_wrong_shape_are_refused_with_the_line_and_the_expected_shape(tmp_path, capsys, scenario,
                                                                                     labels, parts):
    f = cls_jsonl(tmp_path / "docs.jsonl", labels=labels)
    _data_error(tmp_path, capsys, scenario, f, "docs.jsonl", *parts)


def test_a_single_file_named_as_a_test_split_is_never_trained_on(tmp_path, capsys):
    f = cls_jsonl(tmp_path / "eurlex.test.jsonl")
    _data_error(tmp_path, capsys, "D", f, "is named as a test split, which is never trained on")


def test_a_folder_without_a_training_file_is_refused(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    cls_jsonl(tmp_path / "d" / "x.validation.jsonl")
    cls_jsonl(tmp_path / "d" / "x.test.jsonl")
    _data_error(tmp_path, capsys, "D", tmp_path / "d", "no training file, only test and validation ones")


# ---- the sweep ---------------------------------------------------------------------------
STUDY = "study: s\nscenarios: [A]\nconfigs: [fp32_baseline]\nseeds: [0]\nsize: tiny\nsteps: 2\ndevice: cpu\n"


@pytest.fixture
def study(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(STUDY)
    return path


@pytest.mark.parametrize("text, parts", [
    ("study: s\nscenarios: [A\n", ["not a valid (safe) YAML file at line 3", "expected ',' or ']'"]),
    ("", ["a study file is a mapping"]),
    (STUDY + "stepz: 3\n", ["unknown key 'stepz'", "Did you mean 'steps'?"]),
    (STUDY.replace("fp32_baseline", "fp32_baselin"), ["unknown dtype config 'fp32_baselin'", "Did you mean"]),
    (STUDY.replace("seeds: [0]", "seeds: 3"), ["seeds: 3", "[3]", "[0, 1, 2]"]),  # it ran seed 3 alone
    (STUDY.replace("seeds: [0]", "seeds: [0, 1, 0]"), ["seeds: 0 is listed twice"]),  # it ran seeds 0 and 1
])
def test_a_bad_study_file_is_one_line_and_nothing_is_written(tmp_path, capsys, text, parts):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["sweep", str(path), "--out", str(tmp_path / "executed")]) == 2
    one_line(capsys, str(path), *parts)
    assert not (tmp_path / "executed").exists()


def test_analysis_only_before_any_run_is_one_line_naming_the_command_that_runs_it(study, tmp_path, capsys):
    """It ran both analysis notebooks, which failed, and said "the runs' records stand" of none."""
    root = tmp_path / "executed"
    assert main(["sweep", str(study), "--out", str(root), "--analysis_only"]) == 2
    one_line(capsys, "--analysis_only", "no run", "nothing to analyse", f"dtype-bench sweep {study}")
    assert not (root / "s" / "analysis").exists()


def test_a_missing_study_file_is_one_line(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "nope.yaml")]) == 2
    one_line(capsys, "no study file", "nope.yaml")


@pytest.mark.parametrize("argv, parts", [
    (["--runs_per_gpu", "0"], ["--runs_per_gpu: must be >= 1", "got 0"]),
    (["--dry-ru"], ["unrecognized arguments: --dry-ru", "Did you mean '--dry_run'?"]),
    (["--gpus", "0,1,0"], ["--gpus", "GPU 0 named twice", "--runs_per_gpu"]),  # two runs on GPU 0, unmarked
])
def test_bad_sweep_flags_are_one_line(study, capsys, argv, parts):
    assert exit_code(["sweep", str(study), *argv]) == 2
    one_line(capsys, *parts)


def test_an_unwritable_or_file_out_is_named_before_any_run(study, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner, "execute", lambda *a, **k: pytest.fail("a run started"))
    f = tmp_path / "executed"
    f.write_text("mine")
    assert main(["sweep", str(study), "--out", str(f)]) == 2
    one_line(capsys, "--out", "is a file, not a folder")
    assert main(["sweep", str(study), "--out", "/proc/dtype-bench-executed"]) == 2
    one_line(capsys, "--out", "cannot write there")
    assert f.read_text() == "mine"


def test_a_corrupted_record_is_run_again_and_the_others_are_kept(study, tmp_path, capsys, monkeypatch, finished):
    root = tmp_path / "executed"
    items = sweep.plan(sweep.load_study(study), root)
    ok = items[0]
    ok.out_dir.mkdir(parents=True)
    shutil.copy(finished / "result.json", ok.result)
    rec = json.loads(ok.result.read_text())
    rec["sweep"] = {"wall_s": 1.0}
    ok.result.write_text(json.dumps(rec))
    assert sweep.run_state(ok)[0].startswith("done")
    ok.result.write_text(ok.result.read_text()[:40])  # cut short, as by a full disk
    assert main(["sweep", str(study), "--out", str(root), "--dry_run"]) == 0
    assert "to run 1 (corrupt 1)" in capsys.readouterr().out


# ---- notebooks ---------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_a_notebook_parameter_error_is_the_last_line_papermill_prints_and_the_cells_only_one(tmp_path):
    out = tmp_path / "out.ipynb"
    proc = subprocess.run([sys.executable, "-m", "papermill", str(REPO / "notebooks/01_train_lm.ipynb"), str(out),
                           "-p", "stepz", "3", "-p", "device", "cpu", "--no-progress-bar"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode != 0
    last = (proc.stdout + proc.stderr).strip().splitlines()[-1]
    assert last.startswith("ConfigError: notebook parameters: unknown parameter 'stepz'. Did you mean 'steps'?")
    cells = json.loads(out.read_text())["cells"]
    errors = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert len(errors) == 1 and len(errors[0]["traceback"]) == 1 and "unknown parameter 'stepz'" in errors[0]["traceback"][0]


def test_user_errors_render_as_their_one_line_in_notebooks():
    for e in (ConfigError("x is wrong"), CheckpointError("y is wrong")):
        assert e._render_traceback_() == [f"{type(e).__name__}: {e}"]


def test_the_sweep_says_once_which_split_rule_real_data_was_read_with(tmp_path, capsys, monkeypatch):
    path = tmp_path / "s.yaml"
    path.write_text(STUDY.replace("seeds: [0]", "seeds: [0, 1]"))
    root = tmp_path / "executed"
    by_out = {i.out_dir.resolve(): i for i in sweep.plan(sweep.load_study(path), root)}

    def execute(cmd, env, log, timeout=None):  # stands in for papermill: a run on a local file
        out = Path(runner.injected(cmd)["out_dir"]).resolve()
        rec = {**runner.error_record(by_out[out].spec, out, None), "status": "ok"}
        rec["data"] = {"source": "/data/docs.jsonl", "split_rule": "one file: a random 10% of the documents (seed 1)"}
        runner.write_record(out, rec)
        return 0
    monkeypatch.setattr(runner, "execute", execute)
    assert main(["sweep", str(path), "--out", str(root), "--no_analysis", "--no_html"]) == 0
    said = capsys.readouterr()
    lines = [ln for ln in (said.out + said.err).splitlines() if "validation: one file: a random 10%" in ln]
    assert len(lines) == 1 and "data: /data/docs.jsonl" in lines[0]


def test_a_host_without_the_html_stack_ends_the_sweep_with_one_line_and_its_records(tmp_path, capsys, monkeypatch):
    # a GPU image without nbformat: the runs recorded, then the HTML export refused in one line, not a traceback
    path = tmp_path / "s.yaml"
    path.write_text(STUDY)
    root = tmp_path / "executed"
    by_out = {i.out_dir.resolve(): i for i in sweep.plan(sweep.load_study(path), root)}

    def execute(cmd, env, log, timeout=None):
        out = Path(runner.injected(cmd)["out_dir"]).resolve()
        runner.write_record(out, {**runner.error_record(by_out[out].spec, out, None), "status": "ok"})
        return 0
    monkeypatch.setattr(runner, "execute", execute)
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nbformat" else real(name, *a))
    monkeypatch.setattr(sweep, "export_study_html", lambda *a, **k: pytest.fail("exported without nbformat"))
    assert main(["sweep", str(path), "--out", str(root), "--no_analysis"]) == 0
    said = capsys.readouterr()
    lines = [ln for ln in said.err.splitlines() if "no HTML export" in ln]
    assert len(lines) == 1 and "nbformat" in lines[0] and "--analysis_only" in lines[0]
    assert all((i.out_dir / "result.json").exists() for i in by_out.values())


# ---- nothing lost or silently changed (issue 56) -----------------------------------------
def test_a_run_refuses_an_out_holding_a_record_unless_overwrite(capsys, existing):
    out, before = existing
    assert main(["run", "--scenario", "A", *TINY, "--out", str(out)]) == 2
    one_line(capsys, f"--out {out}", "holds the record of A/amp_bf16/seed0", "--overwrite")
    assert untouched(existing)
    assert main(["run", "--scenario", "A", *TINY, "--seed", "1", "--out", str(out), "--overwrite"]) == 0
    assert read_record(out / "result.json")["run_id"] == "A/amp_bf16/seed1"


def test_resume_needs_a_saved_state_and_goes_with_no_overwrite(capsys, existing):
    out, _ = existing
    assert main(["run", "--scenario", "A", *TINY, "--state_every", "1", "--out", str(out), "--resume"]) == 2
    one_line(capsys, "--resume", str(out), "no saved state")
    assert main(["run", "--scenario", "A", *TINY, "--out", str(out), "--resume", "--overwrite"]) == 2
    one_line(capsys, "--resume", "--overwrite")
    assert untouched(existing)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("state_every", [None, "2"])
def test_ctrl_c_ends_a_run_in_one_line_with_the_command_that_resumes_it(tmp_path, state_every):
    out = tmp_path / "x"
    argv = ["run", "--scenario", "A", "--size", "tiny", "--steps", "100000", "--device", "cpu", "--out", str(out)]
    argv += ["--state_every", state_every] if state_every else []
    proc = subprocess.Popen([sys.executable, "-m", "dtype_bench", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path)
    wait_for = out / ("state.json" if state_every else "steps.jsonl")
    for _ in range(1200):
        if (wait_for.exists() and wait_for.stat().st_size) or proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("dtype-bench run: interrupted") and f"--out {out}" in last, err
    assert ("--resume" in last) == bool(state_every), last
    if state_every:  # the command it names continues the run, with the flags it was given
        assert "--state_every 2" in last and "--steps 100000" in last


def test_ctrl_c_ends_a_sweep_in_one_line_naming_its_out(study, tmp_path, capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(runner, "execute", interrupted)
    root = tmp_path / "executed"
    assert main(["sweep", str(study), "--out", str(root), "--no_analysis", "--no_html"]) == 130
    err = capsys.readouterr().err
    said = [line for line in err.replace("\r", "\n").splitlines() if line.strip() and "run/s]" not in line]  # less the bar
    assert len(said) == 1 and "Traceback" not in err, err
    assert "interrupted" in said[0] and f"dtype-bench sweep {study} --out {root}" in said[0]


def test_a_second_sweep_on_a_study_folder_in_use_is_refused_naming_the_holder(study, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner, "execute", lambda *a, **k: pytest.fail("a run started"))
    root = tmp_path / "executed"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path\n"
                               "from dtype_bench.study.lock import study_lock\n"
                               "with study_lock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(120)\n",
                               str(root / "s")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for extra in ([], ["--analysis_only", "--no_analysis", "--no_html"]):
            assert main(["sweep", str(study), "--out", str(root), *extra]) == 2
            one_line(capsys, str(root / "s"), f"pid {holder.pid}", "another sweep")
        for look in (["--dry_run"], ["--status"]):  # what a sweep would do, while one goes: fine
            assert main(["sweep", str(study), "--out", str(root), *look]) == 0
            assert f"pid {holder.pid}" in capsys.readouterr().out
    finally:
        holder.kill()
        holder.wait()
    # killed, not ended: the lock went with its process (what stops the sweep now is that nothing ran)
    assert main(["sweep", str(study), "--out", str(root), "--analysis_only", "--no_analysis", "--no_html"]) == 2
    assert "another sweep" not in one_line(capsys, "nothing to analyse")


def test_compact_refuses_a_study_folder_a_sweep_is_writing(tmp_path, capsys):
    from fixtures.records import grid, write_study
    root = tmp_path / "executed"
    study = write_study(root / "s", grid("A", ["fp32_baseline", "amp_bf16"], seeds=(0,)))
    before = sorted(p.relative_to(study) for p in study.rglob("*"))
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path\n"
                               "from dtype_bench.study.lock import study_lock\n"
                               "with study_lock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(120)\n",
                               str(study)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for extra in ([], ["--expand"]):
            assert main(["compact", str(study), "--root", str(root), *extra]) == 2
            one_line(capsys, str(study), f"pid {holder.pid}", "sweep")
        pretrain = root / "s.pretrain"  # the same sweep writes its pretrain stage
        pretrain.mkdir()
        assert main(["compact", str(pretrain), "--root", str(root)]) == 2
        one_line(capsys, str(pretrain), f"pid {holder.pid}", "sweep")
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.relative_to(study) for p in study.rglob("*") if p.name != ".sweep.lock") == before  # untouched
    assert main(["compact", str(study), "--root", str(root)]) == 0  # the sweep gone: compacted
    assert not (study / ".sweep.lock").exists() and (study / "records.jsonl.gz").is_file()


def test_the_sweep_lock_is_one_holder_at_a_time_and_released_on_exit(tmp_path):
    from dtype_bench.study.lock import StudyInUse, study_lock
    with study_lock(tmp_path / "s"):
        with pytest.raises(StudyInUse, match=f"pid {os.getpid()}"):
            with study_lock(tmp_path / "s"):
                pass
    with study_lock(tmp_path / "s"):  # released: taken again
        pass
    assert [p.name for p in (tmp_path / "s").iterdir()] == []  # and no file left behind


@pytest.mark.parametrize("verb", ["compare", "analyze"])
def test_a_truncated_record_is_named_by_every_verb_that_reads_the_study(tmp_path, capsys, verb):
    from fixtures.records import grid, write_study
    from test_gates import with_baseline  # quality established: the scenario has a reference
    root = write_study(tmp_path / "s", [with_baseline(r) for r in grid("A", ["fp32_baseline", "amp_bf16"], seeds=(0, 1, 2))])
    bad = root / "runs" / "A" / "fp32_baseline" / "seed0" / "result.json"
    bad.write_text(bad.read_text()[:60])  # cut short, as by a full disk
    extra = ["--n_boot", "200"] if verb == "compare" else []
    code = main([verb, str(root), *extra])
    said = capsys.readouterr()
    warned = line_with(said.err, str(bad), "excluded")
    assert code != 0 or warned.startswith("warning:")
    if verb == "compare":  # fp32_baseline now has 2 seeds of 3: another config is A's reference, and it says so
        line_with(said.out, "reference of A", "amp_bf16", "not fp32_baseline")


def test_load_study_names_each_record_it_leaves_out(tmp_path, capsys):
    from benchlib.analysis.tables import load_study
    from fixtures.records import grid, write_study
    root = write_study(tmp_path / "s", grid("A", ["fp32_baseline", "amp_bf16"], seeds=(0, 1)))
    bad = [root / "runs" / "A" / c / "seed1" / "result.json" for c in ("fp32_baseline", "amp_bf16")]
    for f in bad:
        f.write_text("{")
    assert len(load_study(root)) == 2
    err = capsys.readouterr().err
    for f in bad:
        line_with(err, "warning", str(f), "excluded")


def test_a_records_table_line_without_its_location_is_left_out_by_line_not_a_traceback(tmp_path, capsys):
    """A table of records written by hand (no ``_file``, where each result.json was): every verb
    that reads it names the line it leaves out, and a table with no readable line is one error."""
    import gzip
    import json as _json
    from fixtures.records import make_record
    from benchlib.core.records import RECORDS_TABLE, load_records
    folder = tmp_path / "bench"
    folder.mkdir()
    with gzip.open(folder / RECORDS_TABLE, "wt") as f:
        f.write(_json.dumps(make_record("A", "amp_bf16", 0)) + "\n")
    assert load_records(folder) == []
    line_with(capsys.readouterr().err, f"{RECORDS_TABLE}:1", "no _file", "excluded")
    assert main(["analyze", str(folder)]) != 0
    line_with(capsys.readouterr().err, "error", str(folder))


@pytest.mark.parametrize("argv, parts", [
    (["--seed", "-1"], ["seed must be >= 0, got -1"]),
    (["--config", "AMP-BF16"], ["unknown dtype config 'AMP-BF16'", "Did you mean 'amp_bf16'?"]),
    (["--size", "xxl"], ["size='xxl' is not one of", "'tiny', 'small', 'base', 'medium', 'large', 'xl'"]),
])
def test_a_bad_value_names_what_is_valid(capsys, tmp_path, argv, parts):
    assert exit_code(["run", "--scenario", "A", *TINY, *argv, "--out", str(tmp_path / "o")]) == 2
    err = one_line(capsys, *parts)
    assert "wrong type" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("text, parts, absent", [
    (STUDY.replace("seeds: [0]", "seeds: [-1]"), ["seeds", "non-negative", "-1"], None),
    (STUDY + "size: small\n", ["duplicate key 'size'", "line 8", "line 5"], None),
    (STUDY + "overrides: {G: {steps: 3}}\n", ["unknown scenario 'G'", "Did you mean 'F'?"], "'roberta'?"),
    (STUDY.replace("steps: 2", 'steps: "30"'), ["steps", "'30'", "must be an integer", "steps: 30"], "1.0e-3"),
    (STUDY.replace("size: tiny", "size: xxl"), ["size='xxl' is not one of", "'xl'"], "wrong type"),
])
def test_a_study_file_mistake_names_the_key_and_what_is_valid(tmp_path, capsys, text, parts, absent):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["sweep", str(path), "--out", str(tmp_path / "executed")]) == 2
    err = one_line(capsys, str(path), *parts)
    assert absent is None or absent not in err
    assert not (tmp_path / "executed").exists()


def test_a_duplicate_key_in_a_nested_mapping_is_refused_too(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(STUDY + "overrides:\n  A:\n    steps: 3\n    lr: 1.0e-3\n    steps: 4\n")
    assert main(["sweep", str(path), "--dry_run"]) == 2
    one_line(capsys, str(path), "duplicate key 'steps'", "line 12", "line 10")


@pytest.mark.parametrize("data", [bytes(range(256)), b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"], ids=["bytes", "png"])
def test_a_binary_study_file_is_named(tmp_path, capsys, data):
    path = tmp_path / "study.yaml"
    path.write_bytes(data)
    assert main(["sweep", str(path), "--dry_run"]) == 2
    one_line(capsys, str(path))


def test_the_sweep_s_analysis_names_a_corrupt_record_and_fails(study, tmp_path, capsys, monkeypatch, finished):
    monkeypatch.setattr(runner, "execute", lambda *a, **k: pytest.fail("a run started"))
    root = tmp_path / "executed"
    item = sweep.plan(sweep.load_study(study), root)[0]
    item.out_dir.mkdir(parents=True)
    shutil.copy(finished / "result.json", item.result)
    item.result.write_text(item.result.read_text()[:40])  # cut short, as by a full disk
    assert main(["sweep", str(study), "--out", str(root), "--analysis_only", "--no_analysis", "--no_html"]) == 1
    line_with(capsys.readouterr().err, "corrupt", "A/fp32_baseline/seed0")
