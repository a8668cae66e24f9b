"""Env steps/s of whole training loops: ``sb3-snake train --algo dqn``'s setup (SnakeDQN) against
plain SB3 DQN, the same algorithm as a user would otherwise run it (PQN, the default learner, is
timed against itself by ``benchmark-train``: :mod:`sb3_snake.benchmark.train_speed`).

Both learn at the same replay ratio (gradient samples per env step; SB3's DQN default is 32
samples every 4 steps = 8). Each loop first learns for a warm-up that is not timed (random
steps before ``learning_starts``, compilation, first updates), then ``repeats`` timed calls of
``learn`` continue the same run; the figure is the median call.

Plain SB3 is what a user would otherwise run: ``DQN("MlpPolicy", SnakeEnv())`` with SB3's
defaults, measured at one thread and at one thread per core, and credited with the faster.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from stable_baselines3 import DQN
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.logger import Logger

from sb3_snake.acceleration.optimizations import torch_threads
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.envs import SnakeEnv
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.run import build_model

#: SB3 DQN's default replay ratio: batch 32, one gradient step every 4 env steps.
SB3_REPLAY_RATIO = 8.0


@dataclass(frozen=True)
class LoopThroughput:
    name: str
    env_steps_per_second: float  #: median over timed calls
    min_env_steps_per_second: float
    max_env_steps_per_second: float
    env_steps_per_repeat: int
    repeats: int
    warmup_env_steps: int
    threads: int
    replay_ratio: float  #: gradient samples per env step
    setup: dict[str, Any]


def measure_learning(
    name: str,
    model: BaseAlgorithm,
    replay_ratio: float,
    warmup_steps: int,
    steps_per_repeat: int,
    repeats: int,
    setup: dict[str, Any],
) -> LoopThroughput:
    """Time ``model.learn`` after a warm-up; env steps are counted, not assumed."""
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.learn(warmup_steps)
    rates = []
    for _ in range(repeats):
        steps_before = model.num_timesteps
        start = time.perf_counter()
        model.learn(steps_per_repeat, reset_num_timesteps=False)
        rates.append((model.num_timesteps - steps_before) / (time.perf_counter() - start))
    return LoopThroughput(
        name,
        statistics.median(rates),
        min(rates),
        max(rates),
        steps_per_repeat,
        repeats,
        warmup_steps,
        torch.get_num_threads(),
        replay_ratio,
        setup,
    )


def measure_sb3_snake(
    settings: OptimizationSettings,
    replay_ratio: float = SB3_REPLAY_RATIO,
    warmup_steps: int = 4_000,
    steps_per_repeat: int = 4_000,
    repeats: int = 3,
    config: TrainConfig | None = None,
) -> LoopThroughput:
    """``sb3-snake train``'s default setup (or ``config``) at ``replay_ratio``, at the thread
    count ``sb3-snake train`` would use with ``settings`` (set for the measurement, then restored)."""
    # One ratio throughout: no early phase at another ratio (sb3-snake train's first 50,000 steps).
    config = replace(config or TrainConfig(algo="dqn"), replay_ratio=replay_ratio, early_steps=0)
    model = build_model(config, settings)
    with torch_threads(model.active_optimizations.num_threads):
        train_freq, gradient_steps = model.train_freq.frequency, model.gradient_steps
        setup = {
            "policy": "AttentionPolicy",
            "n_envs": config.n_envs,
            "batch_size": model.batch_size,
            "train_freq": train_freq,
            "gradient_steps": gradient_steps,
            "early_steps": model.early_steps,
            "optimizations": model.active_optimizations.as_dict(),
        }
        return measure_learning("sb3_snake", model, replay_ratio, warmup_steps, steps_per_repeat, repeats, setup)


def measure_plain_sb3(
    thread_counts: tuple[int, ...] | None = None,
    warmup_steps: int = 1_000,
    steps_per_repeat: int = 2_000,
    repeats: int = 3,
    board_size: int = 10,
) -> dict[str, Any]:
    """SB3's DQN with its defaults on one SnakeEnv, at each thread count; the best one wins."""
    thread_counts = thread_counts or tuple(sorted({1, os.cpu_count() or 1}))
    runs = []
    for count in thread_counts:
        with torch_threads(count):
            # On the CPU even where a GPU exists: a 64x64 MLP at batch 32 runs faster there, and
            # the baseline is credited with its best.
            model = DQN("MlpPolicy", SnakeEnv(board_size=board_size), seed=0, device="cpu")
            setup = {
                "policy": "MlpPolicy (SB3 defaults)",
                "n_envs": 1,
                "batch_size": model.batch_size,
                "train_freq": model.train_freq.frequency,
                "gradient_steps": model.gradient_steps,
            }
            replay_ratio = model.batch_size * model.gradient_steps / model.train_freq.frequency
            runs.append(
                measure_learning("plain_sb3", model, replay_ratio, warmup_steps, steps_per_repeat, repeats, setup)
            )
    best = max(runs, key=lambda run: run.env_steps_per_second)
    return {"best": asdict(best), "by_threads": [asdict(run) for run in runs]}


def run_end_to_end(
    settings: OptimizationSettings,
    warmup_steps: int = 4_000,
    steps_per_repeat: int = 4_000,
    repeats: int = 3,
    progress: Callable[[str], None] = lambda line: None,
    config: TrainConfig | None = None,
) -> dict[str, Any]:
    """Both loops at SB3's replay ratio and the speedup of ours; JSON-ready.

    ``warmup_steps`` is for ``sb3-snake train``'s loop (its ``learning_starts`` and its
    compilation); plain SB3 starts learning after 100 steps and warms up for 1,000. ``config``:
    ours, as ``sb3-snake train`` would build it (its batch size from ``.env``), else the defaults.
    """
    progress("end-to-end: plain SB3 DQN (MlpPolicy, one SnakeEnv)...")
    plain = measure_plain_sb3(warmup_steps=1_000, steps_per_repeat=max(500, steps_per_repeat // 2), repeats=repeats)
    progress(f"  plain SB3: {plain['best']['env_steps_per_second']:,.0f} env steps/s")
    progress("end-to-end: sb3-snake train's default setup...")
    ours = asdict(measure_sb3_snake(settings, SB3_REPLAY_RATIO, warmup_steps, steps_per_repeat, repeats, config))
    progress(f"  sb3-snake: {ours['env_steps_per_second']:,.0f} env steps/s")
    return {
        "replay_ratio": SB3_REPLAY_RATIO,
        "sb3_snake": ours,
        "plain_sb3": plain,
        "speedup": ours["env_steps_per_second"] / plain["best"]["env_steps_per_second"],
    }
