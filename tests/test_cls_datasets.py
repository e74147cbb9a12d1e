"""AG News and IMDB: named hub data sets for the single-label scenarios, read through the same
loaders as EUR-Lex. Local files of the hub schema ({text, label}, split files named as the hub
exports them) stand in for the hub: no network here."""
import json

import numpy as np
import pytest

from benchlib.core.runconfig import ConfigError, RunConfig, resolved
from benchlib.data import files
from benchlib.data.load import load_task_data
from benchlib.data.tasks import BadDataError, DataUnavailableError
from benchlib.training.loop import run

WORDS = "the a of market team game film plot vote court bank score actor cast rate win loss goal".split()


def _rows(n: int, n_labels: int, seed: int, label=None) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"text": " ".join(rng.choice(WORDS, 20)), "label": int(i % n_labels) if label is None else label}
            for i in range(n)]


def _write(path, rows):
    if path.suffix == ".parquet":
        import pandas as pd
        pd.DataFrame(rows).to_parquet(path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def ag_news(tmp_path):
    """AG News' schema as JSON lines: train and test, label 0-3."""
    d = tmp_path / "ag_news"
    d.mkdir()
    _write(d / "train.jsonl", _rows(48, 4, 0))
    _write(d / "test.jsonl", _rows(12, 4, 1))
    return d


@pytest.fixture
def imdb(tmp_path):
    """IMDB's schema as the hub's parquet files: train, test and the unlabelled reviews (label -1)."""
    d = tmp_path / "imdb"
    d.mkdir()
    _write(d / "train-00000-of-00001.parquet", _rows(40, 2, 2))
    _write(d / "test-00000-of-00001.parquet", _rows(10, 2, 3))
    _write(d / "unsupervised-00000-of-00001.parquet", _rows(30, 2, 4, label=-1))
    return d


def _cfg(scenario, data, tmp_path, **kw):
    return resolved(RunConfig(scenario=scenario, data=str(data), cache_dir=str(tmp_path / "cache"), **kw))


def test_ag_news_files_load_with_four_labels_and_the_test_split_as_evaluation(ag_news, tmp_path):
    d = load_task_data(_cfg("E", ag_news, tmp_path))
    assert d.num_labels == 4 and d.meta["label_ids"] == "int"
    assert (d.meta["n_train"], d.meta["n_val"]) == (48, 12)
    assert d.meta["split_rule"] == "split files: train = train.jsonl; test = test.jsonl"
    want = sorted(r["label"] for r in _rows(12, 4, 1))
    assert sorted(d.val_batches(12, 1, "cpu")[0]["labels"].tolist()) == want


def test_imdb_files_load_with_two_labels_and_never_read_the_unsupervised_split(imdb, tmp_path):
    d = load_task_data(_cfg("F", imdb, tmp_path))
    assert d.num_labels == 2 and (d.meta["n_train"], d.meta["n_val"]) == (40, 10)
    assert d.meta["split_rule"].endswith("unsupervised (unsupervised-00000-of-00001.parquet) not used")


def test_a_file_named_as_the_unsupervised_split_is_refused(imdb, tmp_path):
    with pytest.raises(BadDataError, match="unsupervised split, which is never trained on"):
        load_task_data(_cfg("F", imdb / "unsupervised-00000-of-00001.parquet", tmp_path))


@pytest.mark.parametrize("scenario,fixture,labels", [("E", "ag_news", 4), ("F", "imdb", 2)])
def test_single_label_scenarios_train_on_them(scenario, fixture, labels, tmp_path, request):
    data = request.getfixturevalue(fixture)
    rec = run({"scenario": scenario, "config": "fp32_baseline", "data": str(data), "steps": 3, "log_every": 1,
               "eval_batches": 1, "cache_dir": str(tmp_path / "cache")}, out_dir=tmp_path / "run", progress=False)
    assert rec["status"] not in ("error", "oom", "skipped"), rec["reason"]
    assert rec["run"]["num_labels"] == labels and rec["data"]["n_val"] == {"ag_news": 12, "imdb": 10}[fixture]


@pytest.mark.parametrize("fixture", ["ag_news", "imdb"])
def test_a_multi_label_scenario_refuses_single_label_files_in_one_line(fixture, tmp_path, request):
    with pytest.raises(BadDataError) as e:
        load_task_data(_cfg("C", request.getfixturevalue(fixture), tmp_path))
    assert "single-label data (E, F)" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["ag_news", "imdb"])
def test_a_multi_label_scenario_refuses_the_named_data_set_in_one_line(name):
    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict({"scenario": "D", "data": name})
    assert f"data='{name}' is single-label data" in str(e.value) and "scenario E, F" in str(e.value)
    assert "\n" not in str(e.value)


def test_names_select_the_hub_data_set_and_hub_keeps_the_scenarios_own():
    assert files.hub_name(RunConfig(scenario="E", data="ag_news")) == "ag_news"
    assert files.hub_name(RunConfig(scenario="F", data="imdb")) == "imdb"
    assert files.hub_name(RunConfig(scenario="E", data="hub")) == "eurlex"
    assert files.hub_name(RunConfig(scenario="A", data="hub")) == "openwebtext"
    assert files.HUB["imdb"].splits == ("train", "test")  # never unsupervised


@pytest.mark.parametrize("scenario,name", [("E", "ag_news"), ("F", "imdb")])
def test_offline_with_an_empty_cache_is_one_clear_error(monkeypatch, tmp_path, scenario, name):
    import datasets.config
    from huggingface_hub import constants
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    calls = _spy_on_load_dataset(monkeypatch)
    with pytest.raises(DataUnavailableError) as e:
        load_task_data(resolved(RunConfig(scenario=scenario, data=name)))
    msg = str(e.value)
    assert files.HUB[name].id in msg and "(offline)" in msg and "data='synthetic'" in msg and "\n" not in msg
    assert files.HUB[name].schema in msg
    # no retry loop: one attempt, asked for no retries, with the libraries in offline mode
    assert calls == [(files.HUB[name].id, 0, True)]


def _spy_on_load_dataset(monkeypatch) -> list:
    """Wrap ``datasets.load_dataset``: each call's (dataset, max_retries, offline mode then)."""
    import datasets
    from huggingface_hub import constants
    real, calls = datasets.load_dataset, []

    def load_dataset(path, *args, **kwargs):
        dc = kwargs.get("download_config")
        calls.append((path, dc.max_retries if dc else None, bool(datasets.config.HF_HUB_OFFLINE and constants.HF_HUB_OFFLINE)))
        return real(path, *args, **kwargs)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls
