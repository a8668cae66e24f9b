"""SB3's rollout loop on tensors: a :class:`~sb3_snake.envs.BatchedSnakeVecEnv` stepped and a
:class:`~sb3_snake.dqn.replay.DeviceReplayBuffer` filled without NumPy in between.

SB3's ``collect_rollouts`` turns every step's observations, actions and rewards into NumPy arrays
and every game's ``info`` into a dict; for a batched env and a buffer on the device those are
copies to the host and back per env step. :class:`TensorRollouts` keeps them tensors
(``step_tensors``, ``add_tensors``) and reads on the host only which games finished, for the
callbacks (:func:`~sb3_snake.envs.batched_vec_env.finished_games`). Everything else it does as
SB3's loop does, in the same order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import RolloutReturn, TrainFreq
from stable_baselines3.common.utils import should_collect_more_steps

from sb3_snake.dqn.replay import DeviceReplayBuffer
from sb3_snake.envs import BatchedSnakeVecEnv
from sb3_snake.envs.batched_vec_env import finished_games
from sb3_snake.q_learning.targets import stall_as_death


class TensorRollouts:
    """Mixin for an SB3 DQN: ``collect_rollouts`` on tensors when the env and the buffer allow it."""

    def collect_rollouts(
        self,
        env: Any,
        callback: BaseCallback,
        train_freq: TrainFreq,
        replay_buffer: ReplayBuffer,
        action_noise: Any = None,
        learning_starts: int = 0,
        log_interval: int | None = None,
    ) -> RolloutReturn:
        """SB3's rollout loop, on tensors when it can: with a :class:`BatchedSnakeVecEnv` and a
        :class:`DeviceReplayBuffer` (a model on CUDA), observations, actions and transitions
        stay tensors; only which games finished is read on the host. Otherwise SB3's own loop runs."""
        on_tensors = isinstance(env, BatchedSnakeVecEnv) and isinstance(replay_buffer, DeviceReplayBuffer)
        if not on_tensors or self._vec_normalize_env is not None or action_noise is not None:
            return super().collect_rollouts(
                env, callback, train_freq, replay_buffer, action_noise, learning_starts, log_interval
            )
        self.policy.set_training_mode(False)
        num_collected_steps, num_collected_episodes = 0, 0
        callback.on_rollout_start()
        obs = torch.as_tensor(self._last_obs, device=env.device)
        while should_collect_more_steps(train_freq, num_collected_steps, num_collected_episodes):
            actions = self._act_on_tensors(obs, learning_starts, env.num_envs)
            step = env.step_tensors(actions)
            self.num_timesteps += env.num_envs
            num_collected_steps += 1
            dones, infos = finished_games(env, step)
            callback.update_locals({"actions": actions, "new_obs": step.observations, "dones": dones, "infos": infos})
            if not callback.on_step():
                self._last_obs = step.observations
                return RolloutReturn(
                    num_collected_steps * env.num_envs, num_collected_episodes, continue_training=False
                )
            self._update_info_buffer(infos, dones)
            next_obs = step.observations.index_copy(0, step.final_indices, step.final_observations)
            rewards, done, timeouts = step.rewards, step.terminated | step.truncated, step.truncated
            if self.stall_as_death:  # stored as lost (SB3's loop: SnakeDQN._store_transition)
                rewards, done = stall_as_death(rewards, step.terminated, step.truncated)
                timeouts = torch.zeros_like(step.truncated)
            replay_buffer.add_tensors(obs, next_obs, actions, rewards, done, timeouts)
            obs = step.observations
            self._update_current_progress_remaining(self.num_timesteps, self._total_timesteps)
            self._on_step()
            for _ in range(len(infos.finished)):
                num_collected_episodes += 1
                self._episode_num += 1
                if log_interval is not None and self._episode_num % log_interval == 0:
                    self.dump_logs()
        self._last_obs = obs
        callback.on_rollout_end()
        return RolloutReturn(num_collected_steps * env.num_envs, num_collected_episodes, continue_training=True)

    def _act_on_tensors(self, obs: torch.Tensor, learning_starts: int, num_envs: int) -> torch.Tensor:
        """SB3's DQN action choice on tensors: random before ``learning_starts``; afterwards one
        exploration draw per vector step (as ``DQN.predict``; the moves from the model's
        ``random_actions``), else the greedy action of every game."""
        if self.num_timesteps < learning_starts or np.random.rand() < self.exploration_rate:
            return self.random_actions(obs)
        with torch.no_grad():
            return self.q_net(obs.to(self.device)).argmax(dim=1).to(obs.device)
