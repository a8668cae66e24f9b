"""What both learners add to the rules' rewards in their targets: potential-based shaping toward
the food (Ng, Harada and Russell, 1999), the known value of a move that dies at once, and a stall
learned as a death.

Shaping adds ``scale * (discount * phi(s_n) - phi(s_0))`` to a target, ``phi(s) = 1 - d(s) / (H + W - 2)``
(:func:`food_potential`; ``d`` the Manhattan distance from the head to the food; zero once a game has
terminated), and leaves the rules' optimal policy as it is. Invariant: these change the targets, never
the env's rewards, so the replay buffer, the episode returns and the scores keep the rules' rewards.
:func:`fatal_move_values`: a fatal move's target, known without playing it. :func:`stall_as_death`: a
game truncated by the stall limit, counted in the targets as lost.
Design notes: docs/design-notes.md, "sb3_snake/q_learning/targets.py".
"""

from __future__ import annotations

import torch

from sb3_snake.envs.action_masks import cell_index
from sb3_snake.envs.rules import DEATH_REWARD, FOOD, HEAD


def food_potential(observations: torch.Tensor) -> torch.Tensor:
    """``(N, C, H, W)`` boards -> ``(N,)`` float32: ``1 - d / (H + W - 2)``, ``d`` the Manhattan
    distance from the head to the food. A board without food (a won game) counts as ``d = 0``;
    its transition is terminal, where :func:`shaping_rewards` uses zero."""
    *_, height, width = observations.shape
    head, food = cell_index(observations, HEAD), cell_index(observations, FOOD)
    distance = (head // width - food // width).abs() + (head % width - food % width).abs()
    return 1 - distance.float() / (height + width - 2)


def shaping_rewards(
    scale: float,
    discount: float | torch.Tensor,
    observations: torch.Tensor,
    next_observations: torch.Tensor,
    terminated: torch.Tensor,
) -> torch.Tensor:
    """``(N,)`` float32: ``scale * (discount * phi(next) - phi(now))``, with ``phi(next) = 0`` where
    the game ``terminated`` (died or won). ``next_observations`` are the boards the moves led to,
    a finished game's last board included (not the next game's first). ``discount``: ``gamma``
    for one step, or ``(N,)`` per transition (an n-step sequence's ``gamma ** k``)."""
    next_potential = torch.where(terminated.bool(), 0.0, food_potential(next_observations))
    return scale * (discount * next_potential - food_potential(observations))


def fatal_move_values(scale: float, observations: torch.Tensor) -> torch.Tensor:
    """``(N,)`` float32: the target of any move that dies at once from each board: the death's
    reward, and with shaping of ``scale`` the potential lost (a terminal board's is zero), which is
    ``DEATH_REWARD`` plus :func:`shaping_rewards` of a terminated move. A learner that explores
    safely never plays these moves, and its bootstrap's max reads them, so it fits them to this."""
    return DEATH_REWARD - scale * food_potential(observations)


def fatal_move_loss(q_values: torch.Tensor, fatal_moves: torch.Tensor, fatal_values: torch.Tensor) -> torch.Tensor:
    """Half the squared error of every fatal move's Q-value against its known value, summed over
    the moves and averaged over the batch: ``q_values`` ``(N, A)``, ``fatal_moves`` ``(N, A)``
    bool (the moves that die at once), ``fatal_values`` ``(N,)`` (:func:`fatal_move_values`)."""
    errors = (q_values - fatal_values[:, None]).square() * fatal_moves
    return 0.5 * errors.sum(dim=1).mean()


def stall_as_death(
    rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rewards, terminated)`` with every game the env truncated (on Snake, the stall limit:
    too long without food) counted as lost: a death's reward added, and terminated, so that no
    target bootstraps from its last board. A stalling policy would otherwise value its circling
    as a game that goes on."""
    stalled = truncated.bool()
    return rewards + DEATH_REWARD * stalled.to(rewards.dtype), terminated.bool() | stalled
