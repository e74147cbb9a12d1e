"""``dtype-bench infer-table``: records of ``infer`` (run here at tiny on the CPU) become one
table with each mode's speed-up and quality difference against the fp32 mode of the same
weights, untrained weights are marked, and bad input is refused in one line."""
import json

import pandas as pd
import pytest

from benchlib.analysis.inference_table import load, table
from benchlib.cli import main as cli_main
from benchlib.training import inference as inf
from benchlib.training.loop import run


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("inference")
    train = {"scenario": "A", "config": "fp32_baseline", "steps": 4, "eval_batches": 2, "seed": 1, "save_model": True}
    run(train, out_dir=root / "a_train", progress=False)
    inf.infer({**train, "save_model": False, "model_name_or_path": str(root / "a_train" / "model")},
              ["fp32", "bf16", "autocast_bf16"], out_dir=root / "infer_A", iters=2, prompt_len=8, new_tokens=4)
    inf.infer({"scenario": "D", "eval_batches": 1}, ["fp32", "bf16"], out_dir=root / "infer_D", iters=2)
    return root


def test_each_mode_is_compared_with_the_fp32_mode_of_the_same_weights(records):
    t = table(load([records]))
    assert list(t["scenario"]) == ["A"] * 3 + ["D"] * 2
    fp32 = t[t["mode"] == "fp32"]
    assert (fp32["speedup_vs_fp32"] == 1).all() and (fp32["quality_minus_fp32"] == 0).all()
    a = t[t["scenario"] == "A"].set_index("mode")
    assert a.loc["bf16", "speedup_vs_fp32"] == pytest.approx(a.loc["fp32", "forward_ms"] / a.loc["bf16", "forward_ms"])
    assert a.loc["bf16", "quality_minus_fp32"] == pytest.approx(a.loc["bf16", "quality"] - a.loc["fp32", "quality"])
    assert a["decode_ms_per_token"].notna().all() and a["quality_metric"].eq("val_loss").all()
    d = t[t["scenario"] == "D"]
    assert d["weights"].eq("untrained").all() and d["quality_metric"].eq("p_at_1").all()
    assert d["decode_ms_per_token"].isna().all()
    assert a["weights"].eq("a_train/model").all()
    assert t["forward_stat"].eq("median").all()


def test_a_record_from_before_the_median_reads_as_the_mean(records, tmp_path):
    rec = json.loads((records / "infer_D" / "inference.json").read_text())
    for m in rec["modes"]:
        m.pop("forward_stat")
    (tmp_path / "inference.json").write_text(json.dumps(rec))
    assert table(load([tmp_path]))["forward_stat"].eq("mean").all()


def test_the_command_writes_the_table_and_chart(records, tmp_path, capsys):
    assert cli_main(["infer-table", str(records), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "`untrained`: weights never trained" in out and "| A | a_train/model | bf16 | ok |" in out
    assert len(pd.read_csv(tmp_path / "inference.csv")) == 5
    spec = json.loads((tmp_path / "inference.vl.json").read_text())
    assert "vconcat" in spec  # the decode panel beside the forward one


def test_bad_input_is_one_line(tmp_path, capsys):
    assert cli_main(["infer-table", str(tmp_path / "nowhere")]) != 0
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "inference.json").write_text(json.dumps({"kind": "training"}))
    assert cli_main(["infer-table", str(tmp_path / "x")]) != 0
    assert "not a record of dtype-bench infer (kind 'training')" in capsys.readouterr().err
