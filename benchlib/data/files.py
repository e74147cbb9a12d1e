"""Real data: OpenWebText and EUR-Lex 57k from the Hugging Face hub (``data="hub"``), AG News
and IMDB by name (single-label), or local files of the same schema (``data=<path>``), as
``TaskData`` (``load_lm``, ``load_cls``), with the tokenizers and caches they need.

Real-data rules (all deterministic):
    * Local files may be gzip-compressed (``train.jsonl.gz``). A ``provenance.yaml`` beside
      them (``dtype_bench.build_data`` writes one) goes into the record as ``provenance_*``; every record
      of real data carries ``data_hash`` (SHA-256 of the files read, or the hub fingerprint).
    * Split files: a word of a file's name (``eurlex.train.jsonl``, ``dev-2024.txt``) puts it
      in train / validation (val, valid, dev) / test / unsupervised; files of a folder without
      one are training data. A test split is never trained on and an unsupervised one (IMDB's
      unlabelled reviews) never read (a single file named as either is refused).
    * LM: documents are tokenised once (EOS appended to each) into a uint16 (uint32 when the
      vocabulary exceeds 65536) memmap cached under ``cache_dir/tokens``; validation is the
      validation files, else the last 5% of the tokens (at least one window, at most 4M
      tokens); its pool holds up to 1024 windows drawn at random from all of it.
    * Classification: the split rule is ``_cls_splits``'s, labels get ids by
      ``_label_vocabulary`` (validation labels unseen in training are dropped and counted), and
      the validation pool is in a seeded random order (its first k documents are a uniform
      sample). Single-label target = the document's label most frequent in the training set,
      ties -> lowest id (the synthetic corpus's rule).
    * Tokenizer: as ``_resolve_tokenizer`` says; a trained BPE is cached under
      ``cache_dir/tokenizers`` keyed by the corpus hash.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import math
import os
import socket
import time
import urllib.parse
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch

from benchlib.data import synthetic as syn
from benchlib.data.checks import LABEL_KEYS, SPLIT_NAMES, check_files, data_suffix, json_rows, label_problem, split_of
from benchlib.data.tasks import (EVAL_SAMPLE_SEED, LM_VAL_POOL, BadDataError, DataPathNotFoundError,
                                 DataUnavailableError, TaskData, assemble, cls_arrays, cls_pool, label_stats,
                                 lm_pool, lm_window)
from benchlib.core.records import atomic_file
from benchlib.core.runconfig import RunConfig

OWT_ID = "Skylion007/openwebtext"
EURLEX_ID, EURLEX_CONFIG = "NLP-AUEB/eurlex", "eurlex57k"


@dataclass(frozen=True)
class HubSet:
    """A hub data set a run can name (``core.scenarios.DATASETS``)."""

    id: str
    config: Optional[str]
    schema: str
    """Its fields, as the offline error names them for a local copy."""
    splits: tuple[str, ...]
    """The splits read: training, then evaluation (validation, else test). Others (IMDB's
    unlabelled ``unsupervised`` reviews, EUR-Lex's test) are never read."""


HUB = {
    "openwebtext": HubSet(OWT_ID, None, "a 'text' field", ("train",)),
    "eurlex": HubSet(EURLEX_ID, EURLEX_CONFIG, "title, text, eurovoc_concepts", ("train", "validation")),
    # AG News: 120k training / 7.6k test articles, label 0-3 (World, Sports, Business, Sci/Tech)
    "ag_news": HubSet("fancyzhx/ag_news", None, "text, label (int 0-3)", ("train", "test")),
    # IMDB: 25k training / 25k test reviews, label 0/1 (negative, positive); 50k unlabelled
    "imdb": HubSet("stanfordnlp/imdb", None, "text, label (int 0/1)", ("train", "test")),
}


def hub_name(run: RunConfig) -> Optional[str]:
    """The hub data set ``run.data`` names (``hub``: the scenario's own), or None for local files."""
    if run.data == "hub":
        return run.scn.data
    return run.data if run.data in HUB else None
LM_VAL_FRACTION, LM_VAL_MAX_TOKENS = 0.05, 4_000_000
CLS_VAL_FRACTION = 0.10
BPE_MIN_VOCAB, BPE_MAX_VOCAB = 512, 50304
"""BPE size = run.vocab_size clamped: at least the 256-byte alphabet + specials + some
merges, at most GPT-2's (padded) size."""
BPE_SPECIALS = ("<pad>", "<s>", "</s>", "<mask>")  # ids 0-3, the synthetic convention
SPLIT_SEED = 20240
"""Seed of the shuffle that splits one classification file into train and validation: fixed,
so every run (any seed, any config) of a study sees the same split."""
LOCAL_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
PROVENANCE = "provenance.yaml"
"""Facts on where local data came from (``dtype_bench.build_data`` writes it), copied into every record."""


# ---- Hub access --------------------------------------------------
def _offline() -> bool:
    """HF offline mode, read now (datasets reads the variables only at import)."""
    true = {"1", "ON", "YES", "TRUE"}
    if any(os.environ.get(k, "").upper() in true for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return True
    try:
        import datasets.config
    except ImportError:
        return False
    return bool(datasets.config.HF_HUB_OFFLINE)


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


def _load_hub_dataset(hub: HubSet):
    """``datasets.load_dataset`` with no retries, its splits ``hub.splits`` only; any failure
    -> one DataUnavailableError."""
    from datasets import DatasetDict, DownloadConfig, load_dataset
    dataset_id, config, schema = hub.id, hub.config, hub.schema
    offline = _offline() or not _hub_reachable()
    try:
        with _hub_offline(offline):
            dd = load_dataset(dataset_id, config, download_config=DownloadConfig(max_retries=0))
        return DatasetDict({k: dd[k] for k in hub.splits})
    except Exception as e:  # network, auth, missing config or split: all end the same way for the user
        where = f"{dataset_id!r}" + (f" (config {config!r})" if config else "")
        raise DataUnavailableError(
            f"cannot load dataset {where} from the Hugging Face hub"
            f"{' (offline)' if offline else ''}: {_one_line(e)}. Offline alternatives: "
            f"data='synthetic' (embedded generator) or data=<local path> with the same schema ({schema})"
        ) from None


# ---- Tokenizers --------------------------------------------------
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
        with atomic_file(path) as tmp:
            tmp.write_bytes(tok.to_str().encode())
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


# ---- Local files -------------------------------------------------
def _cache_dir(run: RunConfig) -> Path:
    return Path(run.cache_dir).expanduser()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _local_files(path: Path, expected: str) -> tuple[str, dict[str, list[str]]]:
    """(datasets builder, data_files by split) for a local file or folder: one file is the
    training data; in a folder, a split word in a file's name (``checks.split_of``) puts it in
    that split and a file without one is training data."""
    if not path.exists():
        raise DataPathNotFoundError(f"data path not found: {path} (expected {expected}; "
                                    f"or use data='synthetic' / data='hub')")
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and data_suffix(p) in LOCAL_BUILDERS)
    if not files:
        raise DataPathNotFoundError(f"no .txt/.jsonl/.json/.parquet files (or .gz of them) under {path} "
                                    f"(expected {expected})")
    builders = {LOCAL_BUILDERS.get(data_suffix(p)) for p in files}
    if None in builders or len(builders) > 1:
        raise BadDataError(f"{path}: mixed or unsupported file types {sorted({data_suffix(p) for p in files})}; "
                           f"use one of {', '.join(LOCAL_BUILDERS)}")
    if path.is_file():
        if split_of(path) in ("test", "unsupervised"):
            raise BadDataError(f"{path} is named as a {split_of(path)} split, which is never trained on: give the "
                               f"training file, or the folder that holds the train / validation / test files")
        return builders.pop(), {"train": [str(path)]}
    splits: dict[str, list[str]] = {}
    for p in files:
        splits.setdefault(split_of(p) or "train", []).append(str(p))
    if "train" not in splits:
        raise BadDataError(f"{path}: no training file, only {' and '.join(sorted(splits))} ones: name the training "
                           f"file with 'train' (or with no split word)")
    return builders.pop(), splits


def _used_splits(run: RunConfig) -> tuple[str, ...]:
    """The split files a run reads: never unsupervised, and a test split for classification only
    (its evaluation split where there is no validation one)."""
    return ("train", "validation") + (() if run.scn.is_lm else ("test",))


def check_local(run: RunConfig) -> None:
    """The local files ``run`` would read, checked as the loaders check them (``checks``),
    without reading them into ``datasets``: a run can be refused before it starts."""
    if run.data == "synthetic" or hub_name(run):
        return
    builder, files = _local_files(Path(run.data).expanduser().resolve(), "local data")
    read = [f for k in _used_splits(run) for f in files.get(k, [])]
    _check_once(read, builder, run.scn.task, _hash_files(read), _cache_dir(run))


def _read_source(run: RunConfig, expected: str) -> tuple[dict, str, str, str, Optional[Path], Optional[str]]:
    """(splits, content hash, source, slug, local path or None, split-files rule or None) of
    ``run.data``: local files (``_used_splits``, checked first) or the hub data set."""
    hub = hub_name(run)
    if hub is not None:
        dd = _load_hub_dataset(HUB[hub])
        content_hash = _sha("".join(d._fingerprint for d in dd.values()).encode())
        return dd, content_hash, f"hub:{HUB[hub].id}", HUB[hub].config or hub, None, None
    path = Path(run.data).expanduser().resolve()
    builder, found = _local_files(path, expected)
    files = {k: v for k, v in found.items() if k in _used_splits(run)}
    if builder == "text" and not run.scn.is_lm:
        raise BadDataError(f"{path}: classification data needs labels: use .jsonl/.json/.parquet "
                           f"with text + labels (or title, text, eurovoc_concepts)")
    read = sum(files.values(), [])
    content_hash = _hash_files(read)
    _check_once(read, builder, run.scn.task, content_hash, _cache_dir(run))
    dd = _load_local_dataset(path, builder, files, run)
    evaluated = "validation" if "validation" in files or run.scn.is_lm else "test"
    rule = _split_files_rule(path, found, ("train", evaluated)) if len(found) > 1 else None
    return dd, content_hash, str(path), path.stem, path, rule


def _check_once(files: list[str], builder: str, task: str, content_hash: str, cache_dir: Path) -> None:
    """``check_files``, skipped where these very bytes (their hash) passed it for this task before:
    the check parses every document, a second full read of a large corpus in every run."""
    mark = cache_dir / "checked" / f"{content_hash[:32]}-{builder}-{task}"
    if mark.exists():
        return
    check_files(files, builder, task)
    with atomic_file(mark) as tmp:
        tmp.write_text("\n".join(files) + "\n")


def _split_files_rule(path: Path, files: dict[str, list[str]], used: tuple[str, ...]) -> str:
    """What the split files are, as the record and the printed output say it."""
    def names(k):
        return ", ".join(Path(f).relative_to(path).as_posix() if path.is_dir() else Path(f).name for f in files[k])
    parts = [f"{k} = {names(k)}" for k in used if k in files]
    unused = [f"{k} ({names(k)}) not used" for k in files if k not in used]
    return "split files: " + "; ".join(parts + unused)


def _hash_files(files: list[str]) -> str:
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(Path(f).name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def read_provenance(path: Path) -> dict:
    """The ``PROVENANCE`` file beside local data (in the folder, or beside the one file), or {}."""
    import yaml
    f = (path if path.is_dir() else path.parent) / PROVENANCE
    if not f.exists():
        return {}
    facts = yaml.safe_load(f.read_text()) or {}
    if not isinstance(facts, dict):
        raise BadDataError(f"{f}: expected a mapping of provenance facts")
    return facts


def _data_facts(content_hash: str, path: Optional[Path] = None) -> dict:
    """What a record says about its data beyond the source: the content hash, and for local
    data built from a package (``dtype_bench.build_data``) the facts of its ``provenance.yaml``."""
    facts = {"data_hash": content_hash[:16]}
    if path is not None:
        facts.update({f"provenance_{k}": v for k, v in read_provenance(path).items()
                      if isinstance(v, (str, int, float, bool))})
    return facts


class _JsonRows:
    """JSON-lines rows in memory with the part of ``datasets.Dataset``'s interface the loaders
    use: for local ``.jsonl(.gz)`` files where ``datasets`` is not installed (an offline GPU
    host). The rows, and so the data hash, tokens and records, are the same either way."""

    def __init__(self, rows: Optional[list[dict]] = None, files: tuple[str, ...] = ()):
        self._rows, self._files = rows, files  # the files' rows are parsed when first used

    def _read(self) -> Iterator[dict]:
        return (row for f in self._files for _, row in json_rows(Path(f)))

    @property
    def rows(self) -> list[dict]:
        if self._rows is None:
            self._rows = list(self._read())
        return self._rows

    @property
    def column_names(self) -> list[str]:
        """The first rows' keys; before the rows are read, the first row's (the check, ``checks``,
        found the required fields in every row)."""
        head = self._rows[:100] if self._rows is not None else list(itertools.islice(self._read(), 1))
        return list(dict.fromkeys(k for r in head for k in r))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, column: str) -> list:
        return [r.get(column) for r in self.rows]

    def select(self, indices) -> "_JsonRows":
        return _JsonRows([self.rows[i] for i in indices])

    def iter(self, batch_size: int) -> Iterator[dict]:
        for i in range(0, len(self.rows), batch_size):
            yield {c: [r.get(c) for r in self.rows[i:i + batch_size]] for c in self.column_names}


def _load_local_dataset(path: Path, builder: str, data_files: dict, run: RunConfig):
    """Read local files through ``datasets`` (as hub data), JSON lines without it where it is not
    installed (``_JsonRows``); plain text is one document per blank-line separated paragraph."""
    try:
        from datasets import load_dataset
    except ImportError:
        if builder != "json":
            raise DataUnavailableError(f"cannot read {path}: {builder} files need the datasets package "
                                       f"(pip install datasets), JSON lines do not") from None
        return {split: _JsonRows(files=tuple(files)) for split, files in data_files.items()}
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


# ---- Real LM data ------------------------------------------------
def load_lm(run: RunConfig) -> TaskData:
    T, task = run.seq_len, run.scn.task
    W = lm_window(task, T)
    dd, content_hash, source, slug, path, split_rule = _read_source(
        run, "a .txt file or folder, or .jsonl/.parquet with a 'text' field")
    ds, val_ds = dd["train"], dd.get("validation")
    if "text" not in ds.column_names:
        raise BadDataError(f"{source}: LM data needs a 'text' field; found {ds.column_names}")
    tok = _resolve_tokenizer(run, path is not None, lambda: _iter_texts(ds), content_hash)
    if task == "mlm" and tok.mask_id is None:
        raise DataUnavailableError(f"tokenizer {tok.name!r} has no mask token, needed for MLM")
    stream, stream_meta = _token_stream(ds, tok, _cache_dir(run), f"{slug}-{content_hash[:16]}")
    N = len(stream)
    if val_ds is not None:
        val, _ = _token_stream(val_ds, tok, _cache_dir(run), f"{slug}-val-{content_hash[:16]}")
        train_part = stream
        val_rule = f"{split_rule}: the validation files, non-overlapping windows"
    else:
        n_val = min(max(math.ceil(LM_VAL_FRACTION * N), W), LM_VAL_MAX_TOKENS)
        train_part, val = stream[:N - n_val], stream[N - n_val:]
        val_rule = (f"{split_rule + ': ' if split_rule else ''}last {LM_VAL_FRACTION:.0%} of the tokens "
                    f"(>= 1 window, <= {LM_VAL_MAX_TOKENS}), non-overlapping windows")
    if len(train_part) < W or len(val) < W:
        raise BadDataError(f"{source}: {len(train_part)} training and {len(val)} validation tokens are too few for "
                           f"seq_len={T} (each needs >= {W} tokens: one window); use a shorter seq_len or more text")
    train = np.asarray(train_part).reshape(1, -1)  # one row: windows may cross documents (EOS between)
    # the pool: windows drawn at random from the whole validation text, in random order (a
    # corpus sorted by topic or date would make its first windows a biased sample)
    n_windows = len(val) // W
    n_pool = min(LM_VAL_POOL, n_windows)
    starts = np.random.default_rng(EVAL_SAMPLE_SEED).permutation(n_windows)[:n_pool] * W
    windows = torch.from_numpy(np.asarray(val, dtype=np.int64)[starts[:, None] + np.arange(W)])
    pool = lm_pool(windows, task, tok.vocab_size, tok.special_ids, tok.mask_id, tok.bos_id)
    meta = {**_data_facts(content_hash, path), **stream_meta, **_tok_meta(tok), "n_train_tokens": len(train_part), "n_val_tokens": len(val),
            "n_val_sequences": n_pool, "val_rule": val_rule,
            "val_pool": f"{n_pool} of {n_windows} validation windows, drawn at random (seed {EVAL_SAMPLE_SEED})"}
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
    n_tokens = n_docs = 0
    t0 = time.perf_counter()
    with atomic_file(bin_path) as tmp, open(tmp, "wb") as fh:
        # fast tokenizers encode a batch on all cores, so no worker processes are needed
        for texts in _iter_texts(ds, batch=8192):
            flat = _join_with_eos(tok.encode(texts, None), tok.eos_id, dtype)
            fh.write(flat.tobytes())
            n_tokens, n_docs = n_tokens + len(flat), n_docs + len(texts)
        if n_tokens == 0:
            raise BadDataError(f"{key}: the corpus holds no text")
    info = {"n_tokens": n_tokens, "n_docs": n_docs, "dtype": np.dtype(dtype).name,
            "tokenize_s": round(time.perf_counter() - t0, 2), "token_cache_path": str(bin_path)}
    with atomic_file(info_path) as tmp:
        tmp.write_text(json.dumps(info))
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


# ---- Real classification data ------------------------------------
def load_cls(run: RunConfig) -> TaskData:
    task, T, arch = run.scn.task, run.seq_len, run.scn.arch
    dd, content_hash, source, slug, path, files_rule = _read_source(
        run, "a .jsonl/.parquet of {text, labels}, {text, label} or EUR-Lex's {title, text, eurovoc_concepts}")
    train_ds, val_ds, split_rule = _cls_splits(dd)
    split_rule = files_rule or split_rule
    train_texts, train_raw = _docs(train_ds, f"{source} (training split)", task)
    val_texts, val_raw = _docs(val_ds, f"{source} (validation split)", task)
    label_ids, label_rule = _label_vocabulary(train_raw, val_raw)
    L = len(label_ids) if label_rule == "sorted" else max(label_ids.values()) + 1
    train_lab, _ = _label_array(train_raw, label_ids)
    val_lab, val_dropped = _label_array(val_raw, label_ids)

    tok = _resolve_tokenizer(run, path is not None, lambda: _batched(train_texts), content_hash)
    keep = T - 2 if arch == "roberta" else T
    # s2: the split rule (seeded shuffle of one file); an older cache holds another split
    enc_key = f"cls-{slug}-{content_hash[:16]}-{tok.fingerprint[:12]}-{arch}-T{T}-s2"
    ids, enc_meta = _cached_encoding(_cache_dir(run) / "tokens" / f"{enc_key}.npz", tok, keep, T, arch,
                                     {"train": train_texts, "val": val_texts})
    counts = syn.label_counts(train_lab, L)
    train = cls_arrays(ids["train_ids"], ids["train_len"], train_lab, counts)
    val = cls_arrays(ids["val_ids"], ids["val_len"], val_lab, counts)
    dropped = {}
    if task == "singlelabel":  # documents without any (known) label have no target
        for name, arrays in (("train", train), ("val", val)):
            ok = arrays["primary"] >= 0
            dropped[f"{name}_docs_without_label"] = int((~ok).sum())
            arrays.update({k: v[ok] for k, v in arrays.items()})
    if len(train["ids"]) == 0 or len(val["ids"]) == 0:
        raise BadDataError(f"{source}: no labelled documents left in the train or validation split")
    # the pool in a seeded random order: its first k documents are a uniform sample of the split
    order = np.random.default_rng(EVAL_SAMPLE_SEED).permutation(len(val["ids"]))
    val = {k: v[order] for k, v in val.items()}
    meta = {**_data_facts(content_hash, path), **_tok_meta(tok), **enc_meta,
            **label_stats(train, val, counts), **dropped,
            "split_rule": split_rule, "val_pool": f"the validation documents in random order (seed {EVAL_SAMPLE_SEED})", "label_ids": label_rule, "val_labels_unseen_dropped": val_dropped,
            "single_label_rule": "most frequent training label of the document, ties -> lowest id"}
    return TaskData(task=task, vocab_size=tok.vocab_size, seq_len=T, num_labels=L, pad_id=tok.pad_id,
                    bos_id=tok.bos_id, mask_id=None, loss_floor=None, source=source, meta=meta,
                    train=train, val_pool=cls_pool(val, task, L), special_ids=tok.special_ids)


def _cls_splits(dd) -> tuple[Any, Any, str]:
    """(train, validation, rule): a validation (else test) split; else a ``split`` field;
    else a seeded random 10% of the documents (never the last ones: a file sorted by name,
    date or label would make them a biased sample)."""
    if "train" in dd and len(dd) > 1:
        other = "validation" if "validation" in dd else "test"
        if other in dd:
            return dd["train"], dd[other], f"{other} split"
    ds = dd["train"]
    if "split" in ds.column_names:
        names = [SPLIT_NAMES.get(str(s).lower(), "train") for s in _column(ds, "split")]
        target = "validation" if "validation" in names else "test"
        tr = [i for i, s in enumerate(names) if s == "train"]
        va = [i for i, s in enumerate(names) if s == target]
        if tr and va:
            return ds.select(tr), ds.select(va), f"'split' field ({target})"
    n_val = max(1, math.ceil(CLS_VAL_FRACTION * len(ds)))
    if len(ds) - n_val < 1:
        raise BadDataError(f"only {len(ds)} documents: too few to split off validation")
    val = np.sort(np.random.default_rng(SPLIT_SEED).permutation(len(ds))[:n_val])
    train = np.setdiff1d(np.arange(len(ds)), val)
    return (ds.select(train.tolist()), ds.select(val.tolist()),
            f"one file: a random {CLS_VAL_FRACTION:.0%} of the documents (seed {SPLIT_SEED})")


def _docs(ds, source: str, task: str) -> tuple[list[str], list[list]]:
    """Texts and raw label lists from the {text, labels} or EUR-Lex schema; labels of the
    wrong shape for ``task`` are refused naming the row (JSON files were checked by line)."""
    cols = ds.column_names
    if "text" not in cols or not ({"labels", "label", "eurovoc_concepts"} & set(cols)):
        raise BadDataError(f"{source}: expected fields text + labels (or EUR-Lex's title, text, "
                           f"eurovoc_concepts); found {cols}")
    texts = _column(ds, "text")
    if "title" in cols:  # EUR-Lex: the title is part of the document
        texts = [f"{t or ''}\n{x or ''}" for t, x in zip(_column(ds, "title"), texts)]
    key = next(k for k in LABEL_KEYS if k in cols)
    raw = _column(ds, key)
    for i, r in enumerate(raw):
        problem = label_problem(key, r, task)
        if problem:
            raise BadDataError(f"{source} row {i}: {problem}")
    raw = [[] if r is None else list(r) if isinstance(r, (list, tuple)) else [r] for r in raw]
    return [t or "" for t in texts], raw


def _column(ds, name: str) -> list:
    """One column as a list: a ``datasets.Dataset`` through Arrow in one call (its own column
    object formats row by row, ~40x slower: seconds per run on 28k documents), others by name."""
    if hasattr(ds, "with_format"):
        return ds.with_format("arrow")[name].to_pylist()
    return ds[name]


def _label_vocabulary(train_raw: list[list], val_raw: list[list]) -> tuple[dict, str]:
    """Int labels are their own ids; anything else gets ids from the sorted training
    vocabulary of its string form."""
    every = [x for r in train_raw + val_raw for x in r]
    if every and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0 for x in every):
        return {int(x): int(x) for x in every}, "int"
    vocab = sorted({str(x) for r in train_raw for x in r})
    if not vocab:
        raise BadDataError("no labels in the training split")
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
        out[f"{name}_ids"], out[f"{name}_len"] = assemble(tokens, lengths, T, arch, tok.bos_id,
                                                           tok.eos_id, tok.pad_id)
    with atomic_file(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **out)
    return out, {"token_cache": "built"}
