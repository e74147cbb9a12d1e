"""What training sees of the data: ``TaskData`` and its batches.

Contract used by the training loop:

    data = load_task_data(run)          # run: resolved RunConfig
    data.vocab_size, data.num_labels, data.pad_id, data.bos_id, data.mask_id, data.loss_floor
    next_batch = data.sampler(batch_size, device, seed)   # () -> dict of device tensors
    val = data.val_batches(batch_size, n_batches, device)  # fixed list of dicts
    data.floors(val)                    # metric -> best attainable value on val, where known

Batches (padding on the RIGHT; RoBERTa scenarios B, D, F start every sequence with bos_id):
    clm:         {"input_ids": LongTensor[B,T], "labels": LongTensor[B,T]}
                 labels are already the next tokens (windows of T+1): do not shift again.
    mlm:         {"input_ids": LongTensor[B,T] (masked), "labels": LongTensor[B,T] (-100 = not scored)}
                 15% of non-special positions are scored; of those 80% -> mask_id,
                 10% -> a random non-special token, 10% unchanged.
    multilabel:  {"input_ids", "attention_mask": LongTensor[B,T], "labels": FloatTensor[B,L] multi-hot}
    singlelabel: {"input_ids", "attention_mask", "labels": LongTensor[B]}

This module holds the contract (``TaskData``, the batch formats, MLM masking); ``load`` picks
the source (``RunConfig.data``): ``embedded`` (synthetic, exact floors) or ``files`` (hub and local).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import torch

from benchlib.core.errors import UserError
from benchlib.core.sizes import LARGE_SIZES
from benchlib.data import synthetic as syn

Batch = dict[str, torch.Tensor]

DEVICE_RESIDENT_MAX_BYTES = 2 << 30
"""Training arrays below this size (as int32) live on the device: batches are then drawn
with a device generator, without host sync or host->device copy per step."""
LM_VAL_POOL = 1024
"""Validation windows held for LM tasks (synthetic data)."""
EVAL_MAX_SEQUENCES = 8192
"""The default evaluation (``eval_batches=None``) is the whole validation split, or a fixed
random sample of this many sequences when it is larger (a file sorted by name would make its
first rows a biased sample)."""
EVAL_SAMPLE_SEED = 4321
VAL_MASK_SEED = 1234
"""Seed of the fixed MLM validation masks (never the run seed)."""
SYNTH_LM_TRAIN_TOKENS = {"tiny": 1 << 18, "small": 1 << 22, "base": 24 << 20}
SYNTH_CLS_DOCS = {"tiny": (4096, 512), "small": (16384, 2048), "base": (45000, 6000)}
"""(train, validation) documents; base mirrors EUR-Lex 57k's 45k / 6k."""
for _size in LARGE_SIZES:  # larger models, the same data as base
    SYNTH_LM_TRAIN_TOKENS[_size], SYNTH_CLS_DOCS[_size] = SYNTH_LM_TRAIN_TOKENS["base"], SYNTH_CLS_DOCS["base"]
MLM_FLOOR_MAX_SEQUENCES = 256
"""The MLM floor covers at most this many (first) evaluation sequences: beyond, its standard error
(recorded) is already far below any config difference."""
MLM_FLOOR_CPU_BUDGET = 4e9
"""Multiply-adds allowed for the MLM floor on CPU: past it, the first sequences that fit (recorded)."""


class DataUnavailableError(UserError):
    """A data set or tokenizer that cannot be had; the message is one line naming it and the
    offline alternatives."""


class DataPathNotFoundError(DataUnavailableError, FileNotFoundError):
    """A local data path that does not exist or holds no readable files."""


class BadDataError(UserError):
    """Local data that cannot be used as it is (an empty file, a malformed line, labels of the
    wrong shape, a test split where training data is expected); the message is one line
    naming the file, the line where there is one, and what was expected."""


# ---- TaskData: what training sees --------------------------------
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
    distribution; ``synthetic.LabelCorpus``: the label space) for analyses that need the true
    distribution; None for real data."""
    floor_values: dict = field(default_factory=dict, repr=False)
    """Per validation-pool example (pool order), the Bayes-optimal predictor's expected value of
    quality metrics the generator knows it for (synthetic classification: P@k, accuracy, val
    loss); empty for real data. ``floors`` averages them over what was evaluated."""

    def floors(self, val: Optional[list] = None) -> dict[str, float]:
        """The best attainable value of each quality metric known for this data, on the
        evaluation ``val`` (batches from ``val_batches``): ``val_loss`` = ``loss_floor`` for LM,
        the means of ``floor_values`` over the evaluated examples for classification."""
        out = {"val_loss": self.loss_floor} if self.loss_floor is not None else {}
        if self.floor_values:
            idx = getattr(val, "pool_index", None)
            if idx is None:  # batches not from val_batches: their first examples, in order
                idx = torch.arange(sum(len(b["labels"]) for b in val or []))
            idx = idx.numpy()
            out.update({k: float(np.mean(v[idx])) for k, v in self.floor_values.items() if len(idx)})
        return out

    # ---- training batches ----------------------------------------------------------------
    def sampler(self, batch_size: int, device, seed: int) -> Callable[[], Batch]:
        """Infinite random training batches. Same seed -> same batch sequence."""
        device = torch.device(device)
        if self.task in ("clm", "mlm"):
            return self._lm_sampler(batch_size, device, seed)
        return self._cls_sampler(batch_size, device, seed)

    def val_batches(self, batch_size: int, n_batches: Optional[int], device) -> list[Batch]:
        """Evaluation batches, identical across calls, configs and run seeds: with ``n_batches``
        None the whole pool (a fixed random sample of ``EVAL_MAX_SEQUENCES`` when larger), else its
        first ``batch_size * n_batches`` sequences, at most the whole pool (never a sequence twice).
        Pools are in random order, so the first sequences are a uniform sample of the split.
        Classification batches those sequences by length and cuts the padding after the longest
        of each batch; ``pool_index`` says which examples they hold, in order."""
        n_pool = len(next(iter(self.val_pool.values())))
        if n_batches is None:
            idx = torch.arange(n_pool)
            if n_pool > EVAL_MAX_SEQUENCES:
                g = torch.Generator().manual_seed(EVAL_SAMPLE_SEED)
                idx = torch.randperm(n_pool, generator=g)[:EVAL_MAX_SEQUENCES].sort().values
        else:
            idx = torch.arange(min(batch_size * n_batches, n_pool))
        if self.task in ("clm", "mlm"):
            return EvalBatches([{k: v[chunk].to(device) for k, v in self.val_pool.items()}
                                for chunk in idx.split(batch_size)], pool_index=idx)
        # classification: documents of like length together, each batch cut after its longest
        # (rounded up to a multiple of 16 for the kernels). The padding cut changes no logit:
        # GPT-2 pools the last real token, which attends to none after it; encoders mask it.
        # E's validation split keeps 40% of its tokens (docs/journal.md, 2026-11-26).
        idx = idx[torch.sort(self.val_pool["attention_mask"][idx].sum(1), stable=True).indices]
        batches = []
        for chunk in idx.split(batch_size):
            b = {k: v[chunk] for k, v in self.val_pool.items()}
            cut = min(b["input_ids"].shape[1], -(-int(b["attention_mask"].sum(1).max()) // 16) * 16)
            batches.append({k: (v[:, :cut] if k in ("input_ids", "attention_mask") else v).to(device)
                            for k, v in b.items()})
        return EvalBatches(batches, pool_index=idx)

    def _lm_sampler(self, B: int, device: torch.device, seed: int) -> Callable[[], Batch]:
        W = lm_window(self.task, self.seq_len)
        rows, row_len = self.train.shape
        n_offsets = row_len - W + 1
        gen = torch.Generator(device=device)  # window draws (when resident) and MLM masks
        gen.manual_seed(seed)
        masker = MLMMasker.build(self.vocab_size, self.special_ids, self.mask_id, device) if self.task == "mlm" else None

        if nbytes_int32(self.train) < DEVICE_RESIDENT_MAX_BYTES:
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
                return to_device(torch.from_numpy(self.train[r, o + span_np].astype(np.int64)), device)

        def next_batch() -> Batch:
            return lm_batch(draw(), self.task, self.bos_id, masker, gen)
        return next_batch

    def _cls_sampler(self, B: int, device: torch.device, seed: int) -> Callable[[], Batch]:
        arrays = self.train
        n = len(arrays["ids"])
        resident = sum(nbytes_int32(a) for a in arrays.values()) < DEVICE_RESIDENT_MAX_BYTES
        home = device if resident else torch.device("cpu")
        t = {k: torch.from_numpy(np.ascontiguousarray(a)).to(home) for k, a in arrays.items()}
        gen = torch.Generator(device=home)
        gen.manual_seed(seed)

        def next_batch() -> Batch:
            i = torch.randint(n, (B,), generator=gen, device=home)
            batch = cls_batch(t["ids"][i], t["lengths"][i], t["labels"][i], t["primary"][i],
                               self.task, self.num_labels)
            return batch if resident else {k: to_device(v, device) for k, v in batch.items()}
        return next_batch


class EvalBatches(list):
    """The evaluation batches (a list) and ``pool_index``: the validation-pool examples they hold,
    in order (what ``TaskData.floors`` averages over)."""

    def __init__(self, batches: list, pool_index: torch.Tensor):
        super().__init__(batches)
        self.pool_index = pool_index


def lm_window(task: str, seq_len: int) -> int:
    """Tokens cut from the stream per sequence: CLM T+1 (inputs + next-token labels), MLM
    T-1 (plus the leading <s>)."""
    return seq_len + 1 if task == "clm" else seq_len - 1


def nbytes_int32(a: np.ndarray) -> int:
    return int(np.prod(a.shape)) * max(4, a.dtype.itemsize)


def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)


def lm_batch(w: torch.Tensor, task: str, bos_id: int, masker, gen) -> Batch:
    if task == "clm":
        return {"input_ids": w[:, :-1].contiguous(), "labels": w[:, 1:].contiguous()}
    x = torch.cat([torch.full_like(w[:, :1], bos_id), w], dim=1)
    return masker(x, gen)


def lm_pool(windows: torch.Tensor, task: str, vocab_size: int, special_ids, mask_id, bos_id: int) -> Batch:
    """The validation pool of LM ``windows`` (``lm_window`` tokens each) in batch format; MLM
    masks drawn once with ``VAL_MASK_SEED``."""
    masker = MLMMasker.build(vocab_size, special_ids, mask_id, "cpu") if task == "mlm" else None
    return lm_batch(windows, task, bos_id, masker, torch.Generator().manual_seed(VAL_MASK_SEED))


@dataclass
class MLMMasker:
    """BERT/RoBERTa corruption on the device: select each non-special position with p=0.15;
    selected -> <mask> (0.8), a uniform random non-special token (0.1), unchanged (0.1)."""

    special: torch.Tensor       # [V] bool lookup
    random_ids: torch.Tensor    # non-special ids to draw random replacements from
    mask_id: int

    @classmethod
    def build(cls, vocab_size: int, special_ids, mask_id: int, device) -> "MLMMasker":
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


def cls_batch(ids, lengths, labels, primary, task: str, num_labels: int) -> Batch:
    T = ids.shape[1]
    attention = (torch.arange(T, device=ids.device)[None, :] < lengths[:, None]).long()
    if task == "singlelabel":
        return {"input_ids": ids.long(), "attention_mask": attention, "labels": primary.long()}
    # multi-hot: padding slots (-1) write into an extra column that is dropped
    cols = torch.where(labels >= 0, labels, num_labels).long()
    hot = torch.zeros(len(ids), num_labels + 1, device=ids.device).scatter_(1, cols, 1.0)
    return {"input_ids": ids.long(), "attention_mask": attention, "labels": hot[:, :num_labels]}


def assemble(tokens: np.ndarray, lengths: np.ndarray, T: int, arch: str, bos: int, eos: int,
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


def cls_arrays(ids, lengths, labels, train_counts) -> dict[str, np.ndarray]:
    return {"ids": ids, "lengths": lengths, "labels": labels,
            "primary": syn.primary_labels(labels, train_counts)}


def cls_pool(arrays: dict, task: str, num_labels: int) -> Batch:
    t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    return cls_batch(t["ids"], t["lengths"], t["labels"], t["primary"], task, num_labels)


def label_stats(train: dict, val: dict, counts: np.ndarray) -> dict:
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
