"""Resuming from records made on another machine (a GPU host's chunk, packed, unpacked and
committed here): other absolute paths inside, and no checkpoints. Papermill is faked."""
import shutil

import pytest
from conftest import fake_papermill, line_with

from benchlib.core.records import SIDECAR, read_record, write_sidecar
from dtype_bench.study import runner, sweep
from benchlib.study.studyfile import load_study

STUDY = """study: ft
scenarios: [A, C, D]
configs: [fp32_baseline]
seeds: [0, 1]
size: tiny
steps: 3
device: cpu
pretrain:
  gpt2: {config: amp_bf16, steps: 5}
  roberta:
    - {scenario: B, config: fp32_baseline, seq_len: 16, steps: 3, seed: 1}
    - {seq_len: 32, steps: 2}
overrides:
  cls: {model_name_or_path: pretrained}
"""
FOREIGN = "/tmp/repo/executed"  # where the host kept the study


@pytest.fixture
def carried(tmp_path, monkeypatch):
    """The study finished elsewhere, then carried here as pack carries it: its records say
    where they were made (out_dir, the checkpoints they loaded), and no model/ came along."""
    path, there, here = tmp_path / "ft.yaml", tmp_path / "there", tmp_path / "here"
    path.write_text(STUDY)
    monkeypatch.setattr(runner, "execute", fake_papermill(path, there, {}, [], [0]))
    assert sweep.main([str(path), "--out", str(there), "--no_analysis", "--no_html"]) == 0
    shutil.copytree(there, here, ignore=shutil.ignore_patterns("model"))
    for rec in [*here.rglob("result.json"), *here.rglob(SIDECAR)]:
        rec.write_text(rec.read_text().replace(str(there), FOREIGN))
    calls = []
    monkeypatch.setattr(runner, "execute", fake_papermill(path, here, {}, calls, [50]))
    return path, here, calls


def test_records_from_another_machine_count_as_finished(carried, capsys):
    path, here, calls = carried
    d0 = read_record(here / "ft/runs/D/fp32_baseline/seed0/result.json")
    assert d0["run"]["out_dir"].startswith(FOREIGN) and d0["run"]["model_name_or_path"].startswith(FOREIGN)
    assert sweep.main([str(path), "--out", str(here), "--no_analysis", "--no_html"]) == 0
    out = capsys.readouterr().out
    assert calls == []  # no papermill call
    assert "done 9, to run 0" in out and "trained again" not in out
    assert line_with(out, "pretrain/gpt2", "checkpoint", "not here")


def test_a_lost_checkpoint_is_made_again_only_for_the_runs_still_to_run(carried, capsys):
    path, here, calls = carried
    (here / "ft/runs/D/fp32_baseline/seed1/result.json").unlink()  # one run that loads roberta's still to run
    old = read_record(here / "ft.pretrain/roberta/result.json")["env"]["date"]
    assert sweep.main([str(path), "--out", str(here), "--no_analysis", "--no_html"]) == 0
    out = capsys.readouterr().out
    # roberta's last phase starts from phase 1's checkpoint, lost too; gpt2's is needed by no run
    assert calls == ["pretrain/roberta/phase1", "pretrain/roberta", "D/fp32_baseline/seed1"]
    assert ("pretrain/roberta: its record is here but not its checkpoint " + str(here / "ft.pretrain/roberta/model")
            + " (checkpoints are not carried between machines): trained again for D/fp32_baseline/seed1") in out
    new = read_record(here / "ft.pretrain/roberta/result.json")
    assert new["sweep"]["lost_checkpoints"] == [old] and new["env"]["date"] != old
    # D seed 0 loaded the lost checkpoint: still finished, nothing stale
    assert sweep.main([str(path), "--out", str(here), "--dry_run"]) == 0
    assert "done 9, to run 0" in capsys.readouterr().out
    assert {i.run_id: i.state for i in runner.plan(load_study(path), here)}["D/fp32_baseline/seed0"] == "done:ok"


def test_runs_that_loaded_a_remade_checkpoint_stay_finished_when_the_old_record_comes_back(carried, capsys):
    """A GPU host gets the committed (old) pretrain record back with every job but keeps the
    checkpoint it remade: the runs that loaded that checkpoint are not stale (32 fine-tunes
    of the reference study ran twice for this)."""
    path, here, calls = carried
    (here / "ft/runs/D/fp32_baseline/seed1/result.json").unlink()
    committed = {f: (here / "ft.pretrain/roberta" / f).read_text() for f in ("result.json", SIDECAR)}
    assert sweep.main([str(path), "--out", str(here), "--no_analysis", "--no_html"]) == 0
    assert calls[-1] == "D/fp32_baseline/seed1"
    for f, text in committed.items():  # the next job's copy of the tree
        (here / "ft.pretrain/roberta" / f).write_text(text)
    items = {i.run_id: i for i in runner.plan(load_study(path), here)}
    assert items["D/fp32_baseline/seed1"].state == "done:ok" and items["D/fp32_baseline/seed0"].state == "done:ok"
    # a run that loaded a checkpoint neither the record nor the disk knows is stale
    rec = read_record(here / "ft/runs/D/fp32_baseline/seed1/result.json")
    rec["sweep"]["pretrained"]["date"] = "2030-02-02T00:00:00+00:00"
    write_sidecar(here / "ft/runs/D/fp32_baseline/seed1", rec, sweep=rec["sweep"])
    items = {i.run_id: i for i in runner.plan(load_study(path), here)}
    assert items["D/fp32_baseline/seed1"].state == "stale" and "retrained" in items["D/fp32_baseline/seed1"].detail


def test_a_config_added_after_the_checkpoint_was_lost_says_its_seeds_finished_runs_will_not_pair(carried, capsys):
    """A study file gains a config (a control) after its runs were carried here: the new runs load a
    new checkpoint, which the seed's finished runs did not; the plan says so and how to run them all
    again, before any GPU time goes into runs the analysis would not pair."""
    path, here, calls = carried
    path.write_text(STUDY.replace("configs: [fp32_baseline]", "configs: [fp32_baseline, amp_bf16_eps1e4]")
                    .replace("scenarios: [A, C, D]", "scenarios: [A, D]"))
    assert sweep.main([str(path), "--out", str(here), "--dry_run"]) == 0
    out = capsys.readouterr().out
    line = line_with(out, "pretrain/roberta", "trained again for", "D/amp_bf16_eps1e4/seed0", "--force_before")
    assert "2 finished runs" in line and "D/fp32_baseline/seed0" in line and calls == []


def test_the_plan_says_when_a_quality_study_has_no_positive_control(tmp_path, capsys):
    base = "study: s\nscenarios: [A]\nseeds: [0]\nsize: tiny\nsteps: 2\ndevice: cpu\n"
    plans = {}
    for name, extra in {"bare": "configs: [fp32_baseline, amp_bf16]\n",
                        "controlled": "configs: [fp32_baseline, amp_bf16, amp_bf16_eps1e4]\n",
                        "speed": "configs: [fp32_baseline, amp_bf16]\njudge_quality: false\n"}.items():
        (tmp_path / f"{name}.yaml").write_text(base + extra)
        assert sweep.main([str(tmp_path / f"{name}.yaml"), "--out", str(tmp_path / "out"), "--dry_run"]) == 0
        plans[name] = capsys.readouterr().out
    assert line_with(plans["bare"], "no positive control on A", "amp_bf16_eps1e4")
    assert "positive control" not in plans["controlled"] and "positive control" not in plans["speed"]


def test_a_sweep_whose_notebooks_cannot_start_here_says_so_before_any_run(tmp_path, monkeypatch, capsys):
    """A GPU image without papermill: the pretrain (always a notebook) would fail first and leave the
    runs that load it waiting; the sweep refuses in one line instead, naming the runs and the fix,
    and a dry run (planning elsewhere) is not refused."""
    import importlib.util
    path = tmp_path / "ft.yaml"
    path.write_text(STUDY)
    calls = []
    monkeypatch.setattr(runner, "execute", fake_papermill(path, tmp_path / "out", {}, calls, [0]))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "papermill" else real(name, *a))
    from dtype_bench.cli import main
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--no_analysis", "--no_html"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "papermill" in err and "pretrain/" in err and "dtype-bench[study]" in err
    assert calls == [] and not list((tmp_path / "out").rglob("result.json"))
    assert sweep.main([str(path), "--out", str(tmp_path / "out"), "--dry_run"]) == 0
