"""Quality metrics (seed 001's list), peak FLOPs by device name, and MFU."""
from __future__ import annotations

import math

import torch

# ---- quality -----------------------------------------------------------------------

def multilabel_metrics(logits: torch.Tensor, targets: torch.Tensor, threshold: float = 0.0) -> dict[str, float]:
    """micro-F1, macro-F1 and P@1/3/5 for multi-hot ``targets``; a label is predicted where its
    logit > ``threshold``. P@k = share of the top-k scored labels that are true."""
    logits, targets = logits.float().cpu(), targets.float().cpu()
    out = _f1s((logits > threshold).float(), targets)
    for k in (1, 3, 5):
        top = logits.topk(min(k, logits.shape[1]), dim=1).indices
        out[f"p_at_{k}"] = targets.gather(1, top).sum(1).div(k).mean().item()
    return out


def singlelabel_metrics(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """Accuracy and macro-F1."""
    pred, y = logits.float().argmax(-1).cpu(), targets.cpu()
    n = int(max(pred.max(), y.max())) + 1
    hot = lambda t: torch.nn.functional.one_hot(t, n).double()  # noqa: E731
    return {"accuracy": (pred == y).float().mean().item(), "macro_f1": _f1s(hot(pred), hot(y))["macro_f1"]}


def _f1s(pred: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """micro-F1, and macro-F1 over the labels that occur in the targets or the predictions (a label
    absent from both has no F1), of multi-hot [N, L] predictions and targets."""
    tp, fp, fn = (pred * targets).sum(0), (pred * (1 - targets)).sum(0), ((1 - pred) * targets).sum(0)
    micro = _f1(tp.sum().item(), fp.sum().item(), fn.sum().item())
    present = (tp + fp + fn) > 0
    per_label = 2 * tp / (2 * tp + fp + fn).clamp_min(1e-12)
    return {"micro_f1": micro, "macro_f1": per_label[present].mean().item() if present.any() else 0.0}


def _f1(tp: float, fp: float, fn: float) -> float:
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn > 0 else 0.0


# ---- FLOPs -------------------------------------------------------------------------

# Dense peak TFLOP/s from vendor datasheets (no sparsity). Matched by substring of the
# device name, most specific first. fp32 = plain CUDA cores; tf32/bf16/fp16/fp8 = tensor cores.
PEAK_TFLOPS: list[tuple[str, dict[str, float]]] = [
    ("H200", {"fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),
    ("H100 PCIe", {"fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756, "fp8": 1513}),
    ("H100", {"fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),
    ("GH200", {"fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),
    ("B200", {"fp32": 80, "tf32": 1100, "bf16": 2250, "fp16": 2250, "fp8": 4500}),
    ("A100", {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}),
    ("A10G", {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125}),
    ("L40S", {"fp32": 91.6, "tf32": 183, "bf16": 362, "fp16": 362, "fp8": 733}),
    ("L4", {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242}),
    ("RTX 4090", {"fp32": 82.6, "tf32": 82.6, "bf16": 165, "fp16": 165, "fp8": 330}),
    ("RTX 3090", {"fp32": 35.6, "tf32": 35.6, "bf16": 71, "fp16": 71}),
    ("V100", {"fp32": 15.7, "tf32": 15.7, "fp16": 125, "bf16": 15.7}),
    ("T4", {"fp32": 8.1, "tf32": 8.1, "fp16": 65, "bf16": 8.1}),
]


def peak_tflops(device_name: str, dtype: str = "bf16") -> float | None:
    """Dense peak for ``dtype`` (fp32, tf32, bf16, fp16, fp8) on the named GPU, or None if
    the GPU (or that dtype on it) is not in the table: MFU is then left blank, not guessed."""
    for key, peaks in PEAK_TFLOPS:
        if key.lower() in (device_name or "").lower():
            return peaks.get(dtype)
    return None


def mfu_pct(tokens_per_s: float, flops_per_token: float, peak: float | None) -> float | None:
    if not peak or not math.isfinite(tokens_per_s):
        return None
    return 100.0 * tokens_per_s * flops_per_token / (peak * 1e12)
