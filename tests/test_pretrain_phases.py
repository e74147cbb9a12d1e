"""A study's pretrain stage in phases (BERT's schedule: short sequences, then long ones): each
phase starts from the one before, the runs load the last, and the sweep, its selection, its
resume and the scheduler's arrays keep that order."""

import pytest
import yaml
from conftest import fake_papermill, line_with

from benchlib.core.records import read_record
from benchlib.core.runconfig import ConfigError
from dtype_bench.study import cluster, runner, sweep
from benchlib.study.studyfile import load_study

PHASED = """study: ft
scenarios: [A, C, D]
configs: [fp32_baseline]
size: tiny
steps: 3
device: cpu
log_every: 1
eval_batches: 1
pretrain:
  gpt2: {config: amp_bf16, steps: 5}
  roberta:
    - {scenario: B, config: fp32_baseline, seq_len: 16, batch_size: 4, steps: 3, min_lr_ratio: 1.0, seed: 1}
    - {seq_len: 32, batch_size: 2, steps: 2, warmup_steps: 1}
overrides:
  cls: {model_name_or_path: pretrained}
"""


def _study(tmp_path, text=PHASED, name="ft.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _one_line(e):
    return "\n" not in str(e.value)


def test_a_list_of_phases_parses_each_phase_inheriting_phase_ones_identity(tmp_path):
    study = load_study(_study(tmp_path))
    assert study.pretrain_phases("gpt2") == 1 and study.pretrain_phases("roberta") == 2
    p1, p2 = (r.cfg for r in study.pretrain_runs()["roberta"])
    assert (p1.scenario, p1.config, p1.seed, p1.seq_len, p1.batch_size, p1.steps, p1.min_lr_ratio) \
        == ("B", "fp32_baseline", 1, 16, 4, 3, 1.0)
    # scenario, config and seed from phase 1; everything else from the study, not from phase 1
    assert (p2.scenario, p2.config, p2.seed, p2.seq_len, p2.batch_size, p2.steps, p2.warmup_steps) \
        == ("B", "fp32_baseline", 1, 32, 2, 2, 1)
    assert p2.min_lr_ratio == type(p2)().min_lr_ratio and p1.save_model and p2.save_model


def test_plan_puts_the_phases_in_order_each_starting_from_the_one_before(tmp_path):
    root = tmp_path / "executed"
    items = runner.plan(load_study(_study(tmp_path)), root)
    assert [i.run_id for i in items] == ["pretrain/gpt2", "pretrain/roberta/phase1", "pretrain/roberta",
                                         "A/fp32_baseline/seed0", "C/fp32_baseline/seed0", "D/fp32_baseline/seed0"]
    g, r1, r2 = items[:3]
    assert [(i.phase, i.arch) for i in (g, r1, r2)] == [(1, "gpt2"), (1, "roberta"), (2, "roberta")]
    assert (g.needs, r1.needs, r2.needs) == (None, None, r1)
    assert r1.notebook == root / "ft.pretrain/roberta.phase1.ipynb" and r1.model_dir == root / "ft.pretrain/roberta.phase1/model"
    assert r2.notebook == root / "ft.pretrain/roberta.ipynb" and r2.model_dir == root / "ft.pretrain/roberta/model"
    assert r1.spec.cfg.model_name_or_path is None and r2.spec.cfg.model_name_or_path == str(r1.model_dir)
    d = items[-1]
    assert d.needs is r2 and d.spec.cfg.model_name_or_path == str(r2.model_dir)
    inline = runner.injected(runner.papermill_command(r2))
    assert inline["model_name_or_path"] == str(r1.model_dir) and inline["seq_len"] == 32


def test_a_single_mapping_or_a_one_phase_list_plans_as_before(tmp_path):
    one = PHASED.replace("    - {seq_len: 32, batch_size: 2, steps: 2, warmup_steps: 1}\n", "")
    mapping = one.replace("  roberta:\n    - {", "  roberta: {")
    plans = [[(i.run_id, i.out_dir, i.spec.params) for i in runner.plan(load_study(_study(tmp_path, t)), tmp_path)]
             for t in (one, mapping)]
    assert plans[0] == plans[1] and plans[0][1][0] == "pretrain/roberta"
    assert "pretrain_phase" not in plans[0][1][2]["extra"]


@pytest.mark.parametrize("edit, expected", [
    (("  roberta:\n    - {scenario: B, config: fp32_baseline, seq_len: 16, batch_size: 4, steps: 3, min_lr_ratio: 1.0, seed: 1}\n"
      "    - {seq_len: 32, batch_size: 2, steps: 2, warmup_steps: 1}\n", "  roberta: []\n"),
     ["pretrain.roberta: an empty list of phases"]),
    (("    - {seq_len: 32", "    - [seq_len, 32]\n    - {seq_len: 32"), ["pretrain.roberta (phase 2): expected a mapping"]),
    (("{seq_len: 32,", "{model_name_or_path: roberta-base, seq_len: 32,"),
     ["pretrain.roberta (phase 2): model_name_or_path: phase 2 starts from phase 1's checkpoint"]),
    (("{seq_len: 32,", "{scenario: D, seq_len: 32,"),
     ["pretrain.roberta (phase 2): scenario 'D': every phase trains the same scenario, phase 1's 'B'"]),
    (("{seq_len: 32,", "{seq_lenn: 32,"), ["pretrain.roberta (phase 2): unknown parameter 'seq_lenn'"]),
    (("{seq_len: 32,", "{save_model: false, seq_len: 32,"), ["pretrain.roberta (phase 2): save_model"]),
    (("{seq_len: 32,", "{strategy: fsdp2, seq_len: 32,"), ["pretrain.roberta (phase 2): dist.strategy 'fsdp2' shards"]),
])
def test_bad_phases_fail_at_load_in_one_line_naming_the_key(tmp_path, edit, expected):
    assert edit[0] in PHASED
    path = _study(tmp_path, PHASED.replace(*edit), "bad.yaml")
    with pytest.raises(ConfigError) as e:
        load_study(path)
    assert _one_line(e)
    for part in [str(path), *expected]:
        assert part in str(e.value)


def test_a_study_file_with_phases_still_parameterises_the_notebooks():
    from benchlib.study import notebook
    ns = {**yaml.safe_load(PHASED), "scenario": "D", "config": "fp32_baseline", "seed": 0}
    cfg = notebook.validate_params(ns, family="cls")  # papermill -f ft.yaml -p scenario D ...
    assert (cfg.scenario, cfg.steps, cfg.model_name_or_path) == ("D", 3, "pretrained")


def test_selecting_an_arch_picks_all_its_phases_and_a_run_pulls_them_all(tmp_path):
    items = runner.plan(load_study(_study(tmp_path)), tmp_path / "executed")
    picked = sweep.select(items, ["pretrain/roberta"], [], [], [])
    assert [(i.run_id, i.pulled) for i in picked] == [("pretrain/roberta/phase1", False), ("pretrain/roberta", False)]
    picked = sweep.select(items, ["D/*"], [], [], [])
    assert [(i.run_id, i.pulled) for i in picked] == [("pretrain/roberta/phase1", True), ("pretrain/roberta", True),
                                                      ("D/fp32_baseline/seed0", False)]
    picked = sweep.select(items, ["pretrain/roberta/phase1"], [], [], [])
    assert [i.run_id for i in picked] == ["pretrain/roberta/phase1"]


def test_phases_run_in_order_resume_and_a_rerun_phase_one_makes_the_rest_stale(tmp_path, monkeypatch, capsys):
    path, root = _study(tmp_path), tmp_path / "executed"
    calls, clock = [], [0]
    argv = [str(path), "--out", str(root), "--no_analysis", "--no_html"]
    monkeypatch.setattr(runner, "execute", fake_papermill(path, root, {"pretrain/roberta/phase1": "error"}, calls, clock))
    assert sweep.main(argv) == 1
    assert calls == ["pretrain/gpt2", "pretrain/roberta/phase1", "A/fp32_baseline/seed0", "C/fp32_baseline/seed0"]
    r2 = read_record(root / "ft.pretrain/roberta/result.json")  # phase 2 waits for phase 1, D for phase 2
    assert r2["status"] == "skipped" and r2["sweep"]["waiting_for"] == "pretrain/roberta/phase1"
    assert read_record(root / "ft/runs/D/fp32_baseline/seed0/result.json")["sweep"]["waiting_for"] == "pretrain/roberta"
    capsys.readouterr()

    # resume: phase 1 again, then phase 2, then D; nothing finished runs again
    calls.clear()
    monkeypatch.setattr(runner, "execute", fake_papermill(path, root, {}, calls, clock))
    assert sweep.main(argv) == 0
    assert calls == ["pretrain/roberta/phase1", "pretrain/roberta", "D/fp32_baseline/seed0"]
    p1 = read_record(root / "ft.pretrain/roberta.phase1/result.json")
    p2 = read_record(root / "ft.pretrain/roberta/result.json")
    assert p2["sweep"]["pretrained"]["run"] == "pretrain/roberta/phase1" and p2["sweep"]["pretrained"]["date"] == p1["env"]["date"]
    assert p2["run"]["model_name_or_path"] == str(root / "ft.pretrain/roberta.phase1/model")
    d = read_record(root / "ft/runs/D/fp32_baseline/seed0/result.json")
    assert d["sweep"]["pretrained"]["run"] == "pretrain/roberta" and d["run"]["model_name_or_path"] == str(root / "ft.pretrain/roberta/model")
    calls.clear()
    assert sweep.main(argv) == 0 and calls == []
    capsys.readouterr()

    # phase 1 trained again: phase 2 is stale, and D with it
    assert sweep.main(argv + ["--only", "pretrain/roberta/phase1", "--force"]) == 0
    assert calls == ["pretrain/roberta/phase1"]
    capsys.readouterr()
    items = {i.run_id: i for i in runner.plan(load_study(path), root)}
    assert items["pretrain/roberta"].state == "stale" and "retrained" in items["pretrain/roberta"].detail
    assert items["D/fp32_baseline/seed0"].state == "stale" and "pretrain/roberta runs again" in items["D/fp32_baseline/seed0"].detail
    assert items["C/fp32_baseline/seed0"].state == "done:ok"
    calls.clear()
    assert sweep.main(argv) == 0
    assert calls == ["pretrain/roberta", "D/fp32_baseline/seed0"]


def test_dry_run_and_status_list_the_phases(tmp_path, capsys):
    path, root = _study(tmp_path), tmp_path / "executed"
    assert sweep.main([str(path), "--dry_run", "--out", str(root)]) == 0
    out = capsys.readouterr().out
    assert "pretrain stage first in 2 phases" in out
    # each phase on its own line: its phase, the run whose settings it takes, its steps, its state
    assert line_with(out, "pretrain/roberta/phase1 ", "1 of 2", "B/fp32_baseline/seed1", "3 steps", "new")
    assert line_with(out, "pretrain/roberta ", "2 of 2", "B/fp32_baseline/seed1", "2 steps", "new")
    assert line_with(out, "pretrain/gpt2 ", "A/amp_bf16/seed0", "5 steps", "new")
    assert "starts from pretrain/roberta/phase1's checkpoint" in out
    assert out.index("pretrain/roberta/phase1") < out.index("  new           pretrain/roberta  ")
    pytest.importorskip("submitit")
    assert sweep.main([str(path), "--status", "--out", str(root)]) == 0
    out = capsys.readouterr().out
    assert "pretrain/roberta/phase1" in out and "not submitted" in out


def test_slurm_submits_one_array_per_phase_each_after_the_one_before(tmp_path, fake_slurm):
    path, root = _study(tmp_path), tmp_path / "executed"
    study, items = load_study(path), runner.plan(load_study(path), tmp_path / "executed")
    assert [(stage, [i.run_id for i in runs]) for stage, _, runs in cluster.arrays(items, study.executor)] == [
        ("pretrain.phase1", ["pretrain/gpt2", "pretrain/roberta/phase1"]), ("pretrain.phase2", ["pretrain/roberta"]),
        ("run", ["A/fp32_baseline/seed0"]), ("run", ["C/fp32_baseline/seed0", "D/fp32_baseline/seed0"])]
    assert sweep.main([str(path), "--out", str(root), "--executor", "slurm"]) == 0
    (k1, _, p1, r1), (k2, _, p2, r2), (k3, _, p3, r3), (k4, _, p4, r4), (k5, _, p5, _) = [
        (k, f, p, [a[2] for a in args] if k == "array" else args) for k, f, p, args in fake_slurm]
    assert (r1, "dependency" in p1, p1["job_name"]) == (["pretrain/gpt2", "pretrain/roberta/phase1"], False,
                                                        "dtype-bench.ft.pretrain.phase1")
    assert (r2, p2["dependency"], p2["job_name"]) == (["pretrain/roberta"], "afterany:41", "dtype-bench.ft.pretrain.phase2")
    assert (r3, "dependency" in p3) == (["A/fp32_baseline/seed0"], False)
    assert (r4, p4["dependency"]) == (["C/fp32_baseline/seed0", "D/fp32_baseline/seed0"], "afterany:41:42")
    assert k5 == "job" and p5["dependency"] == "afterany:41:42:43:44"


def test_slurm_dry_run_shows_each_phases_array_and_its_dependency(tmp_path, capsys):
    pytest.importorskip("submitit")
    path, root = _study(tmp_path), tmp_path / "executed"
    assert sweep.main([str(path), "--out", str(root), "--executor", "slurm", "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert "--- pretrain.phase1 array: 2 task(s)" in out and "--- pretrain.phase2 array: 1 task(s)" in out
    assert "--dependency='afterany:<the pretrain.phase1 array>'" in out
    assert "--dependency='afterany:<the pretrain.phase1 array>:<the pretrain.phase2 array>'" in out


def test_a_real_two_phase_sweep_hands_phase_ones_checkpoint_to_phase_two_and_phase_twos_to_the_fine_tune(tmp_path):
    # below base width a RoBERTa's position rows are sized to its first run's seq_len (base keeps
    # 514 at any length), so at tiny the second phase here is the shorter one (D reads 64 tokens): the
    # hand-off is the point
    text = (PHASED.replace("scenarios: [A, C, D]", "scenarios: [D]").replace("  gpt2: {config: amp_bf16, steps: 5}\n", "")
            .replace("seq_len: 32", "seq_len: 48").replace("seq_len: 16", "seq_len: 64"))
    path, root = _study(tmp_path, text), tmp_path / "executed"
    assert sweep.main([str(path), "--out", str(root), "--no_analysis", "--no_html"]) == 0
    p1 = read_record(root / "ft.pretrain/roberta.phase1/result.json")
    p2 = read_record(root / "ft.pretrain/roberta/result.json")
    d = read_record(root / "ft/runs/D/fp32_baseline/seed0/result.json")
    assert p1["status"] != "error" and p2["status"] != "error" and d["status"] != "error", (p1, p2, d)
    assert p2["run"]["seq_len"] == 48 and p2["run"]["model_name_or_path"] == str(root / "ft.pretrain/roberta.phase1/model")
    assert p2["pretrained"]["checkpoint"]["run_id"] == p1["run_id"] and p2["pretrained"]["checkpoint"]["steps"] == 3
    assert d["run"]["model_name_or_path"] == str(root / "ft.pretrain/roberta/model")
    assert d["pretrained"]["checkpoint"]["steps"] == 2 and d["sweep"]["pretrained"]["run"] == "pretrain/roberta"
