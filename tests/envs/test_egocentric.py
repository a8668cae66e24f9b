"""The egocentric option (``egocentric=True``): the same game, seen turned so that the snake
moves up, played with three relative actions, and mirror images are games. That both envs agree
step by step is ``test_batched_vec_env.test_equivalent_to_snake_env_step_by_step``."""

import gymnasium as gym
import numpy as np
import pytest

import sb3_snake
from sb3_snake import BatchedSnakeVecEnv
from sb3_snake.common.errors import UsageError
from sb3_snake.envs.rules import (
    DOWN,
    HEAD,
    NECK,
    RIGHT,
    STRAIGHT,
    TURN_LEFT,
    TURN_RIGHT,
    UP,
    mirror_action,
    mirror_observation,
    opposite,
)
from tests.conftest import SingleGame, neck_direction, random_state


def cell_of(plane: np.ndarray) -> tuple[int, int]:
    return divmod(int(plane.argmax()), plane.shape[-1])


def test_the_view_is_the_board_turned_so_that_the_snake_moves_up(game_kind):
    seen = SingleGame(game_kind, egocentric=True)
    board = SingleGame(game_kind)
    rng = np.random.default_rng(0)
    for _ in range(30):
        body, _, food = random_state(rng, 10)
        state = (body, opposite(neck_direction(body)), food)  # moving away from the neck, as in play
        view = seen.set_state(*state)
        turns = state[1]  # direction d is d quarter turns from up
        np.testing.assert_array_equal(view, np.rot90(board.set_state(*state), turns, axes=(1, 2)))
        head, neck = cell_of(view[HEAD]), cell_of(view[NECK])
        assert (neck[0] - head[0], neck[1] - head[1]) == (1, 0)  # the neck lies below the head: moving up


@pytest.mark.parametrize(("action", "expected_head"), [(TURN_LEFT, (4, 5)), (STRAIGHT, (5, 6)), (TURN_RIGHT, (6, 5))])
def test_relative_actions_turn_from_the_heading(game_kind, action, expected_head):
    game = SingleGame(game_kind, egocentric=True)
    board = SingleGame(game_kind)
    game.set_state([(5, 5), (5, 4), (5, 3)], RIGHT, (0, 0))
    obs = game.step(action)[0]
    direction = {TURN_LEFT: UP, STRAIGHT: RIGHT, TURN_RIGHT: DOWN}[action]
    body = [expected_head, (5, 5), (5, 4)]
    np.testing.assert_array_equal(obs, np.rot90(board.set_state(body, direction, (0, 0)), direction, axes=(1, 2)))


@pytest.mark.parametrize("reachable", [False, True])
def test_a_mirrored_game_is_the_mirror_image_of_the_game(game_kind, reachable):
    """From a snake moving up and its mirror image, mirrored actions give mirrored observations,
    the reachability channel's too (as the replay's mirror augmentation assumes)."""
    rng = np.random.default_rng(1)
    for _ in range(10):
        game, mirrored = (SingleGame(game_kind, egocentric=True, reachable=reachable) for _ in range(2))
        body, _, food = random_state(rng, 10)
        while body[1] != (body[0][0] + 1, body[0][1]):  # a snake moving up, so the view is the board
            body, _, food = random_state(rng, 10)
        flip = [(row, 9 - col) for row, col in body]
        obs, other = game.set_state(body, UP, food), mirrored.set_state(flip, UP, (food[0], 9 - food[1]))
        np.testing.assert_array_equal(other, mirror_observation(obs))
        for _ in range(40):
            action = int(rng.integers(3))
            obs, reward, terminated, truncated, _ = game.step(action)
            other, mirrored_reward, mirrored_terminated, *_ = mirrored.step(mirror_action(action))
            assert (mirrored_reward, mirrored_terminated) == (reward, terminated)
            if reward != 0 or terminated or truncated:  # new food is drawn by each game's own generator
                break
            np.testing.assert_array_equal(other, mirror_observation(obs))


@pytest.mark.parametrize("action", [3, -1, 1.0])
def test_an_absolute_only_action_is_refused_naming_the_turns(game_kind, action):
    game = SingleGame(game_kind, egocentric=True)
    with pytest.raises(UsageError, match=r"0 \(turn left\), 1 \(straight\) or 2 \(turn right\)"):
        game.step(action)


def test_the_registered_id_is_the_egocentric_game():
    env = gym.make(sb3_snake.EGOCENTRIC_SNAKE_ENV_ID)
    assert env.action_space == gym.spaces.Discrete(3)
    assert env.unwrapped.rules.egocentric and not gym.make(sb3_snake.SNAKE_ENV_ID).unwrapped.rules.egocentric


def test_an_egocentric_run_trains_saves_plays_and_keeps_its_view_on_resume(tmp_path):
    import io

    from sb3_snake.persistence import load_model
    from sb3_snake.training.evaluation import evaluate, play
    from sb3_snake.training.resume import resume_config
    from sb3_snake.training.run import train
    from tests.conftest import FAST, tiny_config

    train(tiny_config(episodes=4, egocentric=True, symmetry_augmentation=True), FAST, tmp_path / "a")
    model = load_model(tmp_path / "a" / "model.zip", FAST)  # the safe loader: n_actions 3 is a Snake model
    assert model.action_space == gym.spaces.Discrete(3) and model.q_net(
        model.q_net.obs_to_tensor(np.zeros((1, *model.observation_space.shape), np.uint8))[0]
    ).shape == (1, 3)
    assert evaluate(model, episodes=3)["episodes"] == 3
    assert play(model, out=io.StringIO())["steps"] > 0
    assert resume_config(tmp_path / "a" / "model.zip").egocentric
    config = resume_config(tmp_path / "a" / "model.zip", egocentric=False)
    with pytest.raises(UsageError, match="trained on the egocentric view with 3 actions; pass egocentric=True"):
        train(config, FAST, tmp_path / "b", resume=tmp_path / "a" / "model.zip")
    with pytest.raises(UsageError, match="trained on the egocentric view with 3 actions; pass egocentric=True"):
        load_model(tmp_path / "a" / "model.zip", FAST, env=BatchedSnakeVecEnv(2, board_size=5))
