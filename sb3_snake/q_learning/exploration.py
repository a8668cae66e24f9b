"""Epsilon-greedy exploration, as both learners explore: epsilon falling linearly over a number of
env steps, and random moves drawn uniformly or, with safe exploration, among the moves that do not
die at once (:func:`~sb3_snake.envs.action_masks.action_masks`, read from the boards).

Epsilon follows env steps rather than SB3's progress towards ``total_timesteps``, which a run that
stops by episodes or by the clock does not know.
"""

from __future__ import annotations

import torch

from sb3_snake.envs.action_masks import action_masks, random_safe_actions


def linear_epsilon(env_steps: int, initial: float, final: float, steps: int) -> float:
    """Epsilon after ``env_steps`` (all games together): linear from ``initial`` to ``final`` over
    ``steps`` env steps, then ``final``."""
    if env_steps >= steps:
        return final
    return initial + env_steps / steps * (final - initial)


def random_moves(observations: torch.Tensor, n_actions: int, safe: bool, safe_moves: torch.Tensor | None = None):
    """One random move for each board of ``observations``: uniform among the ``n_actions``, or with
    ``safe`` among the moves that do not die at once (``safe_moves``, the boards' masks where the
    caller has them; any move where none is safe)."""
    if not safe:
        return torch.randint(n_actions, (observations.shape[0],), device=observations.device)
    if safe_moves is None:
        safe_moves = action_masks(observations, egocentric=n_actions == 3)
    return random_safe_actions(safe_moves)


def epsilon_greedy(q_values: torch.Tensor, random: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Each row's greedy move of ``q_values``, or with probability ``epsilon`` its move of ``random``
    (each row draws its own)."""
    greedy = q_values.argmax(dim=1)
    explore = torch.rand(greedy.shape, device=greedy.device) < epsilon
    return torch.where(explore, random.to(greedy.device), greedy)
