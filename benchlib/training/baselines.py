"""Trivial predictors, and whether a run clearly beat its one.

A quality number means something only beside what an input-blind predictor, fitted on the
training split, scores on the same evaluation set: the **unigram** of the training tokens (causal
and masked LM), the **label frequency** (multi-label: each label's training frequency as its
probability everywhere), the **majority class** with the class prior (single-label).

``evaluate_predictor`` scores any predictor into the record's quality metrics and per-example
values. ``evidence`` compares a run with its baseline on those values, paired: a run *beat* it when
the task's threshold-free metric (``LEARNED_METRIC``) is better by ``LearnedRule.min_rel_gain`` of
the baseline's value and by ``LearnedRule.z`` standard errors of the paired difference; where the
metric's floor is known (``TaskData.floors``) it also records the share of the gap closed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from benchlib.training.metrics import multilabel_metrics, singlelabel_metrics

BASELINE_NAME = {"clm": "unigram", "mlm": "unigram", "multilabel": "label_frequency",
                 "singlelabel": "majority_class"}
LEARNED_METRIC = {"clm": ("val_loss", False), "mlm": ("val_loss", False), "multilabel": ("p_at_1", True),
                  "singlelabel": ("accuracy", True)}
"""Per task: the threshold-free metric that decides whether a run learned, and its direction."""
UNIGRAM_MAX_TOKENS = 50_000_000
"""Training tokens counted for the unigram (a large real corpus: its first rows up to this)."""


@dataclass(frozen=True)
class LearnedRule:
    min_rel_gain: float = 0.05
    """The learned metric must beat the baseline by this fraction of the baseline's value..."""
    z: float = 3.0
    """...and by this many standard errors of the paired per-example difference."""


# ---- the trivial predictors --------------------------------------------------------------
def unigram_log_probs(train: np.ndarray, vocab_size: int, special_ids=()) -> torch.Tensor:
    """log p(token) from training-token counts, add-one smoothed; ``special_ids`` get probability 0."""
    flat = np.asarray(train).reshape(-1)[:UNIGRAM_MAX_TOKENS]
    counts = np.bincount(flat.astype(np.int64), minlength=vocab_size)[:vocab_size].astype(np.float64) + 1.0
    counts[[i for i in special_ids if 0 <= i < vocab_size]] = 0.0  # never a target: log p = -inf
    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(counts / counts.sum()))


def label_log_odds(train_labels: np.ndarray, num_labels: int, n_docs: int) -> torch.Tensor:
    """log(f / (1 - f)) of each label's training frequency f (add-half smoothed: finite for unseen labels)."""
    counts = np.bincount(train_labels[train_labels >= 0].astype(np.int64), minlength=num_labels)[:num_labels]
    return torch.from_numpy(np.log((counts + 0.5) / (n_docs - counts + 0.5)))


def class_log_prior(primary: np.ndarray, num_labels: int) -> torch.Tensor:
    """log of each class's training share (add-half smoothed)."""
    y = np.asarray(primary)
    counts = np.bincount(y[y >= 0].astype(np.int64), minlength=num_labels)[:num_labels] + 0.5
    return torch.from_numpy(np.log(counts / counts.sum()))


def head_bias(data) -> torch.Tensor | None:
    """The trivial predictor's logits as a classification head's bias (training starts at the baseline)."""
    if data.task == "multilabel":
        return label_log_odds(data.train["labels"], data.num_labels, len(data.train["ids"])).float()
    if data.task == "singlelabel":
        return class_log_prior(data.train["primary"], data.num_labels).float()
    return None


def unigram_of(data) -> torch.Tensor:
    """The LM task's unigram log-probabilities over the ids it scores: causal LM scores every token,
    a real document's EOS included (else its cost is infinite); masked LM never scores a special."""
    never_scored = data.special_ids if data.task == "mlm" else ()
    return unigram_log_probs(data.train, data.vocab_size, never_scored)


def evaluate_baseline(data, val: list[dict]) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """``evaluate_predictor`` for ``data``'s trivial predictor (LM: read off the unigram table, no logits)."""
    if data.task in ("clm", "mlm"):
        lp = unigram_of(data)
        return _lm_eval(lambda b, y: torch.where(y != -100, -lp.to(y.device)[y.clamp_min(0)], 0.0), val)
    bias = head_bias(data)
    return evaluate_predictor(lambda b: bias.expand(len(b["labels"]), -1), val, data.task)


# ---- scoring -----------------------------------------------------------------------------
def evaluate_predictor(logits_fn, val: list[dict], task: str) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Quality metrics of ``logits_fn`` over the evaluation batches (losses reduced in fp32), and
    per-example values: LM ``loss`` (per sequence) and ``tokens``; classification ``hit1/3/5`` (true
    labels among the top k, / k), ``y``, ``pred``, the loss (``bce`` / ``ce``), multi-label ``tp``,
    ``fp``, ``fn``, single-label ``correct``."""
    if task in ("clm", "mlm"):
        def nll(b, y):
            lg = logits_fn(b).float()
            return F.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1), ignore_index=-100,
                                   reduction="none").reshape(y.shape)
        return _lm_eval(nll, val)
    L = torch.cat([logits_fn(b).float().cpu() for b in val])
    Y = torch.cat([b["labels"].cpu() for b in val])
    hot = Y.float() if task == "multilabel" else F.one_hot(Y, L.shape[1]).float()
    top = L.topk(min(5, L.shape[1]), dim=1).indices
    hits = hot.gather(1, top).cumsum(1)
    per = {f"hit{k}": (hits[:, min(k, hits.shape[1]) - 1] / k).double().numpy() for k in (1, 3, 5)}
    if task == "multilabel":
        out = multilabel_metrics(L, Y)
        bce = F.binary_cross_entropy_with_logits(L, Y.float(), reduction="none").mean(1)
        out["val_loss"] = float(bce.mean())
        pred, y = (L > 0), Y > 0.5
        per.update(tp=(pred & y).sum(1).double().numpy(), fp=(pred & ~y).sum(1).double().numpy(),
                   fn=(~pred & y).sum(1).double().numpy(), bce=bce.double().numpy(), y=y.numpy(), pred=pred.numpy())
        return out, per
    out = singlelabel_metrics(L, Y)
    out.update({f"p_at_{k}": float(per[f"hit{k}"].mean()) for k in (1, 3, 5)})
    ce = F.cross_entropy(L, Y, reduction="none")
    out["val_loss"] = float(ce.mean())
    per.update(correct=(L.argmax(1) == Y).double().numpy(), ce=ce.double().numpy(), y=Y.numpy(),
               pred=L.argmax(1).numpy())
    return out, per


def _lm_eval(nll_fn, val: list[dict]) -> tuple[dict, dict]:
    """Token-weighted val loss and perplexity, and per-sequence ``loss`` and ``tokens``, from
    ``nll_fn(batch, labels)``: each token's loss, 0 where unscored (label -100)."""
    losses, tokens = [], []
    for b in val:
        y = b["labels"]
        nll = nll_fn(b, y)
        n = (y != -100).sum(1).to(nll.device)
        losses.append((nll.sum(1) / n.clamp_min(1)).cpu())
        tokens.append(n.cpu())
    loss, n = torch.cat(losses).double().numpy(), torch.cat(tokens).numpy()
    vl = float((loss * n).sum() / max(1, n.sum()))
    return {"val_loss": vl, "perplexity": math.exp(vl) if vl < 50 else float("inf")}, {"loss": loss, "tokens": n}


def _se(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan")


def standard_errors(per: dict[str, np.ndarray], task: str) -> dict[str, float]:
    """Standard errors of the quality metrics over the evaluation examples (micro-F1: scipy's
    bootstrap; macro-F1: ``macro_f1_se``)."""
    if task in ("clm", "mlm"):
        w = per["tokens"] / per["tokens"].mean()
        return {"val_loss": _se(per["loss"] * w)}
    out = {f"p_at_{k}": _se(per[f"hit{k}"]) for k in (1, 3, 5) if f"hit{k}" in per}
    if "y" in per:
        out["macro_f1"] = macro_f1_se(per["y"], per["pred"])
    if task == "singlelabel":
        return {**out, "accuracy": _se(per["correct"]), "val_loss": _se(per["ce"])}
    from scipy.stats import bootstrap

    def micro_f1(tp, fp, fn, axis=-1):
        tp, fp, fn = tp.sum(axis), fp.sum(axis), fn.sum(axis)
        return np.where(tp + fp + fn > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1e-12), 0.0)
    out["val_loss"] = _se(per["bce"])
    if len(per["tp"]) > 1 and (per["tp"].sum() + per["fp"].sum()) > 0:
        res = bootstrap((per["tp"], per["fp"], per["fn"]), micro_f1, paired=True, vectorized=True,
                        n_resamples=999, method="percentile", random_state=np.random.default_rng(0))
        out["micro_f1"] = float(res.standard_error)
    else:  # no positive prediction anywhere: F1 is 0 on every resample
        out["micro_f1"] = 0.0
    return out


MACRO_F1_RESAMPLES = 200


def macro_f1_se(y: np.ndarray, pred: np.ndarray, n_resamples: int = MACRO_F1_RESAMPLES, seed: int = 0) -> float:
    """Bootstrap standard error of macro-F1 over documents; ``y`` / ``pred`` multi-hot [N, L] or class
    ids [N]. Resamples are multinomial document counts, so per-label tp / fp / fn are one sparse
    product (``scipy.stats.bootstrap`` would materialise [documents, labels] per resample)."""
    from scipy import sparse
    n = len(y)
    if n < 2:
        return float("nan")
    if y.ndim == 1:  # class ids -> one-hot
        L = int(max(y.max(), pred.max())) + 1
        rows = np.arange(n)
        y = sparse.csr_matrix((np.ones(n), (rows, y)), shape=(n, L))
        pred = sparse.csr_matrix((np.ones(n), (rows, pred)), shape=(n, L))
    else:
        y, pred = sparse.csr_matrix(y.astype(np.float64)), sparse.csr_matrix(pred.astype(np.float64))
    tp, fp, fn = y.multiply(pred), pred - y.multiply(pred), y - y.multiply(pred)
    w = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_resamples).astype(np.float64)
    TP, FP, FN = ((m.T @ w.T).T for m in (tp, fp, fn))  # [resamples, labels]
    den = 2 * TP + FP + FN
    present = den > 0
    f1 = np.where(present, 2 * TP / np.maximum(den, 1e-12), 0.0)
    macro = np.where(present.any(1), f1.sum(1) / np.maximum(present.sum(1), 1), 0.0)
    return float(np.std(macro, ddof=1))


def _per_example(per: dict[str, np.ndarray], task: str) -> np.ndarray:
    """The learned metric per example, oriented so that its mean is the metric."""
    if task in ("clm", "mlm"):
        return per["loss"] * (per["tokens"] / per["tokens"].mean())
    return per["hit1"] if task == "multilabel" else per["correct"]


def evidence(quality: dict, per: dict, base: dict, base_per: dict, task: str,
             rule: LearnedRule = LearnedRule(), floor: float | None = None) -> dict:
    """Record fields comparing a run with its trivial baseline on the same examples: ``baseline/*``,
    standard errors, the paired gain and ``quality/beats_baseline``; with ``floor``, ``quality/floor``
    and ``quality/gap_closed``."""
    name, higher = LEARNED_METRIC[task]
    out: dict = {"baseline/name": BASELINE_NAME[task], "quality/learned_metric": name}
    out.update({f"baseline/{k}": v for k, v in base.items()})
    for k, v in standard_errors(per, task).items():
        out[f"quality/{k}_se"] = v
    diff = _per_example(per, task) - _per_example(base_per, task)
    gain = float(diff.mean()) * (1 if higher else -1)  # > 0: better than the baseline
    se = _se(diff)
    need = max(rule.min_rel_gain * abs(base[name]), rule.z * (se if math.isfinite(se) else 0.0))
    out.update({"quality/n_eval": int(len(diff)), "quality/baseline_gain": gain, "quality/baseline_gain_se": se,
                "quality/baseline_gain_needed": need,
                "quality/beats_baseline": bool(math.isfinite(gain) and gain > need)})
    if floor is not None:
        out["quality/floor"] = floor
        out["quality/gap_closed"] = gap_closed(quality.get(name), base.get(name), floor)
    return out


def gap_closed(value: float | None, baseline: float | None, floor: float) -> float | None:
    """(value - baseline) / (floor - baseline): 0 at the baseline, 1 at the floor; None where a value
    is missing or non-finite, or the baseline sits at the floor."""
    if value is None or baseline is None or not all(map(math.isfinite, (value, baseline, floor))) \
            or floor == baseline:
        return None
    return (value - baseline) / (floor - baseline)
