"""Quality metrics against hand-computed values; peak FLOPs by device name."""
import pytest
import torch

from benchlib.training.metrics import mfu_pct, multilabel_metrics, peak_tflops, singlelabel_metrics


def test_multilabel_micro_macro_f1_and_precision_at_k_by_hand():
    # 2 docs x 4 labels. Predictions (logit > 0): doc0 -> {0,1}, doc1 -> {2}
    logits = torch.tensor([[3.0, 2.0, -1.0, -2.0], [-1.0, -3.0, 1.0, 0.5 - 1.0]])
    y = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0]])
    m = multilabel_metrics(logits, y)
    # tp=2 (d0l0, d1l2), fp=1 (d0l1), fn=2 (d0l3, d1l3): micro F1 = 4/(4+1+2)
    assert m["micro_f1"] == pytest.approx(4 / 7)
    # per label F1: l0 = 1, l1 = 0 (fp only), l2 = 1, l3 = 0 (fn only) -> macro 0.5
    assert m["macro_f1"] == pytest.approx(0.5)
    # top-1: d0 -> l0 (true), d1 -> l2 (true) -> 1.0; top-3: d0 {0,1,2}: 1 true; d1 {2,3,0}: 2 true -> (1/3+2/3)/2
    assert m["p_at_1"] == pytest.approx(1.0)
    assert m["p_at_3"] == pytest.approx(0.5)
    # top-5 over 4 labels: all labels, divided by 5: d0 2/5, d1 2/5
    assert m["p_at_5"] == pytest.approx(0.4)


def test_singlelabel_accuracy_and_macro_f1_by_hand():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]])
    y = torch.tensor([0, 1, 2, 2])
    m = singlelabel_metrics(logits, y)
    assert m["accuracy"] == pytest.approx(0.75)
    # class0 F1=1; class1 tp1 fp1 fn0 -> 2/3; class2 tp1 fp0 fn1 -> 2/3
    assert m["macro_f1"] == pytest.approx((1 + 2 / 3 + 2 / 3) / 3)


def test_peak_flops_are_looked_up_by_device_name():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(989.4)
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == pytest.approx(756)
    assert peak_tflops("NVIDIA A100-SXM4-40GB", "tf32") == pytest.approx(156)
    assert peak_tflops("NVIDIA H200", "fp32") == pytest.approx(67)
    assert peak_tflops("Some Unknown GPU", "bf16") is None


def test_mfu_formula():
    # 1e6 tokens/s x 1e9 FLOP/token = 1e15 FLOP/s = 1000 TFLOP/s -> 50% of a 2000 TFLOP/s peak
    assert mfu_pct(1e6, 1e9, 2000) == pytest.approx(50.0)
    assert mfu_pct(1e6, 1e9, None) is None
