"""One move of every game as tensors on the learner's device: what PQN's rollout reads from any
``VecEnv``.

A :class:`~sb3_snake.envs.BatchedSnakeVecEnv` steps on tensors (``step_tensors``) and tells the
host only which games finished, for the callbacks; any other ``VecEnv`` steps through SB3's
``VecEnv.step``, whose ``terminal_observation`` and ``TimeLimit.truncated`` say the same.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv

from sb3_snake.envs.batched_vec_env import BatchedSnakeVecEnv, finished_games


class Transition(NamedTuple):
    """One move of every game, as tensors on the model's device, with SB3's ``dones`` and
    ``infos`` for the callbacks. ``observations`` are the boards play continues from (a finished
    game's next start); ``final_observations`` the last boards of the games in ``final_indices``."""

    observations: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_indices: torch.Tensor
    final_observations: torch.Tensor
    dones: np.ndarray
    infos: list[dict[str, Any]]


def step_games(env: VecEnv, actions: torch.Tensor, device: torch.device) -> Transition:
    """Play ``actions`` (one per game) and return the move's :class:`Transition` on ``device``."""
    if isinstance(env, BatchedSnakeVecEnv):
        step = env.step_tensors(actions.to(env.device))
        dones, infos = finished_games(env, step)
        on_device = (
            step.observations,
            step.rewards,
            step.terminated,
            step.truncated,
            step.final_indices,
            step.final_observations,
        )
        return Transition(*(tensor.to(device) for tensor in on_device), dones, infos)
    new_obs, rewards, dones, infos = env.step(actions.cpu().numpy())
    truncated = np.array(
        [done and info.get("TimeLimit.truncated", False) for done, info in zip(dones, infos, strict=True)]
    )
    finals = np.flatnonzero(dones)
    final_obs = np.stack([infos[i]["terminal_observation"] for i in finals]) if len(finals) else new_obs[:0]
    as_tensor = lambda array: torch.as_tensor(array, device=device)  # noqa: E731
    return Transition(
        as_tensor(new_obs),
        as_tensor(rewards),
        as_tensor(dones & ~truncated),
        as_tensor(truncated),
        as_tensor(finals),
        as_tensor(final_obs),
        dones,
        infos,
    )
