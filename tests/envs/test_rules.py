"""Each rule of the game as a scripted scenario, played on both environments."""

import numpy as np
import pytest

from sb3_snake import BatchedSnakeVecEnv, SnakeEnv
from sb3_snake.common.errors import UsageError
from sb3_snake.envs.rules import (
    BODY,
    COUNTDOWN,
    DOWN,
    FOOD,
    HEAD,
    LEFT,
    NECK,
    RIGHT,
    TAIL,
    UP,
    SnakeRules,
    can_survive,
    opposite,
)
from tests.conftest import SingleGame, neck_direction, random_state


def cells(obs, channel):
    return sorted(zip(*np.nonzero(obs[channel]), strict=True))


def test_observation_channels(game_kind):
    game = SingleGame(game_kind)
    obs = game.set_state([(5, 5), (5, 4), (5, 3), (4, 3)], RIGHT, (0, 0))
    assert obs.shape == (5, 10, 10) and obs.dtype == np.uint8
    assert cells(obs, HEAD) == [(5, 5)]
    assert cells(obs, BODY) == [(4, 3), (5, 3), (5, 4)]
    assert cells(obs, FOOD) == [(0, 0)]
    assert cells(obs, TAIL) == [(4, 3)]
    assert cells(obs, NECK) == [(5, 4)]


def countdown_cells(obs):
    return {cell: int(obs[COUNTDOWN][cell]) for cell in zip(*np.nonzero(obs[COUNTDOWN]), strict=True)}


def test_countdown_counts_the_moves_until_each_body_cell_is_free(game_kind):
    game = SingleGame(game_kind, countdown=True)
    obs = game.set_state([(5, 5), (5, 4), (5, 3), (4, 3)], RIGHT, (5, 7))
    assert obs.shape == (6, 10, 10) and obs[:5].max() == 1
    assert countdown_cells(obs) == {(4, 3): 1, (5, 3): 2, (5, 4): 3}  # the head's cell is 0
    obs, *_ = game.step(RIGHT)
    assert countdown_cells(obs) == {(5, 3): 1, (5, 4): 2, (5, 5): 3}
    obs, reward, *_ = game.step(RIGHT)  # eats: the tail stays, and every cell waits one move longer
    assert reward == 1.0
    assert countdown_cells(obs) == {(5, 3): 1, (5, 4): 2, (5, 5): 3, (5, 6): 4}
    obs, *_ = game.step(DOWN)
    assert countdown_cells(obs) == {(5, 4): 1, (5, 5): 2, (5, 6): 3, (5, 7): 4}
    assert (obs[COUNTDOWN] > 0).sum() == obs[BODY].sum()


def test_countdown_on_a_dying_move_shows_the_board_before_it(game_kind):
    game = SingleGame(game_kind, countdown=True)
    game.set_state([(0, 5), (1, 5), (2, 5)], UP, (9, 9))
    obs, reward, terminated, *_ = game.step(UP)
    assert (reward, terminated) == (-1.0, True)
    assert countdown_cells(obs) == {(2, 5): 1, (1, 5): 2}


def test_moving_forward_frees_the_tail(game_kind):
    game = SingleGame(game_kind)
    game.set_state([(5, 5), (5, 4), (5, 3)], RIGHT, (0, 0))
    obs, reward, terminated, truncated, info = game.step(RIGHT)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert cells(obs, HEAD) == [(5, 6)]
    assert cells(obs, BODY) == [(5, 4), (5, 5)]
    assert cells(obs, TAIL) == [(5, 4)]
    assert cells(obs, NECK) == [(5, 5)]


def test_leaving_the_board_kills_and_keeps_the_board(game_kind):
    game = SingleGame(game_kind)
    before = game.set_state([(0, 5), (1, 5), (2, 5)], UP, (9, 9))
    obs, reward, terminated, truncated, info = game.step(UP)
    assert (reward, terminated, truncated) == (-1.0, True, False)
    assert info["is_success"] is False
    np.testing.assert_array_equal(obs, before)


def test_running_into_the_body_kills(game_kind):
    game = SingleGame(game_kind)
    # A hook: the head at (2, 2) moving left; going down enters (3, 2), a body cell that stays.
    body = [(2, 2), (2, 3), (3, 3), (3, 2), (3, 1)]
    game.set_state(body, LEFT, (0, 0))
    obs, reward, terminated, truncated, _ = game.step(DOWN)
    assert (reward, terminated, truncated) == (-1.0, True, False)


def test_entering_the_cell_the_tail_just_left_is_safe(game_kind):
    game = SingleGame(game_kind)
    # A 2x2 loop: the head at (1, 1) moves down into (2, 1), the tail, which moves away.
    game.set_state([(1, 1), (1, 2), (2, 2), (2, 1)], LEFT, (5, 5))
    obs, reward, terminated, truncated, info = game.step(DOWN)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert cells(obs, HEAD) == [(2, 1)]
    assert cells(obs, TAIL) == [(2, 2)]
    assert info["length"] == 4


def test_eating_grows_and_the_tail_stays(game_kind):
    game = SingleGame(game_kind)
    game.set_state([(5, 5), (5, 4), (5, 3)], RIGHT, (5, 6))
    obs, reward, terminated, truncated, info = game.step(RIGHT)
    assert (reward, terminated, truncated) == (1.0, False, False)
    assert (info["score"], info["length"]) == (1, 4)
    assert cells(obs, HEAD) == [(5, 6)]
    assert cells(obs, TAIL) == [(5, 3)]
    assert cells(obs, BODY) == [(5, 3), (5, 4), (5, 5)]
    assert len(cells(obs, FOOD)) == 1
    assert not (obs[FOOD] & (obs[BODY] | obs[HEAD])).any()


def test_reversing_into_the_neck_is_ignored(game_kind):
    game = SingleGame(game_kind)
    game.set_state([(5, 5), (5, 4), (5, 3)], RIGHT, (0, 0))
    obs, reward, terminated, truncated, _ = game.step(LEFT)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert cells(obs, HEAD) == [(5, 6)]


def test_filling_the_board_wins(game_kind):
    game = SingleGame(game_kind, board_size=4)
    # A snake snaking through all cells but (3, 0); its head at (3, 1) moves left onto the food.
    body = [
        (3, 1),
        (3, 2),
        (3, 3),
        (2, 3),
        (2, 2),
        (2, 1),
        (2, 0),
        (1, 0),
        (1, 1),
        (1, 2),
        (1, 3),
        (0, 3),
        (0, 2),
        (0, 1),
        (0, 0),
    ]
    game.set_state(body, LEFT, (3, 0))
    obs, reward, terminated, truncated, info = game.step(LEFT)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["is_success"] is True
    assert (info["length"], info["score"]) == (16, 1)
    assert obs[HEAD].sum() + obs[BODY].sum() == 16 and obs[FOOD].sum() == 0


def test_truncation_after_steps_without_food(game_kind):
    game = SingleGame(game_kind, max_steps_without_food=3)
    game.set_state([(5, 2), (5, 1), (5, 0)], RIGHT, (0, 0))
    flags = [game.step(RIGHT)[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]


def test_with_stall_growth_the_limit_grows_with_the_snake(game_kind):
    game = SingleGame(game_kind, board_size=20, max_steps_without_food=3, stall_growth=2)
    game.set_state([(5, 2), (5, 1), (5, 0)], RIGHT, (5, 3))
    assert game.step(RIGHT)[1] == 1.0  # 4 cells now: 3 + 2 * 4 = 11 steps without food
    flags = [game.step(RIGHT)[2:4] for _ in range(11)]
    assert flags == [(False, False)] * 10 + [(False, True)]


def test_eating_resets_the_steps_without_food(game_kind):
    game = SingleGame(game_kind, max_steps_without_food=3)
    game.set_state([(5, 2), (5, 1), (5, 0)], RIGHT, (5, 4))
    results = [game.step(RIGHT) for _ in range(4)]
    assert [r[1] for r in results] == [0.0, 1.0, 0.0, 0.0]
    assert not any(r[3] for r in results)
    assert game.step(RIGHT)[3]


@pytest.mark.parametrize("board_size", [4, 6, 10])
def test_food_never_lies_on_the_snake(game_kind, board_size):
    game = SingleGame(game_kind, board_size=board_size)
    rng = np.random.default_rng(1)
    for _ in range(2000):
        obs = game.step(int(rng.integers(4)))[0]
        assert not (obs[FOOD] & (obs[BODY] | obs[HEAD])).any()
        assert obs[HEAD].sum() == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"board_size": 3}, "board_size must be an integer >= 4, got 3"),
        ({"board_size": 10.5}, "board_size"),
        ({"start_length": 1}, "start_length must be between 2 and"),
        ({"board_size": 4, "start_length": 4}, "start_length must be between 2 and 3 on a 4x4 board"),
        ({"start_length": 2.5}, r"start_length must be between 2 and 7 on a 10x10 board, got 2.5 \(cells, an int"),
        ({"dist_to_border": -1}, "dist_to_border"),
        ({"dist_to_border": 1.5}, "dist_to_border must be an integer >= 0, got 1.5"),
        ({"max_steps_without_food": 0}, "max_steps_without_food"),
        ({"max_steps_without_food": 10.0}, "max_steps_without_food must be an integer >= 1 or None, got 10.0"),
        ({"board_size": True}, "board_size must be an integer >= 4, got True"),
        ({"stall_growth": -1}, "stall_growth must be an integer from 0 to 64, got -1"),
        ({"stall_growth": 1.5}, "stall_growth must be an integer from 0 to 64, got 1.5"),
    ],
)
def test_bad_rules_name_the_value(kwargs, message):
    with pytest.raises(UsageError, match=message):
        SnakeRules(**kwargs)


@pytest.mark.parametrize(
    ("body", "direction", "food", "message"),
    [
        ([(0, 0), (0, 1), (0, 10)], LEFT, (5, 5), "on the 10x10 board"),
        ([(0, 0), (0, 1), (0, 0)], LEFT, (5, 5), "distinct"),
        ([(0, 0), (0, 2), (0, 3)], LEFT, (5, 5), "adjacent"),
        ([(0, 0), (0, 1), (0, 2)], LEFT, (0, 2), "lies on the snake"),
        ([(0, 0), (0, 1), (0, 2)], RIGHT, (5, 5), "points into the neck"),
        ([(0, 0), (0, 1), (0, 2)], 4, (5, 5), "direction must be"),
        ([(0, 0)], LEFT, (5, 5), "at least 2"),
        ([(0, 0), (0, 1), (0, 2)], LEFT, None, "food may only be None"),
        ([(0, 0), (0, 1), (0, 2)], LEFT, (10, 0), "food must be"),
    ],
)
def test_invalid_states_are_rejected(game_kind, body, direction, food, message):
    game = SingleGame(game_kind)
    with pytest.raises(UsageError, match=message):
        game.set_state(body, direction, food)


@pytest.mark.parametrize("egocentric", [False, True])
@pytest.mark.parametrize(
    ("body", "direction", "food", "message"),
    [
        ([(0, 0), (0, 1), (0, 2)], 1.0, (5, 5), r"direction must be an integer 0 \(up\).*got 1.0"),
        ([(0, 0), (0, 1), (0, 2)], True, (5, 5), "direction must be an integer .* got True"),
        ([(0, 0), (0, 1), (0, 2)], np.float64(3), (5, 5), "direction must be an integer"),
        ([(0, 0), (0, 1), (0, 2)], LEFT, (5.5, 5), r"food must be a \(row, col\) cell of integers .* got \(5.5, 5\)"),
        ([(0, 0), (0, 1), (0, 2)], LEFT, (True, 5), "food must be a .* cell of integers"),
        ([(0, 0), (0, 1), (0, 2)], LEFT, (2**70, 5), "food must be a .* cell of integers on the 10x10 board"),
        ([(0, 0), (0, 1.5), (0, 2)], LEFT, (5, 5), "body must be a list of at least 2 .* cells of integers"),
        ([(0, 0), (0, True), (0, 2)], LEFT, (5, 5), "body must be a list of at least 2 .* cells of integers"),
        ([(0, 0), (0, 2**70)], LEFT, (5, 5), "body cells must lie on the 10x10 board"),
    ],
    ids=["direction 1.0", "direction True", "direction float64", "food 5.5", "food True", "food 2**70",
         "body 1.5", "body True", "body 2**70"],
)  # fmt: skip
def test_odd_types_in_a_state_are_refused_as_they_are_in_actions(game_kind, egocentric, body, direction, food, message):
    """A float or bool direction was an IndexError or taken as 1; a float food or body cell was
    truncated, on both envs and both views."""
    game = SingleGame(game_kind, egocentric=egocentric)
    with pytest.raises(UsageError, match=message):
        game.set_state(body, direction, food)


@pytest.mark.parametrize("index", [1.5, True, np.float64(0), "0"], ids=repr)
def test_the_batched_env_refuses_a_game_index_that_is_not_an_integer(index):
    with pytest.raises(UsageError, match=r"index must be in \[0, 2\), got .*; pass the index of one game"):
        BatchedSnakeVecEnv(2).set_state(index, [(0, 0), (0, 1)], 2, (5, 5))
    assert BatchedSnakeVecEnv(2).set_state(np.int64(1), [(0, 0), (0, 1)], 2, (5, 5)).shape == (5, 10, 10)


def test_start_states_are_uniform_over_directions_and_fit():
    for board_size, start_length in [(4, 2), (4, 3), (5, 3), (10, 3), (10, 7), (17, 3)]:
        rules = SnakeRules(board_size, start_length)
        bodies, directions = rules.start_states()
        assert np.bincount(directions, minlength=4).min() > 0
        d = rules.effective_dist_to_border
        rows, cols = np.divmod(bodies, board_size)
        assert ((rows[:, 0] >= d) & (rows[:, 0] < board_size - d)).all()
        assert ((cols[:, 0] >= d) & (cols[:, 0] < board_size - d)).all()
        assert ((rows >= 0) & (rows < board_size) & (cols >= 0) & (cols < board_size)).all()
        steps = np.abs(np.diff(rows, axis=1)) + np.abs(np.diff(cols, axis=1))
        assert (steps == 1).all()


BAD_ACTIONS = [-1, -2, 4, 2**62, np.nan, 1.5, np.float64(2.0), True, "up"]


@pytest.mark.parametrize("action", BAD_ACTIONS, ids=repr)
def test_both_envs_refuse_the_same_bad_actions_and_leave_the_game_as_it_was(game_kind, action):
    """-1 while moving right used to walk into the neck and die; -2 stored direction -2; the
    batched env raised IndexError or mapped NaN and 2**62 to action 0."""
    game = SingleGame(game_kind)
    before = game.set_state([(2, 3), (2, 2), (2, 1)], direction=1, food=(0, 0))
    with pytest.raises(UsageError, match=r"action must be .*0 \(up\), 1 \(right\), 2 \(down\) or 3 \(left\)"):
        game.step(action)
    obs, reward, terminated, truncated, _ = game.step(1)  # the game goes on from where it was
    assert not terminated and reward == 0.0
    np.testing.assert_array_equal(cells(obs, HEAD), [(2, 4)])
    assert cells(before, HEAD) == [(2, 3)]


@pytest.mark.parametrize("action", [0, 3, np.int64(2), np.uint8(1), np.array(1)], ids=repr)
def test_both_envs_take_integer_actions_of_any_integer_type(game_kind, action):
    game = SingleGame(game_kind)
    game.set_state([(2, 3), (2, 2), (2, 1)], direction=1, food=(0, 0))
    assert not game.step(action)[2]


def test_can_survive_on_hand_made_boards():
    env = SnakeEnv(board_size=5)
    env.reset(seed=0)
    assert can_survive(env.set_state([(2, 2), (3, 2), (4, 2)], UP, (0, 0)))
    # Head in the corner: the wall above and left, the body to the right, the neck below.
    assert not can_survive(env.set_state([(0, 0), (1, 0), (1, 1), (0, 1), (0, 2)], UP, (4, 4)))
    # The same corner with the tail to the right: the tail leaves as the head arrives.
    assert can_survive(env.set_state([(0, 0), (1, 0), (1, 1), (0, 1)], UP, (4, 4)))


@pytest.mark.parametrize("board_size", [4, 5, 6])
def test_can_survive_is_whether_some_action_survives_a_step(board_size):
    """On random snakes: true exactly when one of the four actions does not end the game in a death."""
    rng, env = np.random.default_rng(board_size), SnakeEnv(board_size=board_size)
    env.reset(seed=0)
    outcomes = set()
    for _ in range(300):
        body, _, food = random_state(rng, board_size)
        direction = opposite(neck_direction(body))  # a snake in play moves away from its neck
        survives = []
        for action in range(4):
            obs = env.set_state(body, direction, food)
            _, _, terminated, _, info = env.step(action)
            survives.append(not terminated or info["is_success"])
        assert can_survive(obs) == any(survives), (body, direction, food)
        outcomes.add(any(survives))
    assert outcomes == {True, False}
