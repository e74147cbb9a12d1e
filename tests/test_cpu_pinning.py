"""``dtype-bench sweep --cpus LIST``: each run's process pinned to its own share of the cores,
so that runs timed on a host's other GPUs at the same time (another sweep compiling, say) do
not take the cores a launch-bound run needs."""
import os
import subprocess
import sys

import pytest
from conftest import fake_papermill

from dtype_bench.study.runner import CPUS_ENV, format_cpus, parse_cpus
from benchlib.core.records import read_record
from benchlib.core.runconfig import ConfigError
from dtype_bench.host import slots
from dtype_bench.host import sweep as host_sweep
from dtype_bench.host.slots import CPU_THREAD_VARS
from dtype_bench.study import runner

STUDY = "study: pinned\nscenarios: [A]\nconfigs: [fp32_baseline, amp_bf16]\nseeds: [0, 1]\nsize: tiny\nsteps: 3\n"


def test_core_lists_parse_and_print_as_ranges():
    assert parse_cpus("0-3,8", allowed=set(range(16))) == [0, 1, 2, 3, 8]
    assert parse_cpus(" 5 , 1-2 ", allowed=set(range(16))) == [1, 2, 5]
    assert format_cpus([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert format_cpus(parse_cpus("4-7,12", allowed=set(range(16)))) == "4-7,12"


@pytest.mark.parametrize("bad, named", [("0-x", "'0-x'"), ("3-1", "'3-1'"), ("0,,2", "an empty item"),
                                        ("0-40", "16-40")])
def test_a_bad_core_list_is_one_line_naming_what_is_wrong(bad, named):
    with pytest.raises(ValueError) as e:
        parse_cpus(bad, allowed=set(range(16)))
    assert named in str(e.value) and "\n" not in str(e.value)


def test_runs_side_by_side_get_disjoint_equal_shares_and_matching_threads(monkeypatch):
    for var in CPU_THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    four = slots.pin_slots([{"CUDA_VISIBLE_DEVICES": g} for g in "0101"], list(range(16)))
    shares = [parse_cpus(s[CPUS_ENV], allowed=set(range(16))) for s in four]
    assert all(len(c) == 4 for c in shares) and len(set().union(*map(set, shares))) == 16
    assert all(s["OMP_NUM_THREADS"] == s["TORCHINDUCTOR_COMPILE_THREADS"] == "4" for s in four)
    with pytest.raises(ValueError, match="2 core"):
        slots.pin_slots([{}] * 3, [0, 1])


def test_a_run_process_starts_on_its_slots_cores_only(tmp_path):
    """The child itself, not only the environment: the affinity it reports is the slot's."""
    core = sorted(os.sched_getaffinity(0))[-1]
    out = tmp_path / "affinity.log"
    env = dict(os.environ, **{CPUS_ENV: str(core)})
    rc = runner.execute_argv([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"], env, out)
    assert rc == 0 and out.read_text().strip() == f"[{core}]"
    assert sorted(os.sched_getaffinity(0)) != [] and core in os.sched_getaffinity(0)  # this process unchanged
    # without the variable, a child keeps every core this process has
    rc = runner.execute_argv([sys.executable, "-c", "import os; print(len(os.sched_getaffinity(0)))"],
                             {k: v for k, v in os.environ.items() if k != CPUS_ENV}, out)
    assert rc == 0 and int(out.read_text()) == len(os.sched_getaffinity(0))


def test_a_sweep_with_cpus_pins_every_run_and_its_records_say_how_many(tmp_path, monkeypatch):
    path, root = tmp_path / "pinned.yaml", tmp_path / "executed"
    path.write_text(STUDY + "device: cuda\n")
    fake, envs = fake_papermill(path, root, {}, [], [0]), []
    monkeypatch.setattr(runner, "execute", lambda cmd, env, log, timeout=None: envs.append(env) or fake(cmd, env, log))
    for var in CPU_THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    core = sorted(os.sched_getaffinity(0))[0]
    assert host_sweep.main([str(path), "--out", str(root), "--gpus", "1", "--cpus", str(core), "--no_analysis",
                            "--no_html"]) == 0
    assert len(envs) == 4 and all(e[CPUS_ENV] == str(core) and e["CUDA_VISIBLE_DEVICES"] == "1" for e in envs)
    recs = [read_record(p) for p in (root / "pinned" / "runs").rglob("result.json")]
    assert len(recs) == 4 and all(r["sweep"]["cpus_per_run"] == 1 for r in recs)


def test_more_runs_side_by_side_than_cores_is_refused(tmp_path, monkeypatch):
    path, root = tmp_path / "pinned.yaml", tmp_path / "executed"
    path.write_text(STUDY + "device: cuda\n")
    monkeypatch.setattr(runner, "execute", lambda *a, **k: pytest.fail("no run may start"))
    core = sorted(os.sched_getaffinity(0))[0]
    with pytest.raises(ConfigError, match="1 core"):
        host_sweep.main([str(path), "--out", str(root), "--gpus", "0,1", "--cpus", str(core), "--no_analysis",
                         "--no_html"])


def test_a_core_the_host_does_not_have_is_a_usage_error_naming_it(tmp_path, capsys):
    path = tmp_path / "pinned.yaml"
    path.write_text(STUDY + "device: cuda\n")
    missing = max(os.sched_getaffinity(0)) + 1000
    with pytest.raises(SystemExit):
        host_sweep.main([str(path), "--out", str(tmp_path / "x"), "--cpus", str(missing)])
    err = capsys.readouterr().err
    assert "--cpus" in err and str(missing) in err
