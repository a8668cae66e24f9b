"""BatchedSnakeVecEnv: same rules as SnakeEnv, SB3's VecEnv contract, seeding, bad arguments."""

import numpy as np
import pytest
import torch
from stable_baselines3 import DQN

from sb3_snake import BatchedSnakeVecEnv, SnakeEnv
from sb3_snake.common.errors import UsageError
from sb3_snake.envs.rules import BODY, FOOD, HEAD, NECK, TAIL
from tests.conftest import cuda, random_state


def _food_of(obs):
    rows, cols = np.nonzero(obs[FOOD])
    return (int(rows[0]), int(cols[0])) if len(rows) else None


@pytest.mark.parametrize(
    ("board_size", "max_steps", "countdown", "stall_growth", "egocentric", "reachable"),
    [
        (4, 12, False, 0, False, False),
        (6, 20, False, 0, False, False),
        (10, 15, False, 0, False, False),
        (6, 20, True, 0, False, False),
        (6, 4, False, 1, False, False),
        (4, 12, False, 0, True, False),
        (6, 12, True, 0, True, False),
        (10, 12, False, 1, True, False),
        (4, 12, False, 0, False, True),
        (8, 20, True, 0, False, True),
        (10, 12, False, 1, True, True),
        (6, 12, True, 0, True, True),
    ],
)
def test_equivalent_to_snake_env_step_by_step(board_size, max_steps, countdown, stall_growth, egocentric, reachable):
    """Same random states, same random actions: same observations, rewards and flags."""
    num_games, rng = 32, np.random.default_rng(board_size)
    rules = {"board_size": board_size, "max_steps_without_food": max_steps, "countdown": countdown}
    rules.update(stall_growth=stall_growth, egocentric=egocentric, reachable=reachable)
    batched = BatchedSnakeVecEnv(num_games, seed=0, **rules)
    batched.reset()
    singles = [SnakeEnv(**rules) for _ in range(num_games)]
    for i, env in enumerate(singles):
        env.reset(seed=i)

    def restart(i):
        state = random_state(rng, board_size, max_length=board_size * board_size // 2)
        np.testing.assert_array_equal(singles[i].set_state(*state), batched.set_state(i, *state))

    for i in range(num_games):
        restart(i)
    events = {"ate": 0, "died": 0, "truncated": 0}
    for _ in range(150):
        actions = rng.integers(batched.action_space.n, size=num_games)
        obs, rewards, dones, infos = batched.step(actions)
        for i, env in enumerate(singles):
            expected_obs, reward, terminated, truncated, info = env.step(actions[i])
            got_obs = infos[i]["terminal_observation"] if dones[i] else obs[i]
            ate = reward == 1.0 and not dones[i]
            compared = [c for c in range(len(expected_obs)) if not (ate and c == FOOD)]  # new food differs by RNG
            np.testing.assert_array_equal(got_obs[compared], expected_obs[compared])
            assert rewards[i] == reward
            assert dones[i] == (terminated or truncated)
            assert infos[i]["length"] == info["length"] and infos[i]["score"] == info["score"]
            if dones[i]:
                assert infos[i]["TimeLimit.truncated"] == truncated
                assert infos[i]["is_success"] == info["is_success"]
                events["truncated" if truncated else "died"] += 1
                restart(i)
            elif ate:
                events["ate"] += 1
                # Food spawns differ by RNG: the single game takes the batched game's new food and
                # both play on (a set_state would restart the counters and the countdown's planes).
                env._food = _food_of(batched._games.observe_first(i + 1)[i].numpy())  # the unturned board
    assert all(count > 0 for count in events.values()), events


def test_vec_env_contract_on_episode_end():
    env = BatchedSnakeVecEnv(3, seed=1, max_steps_without_food=2)
    obs = env.reset()
    assert obs.shape == (3, 5, 10, 10) and obs.dtype == np.uint8
    env.set_state(0, [(0, 5), (1, 5), (2, 5)], 0, (9, 9))  # dies going up
    env.set_state(1, [(5, 5), (5, 4), (5, 3)], 1, (5, 6))  # eats going right
    env.set_state(2, [(5, 2), (5, 1), (5, 0)], 1, (0, 0))  # truncated after two steps
    before = env.set_state(0, [(0, 5), (1, 5), (2, 5)], 0, (9, 9))
    obs, rewards, dones, infos = env.step(np.array([0, 1, 1]))
    assert rewards.dtype == np.float32 and dones.dtype == bool
    np.testing.assert_array_equal(rewards, [-1.0, 1.0, 0.0])
    np.testing.assert_array_equal(dones, [True, False, False])
    np.testing.assert_array_equal(infos[0]["terminal_observation"], before)
    assert infos[0]["TimeLimit.truncated"] is False and infos[0]["is_success"] is False
    assert infos[0]["episode"]["r"] == -1.0 and infos[0]["episode"]["l"] == 1
    assert infos[0]["score"] == 0 and infos[0]["length"] == 3
    # The returned observation is the new game's: a fresh straight snake of three cells.
    assert obs[0][HEAD].sum() == 1 and obs[0][BODY].sum() == 2 and obs[0][FOOD].sum() == 1
    assert infos[1] == {"score": 1, "length": 4}

    obs, rewards, dones, infos = env.step(np.array([1, 1, 1]))
    assert dones[2] and infos[2]["TimeLimit.truncated"] is True
    assert infos[2]["episode"] == {"r": 0.0, "l": 2, "t": infos[2]["episode"]["t"]}
    assert infos[1]["score"] == 1  # game 1 goes on, its counters kept


def test_episode_statistics_sum_the_rewards():
    env = BatchedSnakeVecEnv(64, board_size=6, seed=3)
    env.reset()
    rng = np.random.default_rng(3)
    returns, lengths, finished = np.zeros(64), np.zeros(64, dtype=int), 0
    for _ in range(200):
        _, rewards, dones, infos = env.step(rng.integers(4, size=64))
        returns += rewards
        lengths += 1
        for i in np.flatnonzero(dones):
            assert infos[i]["episode"]["r"] == pytest.approx(returns[i])
            assert infos[i]["episode"]["l"] == lengths[i]
            assert infos[i]["score"] == infos[i]["length"] - 3
            returns[i], lengths[i] = 0, 0
            finished += 1
    assert finished > 100


def test_seeded_runs_repeat():
    def run(seed):
        env = BatchedSnakeVecEnv(16, seed=seed)
        frames = [env.reset()]
        rng = np.random.default_rng(0)
        for _ in range(100):
            frames.append(env.step(rng.integers(4, size=16))[0])
        return np.stack(frames)

    np.testing.assert_array_equal(run(5), run(5))
    assert not np.array_equal(run(5), run(6))


def test_sb3_seed_applies_at_next_reset():
    env = BatchedSnakeVecEnv(8)
    env.seed(11)
    first = env.reset()
    env.seed(11)
    np.testing.assert_array_equal(env.reset(), first)


def test_restarts_cover_every_start_and_only_starts():
    env = BatchedSnakeVecEnv(4096, seed=0)
    obs = env.reset()
    heads = {tuple(np.argwhere(o[HEAD])[0]) for o in obs}
    assert heads == {(r, c) for r in range(3, 7) for c in range(3, 7)}
    necks = obs[:, NECK].reshape(len(obs), -1).argmax(1)
    tails = obs[:, TAIL].reshape(len(obs), -1).argmax(1)
    head_cells = obs[:, HEAD].reshape(len(obs), -1).argmax(1)
    np.testing.assert_array_equal(head_cells - necks, necks - tails)  # straight


def test_food_is_uniform_over_free_cells():
    """Chi-square check of food positions over many restarts of one start state (fixed seed)."""
    env = BatchedSnakeVecEnv(20000, board_size=4, seed=0)
    obs = env.reset().reshape(20000, 5, 16)
    snake = obs[:, HEAD] * 2 + obs[:, BODY]
    first = snake[0]
    same_start = (snake == first).all(axis=1)
    food = obs[same_start, FOOD].argmax(1)
    counts = np.bincount(food, minlength=16)[first == 0]
    assert counts.sum() == same_start.sum() and (np.bincount(food, minlength=16)[first > 0] == 0).all()
    expected = counts.sum() / len(counts)
    chi_square = ((counts - expected) ** 2 / expected).sum()
    assert chi_square < 45, (counts, chi_square)  # 12 degrees of freedom: p < 1e-5 above 45


def test_trains_with_sb3_dqn_and_fills_episode_buffer():
    env = BatchedSnakeVecEnv(8, board_size=6, seed=0)
    model = DQN(
        "MlpPolicy", env, learning_starts=64, buffer_size=2000, batch_size=32, seed=0, policy_kwargs={"net_arch": [32]}
    )
    model.learn(total_timesteps=800)
    assert len(model.ep_info_buffer) > 0
    assert {"r", "l", "t"} <= set(model.ep_info_buffer[0])


def test_tensor_interface_matches_vec_env_interface():
    a, b = BatchedSnakeVecEnv(32, seed=9), BatchedSnakeVecEnv(32, seed=9)
    np.testing.assert_array_equal(a.reset(), b.reset_tensors().numpy())
    rng = np.random.default_rng(9)
    for _ in range(50):
        actions = rng.integers(4, size=32)
        obs, rewards, dones, _ = a.step(actions)
        step = b.step_tensors(torch.as_tensor(actions))
        np.testing.assert_array_equal(obs, step.observations.numpy())
        np.testing.assert_array_equal(rewards, step.rewards.numpy())
        np.testing.assert_array_equal(dones, (step.terminated | step.truncated).numpy())
    assert b.scores.shape == (32,) and (b.lengths >= 3).all()


def test_returned_observations_are_not_reused():
    env = BatchedSnakeVecEnv(4, seed=0)
    first = env.reset()
    kept = first.copy()
    env.step(np.zeros(4, dtype=int))
    np.testing.assert_array_equal(first, kept)


def test_render_and_attributes():
    env = BatchedSnakeVecEnv(20, board_size=5, seed=0, render_mode="rgb_array")
    env.reset()
    assert env.render().shape == (4 * 5 * 16, 4 * 5 * 16, 3)  # the first 16 games, 4 x 4
    assert env.render("ansi").count("H") == 1
    assert len(env.get_images()) == 20
    assert env.get_attr("render_mode") == ["rgb_array"] * 20
    assert env.env_is_wrapped(object) == [False] * 20
    env.set_attr("render_mode", "ansi")  # SB3's contract, for every game at once
    assert env.get_attr("render_mode", indices=[0, 19]) == ["ansi", "ansi"]
    with pytest.raises(AttributeError, match="for some games only: all games share one configuration"):
        env.set_attr("render_mode", "rgb_array", indices=[0, 1])
    with pytest.raises(AttributeError, match="no attribute 'board_sise' to set"):
        env.set_attr("board_sise", 6)
    assert env.get_attr("render_mode") == ["ansi"] * 20
    with pytest.raises(AttributeError, match="no per-game 'reset'"):
        env.env_method("reset")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_envs": 0}, "num_envs must be a positive integer, got 0"),
        ({"num_envs": 2, "board_size": 3}, "board_size must be an integer >= 4, got 3"),
        ({"num_envs": 2, "device": "tpu"}, "device must be"),
        ({"num_envs": 2, "render_mode": "window"}, "render_mode must be one of"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BatchedSnakeVecEnv(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_envs": True}, "num_envs must be a positive integer, got True; pass the number of games"),
        ({"num_envs": 2, "start_length": 9}, "start_length must be between 2 and 7 on a 10x10 board, got 9"),
        ({"num_envs": 2, "render_mode": "window"}, "got 'window'; pass 'human' to draw the board on stdout, 'ansi'"),
        ({"num_envs": 2, "seed": 1.5}, r"seed must be an integer from -\d+ to \d+, got 1.5; pass None for a random"),
        ({"num_envs": 2, "seed": 2**64}, "seed must be an integer"),
        ({"num_envs": 2, "seed": "7"}, "seed must be an integer"),
    ],
)
def test_user_errors_are_usage_errors_that_say_the_fix(kwargs, message):
    with pytest.raises(UsageError, match=message):
        BatchedSnakeVecEnv(**kwargs)


def test_seeds_of_any_integer_type_in_the_generators_range_are_taken():
    first = BatchedSnakeVecEnv(4, seed=np.int64(-3)).reset()
    np.testing.assert_array_equal(BatchedSnakeVecEnv(4, seed=-3).reset(), first)
    BatchedSnakeVecEnv(4, seed=2**64 - 1).reset()
    env = BatchedSnakeVecEnv(4, seed=0)
    with pytest.raises(UsageError, match="seed must be an integer"):
        env.seed(0.5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="device cuda was requested but no CUDA GPU is available; use device cpu"):
        BatchedSnakeVecEnv(2, device="cuda")


def test_set_state_index_out_of_range():
    with pytest.raises(UsageError, match=r"index must be in \[0, 2\), got 2; pass the index of one game"):
        BatchedSnakeVecEnv(2).set_state(2, [(0, 0), (0, 1)], 2, (5, 5))


@cuda
def test_cuda_applies_the_rules_of_the_cpu():
    """The same state and action give the same reward, end and next board on both devices.

    Only the random draws differ (new food, restarts): PyTorch's CPU and CUDA generators give
    different numbers for one seed. So each round sets fresh states and compares one step; the
    boards are compared where nothing random was drawn (no food eaten, no restart).
    """
    cpu, gpu = BatchedSnakeVecEnv(64, seed=1), BatchedSnakeVecEnv(64, seed=1, device="cuda")
    cpu.reset(), gpu.reset()
    rng = np.random.default_rng(1)
    for _ in range(30):
        for i in range(64):
            state = random_state(rng, 10, max_length=60)
            np.testing.assert_array_equal(cpu.set_state(i, *state), gpu.set_state(i, *state))
        actions = rng.integers(4, size=64)
        c, g = cpu.step_tensors(torch.as_tensor(actions)), gpu.step_tensors(torch.as_tensor(actions, device="cuda"))
        np.testing.assert_array_equal(c.rewards.numpy(), g.rewards.cpu().numpy())
        np.testing.assert_array_equal(c.terminated.numpy(), g.terminated.cpu().numpy())
        np.testing.assert_array_equal(c.truncated.numpy(), g.truncated.cpu().numpy())
        np.testing.assert_array_equal(c.final_observations.numpy(), g.final_observations.cpu().numpy())
        drawn_nothing = ((c.rewards == 0) & ~c.terminated & ~c.truncated).numpy()
        assert drawn_nothing.any()
        np.testing.assert_array_equal(
            c.observations.numpy()[drawn_nothing], g.observations.cpu().numpy()[drawn_nothing]
        )


def test_num_envs_of_any_integer_type_and_actions_of_the_wrong_count():
    env = BatchedSnakeVecEnv(np.int64(4), board_size=5, seed=0)
    assert env.num_envs == 4 and type(env.num_envs) is int
    env.reset()
    with pytest.raises(ValueError, match="expected 4 actions .one per game., got 3"):
        env.step(np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="num_envs must be a positive integer"):
        BatchedSnakeVecEnv(np.float64(4.0))


def test_step_tensors_checks_dtype_and_values_on_the_cpu():
    env = BatchedSnakeVecEnv(2, board_size=5, seed=0)
    env.reset_tensors()
    with pytest.raises(UsageError, match="integer tensor"):
        env.step_tensors(torch.tensor([0.0, 1.0]))
    with pytest.raises(UsageError, match="got 7 for game 1"):
        env.step_tensors(torch.tensor([0, 7]))
    with pytest.raises(UsageError, match=r"expected actions of shape \(2,\), got \(3,\); pass one action per game"):
        env.step_tensors(torch.tensor([0, 1, 2]))
    env.step_tensors(torch.tensor([0, 1]))


@pytest.mark.parametrize("count", [2**70, 10**9, 3 * 10**7])
@pytest.mark.parametrize("kind", ["vec_env", "vector_env"])
def test_more_games_than_the_bound_are_one_value_error_naming_it_and_the_memory(count, kind):
    from sb3_snake.envs.vector_env import SnakeVectorEnv

    make = BatchedSnakeVecEnv if kind == "vec_env" else SnakeVectorEnv
    with pytest.raises(
        ValueError, match=r"num_envs must be at most 1,048,576, got [0-9,]+: .* would need about [0-9,.]+ GiB"
    ):
        make(count)


def test_games_that_would_not_fit_in_memory_are_refused_with_what_they_need(monkeypatch):
    monkeypatch.setattr("sb3_snake.envs.batched_vec_env.available_memory_bytes", lambda: 2**30)
    with pytest.raises(
        ValueError, match=r"1,000,000 games of 10x10 would need about [0-9.]+ GiB of memory and 1.0 GiB"
    ):
        BatchedSnakeVecEnv(1_000_000)


def test_get_attr_refuses_an_index_out_of_range_and_set_attr_what_cannot_change():
    env = BatchedSnakeVecEnv(3, seed=0)
    with pytest.raises(IndexError, match="game index 99 is out of range for 3 games"):
        env.get_attr("num_envs", indices=[99])
    assert env.get_attr("num_envs", indices=[-1]) == [3]
    with pytest.raises(ValueError, match="cannot set 'num_envs': it is fixed once the games are built"):
        env.set_attr("num_envs", 2)
    with pytest.raises(ValueError, match="render_mode must be one of"):
        env.set_attr("render_mode", "bogus")
    env.set_attr("render_mode", "ansi")
    assert env.render_mode == "ansi" and env.num_envs == 3


def test_actions_take_sb3_s_shape_or_a_column_and_a_row_of_several_games_is_refused():
    env = BatchedSnakeVecEnv(3, seed=0)
    env.reset()
    env.step(np.zeros(3, dtype=np.int64))
    env.step(np.zeros((3, 1), dtype=np.int64))  # argmax(dim=1, keepdim=True)'s shape
    with pytest.raises(
        ValueError, match=r"expected actions of shape \(3,\) or \(3, 1\), one per game, got shape \(1, 3\)"
    ):
        env.step(np.zeros((1, 3), dtype=np.int64))
