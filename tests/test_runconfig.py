"""One typed run configuration: unknown keys and wrong types fail loudly, naming the key."""
import pytest

from dtype_bench.cli import main as cli_main
from benchlib.core.runconfig import ConfigError, RunConfig, resolved


def test_unknown_key_names_the_key_and_the_closest():
    with pytest.raises(ConfigError, match=r"unknown parameter 'lerning_rate'"):
        RunConfig.from_dict({"lerning_rate": 1e-3})
    with pytest.raises(ConfigError, match=r"Did you mean 'seed'"):
        RunConfig.from_dict({"sed": 1})


def test_wrong_type_names_the_key_and_the_expected_type():
    with pytest.raises(ConfigError, match=r"steps='ten' has the wrong type: expected int"):
        RunConfig.from_dict({"steps": "ten"})
    with pytest.raises(ConfigError, match=r"size='huge'.*'tiny', 'small', 'base'"):
        RunConfig.from_dict({"size": "huge"})


def test_unknown_config_and_scenario_are_clear():
    with pytest.raises(ConfigError, match=r"unknown dtype config 'amp_bf17'.*Did you mean 'amp_bf16'"):
        RunConfig.from_dict({"config": "amp_bf17"})
    with pytest.raises(ConfigError, match=r"unknown scenario 'G'"):
        RunConfig.from_dict({"scenario": "G"})


def test_ints_are_accepted_for_floats_and_bools_are_not_ints():
    assert RunConfig.from_dict({"lr": 1}).lr == 1.0
    with pytest.raises(ConfigError):
        RunConfig.from_dict({"steps": True})


def test_resolved_fills_size_defaults():
    r = resolved(RunConfig(scenario="A", size="base", steps=100))
    assert (r.batch_size, r.seq_len, r.vocab_size, r.warmup_steps) == (12, 1024, 50304, 10)
    d = resolved(RunConfig(scenario="D", size="base"))
    assert (d.batch_size, d.seq_len, d.num_labels) == (8, 512, 4271)


def test_cli_bad_flag_value_is_a_one_line_error(capsys):
    assert cli_main(["run", "--steps", "many"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--steps" in err and "'many'" in err


def test_cli_seed002_flags_map_to_a_scenario(capsys):
    from benchlib.run import add_run_args, run_config_from_args
    import argparse
    p = argparse.ArgumentParser()
    add_run_args(p)
    ns = p.parse_args(["--model_arch", "roberta", "--task", "mlm", "--dtype_config", "fp32_true",
                       "--max_steps", "7", "--batch_size", "24"])
    cfg = run_config_from_args(ns)
    assert (cfg.scenario, cfg.config, cfg.steps, cfg.batch_size) == ("B", "fp32_true", 7, 24)
