"""Loss scaling, rounding of low-precision updates, and the 8-bit optimizer, checked by value
(the AdamW of configurations torch's fused AdamW cannot express: test_adamw)."""
import pytest
import torch

from benchlib.core.dtypes import get_config
from benchlib.training.precision import LossScaler, build_optimizer, lr_at

CPU = torch.device("cpu")


def _chain(dtype=torch.float16):
    """loss = 1e-4 * w2 * (w1 * x): d loss/d h = 1e-4 * w2 = 1e-8 underflows in fp16 (min subnormal 6e-8),
    so w1's true gradient (1e-4 * w2 * x = 1e-6, representable) is lost without a loss scale."""
    w1 = torch.nn.Parameter(torch.tensor([1.0], dtype=dtype))
    w2 = torch.nn.Parameter(torch.tensor([1e-4], dtype=dtype))
    x = torch.tensor([100.0], dtype=dtype)
    loss = ((w2 * (w1 * x)) * 1e-4).sum()
    return [w1, w2], loss


def test_static_scale_multiplies_the_loss_and_divides_the_grads():
    scaler = LossScaler(get_config("fp16_naive"), CPU)
    w = torch.nn.Parameter(torch.tensor([2.0, -3.0]))
    loss = (w * torch.tensor([0.5, 0.25])).sum()
    scaled = scaler.scale(loss)
    assert scaled.item() == pytest.approx(1024 * loss.item())
    scaled.backward()
    assert w.grad.tolist() == pytest.approx([1024 * 0.5, 1024 * 0.25])
    scaler.unscale_(None, [w])
    assert w.grad.tolist() == pytest.approx([0.5, 0.25])
    assert scaler.current_scale() == 1024.0


def test_unscaled_fp16_loses_an_underflowing_gradient_and_scale_1024_keeps_it():
    grads = {}
    for name in ("fp16_naive_noscale", "fp16_naive"):
        scaler = LossScaler(get_config(name), CPU)
        (w1, w2), loss = _chain()
        scaler.scale(loss).backward()
        scaler.unscale_(None, [w1, w2])
        grads[name] = w1.grad.float().item()
    assert grads["fp16_naive_noscale"] == 0.0
    assert grads["fp16_naive"] == pytest.approx(1e-6, rel=0.1)


def test_dynamic_scaler_skips_an_overflowing_step_and_halves_the_scale():
    scaler = LossScaler(get_config("amp_fp16"), CPU)
    w = torch.nn.Parameter(torch.tensor([1.0]))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler.scale(w.sum() * float("inf")).backward()
    scaler.unscale_(opt, [w])
    scaler.step(opt)
    assert w.item() == 1.0  # skipped
    assert float(scaler.current_scale()) == 2.0**16 / 2


def _updates(name: str, steps: int = 100) -> float:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.ones(64, dtype=torch.bfloat16))
    opt = build_optimizer(_Holder(w), get_config(name), lr=1e-4, weight_decay=0.0, beta2=0.95, device=CPU)
    for _ in range(steps):
        w.grad = torch.ones_like(w)  # Adam's update is ~lr per step: far below bf16's spacing at 1.0
        opt.step()
    return 1.0 - w.float().mean().item()


class _Holder(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = w


def test_bf16_round_to_nearest_loses_small_updates_and_stochastic_rounding_keeps_them():
    lost = _updates("bf16_naive")
    kept = _updates("bf16_pure")
    assert lost == 0.0  # 1 - 1e-4 rounds back to 1.0 in bf16 every step
    assert kept == pytest.approx(100 * 1e-4, rel=0.25)  # moved by ~steps x lr in expectation


def test_8bit_adam_holds_8bit_state_for_large_tensors():
    m = torch.nn.Linear(128, 64)  # 8192-element weight: above bitsandbytes' 4096 threshold
    opt = build_optimizer(m, get_config("amp_bf16_8bit_adam"), lr=1e-3, weight_decay=0.0, beta2=0.95, device=CPU)
    m(torch.randn(4, 128)).sum().backward()
    opt.step()
    st = opt.state[m.weight]
    assert st["state1"].dtype == torch.uint8 and st["state2"].dtype == torch.uint8
    assert st["state1"].numel() == m.weight.numel()


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    assert lr_at(0, 1.0, 10, 100, 0.1) == pytest.approx(0.1)
    assert lr_at(9, 1.0, 10, 100, 0.1) == pytest.approx(1.0)
    assert lr_at(100, 1.0, 10, 100, 0.1) == pytest.approx(0.1)
    assert 0.1 < lr_at(55, 1.0, 10, 100, 0.1) < 1.0
