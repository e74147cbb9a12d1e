"""Embedded synthetic corpora whose optimal loss is known.

Token ids follow one convention for every synthetic corpus (and for the byte-level BPE
trained on local files): 0 = ``<pad>``, 1 = ``<s>`` (BOS / CLS), 2 = ``</s>`` (EOS),
3 = ``<mask>``; content tokens are ids 4..V-1.

* **Language modelling (scenarios A, B)**: a first-order Markov chain over the content
  tokens with a sparse random transition matrix (8-32 successors per token, Dirichlet(0.5)
  probabilities, successors drawn from a half-Zipf, half-uniform mixture so a few "hub"
  tokens are frequent, as in text). Every chain starts in the stationary distribution, so
  the corpus is stationary and the Bayes-optimal next-token loss of every position that has
  at least one token of context is exactly the entropy rate ``sum_i pi_i H(P_i)``.
  The masked-LM optimum is computed by forward-backward (``mlm_bayes_nll``).
* **Classification (scenarios C-F)**: EUR-Lex-like documents; see ``make_label_corpus``.

Everything here is numpy (and torch for the forward-backward), vectorised across chains or
documents; a fixed data seed makes every run of a study see the same corpus.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

PAD_ID, BOS_ID, EOS_ID, MASK_ID = 0, 1, 2, 3
FIRST_CONTENT_ID = 4
DATA_SEED = 20_240_917
"""Seed of every synthetic corpus: fixed, independent of the run seed."""

# MLM corruption (BERT/RoBERTa): select 15% of the non-special positions; of those 80% ->
# <mask>, 10% -> a uniformly random content token, 10% unchanged.
MLM_SELECT_P = 0.15
MLM_MASK_P, MLM_RANDOM_P = 0.8, 0.1


# ---------------------------------------------------------------------------------------
# Markov chain
# ---------------------------------------------------------------------------------------
@dataclass
class MarkovChain:
    """A sparse first-order Markov chain over ``n`` states.

    ``succ[i, j]`` is the j-th successor slot of state i and ``prob[i, j]`` its probability.
    Rows sum to 1; a successor appears at most once with non-zero probability per row, and
    unused slots hold probability 0 and (so rounding can never step off the support) a copy
    of a real successor of that row.
    """

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

    def row_entropy(self) -> np.ndarray:
        """H(P_i) in nats for every state."""
        p = self.prob
        return -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(1)

    def entropy_rate(self, pi: Optional[np.ndarray] = None) -> float:
        """sum_i pi_i H(P_i) (nats): the Bayes next-token loss of a stationary chain."""
        pi = self.stationary() if pi is None else pi
        return float(pi @ self.row_entropy())

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


# ---------------------------------------------------------------------------------------
# LM corpus
# ---------------------------------------------------------------------------------------
@dataclass
class LMCorpus:
    """Markov-chain token corpus. ``train`` rows are independent chains (a window never
    crosses a row, so every transition inside a window is a true chain transition);
    ``val`` rows are one validation window each. Both hold token ids (state + 4)."""

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
    h_pi = float(-(pi[pi > 0] * np.log(pi[pi > 0])).sum())
    return LMCorpus(chain, pi, chain.entropy_rate(pi), h_pi, train, val)


# ---------------------------------------------------------------------------------------
# Masked-LM Bayes loss: forward-backward over the chain
# ---------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------
# EUR-Lex-like multi-label corpus
# ---------------------------------------------------------------------------------------
@dataclass
class LabelCorpus:
    """Documents as content tokens (PAD-padded on the right) with label sets.

    ``*_labels`` is [N, K] int64 of label ids, ascending, padded with -1."""

    train_tokens: np.ndarray
    train_len: np.ndarray
    train_labels: np.ndarray
    val_tokens: np.ndarray
    val_len: np.ndarray
    val_labels: np.ndarray
    signatures: np.ndarray  # [L, SIG_TOKENS] token ids


LABELS_PER_DOC_POISSON = 4.0
"""Labels per document = 1 + Poisson(4), capped at ``MAX_LABELS_PER_DOC`` (mean ~5, like EUR-Lex)."""
MAX_LABELS_PER_DOC = 16
LABEL_ZIPF_SHIFT = 5
"""Label frequencies ~ 1/(rank + 5.5): the Zipf offset keeps the head from covering most
documents when there are few labels (tiny: 64)."""
SIG_TOKENS = 2
"""Signature tokens per label (see ``_signatures``). Two rather than more: a tiny RoBERTa
learns the (nearly disjoint at tiny, disjoint above) associations within a few hundred steps
(600 steps: micro-F1 0.42 vs 0.26 for the best input-blind predictor; 4 shared tokens: 0.27)."""
SIG_PER_LABEL = 3.0
"""Expected signature-token occurrences per label of a document (capped at half the
document): a label is then invisible in a document with p ~ exp(-3) ~ 5%, and the task is
equally hard at every seq_len (long documents are mostly background, like real ones)."""


def make_label_corpus(vocab_size: int, num_labels: int, max_len: int, n_train: int, n_val: int,
                      seed: int = DATA_SEED, chunk: int = 4096) -> LabelCorpus:
    """EUR-Lex-like documents with ``max_len`` content tokens at most.

    Each label has ``SIG_TOKENS`` signature tokens. A document draws 1 + Poisson(4) distinct
    labels with Zipf-like frequencies (``zipf_ranks`` over a random ranking of the label ids,
    sampled without replacement), a length uniform in [max_len/4, max_len], and
    each token is, with p = min(0.5, ``SIG_PER_LABEL`` * n_labels / length), a signature
    token of one of its labels (label and signature token uniform), else a background token
    (``zipf_ranks`` over a random ranking of the content ids). Labels are therefore learnable
    from the bag of tokens, rare labels from few examples.
    """
    n_content = vocab_size - FIRST_CONTENT_ID
    if n_content < 2 or num_labels < 1 or max_len < 1:
        raise ValueError("synthetic classification needs vocab_size > 5, num_labels >= 1, seq_len >= 3")
    rng_setup, rng_train, rng_val = (np.random.default_rng(s) for s in np.random.SeedSequence(seed + 1).spawn(3))
    label_of_rank = rng_setup.permutation(num_labels)  # so frequency does not follow id order
    token_of_rank = rng_setup.permutation(n_content) + FIRST_CONTENT_ID
    signatures = _signatures(rng_setup, token_of_rank[n_content // 2:], num_labels)
    spec = (signatures, label_of_rank, token_of_rank, max_len, chunk)
    train = _make_docs(rng_train, n_train, *spec)
    val = _make_docs(rng_val, n_val, *spec)
    return LabelCorpus(*train, *val, signatures)


def _signatures(rng, pool: np.ndarray, num_labels: int) -> np.ndarray:
    """[L, SIG_TOKENS] signature tokens from ``pool`` (the rarer half of the background
    ranking: keywords are rarer than function words). Tokens are dealt from successive
    shuffles of the pool, so labels share none while the pool lasts and each token serves
    at most ceil(L * SIG_TOKENS / len(pool)) labels after that (tiny: 64 x 2 from 126)."""
    need = num_labels * SIG_TOKENS
    deck = np.concatenate([rng.permutation(pool) for _ in range(-(-need // len(pool)))])
    return deck[:need].reshape(num_labels, SIG_TOKENS)


def _make_docs(rng, n_docs, signatures, label_of_rank, token_of_rank, max_len, chunk):
    L = len(label_of_rank)
    kcap = min(MAX_LABELS_PER_DOC, L)
    tokens = np.zeros((n_docs, max_len), dtype=np.int32)
    lengths = np.empty(n_docs, dtype=np.int64)
    labels = np.full((n_docs, kcap), -1, dtype=np.int64)
    for s in range(0, n_docs, chunk):
        m = min(chunk, n_docs - s)
        k = np.minimum(1 + rng.poisson(LABELS_PER_DOC_POISSON, size=m), kcap)
        lab = _distinct_draws(rng, label_of_rank, k, kcap)
        k = (lab < L).sum(1)  # labels actually drawn
        labels[s:s + m] = np.where(lab == L, -1, lab)

        length = rng.integers(max(1, max_len // 4), max_len + 1, size=m)
        which_label = lab[np.arange(m)[:, None], (rng.random((m, max_len)) * k[:, None]).astype(np.int64)]
        sig = signatures[which_label, rng.integers(0, SIG_TOKENS, size=(m, max_len))]
        bg = token_of_rank[zipf_ranks(rng, len(token_of_rank), (m, max_len))]
        p_sig = np.minimum(0.5, SIG_PER_LABEL * k / length)[:, None]
        doc = np.where(rng.random((m, max_len)) < p_sig, sig, bg)
        doc[np.arange(max_len)[None, :] >= length[:, None]] = PAD_ID
        tokens[s:s + m] = doc
        lengths[s:s + m] = length
    return tokens, lengths, labels


LABEL_DRAWS = 64
"""Candidate draws per document for sampling its labels without replacement."""


def zipf_ranks(rng, n: int, shape, shift: int = 1) -> np.ndarray:
    """Zipf-like ranks in [0, n): floor(log-uniform on [shift, n + shift]) - shift, i.e.
    P(r) = log((r+shift+1)/(r+shift)) / log((n+shift)/shift) ~ 1/(r + shift + 0.5): a
    discretised Zipf(1) (Zipf-Mandelbrot with offset ``shift``), one exp per draw."""
    lo, hi = math.log(shift), math.log(n + shift)
    r = np.exp(lo + rng.random(shape) * (hi - lo)).astype(np.int64) - int(shift)
    return r.clip(0, n - 1)


def _distinct_draws(rng, of_rank: np.ndarray, k: np.ndarray, kcap: int) -> np.ndarray:
    """Per row, the first ``k`` distinct values of a sequence of i.i.d. draws: successive
    sampling without replacement, proportional to the weights (the Plackett-Luce / Gumbel
    top-k distribution) at the cost of ``LABEL_DRAWS`` draws instead of one key per label.
    Ids are ``of_rank[r]`` for Zipf-like ranks r. Returns ascending ids padded with ``L``;
    a row whose draws hold fewer than k distinct values (rare) keeps fewer labels."""
    m, L = len(k), len(of_rank)
    draws = of_rank[zipf_ranks(rng, L, (m, LABEL_DRAWS), LABEL_ZIPF_SHIFT)]
    order = np.argsort(draws, axis=1, kind="stable")
    ordered = np.take_along_axis(draws, order, 1)
    first_sorted = np.ones_like(ordered, dtype=bool)
    first_sorted[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first = np.empty_like(first_sorted)
    np.put_along_axis(first, order, first_sorted, 1)  # first occurrence, in draw order
    keep = first & (np.cumsum(first, 1) <= k[:, None])
    lab = np.where(keep, draws, L)
    lab.sort(axis=1)
    return lab[:, :kcap]


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
