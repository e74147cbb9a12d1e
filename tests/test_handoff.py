"""The pretrain -> fine-tune hand-off through train.run, at tiny size."""
from benchlib.training.loop import run


def test_a_saved_lm_run_is_fine_tuned_and_a_wrong_checkpoint_is_an_error_record_in_one_line(tmp_path):
    a = run({"scenario": "A", "config": "amp_bf16", "steps": 4, "log_every": 2, "save_model": True},
            out_dir=tmp_path / "A", progress=False)
    assert a["checkpoint"] == str(tmp_path / "A" / "model")
    c = run({"scenario": "C", "config": "bf16_pure", "steps": 3, "log_every": 3, "model_name_or_path": a["checkpoint"]},
            out_dir=tmp_path / "C", progress=False)
    info = c["pretrained"]
    assert c["status"] != "error" and info["loaded_fraction"] == 1.0
    assert info["checkpoint"]["run_id"] == "A/amp_bf16/seed0" and info["checkpoint"]["steps"] == 4
    d = run({"scenario": "D", "config": "amp_bf16", "steps": 3, "model_name_or_path": a["checkpoint"]},
            out_dir=tmp_path / "D", progress=False)
    assert d["status"] == "error" and "\n" not in d["reason"] and "scenario D needs an encoder" in d["reason"]
