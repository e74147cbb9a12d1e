"""The embedded synthetic data as ``TaskData``: the Markov-chain corpus for A/B with its exact
loss floors, the EUR-Lex-like label corpus for C-F, both cached in-process and on disk."""
from __future__ import annotations

import functools
import math
import pickle
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from benchlib.core.records import atomic_file
from benchlib.core.runconfig import RunConfig
from benchlib.data import synthetic as syn
from benchlib.data.tasks import (Batch, EVAL_MAX_SEQUENCES, LM_VAL_POOL, MLM_FLOOR_CPU_BUDGET, MLM_FLOOR_MAX_SEQUENCES,
                                 SYNTH_CLS_DOCS, SYNTH_LM_TRAIN_TOKENS, TaskData, assemble, cls_arrays, cls_pool,
                                 label_stats, lm_pool, lm_window)

SPECIALS = (syn.PAD_ID, syn.BOS_ID, syn.EOS_ID, syn.MASK_ID)


# Corpora are cached in-process and on disk under <cache_dir>/synthetic (every run of a sweep is a
# fresh kernel). Bump the versions on any change to the generators so stale files are never read.
SYNTH_CACHE_VERSION = 1
LABEL_CACHE_VERSION = 2
"""The label generator's own version (in its cache files' names): a change to it leaves the LM
corpora's caches valid."""
_synth_cache_dir: Optional[Path] = None


def _on_disk(name: str, build: Callable[[], Any], *key: Any) -> Any:
    if _synth_cache_dir is None:
        return build()
    path = _synth_cache_dir / "synthetic" / (f"{name}-" + "-".join(map(str, key)) +
                                            f"-seed{syn.DATA_SEED}-v{SYNTH_CACHE_VERSION}.pkl")
    if path.exists():
        try:
            with open(path, "rb") as f:
                return pickle.load(f)
        except Exception:  # truncated or from another version: rebuild
            pass
    obj = build()
    try:
        with atomic_file(path) as tmp, open(tmp, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:
        pass  # a read-only cache is not an error
    return obj


@functools.lru_cache(maxsize=2)
def _lm_corpus(vocab_size: int, window: int, n_train_tokens: int) -> syn.LMCorpus:
    return _on_disk("lm", lambda: syn.make_lm_corpus(vocab_size, window, n_train_tokens, LM_VAL_POOL),
                    vocab_size, window, n_train_tokens, LM_VAL_POOL)


@functools.lru_cache(maxsize=2)
def _label_corpus(vocab_size: int, num_labels: int, max_len: int, n_train: int, n_val: int) -> syn.LabelCorpus:
    return _on_disk(f"labels{LABEL_CACHE_VERSION}",
                    lambda: syn.make_label_corpus(vocab_size, num_labels, max_len, n_train, n_val),
                    vocab_size, num_labels, max_len, n_train, n_val)


def _synthetic_lm(run: RunConfig) -> TaskData:
    task, T, V = run.scn.task, run.seq_len, run.vocab_size
    W = lm_window(task, T)
    t0 = time.perf_counter()

    corpus = _lm_corpus(V, W, SYNTH_LM_TRAIN_TOKENS[run.size])
    meta = {
        "data_seed": syn.DATA_SEED, "generate_s": round(time.perf_counter() - t0, 3),
        "n_train_tokens": int(corpus.train.size), "train_rows": int(corpus.train.shape[0]),
        "n_val_sequences": LM_VAL_POOL, "chain_states": corpus.chain.n_states,
        "chain_transitions": corpus.chain.nnz,
        "successors_per_token": round(corpus.chain.nnz / corpus.chain.n_states, 2),
        "entropy_rate": corpus.entropy_rate, "stationary_entropy": corpus.stationary_entropy,
        "uniform_entropy": math.log(corpus.chain.n_states),
    }
    # the sequences the run evaluates on (the pool's first ones)
    n_eval = min(EVAL_MAX_SEQUENCES if run.eval_batches is None else (run.batch_size or 1) * run.eval_batches,
                 LM_VAL_POOL)
    if task == "clm":
        pool = lm_pool(torch.from_numpy(corpus.val), task, V, SPECIALS, syn.MASK_ID, syn.BOS_ID)
        floor = corpus.entropy_rate
        lp = corpus.chain.log_prob(corpus.val[:n_eval, :-1] - syn.FIRST_CONTENT_ID,
                                   corpus.val[:n_eval, 1:] - syn.FIRST_CONTENT_ID)
        meta.update(
            loss_floor_kind="entropy_rate",
            loss_floor_note=("every scored position predicts x[t+1] from x[..t] (>= 1 token of "
                             "context, stationary start), so the first-order chain's floor is "
                             "exactly the entropy rate at every position; predicting x[0] "
                             "itself would cost stationary_entropy and is never scored"),
            val_bayes_loss=float(-lp.mean()), val_bayes_loss_sequences=n_eval)
    else:
        pool, floor, floor_meta = _synthetic_mlm_val(V, W, SYNTH_LM_TRAIN_TOKENS[run.size], n_eval,
                                                     "cuda" if torch.cuda.is_available() and run.device != "cpu" else "cpu")
        meta.update(floor_meta)
    return TaskData(task=task, vocab_size=V, seq_len=T, num_labels=None, pad_id=syn.PAD_ID,
                    bos_id=syn.BOS_ID, mask_id=syn.MASK_ID if task == "mlm" else None,
                    loss_floor=floor, source="synthetic", meta=meta, train=corpus.train,
                    val_pool=pool, special_ids=SPECIALS, corpus=corpus)


@functools.lru_cache(maxsize=2)
def _synthetic_mlm_val(V: int, W: int, n_train_tokens: int, n_eval: int, device: str) -> tuple[Batch, float, dict]:
    """The fixed masked validation pool and its Bayes floor (cached: the forward-backward
    is the slow part of building MLM data)."""
    def build():
        corpus = _lm_corpus(V, W, n_train_tokens)
        pool = lm_pool(torch.from_numpy(corpus.val), "mlm", V, SPECIALS, syn.MASK_ID, syn.BOS_ID)
        return (pool, *_mlm_floor(corpus, pool, n_eval, device))
    return _on_disk("mlmval", build, V, W, n_train_tokens, n_eval, device)


def _mlm_floor(corpus: syn.LMCorpus, pool: Batch, n_eval: int, device: str) -> tuple[float, dict]:
    """Bayes loss of the fixed validation masks (forward-backward, ``syn.mlm_bayes_nll``)
    over the first ``n_eval`` validation sequences, or the first ones within the CPU budget."""
    W = pool["input_ids"].shape[1] - 1
    n = corpus.chain.n_states
    per_step = n * n if n <= 2048 else corpus.chain.nnz
    n_seq = min(n_eval, MLM_FLOOR_MAX_SEQUENCES)
    if device == "cpu":
        n_seq = int(max(1, min(n_seq, MLM_FLOOR_CPU_BUDGET // (2 * W * per_step))))
    t0 = time.perf_counter()

    nll = syn.mlm_bayes_nll(corpus.chain, corpus.pi, pool["input_ids"][:n_seq, 1:].numpy(),
                            pool["labels"][:n_seq, 1:].numpy(), device=device)
    floor = float(nll.mean())
    meta = {
        "loss_floor_kind": "mlm_bayes_posterior",
        "loss_floor_sequences": n_seq, "loss_floor_eval_sequences": n_eval,
        "loss_floor_exact": n_seq == n_eval, "loss_floor_positions": int(len(nll)),
        "loss_floor_stderr": float(nll.std() / math.sqrt(max(1, len(nll)))),
        "loss_floor_s": round(time.perf_counter() - t0, 3),
        "loss_floor_note": ("mean over the scored positions of the first loss_floor_sequences "
                            "validation sequences of -log p(token | whole masked sequence), "
                            "exact forward-backward over the chain with the 80/10/10 corruption; "
                            + ("exact for the evaluation set" if n_seq == n_eval else
                               "the evaluation set's first sequences (MLM_FLOOR_MAX_SEQUENCES, and a "
                               "CPU budget); stderr is its sampling error")),
    }
    return floor, meta


def _synthetic_cls(run: RunConfig) -> TaskData:
    task, T, V, L = run.scn.task, run.seq_len, run.vocab_size, run.num_labels
    n_train, n_val = SYNTH_CLS_DOCS[run.size]
    t0 = time.perf_counter()

    c = _label_corpus(V, L, T - 2, n_train, n_val)  # room for <s> ... </s>
    generate_s = time.perf_counter() - t0
    counts = syn.label_counts(c.train_labels, L)
    ids = {}
    for split, tokens, lengths in (("train", c.train_tokens, c.train_len), ("val", c.val_tokens, c.val_len)):
        ids[split] = assemble(tokens, lengths, T, run.scn.arch, syn.BOS_ID, syn.EOS_ID, syn.PAD_ID)
    train = cls_arrays(*ids["train"], c.train_labels, counts)
    val = cls_arrays(*ids["val"], c.val_labels, counts)
    t1 = time.perf_counter()
    bayes = _bayes_values(task, V, L, T - 2, n_train, n_val)
    space = c.space
    meta = {"data_seed": syn.DATA_SEED, "generate_s": round(generate_s, 3),
            "signature_tokens_per_label": 1, "signature_rate_present": space.rate_present,
            "signature_rate_absent": space.rate_absent,
            "label_prior_max": float(space.freq.max()), "label_prior_min": float(space.freq.min()),
            "single_label_rule": "most frequent training label of the document, ties -> lowest id",
            "floor_kind": "bayes_posterior", "floor_s": round(time.perf_counter() - t1, 3),
            **{f"bayes_{k}": float(v.mean()) for k, v in bayes.items()},
            **label_stats(train, val, counts)}
    return TaskData(task=task, vocab_size=V, seq_len=T, num_labels=L, pad_id=syn.PAD_ID,
                    bos_id=syn.BOS_ID, mask_id=None, loss_floor=None, source="synthetic", meta=meta,
                    train=train, val_pool=cls_pool(val, task, L),
                    special_ids=SPECIALS, corpus=c,
                    floor_values=bayes)


@functools.lru_cache(maxsize=4)
def _bayes_values(task: str, V: int, L: int, max_len: int, n_train: int, n_val: int) -> dict[str, np.ndarray]:
    """Per validation document, the Bayes-optimal predictor's expected value of each quality
    metric (``syn.bayes_multilabel`` / ``syn.bayes_singlelabel``), cached with the corpus."""
    def build():
        c = _label_corpus(V, L, max_len, n_train, n_val)
        if task == "multilabel":
            return syn.bayes_multilabel(c.space, c.val_tokens)
        return syn.bayes_singlelabel(c.space, c.val_tokens, syn.label_counts(c.train_labels, L))
    return _on_disk(f"bayes{LABEL_CACHE_VERSION}{task}", build, V, L, max_len, n_train, n_val)


def load(run: RunConfig) -> TaskData:
    """The synthetic data of ``run`` (sizes resolved), cached under ``run.cache_dir``."""
    global _synth_cache_dir
    _synth_cache_dir = Path(run.cache_dir).expanduser()
    return _synthetic_lm(run) if run.scn.is_lm else _synthetic_cls(run)
