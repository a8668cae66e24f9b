"""``DeviceReplayBuffer``: SB3's replay buffer kept as torch tensors on the training device.

The arrays of SB3's ``ReplayBuffer``, as tensors on the model's device, sampled there (``torch.randint``, one
gather per array): no NumPy and no host-to-device transfer per batch; a transition is copied to the device once,
when it is added. It is SB3's ``ReplayBuffer`` and ``NStepReplayBuffer`` in one (``n_steps=1`` is the plain
1-step buffer): the same ``add``/``sample`` contract and n-step returns, so symmetry augmentation,
``save_replay_buffer`` and every SB3 caller work unchanged; a test holds its samples to SB3's for the same
indices. It takes ``buffer_size * (2 * C * H * W + 20)`` bytes on the device
(:data:`EXTRA_BYTES_PER_TRANSITION`); ``optimize_memory_usage`` is not supported.
Design notes: docs/design-notes.md, "sb3_snake/dqn/replay.py".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer, ReplayBuffer
from stable_baselines3.common.type_aliases import ReplayBufferSamples

#: Bytes per transition besides the two observations: int64 action, float32 reward, done, timeout.
EXTRA_BYTES_PER_TRANSITION = 8 + 3 * 4


class DeviceReplayBuffer(ReplayBuffer):
    """A replay buffer whose arrays are tensors on ``device``; 1-step or n-step returns.

    :param buffer_size: transitions kept (all envs together), as in SB3.
    :param n_steps: returns over this many steps (SB3's ``NStepReplayBuffer`` when above 1).
    :param gamma: discount of the n-step returns.
    """

    observations: torch.Tensor
    next_observations: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    timeouts: torch.Tensor

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: torch.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        n_steps: int = 1,
        gamma: float = 0.99,
    ):
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        if optimize_memory_usage:
            raise ValueError("DeviceReplayBuffer does not support optimize_memory_usage")
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"DeviceReplayBuffer stores discrete actions, got {action_space}")
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.optimize_memory_usage = False
        self.handle_timeout_termination = handle_timeout_termination
        self.n_steps, self.gamma = n_steps, gamma
        rows, device = (self.buffer_size, self.n_envs), self.device
        observation_dtype = torch.from_numpy(np.zeros(0, dtype=observation_space.dtype)).dtype
        self.observations = torch.zeros((*rows, *self.obs_shape), dtype=observation_dtype, device=device)
        self.next_observations = torch.zeros_like(self.observations)
        self.actions = torch.zeros((*rows, self.action_dim), dtype=torch.int64, device=device)
        self.rewards = torch.zeros(rows, dtype=torch.float32, device=device)
        self.dones = torch.zeros(rows, dtype=torch.float32, device=device)
        self.timeouts = torch.zeros(rows, dtype=torch.float32, device=device)

    @property
    def nbytes(self) -> int:
        """Device memory the buffer holds."""
        arrays = (self.observations, self.next_observations, self.actions, self.rewards, self.dones, self.timeouts)
        return sum(array.numel() * array.element_size() for array in arrays)

    def add(
        self,
        obs: Any,
        next_obs: Any,
        action: Any,
        reward: Any,
        done: Any,
        infos: list[dict[str, Any]],
    ) -> None:
        """SB3's ``add`` (NumPy from ``collect_rollouts``): one copy to the device per env step."""
        timeouts = [info.get("TimeLimit.truncated", False) for info in infos]
        self.add_tensors(obs, next_obs, action, reward, done, timeouts)

    def add_tensors(self, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any, timeouts: Any) -> None:
        """Add one step of every env from tensors (or anything ``torch.as_tensor`` takes)."""
        row, device = self.pos, self.device
        self.observations[row] = torch.as_tensor(obs, device=device).reshape(self.n_envs, *self.obs_shape)
        self.next_observations[row] = torch.as_tensor(next_obs, device=device).reshape(self.n_envs, *self.obs_shape)
        self.actions[row] = torch.as_tensor(action, device=device).reshape(self.n_envs, self.action_dim)
        self.rewards[row] = torch.as_tensor(reward, device=device)
        self.dones[row] = torch.as_tensor(done, device=device)
        if self.handle_timeout_termination:
            self.timeouts[row] = torch.as_tensor(timeouts, device=device)
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full, self.pos = True, 0

    @property
    def last_row(self) -> int:
        """The row written last (the one before ``pos``, wrapping)."""
        return (self.pos - 1) % self.buffer_size

    def sample(self, batch_size: int, env: Any = None) -> ReplayBufferSamples:
        """``batch_size`` transitions drawn uniformly on the device (``env`` normalisation is not supported)."""
        if env is not None:
            raise ValueError("DeviceReplayBuffer does not normalise with a VecNormalize env")
        batch_indices = torch.randint(self.size(), (batch_size,), device=self.device)
        env_indices = torch.randint(self.n_envs, (batch_size,), device=self.device)
        return self.samples_at(batch_indices, env_indices)

    def samples_at(
        self, batch_indices: torch.Tensor, env_indices: torch.Tensor, last_row: int | torch.Tensor | None = None
    ) -> ReplayBufferSamples:
        """The transitions at rows ``batch_indices`` of envs ``env_indices`` (n-step when ``n_steps > 1``).

        ``last_row``: the row written last (default: :attr:`last_row`); n-step sequences
        stop there unless it ended an episode. A 0-dim device tensor keeps the whole gather free
        of host values, as a CUDA graph that replays it needs (:class:`~sb3_snake.dqn.gradient_step.CapturedSteps`).
        """
        if self.n_steps > 1:
            return self._n_step_samples(batch_indices, env_indices, self.last_row if last_row is None else last_row)
        flat = batch_indices * self.n_envs + env_indices
        return ReplayBufferSamples(
            observations=self._gather(self.observations, flat),
            actions=self._gather(self.actions, flat),
            next_observations=self._gather(self.next_observations, flat),
            dones=(self._gather(self.dones, flat) * (1 - self._gather(self.timeouts, flat)))[:, None],
            rewards=self._gather(self.rewards, flat)[:, None],
        )

    @staticmethod
    def _gather(array: torch.Tensor, flat_indices: torch.Tensor) -> torch.Tensor:
        """Rows of ``array`` viewed as (rows * envs, ...): one ``index_select`` (several times
        faster than indexing with two index tensors, on the CPU)."""
        return array.flatten(0, 1).index_select(0, flat_indices)

    def _n_step_samples(
        self, batch_indices: torch.Tensor, env_indices: torch.Tensor, last_row: int | torch.Tensor
    ) -> ReplayBufferSamples:
        # As SB3's NStepReplayBuffer, which marks the row before ``pos`` truncated while it samples
        # (unless it ended an episode) so that no sequence runs on into older transitions; here
        # that row ends a sequence by comparison, and the buffer is never written while sampling.
        steps = torch.arange(self.n_steps, device=self.device)
        rows = (batch_indices[:, None] + steps) % self.buffer_size
        sequence = (rows * self.n_envs + env_indices[:, None]).flatten()

        def along(array: torch.Tensor) -> torch.Tensor:
            return self._gather(array, sequence).view(-1, self.n_steps)

        ended = ((along(self.dones) + along(self.timeouts)) > 0) | (rows == last_row)
        first_end = torch.where(ended.any(dim=1), ended.to(torch.uint8).argmax(dim=1), self.n_steps - 1)
        mask = steps[None, :] <= first_end[:, None]
        target_q_discounts = self.gamma ** mask.sum(dim=1, keepdim=True).to(torch.float32)
        discounts = self.gamma ** steps.to(torch.float32)
        returns = (along(self.rewards) * discounts * mask).sum(dim=1, keepdim=True)
        last = ((batch_indices + first_end) % self.buffer_size) * self.n_envs + env_indices
        # Where the sequence was cut at ``last_row`` without an episode's end, its done is 0 anyway.
        final_dones = (self._gather(self.dones, last) * (1.0 - self._gather(self.timeouts, last)))[:, None]
        flat = batch_indices * self.n_envs + env_indices
        return ReplayBufferSamples(
            observations=self._gather(self.observations, flat),
            actions=self._gather(self.actions, flat),
            next_observations=self._gather(self.next_observations, last),
            dones=final_dones,
            rewards=returns,
            discounts=target_q_discounts,
        )
