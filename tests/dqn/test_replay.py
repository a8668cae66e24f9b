"""DeviceReplayBuffer: SB3's samples for the same indices, save and load, stated memory, when it is used."""

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.buffers import NStepReplayBuffer, ReplayBuffer

from sb3_snake import BatchedSnakeVecEnv, SnakeDQN
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.dqn.replay import EXTRA_BYTES_PER_TRANSITION, DeviceReplayBuffer
from sb3_snake.persistence import load_model, load_replay_buffer, save_model, save_replay_buffer
from tests.conftest import SMALL_POLICY, cuda

FAST = OptimizationSettings(use_torch_compile=False, use_bf16=False, num_threads=1)
SPACE, ACTIONS = spaces.Box(0, 1, (5, 4, 4), np.uint8), spaces.Discrete(4)


def filled_pair(n_steps: int, steps: int, buffer_size: int = 64, n_envs: int = 4):
    """SB3's buffer and ours, given the same random transitions (dones and timeouts included)."""
    sb3 = NStepReplayBuffer(buffer_size, SPACE, ACTIONS, "cpu", n_envs=n_envs, n_steps=n_steps, gamma=0.9)
    if n_steps == 1:
        sb3 = ReplayBuffer(buffer_size, SPACE, ACTIONS, "cpu", n_envs=n_envs)
    ours = DeviceReplayBuffer(buffer_size, SPACE, ACTIONS, "cpu", n_envs=n_envs, n_steps=n_steps, gamma=0.9)
    rng = np.random.default_rng(1)
    for _ in range(steps):
        obs, next_obs = rng.integers(0, 2, (2, n_envs, *SPACE.shape), dtype=np.uint8)
        done = rng.random(n_envs) < 0.2
        infos = [{"TimeLimit.truncated": bool(t)} for t in rng.random(n_envs) < 0.1]
        args = (obs, next_obs, rng.integers(0, 4, n_envs), rng.random(n_envs).astype(np.float32), done, infos)
        sb3.add(*args)
        ours.add(*args)
    return sb3, ours


@pytest.mark.parametrize("n_steps", [1, 3])
@pytest.mark.parametrize("steps", [10, 23])  # part-filled, and wrapped past its 16 rows
def test_samples_are_sb3s_for_the_same_indices(n_steps, steps):
    sb3, ours = filled_pair(n_steps, steps, buffer_size=64)
    upper = sb3.buffer_size if sb3.full else sb3.pos
    rows = np.random.default_rng(2).integers(0, upper, 200)
    np.random.seed(3)
    theirs = sb3._get_samples(rows)
    np.random.seed(3)
    envs = np.random.randint(0, sb3.n_envs, size=rows.shape)  # the env indices SB3 drew
    mine = ours.samples_at(torch.as_tensor(rows), torch.as_tensor(envs))
    for name in ("observations", "actions", "next_observations", "dones", "rewards", "discounts"):
        expected, actual = getattr(theirs, name), getattr(mine, name)
        if expected is None:
            assert actual is None, name
            continue
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, name
        torch.testing.assert_close(actual, expected, msg=name)
    assert ours.timeouts.sum() == torch.as_tensor(sb3.timeouts).sum()  # n-step's temporary mark undone


def test_sampling_stays_on_the_device_and_in_range():
    _, ours = filled_pair(1, 10)
    batch = ours.sample(128)
    assert batch.observations.device == ours.device and batch.observations.shape == (128, *SPACE.shape)
    assert batch.observations.dtype == torch.uint8 and set(batch.actions.flatten().tolist()) <= {0, 1, 2, 3}
    with pytest.raises(ValueError, match="does not normalise"):
        ours.sample(4, env=object())


def test_memory_is_what_the_docstring_states():
    buffer = DeviceReplayBuffer(100_000, spaces.Box(0, 1, (5, 10, 10), np.uint8), ACTIONS, "cpu", n_envs=16)
    assert buffer.nbytes == 100_000 * (2 * 500 + EXTRA_BYTES_PER_TRANSITION) == 102_000_000
    assert buffer.observations.shape == (6250, 16, 5, 10, 10)


def test_save_and_load_keep_every_transition(tmp_path):
    _, ours = filled_pair(3, 23)
    save_replay_buffer(ours, tmp_path / "r.npz")
    fresh = DeviceReplayBuffer(64, SPACE, ACTIONS, "cpu", n_envs=4, n_steps=3, gamma=0.9)

    class Holder:
        replay_buffer = fresh

    assert load_replay_buffer(Holder, tmp_path / "r.npz") == 64
    rows = torch.arange(16)
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        original = torch.cat([getattr(ours, name)[ours.pos :], getattr(ours, name)[: ours.pos]])  # oldest first
        torch.testing.assert_close(getattr(fresh, name)[rows], original, msg=name)


def model_with_device_buffer(**kwargs):
    env = BatchedSnakeVecEnv(4, board_size=5, seed=0)
    return SnakeDQN(
        "AttentionPolicy",
        env,
        optimizations=FAST,
        batch_size=16,
        learning_starts=8,
        buffer_size=256,
        replay_buffer_class=DeviceReplayBuffer,
        replay_buffer_kwargs={"n_steps": kwargs.get("n_steps", 1)},
        policy_kwargs=SMALL_POLICY,
        seed=0,
        **kwargs,
    )


@pytest.mark.parametrize("kwargs", [{"n_steps": 3}, {"symmetry_augmentation": True}])
def test_training_and_saving_with_it(tmp_path, kwargs):
    model = model_with_device_buffer(**kwargs)
    model.learn(80)
    assert isinstance(model.replay_buffer, DeviceReplayBuffer) and model.replay_buffer.size() > 0
    save_model(model, tmp_path / "model.zip", replay_buffer=True)
    resumed = load_model(tmp_path / "model.zip", FAST, env=BatchedSnakeVecEnv(4, board_size=5), for_training=True)
    load_replay_buffer(resumed, tmp_path / "model.replay.npz")
    assert resumed.replay_buffer.size() == model.replay_buffer.size()


def test_a_cpu_model_keeps_sb3s_buffer():
    env = BatchedSnakeVecEnv(2, board_size=5, seed=0)
    for n_steps, kind in ((1, ReplayBuffer), (3, NStepReplayBuffer)):
        model = SnakeDQN(
            "AttentionPolicy", env, optimizations=FAST, n_steps=n_steps, policy_kwargs=SMALL_POLICY, device="cpu"
        )
        assert type(model.replay_buffer) is kind


@cuda
@pytest.mark.parametrize("n_steps", [1, 3])
def test_a_cuda_model_samples_on_the_gpu(n_steps):
    env = BatchedSnakeVecEnv(4, board_size=5, seed=0)
    model = SnakeDQN(
        "AttentionPolicy",
        env,
        optimizations=FAST,
        device="cuda",
        batch_size=16,
        learning_starts=8,
        n_steps=n_steps,
        buffer_size=256,
    )
    model.learn(64)
    assert isinstance(model.replay_buffer, DeviceReplayBuffer) and model.replay_buffer.n_steps == n_steps
    assert model.replay_buffer.sample(8).observations.device.type == "cuda"
