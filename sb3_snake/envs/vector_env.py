"""``SnakeVectorEnv``: the torch-batched games of :mod:`~sb3_snake.envs.batched_games` as a Gymnasium 1.x
``VectorEnv``, what ``gym.make_vec("sb3_snake/Snake-v0", num_envs=N)`` returns.

NumPy in and out, ``infos`` as a dict of arrays with ``_key`` masks, the rules of :class:`~sb3_snake.SnakeEnv`.
Autoreset (``metadata["autoreset_mode"]``), as Gymnasium defines it; ``DISABLED`` is refused, since the batched
games restart every finished game within the step:

- ``NEXT_STEP`` (the default): a finished game shows its last observation; on the next step its new start,
  reward 0, both flags False, and its action is ignored.
- ``SAME_STEP``: the new start at once; the last observation and info in ``infos["final_obs"]`` and
  ``infos["final_info"]``. This is how the batched games restart anyway, so it is the faster mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from sb3_snake.common.errors import UsageError
from sb3_snake.envs.batched_games import BatchedStep
from sb3_snake.envs.batched_vec_env import build_games, check_seed
from sb3_snake.envs.render import RENDER_FPS, RENDER_MODES, check_render_mode, draw_text, render_ansi, render_rgb
from sb3_snake.envs.rules import check_actions, is_integer

#: The autoreset modes the batched games can offer.
AUTORESET_MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)


def check_autoreset_mode(mode: object) -> AutoresetMode:
    """``mode`` as an :class:`AutoresetMode` (the enum or its value), or a :class:`UsageError` unless it is one
    of :data:`AUTORESET_MODES`."""
    try:
        autoreset_mode = AutoresetMode(mode)
    except (ValueError, TypeError):
        autoreset_mode = None
    if autoreset_mode not in AUTORESET_MODES:
        raise UsageError(
            f"autoreset_mode must be AutoresetMode.NEXT_STEP or AutoresetMode.SAME_STEP ('NextStep' or 'SameStep'), "
            f"got {mode!r}; 'Disabled' cannot be offered, as the batched games restart finished games themselves"
        )
    return autoreset_mode


def _vector_info(values: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """Gymnasium's vector info: each key's ``(N,)`` values, zero where ``mask`` is False, and its ``_key`` mask."""
    info = {}
    for key, value in values.items():
        info[key], info[f"_{key}"] = np.where(mask, value, np.zeros_like(value)), mask.copy()
    return info


class SnakeVectorEnv(VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    """``num_envs`` games of Snake on ``device``, stepped together as tensors, behind Gymnasium's ``VectorEnv``.

    The rules, observations, rewards and ``info`` (``score``, ``length``, and ``is_success`` at an episode's
    end) are those of :class:`~sb3_snake.SnakeEnv`; the games are those of
    :class:`~sb3_snake.BatchedSnakeVecEnv`. Rewards are float32, terminations and truncations bool.

    ``device``, ``board_size``, ``start_length``, ``dist_to_border``, ``max_steps_without_food``,
    ``countdown``, ``stall_growth``, ``long_starts``, ``egocentric`` and ``reachable`` are as
    :class:`~sb3_snake.BatchedSnakeVecEnv` takes them.

    :class:`~sb3_snake.envs.batched_games.BatchedGames` steps every game, so with ``NEXT_STEP`` a game waiting
    for its new start takes a throwaway step with the ignored action and is then started anew, which costs a
    second drawing of all observations on such steps (BatchedGames draws no subset); ``SAME_STEP`` needs none.

    :param num_envs: number of games.
    :param autoreset_mode: ``AutoresetMode.NEXT_STEP`` (default) or ``AutoresetMode.SAME_STEP``, or their values.
    :param seed: seeds the one generator of all games (as ``reset``'s does), so seeds are not per game.
    :param render_mode: ``"ansi"`` or ``"rgb_array"`` (``render`` returns one frame per game), or ``"human"``
        (``render`` draws the first game as text on stdout).
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS, "autoreset_mode": AutoresetMode.NEXT_STEP}

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
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    ):
        self.render_mode = check_render_mode(render_mode)
        self.autoreset_mode = check_autoreset_mode(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        self._games = build_games(
            num_envs,
            device,
            seed,
            long_starts,
            board_size=board_size,
            start_length=start_length,
            dist_to_border=dist_to_border,
            max_steps_without_food=max_steps_without_food,
            countdown=countdown,
            stall_growth=stall_growth,
            egocentric=egocentric,
            reachable=reachable,
        )
        self.num_envs, self.rules, self.device = self._games.count, self._games.rules, self._games.device
        self.single_observation_space = self.rules.observation_space
        self.single_action_space = self.rules.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        # NEXT_STEP: the games that finished on the last step, whose new start this step shows.
        self._waiting = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start new games: all, or those of ``options["reset_mask"]`` (a ``(num_envs,)`` bool array, as
        Gymnasium's vector envs take it); other options are ignored, as :class:`~sb3_snake.SnakeEnv` ignores
        them. ``seed`` reseeds the generator of all games first."""
        seed = check_seed(seed)
        mask = self._reset_mask(options)
        if seed is not None:
            self._games.seed(seed)
        games = torch.as_tensor(np.flatnonzero(mask), device=self.device)
        self._games.restart(games)
        self._waiting.index_fill_(0, games, False)
        scores, lengths = torch.stack((self._games.scores, self._games.lengths)).cpu().numpy()
        infos = _vector_info({"score": scores, "length": lengths}, mask)
        return self._games.observe_in_play().cpu().numpy(), infos

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = check_actions(actions, self.num_envs, self.rules.egocentric)
        step = self._games.step(torch.as_tensor(actions, device=self.device))
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            return self._same_step(step)
        return self._next_step(step)

    def _next_step(self, step: BatchedStep) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        waiting = self._waiting
        observations = step.observations
        waiting_games = waiting.nonzero().squeeze(1)
        if len(waiting_games):
            # Their step was a throwaway with the ignored action: the new start they show is the one drawn now.
            self._games.restart(waiting_games)
            observations = self._games.observe_in_play()
        # The games that finished this step (not in a throwaway step) show their last observation.
        rows = (~waiting.index_select(0, step.final_indices)).nonzero().squeeze(1)
        finished = step.final_indices.index_select(0, rows)
        observations.index_copy_(0, finished, step.final_observations.index_select(0, rows))
        scores = self._games.scores.index_copy(0, finished, step.final_scores.index_select(0, rows))
        lengths = self._games.lengths.index_copy(0, finished, step.final_lengths.index_select(0, rows))
        terminated, truncated = step.terminated & ~waiting, step.truncated & ~waiting
        self._waiting = terminated | truncated
        infos = self._infos(scores, lengths, finished, step.final_successes.index_select(0, rows))
        rewards = step.rewards.masked_fill(waiting, 0.0)
        return *self._numpy(observations, rewards, terminated, truncated), infos

    def _same_step(self, step: BatchedStep) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        infos = self._infos(self._games.scores, self._games.lengths)
        finished = step.final_indices
        if len(finished):
            final_values = {"score": step.final_scores, "length": step.final_lengths}
            final_infos = self._scattered({**final_values, "is_success": step.final_successes}, finished)
            mask = final_infos["_score"]
            final_observations = np.full(self.num_envs, None, dtype=object)
            # Gymnasium's final_obs holds one array per game, so it is filled one finished game at a time.
            for index, observation in zip(finished.tolist(), step.final_observations.cpu().numpy(), strict=True):
                final_observations[index] = observation
            infos.update(final_obs=final_observations, _final_obs=mask, final_info=final_infos, _final_info=mask.copy())
        return *self._numpy(step.observations, step.rewards, step.terminated, step.truncated), infos

    def _infos(
        self,
        scores: torch.Tensor,
        lengths: torch.Tensor,
        finished: torch.Tensor | None = None,
        successes: torch.Tensor | None = None,
    ) -> dict[str, np.ndarray]:
        """``score`` and ``length`` of every game (``(N,)`` each) and, if any game ``finished``, its
        ``is_success`` (``successes``, in ``finished`` order), as :class:`~sb3_snake.SnakeEnv` gives them."""
        columns = torch.stack((scores, lengths)).cpu().numpy()
        infos = _vector_info({"score": columns[0], "length": columns[1]}, np.ones(self.num_envs, dtype=bool))
        if finished is not None and len(finished):
            infos.update(self._scattered({"is_success": successes}, finished))
        return infos

    def _scattered(self, values: dict[str, torch.Tensor], games: torch.Tensor) -> dict[str, np.ndarray]:
        """The vector info of values ``(M,)`` of ``games`` only: zero and masked out for the other games."""
        indices = games.cpu().numpy()
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[indices] = True
        columns = {}
        for key, value in values.items():
            value = value.cpu().numpy()
            columns[key] = np.zeros(self.num_envs, dtype=value.dtype)
            columns[key][indices] = value
        return _vector_info(columns, mask)

    def set_state(
        self, index: int, body: Sequence[Sequence[int]], direction: int, food: Sequence[int] | None
    ) -> np.ndarray:
        """Put a given snake into game ``index`` and return that game's observation; as
        :meth:`SnakeEnv.set_state <sb3_snake.SnakeEnv.set_state>`. A new start the game was waiting for is dropped."""
        if not is_integer(index) or not 0 <= index < self.num_envs:
            raise UsageError(f"index must be in [0, {self.num_envs}), got {index!r}; pass the index of one game")
        cells, direction, food = self.rules.validate_state(body, direction, food)
        self._waiting[int(index)] = False
        return self._games.set_state(int(index), cells, direction, food).cpu().numpy()

    def render(self) -> tuple[np.ndarray | str, ...] | None:
        """One frame per game, boards unturned (``ansi``: text, ``rgb_array``: images); ``human`` draws the
        first game on stdout and returns None."""
        if self.render_mode is None:
            return None
        count = 1 if self.render_mode == "human" else self.num_envs
        boards, bodies = self._games.observe_first(count).cpu().numpy(), self._games.bodies(count)
        if self.render_mode == "human":
            draw_text(render_ansi(boards[0], bodies[0]))
            return None
        draw = render_ansi if self.render_mode == "ansi" else render_rgb
        return tuple(draw(board, body) for board, body in zip(boards, bodies, strict=True))

    @staticmethod
    def _numpy(*tensors: torch.Tensor) -> tuple[np.ndarray, ...]:
        return tuple(tensor.cpu().numpy() for tensor in tensors)

    def _reset_mask(self, options: dict[str, Any] | None) -> np.ndarray:
        """The games to start anew: ``options["reset_mask"]``, checked, or all."""
        mask = (options or {}).get("reset_mask")
        if mask is None:
            return np.ones(self.num_envs, dtype=bool)
        if not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.shape == (self.num_envs,)):
            got = f"{type(mask).__name__} of shape {np.shape(mask)}, dtype {getattr(mask, 'dtype', None)}"
            raise UsageError(
                f"options['reset_mask'] must be a bool NumPy array of shape ({self.num_envs},), got a {got}; "
                "pass True for each game to start anew"
            )
        if not mask.any():
            raise UsageError("options['reset_mask'] is all False; pass True for at least one game, or no mask")
        return mask
