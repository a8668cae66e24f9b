"""``BatchedSnakeVecEnv``: thousands of Snake games stepped together as torch tensors, behind
SB3's ``VecEnv`` interface.

The games, their state and the rules on tensors are :class:`~sb3_snake.envs.batched_games.BatchedGames`; this
module checks what users give and speaks SB3's language, through two interfaces. The ``VecEnv`` API
(``reset``/``step``) returns NumPy arrays and per-game ``infos`` as SB3 expects: ``score`` and ``length``, and
at a game's end ``terminal_observation``, ``TimeLimit.truncated``, ``episode`` (``r``, ``l``, ``t``, like SB3's
``Monitor``), ``is_success`` and ``long_start``. ``reset_tensors``/``step_tensors`` keep everything on
``device`` and build no Python objects per game; the scores and lengths are
:attr:`~BatchedSnakeVecEnv.scores` and :attr:`~BatchedSnakeVecEnv.lengths`.
Design notes: docs/design-notes.md, "sb3_snake/envs/batched_vec_env.py".
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn

from sb3_snake.common.errors import UsageError
from sb3_snake.common.system import available_memory_bytes, check_torch_device
from sb3_snake.envs.action_masks import action_masks
from sb3_snake.envs.batched_games import BatchedGames, BatchedStep
from sb3_snake.envs.batched_state import STATE_ROWS
from sb3_snake.envs.render import (
    RENDER_FPS,
    RENDER_MODES,
    RENDERED_GAMES,
    check_render_mode,
    draw_text,
    render_ansi,
    render_rgb,
    render_tiled,
)
from sb3_snake.envs.rules import SnakeRules, check_actions, is_integer

#: The seeds a torch generator takes.
_SEED_RANGE = (-(2**63), 2**64 - 1)
#: The attributes ``set_attr`` may change once the games are built, and the check of each new value.
SETTABLE_ATTRIBUTES = {"render_mode": check_render_mode}
#: The most games one batched env holds (and a model file may say it trained with): a million
#: games is far past what one device steps usefully at once.
MAX_GAMES = 1 << 20


def check_seed(seed: object) -> int | None:
    """``seed`` as an int, or None; a :class:`UsageError` for anything a torch generator cannot take."""
    if seed is None:
        return None
    low, high = _SEED_RANGE
    if not is_integer(seed) or not low <= seed <= high:
        raise UsageError(f"seed must be an integer from {low} to {high}, got {seed!r}; pass None for a random seed")
    return int(seed)


def check_num_envs(num_envs: object) -> int:
    """``num_envs`` as an int, or a :class:`UsageError` unless it is a positive integer."""
    if not is_integer(num_envs) or num_envs < 1:
        raise UsageError(f"num_envs must be a positive integer, got {num_envs!r}; pass the number of games")
    return int(num_envs)


def check_long_starts(long_starts: object) -> float:
    """``long_starts`` as a float, or a :class:`UsageError` unless it is a share from 0 to 1."""
    if isinstance(long_starts, bool) or not isinstance(long_starts, (int, float)) or not 0 <= long_starts <= 1:
        raise UsageError(
            f"long_starts must be a share from 0 to 1, got {long_starts!r}; pass 0 for standard starts only"
        )
    return float(long_starts)


def build_games(
    num_envs: object, device: str | torch.device, seed: object, long_starts: object, **rules: Any
) -> BatchedGames:
    """The games of a batched env, its arguments checked: ``num_envs`` games of
    :class:`~sb3_snake.envs.rules.SnakeRules` (``rules``, by their names) on ``device``, drawn
    from ``seed`` (None: a random one), a share ``long_starts`` of them from long starts.
    Both batched envs build theirs here."""
    count, seed, long_starts = check_num_envs(num_envs), check_seed(seed), check_long_starts(long_starts)
    seed = secrets.randbits(63) if seed is None else seed
    snake_rules = SnakeRules(**rules)
    check_games_fit(count, snake_rules)
    return BatchedGames(snake_rules, count, check_torch_device(device), seed, long_starts)


def game_bytes(rules: SnakeRules) -> int:
    """About the memory one game of ``rules`` takes in a batched env: its link plane (and the
    countdown's plane), its scalars, and its observations as drawn, turned and handed out."""
    cells, channels = rules.num_cells, rules.observation_space.shape[0]
    return cells * (1 + 8 * rules.countdown) + 8 * STATE_ROWS + 4 * channels * cells + 64


def check_games_fit(count: int, rules: SnakeRules) -> None:
    """A :class:`UsageError` naming the bound, or the memory, when ``count`` games of ``rules``
    are more than :data:`MAX_GAMES` or would not fit in the memory available."""
    needed, board = count * game_bytes(rules), f"{rules.board_size}x{rules.board_size}"
    if count > MAX_GAMES:
        raise UsageError(
            f"num_envs must be at most {MAX_GAMES:,}, got {count:,}: {count:,} games of {board} would need about "
            f"{needed / 2**30:,.1f} GiB of memory; pass fewer games"
        )
    available = available_memory_bytes()
    if available is not None and needed > available:
        raise UsageError(
            f"num_envs {count:,}: {count:,} games of {board} would need about {needed / 2**30:,.1f} GiB of memory "
            f"and {available / 2**30:,.1f} GiB are available; pass fewer games"
        )


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
    :param render_mode: ``"human"`` (``render`` draws the first game as text on stdout),
        ``"ansi"`` or ``"rgb_array"``.
    :param countdown: observe the countdown channel too (see :class:`~sb3_snake.SnakeEnv`).
    :param stall_growth: steps without food allowed per cell of the snake, on top of
        ``max_steps_without_food`` (see :class:`~sb3_snake.SnakeEnv`).
    :param egocentric: observe each board turned so that its snake moves up, and act with three
        relative actions (see :class:`~sb3_snake.SnakeEnv`). ``render`` and ``get_images`` draw
        the boards unturned.
    :param long_starts: the share of restarts (the first reset's included) that begin with a
        long snake, 50-85% of the board's cells, lying along a closed tour of the board with
        food on a random free cell, instead of the standard start. Games that are nearly won
        are rare in play, so a learner sees few of them; this puts the endgame into training.
        It is a way to train, not a rule: evaluate with standard starts (the default, 0).
    :param reachable: observe the reachability channel too, last (see :class:`~sb3_snake.SnakeEnv`).
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS}

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
        stall_growth: int = 0,
        long_starts: float = 0.0,
        egocentric: bool = False,
        reachable: bool = False,
    ):
        self.render_mode = check_render_mode(render_mode)
        rules = dict(
            board_size=board_size,
            start_length=start_length,
            dist_to_border=dist_to_border,
            max_steps_without_food=max_steps_without_food,
            countdown=countdown,
            stall_growth=stall_growth,
            egocentric=egocentric,
            reachable=reachable,
        )
        self._games = build_games(num_envs, device, seed, long_starts, **rules)
        #: What :meth:`copy` builds other games with: every argument but the games' count and seed.
        self._arguments = {**rules, "device": device, "long_starts": long_starts}
        self.rules, self.device = self._games.rules, self._games.device
        super().__init__(self._games.count, self.rules.observation_space, self.rules.action_space)
        self._actions: torch.Tensor | None = None
        self._t_start = time.time()

    def copy(self, num_envs: int | None = None, seed: int | None = None, **changes: Any) -> BatchedSnakeVecEnv:
        """Other games under the same rules and options: ``num_envs`` of them (default: as many as
        here), seeded with ``seed``, with ``changes`` to the constructor's other arguments (say,
        ``long_starts=0.0`` for standard starts only)."""
        unknown = sorted(set(changes) - set(self._arguments))
        if unknown:
            raise TypeError(f"copy() takes the constructor's arguments, not {', '.join(unknown)}")
        count = self.num_envs if num_envs is None else num_envs
        return BatchedSnakeVecEnv(count, seed=seed, **{**self._arguments, **changes})

    # ------------------------------------------------------------------ tensor interface

    def reset_tensors(self) -> torch.Tensor:
        """Start a new game everywhere and return the observations, ``(N, C, H, W)`` uint8."""
        self._games.restart(torch.arange(self.num_envs, device=self.device))
        return self._games.observe_in_play()

    def step_tensors(self, actions: torch.Tensor) -> BatchedStep:
        """Apply one action per game (``(N,)`` integers on ``device``) and restart finished games.

        Actions must be integers from 0 to 3 (0 to 2 when egocentric). The dtype is always checked; the values are
        checked on the CPU, and trusted on a GPU, where a check would wait for the device every
        step (the SB3 ``step`` checks them always, as ``SnakeEnv.step`` does).
        """
        if actions.dtype.is_floating_point or actions.dtype.is_complex or actions.dtype == torch.bool:
            raise UsageError(
                f"actions must be an integer tensor of 0 to {self.action_space.n - 1}, got dtype {actions.dtype}; "
                "pass torch.int64 actions"
            )
        if actions.shape != (self.num_envs,):
            raise UsageError(
                f"expected actions of shape ({self.num_envs},), got {tuple(actions.shape)}; pass one action per game"
            )
        highest = self.action_space.n - 1
        if actions.device.type == "cpu" and bool(((actions < 0) | (actions > highest)).any()):
            check_actions(actions.numpy(), self.num_envs, self.rules.egocentric)  # raises, naming the first bad one
        return self._games.step(actions)

    def action_mask_tensors(self) -> torch.Tensor:
        """The moves of every game that do not die at once, ``(N, A)`` bool on ``device``
        (:func:`~sb3_snake.envs.action_masks.action_masks` of the games' observations now)."""
        return action_masks(self._games.observe_in_play(), self.rules.egocentric)

    def action_masks(self) -> np.ndarray:
        """:meth:`action_mask_tensors` as NumPy, ``(N, A)``: the masks sb3-contrib's ``MaskablePPO`` takes."""
        return self.action_mask_tensors().cpu().numpy()

    @property
    def scores(self) -> torch.Tensor:
        """Food eaten so far in each game's current episode, ``(N,)`` int64 on ``device``."""
        return self._games.scores

    @property
    def lengths(self) -> torch.Tensor:
        """Each game's current snake length, ``(N,)`` int64 on ``device``."""
        return self._games.lengths

    # ------------------------------------------------------------------ SB3 VecEnv API

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """SB3's ``VecEnv.seed``: the games are reseeded with ``seed`` at the next ``reset()``."""
        return super().seed(check_seed(seed))

    def reset(self) -> VecEnvObs:
        if self._seeds[0] is not None:
            self._games.seed(self._seeds[0])
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return self.reset_tensors().cpu().numpy()

    def step_async(self, actions: np.ndarray) -> None:
        actions = check_actions(actions, self.num_envs, self.rules.egocentric)
        self._actions = torch.as_tensor(actions, device=self.device)

    def step_wait(self) -> VecEnvStepReturn:
        assert self._actions is not None, "step_async() must be called before step_wait()"
        step = self._games.step(self._actions)  # checked by step_async
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
        ``final_indices`` order: ``score``, ``length``, ``TimeLimit.truncated``, ``is_success``,
        ``long_start`` (the game began as a long start, not the standard start) and ``episode``
        (``r``, ``l``, ``t`` as SB3's ``Monitor`` writes them); no ``terminal_observation``."""
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
            step.final_long_starts.tolist(),
            strict=True,
        )
        return {
            index: {
                "score": score,
                "length": length,
                "TimeLimit.truncated": truncated,
                "episode": {"r": ret, "l": steps, "t": elapsed},
                "is_success": success,
                "long_start": long_start,
            }
            for index, truncated, ret, steps, score, length, success, long_start in columns
        }

    def set_state(
        self, index: int, body: Sequence[Sequence[int]], direction: int, food: Sequence[int] | None
    ) -> np.ndarray:
        """Put a given snake into game ``index`` and return that game's observation.

        Same arguments and validation as
        :meth:`SnakeEnv.set_state <sb3_snake.envs.snake_env.SnakeEnv.set_state>`; the game's
        score, steps-without-food counter and episode statistics start again from zero.
        """
        if not is_integer(index) or not 0 <= index < self.num_envs:
            raise UsageError(f"index must be in [0, {self.num_envs}), got {index!r}; pass the index of one game")
        cells, direction, food = self.rules.validate_state(body, direction, food)
        return self._games.set_state(int(index), cells, direction, food).cpu().numpy()

    def close(self) -> None:
        pass

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """All games share one configuration, so each index gets the batched env's attribute."""
        return [getattr(self, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """All games share one configuration: of its attributes only ``render_mode`` can change
        after the games are built, and for every game at once (``indices`` must name them all);
        any other (``num_envs``, the rules) is fixed, and a ValueError says so."""
        if not hasattr(self, attr_name):
            raise AttributeError(f"BatchedSnakeVecEnv has no attribute {attr_name!r} to set")
        if attr_name not in SETTABLE_ATTRIBUTES:
            raise UsageError(
                f"BatchedSnakeVecEnv cannot set {attr_name!r}: it is fixed once the games are built (only "
                f"{', '.join(SETTABLE_ATTRIBUTES)} can change); create a new BatchedSnakeVecEnv"
            )
        if sorted(self._get_indices(indices)) != list(range(self.num_envs)):
            raise AttributeError(
                f"BatchedSnakeVecEnv cannot set {attr_name!r} for some games only: all games share one "
                "configuration; set it for all (indices=None) or create a new BatchedSnakeVecEnv"
            )
        setattr(self, attr_name, SETTABLE_ATTRIBUTES[attr_name](value))

    def _get_indices(self, indices: VecEnvIndices) -> list[int]:
        """SB3's games of ``indices`` (None: all; an int: one), each checked: an IndexError names
        one out of range (negative ones count from the end, as a list's)."""
        chosen = list(super()._get_indices(indices))
        for index in chosen:
            if not is_integer(index) or not -self.num_envs <= index < self.num_envs:
                raise IndexError(f"game index {index!r} is out of range for {self.num_envs} games")
        return [int(index) % self.num_envs for index in chosen]

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        """Per-game methods: ``action_masks`` (each game's row of :meth:`action_masks`, as
        sb3-contrib's ``get_action_masks`` asks for them); the games have no other."""
        if method_name == "action_masks" and not method_args and not method_kwargs:
            masks = self.action_masks()
            return [masks[index] for index in self._get_indices(indices)]
        raise AttributeError(
            f"BatchedSnakeVecEnv has no per-game {method_name!r}: its games are tensors, not gym.Env objects; "
            "call the batched env's own methods instead"
        )

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        observations, bodies = self._first_observations(self.num_envs), self._games.bodies(self.num_envs)
        return [render_rgb(obs, body) for obs, body in zip(observations, bodies, strict=True)]

    def render(self, mode: str | None = None) -> np.ndarray | str | None:
        """The first game as text (``ansi``; ``human`` draws it on stdout), or the first 16 games
        tiled (``rgb_array``)."""
        mode = mode or self.render_mode
        if mode == "human":
            draw_text(self.render("ansi"))
            return None
        if mode == "ansi":
            return render_ansi(self._first_observations(1)[0], self._games.bodies(1)[0])
        if mode == "rgb_array":
            return render_tiled(self._first_observations(RENDERED_GAMES), self._games.bodies(RENDERED_GAMES))
        return None

    def _first_observations(self, count: int) -> np.ndarray:
        """The first ``count`` games as they are now, as NumPy observations."""
        return self._games.observe_first(count).cpu().numpy()


class FinishedGameInfos(list):
    """SB3's per-game ``infos`` of one step, built for the games that finished only; the others
    share one empty dict. ``finished`` lists those games' indices."""

    finished: list[int]


_NO_INFO: dict[str, Any] = {}


def finished_games(env: BatchedSnakeVecEnv, step: BatchedStep) -> tuple[np.ndarray, FinishedGameInfos]:
    """``dones`` and ``infos`` as SB3's VecEnv ``step`` gives them, from a ``BatchedStep``: the one
    read on the host per step (which games finished, and their episode statistics)."""
    dones = (step.terminated | step.truncated).cpu().numpy()
    infos = FinishedGameInfos([_NO_INFO] * env.num_envs)
    finished = env.finished_infos(step)
    for index, info in finished.items():
        infos[index] = info
    infos.finished = list(finished)
    return dones, infos
