"""What a benchmark ran on, and where its results are kept."""

from __future__ import annotations

import json
import os
import platform
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

#: Where benchmark JSON files go, relative to the working directory.
RESULTS_DIR = Path("benchmark_results")


def cpu_model() -> str:
    """The CPU's marketing name, from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def system_info() -> dict[str, Any]:
    """Hardware and software versions, recorded with every benchmark result."""
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "stable_baselines3": _package_version("stable-baselines3"),
        "gymnasium": _package_version("gymnasium"),
        "numpy": _package_version("numpy"),
        "sb3_snake": _package_version("sb3-snake"),
        "gpu": None,
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        info["gpu"] = {"name": properties.name, "memory_gib": round(properties.total_memory / 2**30, 1)}
    return info


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
    """Write ``payload`` to ``directory/<name>_<UTC timestamp>.json`` and return the path."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{name}_{stamp}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
