"""The DQN policies: SB3's, with :class:`~sb3_snake.networks.q_network.SnakeQNetwork` (the
optimization layer's forward context, an optional dueling head), the fused Adam kernel and, with
``averaged``, the averaged network that plays (:mod:`sb3_snake.q_learning.averaging`);
``AttentionPolicy`` adds the attention extractor.

:data:`POLICY_ALIASES` are the names ``SnakeDQN`` takes (``"AttentionPolicy"``, ``"MlpPolicy"``,
``"CnnPolicy"``), and the names a saved model's description may give.
"""

from __future__ import annotations

from typing import Any

from stable_baselines3 import DQN
from stable_baselines3.dqn.policies import CnnPolicy, DQNPolicy, MlpPolicy

from sb3_snake.networks.attention import SnakeAttentionExtractor
from sb3_snake.networks.q_network import SnakeQNetwork, with_fused_adam
from sb3_snake.q_learning.averaging import AveragedQNetwork


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


class AttentionPolicy(AveragedQNetwork, _OptimizedQNetworks, DQNPolicy):
    """DQN policy whose features extractor is :class:`SnakeAttentionExtractor` by default.

    ``net_arch`` defaults to ``[]``: the extractor already ends in a hidden layer.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("features_extractor_class", SnakeAttentionExtractor)
        kwargs.setdefault("net_arch", [])
        super().__init__(*args, **kwargs)


class SnakeMlpPolicy(AveragedQNetwork, _OptimizedQNetworks, MlpPolicy):
    """SB3's ``MlpPolicy`` with the optimization layer's forward context."""


class SnakeCnnPolicy(AveragedQNetwork, _OptimizedQNetworks, CnnPolicy):
    """SB3's ``CnnPolicy`` with the optimization layer's forward context."""


#: The policies ``SnakeDQN`` takes by name.
POLICY_ALIASES: dict[str, type[DQNPolicy]] = {
    **DQN.policy_aliases,
    "MlpPolicy": SnakeMlpPolicy,
    "CnnPolicy": SnakeCnnPolicy,
    "AttentionPolicy": AttentionPolicy,
}
