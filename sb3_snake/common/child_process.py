"""A Python module run as a child process that its parent polls, stops and always reaps.

Work that may crash the process it runs in (a compiler, a driver probe) runs in a child: the parent survives the
child's crash, hang or failure and says what happened in one line (:meth:`ChildProcess.outcome`). The child is
tied to its parent (:func:`tie_to_parent`): it dies with it, so no child outlives a parent killed outright, and
Ctrl-C at a terminal, which reaches the whole process group, is the parent's to handle: the child ignores
SIGINT and is stopped by the parent (:meth:`ChildProcess.stop`: SIGTERM, then SIGKILL, then reaped). The child
is started, not forked: a fresh interpreter (``sys.executable``) shares no OpenMP threads or locks with a parent
that already ran torch (a child forked after the parent used OpenMP can hang). Its output goes to a log file,
whose last line a failure quotes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: The parent's process id, as the child's environment carries it (:func:`tie_to_parent`).
PARENT_ENV = "SB3_SNAKE_PARENT_PID"
#: Seconds a child has to end after SIGTERM before it is killed.
TERMINATE_GRACE = 5.0
#: The child's ``__main__``: it calls ``module.main(arguments)``. Run with ``-m``, the module
#: itself would be ``__main__``, and what the child pickles by reference to its globals (torch's
#: objects, found through ``__main__.torch``) could not be unpickled by the parent. ``python -c``
#: puts the working directory first on ``sys.path``, where a ``json.py`` of wherever training was
#: started would shadow the standard library's: the bootstrap takes that entry (``""``) off and adds
#: the folder the parent imported the module's package from last (Python 3.10 has no ``-P``).
_BOOTSTRAP = (
    "import sys; sys.path[:1] = [p for p in sys.path[:1] if p]; sys.path.append(sys.argv[1]); import importlib; "
    "sys.exit(importlib.import_module(sys.argv[2]).main(sys.argv[3:]))"
)
#: Linux's ``prctl`` option that sends the child a signal when its parent dies.
_PR_SET_PDEATHSIG = 1


class ChildProcess:
    """``module.main(arguments)`` in a child process, its output in ``log``.

    :param module: the module whose ``main`` the child runs, with ``arguments``; its exit code is ``main``'s.
    :param arguments: its command-line arguments.
    :param log: the file that takes the child's stdout and stderr.
    :param timeout: seconds after which :meth:`poll` stops the child (None: never).
    :param env: variables added to the parent's environment for the child.
    """

    def __init__(
        self,
        module: str,
        arguments: Sequence[str],
        log: Path,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
    ):
        self.log, self.timeout = Path(log), timeout
        self.timed_out = False
        self.started = time.monotonic()
        with open(self.log, "wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, package_root(module), module, *arguments],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {}), PARENT_ENV: str(os.getpid())},
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def seconds(self) -> float:
        """Seconds since the child started."""
        return time.monotonic() - self.started

    def poll(self) -> int | None:
        """The child's exit code once it ended (negative: the signal that ended it), else None.
        A child past its timeout is stopped here, and :meth:`outcome` says so."""
        code = self.process.poll()
        if code is None and self.timeout is not None and self.seconds > self.timeout:
            self.timed_out = True
            self.stop()
            code = self.process.returncode
        return code

    def wait(self, interrupted: Callable[[], bool] = lambda: False, interval: float = 0.1) -> int | None:
        """Wait until the child ends (its exit code) or ``interrupted()`` says to stop waiting (None)."""
        while (code := self.poll()) is None:
            if interrupted():
                return None
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(interval)
        return code

    def stop(self) -> None:
        """End the child if it still runs (SIGTERM, then SIGKILL after :data:`TERMINATE_GRACE`
        seconds) and reap it; a child that already ended is only reaped."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(TERMINATE_GRACE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def outcome(self) -> str:
        """How the child ended, in words: ``""`` for exit code 0 (and while it runs), else the
        signal, the timeout, or the exit code with the log's last line."""
        code = self.process.returncode
        if code is None or (code == 0 and not self.timed_out):
            return ""
        if self.timed_out:
            return f"did not finish within {self.timeout:,.0f} s and was stopped"
        if code < 0:
            return f"was killed by {_signal_name(-code)} after {self.seconds:,.0f} s"
        last = last_line(self.log)
        return f"exited with code {code}" + (f": {last}" if last else "")


def package_root(module: str) -> str:
    """The folder the parent imported ``module``'s top-level package from (the child finds it there)."""
    package = sys.modules[module.split(".")[0]]
    return str(Path(package.__file__).resolve().parents[1])


def last_line(path: Path, limit: int = 300) -> str:
    """The last non-empty line of a text file (at most ``limit`` characters), or ``""``."""
    try:
        with open(path, "rb") as file:
            file.seek(max(0, os.fstat(file.fileno()).st_size - 8192))
            lines = file.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    line = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def tie_to_parent() -> None:
    """For a child's main, first: die with the parent (SIGKILL when it dies, on Linux), leave
    Ctrl-C to it (the parent stops the child), and exit at once if the parent is already gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    parent = os.environ.get(PARENT_ENV)
    if parent is not None and parent.isdigit() and os.getppid() != int(parent):
        os._exit(1)  # the parent died before the death signal was set
