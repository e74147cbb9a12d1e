"""The source notebooks: committed clean, parameterised for papermill, and executable as-is
(tiny model, synthetic data, CPU); a bad injected parameter stops at the validation cell."""
import ast
import math

import nbformat
import pytest
from conftest import COMPLETED, REPO, papermill

from benchlib.core.records import read_record
from benchlib.core.runconfig import RunConfig

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
TRAINING = {"01_train_lm.ipynb": "A", "02_train_cls.ipynb": "D"}


def _read(name):
    return nbformat.read(str(REPO / "notebooks" / name), as_version=4)


def _parameters_cell(nb):
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    return tagged[0]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_source_notebooks_carry_no_outputs(path):
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: a code cell has outputs"
            assert cell.execution_count is None, f"{path.name}: a code cell has an execution count"


@pytest.mark.parametrize("name", TRAINING)
def test_training_notebook_validates_right_after_its_parameters(name):
    nb = _read(name)
    i = _parameters_cell(nb)
    following = next(c for c in nb.cells[i + 1:] if c.cell_type == "code")
    assert "nb.validate_params(globals()" in following.source


@pytest.mark.parametrize("name", TRAINING)
def test_parameters_cell_defaults_are_runconfigs_defaults(name):
    # the sweep validates a study against RunConfig's defaults; the notebook must run the same
    nb = _read(name)
    src = nb.cells[_parameters_cell(nb)].source
    values = {t.targets[0].id: ast.literal_eval(t.value) for t in ast.parse(src).body}
    defaults = RunConfig().to_dict()
    assert values.pop("scenario") == TRAINING[name]
    assert values.pop("run_config") is None  # what a sweep injects: the whole configuration
    assert values == {k: defaults[k] for k in values}
    assert values["size"] == "tiny" and values["data"] == "synthetic" and values["device"] == "auto"


def test_plain_papermill_run_shows_everything_and_writes_the_sidecar(tmp_path):
    out = tmp_path / "out.ipynb"
    p = papermill(str(REPO / "notebooks/01_train_lm.ipynb"), str(out), "-p", "config", "amp_bf16",
                  "-p", "seed", "1", "-p", "steps", "8", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    sidecar = read_record(tmp_path / "result.json")  # next to the executed notebook
    assert sidecar["run_id"] == "A/amp_bf16/seed1" and sidecar["status"] in COMPLETED
    text = out.read_text()
    outputs = [o for c in nbformat.reads(text, as_version=4).cells for o in c.get("outputs", [])]
    assert any("GPU:" in o.get("text", "") and "torch" in o.get("text", "") for o in outputs)  # environment
    curves = [o["data"] for o in outputs if "<chart: A/amp_bf16/seed1" in str(o.get("data", {}).get("text/plain"))]
    # by hand or plain papermill: the interactive chart, and a PNG readable offline
    assert len(curves) == 1 and "application/vnd.vegalite.v5+json" in curves[0] and "image/png" in curves[0]
    assert any("A/amp_bf16/seed1:" in o.get("text", "") and "%|" in o.get("text", "") for o in outputs)  # progress
    # the result: status, quality beside the trivial baseline's and the verdict, forensics
    m = sidecar["metrics"]
    summary = next(o["text"] for o in outputs if o.get("text", "").startswith("status: "))
    assert summary.startswith(f"status: {sidecar['status']}")
    assert f"val loss {m['quality/val_loss']:.4g}" in summary and f"vs unigram {m['baseline/val_loss']:.4g}" in summary
    assert ("did not clearly beat it" in summary) == (sidecar["status"] == "stalled")
    assert "forensics (mean over logged steps): grads exactly 0" in summary
    # the record is shown, and not stored a second time in the notebook
    kinds = {k for o in outputs for k in o.get("data", {})}
    assert kinds <= {"text/plain", "text/html", "text/markdown", "image/png", "image/svg+xml",
                     "application/vnd.vegalite.v5+json"}, kinds


def test_study_file_as_papermill_parameters_applies_its_settings(tmp_path):
    out = tmp_path / "out.ipynb"
    p = papermill("notebooks/02_train_cls.ipynb", str(out), "-f", "params/smoke.yaml",
                  "-p", "scenario", "E", "-p", "config", "fp32_baseline", "-p", "out_dir", str(tmp_path / "run"))
    assert p.returncode == 0, p.stderr[-3000:]
    rec = read_record(tmp_path / "run" / "result.json")
    assert rec["run_id"] == "E/fp32_baseline/seed0"
    assert (rec["run"]["steps"], rec["run"]["device"], rec["run"]["log_every"]) == (30, "cpu", 5)
    assert rec["run"]["extra"] == {"study": "smoke"}


@pytest.mark.parametrize("args, expected", [
    (["-p", "seeed", "1"], ["unknown parameter 'seeed'", "Did you mean 'seed'?"]),
    (["-p", "steps", "many"], ["steps='many'", "expected int"]),
    (["-p", "scenario", "C"], ["scenario='C'", "02_train_cls.ipynb"]),
])
def test_bad_injected_parameter_fails_at_validation_naming_it(tmp_path, args, expected):
    out = tmp_path / "out.ipynb"
    p = papermill("notebooks/01_train_lm.ipynb", str(out), *args)
    assert p.returncode != 0
    for text in expected:
        assert text in p.stderr
    nb = nbformat.read(str(out), as_version=4)
    failed = [c for c in nb.cells if c.get("metadata", {}).get("papermill", {}).get("exception")]
    assert len(failed) == 1 and "validate_params" in failed[0].source  # nothing trained
    assert not (REPO / "result.json").exists()


def test_quickstart_runs_as_is(tmp_path):
    out = tmp_path / "quickstart.ipynb"
    p = papermill(str(REPO / "notebooks/00_quickstart.ipynb"), str(out), "-p", "steps", "6",
                  "-y", "configs: [fp32_baseline, amp_bf16]", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    for config in ("fp32_baseline", "amp_bf16"):
        assert read_record(tmp_path / "A" / config / "seed0" / "result.json")["status"] in COMPLETED
    outputs = [o for c in nbformat.read(str(out), as_version=4).cells for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs)


def test_a_run_started_at_the_repository_root_writes_under_runs_not_the_root(monkeypatch, tmp_path):
    from benchlib.core.runconfig import RunConfig
    from benchlib.study.notebook import default_out_dir
    cfg = RunConfig.from_dict({"scenario": "A", "config": "amp_bf16", "seed": 1})
    monkeypatch.chdir(REPO)
    assert default_out_dir(cfg) == REPO / "runs" / cfg.run_id
    monkeypatch.chdir(REPO / "notebooks")
    assert default_out_dir(cfg) == REPO / "runs" / cfg.run_id
    monkeypatch.chdir(tmp_path)  # anywhere else: beside the executed notebook
    assert default_out_dir(cfg) == tmp_path


def test_notebooks_show_paths_relative_to_the_repository(tmp_path):
    from benchlib.study.notebook import repo_path
    assert repo_path(REPO / "executed" / "h200" / "quick" / "A") == "executed/h200/quick/A"
    assert repo_path(tmp_path / "x") == str(tmp_path / "x")  # outside the repository: as given


def test_compared_runs_differ_in_dash_so_coinciding_curves_stay_visible():
    import pandas as pd
    from benchlib.study.notebook import curves_chart
    frame = pd.DataFrame({"step": [1, 2, 1, 2], "metric": "loss", "value": [3.0, 2.0, 3.0, 2.0],
                          "run": ["fp32_baseline", "fp32_baseline", "amp_bf16", "amp_bf16"]})
    panel = curves_chart(frame, color="run").to_dict()["vconcat"][0]
    assert panel["encoding"]["strokeDash"]["field"] == panel["encoding"]["color"]["field"] == "run"


def test_a_long_run_is_charted_binned_with_its_spike_and_loss_scale_drop_kept():
    # a 6,000-step log once stopped the run notebook: Altair refuses more than 5,000 rows
    import numpy as np
    import pandas as pd
    from benchlib.study.notebook import MAX_POINTS, curves_chart, curves_frame
    n = 6000
    steps = pd.DataFrame({"step": range(n), "loss": np.linspace(9.0, 3.0, n), "grad_norm": 1.0, "loss_scale": 65536.0})
    steps.loc[3001, "grad_norm"], steps.loc[4000, "loss_scale"] = 50.0, 1024.0
    steps.loc[10, "loss"] = float("nan")
    frame = curves_frame(steps, "amp_fp16")
    per_metric = frame.groupby("metric")["value"]
    assert per_metric.size().max() <= MAX_POINTS
    assert per_metric.max()["grad_norm"] == 50.0 and per_metric.min()["loss_scale"] == 1024.0
    width = math.ceil(n / MAX_POINTS)  # a bin's loss is the mean of its steps
    assert per_metric.min()["loss"] == pytest.approx(steps["loss"].iloc[n - width:].mean())
    assert (frame["run"] == "amp_fp16").all()
    assert len(curves_chart(frame).to_dict()["vconcat"]) == 3  # no MaxRowsError
    short = curves_frame(steps.head(MAX_POINTS))
    assert sorted(short.loc[short["metric"] == "loss", "step"]) == [s for s in range(MAX_POINTS) if s != 10]  # not binned


def test_a_sweep_run_is_injected_its_resolved_configuration_alone_and_papermill_knows_it(tmp_path):
    """One tiny run through the sweep: the injected cell assigns ``run_config`` and nothing else,
    papermill finds it among the notebook's parameters, and the record trained with it."""
    from benchlib.core.records import SIDECAR
    from benchlib.core.runconfig import resolved
    from dtype_bench.study import sweep
    study = tmp_path / "one.yaml"
    study.write_text("study: one\nscenarios: [A]\nconfigs: [fp32_baseline]\nseeds: [0]\nsize: tiny\nsteps: 3\n"
                     "lr: 0.002\ndevice: cpu\n")
    root = tmp_path / "executed"
    assert sweep.main([str(study), "--out", str(root), "--no_analysis", "--no_html"]) == 0
    run = root / "one/runs/A/fp32_baseline"
    log = (run / "seed0/papermill.log").read_text()
    assert "Executing" in log and "Passed unknown parameter" not in log
    injected = [c for c in nbformat.read(str(run / "seed0.ipynb"), as_version=4).cells
                if "injected-parameters" in c.metadata.get("tags", [])]
    assigned = [t.targets[0].id for t in ast.parse(injected[0].source).body]
    assert len(injected) == 1 and assigned == ["run_config"]
    rec = read_record(run / "seed0/result.json")
    assert rec["status"] in COMPLETED and rec["run"]["lr"] == 0.002
    assert rec["run"]["batch_size"] == resolved(RunConfig(size="tiny")).batch_size  # resolved before it was injected
    assert (run / "seed0/result.json").stat().st_mtime_ns <= (run / "seed0" / SIDECAR).stat().st_mtime_ns


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_an_analysis_notebook_opens_on_a_committed_study(path):
    """Run All on a fresh clone: a notebook's default ``study_dir`` is a study folder in git."""
    import subprocess
    nb = nbformat.read(str(path), as_version=4)
    body = ast.parse(nb.cells[_parameters_cell(nb)].source).body
    values = {t.target.id if isinstance(t, ast.AnnAssign) else t.targets[0].id: ast.literal_eval(t.value)
              for t in body if isinstance(t, (ast.Assign, ast.AnnAssign)) and t.value is not None}
    if "study_dir" not in values:
        pytest.skip("no study_dir parameter")
    tracked = subprocess.run(["git", "ls-files", values["study_dir"]], cwd=REPO, capture_output=True, text=True).stdout
    assert tracked.strip(), f"{path.name}: study_dir {values['study_dir']!r} is not a committed folder"
