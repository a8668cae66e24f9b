"""``BatchedSnakeVecEnv``: thousands of Snake games stepped together as torch tensors.

How the games are stored
------------------------
A step changes only a few cells of each game, so the state is kept small and the work of a
step grows with the number of games, not with the number of cells. The hot path is a few
dozen whole-batch tensor operations with no Python loop over games. Per game there are:

- a row of scalars (head, neck and tail cells, direction, length, food cell, steps without
  food, food eaten, steps in the episode; one row per quantity, so each is contiguous over
  games),
- a *link plane*, one byte per cell: ``0`` where there is no body, else ``1 + d`` for a body
  cell whose next cell towards the head lies in direction ``d``. It is the body plane of the
  observation (non-zero cells) and the body's order at once: when the tail moves, its link
  says where to. A step writes two bytes of it (the old head becomes a body cell that links
  to the new head; the tail's cell is freed unless the snake eats).

Moving is one lookup in a precomputed table (cell, action and direction give the cell
entered, with the reversal rule applied; ``-1`` off the board). The head enters an occupied
cell exactly when the link plane is set there and that cell is not the tail (the tail's cell
is freed this very step; food never lies on the body).

Observations are drawn fresh from that state every step, into a new tensor: the body plane
is the link plane capped at one, and head, neck, tail and food are one scattered write
of ones. So nothing returned is ever written again, and the state a step reads and writes
(about 100 bytes per game on a 10x10 board) stays in the CPU's caches for thousands of games.

The countdown channel (``countdown=True``) comes from a second plane per game, the episode
step at which the head entered each cell: a body cell entered at step ``t`` is free after
``t + length - now`` more moves (the tail after one), so the channel is that difference on the
body cells, with no walk along the body. A step writes one value of it.

A game that dies keeps its board as it was before the fatal move (its writes go to a scratch
row), which is the ``terminal_observation`` that :class:`~sb3_snake.SnakeEnv` returns too.

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

from sb3_snake.common.system import check_torch_device
from sb3_snake.envs.render import render_ansi, render_rgb
from sb3_snake.envs.rules import (
    BODY,
    COUNTDOWN,
    FOOD,
    HEAD,
    MAX_COUNTDOWN,
    NECK,
    TAIL,
    TURNS,
    SnakeRules,
    check_actions,
)

#: How many games ``render("rgb_array")`` tiles into one image.
RENDERED_GAMES = 16

# Rows of the per-game state: flat head, neck and tail cells, direction, snake length, flat
# food cell (-1 when the board is full), steps without food, food eaten, steps in the episode.
_HEAD, _NECK, _TAIL, _DIRECTION, _LENGTH, _FOOD, _STEPS_WITHOUT_FOOD, _SCORE, _EPISODE_LENGTH = range(9)
_STATE_ROWS = 9
#: Observation channels drawn as one-hot cells from the state, and the state row of each.
_ONE_HOT_CHANNELS = ((HEAD, _HEAD), (NECK, _NECK), (TAIL, _TAIL), (FOOD, _FOOD))


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
        ``VecEnv.seed`` reseeds at the next ``reset()``. One seed gives the same games on one
        device; the generator lives on ``device``, and PyTorch's CPU and CUDA generators draw
        different numbers, so the same seed gives other (equally distributed) food and starts
        on a GPU than on the CPU. The rules are the same.
    :param start_length: cells of the snake at the start.
    :param dist_to_border: minimum distance of the starting head from every wall.
    :param max_steps_without_food: steps without eating before truncation
        (default ``board_size ** 2``).
    :param render_mode: ``"ansi"`` or ``"rgb_array"``.
    :param countdown: observe the countdown channel too (see :class:`~sb3_snake.SnakeEnv`).
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
        countdown: bool = False,
    ):
        if isinstance(num_envs, (bool, np.bool_)) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        num_envs = int(num_envs)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.rules = SnakeRules(board_size, start_length, dist_to_border, max_steps_without_food, countdown)
        self.device = check_torch_device(device)
        self.render_mode = render_mode
        super().__init__(num_envs, self.rules.observation_space, spaces.Discrete(4))
        self._channels = self.observation_space.shape[0]

        cells, dev = self.rules.num_cells, self.device
        self._cells = cells
        # Link planes of all games plus one scratch row that absorbs the writes of dying games,
        # and a flat view of them for indexed reads and writes.
        self._links = torch.zeros((num_envs + 1, cells), dtype=torch.uint8, device=dev)
        self._links_flat = self._links.view(-1)
        self._link_offsets = torch.arange(num_envs, device=dev) * cells
        # With the countdown: the episode step at which the head entered each cell, laid out as the links.
        self._entered = torch.zeros((num_envs + 1, cells), dtype=torch.int64, device=dev) if countdown else None
        self._scratch_offset = torch.tensor(num_envs * cells, device=dev)
        # Per-game scalars, one row each (see the _HEAD ... _EPISODE_LENGTH constants).
        self._state = torch.zeros((_STATE_ROWS, num_envs), dtype=torch.int64, device=dev)

        # Moves as lookups: index ``action * 4 + direction`` gives the direction taken (the
        # reversal rule applied), and ``16 * cell + action * 4 + direction`` the cell entered;
        # ``4 * cell + direction`` gives the neighbouring cell (how the tail follows its link).
        turns = torch.as_tensor(TURNS, device=dev)
        self._turn_table = turns.reshape(-1)
        self._link_table = (self._turn_table + 1).to(torch.uint8)  # the link an old head gets
        neighbors = torch.as_tensor(self.rules.neighbor_table(), device=dev)
        self._move_table = neighbors[:, turns].reshape(-1)
        self._neighbor_table = neighbors.reshape(-1)
        self._start_states, self._start_links, self._start_entered, self._start_free = self._start_tables()
        # Drawing observations: the state rows of the one-hot channels, and where each game's
        # one-hot channel starts in a flat (N, C, cells) tensor, (4, N).
        self._one = torch.ones((), dtype=torch.uint8, device=dev)
        self._one_hot_rows = torch.tensor([row for _, row in _ONE_HOT_CHANNELS], device=dev)
        channel_starts = torch.tensor([channel for channel, _ in _ONE_HOT_CHANNELS], device=dev).unsqueeze(1) * cells
        self._one_hot_offsets = channel_starts + torch.arange(num_envs, device=dev) * (self._channels * cells)

        self._generator = torch.Generator(device=dev)
        self._generator.manual_seed(secrets.randbits(63) if seed is None else seed)
        self._actions: torch.Tensor | None = None
        self._t_start = time.time()
        self._restart(torch.arange(num_envs, device=dev))

    # ------------------------------------------------------------------ tensor interface

    def reset_tensors(self) -> torch.Tensor:
        """Start a new game everywhere and return the observations, ``(N, C, H, W)`` uint8."""
        self._restart(torch.arange(self.num_envs, device=self.device))
        return self._observe_in_play()

    def step_tensors(self, actions: torch.Tensor) -> BatchedStep:
        """Apply one action per game (``(N,)`` integers on ``device``) and restart finished games.

        Actions must be integers from 0 to 3. The dtype is always checked; the values are
        checked on the CPU, and trusted on a GPU, where a check would wait for the device every
        step (the SB3 ``step`` checks them always, as ``SnakeEnv.step`` does).
        """
        if actions.dtype.is_floating_point or actions.dtype.is_complex or actions.dtype == torch.bool:
            raise ValueError(f"actions must be an integer tensor of 0 to 3, got dtype {actions.dtype}")
        if actions.shape != (self.num_envs,):
            raise ValueError(f"expected actions of shape ({self.num_envs},), got {tuple(actions.shape)}")
        if actions.device.type == "cpu" and bool(((actions < 0) | (actions > 3)).any()):
            check_actions(actions.numpy(), self.num_envs)  # raises, naming the first bad action
        return self._step(actions)

    def _step(self, actions: torch.Tensor) -> BatchedStep:
        """:meth:`step_tensors` on actions already checked."""
        links, cells = self._links_flat, self._cells
        previous = self._state
        head, neck, tail, direction, length, food, steps_without_food, score, episode_length = previous.unbind(0)
        turn = torch.add(direction, actions.to(torch.int64), alpha=4)
        target = self._move_table.index_select(0, torch.add(turn, head, alpha=16))  # -1: off the board
        direction = self._turn_table.index_select(0, turn)
        off_board = target < 0
        target.clamp_(min=0)
        # The head enters an occupied cell when the body is there and it is not the tail,
        # whose cell is freed this very step (food never lies on the body).
        on_body = links.index_select(0, self._link_offsets + target).bool()
        dies = off_board | (on_body & (target != tail))
        eats = ~dies & (target == food)
        # The old head becomes a body cell linking to the new one; the tail's cell is freed and
        # the tail follows its link, unless the snake eats. Dying games write to the scratch row.
        tail_link = links.index_select(0, self._link_offsets + tail)
        next_tail = self._neighbor_table.index_select(0, torch.add(tail_link.long() - 1, tail, alpha=4))
        rows = torch.where(dies, self._scratch_offset, self._link_offsets)
        head_link = self._link_table.index_select(0, turn)
        links.scatter_(0, torch.cat((rows + tail, rows + head)), torch.cat((tail_link * eats, head_link)))
        if self._entered is not None:
            self._entered.view(-1).scatter_(0, rows + target, episode_length + 1)
        length = length + eats
        wins = eats & (length == cells)
        self._state = torch.stack(
            (
                target,
                head,
                torch.where(eats, tail, next_tail),
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
            self._place_food(eaters)

        rewards = eats.float() - dies.float()
        terminated = dies | wins
        truncated = ~terminated & (self._state[_STEPS_WITHOUT_FOOD] >= self.rules.truncation_steps)
        finished = (terminated | truncated).nonzero().squeeze(1)
        final_dies = dies.index_select(0, finished)
        # A game that died is shown as it was before the fatal move; the others as they are now.
        final_state = torch.where(final_dies, previous.index_select(1, finished), self._state.index_select(1, finished))
        final_observations = self._observe(final_state, *self._planes(finished))
        final_episode_lengths = self._state[_EPISODE_LENGTH].index_select(0, finished)
        self._restart(finished)
        return BatchedStep(
            observations=self._observe_in_play(),
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            final_indices=finished,
            final_observations=final_observations,
            final_returns=(final_state[_SCORE] - final_dies.long()).float(),
            final_episode_lengths=final_episode_lengths,
            final_scores=final_state[_SCORE],
            final_lengths=final_state[_LENGTH],
            final_successes=wins.index_select(0, finished),
        )

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
        self._actions = torch.as_tensor(check_actions(actions, self.num_envs), device=self.device)

    def step_wait(self) -> VecEnvStepReturn:
        assert self._actions is not None, "step_async() must be called before step_wait()"
        step = self._step(self._actions)  # checked by step_async
        self._actions = None
        scores, lengths = self.scores.tolist(), self.lengths.tolist()
        infos: list[dict[str, Any]] = [
            {"score": score, "length": length} for score, length in zip(scores, lengths, strict=True)
        ]
        finished = self.finished_infos(step)
        if finished:
            final_observations = step.final_observations.cpu().numpy()
            for row, (index, info) in enumerate(finished.items()):
                infos[index] = {**info, "terminal_observation": final_observations[row]}
        dones = (step.terminated | step.truncated).cpu().numpy()
        return step.observations.cpu().numpy(), step.rewards.cpu().numpy(), dones, infos

    def finished_infos(self, step: BatchedStep) -> dict[int, dict[str, Any]]:
        """The info SB3 expects of each game that finished in ``step``, by game index in
        ``final_indices`` order: ``score``, ``length``, ``TimeLimit.truncated``, ``is_success`` and
        ``episode`` (``r``, ``l``, ``t`` as SB3's ``Monitor`` writes them); no ``terminal_observation``."""
        if not len(step.final_indices):
            return {}
        elapsed = round(time.time() - self._t_start, 6)
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
        return {
            index: {
                "score": score,
                "length": length,
                "TimeLimit.truncated": truncated,
                "episode": {"r": ret, "l": steps, "t": elapsed},
                "is_success": success,
            }
            for index, truncated, ret, steps, score, length, success in columns
        }

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
        state, links, entered = self._snake_tables((cells[:, 0] * n + cells[:, 1])[None], np.array([direction]))
        if food is not None:
            state[0, _FOOD] = food[0] * n + food[1]
        self._state[:, index] = state[0]
        self._links[index] = links[0]
        if self._entered is not None:
            self._entered[index] = entered[0]
        game = torch.tensor([index], device=self.device)
        return self._observe(self._state[:, index : index + 1], *self._planes(game))[0].cpu().numpy()

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
        return [render_rgb(obs) for obs in self._current_observations(self.num_envs)]

    def render(self, mode: str | None = None) -> np.ndarray | str | None:
        """The first game as text (``ansi``), or the first 16 games tiled (``rgb_array``)."""
        mode = mode or self.render_mode
        if mode == "ansi":
            return render_ansi(self._current_observations(1)[0])
        if mode == "rgb_array":
            return tile_images([render_rgb(obs) for obs in self._current_observations(RENDERED_GAMES)])
        return None

    # ------------------------------------------------------------------ game mechanics

    def _planes(self, games: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The link planes of ``games`` and, with the countdown, their entry-step planes."""
        entered = self._entered.index_select(0, games) if self._entered is not None else None
        return self._links.index_select(0, games), entered

    def _observe(
        self, state: torch.Tensor, links: torch.Tensor, entered: torch.Tensor | None, in_play: bool = False
    ) -> torch.Tensor:
        """Fresh observations ``(M, C, H, W)`` of the games with these state columns and planes.

        :param state: ``(rows, M)`` columns of per-game state.
        :param links: ``(M, cells)`` link planes.
        :param entered: ``(M, cells)`` entry-step planes with the countdown, else None.
        :param in_play: these are all ``N`` games, ready for their next move: every game has food
            then (only a finished game may have filled the board).
        """
        count, n = len(links), self.rules.board_size
        observations = torch.zeros((count, self._channels, self._cells), dtype=torch.uint8, device=self.device)
        torch.minimum(links, self._one, out=observations[:, BODY])  # links are 0 or 1 + direction
        if entered is not None:  # moves until free: entered + length - now, on the body cells
            moves = entered + (state[_LENGTH] - state[_EPISODE_LENGTH]).unsqueeze(1)
            observations[:, COUNTDOWN] = moves.clamp_(0, MAX_COUNTDOWN).to(torch.uint8) * observations[:, BODY]
        cells = state.index_select(0, self._one_hot_rows)  # head, neck, tail and food
        if in_play:
            offsets, values = self._one_hot_offsets, self._one.expand(cells.numel())
        else:
            # The first ``count`` columns of the offsets of all games fit any ``count`` games.
            offsets, values = self._one_hot_offsets[:, :count], (cells >= 0).view(-1).byte()  # food -1: none
            cells = cells.clamp(min=0)
        observations.view(-1).scatter_(0, (offsets + cells).view(-1), values)
        return observations.view(count, self._channels, n, n)

    def _observe_in_play(self) -> torch.Tensor:
        """Fresh observations of all games as they are now, ``(N, C, H, W)``."""
        entered = self._entered[: self.num_envs] if self._entered is not None else None
        return self._observe(self._state, self._links[: self.num_envs], entered, in_play=True)

    def _current_observations(self, count: int) -> np.ndarray:
        """The first ``count`` games as they are now, as NumPy observations."""
        count = min(count, self.num_envs)
        return (
            self._observe(self._state[:, :count], *self._planes(torch.arange(count, device=self.device))).cpu().numpy()
        )

    def _restart(self, games: torch.Tensor) -> None:
        """Start a new game in each of ``games``, an index tensor from ``nonzero()`` or ``arange``."""
        if len(games) == 0:  # the size of a nonzero() result is known without another device sync
            return
        count, generator, device = len(games), self._generator, self.device
        start = torch.randint(len(self._start_states), (count,), generator=generator, device=device)
        free_choice = torch.randint(self._start_free.shape[1], (count,), generator=generator, device=device)
        state = self._start_states.index_select(0, start).T
        state[_FOOD] = self._start_free[start, free_choice]
        self._state.index_copy_(1, games, state)
        _copy_rows(self._links, games, self._start_links.index_select(0, start))
        if self._entered is not None:
            self._entered.index_copy_(0, games, self._start_entered.index_select(0, start))

    def _start_tables(self) -> tuple[torch.Tensor, ...]:
        """Every possible starting game: rows of state (no food yet), link planes, entry-step
        planes and free cells.

        All starts leave the same number of cells free, so food is a uniform pick from a row of
        the free-cell table: together with a uniform start, the same distribution as
        ``SnakeEnv.reset``.
        """
        bodies, directions = self.rules.start_states()
        states, links, entered = self._snake_tables(bodies, directions)
        occupied = links.bool()
        occupied[torch.arange(len(bodies), device=self.device), states[:, _HEAD]] = True
        free = torch.arange(self.rules.num_cells, device=self.device).expand(len(bodies), -1)[~occupied]
        return states, links, entered, free.view(len(bodies), -1)

    def _snake_tables(self, bodies: np.ndarray, directions: np.ndarray) -> tuple[torch.Tensor, ...]:
        """Games holding the given snakes (flat cells, head first, ``(count, L)``) and no food.

        :return: rows of state ``(count, _STATE_ROWS)``, link planes and entry-step planes
            ``(count, cells)``; the head entered its cell at step 0, the cell ``k`` behind it at ``-k``.
        """
        count, length = bodies.shape
        states = np.zeros((count, _STATE_ROWS), dtype=np.int64)
        states[:, _HEAD], states[:, _NECK], states[:, _TAIL] = bodies[:, 0], bodies[:, 1], bodies[:, -1]
        states[:, _DIRECTION], states[:, _LENGTH], states[:, _FOOD] = directions, length, -1
        # Each body cell links to the cell before it in the list (one step closer to the head).
        toward_head = np.argmax(self.rules.neighbor_table()[bodies[:, 1:]] == bodies[:, :-1, None], axis=2)
        links = np.zeros((count, self.rules.num_cells), dtype=np.uint8)
        links[np.arange(count)[:, None], bodies[:, 1:]] = 1 + toward_head
        entered = np.zeros((count, self.rules.num_cells), dtype=np.int64)
        entered[np.arange(count)[:, None], bodies] = -np.arange(length)
        return tuple(torch.as_tensor(table, device=self.device) for table in (states, links, entered))

    def _place_food(self, games: torch.Tensor) -> None:
        """Put food on a uniformly random free cell of each of ``games``; each must have one."""
        free = self._links.index_select(0, games) == 0
        free.scatter_(1, self._state[_HEAD].index_select(0, games).unsqueeze(1), False)
        free_count = free.sum(dim=1)
        uniform = torch.rand(len(games), generator=self._generator, device=self.device, dtype=torch.float64)
        k = (uniform * free_count).long().clamp_(max=free_count - 1)
        # The (k+1)-th free cell is the first whose running count of free cells exceeds k.
        food = (free.cumsum(dim=1) <= k.unsqueeze(1)).sum(dim=1)
        self._state[_FOOD].index_copy_(0, games, food)


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
