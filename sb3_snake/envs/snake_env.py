"""``SnakeEnv``: one game of Snake as a Gymnasium environment (the reference implementation)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from sb3_snake.envs.action_masks import action_masks
from sb3_snake.envs.render import RENDER_FPS, RENDER_MODES, check_render_mode, draw_text, render_ansi, render_rgb
from sb3_snake.envs.rules import (
    BODY,
    COUNTDOWN,
    DEATH_REWARD,
    DIRECTION_DELTAS,
    FOOD,
    FOOD_REWARD,
    HEAD,
    MAX_COUNTDOWN,
    NECK,
    TAIL,
    SnakeRules,
    absolute_action,
    check_action,
    opposite,
    reachable_channel,
)


class SnakeEnv(gym.Env[np.ndarray, np.int64]):
    """
    ## Description

    The classic game: a snake moves on a square board, grows by one cell for each food it
    eats and dies when it leaves the board or runs into itself. This class is the readable
    per-game reference for the rules; :class:`~sb3_snake.BatchedSnakeVecEnv` steps thousands
    of games with the same rules as tensors.

    ## Action Space

    ``Discrete(4)``, absolute directions: 0 up, 1 right, 2 down, 3 left. An action that would
    reverse into the neck is ignored and the snake keeps its direction. Anything else (-1, 4,
    1.5, NaN) raises a :class:`~sb3_snake.common.errors.UsageError` (a ``ValueError``) naming
    it, in both environments.

    ## Observation Space

    ``Box(0, 1, (5, board_size, board_size), uint8)``, channel-first binary planes (six
    channels with ``countdown=True``, the last up to ``board_size ** 2 - 1``):

    | channel | meaning |
    |---------|---------|
    | 0 | head |
    | 1 | body cells other than the head (neck and tail included) |
    | 2 | food (empty once the board is full) |
    | 3 | tail: the cell freed next step unless the snake eats |
    | 4 | neck: the cell behind the head, so head and neck give the direction of travel |
    | 5 | countdown (``countdown=True`` only): moves until each body cell is free |
    | last | reachable (``reachable=True`` only): cells the head can reach through free cells |

    The countdown is 1 on the tail and ``length - 1`` on the neck (at most 255), counted as if
    the snake does not eat; the head's cell and empty cells are 0. The reachability channel
    counts the tail's cell as free (the tail leaves it as the head arrives), so it is 1 on the
    tail exactly when the head can still reach its tail; the head's cell is 0 (see
    :class:`~sb3_snake.envs.rules.SnakeRules`).

    ## Rewards

    +1 for eating (including the move that fills the board), -1 for dying, 0 otherwise.

    ## Starting State

    A straight snake of ``start_length`` cells. Its head is uniformly random among the cells at
    least ``dist_to_border`` from every wall (reduced on small boards) from which the body,
    extending straight behind it, fits on the board; its direction is uniformly random. One
    food on a uniformly random free cell.

    ## Episode End

    Terminated when the head leaves the board or enters a cell still occupied after this
    step's move (the cell the tail leaves is free, unless the snake eats), with the board left
    as it was before the fatal move; also terminated, with ``info["is_success"] = True``, when
    the snake fills the whole board. Truncated after ``max_steps_without_food`` consecutive
    steps without eating, plus ``stall_growth`` steps per cell of the snake.

    ## Arguments

    - ``board_size`` (default 10, minimum 4), ``start_length`` (default 3),
      ``dist_to_border`` (default 3), ``max_steps_without_food`` (default ``board_size ** 2``).
    - ``countdown`` (default False): the sixth observation channel above.
    - ``reachable`` (default False): the reachability channel above, after all others.
    - ``stall_growth`` (default 0): steps without food allowed per cell of the snake, on top of
      ``max_steps_without_food``; a rule change that lets long snakes take the long way round.
    - ``egocentric`` (default False): the board turned so that the snake always moves up, and
      ``Discrete(3)`` relative actions, 0 turn left, 1 straight, 2 turn right (the same game;
      see :class:`~sb3_snake.envs.rules.SnakeRules`). Registered as ``sb3_snake/SnakeEgocentric-v0``.
    - ``render_mode``: ``"human"`` (the text board drawn on stdout at each reset and step, as
      ``sb3-snake play`` draws it; no window library needed), ``"ansi"`` (the text board
      returned) or ``"rgb_array"``.

    ``info`` always holds ``score`` (food eaten this episode) and ``length``; at the end of an
    episode also ``is_success``.

    ```python
    import gymnasium as gym
    import sb3_snake  # registers the id

    env = gym.make("sb3_snake/Snake-v0", board_size=10)
    ```
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS}

    def __init__(
        self,
        board_size: int = 10,
        start_length: int = 3,
        dist_to_border: int = 3,
        max_steps_without_food: int | None = None,
        render_mode: str | None = None,
        countdown: bool = False,
        stall_growth: int = 0,
        egocentric: bool = False,
        reachable: bool = False,
    ):
        self.render_mode = check_render_mode(render_mode)
        self.rules = SnakeRules(
            board_size,
            start_length,
            dist_to_border,
            max_steps_without_food,
            countdown,
            stall_growth,
            egocentric,
            reachable,
        )
        self.observation_space = self.rules.observation_space
        self.action_space = self.rules.action_space
        self._body: deque[tuple[int, int]] = deque()
        self._occupied = np.zeros((board_size, board_size), dtype=bool)
        self._direction = 0
        self._food: tuple[int, int] | None = None
        self._steps_without_food = 0
        self._score = 0
        self._drawn = False  #: whether ``human`` rendering has drawn the game as it is now

    @property
    def state(self) -> tuple[list[tuple[int, int]], int, tuple[int, int] | None]:
        """The game as ``(body, direction, food)``, in the form :meth:`set_state` takes."""
        return list(self._body), self._direction, self._food

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        direction = int(self.np_random.integers(4))
        bounds = self.rules.head_bounds()[direction]
        head = np.array([self.np_random.integers(low, high + 1) for low, high in bounds])
        body = [tuple(int(x) for x in head - k * DIRECTION_DELTAS[direction]) for k in range(self.rules.start_length)]
        self._place(body, direction)
        self._food = self._random_free_cell()
        self._draw_for_human()
        return self._observation(), self._info()

    def set_state(self, body: Sequence[Sequence[int]], direction: int, food: Sequence[int] | None) -> np.ndarray:
        """Put a given snake on the board and return the observation.

        :param body: cells as ``(row, col)``, head first.
        :param direction: 0 up, 1 right, 2 down, 3 left; must not point into the neck.
        :param food: the food cell, or ``None`` when the snake fills the board.
        :raises UsageError: when the state is not a valid game state.

        The score and the steps-without-food counter start again from zero.
        """
        cells, direction, food = self.rules.validate_state(body, direction, food)
        self._place([(int(r), int(c)) for r, c in cells], direction)
        self._food = food
        return self._observation()

    def step(self, action):
        action = check_action(action, relative=self.rules.egocentric)
        if self.rules.egocentric:
            action = absolute_action(self._direction, action)
        if action == opposite(self._direction):
            action = self._direction
        d_row, d_col = DIRECTION_DELTAS[action]
        head_row, head_col = self._body[0]
        new_head = (head_row + int(d_row), head_col + int(d_col))
        n = self.rules.board_size
        eats = new_head == self._food
        off_board = not (0 <= new_head[0] < n and 0 <= new_head[1] < n)
        hits_body = not off_board and self._occupied[new_head] and new_head != self._body[-1]

        terminated, truncated, success = False, False, False
        if off_board or hits_body:
            reward, terminated = DEATH_REWARD, True
        else:
            self._direction = action
            if eats:
                self._steps_without_food = 0
                self._score += 1
            else:
                self._occupied[self._body.pop()] = False
                self._steps_without_food += 1
            self._body.appendleft(new_head)
            self._occupied[new_head] = True
            reward = FOOD_REWARD if eats else 0.0
            if eats:
                if len(self._body) == self.rules.num_cells:
                    self._food, terminated, success = None, True, True
                else:
                    self._food = self._random_free_cell()
            truncated = not terminated and self._steps_without_food >= self.rules.stall_limit(len(self._body))

        info = self._info()
        if terminated or truncated:
            info["is_success"] = success
        self._drawn = False
        self._draw_for_human()
        return self._observation(), reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """The moves that do not die at once, ``(A,)`` bool (all False for a walled-in snake): the
        mask sb3-contrib's ``MaskablePPO`` takes (:mod:`~sb3_snake.envs.action_masks`)."""
        return action_masks(self._observation()[None], self.rules.egocentric)[0].numpy()

    def render(self):
        """``ansi``: the board as text; ``rgb_array``: as an image; ``human``: draws it on stdout
        unless the last reset or step already did (Gymnasium's human mode draws at each of them,
        and RL Zoo's ``enjoy`` calls ``render`` after each step as well), and returns None."""
        if self.render_mode == "human":
            self._draw_for_human()
            return None
        if self.render_mode == "ansi":
            return render_ansi(self._board(), list(self._body))
        if self.render_mode == "rgb_array":
            return render_rgb(self._board(), list(self._body))
        return None

    def _draw_for_human(self) -> None:
        if self.render_mode == "human" and not self._drawn:
            frame = render_ansi(self._board(), list(self._body))
            draw_text(frame, f"score {self._score}  length {len(self._body)}", fps=self.metadata["render_fps"])
            self._drawn = True

    def _place(self, body: Sequence[tuple[int, int]], direction: int) -> None:
        self._drawn = False
        self._body = deque(body)
        self._occupied[:] = False
        for cell in body:
            self._occupied[cell] = True
        self._direction = direction
        self._steps_without_food = 0
        self._score = 0

    def _random_free_cell(self) -> tuple[int, int]:
        free = np.flatnonzero(~self._occupied)
        return divmod(int(free[self.np_random.integers(len(free))]), self.rules.board_size)

    def _observation(self) -> np.ndarray:
        board = self._board()
        if self.rules.egocentric:  # turned so that the snake moves up: right is one quarter turn
            return np.ascontiguousarray(np.rot90(board, self._direction, axes=(1, 2)))
        return board

    def _board(self) -> np.ndarray:
        obs = np.zeros(self.observation_space.shape, dtype=np.uint8)
        obs[BODY] = self._occupied
        obs[BODY][self._body[0]] = 0
        obs[HEAD][self._body[0]] = 1
        obs[TAIL][self._body[-1]] = 1
        obs[NECK][self._body[1]] = 1
        if self._food is not None:
            obs[FOOD][self._food] = 1
        if self.rules.countdown:
            behind_head = list(self._body)[1:]
            for moves, cell in enumerate(reversed(behind_head), start=1):
                obs[COUNTDOWN][cell] = min(moves, MAX_COUNTDOWN)
        if self.rules.reachable:
            obs[reachable_channel(self.rules.countdown)] = self._reachable()
        return obs

    def _reachable(self) -> np.ndarray:
        """The cells the head can reach through cells free now, the tail's counted free: a
        depth-first search from the head, ``(n, n)`` of 0 and 1."""
        n = self.rules.board_size
        passable = ~self._occupied
        passable[self._body[-1]] = True
        reached = np.zeros((n, n), dtype=np.uint8)
        frontier = [self._body[0]]
        while frontier:
            row, col = frontier.pop()
            for d_row, d_col in DIRECTION_DELTAS.tolist():
                cell = (row + d_row, col + d_col)
                if 0 <= cell[0] < n and 0 <= cell[1] < n and passable[cell] and not reached[cell]:
                    reached[cell] = 1
                    frontier.append(cell)
        return reached

    def _info(self) -> dict[str, Any]:
        return {"score": self._score, "length": len(self._body)}
