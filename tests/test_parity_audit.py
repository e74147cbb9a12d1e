"""The dtype parity audit (benchlib/parallel/audit.py) on the CPU: 2 gloo ranks under torchrun and
one process over the same global batch, a tiny GPT-2, 3 steps. Where the numerics must match they
do (fp32 under every strategy, amp_bf16 under DDP and FSDP2 with mp=autocast); a strategy that
reduces gradients in bf16 is a mismatch naming the quantity; a combination a strategy cannot run
is reported skipped with the strategy's reason; the verdicts catch a loss off its tolerance."""
import json

import pandas as pd
import pytest

from benchlib.parallel import audit

PAIRS = [("fp32_baseline", "ddp"), ("fp32_baseline", "fsdp2"), ("fp32_baseline", "fsdp1"),
         ("fp32_baseline", "fsdp_manual"), ("amp_bf16", "ddp"), ("amp_bf16", "fsdp2"),
         ("amp_bf16", "fsdp2_mp_autocast"), ("amp_bf16", "fsdp2_reduce_bf16"), ("amp_bf16_8bit_adam", "fsdp2"),
         ("amp_bf16_8bit_adam", "fsdp2_local_shards"), ("amp_fp16", "fsdp_manual")]


@pytest.fixture(scope="module")
def cpu_audit(tmp_path_factory):
    return audit.audit(pairs=PAIRS, steps=3, out=tmp_path_factory.mktemp("audit"), device="cpu",
                       timeout_s=300, echo=lambda s: None)


def _rows(res, policy, strategy, quantity):
    t = res.table
    return t[(t["policy"] == policy) & (t["strategy"] == strategy) & (t["quantity"] == quantity)]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2", "fsdp1", "fsdp_manual"])
def test_fp32_matches_single_under_every_strategy(cpu_audit, strategy):
    v = cpu_audit.verdict("fp32_baseline", strategy)
    assert v["verdict"] == "match", v["differences"] or v["reason"]
    assert v["dtypes_equal"] and v["loss_max_rel_diff"] <= audit.LOSS_RTOL["fp32"]
    # both ranks captured every quantity the comparison reads
    ranks = _rows(cpu_audit, "fp32_baseline", strategy, "exp_avg")["rank"]
    assert set(ranks) == {0, 1}
    assert set(_rows(cpu_audit, "fp32_baseline", strategy, "grad_reduce")["value"]) == {"fp32"}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2_mp_autocast"])
def test_amp_bf16_matches_single_where_weights_are_gathered_in_fp32(cpu_audit, strategy):
    v = cpu_audit.verdict("amp_bf16", strategy)
    assert v["verdict"] == "match", v["differences"] or v["reason"]
    assert set(_rows(cpu_audit, "amp_bf16", strategy, "master_weight")["value"]) == {"fp32"}


@pytest.mark.slow
def test_loss_scaled_fp16_steps_under_a_sharded_scaler_with_fused_adamw(cpu_audit):
    """The sharded loss scaler's inf flag reaches fused AdamW's 0-dim step counters (it failed to
    broadcast there): amp_fp16 trains under manual FSDP, its optimizer state and loss like single's."""
    v = cpu_audit.verdict("amp_fp16", "fsdp_manual")
    assert v["verdict"] != "error", v["reason"]
    assert v["loss_max_rel_diff"] <= audit.LOSS_RTOL["fp16"]
    assert set(_rows(cpu_audit, "amp_fp16", "fsdp_manual", "exp_avg")["value"]) == {"fp32"}


@pytest.mark.slow
def test_a_bf16_gradient_reduction_is_a_mismatch_naming_grad_reduce(cpu_audit):
    v = cpu_audit.verdict("amp_bf16", "fsdp2_reduce_bf16")
    assert v["verdict"] == "mismatch" and not v["dtypes_equal"]
    assert "grad_reduce" in v["differences"]
    assert set(_rows(cpu_audit, "amp_bf16", "fsdp2_reduce_bf16", "grad_reduce")["value"]) == {"bf16"}
    assert set(_rows(cpu_audit, "amp_bf16", "single", "grad_reduce")["value"]) == {"fp32"}
    # the policy's own FSDP2 reduces in fp32: its difference from single is elsewhere
    assert "grad_reduce" not in cpu_audit.verdict("amp_bf16", "fsdp2")["differences"]


@pytest.mark.slow
def test_fsdp2_mixed_precision_policy_is_not_autocast(cpu_audit):
    """By design (strategies.mp_dtypes): FSDP2 gathers every weight in bf16, so the forward reads
    bf16 weights and the local gradients are bf16; they are reduced in fp32 into fp32 shards."""
    v = cpu_audit.verdict("amp_bf16", "fsdp2")
    assert v["verdict"] == "mismatch"
    named = {d.split(":")[0] for d in v["differences"].split("; ")}
    assert {"forward_weight", "grad_local"} <= named
    assert not named & {"param", "grad", "grad_reduce", "exp_avg", "exp_avg_sq", "master_weight"}
    assert v["loss_within"]


@pytest.mark.slow
def test_a_combination_the_strategy_cannot_run_is_skipped_with_its_reason(cpu_audit):
    v = cpu_audit.verdict("amp_bf16_8bit_adam", "fsdp2")
    assert v["verdict"] == "skipped" and "DTensor" in v["reason"]
    assert cpu_audit.verdict("amp_bf16_8bit_adam", "single")["verdict"] == "reference"
    # on plain local shards 8-bit Adam steps under FSDP2, differing from one process only as FSDP's
    # mixed-precision policy does under amp_bf16 (weights read in bf16), its loss within tolerance
    local = cpu_audit.verdict("amp_bf16_8bit_adam", "fsdp2_local_shards")
    assert local["verdict"] in ("match", "mismatch") and local["loss_within"], local
    assert "grad_reduce" not in str(local.get("differences")) and "exp_avg" not in str(local.get("differences"))


@pytest.mark.slow
def test_the_command_writes_the_table_and_summary(cpu_audit, tmp_path, monkeypatch, capsys):
    asked = {}
    monkeypatch.setattr(audit, "audit", lambda *a, **k: asked.update(args=a) or cpu_audit)  # the runs above
    assert audit.main(["--out", str(tmp_path), "--policies", "fp32_baseline,amp_bf16", "--strategies", "ddp",
                       "fsdp2", "--steps", "2", "--device", "cpu"]) == 0
    assert asked["args"][:3] == (["fp32_baseline", "amp_bf16"], ["ddp", "fsdp2"], 2)
    table = pd.read_csv(tmp_path / "table.csv")
    assert {"policy", "strategy", "rank", "quantity", "name", "value"} <= set(table.columns)
    assert set(table["quantity"]) >= {"param", "grad", "grad_local", "grad_reduce", "exp_avg", "exp_avg_sq",
                                      "loss", "master_weight"}
    assert len(json.loads((tmp_path / "table.json").read_text())) == len(table)
    summary = (tmp_path / "summary.md").read_text()
    assert "| fp32_baseline | single | reference |" in summary
    assert "**mismatch**: forward_weight, output, grad_local, grad_reduce" in summary  # amp_bf16 x fsdp2_reduce_bf16
    assert pd.read_csv(tmp_path / "verdicts.csv")["verdict"].tolist() == cpu_audit.verdicts["verdict"].tolist()


# ---- names and verdicts, no process started ----------------------------------------------
@pytest.mark.parametrize("flag,bad,hint", [("--policies", "amp_bf15", "amp_bf16"), ("--strategies", "fsdp3", "fsdp2")])
def test_a_bad_name_is_one_line_naming_it_and_the_closest(tmp_path, capsys, flag, bad, hint):
    assert audit.main(["--out", str(tmp_path), flag, bad]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and repr(bad) in err and f"Did you mean {hint!r}" in err


def _table(loss_here, exp_avg_here="fp32", ranks_here=("fp32", "fp32")):
    rows = []
    for strategy, losses, moment, per_rank in (("single", [5.0, 4.0, 3.0], "fp32", ("fp32",)),
                                               ("ddp", loss_here, exp_avg_here, ranks_here)):
        rows.append({"policy": "fp32_baseline", "strategy": strategy, "rank": None, "quantity": "status",
                     "name": "", "value": "ok", "note": ""})
        for r, dt in enumerate(per_rank):
            rows += [{"policy": "fp32_baseline", "strategy": strategy, "rank": r, "quantity": q, "name": "w",
                      "value": v, "note": ""} for q, v in (("param", dt), ("exp_avg", moment))]
        rows += [{"policy": "fp32_baseline", "strategy": strategy, "rank": None, "quantity": "loss",
                  "name": str(i), "value": x, "note": ""} for i, x in enumerate(losses)]
    return pd.DataFrame(rows)


def test_the_verdict_matches_within_the_tolerance_and_names_what_breaks_parity():
    assert audit.verdicts(_table([5.0, 4.0, 3.00001]))["verdict"].tolist() == ["reference", "match"]
    loss = audit.verdicts(_table([5.0, 4.0, 3.01])).iloc[1]
    assert loss["verdict"] == "mismatch" and loss["dtypes_equal"] and not loss["loss_within"]
    assert "step 2" in loss["differences"] and loss["loss_max_rel_diff"] == pytest.approx(0.01 / 3)
    moment = audit.verdicts(_table([5.0, 4.0, 3.0], exp_avg_here="bf16")).iloc[1]
    assert moment["verdict"] == "mismatch" and moment["differences"].startswith("exp_avg:")
    assert "single fp32, here bf16" in moment["differences"]
    ranks = audit.verdicts(_table([5.0, 4.0, 3.0], ranks_here=("fp32", "bf16"))).iloc[1]
    assert "param: ranks disagree" in ranks["differences"]
    short = audit.verdicts(_table([5.0, 4.0])).iloc[1]
    assert "2 steps logged, single 3" in short["differences"]
