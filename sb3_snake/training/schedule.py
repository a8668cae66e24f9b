"""SnakeDQN's update schedule: how often a run updates and how many gradient steps each update
takes, from the replay ratio asked for (gradient samples per env step), the batch size and the
number of games; and the share of it trained in the early phase."""

from __future__ import annotations

from typing import Any, Protocol

from sb3_snake.common.errors import UsageError
from sb3_snake.q_learning.save_schema import hyperparameter_problem


class ScheduleOptions(Protocol):
    """The options of a run the schedule follows (a :class:`~sb3_snake.training.config.TrainConfig`)."""

    replay_ratio: float
    early_replay_ratio: float
    early_steps: int
    n_envs: int
    train_freq: int | None
    gradient_steps: int | None

    def batch(self) -> int:
        """The batch size, resolved."""


def update_schedule(config: ScheduleOptions) -> tuple[int, int]:
    """``(train_freq, gradient_steps)``: given ones win, else the pair that meets ``replay_ratio``.

    One update of ``gradient_steps`` batches every ``train_freq`` vector steps samples
    ``batch_size * gradient_steps / (train_freq * n_envs)`` per env step.
    """
    batch_size = config.batch()
    steps_per_update = batch_size / (config.replay_ratio * config.n_envs)
    train_freq = config.train_freq or max(1, round(steps_per_update))
    gradient_steps = config.gradient_steps or max(
        1, round(config.replay_ratio * config.n_envs * train_freq / batch_size)
    )
    return train_freq, gradient_steps


def schedule_kwargs(config: ScheduleOptions) -> dict[str, Any]:
    """The update schedule as :class:`~sb3_snake.dqn.snake_dqn.SnakeDQN` arguments:
    :func:`update_schedule`'s pair, and the fraction of it trained before ``early_steps`` (the
    early replay ratio over the ratio that pair really gives, which rounds ``replay_ratio``)."""
    train_freq, gradient_steps = update_schedule(config)
    schedule = {
        "train_freq": train_freq,
        "gradient_steps": gradient_steps,
        "early_steps": config.early_steps,
        "early_update_fraction": (
            config.early_replay_ratio * train_freq * config.n_envs / (config.batch() * gradient_steps)
        ),
    }
    # Computed, not given: checked as a model file is read, so that what this run saves loads.
    problem = next(filter(None, (hyperparameter_problem(name, value) for name, value in schedule.items())), "")
    if problem:
        raise UsageError(
            f"the update schedule of replay ratio {config.replay_ratio:g}, early replay ratio "
            f"{config.early_replay_ratio:g}, {config.n_envs} games and batch {config.batch()} gives {problem}",
            fix={
                "train_freq": "set",
                "gradient_steps": "set",
                "replay_ratio": "change",
                "early_replay_ratio": "change",
            },
        )
    return schedule
