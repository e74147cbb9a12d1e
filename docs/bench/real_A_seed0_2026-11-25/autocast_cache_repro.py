"""Does torch.compile's on-disk cache serve a graph compiled under one autocast dtype to a run under
another? Run twice with one cache folder, in two processes:

    TORCHINDUCTOR_CACHE_DIR=/tmp/cc python autocast_cache_repro.py fp16
    TORCHINDUCTOR_CACHE_DIR=/tmp/cc python autocast_cache_repro.py bf16   # prints float16 where the key lacks the dtype
"""
import sys

import torch
from torch._dynamo.utils import counters

dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[sys.argv[1]]
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to(device)
x = torch.randn(8, 16, device=device)
with torch.autocast(device, dtype=dtype):
    y = torch.compile(model)(x)
y.float().sum().backward()
print(torch.__version__, sys.argv[1], "->", y.dtype, dict(counters["aot_autograd"]))
