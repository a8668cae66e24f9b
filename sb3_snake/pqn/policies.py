"""PQN's policies: SB3's DQN policy with one trained Q-network (no target network), whose hidden
layers are each followed by LayerNorm, and an average of its weights that plays.

PQN keeps its Q-values stable without a target network by normalising its hidden layers
(Gallici et al., 2024, section 4); SB3's ``create_mlp`` places the LayerNorm between each hidden
linear layer and its activation. ``"MlpPolicy"`` flattens the board into a MLP of ``[256, 256]``;
``"CnnPolicy"`` is :class:`SnakeCnnExtractor`; ``"AttentionPolicy"`` puts the attention extractor
in front of one LayerNorm layer. The trained network's greedy policy swings from one rollout to
the next, so the policy plays and saves an exponential moving average of its weights
(``q_net_average``, moved by SB3's ``polyak_update`` after each rollout); the rollouts act, and
the targets bootstrap, with the trained one. Design notes: docs/design-notes.md, "sb3_snake/pqn/pqn.py".
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import torch
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, create_mlp
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from stable_baselines3.common.utils import polyak_update
from stable_baselines3.dqn.policies import DQNPolicy, QNetwork
from torch import nn

from sb3_snake.dqn.extractor import SnakeAttentionExtractor
from sb3_snake.dqn.policies import with_fused_adam

#: Hidden layers of PQN's MLP when none are given: the network the paper's MinAtar runs used.
DEFAULT_NET_ARCH = [256, 256]


class SnakeCnnExtractor(BaseFeaturesExtractor):
    """perfect_snake's network for 10x10 Snake: 3x3 convolutions of ``channels`` (the first of
    stride 1, the others of stride 2), then ``features_dim`` features with LayerNorm. A channel
    of ones marks the board first, so that the convolutions' zero padding reads as wall; each
    input channel is scaled into [0, 1] by the observation space's upper bound."""

    def __init__(
        self, observation_space: gym.spaces.Box, features_dim: int = 256, channels: tuple[int, ...] = (32, 64, 64)
    ):
        super().__init__(observation_space, features_dim)
        board_channels, *board = observation_space.shape
        high = torch.as_tensor(observation_space.high[:, 0, 0], dtype=torch.float32).clamp(min=1)
        self.register_buffer("scale", (1 / high).view(1, -1, 1, 1))
        layers, width = [], board_channels + 1
        for index, out in enumerate(channels):
            layers += [nn.Conv2d(width, out, 3, stride=1 if index == 0 else 2, padding=1), nn.ReLU()]
            width = out
        self.cnn = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():
            flat = self.cnn(torch.zeros(1, board_channels + 1, *board)).shape[1]
        self.linear = nn.Sequential(nn.Linear(flat, features_dim), nn.LayerNorm(features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        boards = observations * self.scale
        return self.linear(self.cnn(torch.cat([boards, torch.ones_like(boards[:, :1])], dim=1)))


class LayerNormQNetwork(QNetwork):
    """SB3's ``QNetwork`` with LayerNorm after each hidden linear layer (off: SB3's own)."""

    def __init__(self, *args: Any, layer_norm: bool = True, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.layer_norm = layer_norm
        if layer_norm:
            norm = [nn.LayerNorm]
            layers = create_mlp(
                self.features_dim, int(self.action_space.n), self.net_arch, self.activation_fn, post_linear_modules=norm
            )
            self.q_net = nn.Sequential(*layers)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "layer_norm": self.layer_norm}


class PQNPolicy(DQNPolicy):
    """SB3's DQN policy with one trained :class:`LayerNormQNetwork` (``q_net``), no target network,
    and the average of its weights that plays (``q_net_average``: :meth:`update_average`).

    :param layer_norm: LayerNorm after each hidden layer (PQN's; off only to measure it).
    Every other argument is ``DQNPolicy``'s; ``net_arch`` defaults to :data:`DEFAULT_NET_ARCH`, and
    Adam is fused (:func:`~sb3_snake.dqn.policies.with_fused_adam`), as SnakeDQN's.
    """

    def __init__(self, *args: Any, layer_norm: bool = True, **kwargs: Any):
        self.layer_norm = layer_norm
        if kwargs.get("net_arch") is None:
            kwargs["net_arch"] = list(DEFAULT_NET_ARCH)
        super().__init__(*args, **with_fused_adam(kwargs))

    def _build(self, lr_schedule: Schedule) -> None:
        self.q_net = self.make_q_net()
        self.q_net_average = copy.deepcopy(self.q_net).requires_grad_(False)  # draws no random numbers
        self.optimizer = self.optimizer_class(self.q_net.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _predict(self, observation: PyTorchObs, deterministic: bool = True) -> torch.Tensor:
        """The greedy move of the averaged network."""
        return self.q_net_average._predict(observation, deterministic=deterministic)

    def update_average(self, tau: float) -> None:
        """Move the averaged network ``tau`` of the way to the trained one (1: a copy of it)."""
        polyak_update(self.q_net.parameters(), self.q_net_average.parameters(), tau)

    def make_q_net(self) -> LayerNormQNetwork:
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        return LayerNormQNetwork(**net_args, layer_norm=self.layer_norm).to(self.device)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "layer_norm": self.layer_norm}


class PQNCnnPolicy(PQNPolicy):
    """:class:`PQNPolicy` on :class:`SnakeCnnExtractor`, whose last layer is the hidden layer
    (``net_arch`` defaults to ``[]``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("features_extractor_class", SnakeCnnExtractor)
        if kwargs.get("net_arch") is None:
            kwargs["net_arch"] = []
        super().__init__(*args, **kwargs)


class PQNAttentionPolicy(PQNPolicy):
    """:class:`PQNPolicy` with :class:`~sb3_snake.dqn.extractor.SnakeAttentionExtractor` in front
    of one LayerNorm hidden layer of 256 (``net_arch`` defaults to ``[256]``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("features_extractor_class", SnakeAttentionExtractor)
        if kwargs.get("net_arch") is None:
            kwargs["net_arch"] = [256]
        super().__init__(*args, **kwargs)


#: The policies ``PQN`` takes by name, and the names a saved PQN's description may give.
PQN_POLICY_ALIASES: dict[str, type[PQNPolicy]] = {
    "MlpPolicy": PQNPolicy,
    "CnnPolicy": PQNCnnPolicy,
    "AttentionPolicy": PQNAttentionPolicy,
}
