"""Eager gradient step at batch 128 of the default policy: the same script under either version."""

import json
import statistics
import sys
import time

import torch

from sb3_snake import BatchedSnakeVecEnv, OptimizationSettings, SnakeDQN

torch.set_num_threads(2)
env = BatchedSnakeVecEnv(64, board_size=10, seed=0)
settings = OptimizationSettings(use_torch_compile=False, use_bf16=False, use_flash_attention=False, num_threads=2)
kw = {"features_extractor_kwargs": {"embed_dim": 32, "num_layers": 0, "head_view_dim": 64}}
out = {"version": sys.argv[1]}
for shaping in (0.0, 1.0):
    model = SnakeDQN(
        "AttentionPolicy",
        env,
        optimizations=settings,
        batch_size=128,
        learning_starts=0,
        buffer_size=20_000,
        policy_kwargs=kw,
        device="cpu",
        seed=0,
        food_shaping=shaping,
    )
    model.learn(4096)  # fills the buffer (and trains a little)
    model.train(gradient_steps=20, batch_size=128)
    rates = []
    for _ in range(7):
        start = time.perf_counter()
        model.train(gradient_steps=50, batch_size=128)
        rates.append(50 * 128 / (time.perf_counter() - start))
    out[f"shaping_{shaping}"] = {"median": statistics.median(rates), "rates": rates}
print(json.dumps(out))
