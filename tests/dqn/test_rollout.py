"""The rollout loop on tensors: it stores what SB3's loop stores, and builds nothing in NumPy."""

import numpy as np
import pytest
import torch
from stable_baselines3.common.buffers import ReplayBuffer

from sb3_snake import BatchedSnakeVecEnv, SnakeDQN
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.dqn.replay import DeviceReplayBuffer
from tests.conftest import SMALL_POLICY

FAST = OptimizationSettings(use_torch_compile=False, use_bf16=False, num_threads=1)


def greedy_model(replay_buffer_class):
    """A model that acts greedily and never updates, so both rollout loops act identically."""
    model = SnakeDQN(
        "AttentionPolicy",
        BatchedSnakeVecEnv(4, board_size=5, seed=7),
        optimizations=FAST,
        batch_size=16,
        learning_starts=0,
        gradient_steps=0,
        exploration_initial_eps=0.0,
        exploration_final_eps=0.0,
        buffer_size=4_000,
        replay_buffer_class=replay_buffer_class,
        device="cpu",
        policy_kwargs=SMALL_POLICY,
        seed=0,
    )
    return model


def test_the_tensor_rollout_loop_stores_what_sb3s_loop_stores():
    from sb3_snake.training.callbacks import EpisodeBudget, EpisodeRecord

    on_tensors, reference = greedy_model(DeviceReplayBuffer), greedy_model(ReplayBuffer)
    reference.q_net.load_state_dict(on_tensors.q_net.state_dict())
    records = []
    for model in (on_tensors, reference):
        record = EpisodeRecord()
        model.learn(600, callback=EpisodeBudget(None, record, 0.0))
        records.append(record)
    ours, theirs = on_tensors.replay_buffer, reference.replay_buffer
    assert ours.pos == theirs.pos == 152 and on_tensors._episode_num == reference._episode_num > 0  # 38 x 16 steps
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        np.testing.assert_array_equal(getattr(ours, name)[: ours.pos].numpy(), getattr(theirs, name)[: theirs.pos])
    assert records[0].scores == records[1].scores and records[0].lengths == records[1].lengths
    assert len(on_tensors.ep_info_buffer) == len(reference.ep_info_buffer)
    assert [info["l"] for info in on_tensors.ep_info_buffer] == [info["l"] for info in reference.ep_info_buffer]


def test_the_tensor_rollout_loop_never_builds_observations_in_numpy(monkeypatch):
    model = greedy_model(DeviceReplayBuffer)
    monkeypatch.setattr(BatchedSnakeVecEnv, "step_wait", lambda self: pytest.fail("the NumPy step ran"))
    model.learn(64)
    assert model.num_timesteps == 64 and isinstance(model._last_obs, torch.Tensor)
