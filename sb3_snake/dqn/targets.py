"""DQN's TD targets: ``r + (1 - done) * discount * Q'(s', a')``, ``a'`` the target network's best action
or, with Double DQN, the online network's; ``discount`` is the batch's own (n-step returns) or ``gamma``. The
eager, compiled and captured updates all compute them here. Food shaping
(:func:`~sb3_snake.q_learning.targets.shaping_rewards`) is added to the target, never to stored rewards, so
the replay buffer keeps the rules' rewards and the targets equal those of stored shaped rewards, 1-step and
n-step (tests/dqn/test_targets.py). Design notes: docs/design-notes.md, "sb3_snake/q_learning/targets.py".
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_snake.q_learning.targets import shaping_rewards


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
