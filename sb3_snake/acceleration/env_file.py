"""The ``.env`` file, both directions: read checked line by line, written keeping what else it holds.

It knows the file, not the settings: :class:`~sb3_snake.acceleration.settings.OptimizationSettings`
says which keys are known and what their values mean. A line that cannot be parsed, a key
without a value, an unknown key (named with the nearest known one) and a key set twice (which
line should win is a guess, and the other line would be skipped) are errors, never skipped.
"""

from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from dotenv import set_key
from dotenv.parser import parse_stream

from sb3_snake.acceleration.setting_values import SettingsError
from sb3_snake.common.errors import did_you_mean
from sb3_snake.common.paths import check_writable_file

#: What a key looks like; anything else on a line is no key (and may be a value: never shown).
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
#: The comment line :func:`write_env_lines` keeps up to date with its ``note``.
WRITTEN_BY = "# Written by sb3-snake benchmark --write-env: "


def read_env_file(path: Path, known: Sequence[str]) -> dict[str, str]:
    """The keys and values of a ``.env`` file, checked line by line; every problem is a SettingsError.

    The file must be a regular UTF-8 text file (a directory, a device or a FIFO is refused before
    it is opened, so nothing blocks). Each line is parsed with python-dotenv's own parser, and
    must set one of the ``known`` keys, once.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise SettingsError(f"env file {str(path)!r} does not exist; pass an existing file or leave it out") from None
    except OSError as error:
        raise SettingsError(f"env file {str(path)!r} cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise SettingsError(f"env file {str(path)!r} is {kind}; pass a text file of KEY=value lines")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise SettingsError(f"env file {str(path)!r} cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise SettingsError(f"env file {str(path)!r} is not UTF-8 text; it must hold KEY=value lines") from None
    values: dict[str, str] = {}
    first_lines: dict[str, int] = {}
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        where = f"line {line} of {path}"
        if binding.error or (binding.key is not None and not _KEY.fullmatch(binding.key)):
            # its key, never its value: the line may hold another tool's secret
            key = _key_of(binding.original.string)
            named = f" (key {key}: an unterminated quote?)" if key else " (an unterminated quote?)"
            raise SettingsError(f"{where} cannot be parsed{named}; write KEY=value")
        if binding.key is None:
            continue  # a comment or a blank line
        if binding.key not in known:
            raise SettingsError(f"{where}: unknown key {binding.key}; {did_you_mean(binding.key, known)}")
        if binding.value is None:
            raise SettingsError(f"{where}: {binding.key} has no value; write {binding.key}=value")
        if binding.key in first_lines:
            raise SettingsError(
                f"{path}: {binding.key} is set twice, on lines {first_lines[binding.key]} and {line}; keep one of them"
            )
        first_lines[binding.key] = line
        values[binding.key] = binding.value
    return values


def _key_of(text: str) -> str:
    """The key a ``.env`` line sets (``KEY=...`` or ``export KEY=...``), or ``""`` where none reads as one."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    name = first.removeprefix("export ").split("=", 1)[0].strip()
    return name if _KEY.fullmatch(name) and "=" in first else ""


def check_env_file_writable(path: str | os.PathLike) -> None:
    """Raise SettingsError unless ``path`` can be written as a ``.env`` (checked before any work)."""
    try:
        check_writable_file(Path(path), what="env file")
    except ValueError as error:
        raise SettingsError(str(error)) from None


def write_env_lines(path: str | os.PathLike, lines: Mapping[str, str], note: str | None = None) -> None:
    """Set ``KEY=value`` ``lines`` in the ``.env`` at ``path``, keeping its other lines and comments
    (an existing key is replaced in place, a new one appended; the file is created if missing).
    ``note`` (where the values came from) replaces the previous :data:`WRITTEN_BY` note, or is
    appended. The values are written as given: check them first."""
    path = Path(path)
    path.touch(exist_ok=True)
    for key, text in lines.items():
        set_key(path, key, text, quote_mode="never")
    if note is not None:
        kept = [line for line in path.read_text().splitlines() if not line.startswith(WRITTEN_BY)]
        path.write_text("\n".join([*kept, WRITTEN_BY + note]) + "\n")
