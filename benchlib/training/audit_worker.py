"""The process side of the dtype parity audit (``benchlib.parallel.audit``, which starts it):
``python -m benchlib.training.audit_worker CELLS.json``, under torchrun for the multi-process
strategies. Each cell is one ``loop.run`` as any run trains, with its strategy wrapped in the
audit's ``Probe`` (which writes ``audit_rank{r}.json`` next to the run's record); ``single``
cells draw, per step, rank 0's micro-batch then rank 1's (the global batch of the 2-rank runs).
"""
from __future__ import annotations

import copy
import datetime
import itertools
import json
import os
import sys
from pathlib import Path

from benchlib.core.env import pick_device
from benchlib.parallel import audit, group
from benchlib.training import loop


def global_batch(world: int):
    """``loop.load_task_data`` whose sampler cycles over the ``world`` ranks' samplers: one process
    accumulating ``world`` micro-batches sees what ``world`` ranks see together."""
    real = loop.load_task_data

    def load(run_cfg):
        data = copy.copy(real(run_cfg))  # the loaded data may be cached: its sampler stays as it was
        per_rank = data.sampler

        def sampler(batch_size, device, seed):
            draws = [per_rank(batch_size, device, group.data_seed(seed, r)) for r in range(world)]
            order = itertools.cycle(draws)
            return lambda: next(order)()
        data.sampler = sampler
        return data
    return load


def run_cells(cells: list[dict]) -> int:
    """Run every cell (stopping after an error under torchrun: the group is then out of step);
    0, or 1 where a run ended in error."""
    current: list = [None]
    real_setup, real_load = loop.setup, loop.load_task_data

    def probed_setup(cfg, device, cell=None):
        current[0] = audit.Probe(real_setup(cfg, device), cell["capture_step"], cell["grad_accum"], cell["variant"])
        return current[0]

    status = 0
    with audit.observe_collectives(lambda: current[0]):
        for cell in cells:
            loop.setup = lambda cfg, device, cell=cell: probed_setup(cfg, device, cell)
            if cell["strategy"] == "single":
                loop.load_task_data = global_batch(cell["world"])
            try:
                rec = loop.run(cell["cfg"], out_dir=cell["out"], progress=False)
            finally:
                loop.setup, loop.load_task_data, current[0] = real_setup, real_load, None
            print(f"audit: {cell['policy']} x {cell['strategy']}: {rec['status']}", flush=True)
            if rec["status"] == "error":
                status = 1
                if "WORLD_SIZE" in os.environ:
                    break
    return status


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m benchlib.training.audit_worker CELLS.json (benchlib.parallel.audit starts it)",
              file=sys.stderr)
        return 2
    cells = json.loads(Path(args[0]).read_text())
    multi = int(os.environ.get("WORLD_SIZE", 1)) > 1
    if multi:  # one process group for every cell, as the distributed tests' driver
        import torch
        import torch.distributed as dist
        device = pick_device(cells[0]["cfg"].get("device", "auto"))
        kw = {}
        if device.type == "cuda":
            torch.cuda.set_device(device)
            kw["device_id"] = device
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                timeout=datetime.timedelta(seconds=120), **kw)
    status = run_cells(cells)
    if multi:
        import torch.distributed as dist
        dist.destroy_process_group()
    return status


if __name__ == "__main__":
    rc = main()
    # every record is written: leave without the interpreter's teardown, where a C++ thread still
    # joinable has aborted a rank after its runs (tests/test_distributed.py's driver does the same)
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(rc)
