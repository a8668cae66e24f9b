"""Samples/s of SnakeDQN's gradient step for each batch size and optimization combination.

The replay buffer is filled with real transitions from ``BatchedSnakeVecEnv`` under random
actions; then, per configuration, a fresh model is built (and compiled, when asked), warmed up
with a few gradient steps that are not timed, and timed over ``repeats`` runs of
``gradient_steps`` steps through SB3's own ``DQN.train``. The figure is the median run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.logger import Logger

from sb3_snake.algorithm import SnakeDQN
from sb3_snake.benchmark.system import system_info
from sb3_snake.envs import BatchedSnakeVecEnv
from sb3_snake.settings import OptimizationSettings

DEFAULT_BATCH_SIZES = (256, 512, 1024, 2048, 4096, 8192)

#: Combination name -> (use_bf16, use_flash_attention, use_torch_compile).
COMBINATIONS: dict[str, tuple[bool, bool, bool]] = {
    "fp32": (False, False, False),
    "bf16": (True, False, False),
    "flash": (False, True, False),
    "compile": (False, False, True),
    "bf16+flash": (True, True, False),
    "bf16+compile": (True, False, True),
    "flash+compile": (False, True, True),
    "all": (True, True, True),
}


@dataclass(frozen=True)
class GradientStepResult:
    combination: str
    batch_size: int
    samples_per_second: float  #: median over repeats
    updates_per_second: float
    min_samples_per_second: float
    max_samples_per_second: float
    active: dict[str, bool]  #: which optimizations were really active


def measure_gradient_step(
    combination: str,
    batch_size: int,
    device: str = "cpu",
    gradient_steps: int = 4,
    repeats: int = 3,
    warmup_steps: int = 2,
    board_size: int = 10,
    policy_kwargs: dict[str, Any] | None = None,
    buffer_size: int = 16384,
) -> GradientStepResult:
    """Time ``DQN.train`` for one combination and batch size."""
    use_bf16, use_flash, use_compile = COMBINATIONS[combination]
    settings = OptimizationSettings(
        batch_size=batch_size,
        use_bf16=use_bf16,
        use_flash_attention=use_flash,
        use_torch_compile=use_compile,
        num_threads=torch.get_num_threads(),
    )
    env = BatchedSnakeVecEnv(256, board_size=board_size, device=device, seed=0)
    model = SnakeDQN(
        "AttentionPolicy",
        env,
        optimizations=settings,
        buffer_size=max(buffer_size, batch_size),
        learning_starts=0,
        device=device,
        policy_kwargs=policy_kwargs,
        seed=0,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))
    fill_replay_buffer(model, env, max(buffer_size, batch_size))
    model.train(gradient_steps=warmup_steps, batch_size=batch_size)
    durations = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        model.train(gradient_steps=gradient_steps, batch_size=batch_size)
        if device == "cuda":
            torch.cuda.synchronize()
        durations.append(time.perf_counter() - start)
    rates = [batch_size * gradient_steps / d for d in durations]
    active = model.active_optimizations
    return GradientStepResult(
        combination,
        batch_size,
        statistics.median(rates),
        statistics.median(rates) / batch_size,
        min(rates),
        max(rates),
        {"bf16": active.bf16.active, "flash_attention": active.flash.active, "torch_compile": active.compile.active},
    )


def fill_replay_buffer(model: SnakeDQN, env: BatchedSnakeVecEnv, transitions: int, seed: int = 0) -> None:
    """Add at least ``transitions`` real transitions of uniformly random play to the model's buffer."""
    obs, rng = env.reset(), np.random.default_rng(seed)
    while model.replay_buffer.size() * env.num_envs < transitions and not model.replay_buffer.full:
        actions = rng.integers(4, size=env.num_envs)
        next_obs, rewards, dones, infos = env.step(actions)
        model.replay_buffer.add(obs, next_obs, actions, rewards, dones, infos)
        obs = next_obs


def run_gradient_step_benchmark(
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    combinations: Sequence[str] = tuple(COMBINATIONS),
    device: str = "cpu",
    gradient_steps: int = 4,
    repeats: int = 3,
    progress: Callable[[GradientStepResult], None] | None = None,
) -> dict[str, Any]:
    """Measure every combination at every batch size; JSON-ready, with the fastest marked."""
    results = []
    for combination in combinations:
        for batch_size in batch_sizes:
            results.append(measure_gradient_step(combination, batch_size, device, gradient_steps, repeats))
            if progress:
                progress(results[-1])
    best = max(results, key=lambda r: r.samples_per_second)
    fp32 = {r.batch_size: r.samples_per_second for r in results if r.combination == "fp32"}
    return {
        "benchmark": "gradient_step",
        "system": system_info(),
        "settings": {
            "device": device,
            "gradient_steps_per_repeat": gradient_steps,
            "repeats": repeats,
            "policy": "AttentionPolicy (default sizes)",
            "statistic": "median over repeats",
        },
        "results": [
            {
                **asdict(r),
                "speedup_vs_fp32": r.samples_per_second / fp32[r.batch_size] if r.batch_size in fp32 else None,
            }
            for r in results
        ],
        "best": asdict(best),
    }


def format_table(report: dict[str, Any]) -> str:
    lines = [f"{'combination':<13} {'batch':>6} {'samples/s':>11} {'updates/s':>10} {'vs fp32':>8}  active"]
    for r in report["results"]:
        speedup = f"{r['speedup_vs_fp32']:.2f}x" if r["speedup_vs_fp32"] else "-"
        active = ",".join(k for k, v in r["active"].items() if v) or "none"
        lines.append(
            f"{r['combination']:<13} {r['batch_size']:>6} {r['samples_per_second']:>11,.0f} "
            f"{r['updates_per_second']:>10.2f} {speedup:>8}  {active}"
        )
    return "\n".join(lines)
