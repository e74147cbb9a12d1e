"""``dtype-bench pack executed/<study> --out chunk.tgz``: what a chunk of a study made on a GPU
host and not yet committed, as one archive to carry back; ``dtype-bench unpack chunk.tgz``
puts it in place in the repository here.

What goes in: the files under the study's folder (and ``<study>.pretrain/``) that git reports as
new or modified, ignored ones included; with ``--since REF`` also those changed since that
commit; with ``--newer_than FILE`` (or outside git) those modified after FILE. Checkpoints,
hidden files, the files of a pretrain run whose record is the committed one and those of a run
with no ``result.json`` yet stay out. Paths are relative to the repository root (outside git:
the current folder), so ``tar xzf chunk.tgz -C <repository>`` does what ``unpack`` does, less
its checks. An archive over ``LIMIT_MIB`` (what one GPU job may return per file) is refused.
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path, PurePosixPath

from benchlib.core.argparser import ArgumentParser
from benchlib.core.errors import UserError
from benchlib.core.records import STAGE_SUFFIX, pretrain_folder

LIMIT_MIB = 16
CHECKPOINT_SUFFIXES = (".safetensors", ".bin", ".pt")


def git_root(path: Path) -> Path | None:
    """The root of the git work tree holding ``path``, or None."""
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, text=True)
    except OSError:  # no git here
        return None
    return Path(out.stdout.strip()).resolve() if out.returncode == 0 else None


def _git(root: Path, what: str, *args: str) -> list[str]:
    out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        raise UserError(f"{what}: {(out.stderr.strip().splitlines() or ['git ' + args[0] + ' failed'])[-1]}")
    return [p for p in out.stdout.split("\0") if p]


def changed_files(root: Path, dirs: list[Path], since: str | None = None) -> list[Path]:
    """Files under ``dirs`` untracked (ignored or not) or modified, or changed since ``since``."""
    rel = [str(d.relative_to(root)) for d in dirs]
    names = _git(root, "git ls-files", "ls-files", "-z", "--others", "--modified", "--", *rel)
    if since:
        names += _git(root, f"--since {since}", "diff", "-z", "--name-only", since, "--", *rel)
    return sorted({root / n for n in names if (root / n).is_file()})


def newer_files(dirs: list[Path], marker: Path) -> list[Path]:
    if not marker.exists():
        raise UserError(f"--newer_than {marker}: no such file (touch it before the sweep)")
    t = marker.stat().st_mtime
    return sorted(p for d in dirs for p in d.rglob("*") if p.is_file() and p.stat().st_mtime > t)


def left_out(rel: PurePosixPath) -> str:
    """Why a file stays out of the archive ('checkpoint', 'hidden'), or ''."""
    if "model" in rel.parts[:-1] or rel.suffix in CHECKPOINT_SUFFIXES:
        return "checkpoint"
    return "hidden" if any(part.startswith(".") for part in rel.parts) else ""


def pack(study_dirs: list[Path], out: Path, since: str | None = None, newer_than: Path | None = None,
         started: float | None = None) -> str:
    """Write the archive; return what to print. ``started``: the sweep's start (a pretrain record
    older is the one the job's copy of the tree brought)."""
    dirs: list[Path] = []
    for d in (Path(d).resolve() for d in study_dirs):
        if not d.is_dir():
            raise UserError(f"{d}: no such study folder")
        dirs += [p for p in (d, pretrain_folder(d)) if p.is_dir() and p not in dirs]
    root = git_root(dirs[0])
    if root is None and newer_than is None:
        raise UserError(f"{dirs[0]} is not in a git work tree: give --newer_than FILE (a file touched before the sweep)")
    if root is None and since:
        raise UserError(f"--since {since}: {dirs[0]} is not in a git work tree")
    in_git, root = root is not None, root or Path.cwd().resolve()
    if not all(d.is_relative_to(root) for d in dirs):
        raise UserError(f"{dirs[0]} is not below {root}: run pack from the repository root")
    files = newer_files(dirs, newer_than) if newer_than else changed_files(root, dirs, since)
    out = Path(out).resolve()
    files = [f for f in files if f != out]
    rel = {f: PurePosixPath(f.relative_to(root).as_posix()) for f in files}
    committed = ({root / n for n in _git(root, "git ls-files", "ls-files", "-z", "--",
                                         *(str(d.relative_to(root)) for d in dirs))}
                 if in_git else None)
    stale, unfinished = _beside_a_standing_record(files, dirs, started, committed), _of_unfinished_runs(files, dirs)
    skipped = Counter(left_out(r) or ("stale pretrain" if f in stale else "unfinished run")
                      for f, r in rel.items() if left_out(r) or f in stale or f in unfinished)
    files = [f for f in files if not left_out(rel[f]) and f not in stale and f not in unfinished]
    if not files:
        raise UserError(f"nothing to pack: no new or changed file under {', '.join(str(d) for d in dirs)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tar:
        for f in files:
            tar.add(f, arcname=str(rel[f]), recursive=False)
    size, total = out.stat().st_size, sum(f.stat().st_size for f in files)
    if size > LIMIT_MIB * 2**20:
        out.unlink()
        big = sorted(files, key=lambda f: -f.stat().st_size)[:3]
        raise UserError(f"the archive would be {_mib(size)}, over {LIMIT_MIB} MiB; largest: "
                        + ", ".join(f"{rel[f]} ({_mib(f.stat().st_size)})" for f in big)
                        + "; pack subfolders (e.g. <study>/runs/A) into separate archives")
    lines = [f"packed {len(files)} files ({_mib(total)}, {_mib(size)} compressed) into {out}"]
    if skipped:
        lines.append(f"left out: {', '.join(f'{n} {why} file(s)' for why, n in sorted(skipped.items()))} "
                     f"(checkpoints are never carried back; the sweep makes a missing one again when a run needs it"
                     + ("; a stale pretrain file belongs to a checkpoint trained again here while the committed "
                        "record stands" if "stale pretrain" in skipped else "")
                     + ("; an unfinished run (cut off, no result.json yet) runs again on the next call, and its "
                        "partial notebook here would stop a later unpack of the finished one" if "unfinished run" in skipped
                        else "") + ")")
    return "\n".join(lines)


def _beside_a_standing_record(files: list[Path], dirs: list[Path], started: float | None = None,
                              committed: set[Path] | None = None) -> set[Path]:
    """Files of a pretrain run folder whose record is not among ``files`` or older than
    ``started``: a checkpoint trained again here while the repository's record stands. In a git
    tree only a ``committed`` record stands: one an earlier job on this warm host wrote is its own."""
    changed = set(files)
    out = set()
    for f in files:
        run = (f.with_suffix("") if f.suffix == ".ipynb" and f.parent.name.endswith(STAGE_SUFFIX) else  # its notebook
               next((d for d in f.parents if d.parent.name.endswith(STAGE_SUFFIX) and d.parent in dirs), None))
        record = run / "result.json" if run is not None else None
        if record is not None and record.exists() and (committed is None or record in committed) and (
                record not in changed or (started is not None and record.stat().st_mtime < started)):
            out.add(f)
    return out


def _of_unfinished_runs(files: list[Path], dirs: list[Path]) -> set[Path]:
    """Files of a run (``seed<k>.ipynb``, ``seed<k>/``) with no record, as file or table line."""
    from benchlib.core.records import find_tables, read_table
    tabled = {Path(r["_path"]) for d in dirs for t in find_tables(d) for r in read_table(t)}
    out = set()
    for f in files:
        if not any(f.is_relative_to(d / "runs") for d in dirs):
            continue
        run = (f.with_suffix("") if f.suffix == ".ipynb" and f.stem.startswith("seed") else
               next((p for p in f.parents if p.name.startswith("seed") and p.name[4:].isdigit()), None))
        if run is not None and not (run / "result.json").exists() and run / "result.json" not in tabled:
            out.add(f)
    return out


class Packer:
    """``dtype-bench sweep --pack_to FILE``: keeps ``FILE`` an archive of the study's new records
    while the sweep runs (rewritten whole every ``every_s`` seconds, then renamed into place) and
    once more at the end, so a job killed at its hard limit still returns what it finished."""

    def __init__(self, study_dir: Path, path: Path, every_s: float):
        import tempfile
        import threading
        self.study_dir, self.path, self.every_s = Path(study_dir), Path(path).resolve(), every_s
        here = next(p for p in (self.study_dir.resolve(), *self.study_dir.resolve().parents) if p.is_dir())
        root = git_root(here) or Path.cwd().resolve()
        if not self.study_dir.resolve().is_relative_to(root):  # said before the runs, not after them
            raise UserError(f"--pack_to: the study folder {self.study_dir} is not below {root}, and the archive "
                            f"names files by their path from there: give --out below it")
        self._since = None if git_root(here) else Path(tempfile.mkstemp(prefix="dtype-bench-pack-since-")[1])
        self._started = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="packer")

    def start(self) -> "Packer":
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.once()

    def once(self) -> str:
        """Pack now; what ``pack`` says (or why there was nothing to pack)."""
        tmp = self.path.with_name(self.path.name + ".partial")
        try:
            line = pack([self.study_dir], tmp, newer_than=self._since, started=self._started)
        except UserError as e:
            tmp.unlink(missing_ok=True)
            return str(e)
        tmp.replace(self.path)
        return line.replace(str(tmp), str(self.path))

    def stop(self) -> str:
        """The last archive, after the runs and the analysis."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        try:
            return self.once()
        finally:
            if self._since is not None:
                self._since.unlink(missing_ok=True)


def _remade_pretrains(tar: tarfile.TarFile, state: dict[str, str], into: Path) -> list[str]:
    """Pretrain run folders whose record in the archive is a remake of the one here (it lists this
    record's date under ``sweep.lost_checkpoints``), and so succeeds it."""
    import json
    out = []
    for name, st in state.items():
        p = PurePosixPath(name)
        if st != "differs" or p.name != "result.json" or not p.parent.parent.name.endswith(STAGE_SUFFIX):
            continue
        try:
            new = json.loads(tar.extractfile(name).read())
            here = json.loads((into / name).read_text())
        except (OSError, ValueError, AttributeError):
            continue
        lost = (new.get("sweep") or {}).get("lost_checkpoints") or []
        if (here.get("env") or {}).get("date") in lost:
            out.append(str(p.parent))
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def unpack(archive: Path, into: Path, force: bool = False, keep: bool = False) -> str:
    """Extract the archive under ``into``, never replacing a differing file unless ``force``
    (``keep``: leave them); a pretrain run remade on the host (``_remade_pretrains``) replaces
    its whole folder. Return what was added, by folder."""
    if force and keep:
        raise UserError("--force and --keep exclude each other: replace the differing files, or keep them")
    try:
        tar = tarfile.open(archive, "r:gz")
    except (OSError, tarfile.TarError) as e:
        raise UserError(f"{archive}: not a readable .tgz archive ({e})") from None
    with tar:
        members = [m for m in tar.getmembers() if not m.isdir()]
        for m in members:
            p = PurePosixPath(m.name)
            if not m.isfile() or p.is_absolute() or ".." in p.parts:
                raise UserError(f"{archive}: {m.name!r} is not a plain file below the archive's root; nothing unpacked")
        state = {m.name: _compare(tar, m, into / m.name) for m in members}
        remade = _remade_pretrains(tar, state, into)
        remade_files = [n for n in state if any(n.startswith(r + "/") or n == r + ".ipynb" for r in remade)]
        for name in remade_files:
            if state[name] == "differs":
                state[name] = "remade"
        differ = [n for n, s in state.items() if s == "differs"]
        if differ and not (force or keep):
            raise UserError(f"{len(differ)} file(s) here differ from the archive's ({', '.join(differ[:3])}"
                            f"{' ...' if len(differ) > 3 else ''}); nothing unpacked: --force replaces them, "
                            "--keep adds only the new files")
        for r in remade:  # the remake's files replace the old record's, e.g. its step log (.gz here)
            shipped = {n for n in state if n.startswith(r + "/")}
            for f in (into / r).rglob("*"):
                rel = f.relative_to(into).as_posix()
                if f.is_file() and rel not in shipped and "model" not in f.relative_to(into / r).parts:
                    f.unlink()
        for m in members:
            if state[m.name] in ("new", "remade") or (state[m.name] == "differs" and force):
                tar.extract(m, path=into, filter="data")
    counts = Counter(state.values())
    lines = [f"unpacked {archive} into {into}: {counts['new']} added, "
             f"{counts['differs']} {'kept as they were here' if keep else 'replaced'}, {counts['same']} already here"]
    if remade:
        lines.append(f"  {len(remade)} pretrain run(s) made again on the GPU host ({', '.join(remade)}): their "
                     f"{len(remade_files)} file(s) replace the run here, whose checkpoint their record lists as lost")
    by_folder: dict[str, Counter] = {}
    for name, s in state.items():
        if s != "same":
            what = "added" if s == "new" else "replaced" if s == "remade" or not keep else "kept"
            by_folder.setdefault(str(PurePosixPath(name).parent), Counter())[what] += 1
    lines += [f"  {folder}/: " + ", ".join(f"{n} {what}" for what, n in c.items()) for folder, c in sorted(by_folder.items())]
    return "\n".join(lines)


def _compare(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> str:
    if not target.exists():
        return "new"
    ours = hashlib.sha256(target.read_bytes()).digest() if target.is_file() else b""
    return "same" if ours == hashlib.sha256(tar.extractfile(member).read()).digest() else "differs"


# ---- command line ----------------------------------------------------------------------
def main_pack(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="dtype-bench pack", description=__doc__.split("\n\n")[0])
    p.add_argument("study_dir", type=Path, nargs="+", help="Study folder(s), e.g. executed/reference.")
    p.add_argument("--out", type=Path, required=True, help="The archive to write, e.g. chunk.tgz.")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--since", metavar="GIT_REF", default=None,
                       help="Also the files changed since this commit (default: uncommitted files only).")
    which.add_argument("--newer_than", type=Path, metavar="FILE", default=None,
                       help="The files modified after FILE instead (no git needed: touch FILE before the sweep).")
    ns = p.parse_args(sys.argv[1:] if argv is None else argv)
    print(pack(ns.study_dir, ns.out, ns.since, ns.newer_than))
    return 0


def main_unpack(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="dtype-bench unpack", description="Put a `dtype-bench pack` archive's files in place.")
    p.add_argument("archive", type=Path, help="The archive, e.g. chunk.tgz.")
    p.add_argument("--into", type=Path, default=None,
                   help="Where its paths start (default: the root of the git work tree here, else the current folder).")
    p.add_argument("--force", action="store_true", help="Replace files here whose content differs from the archive's.")
    p.add_argument("--keep", action="store_true",
                   help="Add the archive's new files, keep the files here that differ (e.g. a pretrain made again).")
    ns = p.parse_args(sys.argv[1:] if argv is None else argv)
    print(unpack(ns.archive, ns.into or git_root(Path.cwd()) or Path.cwd(), ns.force, ns.keep))
    return 0
