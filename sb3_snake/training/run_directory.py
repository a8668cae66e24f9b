"""A run's folder, held by one run at a time, so runs never clobber or lose each other.

- **No collisions.** A run without a name gets ``runs/<timestamp>``, created exclusively (then ``-2``, ...).
- **No silent overwrite.** A folder that holds a run is refused unless the run asks to ``overwrite`` it (its
  files removed first) or resumes into it.
- **One run at a time.** A lock file (``.sb3-snake.lock``, holding ``host:pid``) marks the folder in use; the
  lock of a run killed on this machine is taken over, one held from another machine never.
- **Clean starts and failed starts.** A killed writer's temporary files are removed at start; a folder made by
  a run that fails before writing anything is removed again.

Design notes: docs/design-notes.md, "sb3_snake/training/run_directory.py".
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import check_writable_dir, claim_new_path, remove_temporary_files
from sb3_snake.common.system import process_gone

#: Where runs without a name go.
RUNS_DIR = Path("runs")
LOCK_NAME = ".sb3-snake.lock"
#: Files a run writes; their presence means the folder holds a run.
RUN_FILES = (
    "model.zip",
    "summary.json",
    "episodes.json",
    "checkpoint.zip",
    "best_model.zip",
    "learning_curve.png",
    "model.replay.npz",
    "checkpoint.replay.npz",
    "model.replay.pkl",
    "checkpoint.replay.pkl",
    "monitor.csv",
    "progress.csv",
    "evaluations.npz",
)


class RunDirectoryError(UsageError):
    """The run folder cannot be used; the message says why and what to pass instead."""


#: The fix of a folder that cannot be used: another one (``train``'s ``run_dir``).
ANOTHER_FOLDER = {"run_dir": "change"}


def _holder(lock: Path) -> tuple[str, int]:
    """The ``(host, pid)`` a lock file names (a bare pid, as older runs wrote it: this host), or
    ``("", 0)`` where it names none (being written, or damaged)."""
    try:
        host, _, pid = lock.read_text().strip().rpartition(":")
        return host or socket.gethostname(), int(pid)
    except (OSError, ValueError):
        return "", 0


def _take_lock(directory: Path) -> Path:
    lock = directory / LOCK_NAME
    here = socket.gethostname()
    for _ in range(2):
        try:
            descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            host, pid = _holder(lock)
            if host and host != here:
                raise RunDirectoryError(
                    f"run folder {directory} is in use by an sb3-snake run on {host} (pid {pid}); wait for it, "
                    f"or remove {lock} if that run is gone",
                    fix=ANOTHER_FOLDER,
                ) from None
            if pid and pid != os.getpid() and not process_gone(pid):
                raise RunDirectoryError(
                    f"run folder {directory} is in use by another sb3-snake run (pid {pid}); wait for it",
                    fix=ANOTHER_FOLDER,
                ) from None
            lock.unlink(missing_ok=True)  # the run that held it is gone
            continue
        except OSError as error:
            raise RunDirectoryError(
                f"run folder {directory} is not writable ({error.strerror or error})", fix=ANOTHER_FOLDER
            ) from None
        with os.fdopen(descriptor, "w") as file:
            file.write(f"{here}:{os.getpid()}")
        return lock
    raise RunDirectoryError(f"run folder {directory}: could not take its lock {lock}; remove it if no run is using it")


def existing_run_files(directory: Path) -> list[str]:
    return [name for name in RUN_FILES if (directory / name).exists()]


@contextmanager
def claim_run_directory(
    path: Path | None, *, overwrite: bool = False, resuming: bool = False, keep: tuple[Path, ...] = ()
) -> Iterator[Path]:
    """Hold a run folder for the ``with`` block and yield it.

    :param path: the folder; ``None`` makes a new one under :data:`RUNS_DIR`.
    :param overwrite: a folder holding a run may be used; its run files are removed first.
    :param resuming: a folder holding a run may be used and its files are kept (a resumed run
        continues there).
    :param keep: files ``overwrite`` must not remove (the checkpoint being resumed from).
    :raises RunDirectoryError: one line, before anything was trained or written.
    """
    if path is None:
        check_writable_dir(RUNS_DIR, what="runs folder", create=True)
        try:
            directory = claim_new_path(RUNS_DIR, datetime.now().strftime("%Y%m%d-%H%M%S"), folder=True)
        except FileExistsError as error:
            raise RunDirectoryError(str(error)) from None
        created = True
    else:
        directory = Path(path)
        try:
            check_writable_dir(directory, what="run folder", create=True)
        except UsageError as error:
            raise RunDirectoryError(str(error)) from None
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
    lock = _take_lock(directory)
    try:
        remove_temporary_files(directory)
        previous = existing_run_files(directory)
        if previous and not (overwrite or resuming):
            raise RunDirectoryError(
                f"run folder {directory} already holds a run ({', '.join(previous)}): replace it, continue it, "
                "or train into another folder",
                fix={"overwrite": True, "resume": directory / "model.zip", **ANOTHER_FOLDER},
            )
        if overwrite and not resuming:
            kept = {Path(file).resolve() for file in keep}
            for name in previous:
                if (directory / name).resolve() not in kept:
                    (directory / name).unlink()
        yield directory
    except BaseException:
        lock.unlink(missing_ok=True)
        if created and not any(directory.iterdir()):
            directory.rmdir()
        raise
    lock.unlink(missing_ok=True)
