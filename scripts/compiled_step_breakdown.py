"""Where a compiled call of ``sb3-snake train``'s gradient steps spends its time, by subtraction.

The model is ``benchmark-grad``'s (:func:`~sb3_snake.benchmark.matmul.train_step_model`: the
default policy, the egocentric view and its mirror images). Its first ``SnakeDQN.train`` call
compiles the whole update in the compile child and adopts it, as training does; then, in turn:

- the whole call, as ``benchmark-grad`` times it (``SnakeDQN.train(gradient_steps=steps)``);
- sampling and augmenting the call's batches (the compiled update's ``sample``);
- the compiled function on a fixed batch (its ``graph_call``): guards, the wrapper and the kernels;
- guards and a wrapper alone: a function of the same arguments that adds one to the learning
  rate, compiled ahead of time as the update is (``aot_compile``);
- the step's own matrix products replayed alone
  (:func:`~sb3_snake.benchmark.matmul.step_products`, ``steps`` steps' worth).

Each figure is the median of ``--rounds`` runs of about ``--seconds`` (one process; the parts are
timed in turn each round, so a drift of the machine's speed falls on all of them).

    python scripts/compiled_step_breakdown.py --output step_breakdown.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.benchmark.matmul import step_products, train_step_model
from sb3_snake.common.system import system_info
from sb3_snake.common.timing import time_runs
from sb3_snake.dqn.update.graph import graph_arguments, sample, split


def plus_one(graph, batches, learning_rate, parameters, target_parameters, exp_avgs, exp_avg_sqs, steps):
    """Takes what the compiled update takes and does one addition: what its guards and wrapper cost."""
    return learning_rate + 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="the JSON written")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=4, help="gradient steps per compiled call (1 to 4)")
    parser.add_argument("--board-size", type=int, default=10)
    parser.add_argument("--transitions", type=int, default=16384, help="random play in the replay buffer")
    parser.add_argument("--rounds", type=int, default=7, help="timed runs of each part")
    parser.add_argument("--seconds", type=float, default=0.5, help="about how long each timed run lasts")
    options = parser.parse_args(argv)
    batch, steps = options.batch_size, options.steps
    threads = torch.get_num_threads()
    settings = OptimizationSettings(
        use_bf16=False, use_flash_attention=False, use_torch_compile=True, num_threads=threads
    )
    model = train_step_model(settings, "cpu", options.board_size, options.transitions, batch)
    model.train(gradient_steps=steps, batch_size=batch)  # compiles, in the compile child
    compile_decision = model.active_optimizations.compile
    if not compile_decision.active:
        parser.exit(1, f"error: the update was not compiled: {compile_decision.reason}\n")
    update = model.step_choice.current
    if update.steps_per_call != steps:
        parser.exit(1, f"error: a compiled call holds {update.steps_per_call} gradient steps, not {steps}\n")
    data = sample(model, steps, batch)
    arguments = (update.graph, split(data, steps), update.learning_rate, *graph_arguments(model, update.graph))
    trivial = torch.compile(plus_one, fullgraph=True, dynamic=False).aot_compile((arguments, {}))
    products = step_products(batch, False, "cpu", options.board_size)

    parts = {
        "whole call (train)": lambda: model.train(gradient_steps=steps, batch_size=batch),
        "sampling": lambda: sample(model, steps, batch),
        "compiled function": lambda: update.graph_call(data, steps),
        "guards and a wrapper": lambda: trivial(*arguments),
        "matmuls alone": lambda: [product() for _ in range(steps) for product in products],
    }
    for part in parts.values():  # warm
        part()
    seconds = {name: [] for name in parts}
    for _ in range(options.rounds):
        for name, part in parts.items():
            durations, calls = time_runs(part, lambda: None, options.seconds, 1)
            seconds[name].append(durations[0] / calls)
    report = {
        "benchmark": "compiled_step_breakdown",
        "system": system_info(),
        "threads": threads,
        "batch_size": batch,
        "steps_per_call": steps,
        "compile": compile_decision.reason,
        "statistic": f"median of {options.rounds} runs of about {options.seconds} s, parts in turn; "
        "milliseconds per call",
        "milliseconds_per_call": {name: statistics.median(values) * 1e3 for name, values in seconds.items()},
        "runs_milliseconds": {name: [value * 1e3 for value in values] for name, values in seconds.items()},
    }
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["milliseconds_per_call"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
