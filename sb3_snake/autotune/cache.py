"""Where a choice of ``auto`` is kept: one JSON file per key, the key being what the
measurement depends on (machine, software, threads, the policy and the boards it reads, the
settings asked for).

The folder is ``$SB3_SNAKE_CACHE_DIR``, else ``$XDG_CACHE_HOME/sb3-snake``, else
``~/.cache/sb3-snake``. A file that cannot be read, is not a regular file, does not match its
key or holds a choice that could not have been measured for it is measured again, with a
warning naming it, never fatal; one that cannot be written is a warning, and the next run
measures again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from pathlib import Path
from typing import Any

import torch

from sb3_snake.acceleration.settings import AUTO, SDPA_BACKENDS, OptimizationSettings
from sb3_snake.autotune.search import Candidate, batch_candidates
from sb3_snake.common import system
from sb3_snake.common.paths import cache_dir, read_private, write_private

logger = logging.getLogger(__name__)

#: Bumped when the measurement or the key changes, so old cache files are measured again
#: (3: the key names the CPU's generation, :func:`~sb3_snake.common.system.cpu_identity`; 4: and
#: the learner whose step is measured).
CACHE_VERSION = 4
#: A cache file is a few kilobytes; anything far larger is not one of ours and is not parsed.
MAX_CACHE_BYTES = 1 << 20


def cache_key(
    settings: OptimizationSettings,
    device: torch.device,
    policy_kwargs: dict[str, Any],
    board_size: int,
    max_batch_size: int | None = None,
    countdown: bool = False,
    *,
    batch_size: int | str,
    learner: str = "dqn",
    divides: bool = False,
) -> dict[str, Any]:
    """What a measurement depends on: machine, software, threads, the learner and its policy (and
    the boards it reads) and what was asked for: ``settings`` and ``batch_size`` (a size, or ``auto``).
    ``divides``: the batch sizes tried must divide the rollout (a learner that cuts its batches from it).

    A CPU is named by its generation as well as its name: "AMD EPYC" is a Zen 2 without bf16
    one day and a Zen 5 with it the next, in a home folder that outlives the machine."""
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
        "cpu_id": system.cpu_identity() if device.type == "cpu" else None,
        "cores": system.cpu_cores(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "learner": learner,
        "board_size": board_size,
        "countdown": countdown,
        "policy_kwargs": json.loads(json.dumps(policy_kwargs, sort_keys=True, default=str)),
        "asked": asked,
        "batch_candidates": (list(batch_candidates(max_batch_size, divides=divides)) if batch_size == AUTO else None),
    }


def cache_path(key: dict[str, Any], folder: Path | None = None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return (folder or cache_dir()) / f"auto-{digest}.json"


def read_cache(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The cached result for ``key``, or None when missing, unreadable, corrupt, for another key,
    or holding a choice that is not a valid one: the cache is input like any other, so an entry
    that fails :func:`check_entry` is measured again, with a warning that names the file."""
    try:
        entry = json.loads(read_private(path, MAX_CACHE_BYTES).decode("utf-8"))
        check_entry(entry, key)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as error:
        logger.warning("auto settings cache %s cannot be used (%s); measuring again", path, error)
        return None
    return entry


def check_entry(entry: Any, key: dict[str, Any]) -> None:
    """Raise ValueError unless ``entry`` is a cache entry for ``key`` whose choice could have been
    measured for it: known fields of the right types, a kernel that exists, and a batch size that
    was among the candidates (or the size asked for)."""
    if not isinstance(entry, dict) or entry.get("key") != key:
        raise ValueError("it does not match this machine and run")
    result = entry.get("result")
    if not isinstance(result, dict) or not isinstance(entry.get("date"), str):
        raise ValueError("fields are missing")
    chosen = Candidate(**result["chosen"])  # every field present, and nothing else
    if not isinstance(chosen.use_bf16, bool) or not isinstance(chosen.use_torch_compile, bool):
        raise ValueError(f"use_bf16 and use_torch_compile must be true or false, got {result['chosen']}")
    if chosen.sdpa_backend not in SDPA_BACKENDS:
        raise ValueError(f"sdpa_backend {chosen.sdpa_backend!r} is not one of {list(SDPA_BACKENDS)}")
    allowed = key["batch_candidates"] if key["asked"]["batch_size"] == AUTO else [key["asked"]["batch_size"]]
    if type(chosen.batch_size) is not int or chosen.batch_size not in allowed:
        raise ValueError(f"batch_size {chosen.batch_size!r} is not one of the sizes measured ({allowed})")
    evidence = result.get("evidence")
    if not isinstance(evidence, dict) or not all(isinstance(v, str) for v in evidence.values()):
        raise ValueError("its evidence is not a mapping of texts")
    if not isinstance(result.get("rule", ""), str):
        raise ValueError("its rule is not a text")
    measurements = result.get("measurements", [])
    if not isinstance(measurements, list) or not all(_is_measurement(m) for m in measurements):
        raise ValueError("its measurements are not a list of stages, candidates and finite rates")


def _is_measurement(record: Any) -> bool:
    """Whether ``record`` is one measurement as a search writes it (``_Timings.records``)."""
    if not isinstance(record, dict) or set(record) != {"stage", "candidate", "samples_per_second"}:
        return False
    rate, candidate = record["samples_per_second"], record["candidate"]
    if type(record["stage"]) is not int or type(rate) not in (int, float) or not math.isfinite(rate):
        return False
    try:
        return isinstance(candidate, dict) and bool(Candidate(**candidate))
    except TypeError:
        return False


def write_cache(path: Path, key: dict[str, Any], result: dict[str, Any], measured_on: str) -> bool:
    """Keep ``result``; a cache that cannot be written is a warning, not an error."""
    try:
        text = json.dumps({"key": key, "date": measured_on, "result": result}, indent=2) + "\n"
        write_private(path, text.encode())
    except OSError as error:
        logger.warning("auto settings cache %s cannot be written (%s); the next run measures again", path, error)
        return False
    return True
