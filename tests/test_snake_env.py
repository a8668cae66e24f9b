"""SnakeEnv: Gymnasium and SB3 contracts, seeding, starting states, rendering."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import sb3_snake
from sb3_snake import SnakeEnv
from sb3_snake.common.errors import UsageError
from sb3_snake.envs.rules import BODY, DIRECTION_DELTAS, FOOD, HEAD, NECK


@pytest.mark.parametrize("board_size", [4, 10])
def test_passes_gymnasium_checker(board_size):
    gym_check_env(SnakeEnv(board_size=board_size, render_mode="rgb_array"), skip_render_check=False)


def test_passes_sb3_checker():
    sb3_check_env(SnakeEnv(), warn=True)


def test_registered_id_makes_the_env():
    env = gym.make(sb3_snake.SNAKE_ENV_ID, board_size=6)
    obs, info = env.reset(seed=3)
    assert obs.shape == (5, 6, 6)
    assert info == {"score": 0, "length": 3}


def test_seeded_resets_repeat_and_differ():
    first = [SnakeEnv().reset(seed=7)[0] for _ in range(2)]
    np.testing.assert_array_equal(*first)
    others = [SnakeEnv().reset(seed=seed)[0] for seed in range(8)]
    assert len({o.tobytes() for o in others}) > 1


def test_starting_snake_is_straight_away_from_walls_in_its_direction():
    env = SnakeEnv()
    heads = set()
    for seed in range(400):
        obs, info = env.reset(seed=seed)
        body, direction, food = env.state
        assert len(body) == 3 and info["length"] == 3
        head = np.array(body[0])
        assert ((head >= 3) & (head <= 6)).all()
        for k, cell in enumerate(body):
            np.testing.assert_array_equal(cell, head - k * DIRECTION_DELTAS[direction])
        assert obs[HEAD][body[0]] == 1 and obs[NECK][body[1]] == 1
        assert food not in body and obs[FOOD].sum() == 1
        heads.add((body[0], direction))
    assert len(heads) == 64  # every head of the 4x4 centre region in every direction


@pytest.mark.parametrize("render_mode", ["ansi", "rgb_array"])
def test_render(render_mode):
    env = SnakeEnv(board_size=6, render_mode=render_mode)
    env.reset(seed=0)
    env.set_state([(2, 2), (2, 1)], 1, (4, 4))
    frame = env.render()
    if render_mode == "ansi":
        lines = frame.splitlines()
        assert lines[0] == "#" * 8 and len(lines) == 8
        assert lines[3] == "#.╶H...#" and lines[5] == "#....*.#"  # the tail joins the head on its right
    else:
        assert frame.shape == (6 * 16, 6 * 16, 3) and frame.dtype == np.uint8
        assert (frame[2 * 16 + 8, 2 * 16 + 8] != frame[0, 0]).any()


def test_rejects_unknown_render_mode():
    with pytest.raises(UsageError, match=r"must be one of \['human', 'ansi', 'rgb_array'\] or None, got 'window'"):
        SnakeEnv(render_mode="window")


def test_observation_matches_state_through_a_game():
    env = SnakeEnv(board_size=6)
    env.reset(seed=5)
    rng = np.random.default_rng(5)
    for _ in range(300):
        obs, _, terminated, truncated, info = env.step(int(rng.integers(4)))
        body, _, food = env.state
        assert obs[HEAD].sum() == 1 and obs[BODY].sum() == len(body) - 1 == info["length"] - 1
        if terminated or truncated:
            env.reset()
