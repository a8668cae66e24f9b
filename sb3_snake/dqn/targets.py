"""DQN's TD targets, and potential-based reward shaping toward the food (Ng, Harada and Russell, 1999).

:func:`td_targets`: ``r + (1 - done) * discount * Q'(s', a')``, ``a'`` the target network's best action or,
with Double DQN, the online network's; ``discount`` is the batch's own (n-step returns) or ``gamma``. The eager,
compiled and captured updates all compute them here. Shaping adds ``scale * (discount * phi(s_n) - phi(s_0))``
to the target, ``phi(s) = 1 - d(s) / (H + W - 2)`` (:func:`food_potential`; ``d`` the Manhattan distance from
the head to the food; zero once a game has terminated), and leaves the rules' optimal policy as it is.
Invariant: shaping is applied to the TD target, never to stored rewards, so the replay buffer and the
environments keep the rules' rewards, and the targets equal those of stored shaped rewards, 1-step and
n-step (tests/dqn/test_targets.py). :func:`fatal_move_values`: a fatal move's target, known unplayed.
Design notes: docs/design-notes.md, "sb3_snake/dqn/targets.py".
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_snake.envs.rules import DEATH_REWARD, FOOD, HEAD


def food_potential(observations: torch.Tensor) -> torch.Tensor:
    """``(N, C, H, W)`` boards -> ``(N,)`` float32: ``1 - d / (H + W - 2)``, ``d`` the Manhattan
    distance from the head to the food. A board without food (a won game) counts as ``d = 0``;
    its transition is terminal, where :func:`shaping_rewards` uses zero."""
    *_, height, width = observations.shape
    # As float: compiled for the CPU (torch 2.13), an argmax over uint8 returned 0 for every row.
    flat = observations.flatten(2)
    head, food = flat[:, HEAD].float().argmax(dim=1), flat[:, FOOD].float().argmax(dim=1)
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
    ``DEATH_REWARD`` plus :func:`shaping_rewards` of a terminated move. PQN's
    ``fatal_move_targets`` fits these moves to it, as exploration that is safe never plays them."""
    return DEATH_REWARD - scale * food_potential(observations)


def td_targets(
    data: ReplayBufferSamples,
    target: Callable[[torch.Tensor], torch.Tensor],
    online: Callable[[torch.Tensor], torch.Tensor] | None,
    gamma: float,
    food_shaping: float = 0.0,
) -> torch.Tensor:
    """DQN's TD targets of a batch, ``(N, 1)``, without gradients: ``r + (1 - done) * discount *
    Q'(s', a')``, ``a'`` the target network's best action, or the online network's when ``online``
    is given (Double DQN); the discount is the batch's own (n-step returns) or ``gamma``. With
    ``food_shaping``, plus the sequence's shaping term (see the module docstring)."""
    discounts = data.discounts if data.discounts is not None else gamma
    with torch.no_grad():
        next_q_values = target(data.next_observations)
        if online is not None:
            next_actions = online(data.next_observations).argmax(dim=1, keepdim=True)
            next_q_values = next_q_values.gather(1, next_actions)
        else:
            next_q_values = next_q_values.max(dim=1, keepdim=True).values
        targets = data.rewards + (1 - data.dones) * discounts * next_q_values
        if food_shaping:
            discount = discounts.flatten() if isinstance(discounts, torch.Tensor) else discounts
            terminated = data.dones.flatten() > 0
            shaping = shaping_rewards(food_shaping, discount, data.observations, data.next_observations, terminated)
            targets = targets + shaping[:, None]
        return targets
