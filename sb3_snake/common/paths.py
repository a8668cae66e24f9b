"""Output paths checked before any work, and files written so that a crash never leaves half a file.

Every command checks where it will write *before* it trains, plays or measures
(:func:`check_writable_dir`, :func:`check_writable_file`), by creating and removing a probe
file there: permission bits alone do not tell (root passes every ``access`` check, and
``/proc`` or ``/sys`` refuse new files whatever the bits say).

:func:`atomic_write` writes through a temporary file whose name is unique to the process and
the call, then renames it over the target: readers see the old file or the new one, never a
mix, two processes writing the same target never share a temporary file, and an interrupted
write (an exception, or Ctrl-C) removes its temporary file.

:func:`claim_new_path` names a new file or folder after a timestamp without ever taking one
that exists: two commands started in the same second get ``<stamp>`` and ``<stamp>-2``.

Every file the project reads is first checked to be a regular file
(:func:`check_regular_file`): opening a FIFO blocks until something writes to it, and a
device or a folder is never what was meant.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sb3_snake.common.errors import UsageError

#: What every temporary file of :func:`atomic_write` has in its name; :func:`remove_temporary_files`
#: removes left-overs of crashed writers by this mark.
TEMPORARY_MARK = ".tmp."


def _probe(directory: Path, failure: str) -> None:
    """Create and remove a file in ``directory``; UsageError ``failure (reason)`` if that fails."""
    try:
        descriptor, probe = tempfile.mkstemp(dir=directory, prefix=".sb3-snake-probe-")
    except OSError as error:
        raise UsageError(f"{failure} ({error.strerror or error})") from None
    os.close(descriptor)
    os.unlink(probe)


def check_writable_dir(path: Path, what: str = "output folder", create: bool = False) -> None:
    """Raise UsageError unless files can be created in folder ``path``.

    :param create: the folder may not exist yet; then its nearest existing parent must be a
        writable folder (nothing is created here).
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path} is a file, not a folder; pass a folder")
    target = path
    if not path.exists():
        if not create:
            raise UsageError(f"{what} {path} does not exist; create it first")
        target = next((parent for parent in path.absolute().parents if parent.exists()), Path("/"))
        if not target.is_dir():
            raise UsageError(f"{what} {path} cannot be created: {target} is not a folder")
    _probe(target, f"{what} {path} is not writable; choose another place")


def check_writable_file(path: Path, suffixes: Sequence[str] = (), what: str = "output file") -> None:
    """Raise UsageError unless ``path`` can be written: an allowed suffix, not a folder, in a
    writable existing folder."""
    path = Path(path)
    if suffixes and path.suffix.lower() not in suffixes:
        raise UsageError(f"{what} {path} must end in {' or '.join(suffixes)}")
    if path.is_dir():
        raise UsageError(f"{what} {path} is a folder; pass a file name")
    if path.exists() and not path.is_file():
        raise UsageError(f"{what} {path} is not a regular file; pass a file name")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"{what} {path}: folder {parent} does not exist; create it first")
    _probe(parent, f"{what} {path}: folder {parent} is not writable")


def regular_file_problem(path: Path) -> str | None:
    """Why ``path`` is not a regular file that can be read without blocking, or None when it is
    one or does not exist (``stat`` follows symlinks and never blocks, unlike ``open`` on a FIFO)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special"
    return f"is {kind}, not a regular file"


def check_regular_file(path: Path, what: str = "file") -> None:
    """Raise UsageError naming ``path`` when it exists but is not a regular file (a FIFO, a device,
    a folder), so that reading it can neither block nor read something unintended."""
    problem = regular_file_problem(Path(path))
    if problem:
        raise UsageError(f"{what} {path} {problem}; pass a regular file")


#: What a full disk (or quota, or file-size limit) raises while writing.
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class WriteFailed(OSError):
    """A file could not be written for want of space: the path, in one line. Nothing is left
    half-written (:func:`atomic_write` removed its temporary file) and the file it would have
    replaced is intact."""

    def __init__(self, path: Path, error: OSError):
        super().__init__(error.errno, f"cannot write {path}: {error.strerror or error}")
        self.path = path

    def __str__(self) -> str:
        return self.strerror or super().__str__()


@contextmanager
def atomic_write(path: Path) -> Iterator[Path]:
    """Yield a unique temporary path beside ``path``; on success rename it over ``path``.

    The temporary name keeps ``path``'s suffix (``model.zip`` -> ``model.tmp.<random>.zip``), so
    writers that add a suffix of their own, like SB3's ``save``, write exactly there.
    """
    path = Path(path)
    # A name unique to this process and call, created by the writer itself (so with the usual
    # permissions; mkstemp's files are private to the user).
    temporary = path.with_name(f"{path.stem}{TEMPORARY_MARK}{os.getpid()}-{secrets.token_hex(6)}{path.suffix}")
    try:
        yield temporary
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, WriteFailed) or error.errno not in DISK_ERRORS:
            raise
        raise WriteFailed(path, error) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(temporary_path)``, then rename the result over ``path``."""
    with atomic_write(path) as temporary:
        write(temporary)


def write_text_atomically(path: Path, text: str) -> None:
    write_atomically(path, lambda temporary: temporary.write_text(text))


def remove_temporary_files(directory: Path) -> list[Path]:
    """Remove the temporary files that interrupted writers left in ``directory``; return them."""
    removed = []
    for path in Path(directory).iterdir():
        if TEMPORARY_MARK in path.name and path.is_file():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def claim_new_path(directory: Path, stem: str, suffix: str = "", *, folder: bool = False) -> Path:
    """Create and return ``directory/<stem><suffix>``, or ``<stem>-2<suffix>``, ``-3``, ...: the
    first that did not exist, as an empty file or (``folder``) an empty folder. Creation is
    exclusive (``mkdir``, or ``open`` with ``x``), so two processes never claim the same path."""
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(1, 10_000):
        path = directory / f"{stem}{'' if index == 1 else f'-{index}'}{suffix}"
        try:
            if folder:
                path.mkdir()
            else:
                path.open("x").close()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free name for {stem}{suffix} in {directory}; remove old ones")
