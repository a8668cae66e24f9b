"""The run folder's files that SB3's own tools read, in SB3's formats.

``progress.csv`` (:class:`ProgressCSV`, SB3's CSV logger output), ``monitor.csv``
(:class:`MonitorFile`, SB3's ``ResultsWriter``, as ``VecMonitor`` writes it; ``load_results``
and ``results_plotter`` read it) and ``evaluations.npz`` (:class:`EvaluationsFile`, as
``EvalCallback`` writes it). Each continues the file an earlier segment of the run left in the
folder (``--resume`` into it) instead of replacing it, and is created only when its first record
comes, so a run cancelled before training leaves none.
"""

from __future__ import annotations

import json
import os
import stat
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.logger import CSVOutputFormat
from stable_baselines3.common.monitor import ResultsWriter

from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import check_regular_file, check_writable_dir, output_errors, write_atomically

PROGRESS_NAME, MONITOR_NAME, EVALUATIONS_NAME = "progress.csv", "monitor.csv", "evaluations.npz"
#: The columns monitor.csv has beyond SB3's ``r``, ``l``, ``t`` (VecMonitor's ``info_keywords``).
MONITOR_KEYS = ("score", "is_success", "long_start")


#: A column every progress.csv of SB3's logger has (both learners log it with every row).
PROGRESS_KEY = "time/total_timesteps"
#: The bytes of a run file's first lines read to check whose file it is.
HEADER_BYTES = 1 << 16


def check_continuable(path: Path, what: str) -> None:
    """Refuse, in one line and before training, a ``path`` this run could not continue: a
    symbolic link (never followed: it may point at any file of the user's), a folder or other
    non-regular file, or one this user cannot write. A missing file is fine: it is created."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    move = f"move it away to resume into {path.parent}"
    if stat.S_ISLNK(status.st_mode):
        raise UsageError(f"{what} {path} is a symbolic link, which sb3-snake does not write through; {move}")
    if not stat.S_ISREG(status.st_mode):
        raise UsageError(f"{what} {path} is not a regular file (a folder, say); {move}")
    if not os.access(path, os.W_OK) or not status.st_mode & stat.S_IWUSR:  # marked read-only: kept so, root or not
        raise UsageError(f"{what} {path} is read-only; make it writable or {move}")


def check_run_files(run_dir: Path, tensorboard: Path | None = None) -> None:
    """Refuse, before training, a run folder whose SB3 files this run could not continue
    (:class:`ProgressCSV`'s and :class:`MonitorFile`'s checks), or a ``tensorboard`` folder that
    cannot be written (a file in its place, say)."""
    check_progress_file(Path(run_dir) / PROGRESS_NAME)
    MonitorFile(Path(run_dir) / MONITOR_NAME)
    if tensorboard is not None:
        check_writable_dir(tensorboard, "TensorBoard folder", create=True)


def check_progress_file(path: Path) -> None:
    """Refuse a ``progress.csv`` this run could not continue: not :func:`check_continuable`, or
    not SB3's CSV of a run (another tool's file, bytes that are not text)."""
    check_continuable(path, "progress file")
    if path.exists() and path.stat().st_size:
        expected = f"a progress.csv of SB3's logger (its first line names {PROGRESS_KEY})"
        if PROGRESS_KEY not in _first_line(path, "progress file", expected).split(","):
            raise UsageError(f"progress file {path} is not {expected}; move it away to resume into {path.parent}")


def _first_line(path: Path, what: str, expected: str) -> str:
    """The first line of ``path`` as text, or a :class:`UsageError` (saying it is not ``expected``)
    when it is not text."""
    with path.open("rb") as file:
        head = file.read(HEADER_BYTES)
    try:
        return head.split(b"\n", 1)[0].decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(
            f"{what} {path} is not text, so not {expected}; move it away to resume into {path.parent}"
        ) from None


def _open_no_follow(path: Path, create: bool) -> Any:
    """``path`` opened for reading and writing, never through a link (created when ``create``)."""
    flags = os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT | os.O_EXCL if create else 0)
    return open(os.open(path, flags, 0o644), "r+")


def _drop_partial_line(path: Path) -> None:
    """Cut a last line that a killed writer left without its newline, so rows appended next stay rows."""
    with path.open("rb+") as file:
        size = file.seek(0, os.SEEK_END)
        tail_start = max(0, size - 4096)  # far longer than any row of these files
        file.seek(tail_start)
        tail = file.read()
        if tail and not tail.endswith(b"\n"):
            file.truncate(tail_start + tail.rfind(b"\n") + 1)


class ProgressCSV(CSVOutputFormat):
    """SB3's CSV output (``progress.csv``), opened at its first row and continuing a file that
    is there: SB3's own opens the file when made, truncating it. A failed write is an
    :class:`~sb3_snake.common.errors.OutputError` naming the file."""

    def __init__(self, path: Path):
        self.path, self.file, self.keys, self.separator, self.quotechar = Path(path), None, [], ",", '"'
        check_progress_file(self.path)  # a resumed run's: SB3's CSV of a run, or refused

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        with output_errors(self.path):
            if self.file is None:
                self._open()
            super().write(key_values, key_excluded, step)

    def _open(self) -> None:
        if not os.path.lexists(self.path):
            self.file = _open_no_follow(self.path, create=True)  # held until close(), as SB3's own
            return
        _drop_partial_line(self.path)
        self.file = _open_no_follow(self.path, create=False)
        header = self.file.readline().rstrip("\n")
        self.keys = header.split(",") if header else []  # SB3 writes the keys unquoted, without commas
        self.file.seek(0, os.SEEK_END)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class MonitorFile:
    """``monitor.csv`` as SB3's ``VecMonitor`` writes it, through SB3's ``ResultsWriter``: a
    ``#`` line with ``t_start``, then ``r``, ``l``, ``t`` (seconds since ``t_start``) and
    :data:`MONITOR_KEYS`, a row per episode. A file there (a resumed run) is continued on its own
    clock, so ``load_results`` reads the segments as one run; one this run could not continue is a
    :class:`UsageError` when this is made, before training."""

    def __init__(self, path: Path):
        self.path, self.writer = Path(path), None
        check_continuable(self.path, "monitor file")
        self.t_start = self._continued_start() if self.path.exists() else None

    def _continued_start(self) -> float:
        columns = ",".join(("r", "l", "t", *MONITOR_KEYS))
        try:
            with self.path.open() as file:
                header, names = file.readline(), file.readline().rstrip("\n")
            t_start = json.loads(header[1:])["t_start"] if header.startswith("#") else None
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
            t_start = None
        if isinstance(t_start, bool) or not isinstance(t_start, (int, float)) or names != columns:
            raise UsageError(
                f"{self.path} is not a monitor.csv of sb3-snake (a '#' line with t_start, then the columns "
                f"{columns}); move it away to resume into {self.path.parent}"
            )
        return float(t_start)

    def open(self, env_id: str) -> None:
        with output_errors(self.path):
            if self.t_start is None:
                self.t_start = time.time()
                header = {"t_start": self.t_start, "env_id": env_id}
                self.writer = ResultsWriter(str(self.path), header=header, extra_keys=MONITOR_KEYS)
            else:
                _drop_partial_line(self.path)
                self.writer = ResultsWriter(str(self.path), extra_keys=MONITOR_KEYS, override_existing=False)

    def write(self, infos: list[dict[str, Any]]) -> None:
        """A row for each finished game's VecEnv ``info``; one clock reading for games that ended together."""
        elapsed = round(time.time() - self.t_start, 6)
        rows = [
            {"r": info["episode"]["r"], "l": info["episode"]["l"], "t": elapsed, **{k: info[k] for k in MONITOR_KEYS}}
            for info in infos
        ]
        with output_errors(self.path):
            # ResultsWriter.write_row flushes every row; thousands of games may end in one step.
            self.writer.logger.writerows(rows)
            self.writer.file_handler.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class EvaluationsFile:
    """``evaluations.npz`` as SB3's ``EvalCallback`` writes it, rewritten atomically at each
    evaluation: ``timesteps`` (E,), then ``results`` (returns), ``ep_lengths`` (env steps) and
    ``successes`` (games won), each (E, ``games``). A file there (a resumed run) is continued: a
    :class:`UsageError` when it cannot be read or holds evaluations of another number of games.
    """

    KEYS = ("timesteps", "results", "ep_lengths", "successes")

    def __init__(self, path: Path, games: int):
        self.path, self.games = Path(path), games
        self.columns: dict[str, list] = {key: [] for key in self.KEYS}
        if self.path.exists():
            self._continue()

    def _continue(self) -> None:
        check_regular_file(self.path, "evaluations file")
        try:
            with np.load(self.path, allow_pickle=False) as saved:
                arrays = {key: saved[key] for key in self.KEYS}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            raise UsageError(
                f"{self.path} cannot be read ({error}); move it away to resume into {self.path.parent}"
            ) from None
        widths = {arrays[key].shape[1:] for key in self.KEYS[1:]} | {(self.games,)}
        lengths = {array.shape[:1] for array in arrays.values()}
        if len(widths) > 1 or len(lengths) > 1:
            raise UsageError(
                f"{self.path} holds evaluations of another shape ({arrays['results'].shape}) than this run's "
                f"{self.games} games each: resume with the evaluation games as before, or into another folder",
                fix={"select_episodes": arrays["results"].shape[1], "run_dir": "change"},
            )
        self.columns = {key: array.tolist() for key, array in arrays.items()}

    def add(self, timesteps: int, returns: list[float], steps: list[int], won: list[bool]) -> None:
        for key, value in zip(self.KEYS, (timesteps, returns, steps, won), strict=True):
            self.columns[key].append(value)
        arrays = {
            "timesteps": np.array(self.columns["timesteps"], dtype=np.int64),
            "results": np.array(self.columns["results"], dtype=np.float64),
            "ep_lengths": np.array(self.columns["ep_lengths"], dtype=np.int64),
            "successes": np.array(self.columns["successes"], dtype=bool),
        }
        write_atomically(self.path, lambda temporary: np.savez(temporary, **arrays))
