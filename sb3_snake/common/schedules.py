"""Half-lives in env steps: the learning rate's, which both learners follow (SB3's own schedules
follow the progress towards ``total_timesteps``, which a run that stops by episodes or by the
clock does not know), and that of PQN's averaged weights."""

from __future__ import annotations

from typing import Any

#: A halving learning rate changes in this many steps per half-life, not continuously: a
#: captured CUDA graph bakes the rate in and is captured again whenever it changes.
HALF_LIFE_STEPS = 8


def half_life_factor(env_steps: int, half_life: int) -> float:
    """The learning rate's multiplier after ``env_steps`` of decay with the given ``half_life``
    (both in env steps; a half-life of 0 never decays), in :data:`HALF_LIFE_STEPS` steps per
    half-life: 1 until the first eighth has passed, 0.5 from one half-life on."""
    if half_life <= 0 or env_steps <= 0:
        return 1.0
    return 0.5 ** ((env_steps * HALF_LIFE_STEPS // half_life) / HALF_LIFE_STEPS)


def scale_learning_rate(optimizers: Any, factor: float) -> float | None:
    """Multiply the rate of every param group of ``optimizers`` (one optimizer or a list) by
    ``factor``, after SB3's ``_update_learning_rate`` has set it from its schedule; the first
    group's new rate, or None when ``factor`` is 1 and nothing changed."""
    if factor == 1.0:
        return None
    optimizers = optimizers if isinstance(optimizers, list) else [optimizers]
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] *= factor
    return optimizers[0].param_groups[0]["lr"]


def averaging_rate(env_steps: int, half_life: int) -> float:
    """The share of the way an exponential moving average moves towards the current value after
    ``env_steps``, for the past's weight to halve every ``half_life`` env steps (SB3's ``tau``;
    a half-life of 0 keeps no past: 1)."""
    return 1.0 - 0.5 ** (env_steps / half_life) if half_life > 0 else 1.0
