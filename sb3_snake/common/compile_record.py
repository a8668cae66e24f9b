"""The last training compile's outcome on this machine, kept for the capability report.

A training run writes one line of what its compile did (adopted, failed with the reason, or
stopped with training) to ``compiled/last.json`` in the cache folder
(:func:`~sb3_snake.common.paths.cache_dir`); ``python test_optimizations.py`` shows it. A file
that cannot be written or read is no record: nothing else depends on it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sb3_snake.common.paths import cache_dir, regular_file_problem, write_text_atomically


def record_path() -> Path:
    return cache_dir() / "compiled" / "last.json"


def record_compile(outcome: str, compiled: bool) -> None:
    """Keep ``outcome`` (one line) as the last compile's, and whether it ``compiled``."""
    entry = {"outcome": outcome, "compiled": compiled, "at": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    try:
        record_path().parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(record_path(), json.dumps(entry))
    except OSError:
        pass


def last_compile() -> dict[str, Any] | None:
    """The last record (``outcome``, ``compiled``, ``at``), or None."""
    path = record_path()
    if regular_file_problem(path) is not None:
        return None
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and isinstance(entry.get("outcome"), str) else None
