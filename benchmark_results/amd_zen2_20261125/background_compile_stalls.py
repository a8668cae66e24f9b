"""Eager gradient steps while the whole update compiles cold in a background thread, at one GIL
switch interval: how long each step took until the compiled update took over.

    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python background_compile_stalls.py 0.005

The argument is the switch interval in seconds while the compile runs (the code's own is
``sb3_snake.dqn.update.compiled.SWITCH_INTERVAL``); background_compile_stalls.json holds the
runs at 0.005 (Python's default), 0.0005 and 0.0001, before that constant existed.
"""

import statistics
import sys
import time

import torch
from stable_baselines3.common.logger import Logger

import sb3_snake.dqn.update.compiled as compiled
from sb3_snake import BatchedSnakeVecEnv, SnakeDQN
from sb3_snake.acceleration.autotune import fill_replay_buffer
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.training.config import TrainConfig


def main(switch_interval: float) -> None:
    compiled.SWITCH_INTERVAL = switch_interval
    torch.set_num_threads(2)
    settings = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=True, num_threads=2)
    env = BatchedSnakeVecEnv(256, board_size=10, seed=0)
    model = SnakeDQN(
        "AttentionPolicy",
        env,
        optimizations=settings,
        policy_kwargs=TrainConfig().policy_kwargs(),
        buffer_size=4096,
        batch_size=128,
        learning_starts=0,
        seed=0,
        device="cpu",
        compile_in_background=True,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))
    fill_replay_buffer(model, env, 4096)
    durations = []
    start = time.perf_counter()
    while not isinstance(model.updates.current, compiled.CompiledUpdate):
        began = time.perf_counter()
        model.train(gradient_steps=1, batch_size=128)
        durations.append(time.perf_counter() - began)
    total = time.perf_counter() - start
    durations.sort()
    print(
        f"switch {switch_interval}: compile {total:.1f} s, {len(durations)} eager steps "
        f"({len(durations) / total:.1f}/s); median {statistics.median(durations) * 1e3:.1f} ms, "
        f"p99 {durations[int(0.99 * len(durations))] * 1e3:.0f} ms, max {durations[-1] * 1e3:.0f} ms; "
        f"steps over 1 s: {sum(d > 1 for d in durations)}, "
        f"seconds in steps over 0.5 s: {sum(d for d in durations if d > 0.5):.1f}"
    )


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else compiled.SWITCH_INTERVAL)
