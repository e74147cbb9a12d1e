"""Dtype configurations are data: every name of the seeds, consistent fields, clear errors."""
import pytest
import torch

from benchlib.core.dtypes import ALIASES, REGISTRY, FULL_MATRIX, CORE_SIX, DtypeConfig, UnknownNameError, config_table, get_config

ISSUE_NAMES = ["fp32_baseline", "fp32_tf32_matmul", "amp_fp16", "amp_bf16", "bf16_pure", "bf16_naive", "fp16_naive",
               "fp16_naive_noscale", "amp_fp16_8bit_adam", "amp_bf16_8bit_adam", "bf16_no_compile",
               "amp_bf16_fp32_head", "bf16_body_fp32_head"]


def test_every_seed_config_is_registered():
    for name in ISSUE_NAMES + FULL_MATRIX + CORE_SIX:
        assert get_config(name).name in REGISTRY


def test_fp32_true_is_an_alias_of_the_tf32_off_baseline():
    assert ALIASES["fp32_true"] == "fp32_baseline"
    c = get_config("fp32_true")
    assert c.name == "fp32_baseline" and c.tf32 is False and c.param_dtype == "fp32" and c.autocast_dtype is None


def test_fp16_naive_uses_static_scale_1024_and_noscale_uses_1():
    a, b = get_config("fp16_naive"), get_config("fp16_naive_noscale")
    assert (a.loss_scaling, a.loss_scale) == ("static", 1024.0)
    assert (b.loss_scaling, b.loss_scale) == ("static", 1.0)
    assert a.param_dtype == b.param_dtype == "fp16"


def test_bf16_pure_and_naive_differ_only_in_update_rounding():
    p, n = get_config("bf16_pure").to_dict(), get_config("bf16_naive").to_dict()
    diff = {k for k in p if p[k] != n[k]} - {"name", "description", "definition_hash"}
    assert diff == {"update_rounding"}
    assert p["update_rounding"] == "stochastic" and n["update_rounding"] == "nearest"


def test_compile_ablation_differs_from_bf16_pure_only_in_compile():
    p, n = get_config("bf16_pure").to_dict(), get_config("bf16_no_compile").to_dict()
    assert {k for k in p if p[k] != n[k]} - {"name", "description", "role", "definition_hash"} == {"compile"}


def test_amp_configs_scale_only_fp16():
    assert get_config("amp_fp16").loss_scaling == "dynamic"
    assert get_config("amp_bf16").loss_scaling == "none"
    assert get_config("amp_fp16_8bit_adam").optimizer == "adamw8bit"


def test_fp32_head_configs():
    assert get_config("amp_bf16_fp32_head").head_dtype == "fp32"
    b = get_config("bf16_body_fp32_head")
    assert b.head_dtype == "fp32" and b.param_dtype == "bf16"


def test_configs_differ_only_in_precision_unless_their_name_says_otherwise():
    """One optimizer hyperparameter set for all: only the named eps controls change Adam's eps."""
    eps = {c.name: c.adam_eps for c in REGISTRY.values()}
    assert {n for n, e in eps.items() if e != 1e-8} == {"fp16_fp16_states_eps1e4", "amp_bf16_eps1e4"}
    assert get_config("fp16_naive").adam_eps == get_config("amp_bf16").adam_eps == 1e-8
    ctrl, base = get_config("fp16_fp16_states_eps1e4"), get_config("fp16_fp16_states")
    assert {k for k in base.definition() if base.definition()[k] != ctrl.definition()[k]} == {"adam_eps"}
    assert all(get_config(n).role == "control" for n, e in eps.items() if e != 1e-8)


def test_the_fp16_family_isolates_scaling_from_moment_storage():
    """fp16_naive keeps fp32 moments (it tests loss scaling); fp16_fp16_states is model.half()."""
    naive, noscale, half = (get_config(n) for n in ("fp16_naive", "fp16_naive_noscale", "fp16_fp16_states"))
    assert naive.state_dtypes == noscale.state_dtypes == ("fp32", "fp32")
    assert half.state_dtypes == ("fp16", "fp16")
    assert {k for k in naive.definition() if naive.definition()[k] != noscale.definition()[k]} == {"loss_scale"}
    assert {k for k in naive.definition() if naive.definition()[k] != half.definition()[k]} == {
        "exp_avg_dtype", "exp_avg_sq_dtype"}
    assert noscale.role == "control" and naive.role == half.role == "candidate"


def test_every_definition_is_distinct():
    hashes = [c.definition_hash for c in REGISTRY.values()]
    assert len(set(hashes)) == len(hashes)


def test_an_old_record_is_named_by_what_it_ran():
    """A record written before the moments' storage was a field (fp16 weights, torch AdamW)
    has the definition of fp16_fp16_states, not of today's fp16_naive."""
    from benchlib.core.dtypes import definition_of, hash_definition
    old = {"name": "fp16_naive", "description": "", "param_dtype": "fp16", "autocast_dtype": None,
           "loss_scaling": "static", "loss_scale": 1024.0, "optimizer": "adamw", "update_rounding": "nearest",
           "head_dtype": None, "compile": True, "tf32": True, "adam_eps": 1e-08, "fp8": "none"}
    h = hash_definition(definition_of(old))
    assert h == get_config("fp16_fp16_states").definition_hash != get_config("fp16_naive").definition_hash
    assert get_config("amp_bf16").to_dict()["definition_hash"] == get_config("amp_bf16").definition_hash


# definition hashes that records carry: a field added since must leave every one of them as it was
PINNED_HASHES = {"fp32_baseline": "dc9a512881a1", "amp_fp16": "399cc7e35bee", "amp_bf16": "fb3b6271303d",
                 "bf16_pure": "0139d5442567", "bf16_naive": "d4c4c8eb4270", "fp16_naive": "d4366136591d",
                 "fp16_fp16_states": "bfab7c0dd4fb", "amp_bf16_8bit_adam": "9f142e49d376",
                 "bf16_body_fp32_head": "13bfdc1ba9bc", "amp_bf16_fp8": "3549698f2dbd"}


def test_definition_hashes_that_records_carry_do_not_change():
    from benchlib.core.dtypes import definition_of, hash_definition
    assert {n: get_config(n).definition_hash for n in PINNED_HASHES} == PINNED_HASHES
    # a record written before moment_rounding existed, and one that names its default, hash alike
    old = {k: v for k, v in get_config("bf16_pure").to_dict().items() if k not in ("moment_rounding", "definition_hash")}
    assert hash_definition(definition_of(old)) == PINNED_HASHES["bf16_pure"]
    assert "moment_rounding" not in get_config("bf16_pure").definition()
    assert get_config("bf16_pure_sr_moments").definition()["moment_rounding"] == "stochastic"


def test_the_bf16_second_moment_candidates_differ_from_bf16_pure_in_one_field():
    """At beta2 0.999 a bf16 v rounded to nearest never decays: one candidate stores v in fp32, the
    other writes both moments by stochastic rounding; both right after bf16_pure in the registry."""
    pure = get_config("bf16_pure").definition()
    for name, field, value in (("bf16_pure_fp32v", "exp_avg_sq_dtype", "fp32"),
                               ("bf16_pure_sr_moments", "moment_rounding", "stochastic")):
        c = get_config(name)
        d = c.definition()
        assert {k for k in d.keys() | pure.keys() if d.get(k) != pure.get(k)} == {field} and d[field] == value
        assert c.role == "candidate" and "0.999" in c.description
    assert get_config("bf16_pure_fp32v").state_dtypes == ("bf16", "fp32")
    names = list(REGISTRY)
    assert names[names.index("bf16_pure") + 1:][:2] == ["bf16_pure_fp32v", "bf16_pure_sr_moments"]


@pytest.mark.parametrize("kw", [{"param_dtype": "fp16"}, {"param_dtype": "bf16", "exp_avg_dtype": "fp16"},
                                {"optimizer": "adamw8bit"}])
def test_stochastic_moments_are_refused_where_a_moment_is_not_bf16_or_fp32(kw):
    with pytest.raises(ValueError, match="moment_rounding='stochastic' is implemented for bf16") as e:
        DtypeConfig(name="bad", description="", moment_rounding="stochastic", **kw)
    assert "\n" not in str(e.value)


def test_8bit_moments_go_with_the_8bit_optimizer_only():
    with pytest.raises(ValueError, match="exp_avg_sq_dtype='8bit' goes with optimizer adamw8bit"):
        DtypeConfig(name="bad", description="", exp_avg_sq_dtype="8bit")
    assert get_config("amp_bf16_8bit_adam").state_dtypes == ("8bit", "8bit")


def test_a_non_positive_eps_is_refused():
    with pytest.raises(ValueError, match="adam_eps must be > 0"):
        DtypeConfig(name="bad", description="", param_dtype="fp16", adam_eps=0.0)


@pytest.mark.parametrize("name", ["fp16_naive", "fp16_fp16_states"])
def test_fp16_weights_train_with_eps_1e8(name):
    """eps is applied in fp32 arithmetic (fused AdamW's for fp16 moments, adamw.AdamW's for fp32
    moments): a 1e-8 eps does not become a division by 0."""
    from benchlib.training.precision import build_optimizer
    w = torch.nn.Linear(4, 4).half()
    opt = build_optimizer(w, get_config(name), lr=1e-3, weight_decay=0.0, beta2=0.95,
                          device=torch.device("cpu"))
    before = w.weight.detach().clone()
    w(torch.randn(2, 4).half()).float().pow(2).mean().backward()
    opt.step()
    step = (w.weight.detach() - before).float()
    assert torch.isfinite(step).all() and step.abs().max() <= 2e-3


def test_unknown_name_lists_valid_names_and_the_closest():
    with pytest.raises(UnknownNameError) as e:
        get_config("amp_bf61")
    msg = str(e.value)
    assert "Did you mean 'amp_bf16'" in msg and "fp32_baseline" in msg and "\n" not in msg


def test_config_table_has_a_row_per_config():
    t = config_table()
    assert list(t.index) == list(REGISTRY)
    assert t.loc["fp16_naive", "scaling"] == "static x1024"
