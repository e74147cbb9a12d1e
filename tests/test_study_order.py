"""Study files: runs come seed-major (a study cut short keeps whole seeds), and
``config_seeds`` lets a config run a subset of the seeds, with one-line errors for bad input."""
import pytest
from conftest import REPO

from benchlib.core.runconfig import ConfigError
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
