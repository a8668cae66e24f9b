"""Resolving ``auto``: :func:`resolve_auto`, the one entry, and :func:`apply_choice`.

Settings given a plain value (flags, the environment, ``.env``) are not measured: they win over ``auto``. A
choice is measured once per machine and kept in the cache (:mod:`~sb3_snake.autotune.cache`), unless other
processes (or the host) took :data:`CONTENDED_CORES` or more while it was measured: then it decides that run
only. Each resolved field's source says what was chosen (``auto: chose true (bf16)``), and the settings'
``auto_record`` keeps what was measured, when, and where it is cached; the configuration summary and ``python
test_optimizations.py`` print that once, as a block. The batch size is a learning value, not a setting:
:func:`resolve_auto` is given it (a size, or ``auto``) as an argument of its own and returns the size chosen
beside the settings (:class:`Resolved`), as :func:`apply_choice` reads it from the search's choice.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import date
from typing import Any, NamedTuple

import torch

from sb3_snake.acceleration.settings import AUTO, OptimizationSettings
from sb3_snake.autotune.cache import cache_key, cache_path, read_cache, write_cache
from sb3_snake.autotune.measure import GradientStepMeter, PQNStepMeter
from sb3_snake.autotune.search import Candidate, Machine, Measure, batch_candidates, search
from sb3_snake.common import system
from sb3_snake.common.options import KEYED
from sb3_snake.dqn.snake_dqn import DEFAULT_BATCH_SIZE

#: Cores taken by other processes (or the host) during a measurement above which it is not cached.
CONTENDED_CORES = 0.5


class Resolved(NamedTuple):
    """What :func:`resolve_auto` resolved: the settings, and the batch size."""

    settings: OptimizationSettings
    batch_size: int
    #: How ``auto`` chose the batch size (the evidence, as a field's source); ``None`` when the
    #: batch size was given as a size, so where it came from stays the caller's.
    batch_source: str | None = None


def resolve_auto(
    settings: OptimizationSettings,
    batch_size: int | str,
    device: torch.device | str,
    policy_kwargs: dict[str, Any],
    board_size: int,
    *,
    measure: Measure | None = None,
    machine: Machine | None = None,
    allow_measure: bool = True,
    max_batch_size: int | None = None,
    countdown: bool = False,
    learner: str = "dqn",
    rollout: tuple[int, int] | None = None,
    progress: Callable[[str], None] = lambda line: None,
    today: Callable[[], str] = lambda: date.today().isoformat(),
    load_meter: Callable[[], Callable[[], float | None]] | None = None,
) -> Resolved:
    """``settings`` and ``batch_size`` (a size, or ``auto``) with every ``auto`` replaced by the
    value measured fastest on this machine.

    A cached choice for the same key is used as is. Without one, the candidates are measured
    (``measure``, by default the learner's meter of :data:`METERS` on ``device``) and the choice
    cached; with ``allow_measure=False`` (acting, or a report that must not spend the time) the
    unmeasured values stand in (:data:`~sb3_snake.acceleration.settings.UNMEASURED`), and the
    sources say so. ``max_batch_size`` (the replay buffer's size, or the rollout's) bounds the
    batch sizes tried; ``countdown`` says whether the boards carry the countdown channel.
    ``learner`` (``"dqn"`` or ``"pqn"``) is the learner whose own step is measured (:data:`METERS`,
    on ``policy_kwargs``); ``rollout = (n_envs, n_steps)``, given for a learner that cuts its
    batches from it, makes them divide it.

    A measurement during which other processes (or the host of a virtual machine) took
    :data:`CONTENDED_CORES` or more (``load_meter``, by default
    :func:`sb3_snake.common.system.other_load_meter`) decides this run but is not cached: beside a busy
    process the gradient step runs many times slower with every core, and a choice measured then
    would stand for every later run on the machine.
    """
    if not settings.auto_fields and batch_size != AUTO:
        return Resolved(settings, batch_size)
    device = torch.device(device)
    key = cache_key(
        settings,
        device,
        policy_kwargs,
        board_size,
        max_batch_size,
        countdown,
        batch_size=batch_size,
        learner=learner,
        divides=rollout is not None,
    )
    path = cache_path(key)
    entry = read_cache(path, key)
    if entry is None and not allow_measure:
        unmeasured = (
            "auto, not measured on this machine yet (sb3-snake train measures it): the value that runs everywhere"
        )
        if batch_size != AUTO:
            return Resolved(settings.without_auto(unmeasured), batch_size)
        return Resolved(settings.without_auto(unmeasured), DEFAULT_BATCH_SIZE, unmeasured)
    if entry is None:
        keys = [KEYED["batch_size"].key] if batch_size == AUTO else []
        keys += [OptimizationSettings.env_key(name) for name in settings.auto_fields]
        progress(f"measuring auto settings ({', '.join(keys)}) on this machine; cached in {path}")
        machine = machine or Machine.probe(device)
        measure = measure or METERS[learner](device, policy_kwargs, board_size, countdown, rollout, settings)
        started, taken = time.perf_counter(), (load_meter or system.other_load_meter)()
        candidates = batch_candidates(max_batch_size, divides=rollout is not None)
        result = search(settings, machine, measure, candidates, batch_size=batch_size)
        result["seconds"] = time.perf_counter() - started
        others = taken()
        result["cores_taken_by_others"] = others
        entry = {"key": key, "date": today(), "result": result}
        if others is not None and others >= CONTENDED_CORES:
            where = f"not cached: other processes took {others:.1f} cores while it was measured"
            progress(f"auto settings: {where}; the next run measures again")
            return apply_choice(settings, batch_size, entry, where)
        write_cache(path, key, result, entry["date"])
    return apply_choice(settings, batch_size, entry, f"cache {path}")


def _pqn_meter(
    device: torch.device,
    policy_kwargs: dict[str, Any],
    board_size: int,
    countdown: bool,
    rollout: tuple[int, int] | None,
    settings: OptimizationSettings,
) -> Measure:
    """PQN's minibatch step on its own network, on a rollout of its games."""
    kwargs = dict(policy_kwargs)
    policy = kwargs.pop("policy")
    n_envs, n_steps = rollout or (128, 32)
    return PQNStepMeter(
        device,
        policy,
        kwargs,
        board_size,
        n_envs,
        n_steps,
        use_cuda_graph=settings.use_cuda_graph,
        countdown=countdown,
    )


def _dqn_meter(
    device: torch.device,
    policy_kwargs: dict[str, Any],
    board_size: int,
    countdown: bool,
    rollout: tuple[int, int] | None,
    settings: OptimizationSettings,
) -> Measure:
    """SnakeDQN's gradient step on its attention policy, with batches from a replay buffer."""
    return GradientStepMeter(
        device, policy_kwargs, board_size, countdown=countdown, use_cuda_graph=settings.use_cuda_graph
    )


#: The measurement of each learner that may train: its own step, network and shapes.
METERS = {"dqn": _dqn_meter, "pqn": _pqn_meter}


def apply_choice(settings: OptimizationSettings, batch_size: int | str, entry: dict[str, Any], where: str) -> Resolved:
    """``settings`` and ``batch_size`` with the measured choice in place of each ``auto``.

    Each resolved field's source is short (``auto: chose flash``); what was measured, when and
    where it is kept go once into the settings' ``auto_record``, which the configuration summary
    and the capability report print as one block rather than on every line.
    """
    chosen = Candidate(**entry["result"]["chosen"])
    evidence = entry["result"].get("evidence", {})
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    fields = {
        "use_bf16": chosen.use_bf16,
        "use_flash_attention": chosen.sdpa_backend == "flash",
        "use_torch_compile": chosen.use_torch_compile,
        "batch_size": chosen.batch_size,
    }

    def source(name: str) -> str:
        # The choice alone: up to the first colon (or, in entries cached before, the first comma).
        choice = re.split(r"[:,]", evidence.get(name, f"chose {fields[name]}"), maxsplit=1)[0]
        return f"auto: {choice}"

    for name in settings.auto_fields:
        values[name], sources[name] = fields[name], source(name)
    if "use_flash_attention" in settings.auto_fields and settings.sdpa_backend == AUTO:
        values["sdpa_backend"] = chosen.sdpa_backend
        sources["sdpa_backend"] = sources["use_flash_attention"]
    measured = [*settings.auto_fields, *(["batch_size"] if batch_size == AUTO else [])]
    record = {
        "date": entry["date"],
        "where": where,
        "evidence": {name: evidence[name] for name in measured if name in evidence},
        "rule": entry["result"].get("rule", ""),
        "measurements": entry["result"].get("measurements", []),
    }
    resolved = settings.resolved(values, sources, record)
    if batch_size != AUTO:
        return Resolved(resolved, batch_size)
    return Resolved(resolved, chosen.batch_size, source("batch_size"))
