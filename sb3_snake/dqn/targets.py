"""DQN's TD targets, and potential-based reward shaping toward the food (Ng, Harada and Russell, 1999).

**TD targets** (:func:`td_targets`): ``r + (1 - done) * discount * Q'(s', a')``, ``a'`` the target
network's best action or, with Double DQN, the online network's; ``discount`` is the batch's own
(n-step returns) or ``gamma``. The eager, compiled and captured updates all compute them here.

**Shaping.** The rules reward only eating (+1) and dying (-1), so an agent's first thousands of
games teach it little about where the food is. Shaping adds ``scale * (gamma * phi(s') - phi(s))``
to each reward, with the potential ``phi(s) = 1 - d(s) / (H + W - 2)``: one next to the food,
falling with the Manhattan distance ``d`` from the head to the food, and zero once a game has
ended (``terminated``; a truncated game goes on being valued from its last board). A step
towards the food earns about ``scale / (H + W - 2)``, a step away costs as much, and eating pays
+1 minus the distance to the next food. Over any game the added terms telescope to
``-scale * phi(first board)`` plus discounting, which no action changes: the optimal policy of
the shaped rewards is the rules' one (the paper's theorem).

**Why shaping is applied here, to the TD target, and not to the stored rewards.** Because the
terms telescope, the shaped rewards of an n-step sequence sum to the sequence's own rewards plus
``scale * (discount * phi(s_n) - phi(s_0))``, with ``discount`` the sequence's (``gamma ** k`` for
``k`` steps) and ``phi(s_n) = 0`` where the sequence ended in a terminated game: exactly the
``done`` and ``discount`` a replay buffer already returns with each sample (SB3's and
:class:`~sb3_snake.dqn.replay.DeviceReplayBuffer`, 1-step and n-step, cut by an episode's end, a
truncation or the last row written). So one term in :func:`td_targets` replaces shaping every
stored reward on each of the two rollout paths (SB3's NumPy loop and the tensor loop), the replay
buffer holds the env's own rewards, and a new ``gamma`` or ``food_shaping`` holds for every
transition at once. tests/dqn/test_targets.py proves the targets equal to those of stored shaped
rewards, 1-step and n-step, episode ends and truncations included. A replay buffer saved before
(its rewards shaped) is unshaped when loaded (:func:`sb3_snake.persistence.load_replay_buffer`).

The environments keep the rules' rewards, so episode returns, scores and greedy evaluation count
food as before.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_snake.envs.rules import FOOD, HEAD


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
