"""What is wrong with a PQN's arguments, if anything (:func:`argument_problem`): checked as it is
built, so that a bad value is refused in one line before any game is played."""

from __future__ import annotations

from typing import Any

from sb3_snake.common.errors import divisors_near
from sb3_snake.q_learning.save_schema import MAX_EPOCHS


def argument_problem(model: Any) -> str:
    """The first of a PQN's arguments that cannot train, in a line that says what it must be
    (\"\" if none)."""
    samples = model.n_steps * model.n_envs if isinstance(model.n_steps, int) and model.n_envs else None
    checks = [
        (_whole(model.n_steps, 1), f"n_steps must be a positive integer, got {model.n_steps!r}"),
        (
            _whole(model.n_epochs, 1) and model.n_epochs <= MAX_EPOCHS,
            f"n_epochs must be an integer from 1 to {MAX_EPOCHS}, got {model.n_epochs!r}",
        ),
        (
            _whole(model.n_minibatches, 1) and (samples is None or samples % model.n_minibatches == 0),
            f"n_minibatches must divide the rollout's {samples} samples (n_steps * n_envs) into minibatches "
            f"of one size, got {model.n_minibatches!r}"
            + (f" (divisors near it: {divisors_near(samples, model.n_minibatches)})" if samples else ""),
        ),
        (0 <= model.gamma <= 1, f"gamma must be from 0 to 1, got {model.gamma}"),
        (0 <= model.q_lambda <= 1, f"q_lambda must be from 0 to 1, got {model.q_lambda}"),
        (
            0 <= model.exploration_final_eps <= 1 and 0 <= model.exploration_initial_eps <= 1,
            "exploration_initial_eps and exploration_final_eps must be from 0 to 1, got "
            f"{model.exploration_initial_eps} and {model.exploration_final_eps}",
        ),
        (_whole(model.exploration_steps, 0), f"exploration_steps must be 0 or more, got {model.exploration_steps!r}"),
        (model.max_grad_norm > 0, f"max_grad_norm must be positive, got {model.max_grad_norm}"),
        *(
            (_whole(getattr(model, name), 0), f"{name} must be 0 or more env steps, got {getattr(model, name)!r}")
            for name in ("averaging_half_life", "learning_rate_half_life")
        ),
        *(
            (_whole(getattr(model, name), 1), f"{name} must be a positive integer, got {getattr(model, name)!r}")
            for name in ("population", "population_interval", "population_games")
        ),
    ]
    return next((message for ok, message in checks if not ok), "")


def _whole(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low
