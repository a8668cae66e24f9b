"""Greedy evaluation of a trained model, and one game played for a person to watch.

Evaluation games are seeded from ``EVAL_SEED_OFFSET`` upwards, far from the small seeds that
training uses, so evaluation never replays a training game's random draws. The evaluations
that pick a run's best model during training use their own range (``SELECTION_SEED_OFFSET``),
so a model chosen on those games is then judged by ``sb3-snake eval`` on games it was not
chosen on; those that show how training goes have theirs (``PROGRESS_SEED_OFFSET``).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import atomic_write
from sb3_snake.envs import BatchedSnakeVecEnv, SnakeEnv
from sb3_snake.envs.render import draw_text
from sb3_snake.envs.rules import can_survive, has_countdown

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
    """Raise UsageError (naming the option) unless ``episodes`` and ``seed`` can be played."""
    if episodes < 1:
        raise UsageError(f"--episodes must be at least 1, got {episodes}")
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed must be from 0 to {MAX_SEED}, got {seed}")


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
    """
    check_evaluation(episodes, seed)
    board_size, countdown = model.observation_space.shape[-1], has_countdown(model.observation_space.shape)
    n_envs = min(episodes, max_envs)
    quota = np.full(n_envs, episodes // n_envs)
    quota[: episodes % n_envs] += 1
    env = BatchedSnakeVecEnv(
        n_envs, board_size=board_size, seed=seed_offset + seed, countdown=countdown, egocentric=egocentric(model)
    )
    obs = env.reset()
    scores: list[int] = []
    lengths: list[int] = []
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
                ends[game_end(infos[index])] += 1
    return {
        "episodes": len(scores),
        "mean_score": float(np.mean(scores)),
        "median_score": float(statistics.median(scores)),
        "max_score": int(max(scores)),
        "mean_length": float(np.mean(lengths)),
        "max_length": int(max(lengths)),
        "win_rate": ends["won"] / len(scores),
        "ends": ends,
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
    """
    board_size, countdown = model.observation_space.shape[-1], has_countdown(model.observation_space.shape)
    mode = "rgb_array" if gif else "ansi"
    env = SnakeEnv(board_size=board_size, render_mode=mode, countdown=countdown, egocentric=egocentric(model))
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
