"""Shared test settings."""
import os

import torch

# Tiny models on a small CI box: one intra-op thread. With several threads per op, each
# tiny kernel pays an OpenMP barrier, and under load a barrier costs a scheduler slice.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")  # for subprocesses (papermill kernels, torchrun ranks)
