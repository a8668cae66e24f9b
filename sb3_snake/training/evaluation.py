"""Greedy evaluation: of a trained model, and during training (SB3 callbacks); one game played
for a person to watch.

Evaluation games are seeded from ``EVAL_SEED_OFFSET`` upwards, far from the small seeds that
training uses, so evaluation never replays a training game's random draws. The evaluations
that pick a run's best model during training use their own range (``SELECTION_SEED_OFFSET``),
so a model chosen on those games is then judged by ``sb3-snake eval`` on games it was not
chosen on; those that show how training goes have theirs (``PROGRESS_SEED_OFFSET``).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import atomic_write
from sb3_snake.envs import BatchedSnakeVecEnv, SnakeEnv
from sb3_snake.envs.render import check_fps, draw_text
from sb3_snake.envs.rules import board_options, can_survive
from sb3_snake.persistence import save_model

#: Evaluation seeds start here; training seeds are small integers.
EVAL_SEED_OFFSET = 1_000_000_007
#: Seeds of the evaluations that select the best model during training.
SELECTION_SEED_OFFSET = 2_000_000_011
#: Seeds of the evaluations that show how training goes (``--eval-every``); 3,000,000,019 on
#: is ``tune``'s.
PROGRESS_SEED_OFFSET = 4_000_000_007
#: The largest seed a user may give (seeds reach NumPy's 32-bit legacy seeding through SB3).
MAX_SEED = 2**32 - 1


#: How a game can end, as :func:`evaluate` counts them.
GAME_ENDS = ("won", "truncated", "walled_in", "died_with_a_way_out")


def game_end(info: dict[str, Any]) -> str:
    """Which of :data:`GAME_ENDS` a finished game's VecEnv ``info`` says."""
    if info["is_success"]:
        return "won"
    if info["TimeLimit.truncated"]:
        return "truncated"
    return "died_with_a_way_out" if can_survive(info["terminal_observation"]) else "walled_in"


def egocentric(model: Any) -> bool:
    """Whether ``model`` plays the egocentric view: three turns instead of four directions (a
    policy without an ``action_space`` plays the four directions)."""
    return int(getattr(getattr(model, "action_space", None), "n", 4)) == 3


def check_evaluation(episodes: int, seed: int) -> None:
    """Raise UsageError (naming the argument) unless ``episodes`` and ``seed`` can be played."""
    if episodes < 1:
        raise UsageError(f"episodes must be at least 1, got {episodes}")
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"seed must be from 0 to {MAX_SEED}, got {seed}")


def evaluate(
    model: Any, episodes: int = 100, seed: int = 0, max_envs: int = 64, seed_offset: int = EVAL_SEED_OFFSET
) -> dict[str, Any]:
    """Play ``episodes`` greedy games, seeded from ``seed_offset + seed``, and summarise their scores.

    Games run in parallel; each game slot plays a fixed quota of episodes, so short games are
    not over-represented (stopping at the first ``episodes`` finished games would bias the
    sample towards quick deaths).

    ``ends`` counts how the games ended: ``won`` (the board filled), ``truncated`` (too long
    without food), ``walled_in`` (died with no move left that survives a step) and
    ``died_with_a_way_out`` (died although such a move existed; :func:`~sb3_snake.envs.rules.can_survive`
    on the board before the fatal move).

    ``per_game`` holds what SB3's ``EvalCallback`` keeps of each game, in the order the games
    finished: its return (``returns``), env steps (``steps``) and whether it was won (``won``).
    """
    check_evaluation(episodes, seed)
    board_size, channels = model.observation_space.shape[-1], board_options(model.observation_space)
    n_envs = min(episodes, max_envs)
    quota = np.full(n_envs, episodes // n_envs)
    quota[: episodes % n_envs] += 1
    env = BatchedSnakeVecEnv(
        n_envs, board_size=board_size, seed=seed_offset + seed, egocentric=egocentric(model), **channels
    )
    obs = env.reset()
    scores: list[int] = []
    lengths: list[int] = []
    per_game: dict[str, list] = {"returns": [], "steps": [], "won": []}
    ends = dict.fromkeys(GAME_ENDS, 0)
    played = np.zeros(n_envs, dtype=int)
    while (played < quota).any():
        actions, _ = model.predict(obs, deterministic=True)
        obs, _, dones, infos = env.step(actions)
        for index in np.flatnonzero(dones):
            if played[index] < quota[index]:
                played[index] += 1
                scores.append(int(infos[index]["score"]))
                lengths.append(int(infos[index]["length"]))
                end = game_end(infos[index])
                ends[end] += 1
                per_game["returns"].append(float(infos[index]["episode"]["r"]))
                per_game["steps"].append(int(infos[index]["episode"]["l"]))
                per_game["won"].append(end == "won")
    return {
        "episodes": len(scores),
        "mean_score": float(np.mean(scores)),
        "median_score": float(statistics.median(scores)),
        "max_score": int(max(scores)),
        "mean_length": float(np.mean(lengths)),
        "max_length": int(max(lengths)),
        "win_rate": ends["won"] / len(scores),
        "ends": ends,
        "per_game": per_game,
        "board_size": board_size,
        "seed": seed_offset + seed,
    }


def play(
    model: Any,
    seed: int = 0,
    fps: float = 10.0,
    gif: Path | None = None,
    out: TextIO = sys.stdout,
    max_steps: int = 10_000,
) -> dict[str, Any]:
    """Play one greedy game: animated as text on ``out``, or recorded to ``gif``.

    ``gif`` is written atomically (a failed write leaves no partial file; an OutputError names
    it); check its place before the game with :func:`~sb3_snake.common.paths.check_writable_file`.
    ``fps`` is checked by :func:`~sb3_snake.envs.render.check_fps`.
    """
    check_fps(fps)
    board_size, channels = model.observation_space.shape[-1], board_options(model.observation_space)
    mode = "rgb_array" if gif else "ansi"
    env = SnakeEnv(board_size=board_size, render_mode=mode, egocentric=egocentric(model), **channels)
    obs, info = env.reset(seed=EVAL_SEED_OFFSET + seed)
    frames = [env.render()]
    steps, done = 0, False
    while not done and steps < max_steps:
        action, _ = model.predict(obs[None], deterministic=True)
        obs, _, terminated, truncated, info = env.step(int(action[0]))
        done, steps = terminated or truncated, steps + 1
        frame = env.render()
        if gif:
            frames.append(frame)
        else:
            draw_text(frame, f"score {info['score']}  length {info['length']}  step {steps}", out, fps)
    if gif:
        from PIL import Image

        images = [Image.fromarray(frame) for frame in frames]
        duration = max(20, int(1000 / max(fps, 1)))
        with atomic_write(gif) as temporary:
            images[0].save(temporary, format="GIF", save_all=True, append_images=images[1:], duration=duration, loop=0)
    return {"score": info["score"], "length": info["length"], "steps": steps, "gif": str(gif) if gif else None}


class GreedyEvaluation(BaseCallback):
    """Greedy evaluations during training: every ``every_steps`` env steps, or else every
    ``every_seconds`` of training, plays ``episodes`` greedy games and records their mean.

    The games are seeded from ``seed_offset`` (a range of the caller's own, apart from training's
    seeds and from ``sb3-snake eval``'s) and each evaluation plays new games: its seed is its
    index. :meth:`on_evaluation` is the hook for what an evaluation leads to (keeping the best
    model, reporting to Optuna), as SB3's ``EvalCallback`` takes a callback on a new best. The
    time spent here counts in the run's wall time; the next evaluation on the clock falls due
    ``every_seconds`` after this one ends.
    """

    def __init__(
        self, episodes: int, seed_offset: int, every_steps: int | None = None, every_seconds: float | None = None
    ):
        super().__init__()
        assert (every_steps is None) != (every_seconds is None), "evaluate on steps or on seconds, not both"
        self.episodes, self.seed_offset = episodes, seed_offset
        self.every_steps, self.every_seconds = every_steps, every_seconds
        self.history: list[dict[str, float]] = []  #: one :meth:`evaluate_now` entry per evaluation
        self.last_result: dict[str, Any] | None = None  #: the whole :func:`evaluate` result of the latest entry
        self._next_step, self._next_time = every_steps or 0, 0.0

    def _on_training_start(self) -> None:
        self._next_time = time.perf_counter() + (self.every_seconds or 0.0)

    def _on_step(self) -> bool:
        if self.every_steps is not None:
            due = self.num_timesteps >= self._next_step
        else:
            due = time.perf_counter() >= self._next_time
        if due:
            self._next_step = self.num_timesteps + (self.every_steps or 0)
            self.evaluate_now()
            self._next_time = time.perf_counter() + (self.every_seconds or 0.0)
        return True

    def play(self) -> dict[str, Any]:
        """The model as it is now on the next evaluation's games (:func:`evaluate`); not recorded."""
        return evaluate(self.model, self.episodes, seed=len(self.history), seed_offset=self.seed_offset)

    def mean_score(self) -> float:
        """The greedy mean score of the model now, on the next evaluation's games; not recorded."""
        return self.play()["mean_score"]

    def evaluate_now(self) -> dict[str, float]:
        """Evaluate, record the result in :attr:`history`, and hand it to :meth:`on_evaluation`.

        An entry holds the env steps trained, the games played, their mean score, the longest
        snake, the games won (the board filled) and the seconds the evaluation took, which the
        run's wall time includes."""
        start = time.perf_counter()
        result = self.play()
        entry = {
            "env_steps": self.num_timesteps,
            "games": result["episodes"],
            "mean_score": result["mean_score"],
            "longest": result["max_length"],
            "wins": result["ends"]["won"],
            "seconds": time.perf_counter() - start,
        }
        self.history.append(entry)
        self.last_result = result
        self.on_evaluation(entry)
        return entry

    def on_evaluation(self, entry: dict[str, float]) -> None:
        """What an evaluation leads to; nothing here."""


class ProgressEvaluation(GreedyEvaluation):
    """Every ``every_seconds`` of training, ``episodes`` greedy games from standard starts on
    seeds of their own (:data:`~sb3_snake.training.evaluation.PROGRESS_SEED_OFFSET`): what the
    model plays, which the progress line, ``summary.json`` and W&B (``greedy/*``) show, and once
    more at the end of training. The exploring games cannot tell it: their random moves and
    long starts end games early."""

    def __init__(
        self, episodes: int, every_seconds: float, log: Any = None, stopping: Callable[[], bool] = lambda: False
    ):
        super().__init__(episodes, PROGRESS_SEED_OFFSET, every_seconds=every_seconds)
        self.log, self.stopping = log, stopping

    def _on_training_end(self) -> None:
        """One more evaluation of the model the run ends with, unless the last one saw it
        already or a stop (Ctrl-C, SIGTERM) asks the run to end at once."""
        self.num_timesteps = self.model.num_timesteps  # BaseCallback updates it on steps only
        stale = not self.history or self.history[-1]["env_steps"] != self.num_timesteps
        if stale and not self.stopping():
            self.evaluate_now()

    def on_evaluation(self, entry: dict[str, float]) -> None:
        if self.log is not None:
            metrics = {f"greedy/{name}": entry[name] for name in ("mean_score", "longest", "wins")}
            self.log({**metrics, "env_steps": entry["env_steps"]})


def latest_evaluation(evaluations: list[GreedyEvaluation]) -> dict[str, float] | None:
    """The most recent entry of any of ``evaluations`` (the one of most env steps), or None."""
    entries = [evaluation.history[-1] for evaluation in evaluations if evaluation.history]
    return max(entries, key=lambda entry: entry["env_steps"], default=None)


def describe_evaluation(entry: dict[str, float]) -> str:
    """A greedy evaluation as the progress line and the run's last line show it."""
    return (
        f"greedy {entry['mean_score']:.2f} (longest {entry['longest']}, {entry['wins']}/{entry['games']} won, "
        f"at {entry['env_steps']:,} steps)"
    )


class BestModelSelection(GreedyEvaluation):
    """Every ``every`` env steps, plays ``episodes`` greedy games and keeps the best model so far.

    The model with the highest mean score is saved as ``best_model.zip`` in ``run_dir``,
    atomically, as SB3's ``EvalCallback`` keeps ``best_model``. The games are seeded from
    :data:`~sb3_snake.training.evaluation.SELECTION_SEED_OFFSET`.
    """

    def __init__(self, run_dir: Path, every: int, episodes: int, log: Any = None):
        super().__init__(episodes, SELECTION_SEED_OFFSET, every_steps=every)
        self.run_dir, self.log = run_dir, log

    @property
    def best(self) -> dict[str, float] | None:
        """The evaluation that produced ``best_model.zip``, if any."""
        return max(self.history, key=lambda entry: entry["mean_score"], default=None)

    def on_evaluation(self, entry: dict[str, float]) -> None:
        earlier = max((old["mean_score"] for old in self.history[:-1]), default=None)
        if earlier is None or entry["mean_score"] > earlier:
            save_model(self.model, self.run_dir / "best_model.zip")
        if self.log is not None:
            self.log({"selection/mean_score": entry["mean_score"], "env_steps": entry["env_steps"]})
