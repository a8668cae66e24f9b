"""Where a compiled call of four gradient steps spends its time at batch 128, by subtraction:

- the whole call, as ``benchmark-grad`` times it (``SnakeDQN.train(gradient_steps=4)``);
- sampling and augmenting the call's batches (``CompiledUpdate.sample``);
- the compiled function on a fixed batch (``CompiledUpdate.compiled_update``): guards,
  inductor's wrapper and the kernels;
- guards and a wrapper alone: a compiled function of the same arguments that adds one to the
  learning rate;
- the step's own matrix products replayed alone (``matmul_ceiling``'s products, four steps' worth).

Each figure is the median of 7 runs of about 0.5 s (one process; the parts are timed in turn
each round, so a drift of the machine's speed falls on all of them).

    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python step_breakdown.py > step_breakdown.json
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python step_breakdown.py train-step > step_breakdown.json

The first times the step on the whole board (four actions, no mirror images), as on the Zen 5 on
2026-11-25; with ``train-step``, ``sb3-snake train``'s step (the egocentric view and its mirror
images, as ``benchmark-grad`` times it since 954cf29), as on the Intel Xeon on 2026-11-26. The
matrix products replayed alone are ``step_products``', which since 954cf29 are those of
``sb3-snake train``'s step in both cases.
"""

import json
import statistics
import sys

import torch

from sb3_snake.acceleration.autotune import filled_model
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.benchmark.matmul import step_products, train_step_model
from sb3_snake.common.system import system_info
from sb3_snake.common.timing import time_runs
from sb3_snake.dqn.update.compiled import _split
from sb3_snake.training.config import TrainConfig

BATCH, STEPS, ROUNDS = 128, 4, 7


def main() -> None:
    threads = torch.get_num_threads()
    settings = OptimizationSettings(
        use_bf16=False, use_flash_attention=False, use_torch_compile=True, num_threads=threads
    )
    if sys.argv[1:] == ["train-step"]:
        model = train_step_model(settings, "cpu", 10, 16384, BATCH)
    else:
        model = filled_model(settings, "cpu", 10, 16384, TrainConfig().policy_kwargs(), batch_size=BATCH)
    model.train(gradient_steps=STEPS, batch_size=BATCH)  # compiles
    update = model.updates.current
    assert update.steps_per_call == STEPS
    data = update.sample(STEPS, BATCH)
    tensors = (update.parameters, update.target_parameters, *update.state)
    trivial = torch.compile(lambda batches, learning_rate, *rest: learning_rate + 1, fullgraph=True, dynamic=False)
    split = _split(data, STEPS)
    products = step_products(BATCH, False, "cpu", 10)

    parts = {
        "whole call (train)": lambda: model.train(gradient_steps=STEPS, batch_size=BATCH),
        "sampling": lambda: update.sample(STEPS, BATCH),
        "compiled function": lambda: update.compiled_update(data, STEPS),
        "guards and a wrapper": lambda: trivial(split, update.learning_rate, *tensors),
        "matmuls alone": lambda: [product() for _ in range(STEPS) for product in products],
    }
    for part in parts.values():  # warm
        part()
    seconds = {name: [] for name in parts}
    for _ in range(ROUNDS):
        for name, part in parts.items():
            durations, calls = time_runs(part, lambda: None, 0.5, 1)
            seconds[name].append(durations[0] / calls)
    medians = {name: statistics.median(values) * 1e3 for name, values in seconds.items()}
    print(
        json.dumps(
            {
                "benchmark": "compiled_step_breakdown",
                "system": system_info(),
                "threads": threads,
                "batch_size": BATCH,
                "steps_per_call": STEPS,
                "statistic": f"median of {ROUNDS} runs of about 0.5 s, parts in turn; milliseconds per call",
                "milliseconds_per_call": medians,
                "runs_milliseconds": {name: [v * 1e3 for v in values] for name, values in seconds.items()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
