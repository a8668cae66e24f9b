"""PQN's policies: SB3's DQN policy with one trained Q-network (no target network), whose hidden
layers are each followed by LayerNorm, and an average of its weights that plays.

PQN keeps its Q-values stable without a target network by normalising its hidden layers
(Gallici et al., 2024, section 4); SB3's ``create_mlp`` places the LayerNorm between each hidden
linear layer and its activation. ``"MlpPolicy"`` flattens the board into a MLP of ``[256, 256]``;
``"CnnPolicy"`` is :class:`~sb3_snake.networks.cnn.SnakeCnnExtractor`; ``"AttentionPolicy"`` puts
the patch attention extractor in front of one LayerNorm layer. The policy plays and saves an
average of the trained weights (:mod:`sb3_snake.q_learning.averaging`); the rollouts act, and the
targets bootstrap, with the trained network. Design notes: docs/design-notes.md, "sb3_snake/pqn/pqn.py".
"""

from __future__ import annotations

from typing import Any

from stable_baselines3.common.type_aliases import Schedule
from stable_baselines3.dqn.policies import DQNPolicy

from sb3_snake.networks.cnn import SnakeCnnExtractor
from sb3_snake.networks.patch_attention import PatchAttentionExtractor
from sb3_snake.networks.q_network import SnakeQNetwork, with_fused_adam
from sb3_snake.q_learning.averaging import AveragedQNetwork

#: Hidden layers of PQN's MLP when none are given: the network the paper's MinAtar runs used.
DEFAULT_NET_ARCH = [256, 256]


class PQNPolicy(AveragedQNetwork, DQNPolicy):
    """SB3's DQN policy with one trained :class:`~sb3_snake.networks.q_network.SnakeQNetwork` with
    LayerNorm (``q_net``), no target network, and the average of its weights that plays
    (``q_net_average``: :class:`~sb3_snake.q_learning.averaging.AveragedQNetwork`, always kept).

    :param layer_norm: LayerNorm after each hidden layer (PQN's; off only to measure it).
    Every other argument is ``DQNPolicy``'s; ``net_arch`` defaults to :data:`DEFAULT_NET_ARCH`, and
    Adam is fused (:func:`~sb3_snake.networks.q_network.with_fused_adam`), as SnakeDQN's.
    """

    def __init__(self, *args: Any, layer_norm: bool = True, averaged: bool = True, **kwargs: Any):
        self.layer_norm = layer_norm
        if kwargs.get("net_arch") is None:
            kwargs["net_arch"] = list(DEFAULT_NET_ARCH)
        super().__init__(*args, averaged=averaged, **with_fused_adam(kwargs))

    def _build(self, lr_schedule: Schedule) -> None:
        """PQN's networks: the trained one, its average, and its optimizer; no target network."""
        self.q_net = self.make_q_net()
        self._build_average()
        self.optimizer = self.optimizer_class(self.q_net.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def make_q_net(self) -> SnakeQNetwork:
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        return SnakeQNetwork(**net_args, layer_norm=self.layer_norm).to(self.device)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "layer_norm": self.layer_norm}


class PQNCnnPolicy(PQNPolicy):
    """:class:`PQNPolicy` on :class:`~sb3_snake.networks.cnn.SnakeCnnExtractor`, whose last layer is the hidden layer
    (``net_arch`` defaults to ``[]``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("features_extractor_class", SnakeCnnExtractor)
        if kwargs.get("net_arch") is None:
            kwargs["net_arch"] = []
        super().__init__(*args, **kwargs)


class PQNAttentionPolicy(PQNPolicy):
    """:class:`PQNPolicy` with :class:`~sb3_snake.networks.patch_attention.PatchAttentionExtractor`
    in front of one LayerNorm hidden layer of 256 (``net_arch`` defaults to ``[256]``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("features_extractor_class", PatchAttentionExtractor)
        if kwargs.get("net_arch") is None:
            kwargs["net_arch"] = [256]
        super().__init__(*args, **kwargs)


#: The policies ``PQN`` takes by name, and the names a saved PQN's description may give.
PQN_POLICY_ALIASES: dict[str, type[PQNPolicy]] = {
    "MlpPolicy": PQNPolicy,
    "CnnPolicy": PQNCnnPolicy,
    "AttentionPolicy": PQNAttentionPolicy,
}
