"""Which of a study's runs a sweep picks (``--only``, ``--scenario``, ``--config``, ``--seed``) and
in which order they run; and the committed runs a careless sweep must not replace. Pure functions of
the planned items (``runner.plan``): nothing here runs or writes."""
from __future__ import annotations

import fnmatch
from collections import Counter

from benchlib.core.dtypes import ALIASES
from benchlib.core.runconfig import ConfigError
from dtype_bench.study.runner import Item
from dtype_bench.study.sweep_report import _n


def select(items: list[Item], only: list[str], scenarios: list[str], configs: list[str],
           seeds: list[int], order: str = "seeds") -> list[Item]:
    """The runs the filters pick, after the pretrain items they need (``pulled``); --only picks
    pretrain items too (pretrain/<arch>: every phase, pretrain/<arch>/phase<k>: one). The runs
    keep the study's ``order``, their seeds in the order --seed gives them (``by_seed_order``),
    then those of each --only pattern before the next's (``by_pattern_order``)."""
    pre = [i for i in items if i.stage == "pretrain"]
    items = [i for i in items if i.stage != "pretrain"]
    filtered = bool(only or scenarios or configs or seeds)
    picked_pre = [p for p in pre if not filtered or any(fnmatch.fnmatchcase(p.run_id, g)
                                                        or fnmatch.fnmatchcase(f"pretrain/{p.arch}", g) for g in only)]
    filters = {"--scenario": ([s.upper() for s in scenarios], lambda c: c.scenario),
               "--config": ([ALIASES.get(c, c) for c in configs], lambda c: c.dtype.name),
               "--seed": (seeds, lambda c: c.seed)}
    for flag, (wanted, of) in filters.items():
        have = {of(i.spec.cfg) for i in items}
        if bad := [w for w in wanted if w not in have]:
            raise ConfigError(f"{flag} {bad[0]!r} is not in this study. Valid: {', '.join(map(str, sorted(have)))}")
    out = [i for i in items if (not only or any(fnmatch.fnmatchcase(i.run_id, p) for p in only))
           and all(not wanted or of(i.spec.cfg) in wanted for wanted, of in filters.values())]
    if not out and not picked_pre:
        raise ConfigError(f"no run of the study matches --only {' '.join(only)} (run ids look like A/amp_bf16/seed0)")
    needed = []  # what the picked items load, and what that loads in turn (earlier phases)
    for i in out + picked_pre:
        n = i.needs
        while n is not None and not any(n is m for m in needed):
            needed.append(n)
            n = n.needs
    for p in pre:
        p.pulled = p not in picked_pre and any(p is n for n in needed)
    return [p for p in pre if p in picked_pre or p.pulled] + by_pattern_order(by_seed_order(out, seeds, order), only)


def by_pattern_order(items: list[Item], only: list[str]) -> list[Item]:
    """``items`` with the runs of each --only pattern before those of the next (``--only
    'B/x/seed2' --only 'B/y/seed0'``: x first, the one a time budget must not cut); a run
    counts for the first pattern it matches, and the order within a pattern stays."""
    if len(only) < 2:
        return items
    rank = lambda i: next(j for j, g in enumerate(only) if fnmatch.fnmatchcase(i.run_id, g))  # noqa: E731
    return sorted(items, key=rank)


def by_seed_order(items: list[Item], seeds: list[int], order: str = "seeds") -> list[Item]:
    """``items`` with their seeds in the order of ``seeds`` (``--seed 2,0,1``: a config's third seed
    before the rest, under a time budget the first to get in); the rest of the order is the
    study's (``order: seeds``: every run of one seed before the next; ``cells``: a cell's seeds
    back to back, its cells in place). Unchanged where ``seeds`` is empty."""
    if not seeds:
        return items
    rank = {k: j for j, k in enumerate(seeds)}
    if order != "cells":
        return sorted(items, key=lambda i: rank[i.spec.cfg.seed])  # stable: configs and scenarios keep their places
    cell = lambda i: (i.spec.arm, i.spec.cfg.scenario, i.spec.cfg.dtype.name)  # noqa: E731
    first: dict = {}
    for j, i in enumerate(items):
        first.setdefault(cell(i), j)
    return sorted(items, key=lambda i: (first[cell(i)], rank[i.spec.cfg.seed]))


def committed_reruns(pending: list, study: str) -> str:
    """Why a sweep must not run ``pending`` as it is: the stale runs among them whose records are
    the compacted study's (committed results a careless sweep would replace), or ''."""
    stale = [i for i in pending if i.state == "stale" and i.stored is not None]
    if not stale:
        return ""
    why = Counter(i.detail for i in stale)
    return (f"{_n(len(stale), 'finished run')} of the compacted study {study} would run again and replace their "
            f"records ({'; '.join(f'{n} x {d}' for d, n in why.most_common(3))}"
            f"{'; ...' if len(why) > 3 else ''}; first {stale[0].run_id}): select the runs to run (--scenario, "
            f"--config, --seed, --only), or pass --rerun_stale to replace them")
