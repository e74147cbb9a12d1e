"""Study files: runs come seed-major (a study cut short keeps whole seeds), and
``config_seeds`` lets a config run a subset of the seeds, with one-line errors for bad input."""
import threading

import pytest
from conftest import REPO

from benchlib.core.runconfig import ConfigError
from dtype_bench.host import slots
from dtype_bench.study import sweep
from benchlib.study.studyfile import load_study


def _load(tmp_path, text):
    path = tmp_path / "mini.yaml"
    path.write_text(text)
    return load_study(path)


BASE = "scenarios: [A, D]\nconfigs: [fp32_baseline, amp_bf16, bf16_no_compile]\nseeds: [0, 1, 2]\nsize: tiny\ndevice: cpu\n"


def test_runs_are_seed_major(tmp_path):
    runs = _load(tmp_path, BASE).runs()
    seeds = [r.cfg.seed for r in runs]
    assert seeds == sorted(seeds)  # all of seed 0, then 1, then 2
    first = [(r.cfg.scenario, r.cfg.config) for r in runs if r.cfg.seed == 0]
    assert first == [(s, c) for s in "AD" for c in ("fp32_baseline", "amp_bf16", "bf16_no_compile")]


def test_order_cells_runs_a_cells_seeds_back_to_back(tmp_path):
    """A speed study's later seeds compile warm on the host of the first (``order: cells``)."""
    runs = _load(tmp_path, BASE + "order: cells\nconfig_seeds: {bf16_no_compile: [0]}\n").runs()
    assert [r.cfg.run_id for r in runs[:4]] == ["A/fp32_baseline/seed0", "A/fp32_baseline/seed1",
                                                  "A/fp32_baseline/seed2", "A/amp_bf16/seed0"]
    assert [r.cfg.run_id for r in runs[6:8]] == ["A/bf16_no_compile/seed0", "D/fp32_baseline/seed0"]
    assert sorted(r.cfg.run_id for r in runs) == sorted(r.cfg.run_id for r in _load(
        tmp_path, BASE + "config_seeds: {bf16_no_compile: [0]}\n").runs())  # the same runs, reordered
    with pytest.raises(ConfigError, match="^.*order: expected one of seeds, cells, got 'cell'$"):
        _load(tmp_path, BASE + "order: cell\n")


def test_config_seeds_runs_a_config_at_fewer_seeds(tmp_path):
    study = _load(tmp_path, BASE + "config_seeds: {bf16_no_compile: [0]}\n")
    runs = study.runs()
    nc = [(r.cfg.scenario, r.cfg.seed) for r in runs if r.cfg.config == "bf16_no_compile"]
    assert nc == [("A", 0), ("D", 0)]
    assert sum(r.cfg.config == "amp_bf16" for r in runs) == 6 and len(runs) == 2 * 2 * 3 + 2


@pytest.mark.parametrize("text, words", [
    ("config_seeds: {bf16_nocompile: [0]}\n", ["config_seeds", "'bf16_nocompile'", "bf16_no_compile"]),
    ("config_seeds: {amp_bf16: [5]}\n", ["config_seeds", "amp_bf16", "seed 5"]),
    ("config_seeds: [amp_bf16]\n", ["config_seeds", "mapping"]),
])
def test_bad_config_seeds_fail_in_one_line_naming_the_key(tmp_path, text, words):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, BASE + text)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_reference_study_files_parse():
    for name in ("reference", "reference_long", "reference_speed"):
        study = load_study(REPO / "params" / f"{name}.yaml")
        assert study.runs(), name


# ---- the order one sweep runs them in (sweep.Dependencies) -----------------------------------
PRETRAINED = ("scenarios: [A, C]\nconfigs: [fp32_baseline, amp_bf16]\nseeds: [0]\nsize: tiny\ndevice: cpu\nsteps: 5\n"
              "pretrain:\n  gpt2: {config: amp_bf16, steps: 5}\noverrides:\n  cls: {model_name_or_path: pretrained}\n")


def _ordered(tmp_path):
    path = tmp_path / "mini.yaml"
    path.write_text(PRETRAINED)
    return sweep.plan(load_study(path), tmp_path / "executed")


def test_runs_that_load_no_checkpoint_use_the_slots_the_pretrain_stage_leaves_free(tmp_path):
    items = _ordered(tmp_path)
    order = sweep.Dependencies(items, admit=lambda unit: True)
    assert [u[0].run_id for u in order.units] == ["pretrain/gpt2", "A/fp32_baseline/seed0", "A/amp_bf16/seed0",
                                                  "C/fp32_baseline/seed0", "C/amp_bf16/seed0"]
    pretrain_done, a_started, seen, lock = threading.Event(), threading.Event(), {}, threading.Lock()

    def fn(unit, slot):  # what each run saw of the pretrain run when it started
        run_id = unit[0].run_id
        with lock:
            seen[run_id] = pretrain_done.is_set()
        if run_id == "A/fp32_baseline/seed0":
            a_started.set()
        if unit[0].stage == "pretrain":  # hold the pretrain slot until A starts (or clearly never will)
            a_started.wait(30)
            pretrain_done.set()
        return [(unit[0], {})]

    slots.run_all(order.units, slots.slots_for(3, ["0", "1", "2"]), fn, on_done=order.done(lambda u, r: None),
                  admit=order.admit, stop=order.stop)
    assert seen["A/fp32_baseline/seed0"] is False  # beside the pretrain run, not after it
    assert seen["C/fp32_baseline/seed0"] is True and seen["C/amp_bf16/seed0"] is True  # they load it


def test_a_pretrain_left_for_later_or_interrupted_leaves_no_run_waiting_for_ever(tmp_path):
    items = _ordered(tmp_path)
    ran = []
    order = sweep.Dependencies(items, admit=lambda unit: unit[0].stage != "pretrain")  # the budget refuses it
    slots.run_all(order.units, slots.slots_for(2, ["0", "1"]), lambda u, s: ran.append(u[0].run_id) or [],
                  on_done=order.done(lambda u, r: None), admit=order.admit, stop=order.stop)
    assert "pretrain/gpt2" not in ran and "C/amp_bf16/seed0" in ran  # the real budget defers these too

    def interrupted(unit, slot):
        if unit[0].stage == "pretrain":
            raise KeyboardInterrupt
        threading.Event().wait(0.1)
        return []

    order = sweep.Dependencies(items, admit=lambda unit: True)
    with pytest.raises(KeyboardInterrupt):
        slots.run_all(order.units, slots.slots_for(2, ["0", "1"]), interrupted, on_done=order.done(lambda u, r: None),
                      admit=order.admit, stop=order.stop)
    assert order.stop.is_set()


def test_cells_are_split_over_slots_that_would_stay_idle(tmp_path):
    """Two configs at ten seeds each on twenty slots: one process a cell would run two at a time."""
    from dtype_bench.study.runner import cells
    path = tmp_path / "cells.yaml"
    path.write_text("scenarios: [A]\nconfigs: [fp32_baseline, amp_bf16]\nseeds: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n"
                    "size: tiny\ndevice: cpu\nnotebook_seeds: []\n")
    items = sweep.plan(load_study(path), tmp_path / "executed")
    assert [len(u) for u in cells(items)] == [10, 10]  # one slot: a process a cell, as before
    spread = cells(items, slots=20)
    assert len(spread) == 20 and all(len(u) == 1 for u in spread)
    four = cells(items, slots=4)
    assert sorted(len(u) for u in four) == [5, 5, 5, 5]
    for unit in four:  # each unit one cell, its seeds in order
        assert len({i.spec.cfg.dtype.name for i in unit}) == 1
        assert [i.spec.cfg.seed for i in unit] == sorted(i.spec.cfg.seed for i in unit)
    assert sorted(i.run_id for u in four for i in u) == sorted(i.run_id for i in items)
    assert len(sweep.Dependencies(items, admit=lambda unit: True, slots=3).units) == 3


def test_a_pretrain_the_real_budget_defers_leaves_no_run_waiting_and_says_why(tmp_path):
    """The budget drops what it defers from the unit it is asked about; the runs that load a deferred
    pretrain went on waiting for it (a GPU call hung to its limit). Now they are deferred with it, and
    the line saying what is left names the run no call of this budget would start."""
    from dtype_bench.host.budget import Budget
    items = _ordered(tmp_path)
    budget = Budget(30.0)  # nothing has finished: every run is estimated at DEFAULT_RUN_S (120 s)
    order = sweep.Dependencies(items, admit=budget.admit)
    ran = []
    worker = threading.Thread(target=slots.run_all, daemon=True, kwargs=dict(
        items=order.units, slots=slots.slots_for(2, ["0", "1"]), fn=lambda u, s: ran.append(u) or [],
        on_done=order.done(lambda u, r: None), admit=order.admit, stop=order.stop))
    worker.start()
    worker.join(30)
    alive = worker.is_alive()
    order.stop.set()
    assert not alive and ran == []
    assert {i.run_id for i in budget.deferred} == {i.run_id for i in items}
    line = budget.left_line(len(items))
    assert "pretrain/gpt2" in line and "more than the whole budget (30 s)" in line


def test_seed_flag_order_is_the_run_order_and_the_study_order_stays(tmp_path, capsys):
    """--seed 2,0 puts every selected config's seed 2 first (a third seed's verdict before more
    breadth, under a time budget); ``order: cells`` keeps a cell's seeds together, reordered."""
    study = _load(tmp_path, BASE)
    every = sweep.plan(study, tmp_path / "executed")
    picked = [i.run_id for i in sweep.select(every, [], ["A"], ["fp32_baseline", "amp_bf16"], [2, 0])]
    assert picked == ["A/fp32_baseline/seed2", "A/amp_bf16/seed2", "A/fp32_baseline/seed0", "A/amp_bf16/seed0"]
    natural = [i.run_id for i in sweep.select(every, [], ["A"], ["fp32_baseline", "amp_bf16"], [])]
    assert natural[:2] == ["A/fp32_baseline/seed0", "A/amp_bf16/seed0"]  # no --seed: the study's order
    cells = _load(tmp_path, BASE + "order: cells\n")
    picked = [i.run_id for i in sweep.select(sweep.plan(cells, tmp_path / "executed"), [], ["A"],
                                             ["fp32_baseline", "amp_bf16"], [2, 0], cells.order)]
    assert picked == ["A/fp32_baseline/seed2", "A/fp32_baseline/seed0", "A/amp_bf16/seed2", "A/amp_bf16/seed0"]
    # the sweep's own plan (--dry_run lists the runs in the order they start), order: seeds
    _load(tmp_path, BASE)
    assert sweep.main([str(tmp_path / "mini.yaml"), "--dry_run", "--out", str(tmp_path / "executed"),
                       "--scenario", "D", "--seed", "1,0"]) == 0
    listed = [w for w in capsys.readouterr().out.split() if w.startswith("D/")]
    assert [r.rsplit("/", 1)[1] for r in listed[:3]] == ["seed1"] * 3 and listed[3].endswith("seed0")


def test_only_patterns_run_in_the_order_given(tmp_path, capsys):
    """--only 'A/amp_bf16/seed2' --only 'A/fp32_baseline/seed0': the run named first starts first, though
    the study's order (seed-major, fp32_baseline before amp_bf16) puts it last; one pattern keeps that order."""
    study = _load(tmp_path, BASE)
    every = sweep.plan(study, tmp_path / "executed")
    picked = [i.run_id for i in sweep.select(every, ["A/amp_bf16/seed2", "A/fp32_baseline/seed0"], [], [], [])]
    assert picked == ["A/amp_bf16/seed2", "A/fp32_baseline/seed0"]
    # a run counts for the first pattern it matches; within a pattern the study's order stays
    picked = [i.run_id for i in sweep.select(every, ["D/*/seed1", "*/seed1", "A/fp32_baseline/*"], [], [], [])]
    assert picked == ["D/fp32_baseline/seed1", "D/amp_bf16/seed1", "D/bf16_no_compile/seed1",
                      "A/fp32_baseline/seed1", "A/amp_bf16/seed1", "A/bf16_no_compile/seed1",
                      "A/fp32_baseline/seed0", "A/fp32_baseline/seed2"]
    assert [i.run_id for i in sweep.select(every, ["A/*"], [], [], [])][:2] == ["A/fp32_baseline/seed0", "A/amp_bf16/seed0"]
    # the sweep's own plan lists them in that order too (--dry_run: the order they start)
    assert sweep.main([str(tmp_path / "mini.yaml"), "--dry_run", "--out", str(tmp_path / "executed"),
                       "--only", "D/bf16_no_compile/seed2", "--only", "A/amp_bf16/seed0"]) == 0
    listed = [w for w in capsys.readouterr().out.split() if w[:2] in ("A/", "D/")]
    assert listed[:2] == ["D/bf16_no_compile/seed2", "A/amp_bf16/seed0"]
