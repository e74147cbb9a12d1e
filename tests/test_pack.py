"""``dtype-bench pack`` / ``unpack``: what a chunk of a study made on a GPU host, carried back
as one archive and put in place, checkpoints left out, nothing overwritten unasked."""
import os
import subprocess
import json
import tarfile
import time

import pytest
from conftest import line_with

from dtype_bench.cli import main
from benchlib.core.errors import UserError
from dtype_bench.host import pack


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args], cwd=repo, check=True,
                   capture_output=True)


def _write(path, text="{}"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def repo(tmp_path):
    """A repository whose executed/ is ignored but for one committed record of study ref."""
    repo = tmp_path / "repo"
    _write(repo / ".gitignore", "/executed/*\n*.safetensors\n")
    _write(repo / "executed/ref/runs/A/amp_bf16/seed0/result.json", '{"status": "ok"}')
    _git(repo, "init", "-q")
    _git(repo, "add", ".gitignore")
    _git(repo, "add", "-f", "executed/ref")
    _git(repo, "commit", "-qm", "chunk 1")
    return repo


def _chunk(repo):
    """What a second chunk leaves: a new run, a changed record, a checkpoint, the pretrain stage."""
    ex = repo / "executed"
    _write(ex / "ref/runs/A/amp_bf16/seed1/result.json", '{"status": "ok", "seed": 1}')
    _write(ex / "ref/runs/A/amp_bf16/seed1.ipynb")
    _write(ex / "ref/runs/A/amp_bf16/seed0/result.json", '{"status": "ok", "rerun": true}')
    _write(ex / "ref/runs/A/amp_bf16/seed1/.result.json.x1.tmp")  # an interrupted write
    _write(ex / "ref.pretrain/gpt2/result.json", '{"status": "ok"}')
    _write(ex / "ref.pretrain/gpt2/model/model.safetensors", "weights")
    _write(ex / "ref.pretrain/gpt2/model/config.json")
    _write(ex / "other/runs/B/x/seed0/result.json")  # another study: not asked for


def _names(archive):
    with tarfile.open(archive) as tar:
        return sorted(tar.getnames())


def test_pack_holds_the_new_and_changed_records_with_repository_paths_and_no_checkpoint(repo, tmp_path, capsys):
    _chunk(repo)
    out = tmp_path / "chunk.tgz"
    assert main(["pack", str(repo / "executed/ref"), "--out", str(out)]) == 0
    assert _names(out) == ["executed/ref.pretrain/gpt2/result.json", "executed/ref/runs/A/amp_bf16/seed0/result.json",
                           "executed/ref/runs/A/amp_bf16/seed1.ipynb", "executed/ref/runs/A/amp_bf16/seed1/result.json"]
    printed = capsys.readouterr().out
    assert printed.startswith("packed 4 files (") and "compressed) into" in printed
    assert "left out: 2 checkpoint file(s), 1 hidden file(s)" in printed


def test_a_pretrain_trained_again_under_a_committed_record_stays_out(repo, tmp_path, capsys):
    """A job's fresh copy of the tracked tree restores the committed pretrain record over the one
    a host made when it trained the checkpoint again; that training's new step log and notebook
    must not come back over the committed ones. A pretrain whose record is new comes back whole."""
    ex = repo / "executed"
    _write(ex / "ref.pretrain/gpt2/result.json", '{"status": "ok"}')
    _write(ex / "ref.pretrain/gpt2.ipynb")
    _git(repo, "add", "-f", "executed/ref.pretrain")
    _git(repo, "commit", "-qm", "pretrain")
    _write(ex / "ref.pretrain/gpt2/steps.jsonl", '{"step": 0}')  # the host's second training
    _write(ex / "ref.pretrain/gpt2.ipynb", "run again")
    _write(ex / "ref.pretrain/roberta/result.json", '{"status": "ok"}')  # a new pretrain: its record is new
    _write(ex / "ref.pretrain/roberta/steps.jsonl", '{"step": 0}')
    _write(ex / "ref/runs/A/amp_bf16/seed1/result.json", '{"status": "ok", "seed": 1}')
    out = tmp_path / "chunk.tgz"
    assert main(["pack", str(ex / "ref"), "--out", str(out)]) == 0
    assert _names(out) == ["executed/ref.pretrain/roberta/result.json", "executed/ref.pretrain/roberta/steps.jsonl",
                           "executed/ref/runs/A/amp_bf16/seed1/result.json"]
    assert "2 stale pretrain file(s)" in capsys.readouterr().out


def test_on_a_warm_host_a_restored_pretrain_record_keeps_the_hosts_remake_out(repo, tmp_path):
    """A warm GPU host keeps its own git state between jobs: the committed pretrain record the
    job's copy restored may show as changed there. Written before the sweep started, it is not
    the host's: the step log of the host's remake stays out; a record written since goes in."""
    ex = repo / "executed"
    _write(ex / "ref.pretrain/gpt2/result.json", '{"status": "ok"}')
    _git(repo, "add", "-f", "executed/ref.pretrain")
    _git(repo, "commit", "-qm", "pretrain")
    _write(ex / "ref.pretrain/gpt2/result.json", '{"status": "ok", "sweep": {"lost_checkpoints": ["d"]}}')  # restored
    _write(ex / "ref.pretrain/gpt2/steps.jsonl", '{"step": 0}')  # the host's remake, from an earlier job
    _write(ex / "ref/runs/A/amp_bf16/seed1/result.json", '{"status": "ok", "seed": 1}')
    started = time.time() + 1  # the sweep started after the copy
    out = tmp_path / "chunk.tgz"
    pack.pack([ex / "ref"], out, started=started)
    assert _names(out) == ["executed/ref/runs/A/amp_bf16/seed1/result.json"]
    pack.pack([ex / "ref"], out, started=started - 3600)  # the record was written during the sweep
    assert "executed/ref.pretrain/gpt2/steps.jsonl" in _names(out)


def test_a_run_cut_off_before_its_record_stays_out(repo, tmp_path, capsys):
    """The time budget or a lost machine cut a run off: its partial notebook and empty step log
    would stop a later unpack of the finished run (different content), and it runs again."""
    ex = repo / "executed"
    _write(ex / "ref/runs/D/bf16_pure/seed0.ipynb", "half")
    _write(ex / "ref/runs/D/bf16_pure/seed0/steps.jsonl", "")
    _write(ex / "ref/runs/ddp_2/D/amp_bf16/seed0/rank1.jsonl", "")  # an arm's run, cut off too
    _write(ex / "ref/runs/D/amp_bf16/seed0.ipynb", "whole")
    _write(ex / "ref/runs/D/amp_bf16/seed0/result.json", '{"status": "ok"}')
    out = tmp_path / "chunk.tgz"
    assert main(["pack", str(ex / "ref"), "--out", str(out)]) == 0
    assert _names(out) == ["executed/ref/runs/D/amp_bf16/seed0.ipynb", "executed/ref/runs/D/amp_bf16/seed0/result.json"]
    assert "3 unfinished run file(s)" in capsys.readouterr().out


def test_pack_since_a_commit_adds_what_was_committed_after_it(repo, tmp_path):
    _write(repo / "executed/ref/runs/D/amp_bf16/seed0/result.json")
    _git(repo, "add", "-f", "executed/ref")
    _git(repo, "commit", "-qm", "chunk 2")
    out = tmp_path / "since.tgz"
    pack.pack([repo / "executed/ref"], out, since="HEAD~1")
    assert _names(out) == ["executed/ref/runs/D/amp_bf16/seed0/result.json"]
    with pytest.raises(UserError, match="nothing to pack"):
        pack.pack([repo / "executed/ref"], out)  # all committed


def test_outside_git_pack_takes_the_files_newer_than_a_marker(tmp_path, monkeypatch):
    old = _write(tmp_path / "host/executed/ref/runs/A/c/seed0/result.json")
    marker = _write(tmp_path / "host/started")
    new = _write(tmp_path / "host/executed/ref/runs/A/c/seed1/result.json")
    os.utime(old, (1_000, 1_000))
    os.utime(marker, (2_000, 2_000))
    monkeypatch.chdir(tmp_path / "host")
    monkeypatch.setattr(pack, "git_root", lambda path: None)  # as on a host whose copy has no .git
    with pytest.raises(UserError, match="not in a git work tree: give --newer_than FILE"):
        pack.pack([tmp_path / "host/executed/ref"], tmp_path / "a.tgz")
    pack.pack([tmp_path / "host/executed/ref"], tmp_path / "a.tgz", newer_than=marker)
    assert _names(tmp_path / "a.tgz") == [str(new.relative_to(tmp_path / "host"))]


def test_an_archive_over_the_limit_is_refused_naming_the_largest_files(repo, tmp_path, monkeypatch, capsys):
    _write(repo / "executed/ref/runs/A/amp_bf16/seed1.ipynb", os.urandom(3000).hex())
    _write(repo / "executed/ref/runs/A/amp_bf16/seed1/result.json")
    monkeypatch.setattr(pack, "LIMIT_MIB", 0.001)
    out = tmp_path / "big.tgz"
    assert main(["pack", str(repo / "executed/ref"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and line_with(err, "0.001 MiB", "executed/ref/runs/A/amp_bf16/seed1.ipynb")  # limit, largest file
    assert not out.exists()


def test_unpack_adds_the_files_and_refuses_to_overwrite_a_different_one(repo, tmp_path, capsys):
    _chunk(repo)
    archive = tmp_path / "chunk.tgz"
    pack.pack([repo / "executed/ref"], archive)
    here = tmp_path / "here"
    _write(here / "executed/ref/runs/A/amp_bf16/seed0/result.json", '{"status": "ok"}')  # as committed here
    assert main(["unpack", str(archive), "--into", str(here)]) == 2
    err = capsys.readouterr().err
    # one line: the file that differs, and the two flags that resolve it
    assert err.count("\n") == 1 and line_with(err, "executed/ref/runs/A/amp_bf16/seed0/result.json", "--force", "--keep")
    assert not (here / "executed/ref.pretrain").exists()

    assert main(["unpack", str(archive), "--into", str(here), "--force"]) == 0
    out = capsys.readouterr().out
    assert "3 added, 1 replaced, 0 already here" in out
    assert "  executed/ref/runs/A/amp_bf16/seed1/: 1 added" in out
    assert (here / "executed/ref/runs/A/amp_bf16/seed0/result.json").read_text() == '{"status": "ok", "rerun": true}'
    # unpacking the same archive again changes nothing and needs no --force
    assert main(["unpack", str(archive), "--into", str(here)]) == 0
    assert "0 added, 0 replaced, 4 already here" in capsys.readouterr().out


def test_unpack_keep_adds_the_new_files_and_leaves_a_different_one_alone(repo, tmp_path, capsys):
    _chunk(repo)
    archive = tmp_path / "chunk.tgz"
    pack.pack([repo / "executed/ref"], archive)
    here = tmp_path / "here"
    committed = _write(here / "executed/ref/runs/A/amp_bf16/seed0/result.json", '{"status": "ok"}')
    assert main(["unpack", str(archive), "--into", str(here), "--keep"]) == 0
    out = capsys.readouterr().out
    assert "3 added, 1 kept as they were here, 0 already here" in out
    assert committed.read_text() == '{"status": "ok"}'
    assert (here / "executed/ref/runs/A/amp_bf16/seed1/result.json").exists()
    assert main(["unpack", str(archive), "--into", str(here), "--keep", "--force"]) == 2
    assert "--force and --keep exclude each other" in capsys.readouterr().err


def test_a_pretrain_made_again_on_the_host_replaces_the_record_it_succeeds_even_under_keep(tmp_path, capsys):
    """The host trained a lost checkpoint again: its record lists the committed record's date as
    lost. Keeping the old record would make the next host see the runs that loaded the remake
    as stale and train them again, so the remake's folder replaces the old one whole (its step
    log included: the old, gzipped one goes); a pretrain record that is no remake still differs."""
    here, host = tmp_path / "here", tmp_path / "host"
    old = {"status": "ok", "env": {"date": "2026-11-23T22:02:43"}, "sweep": {}}
    _write(here / "executed/ref.pretrain/gpt2/result.json", json.dumps(old))
    _write(here / "executed/ref.pretrain/gpt2/steps.jsonl.gz", "old log")
    _write(here / "executed/ref.pretrain/roberta/result.json", json.dumps(old))
    remake = {"status": "ok", "env": {"date": "2026-11-24T15:38:44"},
              "sweep": {"lost_checkpoints": ["2026-11-23T22:02:43"]}}
    _write(host / "executed/ref.pretrain/gpt2/result.json", json.dumps(remake))
    _write(host / "executed/ref.pretrain/gpt2/steps.jsonl", '{"step": 0}')
    _write(host / "executed/ref.pretrain/gpt2.ipynb", "remade")
    _write(host / "executed/ref.pretrain/roberta/result.json", json.dumps({**old, "env": {"date": "other"}}))
    _write(host / "executed/ref/runs/C/amp_bf16/seed3/result.json", '{"status": "ok"}')
    archive = tmp_path / "chunk.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for f in sorted(p for p in host.rglob("*") if p.is_file()):
            tar.add(f, arcname=f.relative_to(host).as_posix())
    assert main(["unpack", str(archive), "--into", str(here), "--keep"]) == 0
    out = capsys.readouterr().out
    assert "3 added, 1 kept as they were here, 0 already here" in out
    assert line_with(out, "1 pretrain", "executed/ref.pretrain/gpt2", "3 file(s)")  # the remade run, named
    gpt2 = here / "executed/ref.pretrain/gpt2"
    assert json.loads((gpt2 / "result.json").read_text()) == remake
    assert sorted(p.name for p in gpt2.iterdir()) == ["result.json", "steps.jsonl"]
    assert (here / "executed/ref.pretrain/gpt2.ipynb").read_text() == "remade"
    assert json.loads((here / "executed/ref.pretrain/roberta/result.json").read_text()) == old


def test_unpack_refuses_a_path_that_leaves_its_folder(tmp_path):
    evil = _write(tmp_path / "evil.txt", "x")
    archive = tmp_path / "evil.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(evil, arcname="../outside.txt")
    with pytest.raises(UserError, match="not a plain file below the archive's root"):
        pack.unpack(archive, tmp_path / "here")
    assert not (tmp_path / "outside.txt").exists()


def test_pack_to_a_study_outside_the_tree_is_refused_before_any_run(tmp_path, monkeypatch):
    """A sweep to --out /tmp/x on a GPU host (no .git: the tree is the working directory) ran its
    runs for 7 minutes and then could not pack them; the Packer now refuses at the start."""
    monkeypatch.chdir(tmp_path / "host" if (tmp_path / "host").mkdir() is None else tmp_path)
    monkeypatch.setattr(pack, "git_root", lambda path: None)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(UserError, match="not below .*give --out below it"):
        pack.Packer(tmp_path / "elsewhere", tmp_path / "a.tgz", 60)
    pack.Packer(tmp_path / "host" / "executed", tmp_path / "a.tgz", 60)  # below the tree: fine


def test_on_a_warm_host_a_pretrain_an_earlier_job_made_comes_back_with_the_later_jobs_runs(repo, tmp_path):
    """The first job on a warm host trained the checkpoint and was cut off by its budget; the next
    job there ran the rest. Nothing of that pretrain is committed, so its record, older than the
    second sweep, is the host's own and comes back (the runs name it)."""
    ex = repo / "executed"
    _write(ex / "ref.pretrain/gpt2/result.json", '{"status": "ok"}')
    _write(ex / "ref.pretrain/gpt2/steps.jsonl", '{"step": 0}')
    _write(ex / "ref/runs/C/amp_bf16/seed1/result.json", '{"status": "ok", "seed": 1}')
    out = tmp_path / "chunk.tgz"
    pack.pack([ex / "ref"], out, started=time.time() + 1)
    assert "executed/ref.pretrain/gpt2/result.json" in _names(out)
    assert "executed/ref.pretrain/gpt2/steps.jsonl" in _names(out)
