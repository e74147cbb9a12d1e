"""Classification evaluation cut to each batch's longest document against the
whole length, same documents and batches: seconds and quality (E: GPT-2 base, F: MiniLM).

Run from the repository root on a GPU host with the data of docs/data/README.md built (E: the
train28k debsection folder and the study tokenizer; F: the MiniLM checkpoint as well):
    PYTHONPATH=$PWD python3 docs/bench/eval_padding_2026-11-26/bench_eval_padding.py eval.json
eval.json beside it is what one NVIDIA H100 80GB HBM3 gave (torch 2.11.0+cu130, the code of 404bf21)."""
import json
import sys
import time

import torch

from benchlib.core.dtypes import get_config
from benchlib.core.runconfig import RunConfig, resolved
from benchlib.data.load import load_task_data
from benchlib.training.loop import evaluate
from benchlib.training.models import ModelSpec, autocast_context, build_model

ARMS = {"E": dict(scenario="E", data="data/real/train28k/debsection", tokenizer="data/real/tokenizer-bpe-50304"),
        "F": dict(scenario="F", data="data/real/train28k/debsection", model_name_or_path="data/real/minilm-l6-fp16")}
out = {}
for arm, kw in ARMS.items():
    cfg = resolved(RunConfig.from_dict({**kw, "size": "base", "seq_len": 256, "device": "cuda", "cache_dir": "/tmp/ev"}))
    data = load_task_data(cfg)
    cut = data.val_batches(32, None, "cuda")
    whole = [{k: v[c].cuda() for k, v in data.val_pool.items()} for c in cut.pool_index.split(32)]
    for config in ("fp32_baseline", "amp_bf16", "bf16_pure"):
        dt = get_config(config)
        torch.manual_seed(0)
        model = build_model(ModelSpec.for_run(cfg, data), dt).cuda()
        amp = autocast_context("cuda", dt.autocast_dtype)
        row = {}
        for name, val in (("whole", whole), ("cut", cut)):
            evaluate(model, val[:4], data.task, amp)  # warm-up
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(3):
                q, _ = evaluate(model, val, data.task, amp)
            torch.cuda.synchronize()
            row[name] = {"s": round((time.perf_counter() - t) / 3, 3), **{k: q[k] for k in sorted(q)}}
        row["tokens_whole"] = sum(b["input_ids"].numel() for b in whole)
        row["tokens_cut"] = sum(b["input_ids"].numel() for b in cut)
        out[f"{arm}/{config}"] = row
        print(arm, config, json.dumps(row), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
