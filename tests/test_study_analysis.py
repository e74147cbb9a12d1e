"""What a study's analysis answers: ``analysis:`` in the study file picks the analysis notebooks
the sweep executes after the runs (scenario tables by default, scaling for a study with arms,
or arm-cost / fp8-sizes / serving), a bad name is one line, and each of the three question
notebooks runs under papermill on records and writes its table and chart."""
import shutil

import pytest
from conftest import REPO, papermill

from dtype_bench.study import runner, sweep
from benchlib.study.studyfile import ANALYSES, load_study

TINY = "scenarios: [A]\nconfigs: [fp32_baseline]\nseeds: [0]\nsize: tiny\nsteps: 4\ndevice: cpu\n"


def _load(tmp_path, text):
    path = tmp_path / "s.yaml"
    path.write_text(TINY + text)
    return load_study(path)


def test_the_default_is_the_scenario_tables_or_scaling_for_a_study_with_arms(tmp_path):
    assert _load(tmp_path, "").analyses == ["scenarios"]
    assert _load(tmp_path, "arms: {single: {}}\n").analyses == ["scaling"]
    assert _load(tmp_path, "arms: {plain: {}}\nanalysis: arm-cost\n").analyses == ["arm-cost"]
    assert _load(tmp_path, "analysis: [scenarios, serving, scenarios]\n").analyses == ["scenarios", "serving"]


@pytest.mark.parametrize("value,expected", [
    ("fp8_sizes", "Did you mean 'fp8-sizes'?"),
    ("[]", "analysis: expected a name or a list of names"),
])
def test_a_bad_analysis_is_refused_in_one_line_naming_it(tmp_path, value, expected):
    with pytest.raises(ValueError) as e:
        _load(tmp_path, f"analysis: {value}\n")
    assert expected in str(e.value) and "\n" not in str(e.value) and value in str(e.value)


def test_every_analysis_has_its_notebooks():
    assert list(sweep.ANALYSIS_NOTEBOOKS) == list(ANALYSES)
    for notebooks in sweep.ANALYSIS_NOTEBOOKS.values():
        for name in notebooks:
            assert (REPO / "notebooks" / name).is_file(), name


def test_the_sweep_executes_only_the_notebooks_of_the_studys_analyses(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(runner, "execute", lambda cmd, env, log: ran.append(cmd[1]) or 0)
    sweep.run_analysis(tmp_path, {}, ["fp8-sizes"])
    assert ran == ["notebooks/22_fp8_sizes.ipynb"]
    ran.clear()
    sweep.run_analysis(tmp_path, {}, ["scenarios", "serving"])
    assert ran == ["notebooks/10_analyze_experiment.ipynb", "notebooks/11_compare_experiments.ipynb",
                   "notebooks/23_serving.ipynb"]


@pytest.mark.parametrize("params", ["checkpointing", "fp8_sizes", "serve"])
def test_the_committed_study_files_name_their_question(params):
    expected = {"checkpointing": ["arm-cost"], "fp8_sizes": ["fp8-sizes"], "serve": ["scenarios", "serving"]}
    assert load_study(REPO / "params" / f"{params}.yaml").analyses == expected[params]


def _runs(tmp_path, name, spec):
    """A tiny CPU study (``spec`` laid over ``TINY``) run by the sweep without its analysis."""
    path = tmp_path / f"{name}.yaml"
    text = TINY if "configs:" not in spec else TINY.replace("configs: [fp32_baseline]\n", "")
    path.write_text(f"study: {name}\n" + text + "eval_batches: 1\ntiming_windows: 2\nlog_every: 2\n" + spec)
    assert sweep.main([str(path), "--out", str(tmp_path / "executed"), "--no_analysis", "--no_html"]) == 0
    return tmp_path / "executed" / name


@pytest.mark.timeout(600)
@pytest.mark.parametrize("notebook,spec,outputs", [
    ("21_arm_cost.ipynb", "arms:\n  plain: {}\n  checkpointed: {activation_checkpointing: true}\n",
     ["arm_cost/arm_cost.csv", "arm_cost/arm_cost.md"]),
    ("22_fp8_sizes.ipynb", "arms:\n  tiny: {size: tiny}\nconfigs: [amp_bf16, amp_bf16_fp8]\n",
     ["fp8/fp8_sizes.csv", "fp8/fp8_sizes.md"]),
    ("23_serving.ipynb", "serve_modes: fp32,bf16\n", ["serve/serve.csv", "serve/serve_runs.csv"]),
])
def test_each_question_notebook_runs_on_a_studys_records(tmp_path, notebook, spec, outputs):
    study = _runs(tmp_path, notebook.split("_", 1)[1].split(".")[0], spec)
    out = tmp_path / notebook
    p = papermill(str(REPO / "notebooks" / notebook), str(out), "-p", "study_dir", str(study))
    assert p.returncode == 0, p.stderr[-3000:]
    for rel in outputs:
        assert (study / rel).is_file(), rel
    assert "Traceback" not in out.read_text()


def test_the_serving_notebook_reads_the_committed_infer_study(tmp_path):
    """Its default: `dtype-bench infer`'s five modes of one trained GPT-2, each against fp32 weights."""
    import pandas as pd
    study = tmp_path / "infer"
    shutil.copytree(REPO / "executed" / "h100" / "inference_2026-11-23", study, ignore=shutil.ignore_patterns("serve"))
    p = papermill(str(REPO / "notebooks/23_serving.ipynb"), str(tmp_path / "23.ipynb"), "-p", "study_dir", str(study))
    assert p.returncode == 0, p.stderr[-3000:]
    served = pd.read_csv(study / "serve" / "serve.csv").set_index("mode")
    assert sorted(served.index) == ["autocast_bf16", "autocast_fp16", "bf16", "fp16"]  # fp32 is the baseline
    assert (served["change_pct"].abs() < 0.05).all()  # its README: val loss 2.9917-2.9919 in all five modes


def test_the_fp8_notebook_reads_the_committed_h100_study(tmp_path):
    committed = REPO / "executed" / "h100" / "fp8_sizes"
    if not committed.is_dir():
        pytest.skip("no committed fp8_sizes study")
    study = tmp_path / "fp8_sizes"
    shutil.copytree(committed, study, ignore=shutil.ignore_patterns("*.ipynb", "fp8", "html"))  # its records, not its outputs
    out = tmp_path / "22.ipynb"
    p = papermill(str(REPO / "notebooks/22_fp8_sizes.ipynb"), str(out), "-p", "study_dir", str(study))
    assert p.returncode == 0, p.stderr[-3000:]
    text = out.read_text()  # per arm: the default micro-batches, and xl at 16k tokens per micro-batch
    assert "amp_bf16_fp8 (arm=default): pays at none of the sizes measured (base, medium, large, xl)" in text
    assert "amp_bf16_fp8 (arm=xl_16k): pays from xl" in text
