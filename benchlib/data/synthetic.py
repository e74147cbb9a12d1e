"""Embedded synthetic corpora whose optimal loss is known.

Token ids follow one convention for every synthetic corpus (and for the byte-level BPE
trained on local files): 0 = ``<pad>``, 1 = ``<s>`` (BOS / CLS), 2 = ``</s>`` (EOS),
3 = ``<mask>``; content tokens are ids 4..V-1.

* **Language modelling (A, B)**: a first-order Markov chain over the content tokens with a
  sparse random transition matrix (``MarkovChain.random``), every chain started in the stationary
  distribution, so the Bayes-optimal next-token loss of every position with at least one token
  of context is exactly the entropy rate ``sum_i pi_i H(P_i)``; the masked-LM optimum is
  computed by forward-backward (``mlm_bayes_nll``).
* **Classification (C-F)**: EUR-Lex-like documents (``make_label_corpus``).

A fixed data seed makes every run of a study see the same corpus.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from scipy.special import entr, expit

PAD_ID, BOS_ID, EOS_ID, MASK_ID = 0, 1, 2, 3
FIRST_CONTENT_ID = 4
DATA_SEED = 20_240_917
"""Seed of every synthetic corpus: fixed, independent of the run seed."""

# MLM corruption (BERT/RoBERTa): select 15% of the non-special positions; of those 80% ->
# <mask>, 10% -> a uniformly random content token, 10% unchanged.
MLM_SELECT_P = 0.15
MLM_MASK_P, MLM_RANDOM_P = 0.8, 0.1


# ---- Markov chain ------------------------------------------------
@dataclass
class MarkovChain:
    """A sparse first-order Markov chain: ``succ[i, j]`` is the j-th successor slot of state i
    and ``prob[i, j]`` its probability. Rows sum to 1; a successor appears at most once with
    non-zero probability per row; unused slots hold probability 0 and (so rounding can never step
    off the support) a copy of a real successor of that row."""

    succ: np.ndarray  # [n, k] int64
    prob: np.ndarray  # [n, k] float64

    @property
    def n_states(self) -> int:
        return self.succ.shape[0]

    @property
    def nnz(self) -> int:
        return int((self.prob > 0).sum())

    @classmethod
    def from_dense(cls, P: np.ndarray) -> "MarkovChain":
        """A chain from a dense row-stochastic matrix (for hand-built examples)."""
        P = np.asarray(P, dtype=np.float64)
        if P.ndim != 2 or P.shape[0] != P.shape[1] or not np.allclose(P.sum(1), 1.0):
            raise ValueError("P must be a square row-stochastic matrix")
        k = max(1, int((P > 0).sum(1).max()))
        order = np.argsort(-P, axis=1, kind="stable")[:, :k]  # non-zeros first
        prob = np.take_along_axis(P, order, axis=1)
        succ = np.where(prob > 0, order, order[:, :1])  # padding slots copy a real successor
        return cls(succ.astype(np.int64), prob)

    @classmethod
    def random(cls, n: int, rng: np.random.Generator, min_succ: int = 8, max_succ: int = 32,
               alpha: float = 0.5, zipf_mix: float = 0.5) -> "MarkovChain":
        """Random sparse chain: each state gets U{min_succ..max_succ} successor draws from a
        mixture of Zipf(1) (over a random ranking of the states) and uniform, with
        Dirichlet(alpha) weights; repeated draws of one successor are merged."""
        kmax = min(max_succ, n)
        k = rng.integers(min(min_succ, n), kmax + 1, size=n)
        rank = rng.permutation(n)
        zipf = 1.0 / (1.0 + rank)
        q = zipf_mix * zipf / zipf.sum() + (1.0 - zipf_mix) / n
        succ = rng.choice(n, size=(n, kmax), p=q)
        w = rng.gamma(alpha, size=(n, kmax))
        unused = np.arange(kmax)[None, :] >= k[:, None]
        w[unused] = 0.0
        succ[unused] = np.broadcast_to(succ[:, :1], succ.shape)[unused]
        succ, w = _merge_duplicate_successors(succ, w)
        return cls(succ, w / w.sum(1, keepdims=True))

    def stationary(self, tol: float = 1e-14, max_iter: int = 200_000) -> np.ndarray:
        """Stationary distribution by power iteration on the lazy chain (P + I) / 2, which has
        the same stationary distribution and converges for periodic chains too."""
        n = self.n_states
        pi = np.full(n, 1.0 / n)
        flat_succ = self.succ.ravel()
        for _ in range(max_iter):
            step = np.bincount(flat_succ, weights=(pi[:, None] * self.prob).ravel(), minlength=n)
            new = 0.5 * (pi + step)
            new /= new.sum()
            if np.abs(new - pi).sum() < tol:
                return new
            pi = new
        raise RuntimeError(f"stationary distribution did not converge in {max_iter} iterations")

    def entropy_rate(self, pi: Optional[np.ndarray] = None) -> float:
        """sum_i pi_i H(P_i) (nats): the Bayes next-token loss of a stationary chain."""
        pi = self.stationary() if pi is None else pi
        return float(pi @ entr(self.prob).sum(1))

    def log_prob(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """log P[a, b] elementwise (-inf where b is not a successor of a)."""
        a, b = np.asarray(a), np.asarray(b)
        match = self.succ[a] == b[..., None]
        with np.errstate(divide="ignore"):
            return np.log((self.prob[a] * match).sum(-1))

    def sample(self, n_chains: int, length: int, rng: np.random.Generator,
               pi: Optional[np.ndarray] = None) -> np.ndarray:
        """``n_chains`` independent chains of ``length`` states, each started from the
        stationary distribution; one vectorised step per position. Returns int64 states."""
        pi = self.stationary() if pi is None else pi
        cum = np.cumsum(self.prob, axis=1)
        out = np.empty((n_chains, length), dtype=np.int64)
        state = rng.choice(self.n_states, size=n_chains, p=pi)
        out[:, 0] = state
        last = self.succ.shape[1] - 1
        for t in range(1, length):
            u = rng.random(n_chains)
            slot = np.minimum((cum[state] <= u[:, None]).sum(1), last)
            state = self.succ[state, slot]
            out[:, t] = state
        return out


def _merge_duplicate_successors(succ: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum the weights of repeated successors in each row (so entropies see the true row
    distribution); freed slots get weight 0 and a copy of the row's first successor."""
    n, k = succ.shape
    order = np.argsort(succ, axis=1, kind="stable")
    succ = np.take_along_axis(succ, order, axis=1)
    w = np.take_along_axis(w, order, axis=1)
    new_group = np.ones_like(succ, dtype=bool)
    new_group[:, 1:] = succ[:, 1:] != succ[:, :-1]
    gid = np.cumsum(new_group, axis=1) - 1  # group index within the row
    flat = (np.arange(n)[:, None] * k + gid).ravel()
    w_out = np.bincount(flat, weights=w.ravel(), minlength=n * k).reshape(n, k)
    succ_out = np.empty_like(succ)
    succ_out[np.arange(n)[:, None].repeat(k, 1)[new_group], gid[new_group]] = succ[new_group]
    n_groups = gid[:, -1] + 1
    free = np.arange(k)[None, :] >= n_groups[:, None]
    succ_out[free] = np.broadcast_to(succ_out[:, :1], succ_out.shape)[free]
    return succ_out, w_out


# ---- LM corpus ---------------------------------------------------
@dataclass
class LMCorpus:
    """``train`` rows are independent chains (a window never crosses a row); ``val`` rows are one
    validation window each. Both hold token ids (state + 4)."""

    chain: MarkovChain
    pi: np.ndarray
    entropy_rate: float
    stationary_entropy: float
    train: np.ndarray  # [rows, row_len] uint16 / int32
    val: np.ndarray    # [n_val, window] int64


def make_lm_corpus(vocab_size: int, window: int, n_train_tokens: int, n_val: int,
                   seed: int = DATA_SEED) -> LMCorpus:
    """Generate the chain, ``n_train_tokens`` training tokens in rows of ``4 * window``
    tokens (at least 4 windows' worth of distinct offsets per row) and ``n_val`` validation
    windows from separate chains."""
    n = vocab_size - FIRST_CONTENT_ID
    if n < 2:
        raise ValueError(f"vocab_size must exceed {FIRST_CONTENT_ID + 1} for a synthetic LM corpus")
    chain_rng, train_rng, val_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    chain = MarkovChain.random(n, chain_rng)
    pi = chain.stationary()
    row_len = 4 * window
    rows = max(1, math.ceil(n_train_tokens / row_len))
    dtype = np.uint16 if vocab_size <= 1 << 16 else np.int32
    train = (chain.sample(rows, row_len, train_rng, pi) + FIRST_CONTENT_ID).astype(dtype)
    val = chain.sample(n_val, window, val_rng, pi) + FIRST_CONTENT_ID
    return LMCorpus(chain, pi, chain.entropy_rate(pi), float(entr(pi).sum()), train, val)


# ---- Masked-LM Bayes loss: forward-backward over the chain -------
def mlm_bayes_nll(chain: MarkovChain, pi: np.ndarray, observed: np.ndarray, labels: np.ndarray,
                  device: str | torch.device = "cpu", group: Optional[int] = None) -> np.ndarray:
    """-log p(x_t | observed sequence, t selected) at every scored position (row-major
    order): the loss of the Bayes-optimal MLM predictor on these exact masks.

    ``observed`` and ``labels`` are [N, W] token ids of chain positions only (no BOS);
    ``labels`` is -100 where not scored. The corruption model is the sampler's: every
    position is selected with p=0.15; a selected one becomes <mask> (0.8), a uniform random
    content token (0.1) or stays (0.1). A model cannot see which unmasked positions were
    selected, so the observation likelihood of an unmasked token y is
    ``c + d [x = y]`` with c = 0.15 * 0.1 / n and d = 0.85 + 0.15 * 0.1; for a scored position
    the selected-only likelihood ``0.1 / n + 0.1 [x = y]`` is used (the optimum given that
    the position is scored). <mask> has the same likelihood for every x (a constant).
    """
    dev = torch.device(device)
    n = chain.n_states
    c = MLM_SELECT_P * MLM_RANDOM_P / n
    d = (1 - MLM_SELECT_P) + MLM_SELECT_P * (1 - MLM_MASK_P - MLM_RANDOM_P)
    c_sel, d_sel = MLM_RANDOM_P / n, 1 - MLM_MASK_P - MLM_RANDOM_P
    fwd, bwd = _transition_operators(chain, dev)
    obs = torch.as_tensor(np.asarray(observed) - FIRST_CONTENT_ID, device=dev)  # mask -> < 0
    lab = torch.as_tensor(np.asarray(labels), device=dev)
    pi_t = torch.as_tensor(pi, dtype=torch.float64, device=dev)
    if group is None:
        kept_per_seq = 8 * n * max(1.0, 0.2 * obs.shape[1])  # bytes of forward vectors kept
        group = int(max(1, (1 << 29) // kept_per_seq))
    out = []
    for g0 in range(0, obs.shape[0], group):
        o, l = obs[g0:g0 + group].T.contiguous(), lab[g0:g0 + group].T.contiguous()  # [W, G]
        out.append(_forward_backward(fwd, bwd, pi_t, o, l, c, d, c_sel, d_sel))
    return np.concatenate(out) if out else np.zeros(0)


def _transition_operators(chain: MarkovChain, dev: torch.device):
    """(A -> P^T A, B -> P B) for column-stacked vectors: dense for small chains, CSR above."""
    n = chain.n_states
    rows = np.repeat(np.arange(n), chain.succ.shape[1])
    keep = chain.prob.ravel() > 0
    r, s, p = rows[keep], chain.succ.ravel()[keep], chain.prob.ravel()[keep]
    if n <= 2048:
        P = torch.zeros(n, n, dtype=torch.float64, device=dev)
        P[torch.as_tensor(r, device=dev), torch.as_tensor(s, device=dev)] = torch.as_tensor(p, device=dev)
        PT = P.T.contiguous()
    else:
        def csr(i, j):
            with warnings.catch_warnings():  # "sparse CSR is beta": matmul is all we use
                warnings.simplefilter("ignore", UserWarning)
                return torch.sparse_coo_tensor(torch.as_tensor(np.stack([i, j]), device=dev),
                                               torch.as_tensor(p, device=dev), (n, n)).coalesce().to_sparse_csr()
        P, PT = csr(r, s), csr(s, r)
    return (lambda A: PT @ A), (lambda B: P @ B)


def _emit(V: torch.Tensor, o: torch.Tensor, c: float, d: float) -> torch.Tensor:
    """Multiply columns by the observation likelihood c + d [x = o] (o < 0: <mask>, no-op)."""
    out = V.clone()
    cols = torch.nonzero(o >= 0).squeeze(1)
    if cols.numel():
        rows = o[cols]
        point = V[rows, cols]
        out[:, cols] *= c
        out[rows, cols] += d * point
    return out / out.sum(0, keepdim=True)  # rescale: only ratios matter


def _forward_backward(fwd, bwd, pi, o, lab, c, d, c_sel, d_sel) -> np.ndarray:
    W, G = o.shape
    # forward: keep the predictive vector alpha_t(x) = p(x_t = x, obs_<t) (rescaled) only for
    # the scored (t, column) pairs: that is all the posterior needs.
    A = pi[:, None].expand(-1, G).contiguous()
    kept: dict[int, torch.Tensor] = {}
    for t in range(W):
        cols = torch.nonzero(lab[t] != -100).squeeze(1)
        if cols.numel():
            kept[t] = A[:, cols]
        if t + 1 < W:
            A = fwd(_emit(A, o[t], c, d))
            A = A / A.sum(0, keepdim=True)
    # backward: beta_t(x) = p(obs_>t | x_t = x) (rescaled); posterior at a scored t is
    # alpha_t * beta_t * selected-likelihood.
    B = torch.ones_like(A)
    nll = torch.zeros_like(lab, dtype=torch.float64)  # [W, G]
    for t in range(W - 1, -1, -1):
        if t in kept:
            cols = torch.nonzero(lab[t] != -100).squeeze(1)
            post = kept.pop(t) * B[:, cols]
            post = _emit(post, o[t, cols], c_sel, d_sel)
            truth = lab[t, cols] - FIRST_CONTENT_ID
            p_true = post[truth, torch.arange(cols.numel(), device=post.device)]
            nll[t, cols] = -torch.log(p_true)
        if t > 0:
            B = bwd(_emit(B, o[t], c, d))
            B = B / B.sum(0, keepdim=True)
    scored = lab.T != -100
    return nll.T[scored].cpu().numpy()


# ---- EUR-Lex-like multi-label corpus with a known posterior ------
MEAN_LABELS_PER_DOC = 5.0
"""Expected labels per document before conditioning on at least one (EUR-Lex 57k: about 5)."""
LABEL_ZIPF_SHIFT = 5
"""Label prior f_r = c / (r + 5.5) over a random ranking r of the label ids, c set so the priors
sum to ``MEAN_LABELS_PER_DOC``: a Zipf-Mandelbrot long tail (base: ~13% of documents for the most
frequent label, ~8 of 45,000 for the rarest, as EUR-Lex has few-shot labels)."""
MAX_LABEL_FREQ = 0.5
"""Cap on a label's prior (only binds when there are few labels)."""
RATE_PRESENT = 1.0
"""Expected signature tokens (Poisson) of each label a document carries: a carried label leaves
no token in e^-1 = 37% of its documents, so the text never settles every label."""
NOISE_TOKENS = 16.0
"""Expected signature tokens (Poisson) per document of labels it does not carry, spread uniformly
over the labels: a single token of a rare label is then more likely noise than evidence."""
MAX_NOISE_RATIO = 0.125
"""An absent label emits at most this fraction of ``RATE_PRESENT`` (binds below 128 labels),
so a signature token is always evidence for its label."""
REFERENCE_CONTENT_LEN = 62
"""Content tokens (tiny's seq_len 64 less <s> and </s>) for which the rates above hold; shorter
documents scale both rates down in proportion so the signature tokens still fit."""


@dataclass
class LabelSpace:
    """What the generator knows about the labels, hence about their posterior. Label j has a
    prior ``freq[j]`` and its own signature token ``signatures[j]``. A document carries each label
    independently with probability ``freq[j]`` (conditioned on at least one); its count of j's
    signature tokens is Poisson(``rate_present``) if it carries j, else Poisson(``rate_absent``);
    every other token is background. So the counts are sufficient and the posterior factorises
    over labels before the conditioning (``log_odds``, ``posterior``)."""

    freq: np.ndarray          # [L] float64
    signatures: np.ndarray    # [L] int64 token ids, one per label, all distinct
    background: np.ndarray    # background token ids, most frequent first
    token_label: np.ndarray   # [V] int64: the label whose signature a token is, -1 otherwise
    rate_present: float
    rate_absent: float

    @property
    def num_labels(self) -> int:
        return len(self.freq)

    def counts(self, tokens: np.ndarray) -> np.ndarray:
        """[N, L] signature-token counts of each label in each document (PAD and background: none)."""
        lab = self.token_label[np.asarray(tokens)]
        n, L = lab.shape[0], self.num_labels
        hit = lab >= 0
        flat = (np.nonzero(hit)[0] * L + lab[hit]).astype(np.int64)
        return np.bincount(flat, minlength=n * L).reshape(n, L)

    def log_odds(self, tokens: np.ndarray) -> np.ndarray:
        """[N, L] log P(j carried | counts) / P(j not carried | counts), each label on its own
        (before conditioning on at least one label): prior log-odds + c log(lambda/mu) - (lambda - mu)."""
        f = self.freq
        c = self.counts(tokens)
        return (np.log(f) - np.log1p(-f))[None, :] + c * math.log(self.rate_present / self.rate_absent) \
            - (self.rate_present - self.rate_absent)

    def posterior(self, tokens: np.ndarray) -> np.ndarray:
        """[N, L] P(label j is among the document's labels | its tokens), exact."""
        z = self.log_odds(tokens)
        return expit(z) / _p_nonempty(z)[:, None]


def _p_nonempty(z: np.ndarray) -> np.ndarray:
    """P(at least one label | tokens) under the unconditioned, independent posterior."""
    return -np.expm1(-np.logaddexp(0.0, z).sum(1))


@dataclass
class LabelCorpus:
    """Documents as content tokens (PAD-padded on the right); ``*_labels`` is [N, K] int64 of label
    ids, ascending, padded with -1."""

    train_tokens: np.ndarray
    train_len: np.ndarray
    train_labels: np.ndarray
    val_tokens: np.ndarray
    val_len: np.ndarray
    val_labels: np.ndarray
    space: LabelSpace


def make_label_corpus(vocab_size: int, num_labels: int, max_len: int, n_train: int, n_val: int,
                      seed: int = DATA_SEED, chunk: int = 4096) -> LabelCorpus:
    """EUR-Lex-like documents of at most ``max_len`` content tokens whose label posterior is known
    exactly (``LabelSpace``; the generator and its Bayes floors: docs/synthetic_labels.md): labels
    carried independently with a Zipf prior (about ``MEAN_LABELS_PER_DOC``, at least one), Poisson
    counts of each label's signature token (``RATE_PRESENT`` if carried, else ``NOISE_TOKENS`` / L),
    the rest Zipf-like background, shuffled. Documents whose signature tokens would not fit are drawn
    again (a rule on the tokens alone: the posterior is unchanged). The same seed gives the same corpus.
    """
    space = label_space(vocab_size, num_labels, max_len, np.random.default_rng(np.random.SeedSequence(seed + 1)))
    rng_train, rng_val = (np.random.default_rng(s) for s in np.random.SeedSequence(seed + 2).spawn(2))
    train = _make_docs(rng_train, n_train, space, max_len, chunk)
    val = _make_docs(rng_val, n_val, space, max_len, chunk)
    return LabelCorpus(*train, *val, space)


def label_space(vocab_size: int, num_labels: int, max_len: int, rng: np.random.Generator) -> LabelSpace:
    """Priors, signature tokens and emission rates (see the constants above)."""
    n_content = vocab_size - FIRST_CONTENT_ID
    L = num_labels
    if L < 1 or max_len < 1:
        raise ValueError(f"synthetic classification needs num_labels >= 1 and seq_len >= 3, got {L} and {max_len + 2}")
    if n_content <= L:
        raise ValueError(f"num_labels={L} needs vocab_size >= {L + FIRST_CONTENT_ID + 1} for synthetic data "
                         f"(one signature token per label and one background token), got {vocab_size}")
    ids = rng.permutation(n_content) + FIRST_CONTENT_ID
    signatures, background = ids[:L], ids[L:]
    w = 1.0 / (np.arange(L) + LABEL_ZIPF_SHIFT + 0.5)
    freq = np.minimum(MAX_LABEL_FREQ, MEAN_LABELS_PER_DOC * w / w.sum())[rng.permutation(L)]
    token_label = np.full(vocab_size, -1, dtype=np.int64)
    token_label[signatures] = np.arange(L)
    scale = min(1.0, max_len / REFERENCE_CONTENT_LEN)
    present = RATE_PRESENT * scale
    absent = min(NOISE_TOKENS * scale / L, MAX_NOISE_RATIO * present)
    return LabelSpace(freq, signatures.astype(np.int64), background.astype(np.int64), token_label, present, absent)


def _make_docs(rng, n_docs: int, space: LabelSpace, max_len: int, chunk: int):
    tokens = np.zeros((n_docs, max_len), dtype=np.int32)
    lengths = np.empty(n_docs, dtype=np.int64)
    label_rows = []
    for s in range(0, n_docs, chunk):
        m = min(chunk, n_docs - s)
        tok, length, present = _draw_docs(rng, m, space, max_len)
        tokens[s:s + m], lengths[s:s + m] = tok, length
        label_rows.append(present)
    width = max([int(p.sum(1).max()) for p in label_rows], default=1)
    labels = np.concatenate([_padded_ids(p, width) for p in label_rows]) if label_rows else \
        np.full((0, 1), -1, dtype=np.int64)
    return tokens, lengths, labels


def _draw_docs(rng, m: int, space: LabelSpace, max_len: int, max_rounds: int = 10_000):
    """``m`` documents: (tokens [m, max_len], lengths [m], label sets as bool [m, L]); rows whose
    signature tokens exceed ``max_len`` are drawn again."""
    tokens, lengths, present = _draw_once(rng, m, space, max_len)
    for _ in range(max_rounds):
        bad = np.flatnonzero(lengths < 0)
        if len(bad) == 0:
            return tokens, lengths, present
        tokens[bad], lengths[bad], present[bad] = _draw_once(rng, len(bad), space, max_len)
    raise RuntimeError(f"synthetic documents of {max_len} tokens could not hold their signature tokens")


def _draw_once(rng, m: int, space: LabelSpace, max_len: int):
    L = space.num_labels
    present = rng.random((m, L), dtype=np.float32) < space.freq.astype(np.float32)
    while not present.any(1).all():  # at least one label: draw empty rows again
        empty = np.flatnonzero(~present.any(1))
        present[empty] = rng.random((len(empty), L), dtype=np.float32) < space.freq.astype(np.float32)
    # counts: Poisson(absent) for every label plus Poisson(present - absent) for carried ones
    doc_i, lab_j = np.nonzero(present)
    extra = rng.poisson(space.rate_present - space.rate_absent, size=len(doc_i))
    noise = rng.poisson(space.rate_absent * L, size=m)
    ev_doc = np.concatenate([np.repeat(doc_i, extra), np.repeat(np.arange(m), noise)])
    ev_lab = np.concatenate([np.repeat(lab_j, extra), rng.integers(0, L, size=int(noise.sum()))])
    ev_tok = space.signatures[ev_lab]
    n_sig = np.bincount(ev_doc, minlength=m)
    length = np.maximum(rng.integers(max(1, max_len // 4), max_len + 1, size=m), n_sig)
    # signature tokens first, background after, then each document's first `length` shuffled
    order = np.argsort(ev_doc, kind="stable")
    ev_doc, ev_tok = ev_doc[order], ev_tok[order]
    start = np.concatenate([[0], np.cumsum(n_sig)[:-1]])
    pos = np.arange(len(ev_doc)) - start[ev_doc]
    fits = pos < max_len
    doc = space.background[zipf_ranks(rng, len(space.background), (m, max_len))]
    doc[ev_doc[fits], pos[fits]] = ev_tok[fits]
    col = np.arange(max_len)[None, :]
    keys = np.where(col < length[:, None], rng.random((m, max_len)), 2.0)
    doc = np.take_along_axis(doc, np.argsort(keys, axis=1), axis=1)
    doc[col >= length[:, None]] = PAD_ID
    length = np.where(n_sig > max_len, -1, np.minimum(length, max_len))
    return doc.astype(np.int32), length, present


def _padded_ids(present: np.ndarray, width: int) -> np.ndarray:
    """Label ids of each row of a bool [m, L] array, ascending, padded with -1 to ``width``."""
    rows, cols = np.nonzero(present)
    k = present.sum(1)
    start = np.concatenate([[0], np.cumsum(k)[:-1]])
    out = np.full((len(present), width), -1, dtype=np.int64)
    out[rows, np.arange(len(rows)) - start[rows]] = cols
    return out


def zipf_ranks(rng, n: int, shape, shift: int = 1) -> np.ndarray:
    """Zipf-like ranks in [0, n): floor(log-uniform on [shift, n + shift]) - shift, i.e.
    P(r) = log((r+shift+1)/(r+shift)) / log((n+shift)/shift) ~ 1/(r + shift + 0.5): a
    discretised Zipf(1) (Zipf-Mandelbrot with offset ``shift``), one exp per draw."""
    lo, hi = math.log(shift), math.log(n + shift)
    r = np.exp(lo + rng.random(shape) * (hi - lo)).astype(np.int64) - int(shift)
    return r.clip(0, n - 1)


# ---- Bayes-optimal classification quality ------------------------
def _per_document(tokens: np.ndarray, chunk: int, quality) -> dict[str, np.ndarray]:
    """``quality`` (documents -> metric -> value per document) over ``tokens`` in chunks."""
    parts = [quality(tokens[i:i + chunk]) for i in range(0, max(1, len(tokens)), chunk)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _top_k(p: np.ndarray) -> dict[int, np.ndarray]:
    """k -> (sum of the k largest of each row) / k, for k = 1, 3, 5: the expected P@k of ranking by ``p``."""
    top = -np.sort(-p, axis=1)[:, :5]
    return {k: top[:, :k].sum(1) / k for k in (1, 3, 5)}


def bayes_multilabel(space: LabelSpace, tokens: np.ndarray, chunk: int = 512) -> dict[str, np.ndarray]:
    """Per document, the expected quality of the Bayes-optimal multi-label predictor (it scores
    each label by its posterior): ``p_at_k`` = (sum of the k largest posteriors) / k, the expected
    P@k, and ``val_loss`` = the mean over labels of the posterior's binary entropy, the expected
    BCE of predicting the posterior (BCE is separable over labels, so the marginals are optimal).
    No predictor has a higher expected P@k, or a lower expected BCE, on these documents."""
    def quality(t):
        q = space.posterior(t)
        return {**{f"p_at_{k}": v for k, v in _top_k(q).items()}, "val_loss": (entr(q) + entr(1 - q)).mean(1)}
    return _per_document(tokens, chunk, quality)


def bayes_singlelabel(space: LabelSpace, tokens: np.ndarray, train_counts: np.ndarray,
                      chunk: int = 512) -> dict[str, np.ndarray]:
    """Per document, the expected quality of the Bayes-optimal single-label predictor for the
    target of ``primary_labels`` (the document's label most frequent in training, ties to the
    lowest id): P(target = c | tokens) = P(c carried) x prod over labels ranked before c of
    P(not carried), over P(at least one). ``accuracy`` (= ``p_at_1``) is its largest value,
    ``p_at_k`` the sum of the k largest / k, ``val_loss`` its entropy (the expected cross-entropy
    of predicting it)."""
    L = space.num_labels
    order = np.lexsort((np.arange(L), -np.asarray(train_counts)[:L]))  # the primary rule's ranking

    def quality(t):
        z = space.log_odds(t)[:, order]
        log_q, log_not = -np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)
        before = np.cumsum(log_not, axis=1) - log_not  # labels ranked before each one: none carried
        log_p = log_q + before - np.log(_p_nonempty(z))[:, None]
        p = np.exp(log_p)
        top = _top_k(p)
        return {"accuracy": top[1], "p_at_3": top[3], "p_at_5": top[5],
                "val_loss": -(p * np.where(p > 0, log_p, 0.0)).sum(1), "p_at_1": top[1]}
    return _per_document(tokens, chunk, quality)


def label_counts(labels: np.ndarray, num_labels: int) -> np.ndarray:
    """Documents per label from a -1-padded [N, K] label array."""
    flat = labels[labels >= 0]
    return np.bincount(flat, minlength=num_labels)


def primary_labels(labels: np.ndarray, train_counts: np.ndarray) -> np.ndarray:
    """Single-label target of every document: among its labels, the one most frequent in the
    training set; ties go to the lowest label id. Documents without labels get -1."""
    labels = np.asarray(labels)
    valid = labels >= 0
    counts = np.where(valid, np.asarray(train_counts)[np.where(valid, labels, 0)], -1)
    # one integer key: higher count first, then lower id (ids < n_labels)
    n_labels = len(train_counts)
    key = np.where(valid, counts * (n_labels + 1) + (n_labels - labels), -1)
    best = np.take_along_axis(labels, key.argmax(1)[:, None], 1)[:, 0]
    return np.where(valid.any(1), best, -1)
