"""User errors: bad input, told in one line that says what was wrong and how to fix it.

:class:`UsageError` is raised where input is checked (a flag, a ``.env`` line, a file, a saved
model). The command line turns exactly these into one line on stderr and exit code 2; every
other exception is a bug or a failure of the machine and keeps its traceback (exit 1), so a
bug never looks like a user's mistake. It subclasses ``ValueError`` so that Python callers who
catch ``ValueError`` for bad arguments keep working.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable, Sequence
from typing import Any


class FixableError(Exception):
    """An error whose message is followed by the arguments that would fix it.

    :param message: what was wrong, in the library's words.
    :param fix: those arguments, by the library's names (``{"board_size": 10}``), or the way to
        move one (``{"learning_rate": "lower"}``): ``str()`` says them as Python arguments
        (:func:`fix_words`), the command line as its flags.
    """

    def __init__(self, message: str, fix: dict[str, Any] | None = None):
        super().__init__(message)
        self.message, self.fix = message, dict(fix or {})

    def __str__(self) -> str:
        return f"{self.message}; {fix_words(self.fix)}" if self.fix else self.message


class UsageError(FixableError, ValueError):
    """Input that cannot be used; the message names the value and where it came from."""


class TrainingDiverged(FixableError, RuntimeError):
    """A learner's loss became NaN or infinite: the networks' weights can no longer be trusted."""

    @classmethod
    def check(cls, loss: float, updates: int, learning_rate: object) -> None:
        """Raise unless ``loss``, the mean loss up to update ``updates``, is finite."""
        if not math.isfinite(loss):
            raise cls(
                f"the TD loss became {loss} by update {updates} (learning rate {learning_rate})",
                fix={"learning_rate": "lower"},
            )


#: The ways a fix may name an argument rather than give its value: move a number, or choose
#: another value (``set`` one left to its default, ``change`` one given).
DIRECTIONS = ("lower", "raise", "set", "change")


class SettingsError(UsageError):
    """A setting or option has a value that cannot be used; the message names key, value and origin."""


def fix_words(fix: dict[str, Any], name: Callable[[str, Any], str] | None = None) -> str:
    """``fix`` (:class:`FixableError`'s) in words, its items as alternatives: ``pass board_size=10``,
    ``lower batch_size or raise buffer_size``; ``name(argument, value)`` says an argument
    otherwise (the command line: as its flag)."""
    said = name or (lambda argument, value: argument if value in DIRECTIONS else f"{argument}={_plain(value)!r}")
    ways = [f"{value if value in DIRECTIONS else 'pass'} {said(argument, value)}" for argument, value in fix.items()]
    return " or ".join(ways)


def _plain(value: Any) -> Any:
    """A path as the text it names (``'runs/x'``, not ``PosixPath('runs/x')``)."""
    return str(value) if isinstance(value, os.PathLike) else value


class OutputError(OSError):
    """A file that could not be written although its place was checked first: the machine failed
    (a full disk, a quota, an I/O error), not the user's input. Whatever wrote it through
    :func:`~sb3_snake.common.paths.atomic_write` left no partial file and the previous file as it
    was. The command line reports it as one line naming the file, with exit code 1: a traceback
    would say nothing more about a full disk.

    :param note: what stayed as it was (default: the file itself; a run names its last good checkpoint).
    """

    def __init__(self, path: Any, reason: str, errno_: int | None = None, note: str = "it was left as it was"):
        super().__init__(errno_, f"cannot write {path} ({reason}); {note}")
        self.path, self.reason = path, reason

    def __str__(self) -> str:
        return str(self.strerror)


def did_you_mean(given: str, known: Sequence[str]) -> str:
    """The hint for an unknown name: ``"did you mean X?"`` for a close known name, else the list
    of known names (``"known: a, b, c"``)."""
    nearest = difflib.get_close_matches(str(given), list(known), n=1, cutoff=0.5)
    return f"did you mean {nearest[0]}?" if nearest else f"known: {', '.join(known)}"


def divisors_near(number: int, wanted: object) -> str:
    """The hint for a size that must divide ``number``: its divisors just below and above
    ``wanted`` (``"64 or 128"``; the smallest ones where ``wanted`` is no number)."""
    divisors = [d for d in range(1, number + 1) if number % d == 0]
    target = wanted if isinstance(wanted, int) and not isinstance(wanted, bool) else 1
    return " or ".join(map(str, [d for d in divisors if d < target][-1:] + [d for d in divisors if d > target][:1]))
