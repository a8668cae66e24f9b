"""Greedy evaluation: the games' quota, scores and how each game ended."""

import numpy as np

from sb3_snake import BatchedSnakeVecEnv, SnakeEnv
from sb3_snake.envs.rules import HEAD, NECK, UP
from sb3_snake.training.evaluation import GAME_ENDS, evaluate, game_end


class Scripted:
    """A policy from a rule on the board, with the interface evaluate() uses."""

    def __init__(self, rule, board_size=6):
        self.observation_space = BatchedSnakeVecEnv(1, board_size=board_size).observation_space
        self.rule = rule

    def predict(self, obs, deterministic=True):
        return np.array([self.rule(board) for board in obs]), None


def moving(board):
    """The direction the snake moves in: from the neck to the head (0 up, 1 right, 2 down, 3 left)."""
    n = board.shape[-1]
    (head_row, head_col), (neck_row, neck_col) = (divmod(int(board[c].argmax()), n) for c in (HEAD, NECK))
    return {(-1, 0): 0, (0, 1): 1, (1, 0): 2, (0, -1): 3}[(head_row - neck_row, head_col - neck_col)]


def test_a_snake_that_runs_into_the_wall_died_with_a_way_out():
    result = evaluate(Scripted(lambda board: 0), episodes=12)  # always up: straight into a wall
    assert result["ends"] == {"won": 0, "truncated": 0, "walled_in": 0, "died_with_a_way_out": 12}
    assert result["episodes"] == 12 and result["win_rate"] == 0


def test_a_snake_circling_in_place_is_truncated():
    result = evaluate(Scripted(lambda board: (moving(board) + 1) % 4), episodes=8)  # a tight clockwise loop
    assert result["ends"] == {"won": 0, "truncated": 8, "walled_in": 0, "died_with_a_way_out": 0}


def test_every_game_ends_one_way():
    rng = np.random.default_rng(0)
    result = evaluate(Scripted(lambda board: int(rng.integers(4)), board_size=4), episodes=100)
    assert set(result["ends"]) == set(GAME_ENDS) and sum(result["ends"].values()) == 100


def test_a_death_is_walled_in_when_no_move_survived():
    env = SnakeEnv(board_size=5)
    env.reset(seed=0)
    cornered = env.set_state([(0, 0), (1, 0), (1, 1), (0, 1), (0, 2)], UP, (4, 4))
    open_board = env.set_state([(2, 2), (3, 2), (4, 2)], UP, (0, 0))
    died = {"is_success": False, "TimeLimit.truncated": False}
    assert game_end({**died, "terminal_observation": cornered}) == "walled_in"
    assert game_end({**died, "terminal_observation": open_board}) == "died_with_a_way_out"
    assert game_end({**died, "TimeLimit.truncated": True, "terminal_observation": open_board}) == "truncated"
    assert game_end({**died, "is_success": True, "terminal_observation": open_board}) == "won"
