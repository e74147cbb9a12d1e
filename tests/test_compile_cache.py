"""torch.compile's on-disk cache across runs (``sweep --compile_cache``): a run in a fresh
process loads the graphs an earlier run compiled into the folder, and its record says so."""
import os
import pytest

from benchlib.core.env import COMPILE_CACHE_ENV
from benchlib.core.records import read_record
from benchlib.core.runconfig import ConfigError
from dtype_bench.host import sweep as host_sweep

# one compiled tiny run, in a process of its own (a cell run) so the second sweep's run starts
# without the first one's graphs in memory: what it does not compile must come from the folder
STUDY = ("study: cached\nscenarios: [A]\nconfigs: [fp32_baseline]\nseeds: [0]\nnotebook_seeds: []\n"
         "size: tiny\nsteps: 3\ndevice: cpu\ncompile: \"on\"\nforensics: false\n")


def test_a_second_host_of_the_folder_loads_what_the_first_compiled(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(COMPILE_CACHE_ENV, raising=False)  # the sweep sets it for its runs: restored after
    study, out, cache = tmp_path / "cached.yaml", tmp_path / "executed", tmp_path / "inductor"
    study.write_text(STUDY)
    args = [str(study), "--out", str(out), "--no_html", "--no_analysis", "--compile_cache", str(cache)]
    result = out / "cached" / "runs" / "A" / "fp32_baseline" / "seed0" / "result.json"

    assert host_sweep.main(args) == 0
    first = read_record(result)
    # fp32_baseline has no autocast: its graphs go to the folder's autocast-off subfolder
    assert first["run"]["compile"] == "on" and first["env"]["compile_cache_dir"] == str(cache.resolve() / "autocast-off")
    m = first["metrics"]
    assert m["compile/cache"] == "miss" and m["compile/graph_cache_misses"] > 0 and m["compile/graph_cache_hits"] == 0
    assert any(cache.iterdir())
    printed = capsys.readouterr().out
    assert "First step by torch.compile's cache" in printed and "miss 1 run(s), median" in printed
    assert f"Cache folder: {cache.resolve()}." in printed

    assert host_sweep.main([*args, "--force"]) == 0
    m = read_record(result)["metrics"]
    assert m["compile/cache"] == "hit", m
    assert m["compile/graph_cache_hits"] == first["metrics"]["compile/graph_cache_misses"]
    assert m["compile/graph_cache_misses"] == 0 and m["compile/autograd_cache_hits"] > 0
    assert "hit 1 run(s), median" in capsys.readouterr().out


def test_each_autocast_dtype_compiles_into_a_folder_of_its_own(tmp_path, monkeypatch):
    # torch 2.11's AOTAutograd cache key ignores the autocast dtype: one shared folder let an
    # amp_bf16 run load an amp_fp16 run's joint graph. A second run in the same process keys
    # from the shared folder again, not from the first run's subfolder.
    from benchlib.training.compile_cache import by_autocast
    monkeypatch.setenv(COMPILE_CACHE_ENV, str(tmp_path))
    folders = [by_autocast(a) for a in ("bf16", "fp16", None, "bf16")]
    assert folders == [str(tmp_path / "autocast-bf16"), str(tmp_path / "autocast-fp16"),
                       str(tmp_path / "autocast-off"), str(tmp_path / "autocast-bf16")]
    import os
    assert os.environ[COMPILE_CACHE_ENV] == folders[-1]


def test_an_eager_run_records_no_compile_cache(tmp_path):
    from benchlib.training.loop import run
    rec = run({"scenario": "A", "config": "fp32_baseline", "size": "tiny", "steps": 2, "compile": "off",
               "eval_batches": 1}, out_dir=tmp_path, progress=False)
    assert not any(k.startswith("compile/") for k in rec["metrics"])


def test_a_cache_folder_that_cannot_be_made_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv(COMPILE_CACHE_ENV, raising=False)
    (tmp_path / "file").write_text("")
    study = tmp_path / "cached.yaml"
    study.write_text(STUDY)
    with pytest.raises(ConfigError, match=r"--compile_cache .*file/inductor: cannot create it"):
        host_sweep.main([str(study), "--out", str(tmp_path / "executed"), "--compile_cache", str(tmp_path / "file" / "inductor")])


# Python's bytecode (``sweep --bytecode_cache``): a host whose packages ship no .pyc and that sets
# PYTHONDONTWRITEBYTECODE compiles every import again in each run's process
EAGER = STUDY.replace('compile: "on"', 'compile: "off"').replace("steps: 3", "steps: 2")


def test_runs_write_their_bytecode_to_the_folder_and_say_so(tmp_path, monkeypatch):
    from dtype_bench.host.sweep import BYTECODE_CACHE_ENV
    monkeypatch.delenv(BYTECODE_CACHE_ENV, raising=False)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # the sweep unsets it for its runs: restored after
    study, out, cache = tmp_path / "cached.yaml", tmp_path / "executed", tmp_path / "pyc"
    study.write_text(EAGER)
    assert host_sweep.main([str(study), "--out", str(out), "--no_html", "--no_analysis", "--bytecode_cache", str(cache)]) == 0
    rec = read_record(out / "cached" / "runs" / "A" / "fp32_baseline" / "seed0" / "result.json")
    assert rec["env"]["python_bytecode"] == str(cache.resolve())
    # the run's process wrote it there, under the source's own path (no __pycache__ in a prefix)
    assert any(p.parent.name == "training" for p in cache.rglob("loop.cpython-*.pyc"))


def test_a_host_that_writes_no_bytecode_keeps_it_in_the_users_cache_unless_told_off(tmp_path, monkeypatch, capsys):
    """PYTHONDONTWRITEBYTECODE (set by the GPU hosts' images) cost each run of 2026-11-30's E/F calls its
    imports again: the sweep now keeps the bytecode under ~/.cache/dtype-bench, and says so."""
    from dtype_bench.host.sweep import BYTECODE_CACHE_ENV
    monkeypatch.delenv(BYTECODE_CACHE_ENV, raising=False)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    study = tmp_path / "cached.yaml"
    study.write_text(EAGER)
    common = [str(study), "--out", str(tmp_path / "executed"), "--no_html", "--no_analysis"]
    assert host_sweep.main(common + ["--dry_run"]) == 0
    assert "--bytecode_cache" not in capsys.readouterr().out  # nothing runs: nothing to say
    assert host_sweep.main(common) == 0
    assert "--bytecode_cache off" in capsys.readouterr().out
    rec = read_record(tmp_path / "executed" / "cached" / "runs" / "A" / "fp32_baseline" / "seed0" / "result.json")
    cache = tmp_path / "home" / ".cache" / "dtype-bench" / "pycache"
    assert rec["env"]["python_bytecode"] == str(cache.resolve()) and any(cache.rglob("loop.cpython-*.pyc"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # the sweep unset it for its runs
    monkeypatch.delenv(BYTECODE_CACHE_ENV, raising=False)
    assert host_sweep.main(common + ["--bytecode_cache", "off", "--force"]) == 0
    assert "bytecode" not in capsys.readouterr().out and os.environ.get("PYTHONDONTWRITEBYTECODE") == "1"
    rec = read_record(tmp_path / "executed" / "cached" / "runs" / "A" / "fp32_baseline" / "seed0" / "result.json")
    assert rec["env"]["python_bytecode"] == "not written"
