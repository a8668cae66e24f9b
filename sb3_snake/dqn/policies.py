"""The DQN policies: SB3's, with :class:`SnakeQNetwork` (the optimization layer's forward context,
an optional dueling head) and the fused Adam kernel; ``AttentionPolicy`` adds the attention extractor.

:data:`POLICY_ALIASES` are the names ``SnakeDQN`` takes (``"AttentionPolicy"``, ``"MlpPolicy"``,
``"CnnPolicy"``), and the names a saved model's description may give.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from stable_baselines3 import DQN
from stable_baselines3.common.torch_layers import create_mlp
from stable_baselines3.dqn.policies import CnnPolicy, DQNPolicy, MlpPolicy, QNetwork
from torch import nn

from sb3_snake.dqn.extractor import SnakeAttentionExtractor


class SnakeQNetwork(QNetwork):
    """A QNetwork whose forward pass runs inside the optimization layer's context.

    The context (SDPA backend, bf16 autocast) covers the network only; Q-values are returned
    as float32 so that everything computed from them stays in full precision.

    :param dueling: split the head into a state value and action advantages,
        ``Q = V + A - mean(A)`` (Wang et al., 2016); ``q_net`` is then the advantage stream.
    """

    forward_context: Callable[[], AbstractContextManager] = contextlib.nullcontext

    def __init__(self, *args: Any, dueling: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.dueling = dueling
        if dueling:
            self.value_net = nn.Sequential(*create_mlp(self.features_dim, 1, self.net_arch, self.activation_fn))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        with self.forward_context():
            q_values = self.q_values(self.extract_features(obs, self.features_extractor))
        return q_values.float()

    def q_values(self, features: torch.Tensor) -> torch.Tensor:
        """The head: Q-values from the extracted features (``V + A - mean(A)`` when dueling)."""
        q_values = self.q_net(features)
        if self.dueling:
            q_values = self.value_net(features) + q_values - q_values.mean(dim=1, keepdim=True)
        return q_values

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "dueling": self.dueling}


def with_fused_adam(policy_kwargs: dict[str, Any]) -> dict[str, Any]:
    """A policy's keyword arguments with ``fused=True`` added to its ``optimizer_kwargs`` when its
    optimizer is Adam or AdamW (SB3's default: Adam), unless they already say.

    ``torch.optim.Adam`` defaults to a loop over parameters on CPU, a few small kernels per
    parameter; ``fused=True`` does the whole step in one kernel, which for these policies' many
    small tensors removes most of the optimizer's time. Both learners' policies call this."""
    optimizer_kwargs = dict(policy_kwargs.get("optimizer_kwargs") or {})
    if policy_kwargs.get("optimizer_class", torch.optim.Adam) in (torch.optim.Adam, torch.optim.AdamW):
        optimizer_kwargs.setdefault("fused", True)
    return {**policy_kwargs, "optimizer_kwargs": optimizer_kwargs}


class _OptimizedQNetworks:
    """Mixin for DQN policies: build :class:`SnakeQNetwork` (optionally dueling) instead of ``QNetwork``,
    and use the fused Adam kernel (:func:`with_fused_adam`)."""

    def __init__(self, *args: Any, dueling: bool = False, **kwargs: Any):
        self.dueling = dueling
        super().__init__(*args, **with_fused_adam(kwargs))

    def make_q_net(self) -> SnakeQNetwork:
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        return SnakeQNetwork(**net_args, dueling=self.dueling).to(self.device)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "dueling": self.dueling}


class AttentionPolicy(_OptimizedQNetworks, DQNPolicy):
    """DQN policy whose features extractor is :class:`SnakeAttentionExtractor` by default.

    ``net_arch`` defaults to ``[]``: the extractor already ends in a hidden layer.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("features_extractor_class", SnakeAttentionExtractor)
        kwargs.setdefault("net_arch", [])
        super().__init__(*args, **kwargs)


class SnakeMlpPolicy(_OptimizedQNetworks, MlpPolicy):
    """SB3's ``MlpPolicy`` with the optimization layer's forward context."""


class SnakeCnnPolicy(_OptimizedQNetworks, CnnPolicy):
    """SB3's ``CnnPolicy`` with the optimization layer's forward context."""


#: The policies ``SnakeDQN`` takes by name.
POLICY_ALIASES: dict[str, type[DQNPolicy]] = {
    **DQN.policy_aliases,
    "MlpPolicy": SnakeMlpPolicy,
    "CnnPolicy": SnakeCnnPolicy,
    "AttentionPolicy": AttentionPolicy,
}
