"""benchlib.data.tasks / benchlib.data.synthetic: loss floors, batch formats, masking, determinism,
label statistics and the real-data paths (local files through `datasets`, hub errors).
CPU only, no network: real data is written to tmp_path."""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch

from benchlib.data import tasks as datamod
from benchlib.data import files
from benchlib.data import synthetic as syn
from benchlib.data.load import load_task_data
from benchlib.data.tasks import DataPathNotFoundError, DataUnavailableError
from benchlib.core.runconfig import RunConfig, resolved
from benchlib.core.sizes import SYNTH_NUM_LABELS

F = syn.FIRST_CONTENT_ID


def run_cfg(scenario: str, **kw) -> RunConfig:
    return resolved(RunConfig(scenario=scenario, **kw))


@pytest.fixture(scope="module")
def tiny() -> dict[str, datamod.TaskData]:
    """Synthetic tiny data for every scenario (V=256, T=64, 64 labels)."""
    return {s: load_task_data(run_cfg(s, device="cpu")) for s in "ABCDEF"}


def draw(data: datamod.TaskData, n: int, seed: int = 0, bs: int = 8) -> list[dict]:
    nxt = data.sampler(bs, "cpu", seed)
    return [nxt() for _ in range(n)]


# ---------------------------------------------------------------------------------------
# Markov chain and floors
# ---------------------------------------------------------------------------------------
def test_entropy_rate_of_hand_built_chains():
    cycle = np.roll(np.eye(5), 1, axis=1)  # i -> i+1 deterministically (periodic)
    assert syn.MarkovChain.from_dense(cycle).entropy_rate() == pytest.approx(0.0, abs=1e-12)

    k_uniform = np.zeros((6, 6))
    for i in range(6):
        k_uniform[i, [(i + 1) % 6, (i + 2) % 6, (i + 4) % 6]] = 1 / 3
    assert syn.MarkovChain.from_dense(k_uniform).entropy_rate() == pytest.approx(math.log(3), abs=1e-12)

    a, b = 0.1, 0.3  # two states: pi = (b, a) / (a + b), H = pi0 h(a) + pi1 h(b)
    two = syn.MarkovChain.from_dense([[1 - a, a], [b, 1 - b]])
    np.testing.assert_allclose(two.stationary(), [0.75, 0.25], atol=1e-12)
    h = lambda p: -p * math.log(p) - (1 - p) * math.log(1 - p)  # noqa: E731
    assert two.entropy_rate() == pytest.approx(0.75 * h(a) + 0.25 * h(b), abs=1e-12)


def test_random_chain_rows_are_sparse_distributions():
    chain = syn.MarkovChain.random(300, np.random.default_rng(0))
    np.testing.assert_allclose(chain.prob.sum(1), 1.0, atol=1e-12)
    real = chain.prob > 0
    assert 1 <= real.sum(1).min() and real.sum(1).max() <= 32
    for row in range(0, 300, 37):  # successors with mass are distinct
        s = chain.succ[row][real[row]]
        assert len(set(s.tolist())) == len(s)
    pi = chain.stationary()
    step = np.bincount(chain.succ.ravel(), (pi[:, None] * chain.prob).ravel(), minlength=300)
    np.testing.assert_allclose(step, pi, atol=1e-12)  # stationary: pi P = pi


def test_clm_floor_matches_empirical_loss_of_true_chain(tiny):
    d = tiny["A"]
    assert d.loss_floor == pytest.approx(d.corpus.entropy_rate)
    assert 1.0 < d.loss_floor < d.meta["uniform_entropy"]
    # -log P(label | last input) under the true chain on sampled training batches
    nll = []
    for b in draw(d, 100, bs=16):
        lp = d.corpus.chain.log_prob(b["input_ids"].numpy() - F, b["labels"].numpy() - F)
        assert np.isfinite(lp).all()  # every transition is a chain transition: windows stay in rows
        nll.append(-lp.mean())
    assert float(np.mean(nll)) == pytest.approx(d.loss_floor, abs=0.03)
    assert d.meta["val_bayes_loss"] == pytest.approx(d.loss_floor, abs=0.1)


def test_mlm_bayes_loss_equals_brute_force_posterior():
    P = np.array([[0.1, 0.6, 0.3], [0.5, 0.0, 0.5], [0.2, 0.7, 0.1]])
    chain = syn.MarkovChain.from_dense(P)
    pi, n, M = chain.stationary(), 3, syn.MASK_ID
    obs = np.array([[F + 0, M, F + 2, F + 1], [M, M, F + 1, F + 1]])
    lab = np.array([[-100, F + 1, F + 2, -100], [F + 0, F + 2, -100, F + 1]])
    got = syn.mlm_bayes_nll(chain, pi, obs, lab)

    sel_p = syn.MLM_SELECT_P
    c, d = sel_p * 0.1 / n, (1 - sel_p) + sel_p * 0.1

    def lik(y, x, scored):  # observation likelihood; <mask> is constant in x
        if y == M:
            return 1.0
        return 0.1 / n + 0.1 * (x == y - F) if scored else c + d * (x == y - F)

    want = []
    for i, t in zip(*np.nonzero(lab != -100)):
        post = np.zeros(n)
        for xs in itertools.product(range(n), repeat=4):
            p = pi[xs[0]] * np.prod([P[xs[j], xs[j + 1]] for j in range(3)])
            post[xs[t]] += p * np.prod([lik(obs[i, j], xs[j], j == t) for j in range(4)])
        want.append(-math.log(post[lab[i, t] - F] / post.sum()))
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_mlm_floor_is_exact_on_a_small_eval_set():
    d = load_task_data(run_cfg("B", device="cpu", eval_batches=8))
    m = d.meta
    assert m["loss_floor_exact"] and m["loss_floor_sequences"] == 8 * 8  # tiny: batch 8 x 8 eval batches
    # the positions it scores are exactly the validation labels of those sequences
    val = d.val_batches(8, 8, "cpu")
    assert m["loss_floor_positions"] == sum(int((b["labels"] != -100).sum()) for b in val)
    # two-sided context beats one-sided: below the CLM entropy rate, above zero
    assert 0.2 < d.loss_floor < d.meta["entropy_rate"]


def test_mlm_floor_of_the_default_eval_set_covers_its_first_sequences_with_a_stderr(tiny):
    # the default evaluation is the whole validation pool (eval_batches None); the floor's
    # forward-backward covers its first MLM_FLOOR_MAX_SEQUENCES (or fewer, on a CPU budget)
    d = tiny["B"]
    m = d.meta
    val = d.val_batches(8, None, "cpu")
    labels = torch.cat([b["labels"] for b in val])
    assert m["loss_floor_eval_sequences"] == len(labels) == datamod.LM_VAL_POOL
    n = m["loss_floor_sequences"]
    assert 1 <= n <= datamod.MLM_FLOOR_MAX_SEQUENCES < len(labels) and not m["loss_floor_exact"]
    assert m["loss_floor_positions"] == int((labels[:n] != -100).sum())
    assert 0 < m["loss_floor_stderr"] < 0.05 * d.loss_floor
    assert 0.2 < d.loss_floor < d.meta["entropy_rate"]


# ---------------------------------------------------------------------------------------
# Batch formats
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", list("ABCDEF"))
def test_batch_shapes_dtypes_and_ranges(tiny, scenario):
    d = tiny[scenario]
    b = draw(d, 1, bs=5)[0]
    ids = b["input_ids"]
    assert ids.shape == (5, 64) and ids.dtype == torch.long
    assert 0 <= int(ids.min()) and int(ids.max()) < d.vocab_size == 256
    if scenario in "BDF":
        assert (ids[:, 0] == d.bos_id).all()
    if d.task == "clm":
        assert set(b) == {"input_ids", "labels"} and b["labels"].dtype == torch.long
        assert torch.equal(ids[:, 1:], b["labels"][:, :-1])  # labels are the next tokens
        assert int(ids.min()) >= F  # no specials in the chain
    elif d.task == "mlm":
        assert set(b) == {"input_ids", "labels"} and b["labels"].shape == (5, 64)
    else:
        am = b["attention_mask"]
        assert am.dtype == torch.long and am.shape == (5, 64)
        lengths = am.sum(1)
        assert torch.equal(am, (torch.arange(64) < lengths[:, None]).long())  # right padding
        assert (ids[am == 0] == d.pad_id).all() and (ids[am == 1] != d.pad_id).all()
        last = ids[torch.arange(5), lengths - 1]
        if scenario in "DF":
            assert (last == syn.EOS_ID).all()  # <s> ... </s>
        L = d.num_labels
        if d.task == "multilabel":
            y = b["labels"]
            assert y.shape == (5, L) and y.dtype == torch.float32
            assert set(y.unique().tolist()) <= {0.0, 1.0} and (y.sum(1) >= 1).all()
        else:
            y = b["labels"]
            assert y.shape == (5,) and y.dtype == torch.long and 0 <= int(y.min()) and int(y.max()) < L


def test_mlm_masking_rates(tiny):
    d = tiny["B"]
    batches = draw(d, 60, bs=16)
    inp = torch.cat([b["input_ids"] for b in batches])
    lab = torch.cat([b["labels"] for b in batches])
    scored = lab != -100
    assert not scored[:, 0].any()  # <s> is special: never scored
    content = inp.numel() - inp.shape[0]
    assert scored.sum().item() / content == pytest.approx(0.15, abs=0.01)
    masked = (inp == d.mask_id) & scored
    unchanged = (inp == lab) & scored
    n = scored.sum().item()
    assert masked.sum().item() / n == pytest.approx(0.8, abs=0.03)
    # 10% unchanged + the random tokens that happen to equal the original (1/252)
    assert unchanged.sum().item() / n == pytest.approx(0.1 + 0.1 / 252, abs=0.02)
    assert ((inp == d.mask_id) <= scored).all()  # masks only where scored
    assert (lab[scored] >= F).all()


def test_same_seed_same_batches_different_seed_different(tiny):
    for s, d in tiny.items():
        a, b, c = draw(d, 3, seed=7), draw(d, 3, seed=7), draw(d, 3, seed=8)
        for x, y in zip(a, b):
            assert all(torch.equal(x[k], y[k]) for k in x), s
        assert not all(torch.equal(a[0][k], c[0][k]) for k in a[0]), s


def test_host_resident_sampler_matches_format_and_is_deterministic(tiny, monkeypatch):
    monkeypatch.setattr(datamod, "DEVICE_RESIDENT_MAX_BYTES", 0)  # the large-corpus path
    for s in "BE":
        a, b = draw(tiny[s], 2, seed=3), draw(tiny[s], 2, seed=3)
        assert all(torch.equal(a[1][k], b[1][k]) for k in a[1])
        assert a[0]["input_ids"].shape == (8, 64)


def test_val_batches_fixed_across_calls_configs_and_seeds(tiny):
    for s in "BE":
        d = tiny[s]
        v1, v2 = d.val_batches(4, 3, "cpu"), d.val_batches(4, 3, "cpu")
        other = load_task_data(run_cfg(s, seed=5, config="fp32_true", device="cpu")).val_batches(4, 3, "cpu")
        assert len(v1) == 3
        for x, y, z in zip(v1, v2, other):
            assert all(torch.equal(x[k], y[k]) and torch.equal(x[k], z[k]) for k in x)
    # a longer evaluation extends the same sequence: its first batches are the same
    short, long = tiny["B"].val_batches(4, 3, "cpu"), tiny["B"].val_batches(4, 5, "cpu")
    assert all(torch.equal(x["labels"], y["labels"]) for x, y in zip(short, long))


@pytest.mark.parametrize("scenario", ["C", "D", "F"])  # GPT-2 multi-label; the encoder multi- and single-label
def test_evaluation_cut_to_each_batchs_longest_document_scores_what_the_whole_length_does(tiny, scenario):
    import contextlib
    from benchlib.core.dtypes import get_config
    from benchlib.training.loop import evaluate
    from benchlib.training.models import ModelSpec, build_model
    d = tiny[scenario]
    cut = d.val_batches(32, None, "cpu")
    assert sorted(cut.pool_index.tolist()) == list(range(len(d.val_pool["labels"])))  # every document, once
    assert sum(b["input_ids"].numel() for b in cut) < 0.85 * len(cut.pool_index) * d.seq_len  # the padding went
    # the same documents in the same batches, at the whole length
    whole = [{k: v[chunk] for k, v in d.val_pool.items()} for chunk in cut.pool_index.split(32)]
    torch.manual_seed(0)
    model = build_model(ModelSpec.for_run(run_cfg(scenario, device="cpu"), d), get_config("fp32_baseline"))
    q_cut, _ = evaluate(model, cut, d.task, contextlib.nullcontext())
    q_whole, _ = evaluate(model, whole, d.task, contextlib.nullcontext())
    assert q_cut.keys() == q_whole.keys()
    assert all(q_cut[k] == pytest.approx(q_whole[k], rel=1e-5, abs=1e-6) for k in q_whole), (q_cut, q_whole)


# ---------------------------------------------------------------------------------------
# Classification corpora
# ---------------------------------------------------------------------------------------
def test_multilabel_corpus_statistics(tiny):
    m = tiny["C"].meta
    assert tiny["C"].num_labels == SYNTH_NUM_LABELS["tiny"]
    assert 4.5 < m["labels_per_doc_mean"] < 5.5  # EUR-Lex: about five labels a document
    top = m["label_doc_frac_top10"]
    assert top == sorted(top, reverse=True)
    assert top[0] > 5 * m["label_docs_median"] / m["n_train"]  # a Zipf head over a long tail
    assert m["n_train"] == 4096 and m["n_val"] == 512
    labels = tiny["C"].train["labels"]
    assert ((labels >= 0).sum(1) >= 1).all()  # every document has a label


def test_the_label_space_has_a_long_tail_of_thousands_of_labels_at_the_study_sizes():
    for size in ("small", "base"):
        L = SYNTH_NUM_LABELS[size]
        assert L >= 2000
        space = syn.label_space(8192 if size == "small" else 50304, L, 254, np.random.default_rng(0))
        f = np.sort(space.freq)
        assert f.sum() == pytest.approx(syn.MEAN_LABELS_PER_DOC)
        assert f[-1] / f[0] > 100  # the head label is 100s of times more frequent than the rarest
        assert len(np.unique(space.signatures)) == L and not np.isin(space.background, space.signatures).any()


def _brute_force_posterior(space, counts):
    """P(label set | counts) over every non-empty label set, by enumeration; the marginals."""
    L = space.num_labels
    out = np.zeros(L)
    total = 0.0
    for bits in itertools.product((0, 1), repeat=L):
        y = np.array(bits, bool)
        if not y.any():
            continue
        rate = np.where(y, space.rate_present, space.rate_absent)
        p = np.prod(np.where(y, space.freq, 1 - space.freq)) * np.prod(rate ** counts * np.exp(-rate))
        out += p * y
        total += p
    return out / total


def test_the_posterior_equals_enumeration_over_label_sets():
    space = syn.label_space(40, 6, 62, np.random.default_rng(3))
    docs = np.full((3, 10), syn.PAD_ID)
    docs[0, :4] = [space.signatures[0], space.signatures[0], space.background[0], space.signatures[4]]
    docs[1, :2] = space.background[:2]  # no evidence at all: the posterior is the prior given >= 1 label
    docs[2, :3] = space.signatures[[1, 2, 3]]
    q = space.posterior(docs)
    for i in range(3):
        counts = np.bincount(space.token_label[docs[i]][space.token_label[docs[i]] >= 0], minlength=6)
        np.testing.assert_allclose(q[i], _brute_force_posterior(space, counts), rtol=1e-10)


def test_the_single_label_posterior_equals_enumeration():
    space = syn.label_space(40, 5, 62, np.random.default_rng(4))
    train_counts = np.array([9, 3, 9, 1, 0])  # ties: lower id first
    docs = np.full((2, 6), syn.PAD_ID)
    docs[0, :3] = space.signatures[[1, 3, 3]]
    docs[1, :2] = space.signatures[[0, 2]]
    got = syn.bayes_singlelabel(space, docs, train_counts)
    for i in range(2):
        counts = np.bincount(space.token_label[docs[i]][space.token_label[docs[i]] >= 0], minlength=5)
        p = np.zeros(5)
        for bits in itertools.product((0, 1), repeat=5):
            y = np.array(bits, bool)
            if not y.any():
                continue
            rate = np.where(y, space.rate_present, space.rate_absent)
            w = np.prod(np.where(y, space.freq, 1 - space.freq)) * np.prod(rate ** counts * np.exp(-rate))
            p[syn.primary_labels(np.where(y, np.arange(5), -1)[None], train_counts)[0]] += w
        p /= p.sum()
        assert got["accuracy"][i] == pytest.approx(p.max(), rel=1e-10)
        assert got["val_loss"][i] == pytest.approx(-(p[p > 0] * np.log(p[p > 0])).sum(), rel=1e-10)


def test_the_generator_samples_what_its_posterior_says():
    """Calibration: over many generated documents, the mean posterior of each label is the share
    of documents that carry it, and the Bayes floor of P@1 is what the posterior's argmax scores."""
    c = syn.make_label_corpus(64, 12, 20, 20000, 0)  # short documents: rejection and scaling both at work
    q = c.space.posterior(c.train_tokens)
    carried = np.zeros_like(q, dtype=bool)
    rows, cols = np.nonzero(c.train_labels >= 0)
    carried[rows, c.train_labels[rows, cols]] = True
    se = np.sqrt(q.mean(0) * (1 - q.mean(0)) / len(q))
    assert (np.abs(q.mean(0) - carried.mean(0)) < 4 * se + 1e-3).all()
    floor = syn.bayes_multilabel(c.space, c.train_tokens)["p_at_1"]
    realised = carried[np.arange(len(q)), q.argmax(1)]
    assert realised.mean() == pytest.approx(floor.mean(), abs=4 * realised.std() / math.sqrt(len(q)))


@pytest.mark.parametrize("scenario, metric", [("C", "p_at_1"), ("E", "accuracy")])
def test_the_floors_sit_well_below_one_and_far_above_the_trivial_predictor(tiny, scenario, metric):
    d = tiny[scenario]
    val = d.val_batches(32, None, "cpu")
    floors = d.floors(val)
    from benchlib.training.baselines import evaluate_baseline
    base, _ = evaluate_baseline(d, val)
    assert base[metric] + 0.15 < floors[metric] < 0.9
    assert d.meta[f"bayes_{metric}"] == pytest.approx(floors[metric])  # the whole pool is evaluated


def test_the_floors_average_over_exactly_the_evaluated_documents(tiny):
    d = tiny["D"]
    few = d.val_batches(8, 3, "cpu")
    assert d.floors(few)["p_at_5"] == pytest.approx(float(d.floor_values["p_at_5"][:24].mean()))
    assert d.floors(list(few)) == pytest.approx(d.floors(few))  # plain lists of batches: their first documents
    assert set(tiny["A"].floors()) == {"val_loss"} and tiny["A"].floors()["val_loss"] == tiny["A"].loss_floor


def test_the_label_corpus_is_deterministic_by_seed():
    a, b = (syn.make_label_corpus(256, 32, 30, 300, 50, seed=5) for _ in range(2))
    c = syn.make_label_corpus(256, 32, 30, 300, 50, seed=6)
    assert np.array_equal(a.train_tokens, b.train_tokens) and np.array_equal(a.val_labels, b.val_labels)
    assert not np.array_equal(a.train_tokens, c.train_tokens)


def test_too_many_labels_for_the_vocabulary_is_one_line():
    with pytest.raises(ValueError, match=r"num_labels=300 needs vocab_size >= 305"):
        syn.make_label_corpus(256, 300, 62, 10, 10)


def test_single_label_rule_hand_built():
    labels = np.array([[0, 2, -1], [1, 2, -1], [3, -1, -1], [-1, -1, -1]])
    counts = np.array([5, 9, 9, 1])
    # {0,2}: 2 is more frequent; {1,2}: tie -> lower id 1; {3}: 3; no labels: -1
    assert syn.primary_labels(labels, counts).tolist() == [2, 1, 3, -1]


def test_single_label_targets_follow_the_rule_on_synthetic_data(tiny):
    multi, single = tiny["C"], tiny["E"]
    counts = syn.label_counts(multi.train["labels"], 64)
    y_multi = multi.val_batches(16, 2, "cpu")
    y_single = single.val_batches(16, 2, "cpu")
    for bm, bs in zip(y_multi, y_single):
        for hot, y in zip(bm["labels"], bs["labels"]):
            ids = torch.nonzero(hot).squeeze(1).numpy()
            best = ids[np.argmax(counts[ids] * 1000 - ids)]  # most frequent, then lowest id
            assert int(y) == best


# ---------------------------------------------------------------------------------------
# Local files through `datasets`
# ---------------------------------------------------------------------------------------
WORDS = ("the court shall regulation member state article commission council directive market "
         "goods import export fishery agriculture tax customs vessel quota").split()


def write_corpus(path, n_docs=120, seed=0):
    rng = np.random.default_rng(seed)
    docs = [" ".join(rng.choice(WORDS, size=int(rng.integers(20, 60)))) for _ in range(n_docs)]
    path.write_text("\n\n".join(docs))
    return docs


def test_local_text_file_trains_and_reuses_bpe(tmp_path):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus)
    cache = tmp_path / "cache"
    d = load_task_data(run_cfg("A", data=str(corpus), cache_dir=str(cache)))
    assert d.source == str(corpus) and d.meta["n_docs"] == 120  # paragraphs are documents
    assert d.meta["tokenizer_kind"] == "bpe" and not d.meta["tokenizer_cached"]
    assert d.meta["token_cache"] == "built" and d.loss_floor is None
    bpe = list((cache / "tokenizers").glob("bpe-*.json"))
    assert len(bpe) == 1
    mtime = bpe[0].stat().st_mtime_ns
    b = d.sampler(4, "cpu", 0)()
    assert b["input_ids"].shape == (4, 64) and int(b["input_ids"].max()) < d.vocab_size
    assert torch.equal(b["input_ids"][:, 1:], b["labels"][:, :-1])
    n = d.meta["n_train_tokens"] + d.meta["n_val_tokens"]
    assert n == d.meta["n_tokens"] and d.meta["n_val_tokens"] == max(math.ceil(0.05 * n), 65)

    again = load_task_data(run_cfg("A", data=str(corpus), cache_dir=str(cache)))
    assert again.meta["tokenizer_cached"] and again.meta["token_cache"] == "hit"
    assert bpe[0].stat().st_mtime_ns == mtime
    assert torch.equal(again.sampler(4, "cpu", 0)()["input_ids"], b["input_ids"])


def test_local_text_mlm_never_masks_specials(tmp_path):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus)
    d = load_task_data(run_cfg("B", data=str(corpus), cache_dir=str(tmp_path / "cache")))
    assert (d.pad_id, d.bos_id, d.mask_id) == (0, 1, 3)  # <pad> <s> </s> <mask>
    batches = draw(d, 30, bs=8)
    inp = torch.cat([b["input_ids"] for b in batches])
    lab = torch.cat([b["labels"] for b in batches])
    eos = inp == 2
    assert eos.any() and (lab[eos] == -100).all()  # document separators are never scored
    assert (inp[:, 0] == 1).all() and (lab[:, 0] == -100).all()


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _split_indices(n):
    """The single-file rule, by hand: a seeded random 10% is validation."""
    val = sorted(np.random.default_rng(files.SPLIT_SEED).permutation(n)[:math.ceil(0.1 * n)].tolist())
    return [i for i in range(n) if i not in val], val


def test_local_jsonl_text_labels(tmp_path):
    rng = np.random.default_rng(1)
    names = ["fisheries", "agriculture", "customs", "tax", "trade"]
    rows = [{"text": " ".join(rng.choice(WORDS, 30)), "labels": sorted(rng.choice(names, 2, replace=False).tolist())}
            for _ in range(50)]
    write_jsonl(tmp_path / "docs.jsonl", rows)
    d = load_task_data(run_cfg("C", data=str(tmp_path / "docs.jsonl"), cache_dir=str(tmp_path / "c")))
    assert d.num_labels == 5 and d.meta["n_train"] == 45 and d.meta["n_val"] == 5
    assert d.meta["split_rule"] == f"one file: a random 10% of the documents (seed {files.SPLIT_SEED})"
    _, val_rows = _split_indices(50)
    assert val_rows != list(range(45, 50))  # not the file's tail
    vocab = sorted(names)  # ids from the sorted training label vocabulary
    val = d.val_batches(5, 1, "cpu")[0]
    got = sorted(torch.nonzero(hot).squeeze(1).tolist() for hot in val["labels"])
    assert got == sorted(sorted(vocab.index(x) for x in rows[i]["labels"]) for i in val_rows)
    b = d.sampler(3, "cpu", 0)()
    assert b["labels"].shape == (3, 5) and b["attention_mask"].shape == (3, 64)


def test_local_eurlex_schema_single_label(tmp_path):
    rng = np.random.default_rng(2)
    rows = [{"celex_id": f"3{i:04d}", "title": f"Regulation {i}", "text": " ".join(rng.choice(WORDS, 40)),
             "eurovoc_concepts": rng.choice(["100", "200", "300", "400"], int(rng.integers(1, 4)),
                                            replace=False).tolist()} for i in range(40)]
    write_jsonl(tmp_path / "eurlex.jsonl", rows)
    d = load_task_data(run_cfg("F", data=str(tmp_path / "eurlex.jsonl"), cache_dir=str(tmp_path / "c")))
    assert d.num_labels == 4 and d.meta["split_rule"].startswith("one file: a random 10%")
    train_rows, val_rows = _split_indices(40)
    counts = {k: sum(k in rows[i]["eurovoc_concepts"] for i in train_rows) for k in ["100", "200", "300", "400"]}
    want = [min(rows[i]["eurovoc_concepts"], key=lambda k: (-counts[k], k)) for i in val_rows]
    got = d.val_batches(4, 1, "cpu")[0]["labels"].tolist()
    assert sorted(got) == sorted(["100", "200", "300", "400"].index(k) for k in want)
    b = d.val_batches(4, 1, "cpu")[0]
    assert (b["input_ids"][:, 0] == d.bos_id).all()


def test_local_split_field_and_int_labels(tmp_path):
    rows = [{"text": f"doc {i} " + " ".join(WORDS[i % 7:i % 7 + 5]), "labels": [i % 3, 7],
             "split": "validation" if i % 5 == 0 else "train"} for i in range(30)]
    write_jsonl(tmp_path / "d.jsonl", rows)
    d = load_task_data(run_cfg("E", data=str(tmp_path / "d.jsonl"), cache_dir=str(tmp_path / "c")))
    assert d.num_labels == 8 and d.meta["label_ids"] == "int"  # int labels are their own ids
    assert d.meta["n_train"] == 24 and d.meta["n_val"] == 6
    assert set(d.val_batches(6, 1, "cpu")[0]["labels"].tolist()) == {7}  # label 7 is on every doc


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------
def test_missing_local_path_is_one_clear_error(tmp_path):
    gone = tmp_path / "gone.txt"
    gone.write_text("x")
    cfg = run_cfg("A", data=str(gone), cache_dir=str(tmp_path / "c"))
    gone.unlink()  # RunConfig checks existence too; the loader must still say it clearly
    with pytest.raises(DataPathNotFoundError) as e:
        load_task_data(cfg)
    assert isinstance(e.value, FileNotFoundError) and str(gone) in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataPathNotFoundError, match="no .txt/.jsonl"):
        load_task_data(run_cfg("C", data=str(tmp_path / "empty"), cache_dir=str(tmp_path / "c")))


@pytest.mark.parametrize("scenario,dataset", [("A", "Skylion007/openwebtext"), ("D", "NLP-AUEB/eurlex")])
def test_unreachable_hub_is_one_clear_error(monkeypatch, scenario, dataset):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets
    from huggingface_hub import constants
    real, calls = datasets.load_dataset, []

    def load_dataset(path, *args, **kwargs):  # each attempt: (dataset, retries asked for, offline mode then)
        dc = kwargs.get("download_config")
        calls.append((path, dc.max_retries if dc else None, bool(datasets.config.HF_HUB_OFFLINE and constants.HF_HUB_OFFLINE)))
        return real(path, *args, **kwargs)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    with pytest.raises(DataUnavailableError) as e:
        load_task_data(run_cfg(scenario, data="hub"))
    msg = str(e.value)
    assert dataset in msg and "data='synthetic'" in msg and "local path" in msg and "\n" not in msg
    assert isinstance(e.value, ValueError) and e.value.__cause__ is None
    # no retry loop: one attempt, asked for no retries, with the libraries in offline mode
    assert calls == [(dataset, 0, True)]


# ---------------------------------------------------------------------------------------
# Split rules
# ---------------------------------------------------------------------------------------
def test_split_words_anywhere_in_a_name_pick_the_splits_and_the_test_file_is_never_read(tmp_path):
    folder = tmp_path / "eurlex"
    folder.mkdir()
    docs = {"train": 30, "validation": 8, "test": 6}
    for split, n in docs.items():
        label = "only_in_test" if split == "test" else "tax"
        write_jsonl(folder / f"eurlex57k.{split}.jsonl",
                    [{"text": f"{split} doc {i}", "labels": [label, f"l{i % 2}"]} for i in range(n)])
    d = load_task_data(run_cfg("D", data=str(folder), cache_dir=str(tmp_path / "c")))
    assert (d.meta["n_train"], d.meta["n_val"]) == (30, 8)
    assert d.num_labels == 3  # l0, l1, tax: the test file's label never reaches the vocabulary
    assert d.meta["split_rule"] == ("split files: train = eurlex57k.train.jsonl; validation = eurlex57k.validation.jsonl;"
                                    " test (eurlex57k.test.jsonl) not used")


def test_lm_validation_files_are_the_validation_text_and_test_files_are_left_out(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_corpus(folder / "news-train.txt", n_docs=60, seed=0)
    write_corpus(folder / "news-dev.txt", n_docs=20, seed=1)
    write_corpus(folder / "news-test.txt", n_docs=20, seed=2)
    d = load_task_data(run_cfg("A", data=str(folder), cache_dir=str(tmp_path / "c")))
    assert d.meta["n_docs"] == 60 and d.meta["n_train_tokens"] == d.meta["n_tokens"]  # the train file, whole
    assert d.meta["val_rule"].startswith("split files: train = news-train.txt; validation = news-dev.txt; "
                                         "test (news-test.txt) not used")
    assert d.meta["n_val_sequences"] == d.meta["n_val_tokens"] // 65  # every window of the dev file


def test_the_lm_validation_pool_is_drawn_from_the_whole_split(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "LM_VAL_POOL", 4)
    write_corpus(tmp_path / "c.txt", n_docs=400)
    d = load_task_data(run_cfg("A", data=str(tmp_path / "c.txt"), cache_dir=str(tmp_path / "cache")))
    n_windows = d.meta["n_val_tokens"] // 65
    assert n_windows > 8 and d.meta["val_pool"] == f"4 of {n_windows} validation windows, drawn at random (seed 4321)"
    assert len(d.val_pool["input_ids"]) == 4


def test_an_evaluation_larger_than_the_pool_takes_each_example_once(tiny):
    d = tiny["E"]
    n = len(d.val_pool["labels"])
    batches = d.val_batches(64, n // 64 + 5, "cpu")
    assert sum(len(b["labels"]) for b in batches) == n


def test_the_record_describes_the_data_and_model_trained(tmp_path):
    from benchlib.training.loop import run
    rows = [{"text": " ".join(WORDS[i % 9:i % 9 + 6]), "labels": [f"label{i % 5}", f"label{5 + i % 2}"]}
            for i in range(60)]
    write_jsonl(tmp_path / "docs.jsonl", rows)
    rec = run({"scenario": "C", "steps": 2, "device": "cpu", "data": str(tmp_path / "docs.jsonl"),
               "cache_dir": str(tmp_path / "c")}, out_dir=tmp_path / "run", progress=False)
    assert rec["status"] != "error", rec["reason"]
    # the byte-level BPE trained on this small corpus stops where its merges run out
    from tokenizers import Tokenizer
    bpe = Tokenizer.from_file(rec["data"]["tokenizer"])
    assert rec["run"]["num_labels"] == 7 and rec["run"]["vocab_size"] == rec["data"]["vocab_size"] == bpe.get_vocab_size()
    assert rec["data"]["asked"] == {"vocab_size": 256, "num_labels": SYNTH_NUM_LABELS["tiny"]}  # tiny's synthetic defaults
    assert rec["model"]["class"] == "GPT2Model" and rec["model"]["num_labels"] == 7
    assert rec["model"]["parameters"] > 0 and rec["model"]["weights"] == "initialised (from scratch)"
    assert rec["data"]["split_rule"].startswith("one file: a random 10%")
