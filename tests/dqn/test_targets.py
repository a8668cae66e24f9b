"""TD targets and potential-based shaping towards the food: the potential, the shaped term, that
it telescopes over a game, that shaping the TD targets equals shaping the stored rewards (1-step
and n-step, episode ends and truncations included), and that replay buffers keep the env's rewards."""

import numpy as np
import pytest
import torch
from stable_baselines3.common.buffers import NStepReplayBuffer, ReplayBuffer
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from sb3_snake import BatchedSnakeVecEnv, SnakeDQN, SnakeEnv
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.dqn.replay import DeviceReplayBuffer
from sb3_snake.dqn.targets import td_targets
from sb3_snake.envs.rules import BASE_CHANNELS, FOOD, HEAD
from sb3_snake.q_learning.targets import food_potential, shaping_rewards
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
def test_the_replay_buffer_holds_the_rules_rewards_with_or_without_shaping(path):
    """The same seeded random play with and without shaping stores the same transitions (SB3's
    loop, and the tensor loop that a DeviceReplayBuffer takes): shaping lives in the TD targets."""
    buffer_class = DeviceReplayBuffer if path == "tensors" else None
    plain, shaped = stored(after_random_play(0.0, buffer_class)), stored(after_random_play(0.5, buffer_class))
    assert plain["terminated"].any() and (plain["rewards"] > 0).any()
    for name, values in plain.items():
        torch.testing.assert_close(shaped[name], values, msg=name)


def random_play(steps=120, envs=6, gamma=0.9, scale=0.7):
    """Seeded random play on 5x5 boards whose games are truncated after 6 moves without food:
    each transition, its env reward, and that reward shaped as it was stored before shaping
    moved into the TD targets."""
    env = BatchedSnakeVecEnv(envs, board_size=5, seed=3, max_steps_without_food=6)
    rng, obs, played = np.random.default_rng(3), env.reset(), []
    for _ in range(steps):
        actions = rng.integers(4, size=envs)
        new_obs, rewards, dones, infos = env.step(actions)
        next_obs, terminated, truncated = new_obs.copy(), np.zeros(envs, bool), np.zeros(envs, bool)
        for i in np.flatnonzero(dones):
            next_obs[i] = infos[i]["terminal_observation"]
            truncated[i] = infos[i]["TimeLimit.truncated"]
            terminated[i] = not truncated[i]
        shaping = shaping_rewards(
            scale, gamma, torch.as_tensor(obs), torch.as_tensor(next_obs), torch.as_tensor(terminated)
        )
        shaped = rewards + shaping.numpy().astype(rewards.dtype)
        played.append((obs, next_obs, actions, rewards, shaped, dones, truncated))
        obs = new_obs
    return env, played


def filled_buffers(kind, n_steps, gamma, played, env):
    """Two buffers of ``kind`` holding the same play: with the env's rewards, and with shaped ones."""
    buffers = []
    for column in (3, 4):
        if kind == "device":
            buffer = DeviceReplayBuffer(
                4096, env.observation_space, env.action_space, "cpu", len(played[0][0]), n_steps=n_steps, gamma=gamma
            )
        else:
            n_step = {"n_steps": n_steps, "gamma": gamma}
            cls, kwargs = (NStepReplayBuffer, n_step) if n_steps > 1 else (ReplayBuffer, {})
            buffer = cls(4096, env.observation_space, env.action_space, "cpu", len(played[0][0]), **kwargs)
        for step in played:
            infos = [{"TimeLimit.truncated": bool(truncated)} for truncated in step[6]]
            buffer.add(step[0], step[1], step[2], step[column], step[5], infos)
        buffers.append(buffer)
    return buffers


@pytest.mark.parametrize("kind", ["sb3", "device"])
@pytest.mark.parametrize("n_steps", [1, 3])
def test_shaped_td_targets_equal_those_of_stored_shaped_rewards(kind, n_steps):
    """Shaping telescopes: the TD targets of the env's rewards plus the shaping term of each
    sampled sequence are the TD targets of the shaped rewards stored, for SB3's buffers and the
    device buffer, 1-step and n-step, over batches that hold deaths, truncations, n-step
    sequences cut short by either, and sequences cut at the last row written."""
    gamma, scale = 0.9, 0.7
    env, played = random_play(gamma=gamma, scale=scale)
    plain, shaped = filled_buffers(kind, n_steps, gamma, played, env)
    torch.manual_seed(0)
    weights = torch.randn(int(np.prod(env.observation_space.shape)), 4)

    def q_values(observations):
        return observations.float().flatten(1) @ weights

    truncated_in_buffer = bool(np.asarray(plain.timeouts).any())
    assert truncated_in_buffer and bool(np.asarray(plain.dones).any())
    for seed in range(5):
        batches = []
        for buffer in (plain, shaped):
            np.random.seed(seed)
            torch.manual_seed(seed)
            batches.append(buffer.sample(512))
        ours, stored_shaped = batches
        torch.testing.assert_close(ours.observations, stored_shaped.observations)
        assert bool((ours.dones > 0).any()) and bool((ours.dones == 0).any())
        if n_steps > 1:
            assert bool((ours.discounts > gamma**n_steps + 1e-6).any())  # sequences that ended early
        for online in (None, q_values):  # DQN and Double DQN
            expected = td_targets(stored_shaped, q_values, online, gamma)
            torch.testing.assert_close(td_targets(ours, q_values, online, gamma, food_shaping=scale), expected)
        assert not torch.allclose(td_targets(ours, q_values, None, gamma), expected)  # shaping changes them


def test_the_update_trains_on_the_shaped_targets(monkeypatch):
    """SnakeDQN with shaping takes the step that SB3's DQN takes on the stored shaped rewards."""
    import copy

    from stable_baselines3 import DQN

    from tests.conftest import fixed_batch, small_dqn

    ours = small_dqn(PLAIN, n_steps=3, food_shaping=0.5)
    theirs = copy.deepcopy(ours)
    batch = fixed_batch(ours, monkeypatch)
    discount = batch.discounts.flatten()
    terminated = batch.dones.flatten() > 0
    term = shaping_rewards(0.5, discount, batch.observations, batch.next_observations, terminated)
    shaped_batch = batch._replace(rewards=batch.rewards + term[:, None])
    monkeypatch.setattr(theirs.replay_buffer, "sample", lambda *args, **kwargs: shaped_batch)
    ours.train(gradient_steps=2, batch_size=32)
    DQN.train(theirs, gradient_steps=2, batch_size=32)
    for mine, reference in zip(ours.q_net.parameters(), theirs.q_net.parameters(), strict=True):
        torch.testing.assert_close(mine, reference)
    assert ours.logger.name_to_value["train/loss"] == pytest.approx(theirs.logger.name_to_value["train/loss"])


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
    with pytest.raises(ValueError, match="food_shaping must be from 0 to 1000000, got"):
        TrainConfig(food_shaping=value)
