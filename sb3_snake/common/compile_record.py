"""The last training compile's outcome on this machine, kept for the capability report.

A training run writes one line of what its compile did (adopted, failed with the reason, or
stopped with training) to ``compiled/last.json`` in the cache folder
(:func:`~sb3_snake.common.paths.cache_dir`); ``python test_optimizations.py`` shows it. A file
that cannot be written or read, or is not the user's own, is no record: nothing else depends on it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sb3_snake.common.paths import cache_dir, read_private, write_private

#: A record is one line; anything far larger is not one of ours.
MAX_RECORD_BYTES = 1 << 16


def record_path() -> Path:
    return cache_dir() / "compiled" / "last.json"


def record_compile(outcome: str, compiled: bool) -> None:
    """Keep ``outcome`` (one line) as the last compile's, and whether it ``compiled``."""
    entry = {"outcome": outcome, "compiled": compiled, "at": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    try:
        write_private(record_path(), json.dumps(entry).encode())
    except OSError:  # UntrustedCacheError among them: no record is kept there
        pass


def last_compile() -> dict[str, Any] | None:
    """The last record (``outcome``, ``compiled``, ``at``), or None."""
    try:
        entry = json.loads(read_private(record_path(), MAX_RECORD_BYTES))
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and isinstance(entry.get("outcome"), str) else None
