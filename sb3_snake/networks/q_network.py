"""``SnakeQNetwork``: the Q-network both learners train, and the optimizer rule of their policies.

SB3's ``QNetwork`` (features extractor, then an MLP head), with three additions: the forward pass
runs inside the optimization layer's context (:attr:`SnakeQNetwork.forward_context`: the SDPA
kernels allowed and bf16 autocast, which the learner sets from its ``active_optimizations``) and
returns float32 Q-values, so that targets and losses stay in full precision; an optional dueling
head (SnakeDQN's); and optional LayerNorm after each hidden linear layer (PQN's, which keeps its
Q-values stable without a target network: Gallici et al., 2024, section 4).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from stable_baselines3.common.torch_layers import create_mlp
from stable_baselines3.dqn.policies import QNetwork
from torch import nn


class SnakeQNetwork(QNetwork):
    """A ``QNetwork`` whose forward pass runs inside the optimization layer's context.

    :param dueling: split the head into a state value and action advantages,
        ``Q = V + A - mean(A)`` (Wang et al., 2016); ``q_net`` is then the advantage stream.
    :param layer_norm: LayerNorm between each hidden linear layer and its activation (SB3's
        ``create_mlp`` with ``post_linear_modules``), in the head and, with ``dueling``, the value stream.
    """

    #: The context of every forward pass; the learner sets it to its ``active_optimizations``'.
    forward_context: Callable[[], AbstractContextManager] = contextlib.nullcontext

    def __init__(self, *args: Any, dueling: bool = False, layer_norm: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.dueling, self.layer_norm = dueling, layer_norm
        norm = [nn.LayerNorm] if layer_norm else None
        if layer_norm:
            layers = create_mlp(
                self.features_dim, int(self.action_space.n), self.net_arch, self.activation_fn, post_linear_modules=norm
            )
            self.q_net = nn.Sequential(*layers)
        if dueling:
            value = create_mlp(self.features_dim, 1, self.net_arch, self.activation_fn, post_linear_modules=norm)
            self.value_net = nn.Sequential(*value)

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
        return {**super()._get_constructor_parameters(), "dueling": self.dueling, "layer_norm": self.layer_norm}


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
