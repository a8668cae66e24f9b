"""The memory a run will hold, estimated before training, so a run that cannot fit is refused
up front, in one line that says what to lower."""

from __future__ import annotations

from sb3_snake.common.errors import UsageError
from sb3_snake.common.system import available_memory_bytes
from sb3_snake.envs.rules import board_space
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.learners import learner

#: Share of the available memory a run may plan to use.
MEMORY_HEADROOM = 0.9


def memory_estimate(config: TrainConfig) -> dict[str, int]:
    """Bytes a run of this config will hold, by part (an estimate, stated before training): its
    games, and what its learner holds beside them (the ``memory`` of its
    :class:`~sb3_snake.training.learners.Learner`)."""
    space = board_space(config.board_size, config.countdown, config.reachable)
    observation, cells = space.shape[0] * config.board_size**2, config.board_size**2
    games = config.n_envs * (4 * observation + cells + 128) + 8 * cells * cells
    return learner(config.algo).memory(config, observation, games)


def check_memory(config: TrainConfig, available: int | None = None) -> None:
    """Raise UsageError, stating what is needed, when the run would not fit in memory."""
    available = available_memory_bytes() if available is None else available
    parts = memory_estimate(config)
    needed = sum(parts.values())
    if available is not None and needed > MEMORY_HEADROOM * available:
        detail = ", ".join(f"{name} {size / 2**30:.1f} GiB" for name, size in parts.items())
        raise UsageError(
            f"this run needs about {needed / 2**30:.1f} GiB ({detail}) but {available / 2**30:.1f} GiB are available",
            fix={
                learner(config.algo).memory_fix: "lower",
                "n_envs": "lower",
                "board_size": "lower",
            },
        )
