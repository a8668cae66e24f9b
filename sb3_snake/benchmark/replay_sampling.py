"""Replay sampling time: SB3's NumPy buffers against :class:`~sb3_snake.dqn.replay.DeviceReplayBuffer`.

Both buffers are filled with the same random Snake-shaped transitions, warmed up, then each
figure is the median over ``repeats`` timed runs of ``batches`` samples; the two buffers
alternate run by run, so a change in the machine's speed hits both alike. On CUDA the device
buffer's time includes a synchronisation per run, and SB3's includes its copy of each batch
to the device, which is the cost the device buffer removes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.buffers import NStepReplayBuffer, ReplayBuffer

from sb3_snake.common.system import system_info
from sb3_snake.common.timing import device_sync
from sb3_snake.dqn.replay import DeviceReplayBuffer
from sb3_snake.envs.rules import BASE_CHANNELS, board_space


@dataclass(frozen=True)
class ReplaySamplingResult:
    buffer: str  #: sb3 or device
    n_steps: int
    device: str
    batch_size: int
    milliseconds_per_batch: float  #: median over repeats
    min_milliseconds: float
    max_milliseconds: float


def _fill(buffers: list[ReplayBuffer], transitions: int, n_envs: int, board_size: int) -> None:
    rng = np.random.default_rng(0)
    shape = (n_envs, BASE_CHANNELS, board_size, board_size)
    for _ in range(transitions // n_envs):
        obs = rng.integers(0, 2, shape, dtype=np.uint8)
        actions, rewards = rng.integers(0, 4, n_envs), rng.random(n_envs).astype(np.float32)
        dones = rng.random(n_envs) < 0.05
        infos = [{"TimeLimit.truncated": bool(t)} for t in rng.random(n_envs) < 0.01]
        for buffer in buffers:
            buffer.add(obs, obs, actions, rewards, dones, infos)


def _milliseconds_per_batch(buffer: ReplayBuffer, batch_size: int, batches: int, sync: Callable[[], None]) -> float:
    start = time.perf_counter()
    for _ in range(batches):
        buffer.sample(batch_size)
    sync()
    return (time.perf_counter() - start) / batches * 1e3


def run_replay_benchmark(
    device: str = "cpu",
    n_steps_values: tuple[int, ...] = (1, 3),
    batch_size: int = 512,
    transitions: int = 100_000,
    n_envs: int = 16,
    board_size: int = 10,
    batches: int = 50,
    repeats: int = 7,
    progress: Callable[[ReplaySamplingResult], None] = lambda result: None,
) -> dict[str, Any]:
    """Median milliseconds per sampled batch of each buffer, for each n-step setting; JSON-ready."""
    observation_space = board_space(board_size)
    action_space = spaces.Discrete(4)
    sync = device_sync(device)
    results = []
    for n_steps in n_steps_values:
        kinds = {
            "sb3": (NStepReplayBuffer, {"n_steps": n_steps}) if n_steps > 1 else (ReplayBuffer, {}),
            "device": (DeviceReplayBuffer, {"n_steps": n_steps}),
        }
        buffers = {
            name: cls(transitions, observation_space, action_space, device, n_envs=n_envs, **kwargs)
            for name, (cls, kwargs) in kinds.items()
        }
        _fill(list(buffers.values()), transitions, n_envs, board_size)
        times: dict[str, list[float]] = {name: [] for name in buffers}
        for buffer in buffers.values():
            _milliseconds_per_batch(buffer, batch_size, 5, sync)  # warm-up, not timed
        for _ in range(repeats):
            for name, buffer in buffers.items():
                times[name].append(_milliseconds_per_batch(buffer, batch_size, batches, sync))
        for name, values in times.items():
            result = ReplaySamplingResult(
                name, n_steps, device, batch_size, statistics.median(values), min(values), max(values)
            )
            results.append(result)
            progress(result)
    return {
        "system": system_info(),
        "plan": {"transitions": transitions, "n_envs": n_envs, "board_size": board_size, "batches": batches},
        "results": [asdict(result) for result in results],
    }
