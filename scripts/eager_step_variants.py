"""Two ways to make the eager gradient step faster on a slow CPU, tried and not kept (2026-11-27).

Whole eager gradient steps of ``sb3-snake train``'s defaults (the model of ``benchmark-grad``,
fp32, PyTorch's attention kernel), in one process, in blocks of 25 steps that alternate between
the variants, so that the machine's drift over the minutes falls on all of them alike:

- ``sdpa_pool``: the committed attention pool (``scaled_dot_product_attention``), two threads;
- ``matmul_pool``: the same function of the same parameters without SDPA: the scores of every
  token of the batch in one matrix product with the folded queries, a softmax over the tokens,
  the weighted sum as a broadcast product (SDPA on the CPU solves one tiny problem per sample,
  one after another);
- ``one_thread``: the committed pool at one torch thread.

glibc's allocator thresholds (``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``, which keep
freed blocks instead of returning them, whose pages fault in again) are process-wide: the same
script runs once with them and once without, in turn (``--label``).

    python scripts/eager_step_variants.py --output FILE --label LABEL

The figures and their machine: benchmark_results/amd_zen3_20261127/eager_step_variants/ and the
benchmarks page ("The first minute").
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from pathlib import Path

import torch

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.benchmark.matmul import train_step_model
from sb3_snake.common.system import system_info
from sb3_snake.dqn import extractor
from sb3_snake.dqn.update.steps import EagerSteps

SDPA_POOL = extractor.AttentionPool.forward


def matmul_pool(self, x: torch.Tensor) -> torch.Tensor:
    batch, tokens, dim = x.shape
    head_dim = dim // self.num_heads
    key_weight, value_weight = self.kv.weight.view(2, self.num_heads, head_dim, dim).unbind(0)
    value_bias = self.kv.bias.view(2, self.num_heads, head_dim)[1]
    normed = self.norm(x)
    queries = (self.query.view(self.num_heads, 1, head_dim) @ key_weight).view(self.num_heads, dim)
    scores = normed.reshape(batch * tokens, dim) @ (queries.t() * head_dim**-0.5)
    weights = scores.view(batch, tokens, self.num_heads).softmax(dim=1)
    pooled = (weights.unsqueeze(-1) * normed.unsqueeze(2)).sum(1)
    values = torch.einsum("bhe,hde->bhd", pooled, value_weight)
    return (values + value_bias).reshape(batch, dim)


VARIANTS = {"sdpa_pool": (SDPA_POOL, 2), "matmul_pool": (matmul_pool, 2), "one_thread": (SDPA_POOL, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--label", default="")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--block", type=int, default=25)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--board-size", type=int, default=10)
    parser.add_argument("--transitions", type=int, default=20000, help="random play in the replay buffer")
    options = parser.parse_args()
    torch.set_num_threads(2)
    settings = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False)
    batch = options.batch_size
    model = train_step_model(settings, "cpu", options.board_size, options.transitions, batch)
    steps = EagerSteps(model)
    features = model.q_net.features_extractor
    tokens = torch.randn(batch, features.grid[0] * features.grid[1], features.pool.norm.normalized_shape[0])
    with torch.no_grad():
        difference = (matmul_pool(features.pool, tokens) - SDPA_POOL(features.pool, tokens)).abs().max().item()
    milliseconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(min(30, options.rounds * options.block)):
        steps.gradient_step(steps.sample(1, batch))
    for _ in range(options.rounds):
        for name, (forward, threads) in VARIANTS.items():
            extractor.AttentionPool.forward = forward
            torch.set_num_threads(threads)
            for _ in range(3):
                steps.gradient_step(steps.sample(1, batch))
            start = time.perf_counter()
            for _ in range(options.block):
                steps.gradient_step(steps.sample(1, batch))
            milliseconds[name].append((time.perf_counter() - start) / options.block * 1e3)
    torch.set_num_threads(2)
    medians = {name: statistics.median(values) for name, values in milliseconds.items()}
    report = {
        "benchmark": "eager_step_variants",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "label": options.label,
        "system": system_info(),
        "batch_size": batch,
        "statistic": f"median over {options.rounds} blocks of {options.block} gradient steps, alternating; ms per step",
        "pool_max_abs_difference": difference,
        "median_milliseconds": medians,
        "ratio_to_sdpa_pool": {name: medians[name] / medians["sdpa_pool"] for name in medians},
        "block_milliseconds": milliseconds,
    }
    options.output.write_text(json.dumps(report, indent=2) + "\n")
    print(options.label, json.dumps(report["median_milliseconds"]), json.dumps(report["ratio_to_sdpa_pool"]))


if __name__ == "__main__":
    main()
