"""A run stopped part-way continues from its saved training state (``state_every``) and ends
as the run that was never stopped would have."""
import pytest

from benchlib.core.records import read_record, read_steps
from benchlib.core.runconfig import ConfigError, RunConfig, resolved
from benchlib.training import loop
from benchlib.training.loop import run
from benchlib.training.resume import STATE_FILE, STEP_FILE, saved_share


class Killed(BaseException):
    """What a job's time limit or a preemption does to the process: nothing after it runs."""


def kill_at(monkeypatch, step: int) -> None:
    """Stop the run at the start of ``step`` (the loop asks for each step's learning rate once)."""
    real = loop.lr_at

    def lr_at(s, *a, **kw):
        if s == step:
            raise Killed()
        return real(s, *a, **kw)
    monkeypatch.setattr(loop, "lr_at", lr_at)


def rows(path):
    return [r for r in read_steps(path / "steps.jsonl") if "loss" in r]


@pytest.mark.parametrize("scenario, config", [("A", "fp32_baseline"), ("B", "amp_fp16"), ("D", "amp_bf16")])
def test_a_stopped_run_continues_from_its_state_and_ends_as_the_uninterrupted_run(tmp_path, monkeypatch,
                                                                                   scenario, config):
    """B draws MLM masks from the sampler's generator and scales its loss dynamically, D trains a
    classification head under autocast: the batches, the optimizer and the scaler all continue
    where they were (losses equal to the last bit on CPU)."""
    cfg = {"scenario": scenario, "config": config, "steps": 12, "log_every": 3, "eval_batches": 1}
    whole = run(cfg, out_dir=tmp_path / "whole", progress=False)

    out = tmp_path / "stopped"
    kill_at(monkeypatch, 8)
    with pytest.raises(Killed):
        run({**cfg, "state_every": 5}, out_dir=out, progress=False)
    assert (out / STATE_FILE).exists() and not (out / "result.json").exists()
    # what a sweep's time budget reads: the steps the state holds (0-4 of 12), without loading it
    run_id = resolved(RunConfig.from_dict(cfg)).run_id
    assert saved_share(out, run_id, 12) == pytest.approx(5 / 12)
    assert saved_share(out, run_id, 24) == 0.0  # a longer run: not this state
    monkeypatch.undo()
    (out / "steps.jsonl").unlink()  # a sweep deletes a run's step log before running it again

    rec = run({**cfg, "state_every": 5}, out_dir=out, progress=False)
    assert rec["resumed"]["from_step"] == 5 and rec["status"] == whole["status"]
    assert [r["step"] for r in rows(out)] == list(range(12))
    assert [r["loss"] for r in rows(out)] == [r["loss"] for r in rows(tmp_path / "whole")]
    assert rec["metrics"]["quality"] == whole["metrics"]["quality"]
    assert rec["metrics"]["timed_steps"] <= 12 - 5  # speed: the steps this process ran
    assert not (out / STATE_FILE).exists() and read_record(out / "result.json")["resumed"]["from_step"] == 5
    assert not (out / STEP_FILE).exists()


def test_a_state_saved_under_other_settings_is_not_loaded_and_the_record_says_why(tmp_path, monkeypatch):
    cfg = {"scenario": "A", "config": "fp32_baseline", "steps": 8, "log_every": 2, "eval_batches": 1, "state_every": 2}
    kill_at(monkeypatch, 5)
    with pytest.raises(Killed):
        run(cfg, out_dir=tmp_path, progress=False)
    monkeypatch.undo()
    rec = run({**cfg, "lr": 1e-3}, out_dir=tmp_path, progress=False)
    assert rec["resumed"]["from_step"] == 0 and "other settings" in rec["resumed"]["not_loaded"]
    assert [r["step"] for r in rows(tmp_path)] == list(range(8))


def test_a_run_that_is_not_stopped_saves_and_then_removes_its_state(tmp_path):
    rec = run({"scenario": "A", "config": "fp32_baseline", "steps": 6, "log_every": 3, "eval_batches": 1,
               "state_every": 2}, out_dir=tmp_path, progress=False)
    assert rec["metrics"]["time/state_s"] > 0 and "resumed" not in rec
    assert not (tmp_path / STATE_FILE).exists()


@pytest.mark.parametrize("bad, words", [({"state_every": -1}, "state_every must be >= 0"),
                                        ({"state_every": 10, "dist": {"strategy": "ddp"}}, "single' only")])
def test_state_every_is_checked(bad, words):
    with pytest.raises(ConfigError, match=words):
        RunConfig.from_dict({"scenario": "A", "config": "amp_bf16", **bad})


def test_a_study_that_starts_saving_state_does_not_run_its_finished_runs_again():
    """``state_every`` changes nothing a step computes: a record without it is not stale."""
    from dtype_bench.study.runner import stale_keys
    ran = {"run": RunConfig(scenario="A", config="amp_bf16", steps=10).to_dict()}
    assert stale_keys(ran, {"scenario": "A", "config": "amp_bf16", "steps": 10, "state_every": 500}) == []
    assert stale_keys(ran, {"scenario": "A", "config": "amp_bf16", "steps": 20}) == ["steps 10 -> 20"]


def test_a_fine_tune_with_dropout_continues_with_the_random_generator_where_it_was(tmp_path, monkeypatch):
    """A checkpoint with dropout 0.1 (from-scratch models have none): the resumed run draws the
    same dropout masks as the uninterrupted one only if the generator's state was restored."""
    import torch
    from transformers import RobertaConfig, RobertaModel
    torch.manual_seed(0)
    RobertaModel(RobertaConfig(vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=64, max_position_embeddings=80, pad_token_id=1,
                               hidden_dropout_prob=0.1)).save_pretrained(tmp_path / "ckpt")
    cfg = {"scenario": "D", "config": "fp32_baseline", "steps": 10, "log_every": 5, "eval_batches": 1,
           "seq_len": 64, "model_name_or_path": str(tmp_path / "ckpt")}
    run(cfg, out_dir=tmp_path / "whole", progress=False)
    kill_at(monkeypatch, 7)
    with pytest.raises(Killed):
        run({**cfg, "state_every": 4}, out_dir=tmp_path / "stopped", progress=False)
    monkeypatch.undo()
    rec = run({**cfg, "state_every": 4}, out_dir=tmp_path / "stopped", progress=False)
    assert rec["resumed"]["from_step"] == 4
    assert [r["loss"] for r in rows(tmp_path / "stopped")] == [r["loss"] for r in rows(tmp_path / "whole")]


def test_a_run_told_its_deadline_is_near_saves_once_at_its_next_logged_step_and_continues_from_there(
        tmp_path, monkeypatch):
    """A sweep's time budget hands its runs ``STATE_BY_ENV``: past it, a run with state_every saves at
    its next logged step, once, though no state_every step came; cut after that, it continues from
    there and ends as the run never stopped would have."""
    import time
    from benchlib.training.resume import STATE_BY_ENV, saved_step
    cfg = {"scenario": "A", "config": "fp32_baseline", "steps": 12, "log_every": 3, "eval_batches": 1}
    whole = run(cfg, out_dir=tmp_path / "whole", progress=False)
    out = tmp_path / "cut"
    monkeypatch.setenv(STATE_BY_ENV, f"{time.time() - 1:.3f}")  # already past: the first logged step saves
    kill_at(monkeypatch, 8)
    with pytest.raises(Killed):
        run({**cfg, "state_every": 100}, out_dir=out, progress=False)  # no periodic save within 12 steps
    assert saved_step(out)["step"] == 0  # step 0 is logged; steps 2 and 5 (logged too) saved nothing more
    monkeypatch.undo()
    (out / "steps.jsonl").unlink()
    rec = run({**cfg, "state_every": 100}, out_dir=out, progress=False)
    assert rec["resumed"]["from_step"] == 1
    assert [r["loss"] for r in rows(out)] == [r["loss"] for r in rows(tmp_path / "whole")]
    assert rec["metrics"]["quality"] == whole["metrics"]["quality"]


def test_without_state_every_a_deadline_saves_nothing(tmp_path, monkeypatch):
    import time
    from benchlib.training.resume import STATE_BY_ENV
    monkeypatch.setenv(STATE_BY_ENV, f"{time.time() - 1:.3f}")
    kill_at(monkeypatch, 5)
    with pytest.raises(Killed):
        run({"scenario": "A", "config": "fp32_baseline", "steps": 8, "log_every": 2, "eval_batches": 1},
            out_dir=tmp_path, progress=False)
    assert not (tmp_path / STATE_FILE).exists()


def test_a_run_cut_after_a_save_leaves_the_seconds_of_steps_it_kept_for_the_sweeps_efficiency(tmp_path, monkeypatch):
    """A call's efficiency counts the steps of a run its deadline cut, as far as the saved state
    keeps them (``resume.STEP_FILE``'s ``steps_s`` and ``date``), and only a state saved during this
    sweep: one left by an earlier call is that call's."""
    import time
    from types import SimpleNamespace
    from benchlib.training.resume import saved_step
    from dtype_bench.study import runner
    since = time.time()
    kill_at(monkeypatch, 9)
    out = tmp_path / "cut"
    with pytest.raises(Killed):
        run({"scenario": "A", "config": "fp32_baseline", "steps": 12, "state_every": 4, "eval_batches": 1},
            out_dir=out, progress=False)
    s = saved_step(out)
    assert s["step"] == 7 and s["date"] >= since and 0 < s["steps_s"] < time.time() - since
    item = SimpleNamespace(out_dir=out, result=out / "result.json", stored=None)
    assert runner.cut_steps_s([item], since) == (pytest.approx(s["steps_s"]), 1)
    assert runner.cut_steps_s([item], time.time() + 1) == (0.0, 0)
    assert runner.steps_share([], 10.0, 2, s["steps_s"]) == pytest.approx(s["steps_s"] / 20)
    assert runner.steps_share([], 10.0, 2) is None
