"""Runs on data a user brings: every LM run has its unigram baseline and every classification run
its label-frequency / majority-class one, so ``stalled`` means "did not clearly beat the trivial
predictor" on real text too (before, the unigram gave a real document's EOS probability 0, its
val loss was infinite, and every run on real text was recorded stalled).

The real English text is Python's reference documentation as the standard library ships it
(``pydoc_data.topics``, the text ``help()`` prints: ~465k characters), written to a temporary
file; no fixture is stored in the repository."""
import json
import math

import pytest

from benchlib.training.loop import run

topics = pytest.importorskip("pydoc_data.topics").topics


@pytest.fixture(scope="module")
def python_docs(tmp_path_factory):
    """The reference documentation as one text file, topics as blank-line separated documents."""
    path = tmp_path_factory.mktemp("text") / "python_reference.txt"
    path.write_text("\n\n".join(topics[k] for k in sorted(topics)))
    return path


def _run(tmp_path, text, **kw):
    cfg = {"scenario": "A", "config": "fp32_baseline", "data": str(text), "cache_dir": str(tmp_path / "cache"),
           "log_every": 50, **kw}
    return run(cfg, out_dir=tmp_path / "run", progress=False)


def test_a_tiny_gpt2_that_learns_real_text_is_not_stalled(tmp_path, python_docs):
    rec = _run(tmp_path, python_docs, steps=300, lr=3e-3)
    m = rec["metrics"]
    assert rec["data"]["tokenizer_kind"] == "bpe" and rec["data"]["n_train_tokens"] > 100_000
    assert m["baseline/name"] == "unigram" and math.isfinite(m["baseline/val_loss"])
    assert rec["status"] == "ok", rec["reason"]
    assert m["quality/beats_baseline"] is True
    assert m["quality/val_loss"] < m["baseline/val_loss"] - m["quality/baseline_gain_needed"]
    # real text has no known floor: no gap closed is claimed
    assert m.get("quality/floor") is None and m.get("quality/gap_closed") is None


def test_a_run_on_real_text_that_did_not_learn_is_still_stalled(tmp_path, python_docs):
    rec = _run(tmp_path, python_docs, steps=3)
    m = rec["metrics"]
    assert math.isfinite(m["baseline/val_loss"])
    assert rec["status"] == "stalled" and m["quality/beats_baseline"] is False
    assert m["quality/val_loss"] > m["baseline/val_loss"] - m["quality/baseline_gain_needed"]


def test_masked_lm_on_real_text_has_a_finite_unigram_baseline(tmp_path, python_docs):
    rec = _run(tmp_path, python_docs, scenario="B", steps=2)
    assert math.isfinite(rec["metrics"]["baseline/val_loss"]) and rec["status"] in ("ok", "stalled")


@pytest.mark.parametrize("scenario, metric, name", [("C", "p_at_1", "label_frequency"),
                                                     ("E", "accuracy", "majority_class")])
def test_classification_from_files_records_its_trivial_baseline(tmp_path, scenario, metric, name):
    """Topics of the reference documentation labelled by the terms they mention."""
    terms = ("class", "function", "exception", "string", "integer", "module", "loop", "operator")
    rows = [{"text": topics[k][:2000], "labels": [w for w in terms if w in topics[k].lower()] or ["other"]}
            for k in sorted(topics)[:60]]
    path = tmp_path / "topics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    rec = _run(tmp_path, path, scenario=scenario, steps=3)
    m = rec["metrics"]
    assert m["baseline/name"] == name and math.isfinite(m[f"baseline/{metric}"])
    assert isinstance(m["quality/beats_baseline"], bool)
    assert (rec["status"] == "stalled") == (m["quality/beats_baseline"] is False)
    for k in ("p_at_1", "p_at_3", "p_at_5", "macro_f1", "val_loss"):  # threshold-free metrics beside micro-F1
        assert math.isfinite(m[f"quality/{k}"]) and m[f"quality/{k}_se"] is not None
    assert m.get("quality/floor") is None
