"""Potential-based shaping towards the food: the potential, the shaped term, that it telescopes
over a game, and that SnakeDQN stores it on both rollout paths while the env's rewards stay."""

import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from sb3_snake import BatchedSnakeVecEnv, SnakeDQN, SnakeEnv
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.dqn.replay import DeviceReplayBuffer
from sb3_snake.dqn.shaping import food_potential, shaping_rewards
from sb3_snake.envs.rules import BASE_CHANNELS, FOOD, HEAD
from sb3_snake.training.config import TrainConfig
from tests.conftest import SMALL_POLICY

PLAIN = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=1)


def board(size, head, food):
    obs = torch.zeros(1, BASE_CHANNELS, size, size, dtype=torch.uint8)
    obs[0, HEAD, head[0], head[1]] = 1
    if food is not None:
        obs[0, FOOD, food[0], food[1]] = 1
    return obs


def test_potential_falls_with_the_manhattan_distance_to_the_food():
    # 5x5 board: the largest distance is 8.
    assert food_potential(board(5, (0, 0), (2, 3))).item() == pytest.approx(1 - 5 / 8)
    assert food_potential(board(5, (2, 2), (2, 1))).item() == pytest.approx(1 - 1 / 8)
    assert food_potential(board(5, (4, 4), (0, 0))).item() == pytest.approx(0.0)
    # rectangular boards: distance over (H + W - 2)
    obs = torch.zeros(1, BASE_CHANNELS, 4, 6, dtype=torch.uint8)
    obs[0, HEAD, 3, 0], obs[0, FOOD, 0, 5] = 1, 1
    assert food_potential(obs).item() == pytest.approx(0.0)


def test_shaping_is_zero_potential_after_a_terminated_game():
    now, later = board(5, (2, 2), (2, 0)), board(5, (2, 1), (2, 0))
    stepped = shaping_rewards(0.5, 0.9, now, later, torch.tensor([False]))
    assert stepped.item() == pytest.approx(0.5 * (0.9 * (1 - 1 / 8) - (1 - 2 / 8)))
    died = shaping_rewards(0.5, 0.9, now, later, torch.tensor([True]))
    assert died.item() == pytest.approx(-0.5 * (1 - 2 / 8))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_shaping_telescopes_over_a_whole_game(seed):
    """Ng et al.'s condition: the discounted sum of the added terms over a game is
    scale * (gamma**T * phi(last board) - phi(first board)), with phi = 0 after a death,
    whatever was played (here random moves until the game ends)."""
    env, rng, gamma, scale = SnakeEnv(board_size=6), np.random.default_rng(seed), 0.97, 0.7
    obs, _ = env.reset(seed=seed)
    first, total, discount, terminated, truncated = torch.as_tensor(obs)[None], 0.0, 1.0, False, False
    while not (terminated or truncated):
        next_obs, _, terminated, truncated, _ = env.step(int(rng.integers(4)))
        now, later = torch.as_tensor(obs)[None], torch.as_tensor(next_obs)[None]
        total += discount * shaping_rewards(scale, gamma, now, later, torch.tensor([terminated])).item()
        discount *= gamma
        obs = next_obs
    last = 0.0 if terminated else food_potential(torch.as_tensor(obs)[None]).item()
    assert total == pytest.approx(scale * (discount * last - food_potential(first).item()), abs=1e-5)


def after_random_play(food_shaping, replay_buffer_class=None, steps=400):
    """A model after ``steps`` env steps of seeded random play on 8 games (it never learns)."""
    model = SnakeDQN(
        "AttentionPolicy",
        BatchedSnakeVecEnv(8, board_size=5, seed=0),
        optimizations=PLAIN,
        policy_kwargs=SMALL_POLICY,
        learning_starts=10**6,
        buffer_size=1024,
        batch_size=32,
        seed=0,
        device="cpu",
        food_shaping=food_shaping,
        replay_buffer_class=replay_buffer_class,
    )
    return model.learn(total_timesteps=steps)


def stored(model):
    """The transitions in ``model``'s replay buffer, as flat tensors."""
    buffer, as_tensor = model.replay_buffer, torch.as_tensor
    rows = buffer.pos
    return {
        "obs": as_tensor(buffer.observations[:rows]).flatten(0, 1),
        "next_obs": as_tensor(buffer.next_observations[:rows]).flatten(0, 1),
        "rewards": as_tensor(buffer.rewards[:rows]).flatten().float(),
        "terminated": (as_tensor(buffer.dones[:rows]) * (1 - as_tensor(buffer.timeouts[:rows]))).flatten().bool(),
    }


@pytest.mark.parametrize("path", ["sb3", "tensors"])
def test_model_stores_the_rules_reward_plus_the_shaping(path):
    """The same seeded random play with and without shaping: the stored rewards differ by exactly
    the shaping term of each stored transition (SB3's loop, and the tensor loop that a
    DeviceReplayBuffer takes), and games that died or ate are among them."""
    buffer_class = DeviceReplayBuffer if path == "tensors" else None
    plain, shaped = stored(after_random_play(0.0, buffer_class)), stored(after_random_play(0.5, buffer_class))
    torch.testing.assert_close(shaped["obs"], plain["obs"])
    assert plain["terminated"].any() and (plain["rewards"] > 0).any()
    expected = shaping_rewards(0.5, 0.99, plain["obs"], plain["next_obs"], plain["terminated"])
    torch.testing.assert_close(shaped["rewards"] - plain["rewards"], expected)


def test_episode_returns_keep_the_rules_rewards():
    """What the env reports (and so the scores and SB3's ep_rew_mean) is not shaped."""
    returns = [info["r"] for info in after_random_play(1.0).ep_info_buffer]
    assert returns
    # the rules pay +1 a food and -1 a death: every return is a whole number
    assert all(float(r) == round(float(r)) for r in returns)


def test_vec_normalize_is_refused():
    env = VecNormalize(DummyVecEnv([lambda: SnakeEnv(board_size=5)]))
    with pytest.raises(ValueError, match="food_shaping needs the env's own observations"):
        SnakeDQN(
            "AttentionPolicy", env, optimizations=PLAIN, policy_kwargs=SMALL_POLICY, device="cpu", food_shaping=1.0
        )


@pytest.mark.parametrize("value", [-0.1, float("nan"), float("inf")])
def test_config_refuses_a_bad_scale(value):
    with pytest.raises(ValueError, match="food_shaping must be a finite number of at least 0"):
        TrainConfig(food_shaping=value)
