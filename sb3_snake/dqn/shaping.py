"""Potential-based reward shaping toward the food (Ng, Harada and Russell, 1999).

The rules reward only eating (+1) and dying (-1), so an agent's first thousands of games teach
it little about where the food is. Shaping adds ``scale * (gamma * phi(s') - phi(s))`` to each
stored reward, with the potential ``phi(s) = 1 - d(s) / (H + W - 2)``: one next to the food,
falling with the Manhattan distance ``d`` from the head to the food, and zero once a game has
ended (``terminated``; a truncated game goes on being valued from its last board). A step
towards the food earns about ``scale / (H + W - 2)``, a step away costs as much, and eating pays
+1 minus the distance to the next food. Over any game the added terms telescope to
``-scale * phi(first board)`` plus discounting, which no action changes: the optimal policy of
the shaped rewards is the rules' one (the paper's theorem).

Only what the learner replays is shaped. The environments keep the rules' rewards, so episode
returns, scores and greedy evaluation count food as before.
"""

from __future__ import annotations

import torch

from sb3_snake.envs.rules import FOOD, HEAD


def food_potential(observations: torch.Tensor) -> torch.Tensor:
    """``(N, C, H, W)`` boards -> ``(N,)`` float32: ``1 - d / (H + W - 2)``, ``d`` the Manhattan
    distance from the head to the food. A board without food (a won game) counts as ``d = 0``;
    its transition is terminal, where :func:`shaping_rewards` uses zero."""
    *_, height, width = observations.shape
    flat = observations.flatten(2)
    head, food = flat[:, HEAD].argmax(dim=1), flat[:, FOOD].argmax(dim=1)
    distance = (head // width - food // width).abs() + (head % width - food % width).abs()
    return 1 - distance.float() / (height + width - 2)


def shaping_rewards(
    scale: float,
    gamma: float,
    observations: torch.Tensor,
    next_observations: torch.Tensor,
    terminated: torch.Tensor,
) -> torch.Tensor:
    """``(N,)`` float32: ``scale * (gamma * phi(next) - phi(now))``, with ``phi(next) = 0`` where
    the game ``terminated`` (died or won). ``next_observations`` are the boards the moves led to,
    a finished game's last board included (not the next game's first)."""
    next_potential = torch.where(terminated, 0.0, food_potential(next_observations))
    return scale * (gamma * next_potential - food_potential(observations))
