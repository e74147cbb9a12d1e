"""What a sweep prints: its plan before the runs (``_print_plan``: what is done, what runs and how,
what the host lacks) and its summary after them (``summary``: each config's speed, memory and
quality per scenario; ``compile_cache_line``). Reads the planned items and their records; runs nothing."""
from __future__ import annotations

import os
import shlex
from collections import Counter
from pathlib import Path

from benchlib.analysis.stats import Rules
from benchlib.core.dtypes import REGISTRY
from benchlib.core.env import COMPILE_CACHE_ENV
from benchlib.core.records import TRAINED
from benchlib.core.records import fmt as _fmt
from benchlib.core.runconfig import paths_unchecked
from benchlib.study.studyfile import Study
from dtype_bench.study.runner import Item, _rel, papermill_command, readable


def _n(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def _some(names: list[str], k: int = 8) -> str:
    return ", ".join(names[:k]) + (" ..." if len(names) > k else "")


def summary(items: list[Item]) -> str:
    """Status counts, then per scenario: each config's throughput, memory and quality
    (mean over seeds, +- std where there are several)."""
    import pandas as pd

    from benchlib.analysis.tables import not_judged
    from benchlib.core.records import records_frame
    read = [(rec, i.spec.arm) for i in items if (rec := readable(i)) is not None]
    recs, arms = [r for r, _ in read], [a for _, a in read]
    counts = pd.Series([r["status"] for r in recs]).value_counts()
    lines = ["status: " + ", ".join(f"{k} {v}" for k, v in counts.items())
             + (f", no record {len(items) - len(recs)}" if len(recs) < len(items) else "")]
    if not recs:
        return "\n".join(lines)
    df = records_frame(recs)
    judged = not not_judged(df)
    if not judged:
        lines.append("quality not judged (run.judge_quality false: a speed study): 'stalled' and 'degraded' say how "
                     "far the short runs got and keep their speed and memory; diverged, oom and error fail; "
                     "no quality column")
    if df["shared_gpu"].any():
        lines.append(f"speed left blank for {_n(int(df['shared_gpu'].sum()), 'run')} that shared a GPU (--runs_per_gpu)")
    for col in ("throughput", "memory", "quality"):
        if col not in df:
            df[col] = float("nan")
    df["arm"] = arms
    by = "arm" if df["arm"].notna().any() else "config"  # a study with arms compares arms
    for sid, g in df.groupby("scenario", sort=True):
        ok = g[g["status"].isin(TRAINED)]
        qname = ok["quality_name"].dropna().iloc[0] if "quality_name" in ok and ok["quality_name"].notna().any() else "quality"
        unit = ok["throughput_unit"].dropna().iloc[0] if "throughput_unit" in ok and ok["throughput_unit"].notna().any() else ""
        rows = []
        for key, c in g.groupby(by, sort=False):
            fin = c[c["status"].isin(TRAINED)]
            rows.append({by: key, "status": " ".join(f"{k}x{v}" if v > 1 else k for k, v in c["status"].value_counts().items()),
                         f"throughput {unit}": _mean_std(fin["throughput"]), "memory GiB": _mean_std(fin["memory"]),
                         **({qname: _mean_std(fin["quality"])} if judged else {})})
        lines += ["", f"scenario {sid}:", pd.DataFrame(rows).set_index(by).to_string()]
    return "\n".join(lines)


def _mean_std(s) -> str:
    s = s.dropna().astype(float)
    if s.empty:
        return "-"
    return _fmt(s.mean()) + (f" ±{_fmt(s.std())}" if len(s) > 1 else "")


def compile_cache_line(ran: list[Item]) -> str:
    """How the runs just run compiled: the first step's median of those whose graphs all came
    from torch.compile's cache against those that compiled them (``overhead.first_step_by_cache``;
    "" when none compiled)."""
    from benchlib.analysis.overhead import first_step_by_cache, parts_table
    line = first_step_by_cache(parts_table([r for i in ran if (r := readable(i)) is not None])[0])
    return line and f"{line} Cache folder: {os.environ.get(COMPILE_CACHE_ENV) or 'torch.compile default'}."


def notebook_stack_missing(pending: list[Item]) -> str:
    """Why the runs to execute that run in a notebook (every pretrain phase, ``notebook_seeds``)
    cannot start here, in one line, before any of them does; '' where papermill and ipykernel import
    or no run needs them."""
    import importlib.util
    need = [i.run_id for i in pending if i.in_notebook]
    gone = [m for m in ("papermill", "ipykernel") if need and importlib.util.find_spec(m) is None]
    return (f"{_n(len(need), 'run')} to execute in a notebook ({_some(need, 2)}), and {' and '.join(gone)} "
            f"{'does' if len(gone) == 1 else 'do'} not import here: install the notebook stack "
            f"(pip install 'dtype-bench[study]', or its wheels where the host has no network)") if gone else ""


def html_stack_missing() -> str:
    """Why the study's HTML export cannot run here (nbformat or nbconvert do not import), in one line;
    '' where both do. The runs before it have already written their records, so a host without the
    notebook stack (a GPU image, a ``--no_analysis`` sweep) ends with this line, not a traceback."""
    import importlib.util
    gone = [m for m in ("nbformat", "nbconvert") if importlib.util.find_spec(m) is None]
    return (f"no HTML export: {' and '.join(gone)} {'does' if len(gone) == 1 else 'do'} not import here "
            f"(pip install 'dtype-bench[study]', or its wheels where the host has no network)") if gone else ""


def control_note(study: Study) -> str:
    """One line where the study judges quality on a scenario and runs no positive control there (a
    ``control`` config: one known defect, e.g. Adam eps 1e-4), else '': a scenario whose candidates
    its seeds cannot tell apart then gives no verdict at all (``gates._sensitivity``), which is
    better known before the GPU time than after it."""
    controls = [c.name for c in REGISTRY.values() if c.role == "control"]
    bare = [s for s in study.scenarios if study.run_params(s, "", 0).get("judge_quality", True)
            and not any(REGISTRY[c].role == "control" for c in study.configs if c in REGISTRY)
            and sum(REGISTRY[c].role == "candidate" for c in study.configs if c in REGISTRY) >= 2]
    if not bare:
        return ""
    return (f"no positive control on {', '.join(bare)} (a control config: {', '.join(controls)}): where the seeds "
            f"cannot tell the candidates apart (rank reliability < {Rules.min_rank_reliability:g}), no verdict comes "
            f"out of the scenario; a control that comes out degraded shows the scenario detects a defect")


def _print_plan(study: Study, path: Path, every: list[Item], items: list[Item], todo: list[Item],
                study_dir: Path, commands: bool, cells: bool, per_seed: bool = False) -> None:
    shape = f"{_n(len(study.scenarios), 'scenario')} x {_n(len(study.configs), 'config')} x {_n(len(study.seeds), 'seed')}"
    if study.arms:
        shape = f"{_n(len(study.arms), 'arm')} x {_n(len(study.scenarios), 'scenario')} x {_n(len(study.seeds), 'seed')}"
    selected = f", {len(items)} selected" if len(items) < len(every) else ""
    runs = [i for i in every if i.stage == "run"]
    pre = [i for i in items if i.stage == "pretrain"]
    print(f"study {study.name} ({_rel(path)}): {len(runs)} runs ({shape}{selected}) -> {_rel(study_dir)}")
    if pre:
        root = pre[0].out_dir.parent
        n = Counter(i.arch for i in every if i.stage == "pretrain")  # phases per arch
        print(f"  pretrain stage first{f' in {max(n.values())} phases' if max(n.values()) > 1 else ''}, its checkpoints "
              f"under {_rel(root)}: " + ", ".join(f"{p.run_id} ({f'phase {p.phase} of {n[p.arch]}, ' if n[p.arch] > 1 else ''}"
                                                  f"{p.spec.run_id}, {p.spec.cfg.steps} steps): {p.state}" for p in pre))
    why = ", ".join(f"{s} {sum(i.state == s for i in todo)}" for s in dict.fromkeys(i.state for i in todo))
    print(f"  done {len(items) - len(todo)}, to run {len(todo)}" + (f" ({why})" if todo else ""))
    if todo and (note := control_note(study)):
        print(f"  {note}")
    for i in items if commands else []:
        detail = i.detail or (f"{'starts from' if i.stage == 'pretrain' else 'loads'} {i.needs.run_id}'s checkpoint"
                              if i.needs is not None else "")
        print(f"  {i.state:13s} {i.run_id}" + (f"  ({detail})" if i.todo and detail else ""))
        if i.todo and (i.in_notebook or not cells):
            with paths_unchecked():  # a corpus missing here is said once, below the plan
                print(f"      {shlex.join(papermill_command(i))}")
        elif i.todo:  # runner.cells: no notebook, in one process with the cell's other seeds (or some of them)
            print("      a cell run without a notebook (notebook_seeds), in a `python -m dtype_bench.host.cellrun` "
                  + ("process of its own, on its seed's GPU (--seed_per_gpu)" if per_seed else
                     f"process with other seeds of {i.spec.cfg.scenario}/{i.spec.cfg.dtype.name} still to run "
                     f"(a cell is split over slots it would leave idle)"))
