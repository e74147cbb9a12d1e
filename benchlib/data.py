"""Data for the six scenarios: embedded synthetic data (default, no network), the real
data sets by hub id (OpenWebText, EUR-Lex 57k) and local files of the same schema.

Contract used by train.py:

    data = load_task_data(run)          # run: resolved RunConfig
    data.vocab_size, data.num_labels, data.pad_id, data.bos_id, data.mask_id, data.loss_floor
    next_batch = data.sampler(batch_size, device, seed)   # () -> dict of device tensors
    val = data.val_batches(batch_size, n_batches, device)  # fixed list of dicts

Batches (padding on the RIGHT; RoBERTa scenarios B, D, F start every sequence with bos_id):
    clm:         {"input_ids": LongTensor[B,T], "labels": LongTensor[B,T]}
                 labels are already the next tokens (windows of T+1): do not shift again.
    mlm:         {"input_ids": LongTensor[B,T] (masked), "labels": LongTensor[B,T] (-100 = not scored)}
                 15% of non-special positions are scored; of those 80% -> mask_id,
                 10% -> a random non-special token, 10% unchanged.
    multilabel:  {"input_ids", "attention_mask": LongTensor[B,T], "labels": FloatTensor[B,L] multi-hot}
    singlelabel: {"input_ids", "attention_mask", "labels": LongTensor[B]}

``data`` selects the source:
    "synthetic"  embedded generators (``benchlib.synthetic``), seeded by a fixed data seed
                 so every run of a study sees the same corpus; the LM corpora have an exact
                 loss floor.
    "hub"        Skylion007/openwebtext (A, B) or NLP-AUEB/eurlex "eurlex57k" (C-F) through
                 ``datasets``; no hub access -> one ``DataUnavailableError``.
    <path>       A/B: a .txt file (documents = blank-line separated paragraphs), a folder of
                 .txt files, or .jsonl/.json/.parquet with a ``text`` field. C-F: .jsonl/.json/
                 .parquet with ``text`` + ``labels`` (strings or ints), or EUR-Lex's own schema
                 (``title``, ``text``, ``eurovoc_concepts``).

Real-data rules (all deterministic):
    * LM: documents are tokenised once (EOS appended to each) into a uint16 (uint32 when the
      vocabulary exceeds 65536) memmap cached under ``cache_dir/tokens``; the last 5% of the
      tokens (at least one window, at most 4M tokens) are validation.
    * Classification: the data set's validation split (else test), a ``split`` field
      (train / validation|val|valid|dev / test), split-named files in a folder, or else the
      last 10% of the documents. String labels get ids from the sorted training label
      vocabulary (validation labels unseen in training are dropped and counted); int labels
      are used as ids. Single-label target = the document's label most frequent in the
      training set, ties -> lowest id (the same rule as the synthetic corpus).
    * Tokenizer: ``run.tokenizer`` or ``run.model_name_or_path`` if given, else GPT-2's /
      RoBERTa's for hub data and, for local data, a byte-level BPE trained on the corpus and
      cached under ``cache_dir/tokenizers`` keyed by the corpus hash (also the fallback when a
      given tokenizer cannot be loaded offline for a local corpus).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import math
import os
import pickle
import re
import socket
import time
import urllib.parse
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch

from . import synthetic as syn
from .runconfig import RunConfig, resolved

Batch = dict[str, torch.Tensor]

OWT_ID = "Skylion007/openwebtext"
EURLEX_ID, EURLEX_CONFIG = "NLP-AUEB/eurlex", "eurlex57k"

DEVICE_RESIDENT_MAX_BYTES = 2 << 30
"""Training arrays below this size (as int32) live on the device: batches are then drawn
with a device generator, without host sync or host->device copy per step."""
LM_VAL_POOL = 1024
"""Validation windows held for LM tasks; ``val_batches`` takes the first ones (cycling past
the end)."""
VAL_MASK_SEED = 1234
"""Seed of the fixed MLM validation masks (never the run seed)."""
SYNTH_LM_TRAIN_TOKENS = {"tiny": 1 << 18, "small": 1 << 22, "base": 24 << 20}
SYNTH_CLS_DOCS = {"tiny": (4096, 512), "small": (16384, 2048), "base": (45000, 6000)}
"""(train, validation) documents; base mirrors EUR-Lex 57k's 45k / 6k."""
MLM_FLOOR_CPU_BUDGET = 4e9
"""Multiply-adds allowed for the MLM floor's forward-backward on CPU; past it the floor is
computed on the first validation sequences that fit (recorded in meta). On CUDA the whole
evaluation set is used."""
LM_VAL_FRACTION, LM_VAL_MAX_TOKENS = 0.05, 4_000_000
CLS_VAL_FRACTION = 0.10
BPE_MIN_VOCAB, BPE_MAX_VOCAB = 512, 50304
"""BPE size = run.vocab_size clamped: at least the 256-byte alphabet + specials + some
merges, at most GPT-2's (padded) size."""
BPE_SPECIALS = ("<pad>", "<s>", "</s>", "<mask>")  # ids 0-3, the synthetic convention
SPLIT_NAMES = {"train": "train", "validation": "validation", "val": "validation",
               "valid": "validation", "dev": "validation", "test": "test"}
LOCAL_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


class DataUnavailableError(ValueError):
    """A data set or tokenizer that cannot be had; the message is one line naming it and the
    offline alternatives."""


class DataPathNotFoundError(DataUnavailableError, FileNotFoundError):
    """A local data path that does not exist or holds no readable files."""


# =======================================================================================
# TaskData: what training sees
# =======================================================================================
@dataclass
class TaskData:
    task: str
    vocab_size: int
    """Embedding rows the model needs, special tokens included."""
    seq_len: int
    num_labels: Optional[int]
    pad_id: int
    bos_id: int
    """``<s>`` / CLS id (RoBERTa pools it); GPT-2 tokenizers use their EOS."""
    mask_id: Optional[int]
    loss_floor: Optional[float]
    """Bayes-optimal validation loss when known (synthetic LM data), else None."""
    source: str
    meta: dict = field(default_factory=dict)
    # ---- payload, not part of the record --------------------------------------------
    train: Any = field(default=None, repr=False)
    """LM: [rows, row_len] token array (windows never cross rows); classification: dict
    of arrays ids [N,T], lengths [N], labels [N,K] (-1 padded), primary [N]."""
    val_pool: Optional[Batch] = field(default=None, repr=False)
    """Validation sequences, batch-formatted CPU tensors with a leading pool dimension."""
    special_ids: tuple = field(default=(), repr=False)
    """Never masked by MLM."""
    corpus: Any = field(default=None, repr=False)
    """The generator of synthetic data (``synthetic.LMCorpus``: chain, stationary
    distribution) for analyses that need the true distribution; None for real data."""

    # ---- training batches ----------------------------------------------------------------
    def sampler(self, batch_size: int, device, seed: int) -> Callable[[], Batch]:
        """Infinite random training batches. Same seed -> same batch sequence."""
        device = torch.device(device)
        if self.task in ("clm", "mlm"):
            return self._lm_sampler(batch_size, device, seed)
        return self._cls_sampler(batch_size, device, seed)

    def val_batches(self, batch_size: int, n_batches: int, device) -> list[Batch]:
        """The first ``batch_size * n_batches`` validation sequences (cycling past the end of
        the pool): identical across calls, configs and run seeds."""
        n_pool = len(next(iter(self.val_pool.values())))
        idx = torch.arange(batch_size * n_batches) % n_pool
        return [{k: v[chunk].to(device) for k, v in self.val_pool.items()}
                for chunk in idx.split(batch_size)]

    def _lm_sampler(self, B: int, device: torch.device, seed: int) -> Callable[[], Batch]:
        W = _lm_window(self.task, self.seq_len)
        rows, row_len = self.train.shape
        n_offsets = row_len - W + 1
        gen = torch.Generator(device=device)  # window draws (when resident) and MLM masks
        gen.manual_seed(seed)
        masker = self._masker(device) if self.task == "mlm" else None

        if _nbytes_int32(self.train) < DEVICE_RESIDENT_MAX_BYTES:
            store = torch.from_numpy(np.ascontiguousarray(self.train).astype(np.int32)).to(device)
            span = torch.arange(W, device=device)

            def draw() -> torch.Tensor:
                r = torch.randint(rows, (B, 1), generator=gen, device=device)
                o = torch.randint(n_offsets, (B, 1), generator=gen, device=device)
                return store[r, o + span].long()
        else:  # large memmapped corpus: gather windows on the host, copy asynchronously
            host_gen = torch.Generator().manual_seed(seed)
            span_np = np.arange(W)

            def draw() -> torch.Tensor:
                r = torch.randint(rows, (B, 1), generator=host_gen).numpy()
                o = torch.randint(n_offsets, (B, 1), generator=host_gen).numpy()
                return _to_device(torch.from_numpy(self.train[r, o + span_np].astype(np.int64)), device)

        def next_batch() -> Batch:
            return _lm_batch(draw(), self.task, self.bos_id, masker, gen)
        return next_batch

    def _cls_sampler(self, B: int, device: torch.device, seed: int) -> Callable[[], Batch]:
        arrays = self.train
        n = len(arrays["ids"])
        resident = sum(_nbytes_int32(a) for a in arrays.values()) < DEVICE_RESIDENT_MAX_BYTES
        home = device if resident else torch.device("cpu")
        t = {k: torch.from_numpy(np.ascontiguousarray(a)).to(home) for k, a in arrays.items()}
        gen = torch.Generator(device=home)
        gen.manual_seed(seed)

        def next_batch() -> Batch:
            i = torch.randint(n, (B,), generator=gen, device=home)
            batch = _cls_batch(t["ids"][i], t["lengths"][i], t["labels"][i], t["primary"][i],
                               self.task, self.num_labels)
            return batch if resident else {k: _to_device(v, device) for k, v in batch.items()}
        return next_batch

    def _masker(self, device: torch.device) -> "_MLMMasker":
        return _MLMMasker.build(self.vocab_size, self.special_ids, self.mask_id, device)


def _lm_window(task: str, seq_len: int) -> int:
    """Tokens cut from the stream per sequence: CLM T+1 (inputs + next-token labels), MLM
    T-1 (plus the leading <s>)."""
    return seq_len + 1 if task == "clm" else seq_len - 1


def _nbytes_int32(a: np.ndarray) -> int:
    return int(np.prod(a.shape)) * max(4, a.dtype.itemsize)


def _to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)


def _lm_batch(w: torch.Tensor, task: str, bos_id: int, masker, gen) -> Batch:
    if task == "clm":
        return {"input_ids": w[:, :-1].contiguous(), "labels": w[:, 1:].contiguous()}
    x = torch.cat([torch.full_like(w[:, :1], bos_id), w], dim=1)
    return masker(x, gen)


@dataclass
class _MLMMasker:
    """BERT/RoBERTa corruption on the device: select each non-special position with p=0.15;
    selected -> <mask> (0.8), a uniform random non-special token (0.1), unchanged (0.1)."""

    special: torch.Tensor       # [V] bool lookup
    random_ids: torch.Tensor    # non-special ids to draw random replacements from
    mask_id: int

    @classmethod
    def build(cls, vocab_size: int, special_ids, mask_id: int, device) -> "_MLMMasker":
        special = torch.zeros(vocab_size, dtype=torch.bool)
        special[[i for i in special_ids if 0 <= i < vocab_size]] = True
        random_ids = torch.nonzero(~special).squeeze(1)
        return cls(special.to(device), random_ids.to(device), mask_id)

    def __call__(self, x: torch.Tensor, gen: torch.Generator) -> Batch:
        shape, dev = x.shape, x.device
        selected = (torch.rand(shape, generator=gen, device=dev) < syn.MLM_SELECT_P) & ~self.special[x]
        how = torch.rand(shape, generator=gen, device=dev)
        rand_tok = self.random_ids[torch.randint(len(self.random_ids), shape, generator=gen, device=dev)]
        inputs = torch.where(selected & (how < syn.MLM_MASK_P), self.mask_id, x)
        to_random = selected & (how >= syn.MLM_MASK_P) & (how < syn.MLM_MASK_P + syn.MLM_RANDOM_P)
        inputs = torch.where(to_random, rand_tok, inputs)
        return {"input_ids": inputs, "labels": torch.where(selected, x, -100)}


def _cls_batch(ids, lengths, labels, primary, task: str, num_labels: int) -> Batch:
    T = ids.shape[1]
    attention = (torch.arange(T, device=ids.device)[None, :] < lengths[:, None]).long()
    if task == "singlelabel":
        return {"input_ids": ids.long(), "attention_mask": attention, "labels": primary.long()}
    # multi-hot: padding slots (-1) write into an extra column that is dropped
    cols = torch.where(labels >= 0, labels, num_labels).long()
    hot = torch.zeros(len(ids), num_labels + 1, device=ids.device).scatter_(1, cols, 1.0)
    return {"input_ids": ids.long(), "attention_mask": attention, "labels": hot[:, :num_labels]}


# =======================================================================================
# Entry point
# =======================================================================================
def load_task_data(run: RunConfig) -> TaskData:
    """Data for ``run.scenario`` from ``run.data`` (see the module docstring)."""
    if run.seq_len is None or run.vocab_size is None or run.num_labels is None:
        run = resolved(run)
    scn = run.scn
    if run.seq_len < (3 if scn.arch == "roberta" else 2):
        raise ValueError(f"seq_len={run.seq_len} is too short for scenario {scn.id}")
    t0 = time.perf_counter()
    if run.data == "synthetic":
        global _synth_cache_dir
        _synth_cache_dir = Path(run.cache_dir).expanduser()
        data = _synthetic_lm(run) if scn.is_lm else _synthetic_cls(run)
    elif scn.is_lm:
        data = _real_lm(run)
    else:
        data = _real_cls(run)
    data.meta.setdefault("build_s", round(time.perf_counter() - t0, 3))
    return data


def _eval_sequences(run: RunConfig) -> int:
    """Sequences of the default evaluation (what train.py evaluates on)."""
    return (run.batch_size or 1) * run.eval_batches


def _floor_device(run: RunConfig) -> str:
    want_cuda = run.device == "cuda" or (run.device == "auto" and torch.cuda.is_available())
    return "cuda" if want_cuda and torch.cuda.is_available() else "cpu"


# =======================================================================================
# Synthetic data
# =======================================================================================
# Synthetic corpora are cached in-process (a notebook running a study builds each once) and
# on disk under <cache_dir>/synthetic (every run of a sweep is a fresh kernel: without it each
# base-size run would spend seconds regenerating the same corpus). Bump on any change to the
# generators so stale files are never read.
SYNTH_CACHE_VERSION = 1
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
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache is not an error
    return obj


@functools.lru_cache(maxsize=2)
def _lm_corpus(vocab_size: int, window: int, n_train_tokens: int) -> syn.LMCorpus:
    return _on_disk("lm", lambda: syn.make_lm_corpus(vocab_size, window, n_train_tokens, LM_VAL_POOL),
                    vocab_size, window, n_train_tokens, LM_VAL_POOL)


@functools.lru_cache(maxsize=2)
def _label_corpus(vocab_size: int, num_labels: int, max_len: int, n_train: int, n_val: int) -> syn.LabelCorpus:
    return _on_disk("labels", lambda: syn.make_label_corpus(vocab_size, num_labels, max_len, n_train, n_val),
                    vocab_size, num_labels, max_len, n_train, n_val)


def _synthetic_lm(run: RunConfig) -> TaskData:
    task, T, V = run.scn.task, run.seq_len, run.vocab_size
    W = _lm_window(task, T)
    t0 = time.perf_counter()
    corpus = _lm_corpus(V, W, SYNTH_LM_TRAIN_TOKENS[run.size])
    specials = (syn.PAD_ID, syn.BOS_ID, syn.EOS_ID, syn.MASK_ID)
    meta = {
        "data_seed": syn.DATA_SEED, "generate_s": round(time.perf_counter() - t0, 3),
        "n_train_tokens": int(corpus.train.size), "train_rows": int(corpus.train.shape[0]),
        "n_val_sequences": LM_VAL_POOL, "chain_states": corpus.chain.n_states,
        "chain_transitions": corpus.chain.nnz,
        "successors_per_token": round(corpus.chain.nnz / corpus.chain.n_states, 2),
        "entropy_rate": corpus.entropy_rate, "stationary_entropy": corpus.stationary_entropy,
        "uniform_entropy": math.log(corpus.chain.n_states),
    }
    n_eval = min(_eval_sequences(run), LM_VAL_POOL)
    if task == "clm":
        val = torch.from_numpy(corpus.val)
        pool = {"input_ids": val[:, :-1].contiguous(), "labels": val[:, 1:].contiguous()}
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
                                                     _floor_device(run))
        meta.update(floor_meta)
    return TaskData(task=task, vocab_size=V, seq_len=T, num_labels=None, pad_id=syn.PAD_ID,
                    bos_id=syn.BOS_ID, mask_id=syn.MASK_ID if task == "mlm" else None,
                    loss_floor=floor, source="synthetic", meta=meta, train=corpus.train,
                    val_pool=pool, special_ids=specials, corpus=corpus)


@functools.lru_cache(maxsize=2)
def _synthetic_mlm_val(V: int, W: int, n_train_tokens: int, n_eval: int, device: str) -> tuple[Batch, float, dict]:
    """The fixed masked validation pool and its Bayes floor (cached: the forward-backward
    is the slow part of building MLM data)."""
    def build():
        corpus = _lm_corpus(V, W, n_train_tokens)
        val = torch.from_numpy(corpus.val)
        masker = _MLMMasker.build(V, (syn.PAD_ID, syn.BOS_ID, syn.EOS_ID, syn.MASK_ID), syn.MASK_ID, "cpu")
        pool = masker(torch.cat([torch.full_like(val[:, :1], syn.BOS_ID), val], 1),
                      torch.Generator().manual_seed(VAL_MASK_SEED))
        return (pool, *_mlm_floor(corpus, pool, n_eval, device))
    return _on_disk("mlmval", build, V, W, n_train_tokens, n_eval, device)


def _mlm_floor(corpus: syn.LMCorpus, pool: Batch, n_eval: int, device: str) -> tuple[float, dict]:
    """Bayes loss of the fixed validation masks (forward-backward, ``syn.mlm_bayes_nll``)
    over the first ``n_eval`` validation sequences, or the first ones within the CPU budget."""
    W = pool["input_ids"].shape[1] - 1
    n = corpus.chain.n_states
    per_step = n * n if n <= 2048 else corpus.chain.nnz
    n_seq = n_eval
    if device == "cpu":
        n_seq = int(max(1, min(n_eval, MLM_FLOOR_CPU_BUDGET // (2 * W * per_step))))
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
                            + ("exact for the default evaluation set" if n_seq == n_eval else
                               "a subsample of the default evaluation set (CPU budget); "
                               "stderr is its sampling error")),
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
        ids[split] = _assemble(tokens, lengths, T, run.scn.arch, syn.BOS_ID, syn.EOS_ID, syn.PAD_ID)
    train = _cls_arrays(*ids["train"], c.train_labels, counts)
    val = _cls_arrays(*ids["val"], c.val_labels, counts)
    meta = {"data_seed": syn.DATA_SEED, "generate_s": round(generate_s, 3),
            "signature_tokens_per_label": syn.SIG_TOKENS, "signature_tokens_per_doc_label": syn.SIG_PER_LABEL,
            "single_label_rule": "most frequent training label of the document, ties -> lowest id",
            **_label_stats(train, val, counts)}
    return TaskData(task=task, vocab_size=V, seq_len=T, num_labels=L, pad_id=syn.PAD_ID,
                    bos_id=syn.BOS_ID, mask_id=None, loss_floor=None, source="synthetic", meta=meta,
                    train=train, val_pool=_cls_pool(val, task, L),
                    special_ids=(syn.PAD_ID, syn.BOS_ID, syn.EOS_ID, syn.MASK_ID))


def _assemble(tokens: np.ndarray, lengths: np.ndarray, T: int, arch: str, bos: int, eos: int,
              pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Model inputs from right-padded content tokens: RoBERTa ``<s> content </s>``
    (content cut to T-2), GPT-2 the content (cut to T; an empty document becomes one EOS so
    last-token pooling has a token)."""
    n = len(tokens)
    keep = T - 2 if arch == "roberta" else T
    lengths = np.minimum(lengths, keep)
    content = np.full((n, keep), pad, dtype=np.int32)
    width = min(keep, tokens.shape[1])
    content[:, :width] = tokens[:, :width]
    content[np.arange(keep)[None, :] >= lengths[:, None]] = pad
    out = np.full((n, T), pad, dtype=np.int32)
    if arch == "roberta":
        out[:, 0] = bos
        out[:, 1:T - 1] = content
        out[np.arange(n), lengths + 1] = eos
        return out, (lengths + 2).astype(np.int64)
    out[:, :keep] = content
    empty = lengths == 0
    out[empty, 0] = eos
    return out, np.maximum(lengths, 1).astype(np.int64)


def _cls_arrays(ids, lengths, labels, train_counts) -> dict[str, np.ndarray]:
    return {"ids": ids, "lengths": lengths, "labels": labels,
            "primary": syn.primary_labels(labels, train_counts)}


def _cls_pool(arrays: dict, task: str, num_labels: int) -> Batch:
    t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    return _cls_batch(t["ids"], t["lengths"], t["labels"], t["primary"], task, num_labels)


def _label_stats(train: dict, val: dict, counts: np.ndarray) -> dict:
    per_doc = (train["labels"] >= 0).sum(1)
    n = len(per_doc)
    top = np.sort(counts)[::-1]
    return {
        "n_train": int(n), "n_val": int(len(val["ids"])),
        "labels_per_doc_mean": float(per_doc.mean()), "labels_per_doc_max": int(per_doc.max()),
        "label_doc_frac_top10": [round(float(c) / n, 4) for c in top[:10]],
        "label_docs_median": float(np.median(counts)),
        "labels_unseen_in_train": int((counts == 0).sum()),
        "labels_under_5_docs": int((counts < 5).sum()),
        "primary_label_classes": int(len(np.unique(train["primary"][train["primary"] >= 0]))),
        "tokens_per_doc_mean": float(train["lengths"].mean()),
    }


# =======================================================================================
# Hub access
# =======================================================================================
def _offline() -> bool:
    """HF offline mode, read now (datasets reads the variables only at import)."""
    true = {"1", "ON", "YES", "TRUE"}
    env = any(os.environ.get(k, "").upper() in true for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return env or _library_offline()


def _library_offline() -> bool:
    try:
        import datasets.config
        return bool(datasets.config.HF_HUB_OFFLINE)
    except ImportError:
        return False


@functools.lru_cache(maxsize=1)
def _hub_reachable(timeout: float = 3.0) -> bool:
    """One TCP connect to the hub endpoint. Without it an unreachable hub costs ~25 s of
    huggingface_hub's own retries per request before failing."""
    from huggingface_hub import constants
    url = urllib.parse.urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def _hub_offline(active: bool):
    """Put datasets / huggingface_hub in offline mode for one call, so cached copies still
    load and missing ones fail at once instead of retrying."""
    if not active:
        yield
        return
    import datasets.config
    from huggingface_hub import constants
    saved = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def _one_line(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {text[:limit]}"


def _load_hub_dataset(dataset_id: str, config: Optional[str], schema: str):
    """``datasets.load_dataset`` with no retries; any failure -> one DataUnavailableError."""
    from datasets import DownloadConfig, load_dataset
    offline = _offline() or not _hub_reachable()
    try:
        with _hub_offline(offline):
            return load_dataset(dataset_id, config, download_config=DownloadConfig(max_retries=0))
    except Exception as e:  # network, auth, missing config: all end the same way for the user
        where = f"{dataset_id!r}" + (f" (config {config!r})" if config else "")
        raise DataUnavailableError(
            f"cannot load dataset {where} from the Hugging Face hub"
            f"{' (offline)' if offline else ''}: {_one_line(e)}. Offline alternatives: "
            f"data='synthetic' (embedded generator) or data=<local path> with the same schema ({schema})"
        ) from None


# =======================================================================================
# Tokenizers
# =======================================================================================
@dataclass
class _Tok:
    """The few tokenizer facts the data pipeline needs, for HF and trained-BPE tokenizers."""

    name: str
    kind: str  # "pretrained" | "bpe"
    vocab_size: int
    pad_id: int
    bos_id: int
    eos_id: int
    mask_id: Optional[int]
    special_ids: tuple
    fingerprint: str
    encode: Callable[[list[str], Optional[int]], list[list[int]]] = field(repr=False)
    cached: bool = False


def _load_pretrained_tokenizer(name: str) -> _Tok:
    from transformers import AutoTokenizer
    local_only = _offline() or not (Path(name).expanduser().exists() or _hub_reachable())
    try:
        with _hub_offline(local_only), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tok = AutoTokenizer.from_pretrained(name, local_files_only=local_only)
    except Exception as e:
        raise DataUnavailableError(f"cannot load tokenizer {name!r}"
                                   f"{' (offline)' if local_only else ''}: {_one_line(e)}") from None
    eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    bos = next((i for i in (tok.bos_token_id, tok.cls_token_id, eos) if i is not None), None)
    if eos is None or bos is None:
        raise DataUnavailableError(f"tokenizer {name!r} has no EOS/SEP token to separate documents")
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    backend = getattr(tok, "backend_tokenizer", None)
    spec = backend.to_str() if backend is not None else json.dumps(sorted(tok.get_vocab().items()))

    def encode(texts: list[str], max_len: Optional[int] = None) -> list[list[int]]:
        return tok(texts, add_special_tokens=False, truncation=max_len is not None,
                   max_length=max_len, return_attention_mask=False)["input_ids"]
    return _Tok(name=name, kind="pretrained", vocab_size=len(tok), pad_id=pad, bos_id=bos, eos_id=eos,
                mask_id=tok.mask_token_id, special_ids=tuple(sorted(set(tok.all_special_ids))),
                fingerprint=_sha(spec.encode()), encode=encode)


def _bpe_tokenizer(texts: Callable[[], Iterator[list[str]]], corpus_hash: str, vocab_size: int,
                   cache_dir: Path) -> _Tok:
    """Byte-level BPE with ``<pad> <s> </s> <mask>`` = ids 0-3, trained on the corpus once and
    cached as ``cache_dir/tokenizers/bpe-<corpus hash>-<vocab>.json``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    size = min(max(vocab_size, BPE_MIN_VOCAB), BPE_MAX_VOCAB)
    path = cache_dir / "tokenizers" / f"bpe-{corpus_hash[:16]}-{size}.json"
    cached = path.exists()
    if cached:
        tok = Tokenizer.from_file(str(path))
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=list(BPE_SPECIALS),
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(texts(), trainer)
        _atomic_write(path, tok.to_str().encode())
    pad, bos, eos, mask = (tok.token_to_id(s) for s in BPE_SPECIALS)

    def encode(batch: list[str], max_len: Optional[int] = None) -> list[list[int]]:
        return [e.ids[:max_len] for e in tok.encode_batch(batch, add_special_tokens=False)]
    return _Tok(name=str(path), kind="bpe", vocab_size=tok.get_vocab_size(), pad_id=pad, bos_id=bos,
                eos_id=eos, mask_id=mask, special_ids=(pad, bos, eos, mask),
                fingerprint=_sha(path.read_bytes()), encode=encode, cached=cached)


def _resolve_tokenizer(run: RunConfig, local: bool, texts, corpus_hash: str) -> _Tok:
    """The given tokenizer/model's; else the architecture's for hub data; else (local data,
    or a given one that cannot be loaded offline for local data) a cached byte-level BPE."""
    name = run.tokenizer or run.model_name_or_path
    if name is None and not local:
        name = "gpt2" if run.scn.arch == "gpt2" else "roberta-base"
    if name is not None:
        try:
            return _load_pretrained_tokenizer(name)
        except DataUnavailableError as e:
            if not local:
                raise DataUnavailableError(f"{e}. Offline alternative: data='synthetic'") from None
            warnings.warn(f"{e}; training a byte-level BPE on the local corpus instead")
    return _bpe_tokenizer(texts, corpus_hash, run.vocab_size, _cache_dir(run))


def _tok_meta(tok: _Tok) -> dict:
    return {"tokenizer": tok.name, "tokenizer_kind": tok.kind, "tokenizer_cached": tok.cached,
            "tokenizer_fingerprint": tok.fingerprint[:16]}


# =======================================================================================
# Local files
# =======================================================================================
def _cache_dir(run: RunConfig) -> Path:
    return Path(run.cache_dir).expanduser()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _local_files(path: Path, expected: str) -> tuple[str, dict[str, list[str]]]:
    """(datasets builder, data_files) for a local file or folder. A folder whose file names
    start with split names (train / validation|val|valid|dev / test) keeps those splits."""
    if not path.exists():
        raise DataPathNotFoundError(f"data path not found: {path} (expected {expected}; "
                                    f"or use data='synthetic' / data='hub')")
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in LOCAL_BUILDERS)
    if not files:
        raise DataPathNotFoundError(f"no .txt/.jsonl/.json/.parquet files under {path} (expected {expected})")
    builders = {LOCAL_BUILDERS.get(p.suffix.lower()) for p in files}
    if None in builders or len(builders) > 1:
        raise ValueError(f"{path}: mixed or unsupported file types {sorted({p.suffix for p in files})}; "
                         f"use one of {', '.join(LOCAL_BUILDERS)}")
    splits: dict[str, list[str]] = {}
    for p in files:
        word = re.split(r"[^a-z]", p.stem.lower())[0]
        splits.setdefault(SPLIT_NAMES.get(word, "train") if path.is_dir() else "train", []).append(str(p))
    if len(splits) == 1 or "train" not in splits:
        splits = {"train": [str(p) for p in files]}
    return builders.pop(), splits


def _hash_files(files: list[str]) -> str:
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(Path(f).name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _load_local_dataset(path: Path, builder: str, data_files: dict, run: RunConfig):
    """Read local files through ``datasets`` (the same code path as hub data). Plain text
    is read one document per blank-line separated paragraph."""
    from datasets import load_dataset
    extra = {"sample_by": "paragraph"} if builder == "text" else {}
    try:
        with _hub_offline(True):  # local files never need the network
            return load_dataset(builder, data_files=data_files,
                                cache_dir=str(_cache_dir(run) / "hf_datasets"), **extra)
    except Exception as e:
        raise DataUnavailableError(f"cannot read {path} with the datasets {builder!r} loader: {_one_line(e)}") from None


def _iter_texts(ds, column: str = "text", batch: int = 1000) -> Iterator[list[str]]:
    for rows in ds.iter(batch_size=batch):
        yield [t for t in rows[column] if t]


# =======================================================================================
# Real LM data
# =======================================================================================
def _real_lm(run: RunConfig) -> TaskData:
    T, task = run.seq_len, run.scn.task
    W = _lm_window(task, T)
    local = run.data != "hub"
    if local:
        path = Path(run.data).expanduser().resolve()
        builder, files = _local_files(path, "a .txt file or folder, or .jsonl/.parquet with a 'text' field")
        ds = _load_local_dataset(path, builder, {"train": sum(files.values(), [])}, run)["train"]
        content_hash, source, slug = _hash_files(sum(files.values(), [])), str(path), path.stem
    else:
        ds = _load_hub_dataset(OWT_ID, None, "a 'text' field")["train"]
        content_hash, source, slug = _sha(ds._fingerprint.encode()), f"hub:{OWT_ID}", "openwebtext"
    if "text" not in ds.column_names:
        raise ValueError(f"{source}: LM data needs a 'text' field; found {ds.column_names}")
    tok = _resolve_tokenizer(run, local, lambda: _iter_texts(ds), content_hash)
    if task == "mlm" and tok.mask_id is None:
        raise DataUnavailableError(f"tokenizer {tok.name!r} has no mask token, needed for MLM")
    stream, stream_meta = _token_stream(ds, tok, _cache_dir(run), f"{slug}-{content_hash[:16]}")

    N = len(stream)
    n_val = min(max(math.ceil(LM_VAL_FRACTION * N), W), LM_VAL_MAX_TOKENS)
    if N - n_val < W:
        raise ValueError(f"{source}: {N} tokens is too small for seq_len={T} "
                         f"(needs > {2 * W} tokens: {W} per window, train and validation)")
    train = stream[:N - n_val].reshape(1, -1)  # one row: windows may cross documents (EOS between)
    n_pool = min(LM_VAL_POOL, n_val // W)
    windows = torch.from_numpy(np.asarray(stream[N - n_val:N - n_val + n_pool * W], dtype=np.int64).reshape(n_pool, W))
    if task == "clm":
        pool = {"input_ids": windows[:, :-1].contiguous(), "labels": windows[:, 1:].contiguous()}
    else:
        masker = _MLMMasker.build(tok.vocab_size, tok.special_ids, tok.mask_id, "cpu")
        pool = masker(torch.cat([torch.full_like(windows[:, :1], tok.bos_id), windows], 1),
                      torch.Generator().manual_seed(VAL_MASK_SEED))
    meta = {**stream_meta, **_tok_meta(tok), "n_train_tokens": N - n_val, "n_val_tokens": n_val,
            "n_val_sequences": n_pool, "val_rule": f"last {LM_VAL_FRACTION:.0%} of the tokens "
            f"(>= 1 window, <= {LM_VAL_MAX_TOKENS}), non-overlapping windows"}
    return TaskData(task=task, vocab_size=tok.vocab_size, seq_len=T, num_labels=None, pad_id=tok.pad_id,
                    bos_id=tok.bos_id, mask_id=tok.mask_id if task == "mlm" else None, loss_floor=None,
                    source=source, meta=meta, train=train, val_pool=pool, special_ids=tok.special_ids)


def _token_stream(ds, tok: _Tok, cache_dir: Path, key: str) -> tuple[np.memmap, dict]:
    """All documents tokenised with EOS after each, as a memmap cached under
    ``cache_dir/tokens/<source>-<content hash>-<tokenizer hash>.bin`` (+ .json facts)."""
    dtype = np.uint16 if tok.vocab_size <= 1 << 16 else np.uint32
    base = cache_dir / "tokens" / f"{key}-{tok.fingerprint[:12]}"
    bin_path, info_path = base.with_suffix(".bin"), base.with_suffix(".json")
    if info_path.exists() and bin_path.exists():
        info = json.loads(info_path.read_text())
        if info["dtype"] == np.dtype(dtype).name and bin_path.stat().st_size == info["n_tokens"] * np.dtype(dtype).itemsize:
            return np.memmap(bin_path, dtype=dtype, mode="r"), {**info, "token_cache": "hit"}
    bin_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = bin_path.with_name(bin_path.name + f".tmp{os.getpid()}")
    n_tokens = n_docs = 0
    t0 = time.perf_counter()
    with open(tmp, "wb") as fh:
        # fast tokenizers encode a batch on all cores, so no worker processes are needed
        for texts in _iter_texts(ds, batch=8192):
            flat = _join_with_eos(tok.encode(texts, None), tok.eos_id, dtype)
            fh.write(flat.tobytes())
            n_tokens, n_docs = n_tokens + len(flat), n_docs + len(texts)
    if n_tokens == 0:
        tmp.unlink()
        raise ValueError(f"{key}: the corpus holds no text")
    os.replace(tmp, bin_path)
    info = {"n_tokens": n_tokens, "n_docs": n_docs, "dtype": np.dtype(dtype).name,
            "tokenize_s": round(time.perf_counter() - t0, 2), "token_cache_path": str(bin_path)}
    _atomic_write(info_path, json.dumps(info).encode())
    return np.memmap(bin_path, dtype=dtype, mode="r"), {**info, "token_cache": "built"}


def _join_with_eos(docs: list[list[int]], eos: int, dtype) -> np.ndarray:
    """Concatenate token lists with EOS after each document (C-level iteration: OpenWebText
    has ~9B tokens)."""
    lengths = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
    body = np.fromiter(itertools.chain.from_iterable(docs), dtype=dtype, count=int(lengths.sum()))
    out = np.empty(len(body) + len(docs), dtype=dtype)
    ends = np.cumsum(lengths + 1) - 1
    is_body = np.ones(len(out), dtype=bool)
    is_body[ends] = False
    out[is_body] = body
    out[ends] = eos
    return out


# =======================================================================================
# Real classification data
# =======================================================================================
def _real_cls(run: RunConfig) -> TaskData:
    task, T, arch = run.scn.task, run.seq_len, run.scn.arch
    local = run.data != "hub"
    if local:
        path = Path(run.data).expanduser().resolve()
        builder, files = _local_files(path, "a .jsonl/.parquet of {text, labels} or EUR-Lex's "
                                            "{title, text, eurovoc_concepts}")
        if builder == "text":
            raise ValueError(f"{path}: classification data needs labels: use .jsonl/.json/.parquet "
                             f"with text + labels (or title, text, eurovoc_concepts)")
        dd = _load_local_dataset(path, builder, files, run)
        content_hash, source, slug = _hash_files(sum(files.values(), [])), str(path), path.stem
    else:
        dd = _load_hub_dataset(EURLEX_ID, EURLEX_CONFIG, "title, text, eurovoc_concepts")
        content_hash = _sha("".join(d._fingerprint for d in dd.values()).encode())
        source, slug = f"hub:{EURLEX_ID}", EURLEX_CONFIG
    train_ds, val_ds, split_rule = _cls_splits(dd)
    train_texts, train_raw = _docs(train_ds, source)
    val_texts, val_raw = _docs(val_ds, source)
    label_ids, label_rule = _label_vocabulary(train_raw, val_raw)
    L = len(label_ids) if label_rule == "sorted" else max(label_ids.values()) + 1
    train_lab, _ = _label_array(train_raw, label_ids)
    val_lab, val_dropped = _label_array(val_raw, label_ids)

    tok = _resolve_tokenizer(run, local, lambda: _batched(train_texts), content_hash)
    keep = T - 2 if arch == "roberta" else T
    enc_key = f"cls-{slug}-{content_hash[:16]}-{tok.fingerprint[:12]}-{arch}-T{T}"
    ids, enc_meta = _cached_encoding(_cache_dir(run) / "tokens" / f"{enc_key}.npz", tok, keep, T, arch,
                                     {"train": train_texts, "val": val_texts})
    counts = syn.label_counts(train_lab, L)
    train = _cls_arrays(ids["train_ids"], ids["train_len"], train_lab, counts)
    val = _cls_arrays(ids["val_ids"], ids["val_len"], val_lab, counts)
    dropped = {}
    if task == "singlelabel":  # documents without any (known) label have no target
        for name, arrays in (("train", train), ("val", val)):
            ok = arrays["primary"] >= 0
            dropped[f"{name}_docs_without_label"] = int((~ok).sum())
            arrays.update({k: v[ok] for k, v in arrays.items()})
    if len(train["ids"]) == 0 or len(val["ids"]) == 0:
        raise ValueError(f"{source}: no labelled documents left in the train or validation split")
    meta = {**_tok_meta(tok), **enc_meta, **_label_stats(train, val, counts), **dropped,
            "split_rule": split_rule, "label_ids": label_rule, "val_labels_unseen_dropped": val_dropped,
            "single_label_rule": "most frequent training label of the document, ties -> lowest id"}
    return TaskData(task=task, vocab_size=tok.vocab_size, seq_len=T, num_labels=L, pad_id=tok.pad_id,
                    bos_id=tok.bos_id, mask_id=None, loss_floor=None, source=source, meta=meta,
                    train=train, val_pool=_cls_pool(val, task, L), special_ids=tok.special_ids)


def _cls_splits(dd) -> tuple[Any, Any, str]:
    """(train, validation, rule): a validation (else test) split; else a ``split`` field;
    else the last 10% of the documents."""
    if "train" in dd and len(dd) > 1:
        other = "validation" if "validation" in dd else "test"
        if other in dd:
            return dd["train"], dd[other], f"{other} split"
    ds = dd["train"]
    if "split" in ds.column_names:
        names = [SPLIT_NAMES.get(str(s).lower(), "train") for s in ds["split"]]
        target = "validation" if "validation" in names else "test"
        tr = [i for i, s in enumerate(names) if s == "train"]
        va = [i for i, s in enumerate(names) if s == target]
        if tr and va:
            return ds.select(tr), ds.select(va), f"'split' field ({target})"
    n_val = max(1, math.ceil(CLS_VAL_FRACTION * len(ds)))
    if len(ds) - n_val < 1:
        raise ValueError(f"only {len(ds)} documents: too few to split off validation")
    return (ds.select(range(len(ds) - n_val)), ds.select(range(len(ds) - n_val, len(ds))),
            f"last {CLS_VAL_FRACTION:.0%} of the documents")


def _docs(ds, source: str) -> tuple[list[str], list[list]]:
    """Texts and raw label lists from the {text, labels} or EUR-Lex schema."""
    cols = ds.column_names
    if "text" not in cols or not ({"labels", "label", "eurovoc_concepts"} & set(cols)):
        raise ValueError(f"{source}: expected fields text + labels (or EUR-Lex's title, text, "
                         f"eurovoc_concepts); found {cols}")
    texts = ds["text"]
    if "title" in cols:  # EUR-Lex: the title is part of the document
        texts = [f"{t or ''}\n{x or ''}" for t, x in zip(ds["title"], texts)]
    if "eurovoc_concepts" in cols:
        raw = ds["eurovoc_concepts"]
    elif "labels" in cols:
        raw = ds["labels"]
    else:
        raw = [[x] for x in ds["label"]]
    raw = [[] if r is None else list(r) if isinstance(r, (list, tuple)) else [r] for r in raw]
    return [t or "" for t in texts], raw


def _label_vocabulary(train_raw: list[list], val_raw: list[list]) -> tuple[dict, str]:
    """Int labels are their own ids; anything else gets ids from the sorted training
    vocabulary of its string form."""
    every = [x for r in train_raw + val_raw for x in r]
    if every and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0 for x in every):
        return {int(x): int(x) for x in every}, "int"
    vocab = sorted({str(x) for r in train_raw for x in r})
    if not vocab:
        raise ValueError("no labels in the training split")
    return {v: i for i, v in enumerate(vocab)}, "sorted"


def _label_array(raw: list[list], ids: dict) -> tuple[np.ndarray, int]:
    """[N, K] ascending label ids padded with -1, and the count of labels not in ``ids``."""
    int_ids = all(isinstance(k, int) for k in ids)
    rows, dropped = [], 0
    for r in raw:
        keys = [int(x) if int_ids else str(x) for x in r]
        row = sorted({ids[k] for k in keys if k in ids})
        dropped += sum(k not in ids for k in keys)
        rows.append(row)
    out = np.full((len(rows), max(1, max(map(len, rows), default=1))), -1, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out, dropped


def _batched(items: list, size: int = 1000) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield [t for t in items[i:i + size] if t]


def _cached_encoding(path: Path, tok: _Tok, keep: int, T: int, arch: str,
                     splits: dict[str, list[str]]) -> tuple[dict, dict]:
    """Token ids [N, T] and lengths per split, cached as one .npz (EUR-Lex takes minutes)."""
    if path.exists():
        with np.load(path) as z:
            return {k: z[k] for k in z.files}, {"token_cache": "hit"}
    out = {}
    for name, texts in splits.items():
        lists = [ids for i in range(0, len(texts), 4096) for ids in tok.encode(texts[i:i + 4096], keep)]
        tokens = np.full((len(lists), keep), tok.pad_id, dtype=np.int32)
        lengths = np.array([len(x) for x in lists], dtype=np.int64)
        for i, x in enumerate(lists):
            tokens[i, :len(x)] = x
        out[f"{name}_ids"], out[f"{name}_len"] = _assemble(tokens, lengths, T, arch, tok.bos_id,
                                                           tok.eos_id, tok.pad_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}.npz")
    np.savez(tmp, **out)
    os.replace(tmp, path)
    return out, {"token_cache": "built"}
