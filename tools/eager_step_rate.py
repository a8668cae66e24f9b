"""Samples/s of the eager gradient step, without and with shaping towards the food, as one JSON line.

It uses only names every version of the package exports (``sb3_snake``'s own), so the same file
run under two versions, in fresh processes taking turns, is an A/B of their eager step that
shares the machine's drift. Each shaping value gets a model of its own: random play fills its
buffer, a few untimed steps warm it up, then ``--rounds`` timed calls of ``--steps`` steps each;
the line holds each call's rate and their median. The before/after of the package layout
(benchmark_results/amd_zen2_20261124_layout/), three rounds of:

    python tools/eager_step_rate.py --label before --output eager_step_ab.jsonl  # at 4d60a20
    python tools/eager_step_rate.py --label after --output eager_step_ab.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from sb3_snake import BatchedSnakeVecEnv, OptimizationSettings, SnakeDQN

#: The policy the layout A/B timed: 32-wide patches, no transformer blocks, a head view of 64.
POLICY_KWARGS = {"features_extractor_kwargs": {"embed_dim": 32, "num_layers": 0, "head_view_dim": 64}}


def rates(options: argparse.Namespace, shaping: float) -> list[float]:
    """Samples/s of ``options.rounds`` timed calls of the eager step at ``shaping``."""
    env = BatchedSnakeVecEnv(options.n_envs, board_size=options.board_size, seed=0)
    settings = OptimizationSettings(
        use_torch_compile=False, use_bf16=False, use_flash_attention=False, num_threads=options.threads
    )
    model = SnakeDQN(
        "AttentionPolicy",
        env,
        optimizations=settings,
        batch_size=options.batch_size,
        learning_starts=0,
        buffer_size=options.buffer_size,
        policy_kwargs=POLICY_KWARGS,
        device="cpu",
        seed=0,
        food_shaping=shaping,
    )
    model.learn(options.fill_steps)  # fills the buffer (and trains a little)
    model.train(gradient_steps=options.warmup_steps, batch_size=options.batch_size)
    measured = []
    for _ in range(options.rounds):
        start = time.perf_counter()
        model.train(gradient_steps=options.steps, batch_size=options.batch_size)
        measured.append(options.steps * options.batch_size / (time.perf_counter() - start))
    return measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="the version this run timed (the line's 'version')")
    parser.add_argument("--output", type=Path, required=True, help="a JSON Lines file the line is appended to")
    parser.add_argument("--shaping", type=float, nargs="+", default=[0.0, 1.0], help="food_shaping values")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-envs", type=int, default=64)
    parser.add_argument("--board-size", type=int, default=10)
    parser.add_argument("--buffer-size", type=int, default=20_000)
    parser.add_argument("--fill-steps", type=int, default=4096, help="env steps of play before timing")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--steps", type=int, default=50, help="gradient steps per timed call")
    parser.add_argument("--rounds", type=int, default=7, help="timed calls per shaping value")
    options = parser.parse_args(argv)
    torch.set_num_threads(options.threads)
    line: dict = {"version": options.label}
    for shaping in options.shaping:
        measured = rates(options, shaping)
        line[f"shaping_{shaping}"] = {"median": statistics.median(measured), "rates": measured}
    options.output.parent.mkdir(parents=True, exist_ok=True)
    with options.output.open("a") as output:
        output.write(json.dumps(line) + "\n")
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
