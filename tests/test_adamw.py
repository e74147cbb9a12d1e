"""The AdamW that stores each moment and rounds each weight as a configuration says
(``training.adamw``): its reference equals torch's AdamW where both apply, every configuration
stores its moments as configured, fp16 weights with fp32 moments train, stochastic rounding is
unbiased, its state survives a save and a resume, the Triton kernel computes the reference's
function, and the 8-bit optimizer's step modes compute bitsandbytes' numbers."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchlib.core.dtypes import REGISTRY, TORCH_DTYPES, get_config
from benchlib.training.adamw import AdamW
from benchlib.training.adamw_reference import random_bits16, stochastic_round_to_bf16
from benchlib.training.precision import build_optimizer, uses_torch_adamw

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[1]


def _grads(shape, gen):
    """Gradients spread over six decades, as real ones are (never zeros)."""
    return torch.randn(shape, generator=gen) * 10 ** torch.empty(shape).uniform_(-6, 0, generator=gen)


def test_the_reference_equals_torch_adamw_for_fp32_weights_and_states():
    gen = torch.Generator().manual_seed(0)
    w0 = torch.randn(1000, 10, generator=gen)
    ours, theirs = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    o = AdamW([ours], lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    t = torch.optim.AdamW([theirs], lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=False)
    for _ in range(30):
        g = _grads(w0.shape, gen)
        ours.grad, theirs.grad = g.clone(), g.clone()
        o.step()
        t.step()
    assert o.impl == "reference" and not torch.equal(ours, w0)
    # the same function; torch orders a few operations differently (lerp, addcdiv): a few fp32 ulps
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=0, atol=1e-6)
    for k in ("exp_avg", "exp_avg_sq"):
        a, b = o.state[ours][k], t.state[theirs][k]
        assert a.dtype == b.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * b.abs().max().item())
    assert float(o.state[ours]["step"]) == float(t.state[theirs]["step"]) == 30


class _Model(torch.nn.Module):
    """A body matrix, a bias and a head, in the configuration's dtypes (as ``build_model`` casts)."""

    def __init__(self, dtype):
        super().__init__()
        self.body = torch.nn.Linear(64, 64).to(dtype.torch_param_dtype)
        self.head = torch.nn.Linear(64, 8, bias=False).to(TORCH_DTYPES[dtype.head_dtype or dtype.param_dtype])


ADAMW_CONFIGS = [n for n, c in REGISTRY.items() if c.optimizer == "adamw"]


@pytest.mark.parametrize("name", ADAMW_CONFIGS)
def test_every_config_stores_its_moments_as_configured(name):
    dtype = get_config(name)
    model = _Model(dtype)
    opt = build_optimizer(model, dtype, lr=1e-3, weight_decay=0.1, beta2=0.95, device=CPU)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    for p in model.parameters():
        st = opt.state[p]
        for key, field in (("exp_avg", dtype.exp_avg_dtype), ("exp_avg_sq", dtype.exp_avg_sq_dtype)):
            assert st[key].dtype == (TORCH_DTYPES[field] if field else p.dtype), (name, key, p.dtype)
    # torch's fused AdamW exactly where it does what the configuration says
    assert isinstance(opt, AdamW) != uses_torch_adamw(model, dtype)
    assert isinstance(opt, AdamW) == (name in {"fp16_naive", "fp16_naive_noscale", "bf16_pure", "bf16_no_compile",
                                               "bf16_body_fp32_head", "bf16_pure_fp32v", "bf16_pure_sr_moments"})
    assert not isinstance(opt, AdamW) or all(g["moment_rounding"] == dtype.moment_rounding for g in opt.param_groups)


def test_fp16_naive_keeps_fp32_moments_on_fp16_weights_and_bf16_pure_keeps_bf16():
    for name, weights, moments in (("fp16_naive", torch.float16, torch.float32),
                                   ("bf16_pure", torch.bfloat16, torch.bfloat16)):
        model = _Model(get_config(name))
        opt = build_optimizer(model, get_config(name), 1e-3, 0.0, 0.95, CPU)
        model.body.weight.grad = torch.randn_like(model.body.weight)
        opt.step()
        st = opt.state[model.body.weight]
        assert model.body.weight.dtype == weights
        assert st["exp_avg"].dtype == st["exp_avg_sq"].dtype == moments


def test_a_small_gradient_squared_is_stored_as_zero_in_fp16_and_kept_in_fp32():
    """|g| = 1e-4: (1 - 0.95) g^2 = 5e-10, below fp16's smallest subnormal (6e-8). fp16 moments
    (fp16_fp16_states, model.half() with torch AdamW) store 0 after every step; fp32 moments
    (fp16_naive) accumulate it. With v stored as 0 each step sees only its own (1 - b2) g^2, so
    the steps stay ~1/sqrt(1 - b2) = 4.5 times Adam's instead of settling at lr."""
    v, last = {}, {}
    for name in ("fp16_fp16_states", "fp16_naive"):
        w = torch.nn.Linear(1, 1, bias=False).half()
        with torch.no_grad():
            w.weight.fill_(0.25)  # fp16 spacing 2^-13 there: a step of lr = 1e-3 is ~8 spacings
        opt = build_optimizer(w, get_config(name), 1e-3, 0.0, 0.95, CPU)
        for _ in range(30):
            w.weight.grad = torch.full_like(w.weight, 1e-4)
            before = w.weight.detach().float().clone()
            opt.step()
        v[name] = float(opt.state[w.weight]["exp_avg_sq"])
        last[name] = (before - w.weight.detach().float()).item()
    assert v["fp16_fp16_states"] == 0.0
    assert v["fp16_naive"] == pytest.approx(1e-8 * (1 - 0.95**30), rel=1e-3)
    assert last["fp16_naive"] == pytest.approx(1e-3, rel=0.1)
    assert last["fp16_fp16_states"] == pytest.approx(1e-3 / 0.05**0.5, rel=0.15)


def test_fp16_weights_with_fp32_moments_train_at_tiny_size(tmp_path):
    from benchlib.training.loop import run
    rec = run({"scenario": "A", "config": "fp16_naive", "steps": 30, "lr": 3e-3, "log_every": 10, "eval_batches": 2},
              out_dir=tmp_path, progress=False)
    m = rec["metrics"]
    assert rec["status"] == "ok", rec.get("reason")
    assert m["quality/beats_baseline"] is True
    assert m["quality/val_loss"] < m["stability/initial_loss"] - 0.5


def test_round_to_nearest_drops_an_update_below_half_an_ulp_and_stochastic_rounding_keeps_it():
    """Weights at 1.0 (bf16 spacing 2^-7 above 1, 2^-8 below) and lr 1e-4: Adam moves each by
    ~1e-4 a step, far below half a spacing."""
    moved = {}
    for rounding in ("nearest", "stochastic"):
        w = torch.nn.Parameter(torch.ones(4096, dtype=torch.bfloat16))
        opt = AdamW([w], lr=1e-4, betas=(0.9, 0.95), rounding=rounding, seed=1)
        for _ in range(100):
            w.grad = torch.ones_like(w)
            opt.step()
        moved[rounding] = 1.0 - w.float().mean().item()
    assert moved["nearest"] == 0.0
    assert moved["stochastic"] == pytest.approx(100 * 1e-4, rel=0.1)


def test_stochastic_rounding_is_unbiased_and_lands_on_a_neighbour():
    x = torch.full((4096,), 1.0 + 2.0**-9)  # a quarter of the way from 1.0 to the next bf16, 1 + 2^-7
    index = torch.arange(4096)
    draws = torch.stack([stochastic_round_to_bf16(x, random_bits16(7, torch.tensor(float(s)), index)).float()
                         for s in range(1, 51)])
    assert set(draws.unique().tolist()) == {1.0, 1.0 + 2.0**-7}
    assert draws.mean().item() == pytest.approx(1.0 + 2.0**-9, abs=2e-5)  # 204,800 draws: sd 9e-6
    neg = stochastic_round_to_bf16(-x, random_bits16(7, torch.tensor(3.0), index)).float()
    assert set(neg.unique().tolist()) == {-1.0, -(1.0 + 2.0**-7)}
    exact = torch.tensor([1.5, -3.0, 0.0, float("inf"), float("nan")])
    out = stochastic_round_to_bf16(exact, random_bits16(7, torch.tensor(1.0), torch.arange(5))).float()
    assert out[:4].tolist() == [1.5, -3.0, 0.0, float("inf")] and out[4].isnan()


def test_the_random_bits_are_uniform_and_change_with_the_step():
    index = torch.arange(1 << 16)
    a, b = random_bits16(3, torch.tensor(1.0), index), random_bits16(3, torch.tensor(2.0), index)
    assert 0 <= a.min() and a.max() < 1 << 16
    assert a.float().mean().item() == pytest.approx(2**15, rel=0.01)
    assert (a == b).float().mean().item() < 0.001
    counts = torch.bincount(a >> 12, minlength=16).float()  # 16 bins of 4096 expected each
    assert ((counts - 4096).abs() < 5 * 64).all()


def test_stochastic_rounding_adamw_matches_fp32_adamw_in_expectation():
    gen = torch.Generator().manual_seed(0)
    w0 = torch.randn(4096, generator=gen)
    ref = torch.nn.Parameter(w0.clone())
    low = torch.nn.Parameter(w0.clone().bfloat16())
    o_ref = torch.optim.AdamW([ref], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    o_low = AdamW([low], lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, rounding="stochastic", seed=0)
    for _ in range(20):
        g = torch.randn(4096, generator=gen)
        ref.grad, low.grad = g.clone(), g.clone().bfloat16()
        o_ref.step()
        o_low.step()
    moved = (ref.detach() - w0).mean().item()
    assert (low.detach().float() - w0).mean().item() == pytest.approx(moved, abs=2e-4)


def test_replicas_seeded_alike_round_alike_whatever_else_drew_from_the_generator():
    """Data-parallel ranks call torch.manual_seed(seed) and then may draw different numbers of
    random values before the optimizer is built; their stochastic rounding must still agree."""
    out = []
    for extra in (0, 5):
        torch.manual_seed(3)
        torch.rand(extra)
        w = torch.nn.Parameter(torch.ones(4096, dtype=torch.bfloat16))
        opt = AdamW([w], lr=1e-4, rounding="stochastic")
        w.grad = torch.ones_like(w)
        opt.step()
        out.append(w.detach().clone())
    assert torch.equal(out[0], out[1]) and out[0].unique().numel() == 2  # rounded both ways, alike


def test_one_group_updates_an_fp32_head_exactly_among_bf16_weights():
    body = torch.nn.Parameter(torch.randn(256).bfloat16())
    head = torch.nn.Parameter(torch.randn(256))
    alone = torch.nn.Parameter(head.detach().clone())
    o = AdamW([body, head], lr=1e-3, betas=(0.9, 0.95), rounding="stochastic", seed=0)
    o_alone = AdamW([alone], lr=1e-3, betas=(0.9, 0.95))
    for _ in range(3):
        g = torch.randn(256)
        body.grad, head.grad, alone.grad = g.bfloat16(), g.clone(), g.clone()
        o.step()
        o_alone.step()
    assert torch.equal(head, alone)
    assert o.state[head]["exp_avg"].dtype == torch.float32 and o.state[body]["exp_avg"].dtype == torch.bfloat16


@pytest.mark.parametrize("kw, words", [
    ({"exp_avg_dtype": "8bit"}, "bitsandbytes' AdamW8bit"),
    ({"exp_avg_sq_dtype": "fp64"}, "exp_avg_sq_dtype='fp64'"),
    ({"rounding": "up"}, "rounding='up'"),
    ({"moment_rounding": "down"}, "moment_rounding='down'"),
    ({"impl": "cuda"}, "impl='cuda'"),
])
def test_bad_settings_are_one_line_errors(kw, words):
    with pytest.raises(ValueError, match=words) as e:
        AdamW([torch.nn.Parameter(torch.zeros(2))], **kw)
    assert "\n" not in str(e.value)


def test_stochastic_rounding_of_fp16_weights_is_refused():
    with pytest.raises(ValueError, match="bf16 weights"):
        AdamW([torch.nn.Parameter(torch.zeros(2).half())], rounding="stochastic")


@pytest.mark.parametrize("kw", [{"params": torch.zeros(2).half()},
                                {"params": torch.zeros(2), "exp_avg_sq_dtype": "fp16"},
                                {"params": torch.zeros(2).bfloat16(), "exp_avg_dtype": "fp16"}])
def test_stochastic_rounding_of_fp16_moments_is_refused(kw):
    p = torch.nn.Parameter(kw.pop("params"))
    with pytest.raises(ValueError, match="bf16 moments.*stored in fp16") as e:
        AdamW([p], moment_rounding="stochastic", **kw)
    assert "\n" not in str(e.value)


def _moment_step(moment_rounding, storage, seed, g, state, beta2=0.999):
    """One step of bf16 weights from the given moments: the moments it stores, in fp32."""
    w = torch.nn.Parameter(torch.ones(g.shape, dtype=torch.bfloat16))
    opt = AdamW([w], lr=1e-4, betas=(0.9, beta2), exp_avg_dtype=storage, exp_avg_sq_dtype=storage,
                rounding="stochastic", moment_rounding=moment_rounding, seed=seed)
    st = opt._init_state(w, opt.param_groups[0])
    for k, v in state.items():
        st[k].copy_(v)
    w.grad = g.bfloat16()
    opt.step()
    return {k: opt.state[w][k].float() for k in ("exp_avg", "exp_avg_sq")}


def _bf16_neighbours(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The bf16 values on either side of fp32 ``x`` (toward zero, away from it); equal where exact."""
    bits = x.view(torch.int32).to(torch.int64)
    low = (bits & ~0xFFFF).to(torch.int32).view(torch.float32)
    exact = (bits & 0xFFFF) == 0
    high = torch.where(exact, bits, (bits & ~0xFFFF) + 0x10000).to(torch.int32).view(torch.float32)
    return low, high


def _z(stored: torch.Tensor, x: torch.Tensor, low: torch.Tensor, high: torch.Tensor, where: torch.Tensor) -> float:
    """The summed error of ``stored`` (draws x elements) from ``x`` away from zero, over the elements
    ``where``, in standard deviations of stochastic rounding's (unbiased rounding: |z| a few at most)."""
    p = ((x - low) / (high - low)).nan_to_num(0.0)  # the chance of rounding away from zero
    var = ((high - low) ** 2 * p * (1 - p))[where].sum() * len(stored)
    return (((stored - x) * x.sign())[:, where].sum() / var.sqrt()).item()


def test_stochastic_rounding_of_moments_is_unbiased_and_lands_on_a_neighbour():
    """From bf16 moments (m, v), one step under 8 seeds x 4096 elements: each stored moment is one
    of the two bf16 neighbours of the fp32 value (what fp32 storage keeps), both occur, and the
    mean is the fp32 value within 4 standard errors, both where the value lies nearer its lower
    neighbour and where nearer its upper one (round-to-nearest is off by tens of them there)."""
    gen = torch.Generator().manual_seed(0)
    n = 4096
    start = {"exp_avg": torch.randn(n, generator=gen), "exp_avg_sq": torch.rand(n, generator=gen) + 0.5}
    start = {k: v.bfloat16() for k, v in start.items()}  # what bf16 storage holds
    g = torch.randn(n, generator=gen)
    exact = _moment_step("nearest", "fp32", 0, g, start)
    draws = [_moment_step("stochastic", None, seed, g, start) for seed in range(8)]
    nearest = _moment_step("nearest", None, 0, g, start)
    for k in ("exp_avg", "exp_avg_sq"):
        x = exact[k]
        low, high = _bf16_neighbours(x)
        stored = torch.stack([d[k] for d in draws])
        assert ((stored == low) | (stored == high)).all(), k
        assert (stored == low).any() and (stored == high).any(), k
        nearer_low = (x - low).abs() < (high - x).abs()
        for where in (nearer_low, ~nearer_low):
            assert abs(_z(stored, x, low, high, where)) < 4, k
            assert abs(_z(nearest[k].expand_as(stored), x, low, high, where)) > 20, k


def test_the_moments_draw_other_bits_than_the_weight():
    from benchlib.training.adamw_reference import SALT
    index, step = torch.arange(1 << 16), torch.tensor(5.0)
    w, m, v = (random_bits16(3, step, index, SALT[k]) for k in ("param", "exp_avg", "exp_avg_sq"))
    assert torch.equal(w, random_bits16(3, step, index))  # the weight's bits are those of every earlier run
    for a, b in ((w, m), (w, v), (m, v)):
        assert (a == b).float().mean().item() < 0.001
        assert abs(torch.corrcoef(torch.stack([a, b]).float())[0, 1].item()) < 0.02


def test_at_beta2_0999_stochastic_rounding_lets_a_bf16_second_moment_decay_and_nearest_does_not():
    """v = 1 and g^2 = 1e-4 < v: exact AdamW shrinks v by 0.1% a step, below half a bf16 ulp under
    1 (2^-9), so round-to-nearest stores 1 again, every step, for ever; stochastic rounding moves
    it down with probability ~ 0.001 / 2^-8 and follows the fp32 second moment in expectation."""
    n, steps = 4096, 200
    out = {}
    for rounding, storage in (("nearest", None), ("stochastic", None), ("nearest", "fp32")):
        w = torch.nn.Parameter(torch.ones(n, dtype=torch.bfloat16))
        opt = AdamW([w], lr=1e-4, betas=(0.9, 0.999), exp_avg_sq_dtype=storage, rounding="stochastic",
                    moment_rounding=rounding, seed=4)
        opt._init_state(w, opt.param_groups[0])["exp_avg_sq"].fill_(1.0)
        for _ in range(steps):
            w.grad = torch.full_like(w, 0.01)
            opt.step()
        out[(rounding, storage)] = opt.state[w]["exp_avg_sq"].float()
    assert torch.equal(out[("nearest", None)], torch.ones(n))  # stuck: not one element moved
    fp32 = out[("nearest", "fp32")]
    assert fp32.max().item() < 0.82  # 0.999^200 = 0.819 (+ 1e-4 (1 - 0.999^200))
    sr = out[("stochastic", None)]
    assert (sr < 1).all() and sr.mean().item() == pytest.approx(fp32.mean().item(), abs=2e-3)


def test_the_state_survives_a_save_and_load_and_the_run_goes_on_as_if_never_stopped(tmp_path):
    """fp32 moments of fp16 weights come back fp32 (torch's loader would cast them to fp16),
    the learning rate comes back a tensor on the weights' device, and the stochastic rounding
    draws what it would have drawn: the continued run equals the uninterrupted one bit for bit."""
    def make(rounding, dtype, seed):
        gen = torch.Generator().manual_seed(5)
        ws = [torch.nn.Parameter(torch.randn(300, generator=gen).to(dtype)) for _ in range(2)]
        return ws, AdamW(ws, lr=1e-3, betas=(0.9, 0.95), exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32",
                         rounding=rounding, seed=seed)

    def steps(ws, opt, n, start):
        for s in range(start, start + n):
            gen = torch.Generator().manual_seed(100 + s)
            for w in ws:
                w.grad = _grads(w.shape, gen).to(w.dtype)
            opt.step()

    for rounding, dtype in (("nearest", torch.float16), ("stochastic", torch.bfloat16)):
        ws, opt = make(rounding, dtype, seed=11)
        steps(ws, opt, 6, 0)
        whole = [w.detach().clone() for w in ws]

        ws, opt = make(rounding, dtype, seed=11)
        steps(ws, opt, 3, 0)
        torch.save({"opt": opt.state_dict(), "w": [w.detach() for w in ws]}, tmp_path / "s.pt")
        saved = torch.load(tmp_path / "s.pt", map_location="cpu")
        ws2, opt2 = make(rounding, dtype, seed=999)  # another seed: the saved one must win
        with torch.no_grad():
            for w, v in zip(ws2, saved["w"]):
                w.copy_(v)
        opt2.load_state_dict(saved["opt"])
        st = opt2.state[ws2[0]]
        assert st["exp_avg"].dtype == st["exp_avg_sq"].dtype == torch.float32 and float(st["step"]) == 3
        assert torch.is_tensor(opt2.param_groups[0]["lr"]) and opt2.param_groups[0]["seed"] == opt.param_groups[0]["seed"]
        steps(ws2, opt2, 3, 3)
        assert all(torch.equal(a, b) for a, b in zip(ws2, whole)), rounding


@pytest.mark.parametrize("config", ["bf16_pure", "bf16_pure_sr_moments"])
def test_a_stopped_bf16_pure_run_continues_as_the_uninterrupted_run(tmp_path, monkeypatch, config):
    from test_resume import Killed, kill_at, rows
    from benchlib.training.loop import run
    cfg = {"scenario": "A", "config": config, "steps": 8, "log_every": 2, "eval_batches": 1}
    whole = run(cfg, out_dir=tmp_path / "whole", progress=False)
    kill_at(monkeypatch, 5)
    with pytest.raises(Killed):
        run({**cfg, "state_every": 3}, out_dir=tmp_path / "stopped", progress=False)
    monkeypatch.undo()
    (tmp_path / "stopped" / "steps.jsonl").unlink()
    rec = run({**cfg, "state_every": 3}, out_dir=tmp_path / "stopped", progress=False)
    assert rec["resumed"]["from_step"] == 3
    assert [r["loss"] for r in rows(tmp_path / "stopped")] == [r["loss"] for r in rows(tmp_path / "whole")]
    assert rec["metrics"]["quality"] == whole["metrics"]["quality"]


_KERNEL_CHECK = r"""
import json, torch
from benchlib.training.adamw import AdamW
out = []
for dtype, m, v, rounding, moments in [
        ("bfloat16", None, None, "stochastic", "nearest"), ("float16", "fp32", "fp32", "nearest", "nearest"),
        ("bfloat16", None, None, "nearest", "nearest"), ("float32", None, None, "nearest", "nearest"),
        ("bfloat16", "fp32", "bf16", "stochastic", "nearest"),
        ("bfloat16", None, "fp32", "stochastic", "nearest"),  # bf16_pure_fp32v
        ("bfloat16", None, None, "stochastic", "stochastic"),  # bf16_pure_sr_moments
        ("bfloat16", "fp32", None, "nearest", "stochastic"),  # the second moment alone rounded stochastically
        ("float32", "bf16", "bf16", "nearest", "stochastic")]:  # bf16 moments of fp32 weights
    gen = torch.Generator().manual_seed(0)
    sizes = [5000, 17, 4096, 3]  # lengths off 16 elements, and tails of blocks
    w = [torch.randn(n, generator=gen).to(getattr(torch, dtype)) for n in sizes]
    w.append(torch.randn(64, generator=gen))  # an fp32 head in the first group
    runs = {}
    for impl in ("triton", "reference"):
        ps = [torch.nn.Parameter(x.clone()) for x in w]
        groups = [{"params": ps[:2] + ps[4:], "weight_decay": 0.1}, {"params": ps[2:4]}]
        opt = AdamW(groups, lr=1e-2, betas=(0.9, 0.95), exp_avg_dtype=m, exp_avg_sq_dtype=v, rounding=rounding,
                    moment_rounding=moments, impl=impl, seed=3)
        g2 = torch.Generator().manual_seed(1)
        for s in range(5):
            for p in ps:
                p.grad = (torch.randn(p.shape, generator=g2) * 10 ** torch.empty(p.shape).uniform_(-6, 0, generator=g2)).to(p.dtype)
            opt.step()
        runs[impl] = (ps, opt)
    (a, oa), (b, ob) = runs["triton"], runs["reference"]
    same = all(torch.equal(x, y) and all(torch.equal(oa.state[x][k], ob.state[y][k]) for k in ("exp_avg", "exp_avg_sq"))
               for x, y in zip(a, b))
    out.append([dtype, m, v, rounding, moments, oa.impl, same])
print(json.dumps(out))
"""


def test_the_triton_kernel_computes_the_reference_function_bit_for_bit():
    """Under Triton's interpreter (CPU tensors): every dtype mix, lengths that end mid-block and
    off 16 elements, an fp32 weight in a bf16 group, stochastic rounding of weights and of moments
    included. On the GPU the
    benchmark (docs/bench/optimizer_step_2026-11-25) checks the compiled kernel the same way."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", _KERNEL_CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    results = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(results) == 9 and all(r[5] == "triton" for r in results)
    assert all(r[6] for r in results), results


def test_8bit_adam_off_cuda_is_bitsandbytes_own_step_and_a_bad_mode_is_named(monkeypatch):
    """The direct step (docs/bench/optimizer_step_2026-11-25 checks its numbers on the GPU) runs
    only on a CUDA device; on the CPU the optimizer steps through bitsandbytes' own ``step``."""
    bnb = pytest.importorskip("bitsandbytes")
    from benchlib.training.adamw8bit import AdamW8bit

    m = torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.Linear(64, 8))  # 8-bit and 32-bit states
    opt = AdamW8bit(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    assert opt.step_mode == "direct"
    calls = []
    # the step super() reaches: bitsandbytes' AdamW8bit's, which torch wraps in place (a profiling hook)
    # once any test has built one of bitsandbytes' own, so patch it there, not on Optimizer8bit
    parent = bnb.optim.AdamW8bit
    real = parent.step
    monkeypatch.setattr(parent, "step", lambda self, *a: calls.append(1) or real(self, *a))
    for p in m.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    assert calls == [1] and opt.state[m[0].weight]["state1"].dtype == torch.uint8
    assert opt.state[m[1].bias]["state1"].dtype == torch.float32 and opt.state[m[0].weight]["step"] == 1
    with pytest.raises(ValueError, match="step_mode='lean'.*bnb, direct"):
        AdamW8bit(m.parameters(), step_mode="lean")
