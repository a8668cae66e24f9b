"""Output paths checked before any work, and files written so that a crash never leaves half a file.

- :func:`check_writable_dir`, :func:`check_writable_file`: every command probes where it will write (a file
  created and removed there) before it trains, plays or measures.
- :func:`atomic_write`: through a temporary file unique to the process and the call, renamed over the target;
  readers see the old file or the new one, and a failed write is one :class:`~sb3_snake.common.errors.OutputError`.
- :func:`cache_dir`, :func:`private_dir`, :func:`read_private`: caches of our own output only, private to the user.
- :func:`claim_new_path`: a new timestamped name, never one that exists.
- :func:`check_regular_file`: every file the project reads is first checked to be a regular file.

Design notes: docs/design-notes.md, "sb3_snake/common/paths.py".
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import platformdirs

from sb3_snake.common.errors import OutputError, UsageError

#: Environment variable naming the package's cache folder (:func:`cache_dir`).
CACHE_ENV = "SB3_SNAKE_CACHE_DIR"
#: What every temporary file of :func:`atomic_write` has in its name; :func:`remove_temporary_files`
#: removes left-overs of crashed writers by this mark.
TEMPORARY_MARK = ".tmp."
_PROBE_PREFIX = ".sb3-snake-probe-"
#: The random characters ``tempfile.mkstemp`` puts in a name.
_MKSTEMP_RANDOM = 8


def _create_probe(directory: Path, name_length: int = 0) -> None:
    """Create and remove a file in ``directory`` whose name is at least ``name_length`` bytes long."""
    padding = "-" * max(0, name_length - len(_PROBE_PREFIX) - _MKSTEMP_RANDOM)
    descriptor, probe = tempfile.mkstemp(dir=directory, prefix=_PROBE_PREFIX, suffix=padding)
    os.close(descriptor)
    os.unlink(probe)


def _probe(directory: Path, failure: str) -> None:
    """Create and remove a file in ``directory``; UsageError ``failure (reason)`` if that fails."""
    try:
        _create_probe(directory)
    except OSError as error:
        raise UsageError(f"{failure} ({error.strerror or error})") from None


def _temporary_path(path: Path) -> Path:
    """The temporary file :func:`atomic_write` writes ``path`` through: a name unique to this
    process and call, that keeps ``path``'s suffix (``model.zip`` -> ``model.tmp.<random>.zip``)."""
    return path.with_name(f"{path.stem}{TEMPORARY_MARK}{os.getpid()}-{secrets.token_hex(6)}{path.suffix}")


def _link_target(path: Path) -> Path:
    """The file a symbolic link ``path`` points to (as far as it resolves), else ``path`` itself."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


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
    """Raise UsageError unless :func:`atomic_write` can write ``path``: an allowed suffix, not a
    folder, a name the file system takes, in a writable existing folder. A symbolic link is
    checked as what it points to, where the file will be written (:func:`atomic_write`)."""
    path = Path(path)
    if suffixes and path.suffix.lower() not in suffixes:
        raise UsageError(f"{what} {path} must end in {' or '.join(suffixes)}")
    too_long = f"{what} {path}: the file name is too long for the file system; choose a shorter one"
    try:
        target = _link_target(path)
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise UsageError(too_long) from None
        raise UsageError(f"{what} {path} cannot be used ({error.strerror or error}); pass another file name") from None
    shown = f"{what} {path}" if target == path else f"{what} {path} (a link to {target})"
    if mode is not None and stat.S_ISDIR(mode):
        raise UsageError(f"{shown} is a folder; pass a file name")
    if mode is not None and not stat.S_ISREG(mode):
        raise UsageError(f"{shown} is not a regular file; pass a file name")
    parent = target.parent
    if not parent.is_dir():
        raise UsageError(f"{shown}: folder {parent} does not exist; create it first")
    try:
        _create_probe(parent, name_length=len(os.fsencode(_temporary_path(target).name)))
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise UsageError(too_long) from None
        raise UsageError(f"{shown}: folder {parent} is not writable ({error.strerror or error})") from None


def regular_file_problem(path: Path) -> str | None:
    """Why ``path`` is not a regular file that can be read without blocking, or None when it is
    one or does not exist (``stat`` follows symlinks and never blocks, unlike ``open`` on a FIFO)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    return _kind_problem(mode)


def _kind_problem(mode: int) -> str | None:
    """Why a file of ``mode`` is not a regular file, or None when it is one."""
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


def read_json(path: Path, fix: str, what: str = "JSON", kind: str = "file") -> Any:
    """The JSON value in ``path``; a UsageError naming ``path`` and ending with ``fix`` when it does
    not exist, is not a regular file (``kind`` names what it should be), cannot be read, or is
    not JSON (``what`` names the JSON expected)."""
    if not os.path.exists(path):
        raise UsageError(f"{path} does not exist; {fix}")
    problem = regular_file_problem(Path(path))
    if problem:
        raise UsageError(f"{kind} {path} {problem}; {fix}")
    try:
        return json.loads(Path(path).read_bytes().decode("utf-8"))
    except OSError as error:
        raise UsageError(f"{path} cannot be read ({error.strerror or error})") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # RecursionError: nested too deep
        raise UsageError(f"{path} is not {what}; {fix}") from None


@contextmanager
def output_errors(path: Path) -> Iterator[None]:
    """An ``OSError`` of writing ``path`` (a full disk, a quota, an I/O error) leaves the block as
    an :class:`OutputError` naming the file: one line for the user, not a traceback."""
    try:
        yield
    except OutputError:
        raise
    except OSError as error:
        raise OutputError(path, error.strerror or str(error), error.errno) from None


@contextmanager
def atomic_write(path: Path, follow_links: bool = True) -> Iterator[Path]:
    """Yield a unique temporary path beside ``path``; on success rename it over ``path`` (over the
    file it points to, when ``path`` is a symbolic link, unless not ``follow_links``: then over
    the link itself).

    The temporary name keeps ``path``'s suffix (``model.zip`` -> ``model.tmp.<random>.zip``), so
    writers that add a suffix of their own, like SB3's ``save``, write exactly there.
    """
    path = _link_target(Path(path)) if follow_links else Path(path)
    # Created by the writer itself, so with the usual permissions (mkstemp's files are private to the user).
    temporary = _temporary_path(path)
    try:
        # an inner write of the same pair (a model and its replay buffer) keeps its own file's name
        with output_errors(path):
            yield temporary
            os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(temporary_path)``, then rename the result over ``path``."""
    with atomic_write(path) as temporary:
        write(temporary)


def write_text_atomically(path: Path, text: str) -> None:
    write_atomically(path, lambda temporary: temporary.write_text(text))


class UntrustedCacheError(OSError):
    """A cache folder or file that is not the user's own: it is not used, and this says why."""


def _private_problem(status: os.stat_result) -> str:
    """Why a file or folder of ``status`` is not private to this user (``""`` when it is)."""
    if hasattr(os, "getuid") and status.st_uid != os.getuid():
        return f"belongs to another user (uid {status.st_uid})"
    if status.st_mode & 0o022:
        return f"can be written by others (mode {stat.S_IMODE(status.st_mode):o})"
    return ""


def private_dir(folder: Path) -> Path:
    """``folder``, created for this user alone (mode 0700) where it is missing. Raises
    :class:`UntrustedCacheError` when it is another user's or others may write to it (or it
    is no folder), and OSError when it cannot be created."""
    folder = Path(folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    status = os.stat(folder)
    problem = "is not a folder" if not stat.S_ISDIR(status.st_mode) else _private_problem(status)
    if problem:
        raise UntrustedCacheError(f"cache folder {folder} {problem}; not used")
    return folder


def read_private(path: Path, max_bytes: int) -> bytes:
    """The bytes of cache file ``path``, opened without following a link. Raises
    FileNotFoundError where there is none, :class:`UntrustedCacheError` (one line) where it is a
    link, not a regular file, not private to this user, larger than ``max_bytes``, or in a folder
    that is not (:func:`private_dir`'s checks), and OSError where it cannot be read."""
    path = Path(path)
    try:
        folder = os.stat(path.parent)
    except FileNotFoundError:
        raise FileNotFoundError(path) from None
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UntrustedCacheError(f"cache file {path} is a symbolic link; not used") from None
        raise
    with os.fdopen(descriptor, "rb") as file:
        status, folder_problem = os.fstat(descriptor), _private_problem(folder)
        problem = (
            _kind_problem(status.st_mode)
            or _private_problem(status)
            or (f"lies in a folder that {folder_problem}" if folder_problem else "")
            or (f"is larger than {max_bytes:,} bytes" if status.st_size > max_bytes else "")
        )
        if problem:
            raise UntrustedCacheError(f"cache file {path} {problem}; not used")
        return file.read()


def write_private(path: Path, data: bytes) -> None:
    """Write cache file ``path`` atomically in its :func:`private_dir`, replacing a link at
    ``path`` rather than writing where it points."""
    private_dir(Path(path).parent)
    with atomic_write(path, follow_links=False) as temporary:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)


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


def cache_dir() -> Path:
    """The package's cache folder (measured ``auto`` choices, compiled updates):
    ``$SB3_SNAKE_CACHE_DIR``, else the platform's user cache folder from ``platformdirs``
    (``$XDG_CACHE_HOME/sb3-snake``, else ``~/.cache/sb3-snake`` on Linux; ``~/Library/Caches`` on
    macOS; ``%LOCALAPPDATA%`` on Windows)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(platformdirs.user_cache_dir("sb3-snake", appauthor=False))
