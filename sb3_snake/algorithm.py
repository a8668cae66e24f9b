"""``SnakeDQN``: SB3's DQN with the attention policy and the optimization layer applied.

``SnakeDQN("AttentionPolicy", env, optimizations=settings, **dqn_kwargs)`` is all a library
user needs; the CLI does nothing more. ``"MlpPolicy"`` and ``"CnnPolicy"`` keep working and get
the same optimizations. When ``batch_size`` is not passed it comes from the settings.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from stable_baselines3 import DQN
from stable_baselines3.dqn.policies import CnnPolicy, DQNPolicy, MlpPolicy, QNetwork

from sb3_snake.extractor import SnakeAttentionExtractor
from sb3_snake.optimizations import ActiveOptimizations, apply_optimizations
from sb3_snake.settings import OptimizationSettings


class SnakeQNetwork(QNetwork):
    """A QNetwork whose forward pass runs inside the optimization layer's context.

    The context (SDPA backend, bf16 autocast) covers the network only; Q-values are returned
    as float32 so that everything computed from them stays in full precision.
    """

    forward_context: Callable[[], AbstractContextManager] = contextlib.nullcontext

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        with self.forward_context():
            q_values = super().forward(obs)
        return q_values.float()


class _OptimizedQNetworks:
    """Mixin for DQN policies: build :class:`SnakeQNetwork` instead of ``QNetwork``."""

    def make_q_net(self) -> SnakeQNetwork:
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        return SnakeQNetwork(**net_args).to(self.device)


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


class SnakeDQN(DQN):
    """DQN with the attention policy and the optimizations of :class:`OptimizationSettings`.

    :param policy: ``"AttentionPolicy"``, ``"MlpPolicy"``, ``"CnnPolicy"`` or a policy class.
    :param env: the environment, typically a :class:`~sb3_snake.BatchedSnakeVecEnv`.
    :param optimizations: the settings to apply; ``None`` resolves them as the CLI does
        (``OptimizationSettings.load()``: environment, ``.env`` in the working directory,
        defaults).
    :param exploration_steps: when set, epsilon falls linearly from ``exploration_initial_eps``
        to ``exploration_final_eps`` over this many env steps (all envs together), whatever
        ``total_timesteps`` is; SB3's ``exploration_fraction`` needs a known total, which a run
        that stops after a number of episodes does not have.
    :param kwargs: any other ``DQN`` argument.

    After construction, ``model.active_optimizations`` says what is really active and why
    anything requested is not. Compilation is not saved; :meth:`load` applies the
    optimizations it is given again.
    """

    policy_aliases = {
        **DQN.policy_aliases,
        "MlpPolicy": SnakeMlpPolicy,
        "CnnPolicy": SnakeCnnPolicy,
        "AttentionPolicy": AttentionPolicy,
    }

    def __init__(
        self,
        policy: str | type[DQNPolicy],
        env: Any,
        optimizations: OptimizationSettings | None = None,
        exploration_steps: int | None = None,
        **kwargs: Any,
    ):
        self.exploration_steps = exploration_steps
        self.optimizations = optimizations if optimizations is not None else OptimizationSettings.load()
        kwargs.setdefault("batch_size", self.optimizations.batch_size)
        self.active_optimizations: ActiveOptimizations | None = None
        super().__init__(policy, env, **kwargs)

    def _setup_model(self) -> None:
        super()._setup_model()
        self.active_optimizations = apply_optimizations(self, self.optimizations)

    def _on_step(self) -> None:
        super()._on_step()
        if self.exploration_steps:
            progress = min(1.0, self.num_timesteps / self.exploration_steps)
            start, end = self.exploration_initial_eps, self.exploration_final_eps
            self.exploration_rate = start + progress * (end - start)
            self.logger.record("rollout/exploration_rate", self.exploration_rate)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "optimizations", "active_optimizations"]

    @classmethod
    def load(
        cls,
        path: Any,
        env: Any = None,
        device: torch.device | str = "auto",
        optimizations: OptimizationSettings | None = None,
        **kwargs: Any,
    ) -> SnakeDQN:
        """Load a saved model and apply ``optimizations`` (``None``: resolved as in ``__init__``)."""
        optimizations = optimizations if optimizations is not None else OptimizationSettings.load()
        return super().load(path, env=env, device=device, optimizations=optimizations, **kwargs)
