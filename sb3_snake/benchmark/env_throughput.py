"""Env steps per second of ``BatchedSnakeVecEnv`` against a Python loop over one ``SnakeEnv``.

Every measurement steps random actions with observations built and finished games
restarted, exactly as training would. Each configuration is warmed up first, then timed over
``repeats`` runs of about ``seconds_per_repeat`` each; the figure is the median run, with the
slowest and fastest kept beside it. On CUDA the device is synchronised before a clock stops.

Two interfaces of the batched env are measured separately:

- ``tensor``: ``step_tensors``, everything stays on the device (what a fused training loop uses);
- ``vecenv``: SB3's ``step``, which also converts to NumPy and builds one info dict per game.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from sb3_snake.common.errors import UsageError
from sb3_snake.common.system import system_info
from sb3_snake.common.timing import device_sync, time_runs
from sb3_snake.envs import BatchedSnakeVecEnv, SnakeEnv

DEFAULT_NUM_ENVS = (1, 64, 1024, 4096, 16384)
#: The batched env's interfaces: ``step_tensors`` and SB3's ``step``.
APIS = ("tensor", "vecenv")


@dataclass(frozen=True)
class EnvThroughputResult:
    """One measured configuration."""

    env: str  #: "batched" or "python_loop"
    api: str  #: "tensor", "vecenv" or "gymnasium"
    device: str
    num_envs: int
    steps_per_second: float  #: median over repeats, in env steps (games x batched steps)
    min_steps_per_second: float
    max_steps_per_second: float
    repeats: int
    steps_per_repeat: int  #: batched steps (calls) per timed run


def _result(env: str, api: str, device: str, num_envs: int, durations: list[float], calls: int) -> EnvThroughputResult:
    rates = [num_envs * calls / d for d in durations]
    return EnvThroughputResult(
        env, api, device, num_envs, statistics.median(rates), min(rates), max(rates), len(rates), calls
    )


def measure_batched(
    num_envs: int, device: str, api: str, seconds: float, repeats: int, seed: int = 0
) -> EnvThroughputResult:
    """Throughput of ``BatchedSnakeVecEnv`` through one of its two interfaces, ``api``."""
    if api not in APIS:
        raise UsageError(f"api must be 'tensor' (step_tensors) or 'vecenv' (SB3's step), got {api!r}")
    env = BatchedSnakeVecEnv(num_envs, device=device, seed=seed)
    generator = torch.Generator(device=env.device).manual_seed(seed)

    def actions() -> torch.Tensor:
        return torch.randint(4, (num_envs,), generator=generator, device=env.device)

    if api == "tensor":
        env.reset_tensors()

        def step() -> None:
            env.step_tensors(actions())
    else:
        env.reset()

        def step() -> None:
            env.step(actions().cpu().numpy())

    durations, calls = time_runs(step, device_sync(env.device), seconds, repeats)
    return _result("batched", api, str(env.device), num_envs, durations, calls)


def measure_python_loop(seconds: float, repeats: int, seed: int = 0) -> EnvThroughputResult:
    """Throughput of a plain Python loop over one ``SnakeEnv``, resetting finished games."""
    env = SnakeEnv()
    env.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(4, size=1 << 16).tolist()
    position = 0

    def step() -> None:
        nonlocal position
        position = (position + 1) & 0xFFFF
        _, _, terminated, truncated, _ = env.step(actions[position])
        if terminated or truncated:
            env.reset()

    durations, calls = time_runs(step, lambda: None, seconds, repeats)
    return _result("python_loop", "gymnasium", "cpu", 1, durations, calls)


def run_env_benchmark(
    num_envs: Sequence[int] = DEFAULT_NUM_ENVS,
    devices: Sequence[str] | None = None,
    apis: Sequence[str] = APIS,
    seconds_per_repeat: float = 0.5,
    repeats: int = 5,
    progress: Callable[[EnvThroughputResult], None] | None = None,
) -> dict[str, Any]:
    """Measure every configuration and return a JSON-ready report.

    :param devices: defaults to ``cpu``, plus ``cuda`` when a GPU is there.
    :param progress: called with each result as soon as it is measured.
    """
    devices = list(devices or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]))
    results = [measure_python_loop(seconds_per_repeat, repeats)]
    if progress:
        progress(results[0])
    for device in devices:
        for n in num_envs:
            for api in apis:
                results.append(measure_batched(n, device, api, seconds_per_repeat, repeats))
                if progress:
                    progress(results[-1])
    baseline = results[0].steps_per_second
    return {
        "benchmark": "env_throughput",
        "system": system_info(),
        "settings": {
            "seconds_per_repeat": seconds_per_repeat,
            "repeats": repeats,
            "board_size": 10,
            "actions": "uniform random",
            "statistic": "median over repeats",
        },
        "python_loop_steps_per_second": baseline,
        "results": [{**asdict(r), "speedup_vs_python_loop": r.steps_per_second / baseline} for r in results],
    }


def format_table(report: dict[str, Any]) -> str:
    """The report as a plain-text table."""
    lines = [
        f"{'env':<12} {'api':<10} {'device':<7} {'games':>6} {'steps/s (median)':>17} "
        f"{'min':>12} {'max':>12} {'vs loop':>8}"
    ]
    for r in report["results"]:
        lines.append(
            f"{r['env']:<12} {r['api']:<10} {r['device']:<7} {r['num_envs']:>6} {r['steps_per_second']:>17,.0f} "
            f"{r['min_steps_per_second']:>12,.0f} {r['max_steps_per_second']:>12,.0f} "
            f"{r['speedup_vs_python_loop']:>7.1f}x"
        )
    return "\n".join(lines)
