"""Where a choice of ``auto`` is kept: one JSON file per key, the key being what the
measurement depends on (machine, software, threads, the policy and the boards it reads, the
settings asked for).

The folder is ``$SB3_SNAKE_CACHE_DIR``, else ``$XDG_CACHE_HOME/sb3-snake``, else
``~/.cache/sb3-snake``. A file that cannot be read or does not match its key is measured
again, never fatal; one that cannot be written is a warning, and the next run measures again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from sb3_snake.acceleration.autotune.search import Candidate, batch_candidates
from sb3_snake.acceleration.settings import AUTO, OptimizationSettings
from sb3_snake.common import system
from sb3_snake.common.paths import write_text_atomically

logger = logging.getLogger(__name__)

#: Environment variable naming the cache folder.
CACHE_ENV = "SB3_SNAKE_CACHE_DIR"
#: Bumped when the measurement changes, so old cache files are measured again.
CACHE_VERSION = 2


def cache_dir() -> Path:
    """Where measured choices are kept: ``$SB3_SNAKE_CACHE_DIR``, else the user's cache folder."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sb3-snake"


def cache_key(
    settings: OptimizationSettings,
    device: torch.device,
    policy_kwargs: dict[str, Any],
    board_size: int,
    max_batch_size: int | None = None,
    countdown: bool = False,
    *,
    batch_size: int | str,
) -> dict[str, Any]:
    """What a measurement depends on: machine, software, threads, policy (and the boards it
    reads) and what was asked for: ``settings`` and ``batch_size`` (a size, or ``auto``)."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else system.cpu_model()
    asked = {"batch_size": batch_size} | {
        key: getattr(settings, key)
        for key in (
            "use_bf16",
            "use_flash_attention",
            "sdpa_backend",
            "use_torch_compile",
            "compile_mode",
            "use_cuda_graph",
        )
    }
    return {
        "version": CACHE_VERSION,
        "device": device.type,
        "device_name": name,
        "cores": system.cpu_cores(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "board_size": board_size,
        "countdown": countdown,
        "policy_kwargs": json.loads(json.dumps(policy_kwargs, sort_keys=True, default=str)),
        "asked": asked,
        "batch_candidates": list(batch_candidates(max_batch_size)) if batch_size == AUTO else None,
    }


def cache_path(key: dict[str, Any], folder: Path | None = None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return (folder or cache_dir()) / f"auto-{digest}.json"


def read_cache(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The cached result for ``key``, or None when missing, unreadable, corrupt or for another key."""
    if not path.exists():
        return None
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(entry, dict) or entry.get("key") != key:
            raise ValueError("it does not match this machine and run")
        Candidate(**entry["result"]["chosen"])  # every field present, and nothing else
        if not isinstance(entry["result"]["evidence"], dict) or not isinstance(entry["date"], str):
            raise ValueError("fields are missing")
    except (OSError, ValueError, KeyError, TypeError) as error:
        logger.warning("auto settings cache %s cannot be used (%s); measuring again", path, error)
        return None
    return entry


def write_cache(path: Path, key: dict[str, Any], result: dict[str, Any], measured_on: str) -> bool:
    """Keep ``result``; a cache that cannot be written is a warning, not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, json.dumps({"key": key, "date": measured_on, "result": result}, indent=2) + "\n")
    except OSError as error:
        logger.warning("auto settings cache %s cannot be written (%s); the next run measures again", path, error)
        return False
    return True
