"""The values a setting of :class:`~sb3_snake.acceleration.settings.OptimizationSettings` takes.

Each kind of value is one :class:`Values`: how it is parsed from text (``.env``, the environment,
a flag), how it is checked as a Python value (a field set in Python), and the two in words for
the configuration table. A setting's declaration names its kind; nothing else parses or checks.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sb3_snake.common.errors import UsageError

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: ``SDPA_BACKEND`` values: ``auto`` or one ``torch.nn.attention.SDPBackend`` kernel.
SDPA_BACKENDS = ("auto", "flash", "efficient", "math", "cudnn")
#: The value of a setting that is measured on the machine that runs it (:mod:`sb3_snake.autotune`).
AUTO = "auto"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
#: Threads per core beyond which ``TORCH_NUM_THREADS`` is refused (huge counts crash OpenMP).
MAX_THREADS_PER_CORE = 4


class SettingsError(UsageError):
    """A setting has a value that cannot be used; the message names key, value and origin."""


@dataclass(frozen=True)
class Values:
    """The values a setting takes: in words (for the table), parsed from text (``.env``, the
    environment, a flag) and checked as a Python value (a field set in Python)."""

    words: str
    parse: Callable[[str], Any]  #: text to value; a ValueError says what was expected
    check: Callable[[Any], str]  #: ``""`` for a value that can be used, else what was expected


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected true/false, 1/0, yes/no or on/off")


def _parse_switch(text: str) -> bool | str:
    if str(text).strip().lower() == AUTO:
        return AUTO
    try:
        return _parse_bool(text)
    except ValueError:
        raise ValueError("expected true/false, 1/0, yes/no, on/off or auto") from None


def _parse_batch_size(text: str) -> int | str:
    if str(text).strip().lower() == AUTO:
        return AUTO
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ValueError("expected a positive integer or auto") from None
    if value < 1:
        raise ValueError("expected a positive integer or auto")
    return value


def _check_batch_size(value: Any) -> str:
    if value == AUTO or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return ""
    return "expected a positive integer or 'auto'"


def max_threads() -> int:
    """The most ``TORCH_NUM_THREADS`` may be on this machine."""
    return MAX_THREADS_PER_CORE * (os.cpu_count() or 1)


def _threads_problem(value: Any) -> str:
    if value == AUTO:
        return ""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= max_threads():
        return f"expected auto or an integer from 1 to {max_threads()} ({MAX_THREADS_PER_CORE}x this machine's cores)"
    return ""


def _parse_threads(text: str) -> int | str:
    text = str(text).strip().lower()
    try:
        value: int | str = AUTO if text == AUTO else int(text)
    except ValueError:
        value = text
    problem = _threads_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _count_problem(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return "expected an integer of 0 or more"
    return ""


def _parse_count(text: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ValueError(_count_problem(None)) from None
    problem = _count_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def choice(options: tuple[str, ...]) -> Values:
    """One of ``options``, spelled in any case."""
    expected = f"expected one of {', '.join(options)}"

    def parse(text: str) -> str:
        value = str(text).strip().lower()
        if value not in options:
            raise ValueError(expected)
        return value

    return Values(", ".join(options), parse, lambda value: "" if value in options else expected)


_BOOL_WORDS = "true/false (or 1/0, yes/no, on/off)"
SWITCH = Values(_BOOL_WORDS, _parse_bool, lambda value: "" if isinstance(value, bool) else "expected True or False")
SWITCH_OR_AUTO = Values(
    f"{_BOOL_WORDS}, or auto",
    _parse_switch,
    lambda value: "" if isinstance(value, bool) or value == AUTO else "expected True, False or 'auto'",
)
BATCH_SIZE = Values("integer > 0, or auto", _parse_batch_size, _check_batch_size)
THREADS = Values(f"auto, or 1 to {MAX_THREADS_PER_CORE}x the CPU cores", _parse_threads, _threads_problem)
COUNT = Values("integer >= 0", _parse_count, _count_problem)
