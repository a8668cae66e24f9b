"""The ``.env`` file, both directions: read checked line by line, written keeping what else it holds.

It knows the file, not the settings: :class:`~sb3_snake.acceleration.settings.OptimizationSettings`
says which keys are ours and what their values mean. The file is shared with other tools (W&B,
Hugging Face keep ``WANDB_API_KEY``, ``HF_TOKEN`` there): their keys are left to them and listed
once at ``--verbose`` (a line with no ``=`` by its number only: it may be a pasted secret).
Errors, never skipped: a line that cannot be parsed, a key of ours without
a value or set twice (which line should win is a guess), and a key within two edits of one of
ours (a misspelling: it would silently do nothing), named with the key it resembles.
"""

from __future__ import annotations

import io
import logging
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from dotenv import set_key
from dotenv.parser import parse_stream

from sb3_snake.common.errors import SettingsError
from sb3_snake.common.paths import check_writable_file

#: What a key looks like; anything else on a line is no key (and may be a value: never shown).
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
#: A key this close to one of ours (edits, case aside) is taken for a misspelling of it, not for
#: another tool's key: ``USE_BF61``, ``OPTIMAL_BATCHSIZE`` and ``use_bf16`` are refused, while
#: ``OMP_NUM_THREADS`` or ``TORCH_COMPILE_DEBUG`` (real keys of other tools) are four or more away.
MISSPELLING_EDITS = 2
logger = logging.getLogger(__name__)
_listed: set[tuple[str, tuple[str, ...]]] = set()  # (file, other tools' keys) already listed

#: Other tools' keys listed at ``--verbose`` (the rest counted), and the characters shown of each.
LISTED_KEYS, LISTED_KEY_CHARACTERS = 20, 40
#: The largest ``.env`` read: a file of settings and keys is a few kilobytes; beyond this it is not one.
MAX_ENV_FILE_BYTES = 1 << 20
#: The comment line :func:`write_env_lines` keeps up to date with its ``note``.
WRITTEN_BY = "# Written by sb3-snake benchmark --write-env: "


def read_env_file(path: Path, known: Sequence[str]) -> dict[str, str]:
    """The keys and values of a ``.env`` file, checked line by line; every problem is a SettingsError.

    The file must be a regular UTF-8 text file (a directory, a device or a FIFO is refused before
    it is opened, so nothing blocks). Each line is parsed with python-dotenv's own parser (so
    ``export``, quotes, comments and CRLF read as python-dotenv reads them). Only the ``known``
    keys are returned, each set once; other keys are left to their tools unless they look like a
    misspelt known key (:data:`MISSPELLING_EDITS`).
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
    if path.stat().st_size > MAX_ENV_FILE_BYTES:
        raise SettingsError(
            f"env file {str(path)!r} has {path.stat().st_size:,} bytes, more than the {MAX_ENV_FILE_BYTES:,} a .env of "
            "settings and keys holds; pass a file of KEY=value lines"
        )
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise SettingsError(f"env file {str(path)!r} cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise SettingsError(f"env file {str(path)!r} is not UTF-8 text; it must hold KEY=value lines") from None
    values: dict[str, str] = {}
    first_lines: dict[str, int] = {}
    others: list[str] = []
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
            if binding.value is None:  # no "=": a bare word, perhaps a pasted secret; named by its line only
                others.append(f"line {line} (no '=')")
                continue
            if resembled := _misspelt(binding.key, known):
                raise SettingsError(f"{where}: unknown key {binding.key}; did you mean {resembled}?")
            others.append(binding.key)
            continue
        if binding.value is None:
            raise SettingsError(f"{where}: {binding.key} has no value; write {binding.key}=value")
        if binding.key in first_lines:
            raise SettingsError(
                f"{path}: {binding.key} is set twice, on lines {first_lines[binding.key]} and {line}; keep one of them"
            )
        first_lines[binding.key] = line
        values[binding.key] = binding.value
    _list_once(path, others)
    return values


def _misspelt(key: str, known: Sequence[str]) -> str | None:
    """The known key ``key`` is a misspelling of (at most :data:`MISSPELLING_EDITS` edits, case
    aside), or None."""
    # Keys whose lengths differ by more than the edits allowed are further apart than that: no
    # distance is computed for them, so a file of long or many keys reads in linear time.
    near = [name for name in known if abs(len(name) - len(key)) <= MISSPELLING_EDITS]
    distances = {name: _edits(key.upper(), name.upper()) for name in near}
    nearest = min(distances, key=distances.__getitem__, default=None)
    return nearest if nearest is not None and distances[nearest] <= MISSPELLING_EDITS else None


def _edits(a: str, b: str) -> int:
    """Insertions, deletions, substitutions and swaps of neighbours that turn ``a`` into ``b``
    (the optimal string alignment distance)."""
    rows = [list(range(len(b) + 1))]
    for i, char in enumerate(a, 1):
        row = [i]
        for j, other in enumerate(b, 1):
            row.append(min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (char != other)))
            if i > 1 and j > 1 and char == b[j - 2] and a[i - 2] == other:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def _list_once(path: Path, others: list[str]) -> None:
    """Log (INFO, shown at ``--verbose``) the other tools' keys of a file, once per process."""
    told = (str(path), tuple(dict.fromkeys(others)))
    if others and told not in _listed and logger.isEnabledFor(logging.INFO):
        _listed.add(told)
        shown = [_short(name) for name in told[1][:LISTED_KEYS]]
        more = len(told[1]) - len(shown)
        logger.info("%s: left to other tools: %s%s", path, ", ".join(shown), f" and {more:,} more" if more else "")


def _short(name: str) -> str:
    """A key as a line lists it: cut after :data:`LISTED_KEY_CHARACTERS`, with its length."""
    if len(name) <= LISTED_KEY_CHARACTERS:
        return name
    return f"{name[:LISTED_KEY_CHARACTERS]}... ({len(name):,} characters)"


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
