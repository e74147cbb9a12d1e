"""``dtype-bench sweep --runs_per_gpu N``: N quality-only runs side by side on each GPU; their
records say so and the analysis leaves their speed blank."""
import math
import threading
from collections import Counter

import pytest
from conftest import fake_papermill, line_with
from fixtures.records import make_record
from test_gates import with_baseline

from benchlib.analysis import tables
from benchlib.core.records import read_record, records_frame
from benchlib.core.runconfig import ConfigError
from dtype_bench.host import slots
from dtype_bench.host import sweep as host_sweep
from dtype_bench.study import runner
from dtype_bench.host.slots import CPU_THREAD_VARS, cpu_share

STUDY = "study: many\nscenarios: [A]\nconfigs: [fp32_baseline, amp_bf16]\nseeds: [0, 1, 2, 3]\nsize: tiny\nsteps: 3\n"


def test_two_runs_per_gpu_on_two_gpus_are_four_slots_spread_over_the_gpus():
    four = slots.slots_for(8, ["0", "1"], runs_per_gpu=2)
    assert four == [{"CUDA_VISIBLE_DEVICES": g} for g in ("0", "1", "0", "1")]
    assert slots.gpu_sharing(four) == 2
    assert slots.slots_for(3, ["0", "1"], runs_per_gpu=2) == [{"CUDA_VISIBLE_DEVICES": g} for g in ("0", "1", "0")]
    assert slots.slots_for(8, ["0"], runs_per_gpu=3) == [{"CUDA_VISIBLE_DEVICES": "0"}] * 3
    assert slots.gpu_sharing(slots.slots_for(2, ["0", "1"])) == 1  # one run per GPU shares nothing


def test_side_by_side_runs_split_the_cores_unless_the_user_chose(monkeypatch):
    for var in CPU_THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    assert cpu_share(1, cpus=16) == {}  # one run: it has the host
    assert cpu_share(12, cpus=16) == {"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    assert cpu_share(2, cpus=32) == {"OMP_NUM_THREADS": "16", "TORCHINDUCTOR_COMPILE_THREADS": "16"}
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_share(4, cpus=16) == {"TORCHINDUCTOR_COMPILE_THREADS": "4"}


def test_on_cpu_runs_per_gpu_still_runs_one_at_a_time():
    assert slots.slots_for(8, [], runs_per_gpu=4) == [{}]
    assert slots.gpu_sharing([{}]) == 1


def test_a_cpu_sweep_with_runs_per_gpu_runs_one_at_a_time_and_marks_nothing(tmp_path, monkeypatch, capsys):
    path, root = tmp_path / "many.yaml", tmp_path / "executed"
    path.write_text(STUDY + "device: cpu\n")
    envs = []
    fake = fake_papermill(path, root, {}, [], [0])
    monkeypatch.setattr(runner, "execute", lambda cmd, env, log, timeout=None: envs.append(env) or fake(cmd, env, log))
    assert host_sweep.main([str(path), "--out", str(root), "--runs_per_gpu", "2", "--no_analysis", "--no_html"]) == 0
    assert "--runs_per_gpu 2: CPU runs, one at a time" in capsys.readouterr().out
    assert len(envs) == 8 and not any("runs_per_gpu" in read_record(p)["sweep"]
                                      for p in (root / "many" / "runs").rglob("result.json"))


def test_a_sweep_with_two_runs_per_gpu_pins_them_and_marks_their_records(tmp_path, monkeypatch, capsys):
    path, root = tmp_path / "many.yaml", tmp_path / "executed"
    path.write_text(STUDY + "device: cuda\n")
    fake, lock, busy, peak, seen = fake_papermill(path, root, {}, [], [0]), threading.Lock(), Counter(), Counter(), []

    envs = []

    def execute(cmd, env, log, timeout=None):
        gpu = env["CUDA_VISIBLE_DEVICES"]
        with lock:
            busy[gpu] += 1
            peak[gpu] = max(peak[gpu], busy[gpu])
            seen.append(gpu)
            envs.append(env)
        threading.Event().wait(0.05)
        with lock:
            busy[gpu] -= 1
        return fake(cmd, env, log, timeout)

    monkeypatch.setattr(runner, "execute", execute)
    for var in CPU_THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert host_sweep.main([str(path), "--out", str(root), "--gpus", "0,1", "--runs_per_gpu", "2", "--no_analysis",
                       "--no_html"]) == 0
    # a freed slot takes the next run, so the split between the GPUs follows the runs' timing; what
    # holds is that both GPUs work and neither has more than two runs at once
    assert len(seen) == 8 and set(seen) == {"0", "1"} and max(peak.values()) <= 2
    # four runs side by side split the 16 cores: 4 CPU threads and 4 compile workers each
    assert all(e["OMP_NUM_THREADS"] == e["TORCHINDUCTOR_COMPILE_THREADS"] == "4" for e in envs)
    recs = [read_record(p) for p in (root / "many" / "runs").rglob("result.json")]
    assert len(recs) == 8 and all(r["sweep"]["runs_per_gpu"] == 2 and r["sweep"]["cpu_threads"] == 4 for r in recs)
    out = capsys.readouterr().out
    assert line_with(out, "speed", "8 runs", "--runs_per_gpu")  # no speed for the 8, and the flag why


def test_a_sweep_on_the_one_gpu_named_pins_its_runs_there(tmp_path, monkeypatch):
    """`--gpus 1` alone (one slot): every run on GPU 1. Two sweeps of a host were each given a GPU
    this way, and one slot used to mean no pinning: both ran on GPU 0."""
    path, root = tmp_path / "many.yaml", tmp_path / "executed"
    path.write_text(STUDY + "device: cuda\n")
    def sweep(out, *flags):
        fake, seen = fake_papermill(path, out, {}, [], [0]), []
        monkeypatch.setattr(runner, "execute", lambda cmd, env, log, timeout=None:
                            seen.append(env.get("CUDA_VISIBLE_DEVICES")) or fake(cmd, env, log))
        assert host_sweep.main([str(path), "--out", str(out), *flags, "--no_analysis", "--no_html"]) == 0
        return seen
    assert sweep(root, "--gpus", "1") == ["1"] * 8
    monkeypatch.setattr(host_sweep, "visible_gpus", lambda: ["0", "1"])
    assert sweep(tmp_path / "b") == [None] * 8  # no --gpus: the environment's GPUs, as before


def test_runs_per_gpu_refuses_multi_process_arms(tmp_path, monkeypatch):
    path = tmp_path / "arms.yaml"
    path.write_text("study: arms\nscenarios: [A]\nconfigs: [amp_bf16]\nsize: tiny\nsteps: 3\ndevice: cuda\n"
                    "arms:\n  ddp2: {dist: {strategy: ddp, nproc: 2}}\n")
    with pytest.raises(ConfigError, match="--runs_per_gpu 2: an arm on 2 processes"):
        host_sweep.main([str(path), "--out", str(tmp_path / "x"), "--gpus", "0,1", "--runs_per_gpu", "2"])


def _shared(rec):
    rec["sweep"] = {"wall_s": 10.0, "fixed_s": 5.0, "runs_per_gpu": 2}
    return rec


def test_a_run_that_shared_its_gpu_has_its_speed_blanked_not_its_quality_or_memory():
    alone = make_record("A", "amp_bf16", 0, throughput=200.0, memory=1.5, quality=3.1, step_ms=12.0)
    shared = _shared(make_record("A", "amp_bf16", 1, throughput=150.0, memory=1.5, quality=3.2, step_ms=16.0))
    df = records_frame([alone, shared]).set_index("seed")
    assert df["shared_gpu"].tolist() == [False, True]
    assert (df.loc[0, "throughput"], df.loc[0, "step_ms"]) == (200.0, 12.0)
    assert math.isnan(df.loc[1, "throughput"]) and math.isnan(df.loc[1, "step_ms"])
    assert (df.loc[1, "memory"], df.loc[1, "quality"]) == (1.5, 3.2)


def test_the_summary_table_blanks_shared_speed_and_says_why():
    recs = [with_baseline(r) for r in (
        make_record("A", "fp32_baseline", 0, throughput=100.0, quality=3.0),
        _shared(make_record("A", "fp32_baseline", 1, throughput=60.0, quality=3.0)),
        _shared(make_record("A", "amp_bf16", 0, throughput=90.0, quality=3.0)),
        _shared(make_record("A", "amp_bf16", 1, throughput=95.0, quality=3.0)))]
    s = tables.summarize(tables.study_frame(recs), "A").set_index(["config", "seed"])
    assert s.loc[("fp32_baseline", "1"), "shared_gpu"] and not s.loc[("fp32_baseline", "0"), "shared_gpu"]
    assert math.isnan(s.loc[("fp32_baseline", "1"), "throughput"])
    assert s.loc[("fp32_baseline", "mean"), "throughput"] == 100.0  # from the run that had its GPU alone
    assert math.isnan(s.loc[("amp_bf16", "mean"), "throughput"]) and s.loc[("amp_bf16", "mean"), "shared_gpu"]
    assert s.loc[("amp_bf16", "mean"), "quality"] == 3.0
    assert line_with(s["note"].iloc[0], "3 of 4", "shared", "--runs_per_gpu")
    assert "3 of 4 run(s) shared their GPU" in tables.describe_experiment(s.reset_index(), "A")


def test_a_summary_without_shared_runs_has_no_shared_gpu_column():
    recs = [with_baseline(make_record("A", c, 0)) for c in ("fp32_baseline", "amp_bf16")]
    assert "shared_gpu" not in tables.summarize(tables.study_frame(recs), "A")


def test_seed_per_gpu_runs_each_seeds_configs_on_one_gpu_and_says_so(tmp_path, monkeypatch):
    """Two GPUs, four seeds: seeds 0 and 2 on one GPU, 1 and 3 on the other, both GPUs busy at once,
    and every record says how it was placed; without the flag a seed's configs land on either GPU."""
    path, root = tmp_path / "many.yaml", tmp_path / "executed"
    path.write_text(STUDY + "device: cuda\n")
    fake, lock, where = fake_papermill(path, root, {}, [], [0]), threading.Lock(), {}
    busy, peak = Counter(), [0]
    order = {}
    first_two = threading.Barrier(2, timeout=60)  # broken (the test fails) unless both lanes run at once

    def execute(cmd, env, log, timeout=None):
        seed = int(runner.injected(cmd)["seed"])
        with lock:
            where.setdefault(env["CUDA_VISIBLE_DEVICES"], []).append(seed)
            order.setdefault(seed, []).append(runner.injected(cmd)["config"])
            first = len(order[seed]) == 1 and seed in (0, 1)
            busy["all"] += 1
            peak[0] = max(peak[0], busy["all"])
        if first:  # the two GPUs' first runs meet: side by side however loaded the machine is
            first_two.wait()
        with lock:
            busy["all"] -= 1
        return fake(cmd, env, log, timeout)

    monkeypatch.setattr(runner, "execute", execute)
    assert host_sweep.main([str(path), "--out", str(root), "--gpus", "0,1", "--seed_per_gpu", "--no_analysis",
                            "--no_html"]) == 0
    recs = [read_record(p) for p in (root / "many" / "runs").rglob("result.json")]
    assert len(recs) == 8 and all(r["sweep"].get("seed_per_gpu") is True for r in recs)
    gpu_of_seed = {}
    for gpu, seeds in where.items():
        for seed in seeds:
            gpu_of_seed.setdefault(seed, set()).add(gpu)
    assert all(len(g) == 1 for g in gpu_of_seed.values()) and len(gpu_of_seed) == 4
    assert gpu_of_seed[0] == gpu_of_seed[2] != gpu_of_seed[1] == gpu_of_seed[3]
    assert peak[0] == 2  # the two GPUs' lanes ran side by side
    # the second GPU's seeds take the configs from the other end: past the middle, each GPU's runs
    # load the graphs the other compiled
    assert order[0] == order[2] == ["fp32_baseline", "amp_bf16"] and order[1] == order[3] == ["amp_bf16", "fp32_baseline"]


def test_the_second_gpus_reversed_order_keeps_a_pretrain_before_the_runs_that_load_it():
    from types import SimpleNamespace
    unit = lambda name, stage="run", needs=None: [SimpleNamespace(name=name, stage=stage, needs=needs)]
    lane = [unit("pre", "pretrain"), unit("A/fp32"), unit("A/bf16"), unit("C/fp32", needs="pre"), unit("C/bf16", needs="pre")]
    assert host_sweep.alternate(0, lane) == lane
    assert [u[0].name for u in host_sweep.alternate(1, lane)] == ["pre", "A/bf16", "A/fp32", "C/bf16", "C/fp32"]


def test_seed_per_gpu_splits_a_cells_seeds_into_one_process_each():
    """A cell run (one process for a config's seeds) would put several seeds in one slot: with
    --seed_per_gpu each seed of it is its own unit, in its seed's slot."""
    from types import SimpleNamespace
    item = lambda cfg, seed: SimpleNamespace(name=f"{cfg}/{seed}", stage="run", needs=None,
                                             spec=SimpleNamespace(arm=None, cfg=SimpleNamespace(scenario="A", seed=seed)))
    units = [[item("fp32", 0), item("fp32", 1)], [item("bf16", 0), item("bf16", 1)]]
    host = host_sweep.GpuHost(SimpleNamespace(seed_per_gpu=True, time_budget=None, runs_per_gpu=1))
    ran, lock = [], threading.Lock()

    def run(unit, slot):
        with lock:
            ran.append((slot["CUDA_VISIBLE_DEVICES"], [i.name for i in unit]))
        return []
    host.run_all(units, [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}], run,
                 lambda u, s: None, lambda u, r: None, lambda u: True, threading.Event())
    assert sorted(ran) == [("0", ["bf16/0"]), ("0", ["fp32/0"]), ("1", ["bf16/1"]), ("1", ["fp32/1"])]


def test_a_resumed_seed_per_gpu_sweep_deals_each_seed_to_the_same_gpu(tmp_path, monkeypatch):
    """Seeds are dealt to GPUs by their place among the selected seeds, not among the runs left, so a
    sweep resumed after its time budget (the same command again) puts the rest of each seed's configs
    on the GPU its first ones ran on: seeds 0 and 2 on GPU 0, seed 1 on GPU 1. Before, the runs left
    decided, and the four calls of reference_real_speed_onegpu E/F (2026-11-30) moved seeds between GPUs."""
    path, root = tmp_path / "many.yaml", tmp_path / "executed"
    path.write_text(STUDY.replace("seeds: [0, 1, 2, 3]", "seeds: [0, 1, 2]") + "device: cuda\n")
    fake, where = fake_papermill(path, root, {}, [], [0]), {}

    def execute(cmd, env, log, timeout=None):
        seed = int(runner.injected(cmd)["seed"])
        where.setdefault(seed, set()).add(env["CUDA_VISIBLE_DEVICES"])
        return fake(cmd, env, log, timeout)

    monkeypatch.setattr(runner, "execute", execute)
    common = [str(path), "--out", str(root), "--gpus", "0,1", "--seed_per_gpu", "--no_analysis", "--no_html"]
    assert host_sweep.main(common + ["--seed", "0"]) == 0  # as if a first call finished seed 0 alone
    assert host_sweep.main(common) == 0  # resumed: seeds 1 and 2 left, dealt as in a sweep of all three
    assert where == {0: {"0"}, 1: {"1"}, 2: {"0"}}


def test_seed_per_gpu_gives_each_scenarios_seed_a_lane_so_one_seed_of_two_scenarios_fills_two_gpus(tmp_path, monkeypatch):
    """A seed's configs need one GPU per scenario, not one for every scenario: seed 2 of A and of E
    (a third seed added later) run side by side on two GPUs, each scenario's configs on one."""
    path, root = tmp_path / "two.yaml", tmp_path / "executed"
    path.write_text(STUDY.replace("scenarios: [A]", "scenarios: [A, E]").replace("seeds: [0, 1, 2, 3]", "seeds: [2]")
                    + "device: cuda\n")
    fake, where = fake_papermill(path, root, {}, [], [0]), {}

    def execute(cmd, env, log, timeout=None):
        where.setdefault(runner.injected(cmd)["scenario"], set()).add(env["CUDA_VISIBLE_DEVICES"])
        return fake(cmd, env, log, timeout)

    monkeypatch.setattr(runner, "execute", execute)
    assert host_sweep.main([str(path), "--out", str(root), "--gpus", "0,1", "--seed_per_gpu", "--no_analysis",
                            "--no_html"]) == 0
    assert where == {"A": {"0"}, "E": {"1"}}
