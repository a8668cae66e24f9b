"""The averaged Q-network: a greedy policy that plays an exponential moving average of the trained
weights, which both learners' policies can keep (PQN's always, SnakeDQN's with ``averaging_half_life``).

The trained network's greedy policy swings from one update to the next; an average of its weights
over the last env steps plays steadier games. The average moves towards the trained weights by
SB3's ``polyak_update`` (:meth:`AveragedQNetwork.update_average`), a share of the way that halves
the past's weight every half-life of env steps (:func:`~sb3_snake.common.schedules.averaging_rate`).
Exploration acts, and targets bootstrap, with the trained network; ``predict``, evaluations and the
saved model's greedy moves are the average's. Design notes: docs/design-notes.md, "sb3_snake/pqn/pqn.py".
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from stable_baselines3.common.utils import polyak_update


class AveragedQNetwork:
    """Mixin for SB3's DQN policies: with ``averaged``, ``q_net_average``, a copy of ``q_net``
    made as the policy is built (a deep copy: it draws no random numbers), saved with the policy,
    that plays the greedy moves; without, the policy is SB3's.

    :param averaged: keep and play the averaged network.
    """

    def __init__(self, *args: Any, averaged: bool = False, **kwargs: Any):
        self.averaged = averaged
        super().__init__(*args, **kwargs)

    def _build(self, lr_schedule: Schedule) -> None:
        super()._build(lr_schedule)
        self._build_average()

    def _build_average(self) -> None:
        """The averaged network, with ``averaged``: ``q_net`` as it is now."""
        if self.averaged:
            self.q_net_average = copy.deepcopy(self.q_net).requires_grad_(False)

    def _predict(self, observation: PyTorchObs, deterministic: bool = True) -> torch.Tensor:
        """The greedy move of the averaged network (of the trained one, without ``averaged``)."""
        network = self.q_net_average if self.averaged else self.q_net
        return network._predict(observation, deterministic=deterministic)

    def update_average(self, tau: float) -> None:
        """Move the averaged network ``tau`` of the way to the trained one (1: a copy of it)."""
        if self.averaged:
            polyak_update(self.q_net.parameters(), self.q_net_average.parameters(), tau)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "averaged": self.averaged}


def q_networks(policy: Any) -> list[torch.nn.Module]:
    """The Q-networks of a DQN policy that run forward passes: the trained one, a target network
    (SnakeDQN's) and the averaged one, where the policy has them (SB3's own policies too)."""
    names = ("q_net", "q_net_target", "q_net_average")
    return [getattr(policy, name) for name in names if getattr(policy, name, None) is not None]
