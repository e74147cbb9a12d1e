"""Runs of a plan in parallel processes (one torch thread each), a JSON line per run.

    WORKERS=9 OUTFILE=out.jsonl PYTHONPATH=<repo> python3 sweep.py "$(cat cpu_plan.json)"

A plan is a list of grids: each key maps to a value or a list of values, every combination is a
run (``benchlib.training.loop.run`` arguments)."""
import json, os, sys, time, itertools, tempfile
from concurrent.futures import ProcessPoolExecutor

def one(spec):
    import torch
    torch.set_num_threads(1)
    from benchlib.training.loop import run
    t = time.time()
    with tempfile.TemporaryDirectory() as d:
        rec = run({**spec, "log_every": 50}, out_dir=d, progress=False)
    m = rec["metrics"]
    keys = ["p_at_1", "p_at_3", "p_at_5", "macro_f1", "micro_f1", "val_loss", "accuracy", "floor", "gap_closed", "loss_floor"]
    out = {k: m.get("quality/" + k) for k in keys}
    out.update(base_p1=m.get("baseline/p_at_1"), base_acc=m.get("baseline/accuracy"), status=rec["status"], wall=round(time.time() - t, 1))
    return {**spec, **out}

if __name__ == "__main__":
    plan = json.loads(sys.argv[1])
    specs = []
    for g in plan:
        grid = {k: (v if isinstance(v, list) else [v]) for k, v in g.items()}
        for combo in itertools.product(*grid.values()):
            specs.append(dict(zip(grid.keys(), combo)))
    workers = int(os.environ.get("WORKERS", "15"))
    outp = os.environ.get("OUTFILE")
    with ProcessPoolExecutor(workers) as ex:
        for r in ex.map(one, specs):
            line = json.dumps(r)
            print(line, flush=True)
            if outp:
                with open(outp, "a") as f:
                    f.write(line + "\n")
