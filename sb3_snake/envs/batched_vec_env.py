"""``BatchedSnakeVecEnv``: thousands of Snake games stepped together as torch tensors.

How the games are stored
------------------------
Each game keeps its observation planes themselves as state, updated in place. A step
changes only a few cells of each game (old and new head, neck, tail, food), so the work of a
step grows with the number of games, not with the number of cells, and the hot path is a few
dozen whole-batch tensor operations with no Python loop over games:

- moving is one lookup in a precomputed table (cell, action and direction give the cell
  entered, with the reversal rule applied; ``-1`` off the board),
- the head enters an occupied cell exactly when the body plane is set there and that cell is
  not the tail (the tail's cell is freed this very step; food never lies on the body),
- all cells that stop being head, neck, body, tail or food are cleared in one scattered
  write, then all new ones are set in another. No write needs a per-game mask: where the
  snake eats, the tail writes land on the food cell and change nothing, and a game that dies
  is restarted before its board is seen again (its last observation is copied first).

The body's cells, in order, live in a ring buffer per game whose capacity is a power of two,
so wrapping a pointer is a bitwise ``and``: the head pointer advances every step, the tail
pointer every step the snake does not eat.

New food is drawn uniformly from the free cells, as the ``k``-th free cell (a cumulative sum,
``k`` uniform below the number of free cells), only for the games that ate: never by retrying
random cells. Finished games restart in place from a table of every possible starting snake,
drawn uniformly, with food drawn uniformly from that start's free cells (the same
distribution as :class:`~sb3_snake.SnakeEnv`'s reset).

Two interfaces
--------------
- The SB3 ``VecEnv`` API (``reset``/``step``) returns NumPy arrays and per-game ``infos`` as
  SB3 expects: every game's info holds ``score`` and ``length``, and a finished game's also
  ``terminal_observation``, ``TimeLimit.truncated``, ``episode`` (``r``, ``l``, ``t``, like
  SB3's ``Monitor``) and ``is_success``. Building those Python dicts costs about as much as
  the step itself at thousands of games.
- ``reset_tensors``/``step_tensors`` keep everything on ``device`` as tensors and build no
  Python objects per game, for training loops that stay on the accelerator; the current
  scores and lengths are :attr:`scores` and :attr:`lengths`.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn, tile_images

from sb3_snake.envs.render import render_ansi, render_rgb
from sb3_snake.envs.rules import BODY, FOOD, HEAD, NECK, NUM_CHANNELS, TAIL, TURNS, SnakeRules

#: How many games ``render("rgb_array")`` tiles into one image.
RENDERED_GAMES = 16

# Rows of the per-game state: flat head and neck cells, ring pointers of head and tail,
# direction, snake length, flat food cell (-1 when the board is full), steps without food,
# food eaten, steps in the episode.
(_HEAD, _NECK, _HEAD_PTR, _TAIL_PTR, _DIRECTION, _LENGTH, _FOOD, _STEPS_WITHOUT_FOOD, _SCORE, _EPISODE_LENGTH) = range(
    10
)
_STATE_ROWS = 10


@dataclass(frozen=True)
class BatchedStep:
    """One step of all games, as tensors on the env's device.

    ``observations`` are those of the games as they continue (already restarted where a game
    finished). The ``final_*`` fields describe only the games that finished this step, in the
    order of ``final_indices``.
    """

    observations: torch.Tensor  #: (N, C, H, W) uint8
    rewards: torch.Tensor  #: (N,) float32
    terminated: torch.Tensor  #: (N,) bool
    truncated: torch.Tensor  #: (N,) bool
    final_indices: torch.Tensor  #: (M,) int64, games that finished this step
    final_observations: torch.Tensor  #: (M, C, H, W) uint8, their last observation
    final_returns: torch.Tensor  #: (M,) float32, episode return
    final_episode_lengths: torch.Tensor  #: (M,) int64, steps in the episode
    final_scores: torch.Tensor  #: (M,) int64, food eaten
    final_lengths: torch.Tensor  #: (M,) int64, snake length
    final_successes: torch.Tensor  #: (M,) bool, board filled


class BatchedSnakeVecEnv(VecEnv):
    """``num_envs`` games of Snake on ``device``, stepped together with tensor operations.

    The rules, observations and rewards are exactly those of :class:`~sb3_snake.SnakeEnv`
    (see its docstring); finished games restart automatically, following SB3's ``VecEnv``
    contract, so no ``VecMonitor`` is needed for episode statistics.

    :param num_envs: number of games.
    :param board_size: side of the square board, at least 4.
    :param device: where the games live, e.g. ``"cpu"`` or ``"cuda"``.
    :param seed: seed of the env's own random generator; ``None`` draws one. SB3's
        ``VecEnv.seed`` reseeds at the next ``reset()``.
    :param start_length: cells of the snake at the start.
    :param dist_to_border: minimum distance of the starting head from every wall.
    :param max_steps_without_food: steps without eating before truncation
        (default ``board_size ** 2``).
    :param render_mode: ``"ansi"`` or ``"rgb_array"``.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"]}

    def __init__(
        self,
        num_envs: int,
        board_size: int = 10,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        start_length: int = 3,
        dist_to_border: int = 3,
        max_steps_without_food: int | None = None,
        render_mode: str | None = None,
    ):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.rules = SnakeRules(board_size, start_length, dist_to_border, max_steps_without_food)
        try:
            self.device = torch.device(device)
        except RuntimeError as error:
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from error
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {device!r} was requested but CUDA is not available; use device='cpu'")
        self.render_mode = render_mode
        super().__init__(
            num_envs,
            spaces.Box(0, 1, (NUM_CHANNELS, board_size, board_size), np.uint8),
            spaces.Discrete(4),
        )

        cells, dev = self.rules.num_cells, self.device
        self._cells = cells
        # Observation planes of all games, and a flat view of them for indexed reads and writes.
        self._planes = torch.zeros((num_envs, NUM_CHANNELS, board_size, board_size), dtype=torch.uint8, device=dev)
        self._planes_flat = self._planes.view(-1)
        self._plane_offsets = torch.arange(num_envs, device=dev) * (NUM_CHANNELS * cells)
        self._body_offsets = self._plane_offsets + BODY * cells
        # Body cells of each game in order, tail to head, in a ring buffer of power-of-two size.
        self._ring_mask = (1 << (cells - 1).bit_length()) - 1
        self._ring = torch.zeros((num_envs, self._ring_mask + 1), dtype=torch.int64, device=dev)
        self._ring_offsets = torch.arange(num_envs, device=dev) * self._ring.shape[1]
        # Per-game scalars, one row each (see the _HEAD ... _EPISODE_LENGTH constants), so that
        # each quantity is contiguous over games.
        self._state = torch.zeros((_STATE_ROWS, num_envs), dtype=torch.int64, device=dev)

        # Moves as lookups: index ``action * 4 + direction`` gives the direction taken (the
        # reversal rule applied), and ``16 * cell + action * 4 + direction`` the cell entered.
        turns = torch.as_tensor(TURNS, device=dev)
        self._turn_table = turns.reshape(-1)
        neighbors = torch.as_tensor(self.rules.neighbor_table(), device=dev)
        self._move_table = neighbors[:, turns].reshape(-1)
        self._start_states, self._start_planes, self._start_rings, self._start_free = self._start_tables()
        # Offsets of (channel, cell) for the cells cleared and set by a step, one row per game.
        self._clear_offsets = self._channel_offsets(HEAD, NECK, BODY, TAIL, FOOD)
        self._set_offsets = self._channel_offsets(HEAD, BODY, NECK, TAIL)
        # Sources of scattered writes of zeros and ones (scatter_ beats index_fill_ on CPU).
        self._fill_values = torch.stack((torch.zeros_like(self._clear_offsets), torch.ones_like(self._clear_offsets)))
        self._fill_values = self._fill_values.to(torch.uint8)

        self._generator = torch.Generator(device=dev)
        self._generator.manual_seed(secrets.randbits(63) if seed is None else seed)
        self._actions: torch.Tensor | None = None
        self._t_start = time.time()
        self._restart(torch.arange(num_envs, device=dev))

    # ------------------------------------------------------------------ tensor interface

    def reset_tensors(self) -> torch.Tensor:
        """Start a new game everywhere and return the observations, ``(N, C, H, W)`` uint8."""
        self._restart(torch.arange(self.num_envs, device=self.device))
        return self._planes.clone()

    def step_tensors(self, actions: torch.Tensor) -> BatchedStep:
        """Apply one action per game (``(N,)`` integers on ``device``) and restart finished games.

        Games that die this step are restarted before anyone sees their board again, so the
        writes of a step need no per-game masks: a dying game may scribble on its own planes,
        and its last observation is copied before the writes.
        """
        ring, mask, cells = self._ring.view(-1), self._ring_mask, self._cells
        head, neck, head_ptr, tail_ptr, direction, length, food, steps_without_food, score, episode_length = (
            self._state.unbind(0)
        )
        turn = torch.add(direction, actions.to(torch.int64), alpha=4)
        target = self._move_table.index_select(0, torch.add(turn, head, alpha=16))  # -1: off the board
        direction = self._turn_table.index_select(0, turn)
        off_board = target < 0
        target.clamp_(min=0)
        tail = ring.index_select(0, self._ring_offsets + tail_ptr)
        # The head enters an occupied cell when the body is there and it is not the tail,
        # whose cell is freed this very step (food never lies on the body).
        on_body = self._planes_flat.index_select(0, self._body_offsets + target).bool()
        dies = off_board | (on_body & (target != tail))
        eats = ~dies & (target == food)
        dead = dies.nonzero().squeeze(1)
        dead_observations = self._planes.index_select(0, dead)

        # Where the snake eats, its tail stays: the tail writes then land on the food cell,
        # which holds no body or tail, and change nothing.
        next_tail = ring.index_select(0, self._ring_offsets + ((tail_ptr + 1) & mask))
        freed = torch.where(eats, target, tail)
        new_tail = torch.where(eats, tail, next_tail)
        self._write(0, self._clear_offsets, (head, neck, freed, freed, target))
        self._write(1, self._set_offsets, (target, head, head, new_tail))
        head_ptr = (head_ptr + 1) & mask
        ring.scatter_(0, self._ring_offsets + head_ptr, target)
        length = length + eats
        wins = eats & (length == cells)
        self._state = torch.stack(
            (
                target,
                head,
                head_ptr,
                (tail_ptr + ~eats) & mask,
                direction,
                length,
                food.masked_fill(wins, -1),
                torch.where(eats, 0, steps_without_food + 1),
                score + eats,
                episode_length + 1,
            )
        )
        eaters = (eats & ~wins).nonzero().squeeze(1)
        if len(eaters):
            self._place_food(eaters, self._free_cells(self._planes.index_select(0, eaters)))

        rewards = eats.float() - dies.float()
        terminated = dies | wins
        truncated = ~terminated & (self._state[_STEPS_WITHOUT_FOOD] >= self.rules.truncation_steps)
        finished = (terminated | truncated).nonzero().squeeze(1)
        final_state = self._state.index_select(1, finished)
        final_observations = self._planes.index_select(0, finished)
        final_dies = dies.index_select(0, finished)
        if len(dead):  # dead and finished are both ascending, so the rows line up
            _copy_rows(final_observations, final_dies.nonzero().squeeze(1), dead_observations)
        step = BatchedStep(
            observations=self._planes,  # replaced by a copy once the finished games restarted
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            final_indices=finished,
            final_observations=final_observations,
            final_returns=(final_state[_SCORE] - final_dies.long()).float(),
            final_episode_lengths=final_state[_EPISODE_LENGTH],
            final_scores=final_state[_SCORE],
            final_lengths=final_state[_LENGTH],
            final_successes=wins.index_select(0, finished),
        )
        self._restart(finished)
        return dataclasses.replace(step, observations=self._planes.clone())

    @property
    def scores(self) -> torch.Tensor:
        """Food eaten so far in each game's current episode, ``(N,)`` int64 on ``device``."""
        return self._state[_SCORE]

    @property
    def lengths(self) -> torch.Tensor:
        """Each game's current snake length, ``(N,)`` int64 on ``device``."""
        return self._state[_LENGTH]

    # ------------------------------------------------------------------ SB3 VecEnv API

    def reset(self) -> VecEnvObs:
        if self._seeds[0] is not None:
            self._generator.manual_seed(self._seeds[0])
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return self.reset_tensors().cpu().numpy()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = torch.as_tensor(np.asarray(actions).reshape(self.num_envs), device=self.device)

    def step_wait(self) -> VecEnvStepReturn:
        assert self._actions is not None, "step_async() must be called before step_wait()"
        step = self.step_tensors(self._actions)
        self._actions = None
        scores, lengths = self.scores.tolist(), self.lengths.tolist()
        infos: list[dict[str, Any]] = [
            {"score": score, "length": length} for score, length in zip(scores, lengths, strict=True)
        ]
        if len(step.final_indices):
            elapsed = round(time.time() - self._t_start, 6)
            final_observations = step.final_observations.cpu().numpy()
            columns = zip(
                step.final_indices.tolist(),
                step.truncated[step.final_indices].tolist(),
                step.final_returns.tolist(),
                step.final_episode_lengths.tolist(),
                step.final_scores.tolist(),
                step.final_lengths.tolist(),
                step.final_successes.tolist(),
                strict=True,
            )
            for row, (index, truncated, ret, steps, score, length, success) in enumerate(columns):
                infos[index] = {
                    "score": score,
                    "length": length,
                    "terminal_observation": final_observations[row],
                    "TimeLimit.truncated": truncated,
                    "episode": {"r": ret, "l": steps, "t": elapsed},
                    "is_success": success,
                }
        dones = (step.terminated | step.truncated).cpu().numpy()
        return step.observations.cpu().numpy(), step.rewards.cpu().numpy(), dones, infos

    def set_state(
        self, index: int, body: Sequence[Sequence[int]], direction: int, food: Sequence[int] | None
    ) -> np.ndarray:
        """Put a given snake into game ``index`` and return that game's observation.

        Same arguments and validation as :meth:`SnakeEnv.set_state`; the game's score,
        steps-without-food counter and episode statistics start again from zero.
        """
        if not 0 <= index < self.num_envs:
            raise ValueError(f"index must be in [0, {self.num_envs}), got {index!r}")
        cells, direction, food = self.rules.validate_state(body, direction, food)
        n = self.rules.board_size
        state, planes, ring = self._snake_tables((cells[:, 0] * n + cells[:, 1])[None], np.array([direction]))
        self._state[:, index] = state[0]
        self._planes[index] = planes[0]
        self._ring[index, : len(cells)] = ring[0]
        if food is not None:
            self._state[_FOOD, index] = food[0] * n + food[1]
            self._planes[index, FOOD, food[0], food[1]] = 1
        return self._planes[index].cpu().numpy().copy()

    def close(self) -> None:
        pass

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """All games share one configuration, so each index gets the batched env's attribute."""
        return [getattr(self, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise AttributeError(
            f"BatchedSnakeVecEnv cannot set {attr_name!r} per game: all games share one configuration; "
            "create a new BatchedSnakeVecEnv instead"
        )

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        raise AttributeError(
            f"BatchedSnakeVecEnv has no per-game {method_name!r}: its games are tensors, not gym.Env objects; "
            "call the batched env's own methods instead"
        )

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [render_rgb(obs) for obs in self._planes.cpu().numpy()]

    def render(self, mode: str | None = None) -> np.ndarray | str | None:
        """The first game as text (``ansi``), or the first 16 games tiled (``rgb_array``)."""
        mode = mode or self.render_mode
        if mode == "ansi":
            return render_ansi(self._planes[0].cpu().numpy())
        if mode == "rgb_array":
            return tile_images([render_rgb(obs) for obs in self._planes[:RENDERED_GAMES].cpu().numpy()])
        return None

    # ------------------------------------------------------------------ game mechanics

    def _restart(self, games: torch.Tensor) -> None:
        """Start a new game in each of ``games``, an index tensor from ``nonzero()`` or ``arange``."""
        if len(games) == 0:  # the size of a nonzero() result is known without another device sync
            return
        count, generator, device = len(games), self._generator, self.device
        start = torch.randint(len(self._start_states), (count,), generator=generator, device=device)
        free_choice = torch.randint(self._start_free.shape[1], (count,), generator=generator, device=device)
        food = self._start_free[start, free_choice]
        state = self._start_states.index_select(0, start).T
        state[_FOOD] = food
        self._state.index_copy_(1, games, state)
        _copy_rows(self._planes, games, self._start_planes.index_select(0, start))
        self._ring[:, : self.rules.start_length].index_copy_(0, games, self._start_rings.index_select(0, start))
        self._write(1, self._channel_offsets(FOOD, games=games), (food,))

    def _start_tables(self) -> tuple[torch.Tensor, ...]:
        """Every possible starting game: rows of state, planes (no food yet), ring and free cells.

        All starts leave the same number of cells free, so food is a uniform pick from a row of
        the free-cell table: together with a uniform start, the same distribution as
        ``SnakeEnv.reset``.
        """
        states, planes, rings = self._snake_tables(*self.rules.start_states())
        occupied = (planes[:, HEAD] | planes[:, BODY]).view(len(planes), -1).bool()
        free = torch.arange(self.rules.num_cells, device=self.device).expand(len(planes), -1)[~occupied]
        return states, planes, rings, free.view(len(planes), -1)

    def _snake_tables(
        self, bodies: np.ndarray, directions: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Games holding the given snakes (flat cells, head first, ``(count, L)``) and no food.

        :return: rows of state ``(count, _STATE_ROWS)``, planes ``(count, C, H, W)`` and ring ``(count, L)``.
        """
        count, length = bodies.shape
        states = np.zeros((count, _STATE_ROWS), dtype=np.int64)
        states[:, _HEAD], states[:, _NECK], states[:, _DIRECTION] = bodies[:, 0], bodies[:, 1], directions
        states[:, _HEAD_PTR], states[:, _TAIL_PTR] = length - 1, 0
        states[:, _LENGTH], states[:, _FOOD] = length, -1
        planes = np.zeros((count, NUM_CHANNELS, self.rules.num_cells), dtype=np.uint8)
        rows = np.arange(count)
        planes[rows[:, None], BODY, bodies[:, 1:]] = 1
        planes[rows, HEAD, bodies[:, 0]] = 1
        planes[rows, NECK, bodies[:, 1]] = 1
        planes[rows, TAIL, bodies[:, -1]] = 1
        planes = planes.reshape(count, NUM_CHANNELS, self.rules.board_size, self.rules.board_size)
        tables = (states, planes, bodies[:, ::-1].copy())
        return tuple(torch.as_tensor(table, device=self.device) for table in tables)

    def _free_cells(self, planes: torch.Tensor) -> torch.Tensor:
        """Which cells of each game in ``planes`` ``(count, C, H, W)`` the snake leaves free, ``(count, cells)``."""
        return ((planes[:, HEAD] | planes[:, BODY]) == 0).view(len(planes), -1)

    def _place_food(self, games: torch.Tensor, free: torch.Tensor) -> None:
        """Put food on a uniformly random cell of each of ``games`` where ``free``; each must have one."""
        free_count = free.sum(dim=1)
        uniform = torch.rand(len(games), generator=self._generator, device=self.device, dtype=torch.float64)
        k = (uniform * free_count).long().clamp_(max=free_count - 1)
        # The (k+1)-th free cell is the first whose running count of free cells exceeds k.
        food = (free.cumsum(dim=1) <= k.unsqueeze(1)).sum(dim=1)
        self._state[_FOOD].index_copy_(0, games, food)
        self._write(1, self._channel_offsets(FOOD, games=games), (food,))

    def _channel_offsets(self, *channels: int, games: torch.Tensor | None = None) -> torch.Tensor:
        """Flat storage offsets of ``channels`` for each of ``games`` (all when ``None``), ``(k * count,)``."""
        rows = self._plane_offsets if games is None else self._plane_offsets.index_select(0, games)
        channel_starts = torch.tensor(channels, device=self.device) * self.rules.num_cells
        return (channel_starts.unsqueeze(1) + rows.unsqueeze(0)).reshape(-1)

    def _write(self, value: int, offsets: torch.Tensor, cells: Sequence[torch.Tensor]) -> None:
        """Set plane cells to ``value`` in one scattered write.

        ``offsets`` come from :meth:`_channel_offsets`; ``cells`` hold one flat cell per game for
        each channel, in the same order.
        """
        index = offsets + torch.cat(cells)
        self._planes_flat.scatter_(0, index, self._fill_values[value][: len(index)])


def _copy_rows(destination: torch.Tensor, index: torch.Tensor, source: torch.Tensor) -> None:
    """``destination[index] = source`` along dim 0, through the widest integer view the rows allow.

    PyTorch's indexed copies move one element at a time, so copying uint8 rows as int64 words
    is up to 8x faster.
    """
    row_bytes = destination[0].numel() * destination.element_size()
    wide = next(
        dtype for dtype in (torch.int64, torch.int32, torch.int16, torch.uint8) if row_bytes % dtype.itemsize == 0
    )
    rows = destination.view(len(destination), -1).view(wide)
    rows.index_copy_(0, index, source.reshape(len(source), -1).view(wide))
