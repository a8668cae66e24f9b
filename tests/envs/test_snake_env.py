"""SnakeEnv: Gymnasium and SB3 contracts, seeding, starting states, rendering."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.preprocessing import is_image_space

import sb3_snake
from sb3_snake import SnakeEnv
from sb3_snake.common.errors import UsageError
from sb3_snake.envs.rules import BODY, DIRECTION_DELTAS, FOOD, HEAD, NECK

#: SB3's checker takes any 3-D uint8 Box for an image and warns what would upset its ``CnnPolicy``
#: (bounds other than [0, 255], which it divides by; fewer than 36x36 cells). The board's bounds
#: are [0, 1], so SB3's own preprocessing, which checks them (``is_image_space``), does not take it
#: for an image, and the policy has its own extractor.
SB3_IMAGE_ONLY = (
    "is an image but the upper and lower bounds are not in [0, 255]",
    "The minimal resolution for an image is 36x36 for the default `CnnPolicy`",
)


def checker_warnings(check, env) -> list[str]:
    """What ``check(env)`` warned (a checker's findings short of an error are warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(env)
    return [str(warning.message) for warning in caught]


@pytest.mark.parametrize("board_size", [4, 10])
def test_passes_gymnasium_checker(board_size):
    # Made by its id, so the checker also tries the other render modes (it needs the env's spec).
    env = gym.make(sb3_snake.SNAKE_ENV_ID, board_size=board_size, render_mode="rgb_array").unwrapped
    assert checker_warnings(lambda env: gym_check_env(env, skip_render_check=False), env) == []


@pytest.mark.parametrize("countdown", [False, True])
def test_passes_sb3_checker(countdown):
    env = SnakeEnv(countdown=countdown)
    found = checker_warnings(lambda env: sb3_check_env(env, warn=True), env)
    assert [message for message in found if not any(image in message for image in SB3_IMAGE_ONLY)] == []
    assert not is_image_space(env.observation_space)  # why those warnings do not apply


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
