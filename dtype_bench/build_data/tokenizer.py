"""The study's BPE vocabulary, trained on built text (``python -m dtype_bench.build_data tokenizer``)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Iterator

from benchlib.data.files import BPE_SPECIALS, _bpe_tokenizer, _hash_files, read_provenance
from benchlib.data.tasks import BadDataError
from dtype_bench.build_data.splits import write_provenance


def build_tokenizer(text: Path, out: Path, vocab_size: int) -> dict:
    """A byte-level BPE trained on ``text``'s training split (the loaders' recipe, ``files``),
    saved as a tokenizer directory at ``out``. A study names it as ``tokenizer`` for every run,
    so that the classification runs fine-tune a checkpoint pretrained on the text with the
    vocabulary it was pretrained with (a run without one trains a BPE on its own corpus)."""
    import tempfile
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    train = text / "train.jsonl.gz"
    if not train.is_file():
        raise BadDataError(f"{train} not found: build the text first (python -m dtype_bench.build_data text ...)")

    def batches() -> Iterator[list[str]]:
        with gzip.open(train, "rt", encoding="utf-8") as fh:
            rows = [json.loads(line)["text"] for line in fh]
        yield from (rows[i:i + 1000] for i in range(0, len(rows), 1000))
    with tempfile.TemporaryDirectory() as cache:
        tok = _bpe_tokenizer(batches, _hash_files([str(train)]), vocab_size, Path(cache))
        fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(tok.name),
                                       **dict(zip(("pad_token", "bos_token", "eos_token", "mask_token"), BPE_SPECIALS)))
    fast.save_pretrained(str(out))
    facts = {**read_provenance(text), "tokenizer": f"byte-level BPE, {tok.vocab_size} tokens, trained on {train.name}",
             "built_by": f"python -m dtype_bench.build_data tokenizer {text} OUT --vocab {vocab_size}"}
    write_provenance(out, facts)
    return facts
