"""Long starts (``long_starts``): snakes of 50-85% of the board along a closed tour, valid, able
to survive, drawn at the asked share of restarts, and never used by evaluation."""

from collections import deque

import numpy as np
import pytest
import torch

from sb3_snake import BatchedSnakeVecEnv, SnakeEnv
from sb3_snake.common.errors import UsageError
from sb3_snake.envs.batched_state import DIRECTION_ROW, FOOD_ROW
from sb3_snake.envs.rules import closed_tour, long_start_lengths, tour_directions, tour_variants
from tests.conftest import direction_between


def long_games(board_size: int, count: int = 64, seed: int = 0, **rules):
    env = BatchedSnakeVecEnv(count, board_size=board_size, seed=seed, long_starts=1.0, **rules)
    observations = env.reset()
    state = env._games._state
    games = []
    for index, body in enumerate(env._games.bodies(count)):
        food = int(state[FOOD_ROW, index])
        games.append((body, int(state[DIRECTION_ROW, index]), divmod(food, board_size), observations[index]))
    return env, games


def tour_ahead(body, board_size: int):
    """The tour that ``body`` lies along, as the cells the head goes to next, in order."""
    n = board_size
    for variant in tour_variants(n).tolist():
        cells = [divmod(cell, n) for cell in variant]
        if body[0] not in cells:  # a tour of an odd board leaves out a row or a column
            continue
        head = cells.index(body[0])
        if all(cells[(head - k) % len(cells)] == cell for k, cell in enumerate(body)):
            return [cells[(head + k) % len(cells)] for k in range(1, len(cells) + 1)]
    raise AssertionError(f"{body} lies along no tour")


def tail_reachable(body, board_size: int) -> bool:
    """Whether the head can reach the tail's cell through free cells (breadth first)."""
    blocked = set(body[:-1])
    queue, seen = deque([body[0]]), {body[0]}
    while queue:
        row, col = queue.popleft()
        for d_row, d_col in ((-1, 0), (0, 1), (1, 0), (0, -1)):
            cell = (row + d_row, col + d_col)
            if cell == body[-1]:
                return True
            if 0 <= cell[0] < board_size and 0 <= cell[1] < board_size and cell not in blocked | seen:
                seen.add(cell)
                queue.append(cell)
    return False


@pytest.mark.parametrize("board_size", [4, 5, 10, 11])
def test_closed_tours_visit_each_cell_once_and_close(board_size):
    tour = closed_tour(board_size)
    assert len(tour) == len(set(tour)) == board_size * (board_size - board_size % 2)
    for cell, following in zip(tour, tour[1:] + tour[:1], strict=True):
        assert abs(cell[0] - following[0]) + abs(cell[1] - following[1]) == 1
    variants = tour_variants(board_size)
    assert len({tuple(variant) for variant in variants.tolist()}) == 16
    for variant, directions in zip(variants.tolist(), tour_directions(variants, board_size).tolist(), strict=True):
        cells = [divmod(cell, board_size) for cell in variant]
        assert directions == [direction_between(a, b) for a, b in zip(cells, cells[1:] + cells[:1], strict=True)]


@pytest.mark.parametrize(("board_size", "countdown"), [(4, False), (5, True), (10, False), (10, True)])
def test_every_long_start_is_a_valid_game_that_can_survive(board_size, countdown):
    env, games = long_games(board_size, countdown=countdown)
    low, high = long_start_lengths(board_size)
    lengths = [len(body) for body, *_ in games]
    assert min(lengths) >= low and max(lengths) <= high and len(set(lengths)) > 1
    for body, direction, food, observation in games:
        env.rules.validate_state(body, direction, food)  # raises on an invalid game
        assert tail_reachable(body, board_size)
        single = SnakeEnv(board_size=board_size, countdown=countdown)
        single.reset(seed=0)
        np.testing.assert_array_equal(single.set_state(body, direction, food), observation)
        # Following its tour, the snake never dies (it eats the food on the tour, or circles).
        for cell in tour_ahead(body, board_size) * 2:
            head = single.state[0][0]
            _, _, terminated, truncated, info = single.step(direction_between(head, cell))
            assert not terminated or info["is_success"]
            if terminated or truncated:
                break


def test_long_starts_come_at_the_asked_share_and_the_standard_ones_otherwise():
    counts = {}
    for share in (0.0, 0.25, 1.0):
        env = BatchedSnakeVecEnv(2000, seed=3, long_starts=share)
        env.reset()
        counts[share] = int((env.lengths > 3).sum())
        assert ((env.lengths == 3) | (env.lengths >= long_start_lengths(10)[0])).all()
    assert counts[0.0] == 0 and counts[1.0] == 2000
    assert abs(counts[0.25] - 500) < 4 * (2000 * 0.25 * 0.75) ** 0.5


def test_restarted_games_start_long_too():
    env = BatchedSnakeVecEnv(8, seed=0, long_starts=1.0, max_steps_without_food=1)
    env.reset()
    ends = 0
    for _ in range(6):
        actions = np.array([env._games._state[DIRECTION_ROW, i].item() for i in range(8)])
        _, _, dones, _ = env.step(actions)
        ends += int(dones.sum())
        assert (env.lengths >= long_start_lengths(10)[0]).all()
    assert ends > 0


def test_a_finished_games_info_says_whether_it_began_long():
    """``long_start`` in a finished game's info is true exactly for the games that began long
    (more than the standard 3 cells); ``set_state`` starts a standard game."""
    env = BatchedSnakeVecEnv(16, seed=5, long_starts=0.5, max_steps_without_food=2)
    env.reset()
    began_long = (env.lengths > 3).tolist()
    env.set_state(0, [(5, 5), (5, 4), (5, 3)], 1, (0, 0))
    began_long[0] = False
    seen = {True: 0, False: 0}
    for _ in range(40):
        _, _, dones, infos = env.step(np.random.default_rng(0).integers(0, 3, 16))
        for index in np.flatnonzero(dones):
            assert infos[index]["long_start"] is began_long[index]
            seen[began_long[index]] += 1
        started = env.lengths.tolist()
        for index in np.flatnonzero(dones):
            began_long[index] = started[index] > 3
    assert seen[True] > 0 and seen[False] > 0


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan"), True, "half"])
def test_a_share_outside_0_to_1_is_refused(share):
    with pytest.raises(UsageError, match="long_starts must be a share from 0 to 1"):
        BatchedSnakeVecEnv(2, long_starts=share)


def test_training_uses_long_starts_and_evaluation_never_does(monkeypatch, tmp_path):
    from sb3_snake.acceleration.settings import OptimizationSettings
    from sb3_snake.training import evaluation
    from sb3_snake.training.config import TrainConfig
    from sb3_snake.training.run import build_model

    config = TrainConfig(
        algo="dqn",
        timesteps=100,
        n_envs=4,
        long_starts=1.0,
        batch_size=32,
        learning_starts=10,
        embed_dim=8,
        head_view_dim=8,
    )
    settings = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=1)
    model = build_model(config, settings)
    model.env.reset()
    assert (torch.as_tensor(model.env.lengths) >= long_start_lengths(10)[0]).all()

    first_lengths = []
    original_reset = BatchedSnakeVecEnv.reset

    def reset(env):
        observations = original_reset(env)
        first_lengths.extend(env.lengths.tolist())
        return observations

    monkeypatch.setattr(BatchedSnakeVecEnv, "reset", reset)
    result = evaluation.evaluate(model, episodes=4)
    assert first_lengths == [3, 3, 3, 3] and result["episodes"] == 4
