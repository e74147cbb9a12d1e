"""``dtype-bench compact``: a study folder reduced to its committed layout reads back the same
records, step logs (the rows kept) and comparison; charts are stored once and linked; a sweep
refuses to resume it until ``--expand``; compacting twice changes nothing."""
import json
import math
import shutil
import subprocess
import sys

import nbformat
import pandas as pd
import pytest
from conftest import REPO, line_with
from fixtures.records import grid, loss_rows, make_record, real_study, write_run
from test_committed_studies import same

from benchlib.analysis import report, tables
from benchlib.analysis.stats import Rules
from benchlib.core.records import (RECORDS_TABLE, STEPS_TABLE, load_records, read_steps, read_table, steps_file,
                                   write_steps_table)
from dtype_bench.study import compact, html_export

FAST = Rules(n_boot=200)


def _notebook(path, record, svg=None):
    """An executed run notebook: its curves (an SVG) and its result shown."""
    nb = nbformat.v4.new_notebook()
    outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{record['run_id']}: trained\n")]
    if svg:
        chart = {"image/svg+xml": svg, "text/plain": "<chart: x>"}
        outputs.insert(0, nbformat.v4.new_output("display_data", data=chart))
    nb.cells = [nbformat.v4.new_code_cell("nb.train(cfg)", outputs=outputs)]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def _fresh_study(root):
    """A study as a sweep leaves it: records, long step logs, rank and papermill logs, a notebook
    per run (one run unfinished: an error), the analysis's tables and charts, an analysis notebook
    showing the charts, and the HTML export."""
    study = root / "gpu" / "study"
    records = grid(["A", "D"], ["fp32_baseline", "amp_bf16"], value=lambda s, c, k: {"steps": 1200})
    records.append({**make_record("A", "bf16_pure", 0), "status": "error", "reason": "boom", "metrics": {}})
    for rec in records:
        result = write_run(study, rec, rows=loss_rows(1200, wiggle=0.05) if rec["status"] == "ok" else None)
        for name in ("papermill.log", "rank0.jsonl"):
            (result.parent / name).write_text("x\n")
        _notebook(result.parent.with_suffix(".ipynb"), {"run_id": rec["run_id"]}, svg="<svg><rect/></svg>")
    report.analyze_study(study, rules=FAST)
    comp = report.compare_study(study, rules=FAST)
    for suffix in (".png", ".vl.json"):  # the same chart in other forms, as --formats png,svg or no vl-convert write it
        (study / "A" / "plots" / f"memory{suffix}").write_text("another form of the memory chart")
    nb = nbformat.v4.new_notebook()
    shown = [study / "A" / "plots" / "memory.svg", comp.files[0].parent / "plots" / "flips.svg"]
    charts = [{"image/svg+xml": f.read_text(), "text/plain": f"<chart: {f.stem}>"} for f in shown]  # as analysis.show
    nb.cells = [nbformat.v4.new_code_cell("show()", outputs=[nbformat.v4.new_output("display_data", data=c)
                                                             for c in charts])]
    (study / "analysis").mkdir()
    nbformat.write(nb, str(study / "analysis" / "10_analyze_experiment.ipynb"))
    (study / "analysis" / "10_analyze_experiment.log").write_text("papermill\n")
    html_export.export_study_html(study, overview=False)
    return study


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_compacted_study_reads_back_the_same_records_steps_and_comparison(tmp_path):
    root = tmp_path / "executed"
    study = _fresh_study(root)
    records = load_records(study)
    steps = {r["_path"]: read_steps(steps_file(r["_path"].rsplit("/", 1)[0])) for r in records if r["status"] == "ok"}
    before = report.compare(report.load_study(study), FAST).result
    curves = tables.loss_curves(tables.load_study(study))
    assert len(list(study.rglob("result.json"))) == len(records) == 13

    done = compact.compact(study, root)
    assert done.after < done.before / 2
    assert not list(study.rglob("result.json")) and not list(study.rglob("steps.jsonl*"))
    assert (study / RECORDS_TABLE).is_file() and (study / STEPS_TABLE).is_file()
    assert load_records(study) == records  # the same records, each at the same _path
    for path, rows in steps.items():  # each log's rows kept, values as logged
        assert read_steps(steps_file(path.rsplit("/", 1)[0])) == compact.kept_rows(rows) and len(rows) == 1200
    assert not same(report.compare(report.load_study(study), FAST).result, before)
    for was, now in zip(curves, tables.loss_curves(tables.load_study(study))):  # the charts draw the same curves
        pd.testing.assert_frame_equal(was.reset_index(drop=True), now.reset_index(drop=True))
    # one example per (scenario, config), the lowest seed, and the failed run's notebook
    kept = sorted(p.relative_to(study / "runs").as_posix() for p in study.rglob("*.ipynb") if "runs" in p.parts)
    assert kept == ["A/amp_bf16/seed0.ipynb", "A/bf16_pure/seed0.ipynb", "A/fp32_baseline/seed0.ipynb",
                    "D/amp_bf16/seed0.ipynb", "D/fp32_baseline/seed0.ipynb"]
    # logs: a finished run's go (its rank logs too: no arms, no reader), the failed run keeps its own
    logs = {p.relative_to(study / "runs").as_posix() for p in study.rglob("*")
            if p.name in ("papermill.log", "rank0.jsonl")}
    assert logs == {"A/bf16_pure/seed0/papermill.log", "A/bf16_pure/seed0/rank0.jsonl"}
    assert not (study / "analysis" / "10_analyze_experiment.log").exists()
    # each chart once, as its file; the analysis notebook links it, and so does its page
    assert sorted(p.name for p in study.glob("A/plots/memory*")) == ["memory.svg"]
    nb = nbformat.read(str(study / "analysis" / "10_analyze_experiment.ipynb"), as_version=4)
    links = [o for c in nb.cells for o in c.outputs]
    assert [o["metadata"][html_export.CHART_LINK] for o in links] == ["../A/plots/memory.svg",
                                                                       "../comparison/plots/flips.svg"]
    assert not any("image/svg+xml" in o["data"] for o in links)
    page = (study / "html" / "analysis" / "10_analyze_experiment.html").read_text()
    assert 'src="../../A/plots/memory.svg"' in page and 'alt="memory"' in page
    # one report: a page per kept example notebook only, the style sheet once in the root, every run in the index
    pages = sorted(p.relative_to(study / "html" / "runs").as_posix() for p in study.glob("html/runs/**/*.html"))
    assert pages == [k.replace(".ipynb", ".html") for k in kept] and not list(study.glob("html/*.css"))
    [css] = root.glob("notebook-*.css")
    assert f'href="../../../../{css.name}"' in page
    index = (study / "html" / "index.html").read_text()
    assert index.count("<tr><td>") == 13 and 'href="runs/A/fp32_baseline/seed0.html"' in index
    assert ".ipynb" not in index
    assert "records.jsonl.gz" in index and "boom" in index

    again = _files(study)
    assert compact.compact(study, root).counts == {k: 0 for k in done.counts}
    assert _files(study) == again  # twice: nothing changes


def test_the_steps_table_gives_back_every_value_as_logged(tmp_path):
    third = 1 / 3  # a float64 that is no float32: its column stays float64
    logs = {"runs/A/x/seed0": [{"step": 0, "loss": 2.5, "grad_norm": float("nan"), "scale": 65536.0},
                               {"step": 1, "loss": float("inf"), "eval": {"val_loss": 7.5, "note": None}},
                               {"step": 2, "lr": third, "flag": True, "note": "text", "gap": None, "mixed": 1}],
            "runs/A/x/seed1": [{"step": 0, "loss": 1.25, "mixed": 1.5, "count": 3}]}
    write_steps_table(tmp_path / STEPS_TABLE, logs)
    for run, rows in logs.items():
        back = read_steps(steps_file(tmp_path / run))
        assert [set(r) for r in back] == [set(r) for r in rows]  # absent keys stay absent
        for got, want in zip(back, rows):
            for k, v in want.items():
                assert type(got[k]) is type(v), (k, got[k], v)
                assert got[k] == v or (math.isnan(got[k]) and math.isnan(v)), (k, got[k], v)
    assert steps_file(tmp_path / "runs/A/x/seed2") is None
    with pytest.raises(FileNotFoundError):
        read_steps(tmp_path / "runs/A/x/seed2/steps.jsonl")


def test_a_result_json_beside_a_compacted_record_is_the_one_read(tmp_path):
    rec = make_record("A", "amp_bf16", 0, quality=3.0)
    write_run(tmp_path / "s", rec)
    compact.compact(tmp_path / "s", tmp_path)
    write_run(tmp_path / "s", {**rec, "metrics": {**rec["metrics"], "quality": 2.0}})  # run again since
    [got] = load_records(tmp_path / "s")
    assert got["metrics"]["quality"] == 2.0


def test_a_sweep_resumes_a_compacted_study_past_its_stored_runs(tmp_path, monkeypatch, capsys):
    """A committed (compacted) study resumed as it is, on a GPU host say: the runs in its table are
    done, only the others run, the analysis reads both, and `compact` folds the new ones in."""
    from conftest import fake_papermill
    from dtype_bench.host import sweep as host_sweep
    from dtype_bench.study import runner
    path, root = tmp_path / "two.yaml", tmp_path / "executed"
    path.write_text("study: two\nscenarios: [A]\nconfigs: [fp32_baseline, amp_bf16]\nseeds: [0, 1]\nsize: tiny\n"
                    "steps: 3\ndevice: cpu\n")
    calls = []
    monkeypatch.setattr(runner, "execute", fake_papermill(path, root, {}, calls, [0]))
    common = [str(path), "--out", str(root), "--no_analysis", "--no_html"]
    assert host_sweep.main(common + ["--seed", "0"]) == 0 and len(calls) == 2
    compact.compact(root / "two", root)
    assert not list((root / "two").rglob("result.json"))  # its two records are in the table alone
    assert host_sweep.main(common) == 0
    assert sorted(calls[2:]) == ["A/amp_bf16/seed1", "A/fp32_baseline/seed1"]  # seed 0 not run again
    assert "is compacted" in capsys.readouterr().out
    assert len(load_records(root / "two")) == 4
    compact.compact(root / "two", root)
    assert len(read_table(root / "two" / RECORDS_TABLE, strict=True)) == 4 and not list((root / "two").rglob("result.json"))


def test_a_sweep_stops_before_replacing_a_compacted_studys_stale_records_unless_told(tmp_path, monkeypatch, capsys):
    """A study file edited after its committed runs (here: more steps) makes their records stale. A bare
    sweep would run them all again and replace the committed results: it stops first, names the runs and
    why, and runs nothing; --rerun_stale replaces them; selecting only new runs goes on as before."""
    from conftest import fake_papermill
    from benchlib.core.runconfig import ConfigError
    from dtype_bench.host import sweep as host_sweep
    from dtype_bench.study import runner
    path, root = tmp_path / "two.yaml", tmp_path / "executed"
    study = "study: two\nscenarios: [A]\nconfigs: [fp32_baseline, amp_bf16]\nseeds: [0, 1]\nsize: tiny\ndevice: cpu\n"
    path.write_text(study + "steps: 3\n")
    calls = []
    monkeypatch.setattr(runner, "execute", fake_papermill(path, root, {}, calls, [0]))
    common = [str(path), "--out", str(root), "--no_analysis", "--no_html"]
    assert host_sweep.main(common + ["--seed", "0"]) == 0 and len(calls) == 2
    compact.compact(root / "two", root)
    path.write_text(study + "steps: 4\n")
    monkeypatch.setattr(runner, "execute", fake_papermill(path, root, {}, calls, [2]))  # records of the edited file
    with pytest.raises(ConfigError) as e:
        host_sweep.main(common)
    msg = str(e.value)
    assert "2 finished runs" in msg and "steps 3 -> 4" in msg and "--rerun_stale" in msg and "two" in msg
    assert len(calls) == 2  # nothing ran, not even the new seed-1 runs
    assert host_sweep.main(common + ["--dry_run"]) == 0
    assert line_with(capsys.readouterr().out, "would stop", "--rerun_stale")
    assert host_sweep.main(common + ["--seed", "1"]) == 0 and sorted(calls[2:]) == ["A/amp_bf16/seed1", "A/fp32_baseline/seed1"]
    assert host_sweep.main(common + ["--rerun_stale"]) == 0
    assert sorted(calls[4:]) == ["A/amp_bf16/seed0", "A/fp32_baseline/seed0"]  # replaced only when told


def test_force_before_reruns_older_records_and_the_same_command_resumes(tmp_path, monkeypatch):
    """Runs made before a time run again (a seed to be timed whole on one GPU, say), and a call
    stopped half-way resumes with the same command: what was remade since is kept."""
    from conftest import fake_papermill
    from dtype_bench.host import sweep as host_sweep
    from dtype_bench.study import runner
    path, root = tmp_path / "two.yaml", tmp_path / "executed"
    path.write_text("study: two\nscenarios: [A]\nconfigs: [fp32_baseline, amp_bf16]\nseeds: [0, 1]\nsize: tiny\n"
                    "steps: 3\ndevice: cpu\n")
    from datetime import datetime, timezone
    from dtype_bench.study import sweep
    calls, clock = [], [0]
    fake = fake_papermill(path, root, {}, calls, clock)
    monkeypatch.setattr(runner, "execute", fake)
    monkeypatch.setattr(sweep, "utc_now", lambda: datetime(2030, 1, 1, 0, 0, 5, tzinfo=timezone.utc))
    common = [str(path), "--out", str(root), "--no_analysis", "--no_html"]
    assert host_sweep.main(common) == 0 and len(calls) == 4  # records of 00:00:01 to 00:00:04
    compact.compact(root / "two", root)
    again = common + ["--seed", "0", "--force_before", "2030-01-01T00:00:05"]

    def stopped_after_one(cmd, env, log, timeout=None):
        if len(calls) == 5:
            raise KeyboardInterrupt
        return fake(cmd, env, log, timeout)
    monkeypatch.setattr(runner, "execute", stopped_after_one)
    assert host_sweep.main(again) == 130 and len(calls) == 5  # one seed-0 run remade, then stopped
    monkeypatch.setattr(runner, "execute", fake)
    assert host_sweep.main(again) == 0
    assert len(calls) == 6 and set(calls[4:]) == {"A/amp_bf16/seed0", "A/fp32_baseline/seed0"}  # each remade once
    assert host_sweep.main(again) == 0 and len(calls) == 6  # all made since: nothing runs
    dates = {(r["config"], r["seed"]): r["env"]["date"] for r in load_records(root / "two")}
    assert all(d >= "2030-01-01T00:00:05" for (c, seed), d in dates.items() if seed == 0)
    assert all(d < "2030-01-01T00:00:05" for (c, seed), d in dates.items() if seed == 1)  # not selected: kept


def test_force_before_refuses_a_time_after_now_that_would_rerun_this_calls_own_runs_next_call(tmp_path, monkeypatch):
    """A TIME later than now would make the runs of this call older than it: the next call of the
    same command would run them all again. Refused before anything runs, naming the flag."""
    from benchlib.core.runconfig import ConfigError
    from dtype_bench.host import sweep as host_sweep
    from dtype_bench.study import runner
    calls = []
    monkeypatch.setattr(runner, "execute", lambda *a, **k: calls.append(a))
    args = [str(REPO / "params" / "smoke.yaml"), "--out", str(tmp_path), "--no_analysis", "--no_html", "--force_before"]
    with pytest.raises(ConfigError, match=r"--force_before 2999-01-01T00:00 is after now"):
        host_sweep.main(args + ["2999-01-01"])
    assert calls == []


def test_force_before_refuses_a_time_it_cannot_read(tmp_path, capsys):
    from dtype_bench.host import sweep as host_sweep
    with pytest.raises(SystemExit):
        host_sweep.main([str(REPO / "params" / "smoke.yaml"), "--out", str(tmp_path), "--force_before", "yesterday"])
    assert "yesterday" in capsys.readouterr().err


def test_a_dry_run_reads_a_compacted_study_and_expand_gives_its_files_back(tmp_path):
    from benchlib.core.records import write_json_atomic
    from dtype_bench.study import runner
    from benchlib.study.studyfile import load_study
    study = load_study(REPO / "params" / "smoke.yaml")
    root = tmp_path / "executed" / "cpu"
    items = [i for i in runner.plan(study, root) if i.stage == "run"][:4]
    for item in items:  # four runs finished as the sweep leaves them
        write_json_atomic(item.result, {**runner.error_record(item.spec, item.out_dir, None), "status": "ok",
                                        "sweep": {"wall_s": 1.0}})
    assert [runner.run_state(i)[0] for i in items] == ["done:ok"] * 4
    compact.compact(root / "smoke", tmp_path / "executed")
    # --dry_run reads the compacted table: what is done and what is left, without expanding it
    r = subprocess.run([sys.executable, "-m", "dtype_bench", "sweep", str(REPO / "params" / "smoke.yaml"), "--out",
                        str(root), "--dry_run"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and f"done 4, to run {len(study.runs()) - 4} (new {len(study.runs()) - 4})" in r.stdout
    assert (root / "smoke" / RECORDS_TABLE).exists()
    assert compact.main(["--expand", str(root / "smoke")]) == 0
    assert [runner.run_state(i)[0] for i in items] == ["done:ok"] * 4  # resumed past, as before
    assert not (root / "smoke" / RECORDS_TABLE).exists()


def test_a_gpu_host_without_altair_expands_a_committed_study(tmp_path):
    """`compact --expand` on a GPU host (for `rejudge`, or a study read as files): no Altair needed there."""
    study = tmp_path / "reference_real_e_b999"
    shutil.copytree(REPO / "executed" / "h200" / "reference_real_e_b999", study)
    records = len(read_table(study / RECORDS_TABLE, strict=True))
    code = ("import sys; sys.modules['altair'] = None\n"  # import altair now raises ImportError
            "from dtype_bench.cli import main; sys.exit(main(['compact', '--expand', sys.argv[1]]))")
    r = subprocess.run([sys.executable, "-c", code, str(study)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    assert records > 0 and len(list(study.rglob("result.json"))) == records and not (study / RECORDS_TABLE).exists()


def test_compact_names_a_folder_that_holds_no_runs(tmp_path):
    (tmp_path / "executed" / "empty").mkdir(parents=True)
    r = subprocess.run([sys.executable, "-m", "dtype_bench", "compact", "--root", str(tmp_path / "executed"),
                        str(tmp_path / "executed" / "empty")], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "not a folder of runs" in r.stderr and r.stderr.strip().count("\n") == 0


def test_compact_refuses_an_earlier_runs_notebook_beside_a_later_record(tmp_path):
    """A study rerun over several GPU calls: each call's copy of the tree brings the committed pretrain
    notebook back over the new one, and only the first call's archive holds the new one. Compact names
    the notebook that ended before its record was made, and lets a notebook rendered later (a replay) be."""
    folder = tmp_path / "executed" / "study.pretrain"
    rec = {**make_record("A", "amp_bf16", 0), "env": {"device_name": "test device", "date": "2026-11-30T07:59:38+00:00"}}
    result = write_run(folder, rec)
    notebook = result.parent.with_suffix(".ipynb")

    def ran(start, end):
        _notebook(notebook, rec)
        nb = nbformat.read(str(notebook), as_version=4)
        nb.metadata["papermill"] = {"start_time": start, "end_time": end}
        nbformat.write(nb, str(notebook))

    ran("2026-11-30T06:36:36.384435+00:00", "2026-11-30T06:39:21.972662+00:00")  # the committed, earlier run's
    with pytest.raises(compact.UserError, match="study.pretrain/gpt2.ipynb|ended|before its record"):
        compact.compact(folder, tmp_path / "executed")
    assert result.exists()  # refused before anything was rewritten
    ran("2026-11-30T07:59:32+00:00", "2026-11-30T08:02:09+00:00")  # this record's own run
    assert compact.stale_notebooks({result.parent: load_records(folder)[0]}) == []
    ran("2026-12-01T10:00:00+00:00", "2026-12-01T10:01:00+00:00")  # rendered from the record later
    compact.compact(folder, tmp_path / "executed")
    assert not result.exists() and (folder / RECORDS_TABLE).exists()


def test_the_readme_says_what_each_study_is_from_its_records_and_files(tmp_path):
    from dtype_bench.study import readme
    root = tmp_path / "executed"
    study = root / "h100" / "mini"
    for k, status in ((0, "ok"), (1, "diverged")):
        rec = make_record("A", "amp_bf16", k, status=status)
        rec["env"] = {"device_name": "NVIDIA H100", "torch": "2.11.0", "date": f"2026-11-2{3 + k}T10:00:00"}
        write_run(study, rec)
    (study / "README.md").write_text("# Two runs of the mini study, on one H100\n\nHow they ran.\n")
    (root / "h100" / "local").mkdir()  # a fresh local study: no table, no README: left out
    write_run(root / "h100" / "local", make_record("A", "amp_bf16", 0))
    compact.compact(study, root)
    text = readme.readme_text(root)
    assert "[`h100/mini`](h100/mini/)**: Two runs of the mini study, on one H100\n" in text
    assert line_with(text, "runs: 2", "ok 1", "diverged 1", "scenario A", "1 config", "seeds 0, 1")  # the study's counts
    assert "Device: NVIDIA H100; torch 2.11.0" in text and "2026-11-23 to 2026-11-24" in text
    assert "h100/local" not in text
    assert readme.is_generated(readme.write_readme(root)) and readme.readme_text(root) == text


def test_the_analysis_notebooks_run_again_on_a_compacted_study_to_the_same_files(tmp_path):
    """The sweep's analysis over a compacted study reads its tables; compacted again, every file
    is what the first compaction left: the charts are reproducible from the committed layout."""
    from dtype_bench.study.sweep import run_analysis
    root = tmp_path / "executed"
    study = root / "cpu" / "real"
    shutil.copytree(real_study(), study)
    assert not run_analysis(study, {})[1]
    compact.compact(study, root)
    first = _files(study)
    assert any(p.suffix == ".svg" for p in first) and not any(p.name == "result.json" for p in first)
    done, failed = run_analysis(study, {})
    assert not failed and len(done) == 2
    compact.compact(study, root)
    changed = [str(p) for p, b in _files(study).items() if first.get(p) != b]
    assert changed == [] and set(_files(study)) == set(first)
    assert json.loads((study / "comparison" / "comparison.json").read_text())["scenarios"] == ["A", "E"]


def test_a_compacted_calibration_folder_gives_the_same_table_its_cut_off_runs_included(tmp_path):
    """docs/calibration/<session>/: run folders that are no study's, one cut off before its record
    (its curve is in its step log alone)."""
    from pathlib import Path

    from benchlib.core.records import STEPS_TABLE, load_records, read_steps, read_steps_table, steps_file

    def calibration_table(folder):  # per run folder: its record's run_id (None: cut off) and evaluation curve
        recs = {Path(r["_path"]).parent.name: r["run_id"] for r in load_records(folder)}
        logged = set(read_steps_table(folder / STEPS_TABLE)) if (folder / STEPS_TABLE).exists() else set()
        names = sorted({p.name for p in folder.iterdir() if p.is_dir()} | set(recs) | logged)
        return {n: (recs.get(n), [(r["step"], r["eval"]) for r in read_steps(steps_file(folder / n)) if "eval" in r])
                for n in names}
    session = tmp_path / "calibration" / "h100"
    for name, seed in (("A_lr1", 0), ("A_lr2", 1)):
        rec = make_record("A", "amp_bf16", seed)
        folder = session / name
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps(rec))
        rows = loss_rows(40) + [{"step": 19, "eval": {"val_loss": 3.5 - seed}}, {"step": 39, "eval": {"val_loss": 3.0}}]
        (folder / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (session / "A_cut").mkdir()
    (session / "A_cut" / "steps.jsonl").write_text(json.dumps({"step": 19, "eval": {"val_loss": 4.0}}) + "\n")
    before = calibration_table(session)
    compact.compact(session, tmp_path / "calibration")
    assert not list(session.rglob("result.json")) and not (session / "A_cut").exists()
    after = calibration_table(session)
    assert list(after) == ["A_cut", "A_lr1", "A_lr2"] and after == before and before["A_cut"][0] is None


def test_a_study_of_cell_runs_links_the_one_style_sheet_too(tmp_path):
    """No run notebooks (a cell-run study): compacting empties runs/ entirely, and its report
    still moves its style sheet to the root (the encoder study kept a 260 KB copy of its own)."""
    root = tmp_path / "executed"
    study = root / "gpu" / "cells"
    for rec in grid(["D"], ["fp32_baseline", "amp_bf16"]):
        write_run(study, rec)
    report.analyze_study(study, rules=FAST)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("show()", outputs=[nbformat.v4.new_output("stream", name="stdout", text="x\n")])]
    (study / "analysis").mkdir()
    nbformat.write(nb, str(study / "analysis" / "10_analyze_experiment.ipynb"))
    html_export.export_study_html(study, overview=False, run_pages=False)
    assert list(study.glob("html/*.css"))
    compact.compact(study, root)
    assert not (study / "runs").exists() and not list(study.glob("html/*.css"))
    assert len(list(root.glob("notebook-*.css"))) == 1
