"""Study files and ``dtype-bench sweep``: expansion, validation before anything runs,
papermill execution with fault isolation, resume, scheduling over GPUs, HTML and summary."""
import json
import re
import shutil
from collections import Counter
import subprocess
import sys
import threading
from pathlib import Path

import nbformat
import pytest
from conftest import COMPLETED, REPO, line_with

from dtype_bench.host import slots
from dtype_bench.study import runner, sweep
from benchlib.core.dtypes import FULL_MATRIX, CORE_SIX, get_config
from benchlib.core.records import FINISHED, read_record, validate, write_json_atomic, write_sidecar
from benchlib.core.runconfig import ConfigError
from benchlib.study.studyfile import load_study

PARAMS = REPO / "params"


def _study(tmp_path, text, name="mini.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _records(root):
    return {str(p.parent.relative_to(root / "runs")): read_record(p) for p in sorted((root / "runs").rglob("result.json"))}


def _mtimes(root):
    return {p: p.stat().st_mtime_ns for p in (root / "runs").rglob("result.json")}


# ---- study files -----------------------------------------------------------------------
def test_smoke_study_is_all_scenarios_tiny_on_cpu():
    runs = load_study(PARAMS / "smoke.yaml").runs()
    assert {r.cfg.scenario for r in runs} == set("ABCDEF")
    assert all((r.cfg.size, r.cfg.device, r.cfg.data) == ("tiny", "cpu", "synthetic") for r in runs)
    assert all(r.cfg.steps <= (150 if r.cfg.scenario == "A" else 40) and r.cfg.extra == {"study": "smoke"} for r in runs)


def test_quick_study_is_the_full_matrix_configs_on_A_and_D_one_seed_base():
    runs = load_study(PARAMS / "quick.yaml").runs()
    assert len(runs) == 2 * len(FULL_MATRIX)
    assert {r.cfg.scenario for r in runs} == {"A", "D"} and {r.cfg.seed for r in runs} == {0}
    assert all(r.cfg.size == "base" and 100 <= r.cfg.steps <= 1000 for r in runs)


def test_full_matrix_study_is_seed_001s_matrix_with_its_batch_shapes():
    runs = load_study(PARAMS / "full_matrix.yaml").runs()
    assert len(runs) == 2 * len(FULL_MATRIX) * 3
    lm = {(r.cfg.steps, r.cfg.batch_size, r.cfg.grad_accum) for r in runs if r.cfg.scenario == "A"}
    cls = {(r.cfg.steps, r.cfg.batch_size, r.cfg.grad_accum) for r in runs if r.cfg.scenario == "D"}
    assert (lm, cls) == ({(10000, 12, 5)}, {(5000, 8, 4)})


def test_core_six_study_is_the_six_scenarios_with_canonical_config_names():
    study = load_study(PARAMS / "core_six.yaml")
    assert study.scenarios == list("ABCDEF")
    assert study.configs == [get_config(c).name for c in CORE_SIX]  # fp32_true -> fp32_baseline


def test_config_shorthands_expand_and_deduplicate(tmp_path):
    study = load_study(_study(tmp_path, "configs: [core_six, amp_bf16, amp_bf16_fp32_head]\nscenarios: [A]\n"))
    assert study.configs == [get_config(c).name for c in CORE_SIX] + ["amp_bf16_fp32_head"]


def test_overrides_apply_lm_then_cls_then_scenario(tmp_path):
    path = _study(tmp_path, "scenarios: [A, C, D]\nconfigs: [amp_bf16]\nsteps: 10\n"
                            "overrides:\n  cls: {steps: 20}\n  D: {steps: 30}\n")
    assert {r.cfg.scenario: r.cfg.steps for r in load_study(path).runs()} == {"A": 10, "C": 20, "D": 30}


def test_overrides_by_architecture_sit_between_the_family_and_the_scenario(tmp_path):
    path = _study(tmp_path, "scenarios: [A, B, C, D, E]\nconfigs: [amp_bf16]\nsteps: 10\n"
                            "overrides:\n  gpt2: {steps: 11}\n  cls:\n    steps: 20\n    lr: 1.0e-4\n"
                            "    roberta: {steps: 21, model_name_or_path: roberta-base}\n  E: {steps: 30}\n")
    runs = {r.cfg.scenario: r.cfg for r in load_study(path).runs()}
    assert {s: c.steps for s, c in runs.items()} == {"A": 11, "B": 10, "C": 11, "D": 21, "E": 30}
    assert {s: c.model_name_or_path for s, c in runs.items()} == {"A": None, "B": None, "C": None,
                                                                  "D": "roberta-base", "E": None}
    assert runs["C"].lr == runs["D"].lr == 1e-4 and runs["A"].lr != 1e-4


def test_hub_studies_fine_tune_the_pretrained_hub_models_at_a_fine_tuning_rate():
    for name, cls_scenarios in (("full_matrix", {"D"}), ("core_six", {"C", "D", "E", "F"})):
        runs = load_study(PARAMS / f"{name}.yaml").runs()
        assert {r.cfg.scenario for r in runs if r.cfg.model_name_or_path} == cls_scenarios
        for r in runs:
            c = r.cfg
            if c.scn.is_lm:
                assert c.model_name_or_path is None  # language models train from scratch
            else:
                assert c.model_name_or_path == {"gpt2": "gpt2", "roberta": "roberta-base"}[c.scn.arch]
                assert c.lr == 2e-5 and 0 < c.warmup_steps < c.steps
        text = (PARAMS / f"{name}.yaml").read_text()
        assert "pretrain:" in text and "model_name_or_path: pretrained" in text  # the offline stand-in, explained


@pytest.mark.parametrize("text, expected", [
    ("configs: [amp_bf17]\n", ["configs: unknown dtype config 'amp_bf17'", "Did you mean 'amp_bf16'?", "full_matrix"]),
    ("scenarios: [A, G]\n", ["scenarios: unknown scenario 'G'", "Valid: A, B, C, D, E, F"]),
    ("stpes: 10\n", ["unknown key 'stpes'", "Did you mean 'steps'?", "Valid: study"]),
    ("steps: ten\n", ["steps='ten' has the wrong type: expected int"]),
    ("overrides:\n  D: {lrr: 0.1}\n", ["overrides.D: unknown parameter 'lrr'", "Did you mean 'lr'?"]),
    ("overrides:\n  Q: {lr: 0.1}\n", ["overrides: unknown scenario 'Q'", "lm, cls, A"]),
    ("overrides:\n  cls:\n    gpt2: {lrr: 0.1}\n", ["overrides.cls.gpt2: unknown parameter 'lrr'"]),
    ("overrides:\n  roberta: {scenario: A}\n", ["overrides.roberta: 'scenario' cannot be overridden"]),
    ("seeds: [0, one]\n", ["seeds: expected a list of non-negative integers", "'one'"]),
    ("config: amp_bf16\n", ["'config' is set per run; use 'configs'"]),
    ("steps: !!python/object/apply:os.system [echo hacked]\n", ["not a valid (safe) YAML file"]),
    ("lr: '0.001'\n", ["lr='0.001' has the wrong type", "without quotes", "lr: 0.001"]),
    ("steps: 1e3\n", ["steps='1e3' has the wrong type: expected int", "steps: 1000"]),
])
def test_bad_study_file_fails_naming_file_key_and_valid_values(tmp_path, text, expected):
    path = _study(tmp_path, text, "bad.yaml")
    with pytest.raises(ConfigError) as e:
        load_study(path)
    for part in [str(path), *expected]:
        assert part in str(e.value)


def test_a_float_in_exponent_form_is_a_float_as_yaml_1_2_reads_it(tmp_path):
    """lr: 1e-3 is text to YAML 1.1 (PyYAML, and papermill's -f): a float field takes it; an
    integer field does not (steps: 1e3 is refused above)."""
    study = load_study(_study(tmp_path, "lr: 1e-3\nweight_decay: 5E-2\n", "exp.yaml"))
    cfg = sweep.plan(study, tmp_path / "executed")[0].spec.cfg
    assert cfg.lr == 0.001 and cfg.weight_decay == 0.05


def test_bad_study_file_runs_nothing(tmp_path, capsys):
    from dtype_bench.cli import main
    path = _study(tmp_path, "configs: [amp_bf17]\n", "bad.yaml")
    assert main(["sweep", str(path), "--out", str(tmp_path / "executed")]) == 2
    assert "amp_bf17" in capsys.readouterr().err
    assert not (tmp_path / "executed").exists()


# ---- planning, selection, commands -------------------------------------------------------
def test_dry_run_prints_the_papermill_commands_and_executes_nothing(tmp_path, capsys):
    assert sweep.main([str(PARAMS / "smoke.yaml"), "--dry_run", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "done 0, to run 18 (new 18)" in out
    assert out.count("papermill ") == 18
    assert "-f " not in out and "-y '{run_config: {scenario: D, config: amp_bf16, seed: 0, size: tiny," in out
    assert not any(tmp_path.iterdir())


def test_filters_select_runs_and_unknown_values_are_named(tmp_path):
    items = sweep.plan(load_study(PARAMS / "smoke.yaml"), tmp_path)
    picked = sweep.select(items, ["A/*", "*/fp16_fp16_states/*"], [], [], [])
    assert len(picked) == 3 + 5  # A's three configs, and the config on the five other scenarios
    assert [i.run_id for i in sweep.select(items, [], ["D"], ["amp_bf16"], [0])] == ["D/amp_bf16/seed0"]
    with pytest.raises(ConfigError, match="--config 'amp_fp16' is not in this study. Valid: amp_bf16"):
        sweep.select(items, [], [], ["amp_fp16"], [])


def test_executed_notebook_and_sidecar_paths(tmp_path):
    item = sweep.select(sweep.plan(load_study(PARAMS / "smoke.yaml"), tmp_path), ["B/amp_bf16/seed0"], [], [], [])[0]
    assert item.notebook == tmp_path / "smoke/runs/B/amp_bf16/seed0.ipynb"
    assert item.result == tmp_path / "smoke/runs/B/amp_bf16/seed0/result.json"
    assert runner.source_notebook("B").name == "01_train_lm.ipynb" and runner.source_notebook("E").name == "02_train_cls.ipynb"


def test_changed_study_settings_make_a_record_stale(tmp_path):
    item = sweep.plan(load_study(PARAMS / "smoke.yaml"), tmp_path)[0]
    rec = runner.error_record(item.spec, item.out_dir, "")
    write_json_atomic(item.result, {**rec, "status": "ok", "run": {**rec["run"], "steps": 99}})
    assert sweep.run_state(item) == ("stale", "parameters changed: steps 99 -> 150")  # A runs 150 steps in smoke


@pytest.mark.parametrize("recorded, installed, state", [(None, "0.49.0", "retry"), (None, None, "done:skipped"),
                                                          ("0.49.0", "0.49.0", "done:skipped")])
def test_a_run_skipped_for_want_of_a_package_runs_again_once_the_package_is_installed(tmp_path, monkeypatch,
                                                                                         recorded, installed, state):
    """F's 8-bit Adam seeds 3-4 at beta2 0.999 were written ``skipped`` on a host without bitsandbytes
    and counted as done ever after. A package present but broken (its version in the record) is not
    retried on every sweep."""
    import importlib.metadata

    def version(pkg):
        if pkg != "bitsandbytes" or installed is None:
            raise importlib.metadata.PackageNotFoundError(pkg)
        return installed
    monkeypatch.setattr(importlib.metadata, "version", version)
    item = sweep.plan(load_study(PARAMS / "smoke.yaml"), tmp_path)[0]
    rec = runner.error_record(item.spec, item.out_dir, "")
    write_json_atomic(item.result, {**rec, "status": "skipped", "sweep": {"wall_s": 0.1},
                                    "env": {**rec["env"], "bitsandbytes": recorded},
                                    "reason": "amp_bf16_8bit_adam needs bitsandbytes.optim (pip install bitsandbytes): "
                                              "ModuleNotFoundError: No module named 'bitsandbytes'"})
    assert sweep.run_state(item)[0] == state


@pytest.mark.parametrize("verb", ["--dry_run", "--status"])
def test_a_compacted_committed_study_says_what_is_left_to_run_without_expanding_it(verb, monkeypatch, capsys):
    """The committed beta2 0.999 encoder study: its table's records done, F's 8-bit Adam seeds 3-4
    skipped for want of bitsandbytes (retried where it is installed); nothing is written."""
    import importlib.metadata

    from benchlib.core.records import load_records
    monkeypatch.setattr(importlib.metadata, "version", lambda pkg: "0.49.0")
    study = REPO / "executed" / "h200" / "reference_real_encoder_b999"
    done = sum(r["status"] != "skipped" for r in load_records(study))
    before = {p: p.stat().st_mtime_ns for p in study.rglob("*")}
    assert sweep.main([str(PARAMS / "reference_real_encoder_b999.yaml"), "--out", str(study.parent), verb]) == 0
    out = capsys.readouterr().out
    if verb == "--dry_run":
        assert re.search(rf"done {done}, to run \d+ \(retry 2", out)
        assert re.search(r"retry\s+F/amp_bf16_8bit_adam/seed3", out)
    else:
        assert re.search(rf"study reference_real_encoder_b999: done {done}, not submitted \d+", out)
    assert {p: p.stat().st_mtime_ns for p in study.rglob("*")} == before


def test_cuda_graphs_asked_of_an_uncompiled_run_is_not_a_change(tmp_path):
    """``cudagraphs: true`` for a scenario reaches bf16_no_compile too, which runs without them
    and records them off: that record stands (a speed study re-ran it every call before)."""
    study = tmp_path / "graphs.yaml"
    for device, compiled, state in [("cuda", "off", "done:ok"), ("cpu", "on", "done:ok"), ("cuda", "on", "stale")]:
        text = (PARAMS / "smoke.yaml").read_text().replace("device: cpu", f"device: {device}")
        study.write_text(text + "\ncudagraphs: true\n")
        item = sweep.plan(load_study(study), tmp_path)[0]
        rec = runner.error_record(item.spec, item.out_dir, "")
        write_json_atomic(item.result, {**rec, "status": "ok", "sweep": {"wall_s": 1.0},
                                        "run": {**rec["run"], "compile": compiled, "cudagraphs": False}})
        assert sweep.run_state(item)[0] == state, (device, compiled)


def test_a_changed_reading_key_updates_finished_records_instead_of_training_again(tmp_path, capsys):
    """judge_quality decides how the analysis reads a run, not what it trains: a study that
    turns it off later keeps its finished runs and updates their records (the old value kept)."""
    study = tmp_path / "speedy.yaml"
    study.write_text((PARAMS / "smoke.yaml").read_text() + "\njudge_quality: false\n")
    items = sweep.plan(load_study(study), tmp_path / "out")
    item = items[0]
    rec = runner.error_record(item.spec, item.out_dir, "")
    rec["run"].pop("judge_quality")  # a record made before the study said so
    write_json_atomic(item.result, {**rec, "status": "stalled", "sweep": {"wall_s": 1.0}})
    assert sweep.run_state(item) == ("done:stalled", "")
    assert sweep.main([str(study), "--out", str(tmp_path / "out"), "--dry_run"]) == 0
    assert "judge_quality" not in read_record(item.result)["run"]  # a dry run changes nothing
    assert sweep.main([str(study), "--out", str(tmp_path / "out"), "--analysis_only", "--no_html",
                       "--no_analysis"]) == 0
    assert line_with(capsys.readouterr().out, "1 finished record", "judge_quality", "True -> False")
    after = read_record(item.result)
    assert after["run"]["judge_quality"] is False and after["run_reading_was"] == {"judge_quality": True}
    assert sweep.run_state(item) == ("done:stalled", "")
    assert runner.refresh_reading(items) == []  # once
    printed = sweep.summary(items)
    assert "quality not judged" in printed and "val_loss" not in printed  # 'stalled' explained, no quality column
    write_sidecar(item.out_dir, after, run={**after["run"], "judge_quality": True})
    assert "quality not judged" not in sweep.summary(items)


def test_error_record_is_a_complete_record(tmp_path):
    item = sweep.plan(load_study(PARAMS / "smoke.yaml"), tmp_path)[0]
    rec = validate(runner.error_record(item.spec, item.out_dir, "kernel died"))
    assert (rec["status"], rec["reason"], rec["run_id"]) == ("error", "kernel died", "A/fp32_baseline/seed0")


# ---- scheduling ------------------------------------------------------------------------------
def test_sweep_timing_counts_all_but_the_steps_as_fixed_cost():
    rec = {"wall_s": 30.0, "metrics": {"time/steps_s": 50.0}}
    t = runner.sweep_timing(rec, 72.5)
    assert t == {"wall_s": 72.5, "fixed_s": 22.5, "notebook_overhead_s": 42.5}
    assert runner.sweep_timing({"wall_s": None, "metrics": {}}, 5.0)["fixed_s"] is None  # a run that died


def test_steps_share_is_step_time_over_slot_time():
    timings = [{"wall_s": 100.0, "fixed_s": 20.0}, {"wall_s": 50.0, "fixed_s": 30.0}, {"wall_s": 9.0, "fixed_s": None}]
    assert runner.steps_share(timings, 200.0) == pytest.approx(0.5)        # 100 s of steps in 200 s
    assert runner.steps_share(timings, 100.0, slots=2) == pytest.approx(0.5)  # two GPUs for 100 s
    assert runner.steps_share([], 10.0) is None


def test_papermill_runs_without_building_the_iri_grammar():
    """jsonschema imports rfc3987_syntax (~1.4 s) for a format no notebook uses: the sweep's
    papermill process and benchlib (imported in every kernel) keep it out."""
    probe = ("import sys; {pre}; import nbformat, altair; "
             "print(type(sys.modules.get('rfc3987_syntax')).__name__)")
    for pre in (runner.PAPERMILL_MAIN.split("; sys.argv")[0], "import benchlib"):
        out = subprocess.run([sys.executable, "-c", probe.format(pre=pre)], capture_output=True, text=True,
                             env=sweep.kernel_env({}), check=True).stdout
        assert out.strip() == "NoneType"  # blocked, or not installed: never imported


def test_cpu_runs_one_at_a_time_whatever_jobs_says():
    assert slots.slots_for(4, []) == [{}]


def test_gpu_slots_pin_one_gpu_each():
    assert slots.slots_for(4, ["0", "1"]) == [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}]
    assert slots.slots_for(1, ["0", "1"]) == [{}]


def test_runs_spread_over_fake_gpus_never_two_on_one():
    busy, peak, seen, lock = {}, [0], [], threading.Lock()
    first_three = threading.Barrier(3, timeout=60)  # broken (the test fails) unless 3 runs are going at once

    def fn(item, slot):
        gpu = slot["CUDA_VISIBLE_DEVICES"]
        with lock:
            assert gpu not in busy, "two runs on one GPU"
            busy[gpu] = item
            peak[0] = max(peak[0], len(busy))
        if item < 3:
            first_three.wait()
        with lock:
            del busy[gpu]
        return gpu

    slots.run_all(list(range(8)), slots.slots_for(3, ["0", "1", "2"]), fn, on_done=lambda i, r: seen.append((i, r)))
    assert sorted(i for i, _ in seen) == list(range(8))
    assert peak[0] == 3 and {r for _, r in seen} == {"0", "1", "2"}


# ---- end to end through papermill --------------------------------------------------------------
@pytest.fixture
def smoke(smoke_study):
    """params/smoke.yaml executed once, end to end (conftest); tests work on copies of its output."""
    return smoke_study[:2]


@pytest.fixture
def smoke_copy(smoke, tmp_path):
    shutil.copytree(smoke[1], tmp_path / "smoke")
    return tmp_path


def test_smoke_study_executes_every_notebook_with_its_record(smoke):
    rc, root = smoke
    assert rc == 0
    records = _records(root)
    assert len(records) == 18
    assert all(r["status"] in FINISHED for r in records.values()), {k: r["reason"] for k, r in records.items()}
    for key, rec in records.items():
        notebook = root / "runs" / f"{key}.ipynb"
        assert notebook.exists() and rec["run_id"] == key
    assert (root / "html/runs/A/amp_bf16/seed0.html").exists()
    index = (root / "html/index.html").read_text()
    assert index.count('href="runs/') == 18


def test_smoke_html_reads_offline_with_collapsed_progress_bars(smoke):
    html = (smoke[1] / "html/runs/D/amp_bf16/seed0.html").read_text()
    assert "data:image/svg+xml," in html and "data:image/png" not in html  # the run's curves: one SVG
    nb = nbformat.read(str(smoke[1] / "runs/D/amp_bf16/seed0.ipynb"), as_version=4)
    charts = [o["data"] for c in nb.cells for o in c.get("outputs", []) if "<chart:" in str(o.get("data", {}))]
    assert len(charts) == 1 and set(charts[0]) == {"text/plain", "image/svg+xml"}  # no spec copying the steps
    assert len(re.findall(r"D/amp_bf16/seed0: +\d+%", html)) == 1  # the bar's last state, its redraws collapsed


def test_rerun_executes_nothing(smoke_copy, capsys, monkeypatch):
    before = _mtimes(smoke_copy / "smoke")
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: pytest.fail("a finished run was executed again"))
    assert sweep.main([str(PARAMS / "smoke.yaml"), "--out", str(smoke_copy), "--no_analysis"]) == 0
    out = capsys.readouterr().out
    assert "done 18, to run 0" in out and "scenario F:" in out
    status_line = next(line for line in out.splitlines() if line.startswith("status: "))
    counts = Counter(r["status"] for r in _records(smoke_copy / "smoke").values())
    assert all(f"{k} {v}" in status_line for k, v in counts.items()), (status_line, counts)
    assert _mtimes(smoke_copy / "smoke") == before


def test_analysis_only_executes_no_run_and_runs_the_analysis(smoke_copy, capsys, monkeypatch):
    (smoke_copy / "smoke/runs/B/amp_bf16/seed0/result.json").unlink()  # one run still to do
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: pytest.fail("--analysis_only executed a run"))
    analysed = []
    monkeypatch.setattr(sweep, "run_analysis", lambda study_dir, slot, arms=False: analysed.append(study_dir) or ([], []))
    assert sweep.main([str(PARAMS / "smoke.yaml"), "--out", str(smoke_copy), "--analysis_only", "--no_html"]) == 0
    out = capsys.readouterr().out
    assert "done 17, to run 1" in out and "--analysis_only: the 1 run to run stay unrun" in out
    assert analysed == [smoke_copy / "smoke"]


def test_deleted_and_corrupted_results_rerun_just_those(smoke_copy, capsys):
    runs = smoke_copy / "smoke" / "runs"
    (runs / "B/amp_bf16/seed0/result.json").unlink()
    (runs / "E/fp32_baseline/seed0/result.json").write_text('{"schema": 1, "status": "ok", "trunc')
    before = _mtimes(smoke_copy / "smoke")
    assert sweep.main([str(PARAMS / "smoke.yaml"), "--out", str(smoke_copy), "--no_analysis", "--no_html"]) == 0
    out = capsys.readouterr().out
    assert "done 16, to run 2 (new 1, corrupt 1)" in out
    assert re.search(r"study efficiency: \d+% of the runs' 1 slot x \d+ s was spent in training steps", out)
    # and where the two runs' time went: a row per scenario (B, E) and one for both, steps first
    table = out[out.index("where the runs' time went"):]
    assert re.search(r"\n\s*runs\s+steps\s+start", table) and re.search(r"\nall\s+2\s+\d+", table), table
    assert re.search(r"\nB\s+1\s+\d+", table) and re.search(r"\nE\s+1\s+\d+", table), table
    after = _mtimes(smoke_copy / "smoke")
    changed = {str(p.parent.relative_to(runs)) for p in after if before.get(p) != after[p]}
    assert changed == {"B/amp_bf16/seed0", "E/fp32_baseline/seed0"}
    assert all(r["status"] in FINISHED for r in _records(smoke_copy / "smoke").values())


def _notebook(path, code):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("scenario = 'C'", metadata={"tags": ["parameters"]}),
                                         nbformat.v4.new_code_cell(code)],
                                  metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(nb, str(path))
    return path


def test_a_failed_analysis_fails_the_sweep_and_names_the_command_that_runs_it_again(tmp_path, monkeypatch, capsys):
    """Its runs' records stand (a rehearsal of reference_real_roberta ended 0 with its analysis failed)."""
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    _notebook(nbs / "10_analyze_experiment.ipynb", "raise RuntimeError('analysis broke in the test')")
    monkeypatch.setattr(sweep, "NOTEBOOK_DIR", nbs)
    path = _study(tmp_path, "scenarios: [A]\nconfigs: [fp32_baseline]\nseeds: [0]\nsize: tiny\nsteps: 2\ndevice: cpu\n")
    item = sweep.plan(load_study(path), tmp_path / "executed")[0]  # a finished run, as a sweep leaves it
    write_json_atomic(item.result, {**runner.error_record(item.spec, item.out_dir, ""), "status": "ok",
                                    "sweep": {"wall_s": 1.0}})
    assert sweep.main([str(path), "--out", str(tmp_path / "executed"), "--analysis_only", "--no_html"]) == 1
    err = capsys.readouterr().err
    assert "analysis failed: 10_analyze_experiment.ipynb" in err and "--analysis_only" in err
    assert _records(tmp_path / "executed" / "mini")["A/fp32_baseline/seed0"]["status"] == "ok"


def test_failed_runs_are_recorded_and_the_others_finish(tmp_path, monkeypatch, capsys):
    broken = {"C": _notebook(tmp_path / "raises.ipynb", "raise RuntimeError('boom from the test')"),
              "D": _notebook(tmp_path / "dies.ipynb", "import os; os._exit(1)")}
    real = runner.source_notebook
    monkeypatch.setattr(runner, "source_notebook", lambda s: broken.get(s) or real(s))
    study = _study(tmp_path, "study: faults\nscenarios: [C, D, A]\nconfigs: [fp32_baseline]\nsteps: 3\ndevice: cpu\n")
    assert sweep.main([str(study), "--out", str(tmp_path / "executed"), "--no_analysis"]) == 1
    records = _records(tmp_path / "executed" / "faults")
    assert records["A/fp32_baseline/seed0"]["status"] in COMPLETED  # ran after the two failures
    raised, died = validate(records["C/fp32_baseline/seed0"]), validate(records["D/fp32_baseline/seed0"])
    assert raised["status"] == died["status"] == "error"
    assert "RuntimeError: boom from the test" in raised["reason"]
    assert "DeadKernelError" in died["reason"]
    assert "2 run(s) ended in error" in capsys.readouterr().err
    # resume: the errors run again, the finished run does not
    assert sweep.main([str(study), "--out", str(tmp_path / "executed"), "--dry_run"]) == 0
    assert "done 1, to run 2 (error 2)" in capsys.readouterr().out


def test_ctrl_c_leaves_no_record_that_looks_finished(tmp_path, monkeypatch, capsys):
    study = _study(tmp_path, "scenarios: [A]\nconfigs: [fp32_baseline, amp_bf16]\nsteps: 3\ndevice: cpu\n")

    def interrupted(cmd, env, log, timeout=None):  # training wrote its record, then Ctrl-C hit a later cell
        out = Path(runner.injected(cmd)["out_dir"])
        item = sweep.plan(load_study(study), tmp_path / "executed")[0]
        write_json_atomic(out / "result.json", {**runner.error_record(item.spec, out, None), "status": "ok"})
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "execute", interrupted)
    assert sweep.main([str(study), "--out", str(tmp_path / "executed")]) == 130
    assert line_with(capsys.readouterr().err, "interrupted", "run again")
    records = _records(tmp_path / "executed" / "mini")
    assert list(records) == ["A/fp32_baseline/seed0"]  # the second run never started
    assert records["A/fp32_baseline/seed0"]["status"] == "error"
    assert "interrupted" in records["A/fp32_baseline/seed0"]["reason"]


def test_a_style_sheet_no_page_links_is_removed(tmp_path):
    from dtype_bench.study.html_export import prune_css
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "a.html").write_text('<link rel="stylesheet" href="../notebook-0123abcd.css">')
    for name in ("notebook-0123abcd.css", "notebook-feedbeef.css"):
        (tmp_path / name).write_text("body{}")
    assert [p.name for p in prune_css(tmp_path)] == ["notebook-feedbeef.css"]
    assert (tmp_path / "notebook-0123abcd.css").exists() and not (tmp_path / "notebook-feedbeef.css").exists()


def test_pages_with_one_table_or_three_share_one_style_sheet(tmp_path):
    """Each table output brings its own copy of pandas' style block; kept once, a page with one
    table and a page with three link the same file (four such files were 1 MiB of the repository)."""
    from dtype_bench.study.html_export import _shared_css
    base, table = "<style>body{margin:0}</style>", "<style scoped>.dataframe th{text-align:right}</style>"
    one = _shared_css(f"<html>{base}<p>x</p>{table}</html>", tmp_path, tmp_path / "one.html")
    three = _shared_css(f"<html>{base}{table}<p>y</p>{table}{table}</html>", tmp_path, tmp_path / "three.html")
    [css] = list(tmp_path.glob("notebook-*.css"))
    assert f'href="{css.name}"' in one and f'href="{css.name}"' in three and "<style" not in one + three
    assert css.read_text().count(".dataframe th") == 1 and "<p>y</p>" in three


def test_the_sweep_leaves_the_record_as_training_wrote_it_and_says_its_part_in_the_sidecar(tmp_path, monkeypatch):
    from conftest import fake_papermill

    from benchlib.core.records import SIDECAR
    study = tmp_path / "two.yaml"
    study.write_text("study: two\nscenarios: [A]\nconfigs: [fp32_baseline]\nseeds: [0, 1]\nsize: tiny\nsteps: 3\n"
                     "device: cpu\n")
    root, written = tmp_path / "executed", {}
    fake = fake_papermill(study, root, {"A/fp32_baseline/seed1": "error"}, [], [0])

    def training(cmd, env, log, timeout=None):  # training writes its record; the notebook then fails for seed 1
        fake(cmd, env, log, timeout)
        out = Path(runner.injected(cmd)["out_dir"])
        written[out.name] = (out / "result.json").read_bytes()
        return 0 if out.name == "seed0" else 1

    monkeypatch.setattr(runner, "execute", training)
    assert sweep.main([str(study), "--out", str(root), "--no_analysis", "--no_html"]) == 1
    for seed in ("seed0", "seed1"):
        folder = root / "two/runs/A/fp32_baseline" / seed
        assert (folder / "result.json").read_bytes() == written[seed]  # not one byte changed by the sweep
        side = json.loads((folder / SIDECAR).read_text())
        assert side["sweep"]["wall_s"] >= 0 and "notebook_overhead_s" in side["sweep"]
        assert read_record(folder / "result.json")["sweep"] == side["sweep"]  # readers see one record
    failed = read_record(root / "two/runs/A/fp32_baseline/seed1/result.json")
    assert failed["status"] == "error" and "papermill exit 1" in failed["reason"]


def test_every_run_is_handed_its_resolved_configuration_in_one_shape(tmp_path):
    """Plain, pretrain, checkpoint-loading runs: papermill injects one ``run_config`` mapping,
    the run's resolved configuration with its folder; a cell's process gets the same mapping."""
    import yaml

    from benchlib.core.runconfig import ResolvedRun, RunConfig
    study = tmp_path / "ft.yaml"
    study.write_text("study: ft\nscenarios: [A, C]\nconfigs: [fp32_baseline]\nseeds: [0]\nsize: tiny\nsteps: 3\n"
                     "device: cpu\npretrain:\n  gpt2: {config: amp_bf16, steps: 5}\n"
                     "overrides:\n  cls: {model_name_or_path: pretrained}\n")
    items = sweep.plan(load_study(study), tmp_path / "executed")
    assert [i.stage for i in items] == ["pretrain", "run", "run"] and items[2].needs is items[0]
    for item in items:
        cmd = runner.papermill_command(item)
        assert cmd[3] == "-y" and list(yaml.safe_load(cmd[4])) == ["run_config"] and len(cmd) == 5
        given = runner.injected(cmd)
        assert given == runner.run_config(item) and given["out_dir"] == runner._rel(item.out_dir)
        cfg = RunConfig.from_dict(given)
        assert cfg.batch_size is not None and cfg.seq_len is not None  # resolved: nothing left to fill
        assert isinstance(runner.resolved(cfg), ResolvedRun)
    assert runner.injected(runner.papermill_command(items[2]))["model_name_or_path"] == runner._rel(items[0].model_dir)


def test_a_missing_corpus_stops_only_a_sweep_that_would_run_on_it(tmp_path, capsys):
    # a study names every scenario's corpus; one built for D alone must not need C's to run D
    (tmp_path / "d").mkdir()
    text = ("study: two\nscenarios: [C, D]\nconfigs: [amp_bf16]\nsize: tiny\n"
            f"overrides:\n  C: {{data: {tmp_path / 'c'}}}\n  D: {{data: {tmp_path / 'd'}}}\n")
    path = _study(tmp_path, text)
    assert sweep.main([str(path), "--dry_run", "--scenario", "D", "--out", str(tmp_path / "out")]) == 0
    assert "D/amp_bf16/seed0" in capsys.readouterr().out
    with pytest.raises(ConfigError) as e:
        sweep.main([str(path), "--out", str(tmp_path / "out"), "--no_analysis", "--no_html"])
    assert e.value.args[0].startswith("C/amp_bf16/seed0: data=") and str(tmp_path / "c") in str(e.value)
    assert not (tmp_path / "out" / "two" / "runs").exists()  # nothing ran
    # the dry run shows the plan all the same (the GPU host may have the corpus) and says what is missing
    capsys.readouterr()
    assert sweep.main([str(path), "--dry_run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "to run 2" in out and "a sweep here would stop: C/amp_bf16/seed0: data=" in out
    with pytest.raises(ConfigError, match="no such file"):  # a run configured on its own is checked at once
        load_study(path).runs()[0].cfg.replace(seed=1)


def test_a_notebook_whose_kernel_died_while_starting_is_started_again_and_a_real_failure_is_not(tmp_path, monkeypatch):
    """Two sweeps on one H200 host started a notebook in the same second; both kernels died before
    any cell ran ("Kernel died before replying to kernel_info") and the runs were recorded as errors."""
    from conftest import fake_papermill

    study = tmp_path / "two.yaml"
    study.write_text("study: two\nscenarios: [A]\nconfigs: [fp32_baseline]\nseeds: [0, 1]\nsize: tiny\nsteps: 3\n"
                     "device: cpu\n")
    root, calls = tmp_path / "executed", []
    fake = fake_papermill(study, root, {}, [], [0])

    def flaky(cmd, env, log, timeout=None):  # seed 0's kernel dies at start once; seed 1's notebook fails in a cell
        seed = Path(runner.injected(cmd)["out_dir"]).name
        calls.append(seed)
        log.parent.mkdir(parents=True, exist_ok=True)
        if seed == "seed0" and calls.count(seed) == 1:
            log.write_text("Traceback ...\nRuntimeError: " + runner.KERNEL_NEVER_STARTED + "\n")
            return 1
        if seed == "seed1":
            log.write_text("Traceback ...\nRuntimeError: " + runner.KERNEL_NEVER_STARTED + " (quoted by a cell)\n")
            fake(cmd, env, log, timeout)  # a cell ran: training wrote its record
            return 1
        return fake(cmd, env, log, timeout)

    monkeypatch.setattr(runner, "execute", flaky)
    monkeypatch.setattr(runner.time, "sleep", lambda s: None)
    assert sweep.main([str(study), "--out", str(root), "--no_analysis", "--no_html"]) == 1
    assert Counter(calls) == {"seed0": 2, "seed1": 1}
    first = read_record(root / "two/runs/A/fp32_baseline/seed0/result.json")
    assert first["status"] == "ok" and first["sweep"]["kernel_restarts"] == 1
    assert read_record(root / "two/runs/A/fp32_baseline/seed1/result.json")["status"] == "error"
