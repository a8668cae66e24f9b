"""PQN's rollout: every game played ``n_steps`` moves epsilon-greedily, and the Q(lambda) targets of
what was played (:func:`collect_rollout`).

A move of every game comes as tensors on the learner's device (:func:`step_games`): a
:class:`~sb3_snake.envs.BatchedSnakeVecEnv` steps on tensors (``step_tensors``) and tells the host
only which games finished, for the callbacks; any other ``VecEnv`` steps through SB3's
``VecEnv.step``, whose ``terminal_observation`` and ``TimeLimit.truncated`` say the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv

from sb3_snake.envs.action_masks import action_masks
from sb3_snake.envs.batched_vec_env import BatchedSnakeVecEnv, finished_games
from sb3_snake.pqn.gradient_step import Samples
from sb3_snake.pqn.returns import lambda_returns
from sb3_snake.q_learning import targets
from sb3_snake.q_learning.targets import fatal_move_values, shaping_rewards

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm


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


def collect_rollout(model: BaseAlgorithm, callback: BaseCallback) -> Samples | None:
    """``model.n_steps`` moves of every game, epsilon-greedy, and their Q(lambda) targets; None
    when a callback stopped training. The Q-values that choose each move also bootstrap the move
    before it: one forward pass per move (and one for the games that just ended). With the model's
    options, a stall counts as a death and shaping towards the food is added to the rewards (the
    env's own rewards and scores stay the rules'), and the moves that die at once are kept with
    their known values."""
    assert model.env is not None
    model.policy.set_training_mode(False)
    callback.on_rollout_start()
    obs = torch.as_tensor(model._last_obs, device=model.device)
    observations, actions, rewards, bootstraps, cuts, fatal_moves = [], [], [], [], [], []
    reads_moves, egocentric = model.safe_exploration or model.fatal_move_targets, model.action_space.n == 3
    with torch.no_grad():
        q_values = model.q_net(obs)
        for _ in range(model.n_steps):
            model.exploration_rate = model.epsilon(model.member_timesteps)
            safe = action_masks(obs, egocentric) if reads_moves else None
            action = model.explore(obs, q_values, safe)
            step = step_games(model.env, action, model.device)
            model.num_timesteps += model.env.num_envs
            callback.update_locals({"actions": action, "new_obs": step.observations, **step._asdict()})
            if not callback.on_step():
                model._last_obs = step.observations
                return None
            model._update_info_buffer(step.infos, step.dones)
            next_q_values = model.q_net(step.observations)
            best = next_q_values.max(dim=1).values
            boards = step.observations
            if len(step.final_indices):
                final_best = model.q_net(step.final_observations).max(dim=1).values
                best = best.index_copy(0, step.final_indices, final_best)
                boards = boards.index_copy(0, step.final_indices, step.final_observations)
            reward, terminated, cut = step.rewards.float(), step.terminated, step.terminated | step.truncated
            if model.stall_as_death:  # lost: a death's reward, and no bootstrap from the last board
                reward, terminated = targets.stall_as_death(reward, terminated, step.truncated)
            if model.food_shaping:
                reward = reward + shaping_rewards(model.food_shaping, model.gamma, obs, boards, terminated)
            observations.append(obs)
            actions.append(action)
            rewards.append(reward)
            bootstraps.append(best.masked_fill(terminated, 0.0))
            cuts.append(cut)
            if model.fatal_move_targets:
                fatal_moves.append(~safe)
            obs, q_values = step.observations, next_q_values
    model._last_obs = obs
    callback.on_rollout_end()
    returns = lambda_returns(
        torch.stack(rewards), torch.stack(bootstraps), torch.stack(cuts), model.gamma, model.q_lambda
    )
    played = torch.cat(observations)
    fatal = torch.cat(fatal_moves) if model.fatal_move_targets else None
    fatal_values = fatal_move_values(model.food_shaping, played) if model.fatal_move_targets else None
    return Samples(played, torch.cat(actions), returns.flatten(), fatal, fatal_values)
