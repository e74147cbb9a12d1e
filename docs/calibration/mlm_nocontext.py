"""The best masked-LM loss of a model that uses no context: it predicts a scored position from the
token shown there alone (<mask> -> the stationary distribution pi; a visible token s -> the posterior
over the true token under the 10% unchanged / 10% uniform-random corruption of selected positions).
Computed from the scenario-B chain (base: V = 50304), in expectation over pi; nothing is trained.

    PYTHONPATH=. python3 docs/calibration/mlm_nocontext.py
"""
import numpy as np

from benchlib import synthetic as syn

V = 50304
n = V - syn.FIRST_CONTENT_ID
chain_rng, _, _ = (np.random.default_rng(s) for s in np.random.SeedSequence(syn.DATA_SEED).spawn(3))
chain = syn.MarkovChain.random(n, chain_rng)  # the chain make_lm_corpus builds
pi = chain.stationary()
H = float(-(pi[pi > 0] * np.log(pi[pi > 0])).sum())
# shown token s at a scored, unmasked position: P(x = s | s) = (pi(s) + pi(s)/n) / (pi(s) + 1/n),
# P(x = y | s) = (pi(y)/n) / (pi(s) + 1/n) for y != s
norm = pi + 1.0 / n
unchanged = float((pi * -np.log((pi + pi / n) / norm)).sum())  # x = s, s ~ pi
logpi = np.log(np.where(pi > 0, pi, 1e-300))
random_ = float(-(pi * logpi).sum() + np.log(n) + np.mean(np.log(norm)))  # x ~ pi, s ~ uniform (x = s neglected)
loss = syn.MLM_MASK_P * H + 0.1 * unchanged + 0.1 * random_
print(f"H(pi) = {H:.4f}  unchanged = {unchanged:.4f}  random = {random_:.4f}  no-context optimum = {loss:.4f} nats")
