"""Where benchmark results are kept, and the peak memory a measurement used."""

from __future__ import annotations

import json
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from sb3_snake.common.paths import claim_new_path

#: Where benchmark JSON files go, relative to the working directory.
RESULTS_DIR = Path("benchmark_results")


def reset_peak_memory(device: str) -> None:
    """Start a new peak-memory window: CUDA's allocator statistics, or the process's peak RSS.

    On Linux, writing ``5`` to ``/proc/self/clear_refs`` resets the peak resident set size
    (``VmHWM``); where that is not possible the CPU peak stays the process's peak so far.
    """
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        return
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_memory_mib(device: str) -> float:
    """Peak memory since :func:`reset_peak_memory`: ``torch.cuda.max_memory_allocated`` on
    CUDA, peak RSS of the process on CPU."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource  # not on Windows; there the peak is unknown

    scale = 1 if platform.system() == "Darwin" else 1024  # bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def save_results(name: str, payload: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
    """Write ``payload`` to ``directory/<name>_<UTC timestamp>.json`` (``-2`` and on when another
    result took that name in the same second) and return the path."""
    path = claim_new_path(directory, f"{name}_{utc_stamp()}", ".json")
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def utc_stamp() -> str:
    """The time now as results and benchmark folders are named: ``20261123T202313Z``."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
