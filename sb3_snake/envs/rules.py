"""The rules of Snake, shared by :class:`~sb3_snake.envs.snake_env.SnakeEnv` and
:class:`~sb3_snake.envs.batched_vec_env.BatchedSnakeVecEnv`.

Everything both environments must agree on lives here: the action encoding, the
observation channels, the validated game configuration, where a new snake may start,
and the validation of an explicit state given to ``set_state``. The step logic itself
is written twice on purpose - once as a readable per-game reference (``SnakeEnv``) and
once as batched tensor code (``BatchedSnakeVecEnv``) - and the test suite checks that
the two agree step by step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from sb3_snake.common.errors import UsageError

UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
#: (row, col) displacement of the head for each absolute action.
DIRECTION_DELTAS = np.array([(-1, 0), (0, 1), (1, 0), (0, -1)], dtype=np.int64)
ACTION_NAMES = ("up", "right", "down", "left")

#: Observation channels, in order. COUNTDOWN is there only with ``countdown=True``; the
#: reachability channel comes last with ``reachable=True`` (:func:`reachable_channel`).
HEAD, BODY, FOOD, TAIL, NECK, COUNTDOWN = 0, 1, 2, 3, 4, 5
#: Channels of every board, and of a board with the countdown.
BASE_CHANNELS, NUM_CHANNELS = 5, 6
#: The names of every board's channels, then of the optional ones in the order they come.
BASE_CHANNEL_NAMES, OPTIONAL_CHANNELS = ("head", "body", "food", "tail", "neck"), ("countdown", "reachable")
#: Channels a board may have: the base ones, and one or both of the optional ones.
CHANNEL_COUNTS = tuple(range(BASE_CHANNELS, BASE_CHANNELS + len(OPTIONAL_CHANNELS) + 1))
#: The countdown's largest value: it counts moves up to this and stays there on boards of more cells.
MAX_COUNTDOWN = 255

MIN_BOARD_SIZE = 4
MIN_START_LENGTH = 2
#: The largest ``stall_growth``: beyond it a stalling snake would circle for tens of thousands of steps.
MAX_STALL_GROWTH = 64


#: The reward of a move that eats (the winning move too) and of one that dies (off the board or into
#: the body); any other move earns 0. A stall (too many moves without food) truncates the game at no
#: cost in the rules; PQN's ``stall_as_death`` learns it as a death.
FOOD_REWARD, DEATH_REWARD = 1.0, -1.0

#: Relative actions (``egocentric=True``): turn left, go straight, turn right.
TURN_LEFT, STRAIGHT, TURN_RIGHT = 0, 1, 2

_ACTIONS_HELP = "0 (up), 1 (right), 2 (down) or 3 (left)"
_RELATIVE_ACTIONS_HELP = "0 (turn left), 1 (straight) or 2 (turn right)"


def is_integer(value: object) -> bool:
    """Whether ``value`` is a Python or NumPy integer (booleans are not)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_action(action: object, relative: bool = False, name: str = "action") -> int:
    """The action as an int, or a :class:`UsageError` naming it: an integer (Python or NumPy, or
    a one-element integer array) from 0 to 3 (0 to 2 for ``relative`` actions), as
    ``Discrete(4).contains`` (``Discrete(3)``) accepts. ``name``: what the value is, when it is a
    direction rather than an action (the same four values)."""
    help, highest = (_RELATIVE_ACTIONS_HELP, 2) if relative else (_ACTIONS_HELP, 3)
    value = np.asarray(action)
    if value.size != 1 or value.dtype.kind not in "iu":
        raise UsageError(f"{name} must be an integer {help}, got {action!r}")
    number = int(value.reshape(()))
    if not 0 <= number <= highest:
        raise UsageError(f"{name} must be {help}, got {number}")
    return number


def integer_cells(cells: object) -> np.ndarray | None:
    """``cells`` (``(row, col)`` pairs, or one pair) as an int64 array, or ``None`` when any
    coordinate is not an integer: ``5.5`` is not truncated to ``5``, nor ``True`` taken as ``1``."""
    try:
        values = np.asarray(cells, dtype=object)
    except ValueError:  # ragged nesting
        return None
    if values.ndim == 0 or not all(is_integer(value) for value in values.flat):
        return None
    try:
        return values.astype(np.int64)
    except OverflowError:  # beyond int64, so off any board: -1 says so to the board check
        return np.array([v if abs(v) < 2**63 else -1 for v in values.flat], dtype=np.int64).reshape(values.shape)


def check_actions(actions: object, count: int, relative: bool = False) -> np.ndarray:
    """``count`` actions as an int64 array, or a :class:`UsageError` naming the first bad one;
    the same rule as :func:`check_action`, for one action per game.

    The shapes taken are SB3's ``(count,)`` and a column ``(count, 1)`` (what ``argmax(dim=1,
    keepdim=True)`` gives); any other, such as a row ``(1, count)`` of several games, is refused
    rather than guessed at (a single game may also give one number)."""
    help, highest = (_RELATIVE_ACTIONS_HELP, 2) if relative else (_ACTIONS_HELP, 3)
    values = np.asarray(actions)
    if values.size != count:
        raise UsageError(f"expected {count} actions (one per game), got {values.size}; pass one action per game")
    if values.shape not in ((count,), (count, 1)) and not (count == 1 and values.ndim == 0):
        raise UsageError(
            f"expected actions of shape ({count},) or ({count}, 1), one per game, got shape {values.shape}; "
            "pass one action per game"
        )
    values = values.reshape(count)
    if values.dtype.kind not in "iu":
        raise UsageError(f"action must be an integer {help}, got {values[:4]!r} (dtype {values.dtype})")
    bad = np.flatnonzero((values < 0) | (values > highest))
    if len(bad):
        raise UsageError(f"action must be {help}, got {int(values[bad[0]])} for game {int(bad[0])}")
    return values.astype(np.int64, copy=False)


def absolute_action(direction, relative):
    """The absolute direction of relative action ``relative`` (0 left, 1 straight, 2 right) for a
    snake moving in ``direction``; ints or integer arrays or tensors alike."""
    return (direction + relative + 3) % 4


def egocentric_cells(board_size: int) -> np.ndarray:
    """``cells[d, i]``: the flat board cell shown at flat cell ``i`` of the egocentric view of a
    snake moving in direction ``d``, shape ``(4, board_size ** 2)``.

    The view is the board turned ``d`` quarter turns counterclockwise (``np.rot90(board, d)``),
    which turns direction ``d`` to up: the snake always moves up the view.
    """
    board = np.arange(board_size * board_size).reshape(board_size, board_size)
    return np.stack([np.rot90(board, turns).reshape(-1) for turns in range(4)])


def mirror_observation(observation: np.ndarray) -> np.ndarray:
    """An egocentric observation (``(..., C, n, n)``) of the mirror-image game: left and right
    swapped. The snake still moves up, so it is a game of the same rules."""
    return observation[..., ::-1].copy()


def mirror_action(action):
    """The relative action of the mirror-image game: left and right swapped, straight kept."""
    return 2 - action


def opposite(direction: int) -> int:
    """The direction that would reverse into the neck."""
    return (direction + 2) % 4


#: ``TURNS[action, direction]``: the direction the snake takes (reversing is ignored).
TURNS = np.array(
    [[direction if action == opposite(direction) else action for direction in range(4)] for action in range(4)],
    dtype=np.int64,
)


@dataclass(frozen=True)
class SnakeRules:
    """Validated parameters of one game of Snake.

    :param board_size: side of the square board, at least 4.
    :param start_length: cells of the snake at the start, at least 2 (the neck defines the
        direction, so a reversing action can always be recognised).
    :param dist_to_border: minimum distance of the starting head from every wall; reduced to
        ``(board_size - 1) // 2`` on boards too small for it.
    :param max_steps_without_food: consecutive steps without eating after which the episode
        is truncated; ``None`` means ``board_size ** 2``.
    :param stall_growth: steps without food allowed per cell of the snake's length, on top of
        ``max_steps_without_food`` (0: the limit is fixed, the game of ``Snake-v0``). A long
        snake that keeps a safe path may need nearly a lap of the board to reach food placed
        behind it, and a fixed limit ends exactly the games that come closest to filling the
        board; perfect_snake, which wins 10x10 with PPO, lets the limit grow by 4 per cell.
    :param countdown: observe a sixth channel, :data:`COUNTDOWN`: on each body cell (not the
        head), the moves until it is free if the snake does not eat, from 1 on the tail to
        ``length - 1`` on the neck (at most :data:`MAX_COUNTDOWN`). The binary body channel says
        where the snake is, not in which order it leaves; with the countdown the network can tell
        whether a pocket the head enters opens before the head needs the room.
    :param reachable: observe one more channel, last: 1 on each cell the head can reach by
        moves through cells that are free now, the tail's cell counted free (it is left as the
        head arrives, as :func:`can_survive` has it) and the food's too; the head's own cell is
        0. Whether the tail is reachable is that channel on the tail's cell. The body and free
        channels say where the snake is; whether a move walls the head into a pocket smaller
        than the snake is a question about the whole board, which this channel answers for the
        network (perfect_snake's flood-fill input on 20x20).
    :param egocentric: observe the board turned so that the snake always moves up
        (:func:`egocentric_cells`) and act with three relative actions, 0 turn left, 1 straight,
        2 turn right. The game is the same; a policy no longer has to learn each situation
        once per heading, and a reversal cannot be asked for. Its mirror image (left and right
        swapped, :func:`mirror_observation` and :func:`mirror_action`) is a game of the same
        rules, which doubles what each transition teaches.
    """

    board_size: int = 10
    start_length: int = 3
    dist_to_border: int = 3
    max_steps_without_food: int | None = None
    countdown: bool = False
    stall_growth: int = 0
    egocentric: bool = False
    reachable: bool = False

    def __post_init__(self) -> None:
        n = self.board_size
        if not is_integer(n) or n < MIN_BOARD_SIZE:
            raise UsageError(f"board_size must be an integer >= {MIN_BOARD_SIZE}, got {n!r}; pass a larger board")
        if not is_integer(self.dist_to_border) or self.dist_to_border < 0:
            raise UsageError(
                f"dist_to_border must be an integer >= 0, got {self.dist_to_border!r}; pass 0 to start anywhere"
            )
        max_length = n - self.effective_dist_to_border
        if not is_integer(self.start_length) or not MIN_START_LENGTH <= self.start_length <= max_length:
            raise UsageError(
                f"start_length must be between {MIN_START_LENGTH} and {max_length} on a {n}x{n} board, "
                f"got {self.start_length!r} (cells, an integer); "
                "pass a shorter snake, a larger board or a smaller dist_to_border"
            )
        steps = self.max_steps_without_food
        if steps is not None and (not is_integer(steps) or steps < 1):
            raise UsageError(
                f"max_steps_without_food must be an integer >= 1 or None, got {steps!r}; pass None for board_size ** 2"
            )
        if not is_integer(self.stall_growth) or not 0 <= self.stall_growth <= MAX_STALL_GROWTH:
            raise UsageError(
                f"stall_growth must be an integer from 0 to {MAX_STALL_GROWTH}, got {self.stall_growth!r}; "
                "pass 0 for a fixed limit of steps without food"
            )

    @property
    def effective_dist_to_border(self) -> int:
        return min(self.dist_to_border, (self.board_size - 1) // 2)

    @property
    def truncation_steps(self) -> int:
        """Steps without food that truncate a game of a snake of length 0 (the fixed part)."""
        return self.max_steps_without_food if self.max_steps_without_food is not None else self.board_size**2

    def stall_limit(self, length):
        """Steps without food after which a game with a snake of ``length`` cells is truncated
        (an int, or a tensor of them for a tensor of lengths)."""
        return self.truncation_steps + self.stall_growth * length

    @property
    def num_cells(self) -> int:
        return self.board_size**2

    @property
    def action_space(self) -> spaces.Discrete:
        """``Discrete(4)`` absolute directions, or ``Discrete(3)`` relative turns when egocentric."""
        return spaces.Discrete(3 if self.egocentric else 4)

    @property
    def observation_space(self) -> spaces.Box:
        """``(C, n, n)`` uint8 boards: 0 or 1 in each channel, up to the countdown's largest value in it."""
        return board_space(self.board_size, self.countdown, self.reachable)

    def head_bounds(self) -> np.ndarray:
        """Inclusive start ranges of the head for each direction, shape ``(4, 2, 2)``.

        ``bounds[direction, axis] = (low, high)`` for axis 0 (row) and 1 (col): the head is at
        least ``effective_dist_to_border`` from every wall and the straight body behind it fits
        on the board. Both environments sample uniformly inside these ranges.
        """
        n, d, tail_offset = self.board_size, self.effective_dist_to_border, self.start_length - 1
        bounds = np.tile(np.array([d, n - 1 - d], dtype=np.int64), (4, 2, 1))
        for direction, (d_row, d_col) in enumerate(DIRECTION_DELTAS):
            for axis, step in ((0, d_row), (1, d_col)):
                if step > 0:  # moving towards high indices: the body lies at lower ones
                    bounds[direction, axis, 0] = max(d, tail_offset)
                elif step < 0:
                    bounds[direction, axis, 1] = min(n - 1 - d, n - 1 - tail_offset)
        return bounds

    def validate_state(
        self, body: Sequence[Sequence[int]], direction: int, food: Sequence[int] | None
    ) -> tuple[np.ndarray, int, tuple[int, int] | None]:
        """Check an explicit game state and return it normalised.

        :param body: cells as ``(row, col)``, head first, each adjacent to the next.
        :param direction: the direction the snake is moving in (0 up, 1 right, 2 down, 3 left).
        :param food: the food cell, or ``None`` only when the snake fills the whole board.
        :return: ``(body as an int64 array of shape (L, 2), direction, food)``.
        :raises UsageError: naming what is wrong with the state.
        """
        n = self.board_size
        cells = integer_cells(body)
        if cells is None or cells.ndim != 2 or cells.shape[1] != 2 or len(cells) < MIN_START_LENGTH:
            raise UsageError(
                f"body must be a list of at least {MIN_START_LENGTH} (row, col) cells of integers, got {body!r}"
            )
        if ((cells < 0) | (cells >= n)).any():
            raise UsageError(f"body cells must lie on the {n}x{n} board, got {body!r}")
        if len({tuple(c) for c in cells.tolist()}) != len(cells):
            raise UsageError(f"body cells must be distinct, got {body!r}")
        if (np.abs(np.diff(cells, axis=0)).sum(axis=1) != 1).any():
            raise UsageError(f"consecutive body cells must be adjacent, got {body!r}")
        direction = check_action(direction, name="direction")
        if (cells[0] + DIRECTION_DELTAS[direction] == cells[1]).all():
            raise UsageError(f"direction {ACTION_NAMES[direction]} points into the neck {tuple(cells[1])}")
        if food is None:
            if len(cells) != self.num_cells:
                raise UsageError("food may only be None when the snake fills the board")
            return cells, direction, None
        food_array = integer_cells(food)
        if food_array is None or food_array.shape != (2,) or not ((food_array >= 0) & (food_array < n)).all():
            raise UsageError(f"food must be a (row, col) cell of integers on the {n}x{n} board, got {food!r}")
        food_cell = (int(food_array[0]), int(food_array[1]))
        if any(food_cell == tuple(c) for c in cells.tolist()):
            raise UsageError(f"food {food_cell} lies on the snake's body")
        return cells, direction, food_cell

    def neighbor_table(self) -> np.ndarray:
        """``table[cell, direction]``: the flat cell one step away, or -1 off the board."""
        n = self.board_size
        rows, cols = np.divmod(np.arange(self.num_cells), n)
        new_rows = rows[:, None] + DIRECTION_DELTAS[:, 0]
        new_cols = cols[:, None] + DIRECTION_DELTAS[:, 1]
        on_board = (new_rows >= 0) & (new_rows < n) & (new_cols >= 0) & (new_cols < n)
        return np.where(on_board, new_rows * n + new_cols, -1)

    def start_states(self) -> tuple[np.ndarray, np.ndarray]:
        """Every possible starting snake: ``(bodies, directions)``.

        ``bodies[s]`` holds the flat cells of start ``s``, head first. Each direction has the
        same number of starts (the bounds are symmetric), so drawing a start uniformly is the
        same as drawing the direction, then the head, uniformly - as ``SnakeEnv.reset`` does.
        """
        bodies, directions = [], []
        for direction, ((row_low, row_high), (col_low, col_high)) in enumerate(self.head_bounds()):
            for row in range(row_low, row_high + 1):
                for col in range(col_low, col_high + 1):
                    cells = np.array([row, col]) - np.outer(np.arange(self.start_length), DIRECTION_DELTAS[direction])
                    bodies.append(cells[:, 0] * self.board_size + cells[:, 1])
                    directions.append(direction)
        counts = np.bincount(directions, minlength=4)
        assert (counts == counts[0]).all(), f"start positions per direction differ: {counts}"
        return np.array(bodies, dtype=np.int64), np.array(directions, dtype=np.int64)


#: Long starts: the snake's length as a share of the board's cells, drawn uniformly between these.
LONG_START_SHARES = (0.5, 0.85)


def closed_tour(board_size: int) -> list[tuple[int, int]]:
    """A closed tour of the board: cells in order, each adjacent to the next and the last to the
    first, so a snake lying along it can follow it forever.

    Right along the top row, then back and forth along the other rows leaving out the first
    column, then up the first column. A closed tour needs an even number of cells, so on an
    odd board it leaves out the last row.
    """
    rows = board_size - board_size % 2
    tour = [(0, col) for col in range(board_size)]
    for row in range(1, rows):
        cols = range(board_size - 1, 0, -1) if row % 2 else range(1, board_size)
        tour += [(row, col) for col in cols]
    return tour + [(row, 0) for row in range(rows - 1, 0, -1)]


def tour_variants(board_size: int) -> np.ndarray:
    """:func:`closed_tour` under the 8 symmetries of the square, each walked both ways: flat
    cells, shape ``(16, tour length)``."""
    tour = np.array(closed_tour(board_size))
    last = board_size - 1
    variants = []
    for turns in range(4):
        for mirror in (False, True):
            rows, cols = tour[:, 0], tour[:, 1]
            if mirror:
                rows, cols = cols, rows
            for _ in range(turns):  # a quarter turn: (row, col) -> (col, last - row)
                rows, cols = cols, last - rows
            flat = rows * board_size + cols
            variants += [flat, flat[::-1]]
    return np.array(variants, dtype=np.int64)


def tour_directions(tours: np.ndarray, board_size: int) -> np.ndarray:
    """``directions[v, k]``: the direction from point ``k`` of tour ``v`` to the point after it
    (:func:`tour_variants`' layout): the way a snake lying along the tour moves there."""
    cells = np.stack(divmod(tours, board_size), axis=-1)
    steps = np.roll(cells, -1, axis=-2) - cells
    return (steps[..., None, :] == DIRECTION_DELTAS).all(axis=-1).argmax(axis=-1)


def long_start_lengths(board_size: int) -> tuple[int, int]:
    """The shortest and longest snake of a long start (see :data:`LONG_START_SHARES`): at most
    one cell short of the tour, so the cell ahead of the head is free."""
    cells, tour_length = board_size**2, len(closed_tour(board_size))
    low, high = (int(np.ceil(LONG_START_SHARES[0] * cells)), int(LONG_START_SHARES[1] * cells))
    return low, min(high, tour_length - 1)


def board_space(board_size: int, countdown: bool = False, reachable: bool = False) -> spaces.Box:
    """The observation space of ``board_size`` boards with the optional channels asked for."""
    channels = BASE_CHANNELS + countdown + reachable
    high = np.ones((channels, board_size, board_size), dtype=np.uint8)
    if countdown:
        high[COUNTDOWN] = min(board_size * board_size - 1, MAX_COUNTDOWN)
    return spaces.Box(np.zeros_like(high), high, dtype=np.uint8)


def reachable_channel(countdown: bool) -> int:
    """The index of the reachability channel of boards with or without the countdown."""
    return BASE_CHANNELS + countdown


def observation_channels(countdown: bool = False, reachable: bool = False) -> list[str]:
    """The names of a board's channels, in order (what a model file records of its boards)."""
    return [*BASE_CHANNEL_NAMES, *(["countdown"] if countdown else []), *(["reachable"] if reachable else [])]


def board_options(space: spaces.Box) -> dict[str, bool]:
    """Which optional channels boards of ``space`` carry, ``{"countdown": ..., "reachable": ...}``,
    as :class:`SnakeRules` and the envs take them. Read from the channel count and the bounds:
    the countdown is the one channel whose bound is above 1 (at least 15, on a 4x4 board)."""
    extra = space.shape[0] - BASE_CHANNELS
    countdown = extra >= 1 and int(np.asarray(space.high)[BASE_CHANNELS].max()) > 1
    return {"countdown": bool(countdown), "reachable": extra - countdown == 1}


def channel_options(names: Sequence[str]) -> dict[str, bool]:
    """:func:`board_options` of boards whose channels are ``names`` (:func:`observation_channels`)."""
    return {option: option in names for option in OPTIONAL_CHANNELS}


def can_survive(observation: np.ndarray) -> bool:
    """Whether the snake on this ``(C, n, n)`` board has a move that survives one step: onto a
    free cell, or onto the tail's, which the tail leaves as the head arrives (food never lies on
    it). The neck needs no exception: it is body, or on a two-cell snake the tail, beside which
    the head always has another free cell (no cell has walls on three sides).

    On a dead game's terminal observation (the board before the fatal move) it tells a snake
    that was walled in from one that died with a way out.
    """
    n = observation.shape[-1]
    head_row, head_col = divmod(int(observation[HEAD].argmax()), n)
    blocked = observation[BODY].astype(bool) & ~observation[TAIL].astype(bool)
    for d_row, d_col in DIRECTION_DELTAS.tolist():
        row, col = head_row + d_row, head_col + d_col
        if 0 <= row < n and 0 <= col < n and not blocked[row, col]:
            return True
    return False
