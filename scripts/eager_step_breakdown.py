"""Where an eager gradient step of ``sb3-snake train``'s defaults spends its time, part by part.

The model is ``benchmark-grad``'s (:func:`~sb3_snake.benchmark.matmul.train_step_model`: the
default policy, the egocentric view and its mirror images), eager, in fp32 with PyTorch's
attention kernel. Each step is the eager update's own code
(:class:`~sb3_snake.dqn.update.steps.EagerSteps`) cut at its joints, each part timed with
``time.perf_counter``: sampling and augmenting the batch, the TD targets (the target network's
forward pass and the shaping term), the online network's forward pass, the loss, ``zero_grad``,
the backward pass, clipping and Adam's step. Every step is a real update, so the parts are timed
as training runs them, one after another; the figures are medians over ``--steps`` steps after
``--warmup`` untimed ones, at the process's thread count (``--threads``).

    python scripts/eager_step_breakdown.py --threads 2 --output eager_step_breakdown.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.benchmark.matmul import train_step_model
from sb3_snake.common.system import system_info
from sb3_snake.dqn.targets import td_targets
from sb3_snake.dqn.update.steps import EagerSteps

PARTS = ("sampling", "TD targets", "online forward", "loss", "zero_grad", "backward", "clipping", "Adam")


def timed_step(model, steps: EagerSteps, batch_size: int) -> list[float]:
    """One eager gradient step, as :meth:`EagerSteps.gradient_step` runs it; each part's seconds."""
    optimizer, marks = model.policy.optimizer, [time.perf_counter()]
    batch = steps.sample(1, batch_size)
    marks.append(time.perf_counter())
    targets = td_targets(batch, model.q_net_target, None, model.gamma, model.food_shaping)
    marks.append(time.perf_counter())
    current = model.q_net(batch.observations).gather(1, batch.actions.long())
    marks.append(time.perf_counter())
    loss = F.smooth_l1_loss(current, targets)
    marks.append(time.perf_counter())
    optimizer.zero_grad(set_to_none=True)
    marks.append(time.perf_counter())
    loss.backward()
    marks.append(time.perf_counter())
    torch.nn.utils.clip_grad_norm_(model.policy.parameters(), model.max_grad_norm)
    marks.append(time.perf_counter())
    optimizer.step()
    marks.append(time.perf_counter())
    return [after - before for before, after in itertools.pairwise(marks)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="the JSON written")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch's intra-op threads")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--board-size", type=int, default=10)
    parser.add_argument("--transitions", type=int, default=20000, help="random play in the replay buffer")
    parser.add_argument("--steps", type=int, default=250, help="timed gradient steps")
    parser.add_argument("--warmup", type=int, default=50, help="untimed gradient steps first")
    options = parser.parse_args(argv)
    torch.set_num_threads(options.threads)
    settings = OptimizationSettings(
        use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=options.threads
    )
    model = train_step_model(settings, "cpu", options.board_size, options.transitions, options.batch_size)
    if model.double_dqn:
        parser.exit(1, "error: the default model is no longer plain DQN: time its Double DQN targets\n")
    steps = EagerSteps(model)
    for _ in range(options.warmup):
        timed_step(model, steps, options.batch_size)
    runs = [timed_step(model, steps, options.batch_size) for _ in range(options.steps)]
    medians = {name: statistics.median(run[k] for run in runs) * 1e3 for k, name in enumerate(PARTS)}
    report = {
        "benchmark": "eager_step_breakdown",
        "system": system_info(),
        "threads": options.threads,
        "batch_size": options.batch_size,
        "statistic": f"median over {options.steps} gradient steps after {options.warmup} untimed; milliseconds",
        "milliseconds": medians,
        "sum_of_medians_milliseconds": sum(medians.values()),
        "whole_step_median_milliseconds": statistics.median(sum(run) for run in runs) * 1e3,
    }
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["milliseconds"] | {"whole step": report["whole_step_median_milliseconds"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
