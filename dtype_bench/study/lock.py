"""One sweep at a time on a study folder: ``study_lock`` holds an exclusive ``flock`` on
``<study>/.sweep.lock`` (the file holds the holder's pid) while a sweep may write there, and a
second sweep on the same folder is refused in one line naming the folder and that pid. The
kernel drops the lock with its process however it ends (Ctrl-C, kill -9, a crash), so a file left
behind never blocks; a sweep that ends removes it. ``--dry_run`` and ``--status`` take no lock:
they read (``holder`` says whether a sweep is writing meanwhile).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Iterator

from benchlib.core.errors import UserError

LOCK_FILE = ".sweep.lock"
TRIES = 10
"""Attempts, 0.1 s apart, before a held lock refuses (``holder``'s probe holds it for an instant)."""


class StudyInUse(UserError):
    """Another process holds the study folder's lock."""


@contextlib.contextmanager
def study_lock(study_dir: str | os.PathLike) -> Iterator[Path]:
    """Hold the lock of ``study_dir`` (made if missing) within; ``StudyInUse`` where another
    process holds it."""
    path = Path(study_dir) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(path)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # before the lock goes: a process that opened it meanwhile locks a file no one sees
        os.close(fd)


def _acquire(path: Path) -> int:
    for _ in range(TRIES):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            time.sleep(0.1)
            continue
        if _same_file(fd, path):
            return fd
        os.close(fd)  # its holder removed it as we locked it: lock the one there now
    raise StudyInUse(f"{path.parent}: another sweep (pid {_pid(path)}) is running on this study folder; wait for "
                     f"it to end (--status shows its runs), or give another --out")


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _pid(path: Path) -> str:
    try:
        return path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def holder(study_dir: str | os.PathLike) -> str | None:
    """The pid of the sweep holding ``study_dir``'s lock, or None where none does."""
    path = Path(study_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _pid(path)
    finally:
        os.close(fd)  # and with it the shared lock, if it was taken
    return None
