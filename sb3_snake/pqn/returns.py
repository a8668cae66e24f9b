"""Q(lambda) returns of a rollout (Watkins's backward view without trace cutting, as PQN uses them).

Each step's target mixes the one-step return with the following step's own target:
``G_t = r_t + gamma * ((1 - lam) * b_t + lam * G_{t+1})``, where ``b_t = max_a Q(s_{t+1}, a)``
(0 where the game terminated). The chain is cut where a game ended (died, won or was truncated:
a truncated game bootstraps from its last board, through ``b_t``, unless PQN's ``stall_as_death``
counts it terminated) and at the rollout's last step, where ``G_t = r_t + gamma * b_t``.
``lam = 0`` gives DQN's one-step targets and ``lam = 1`` the discounted rewards up to the cut,
bootstrapped there.
"""

from __future__ import annotations

import torch


def lambda_returns(
    rewards: torch.Tensor, bootstraps: torch.Tensor, cut: torch.Tensor, gamma: float, lam: float
) -> torch.Tensor:
    """``(T, N)`` targets of a rollout of ``T`` steps of ``N`` games, computed backwards.

    :param rewards: ``(T, N)`` the rewards of each step (shaping included, if any).
    :param bootstraps: ``(T, N)`` ``max_a Q(s_{t+1}, a)``, zero where the game terminated.
    :param cut: ``(T, N)`` bool, True where the game ended at that step (terminated or truncated).
    """
    returns = torch.empty_like(rewards)
    following = bootstraps[-1]
    for t in reversed(range(rewards.shape[0])):
        blend = (1 - lam) * bootstraps[t] + lam * following
        returns[t] = rewards[t] + gamma * torch.where(cut[t], bootstraps[t], blend)
        following = returns[t]
    return returns
