"""Gradient steps per compiled call, 1 against 4: the cold compile's seconds and the compiled
step's samples/s at one batch size, timed as ``sb3-snake benchmark-grad`` times a row (calls of
4 steps through ``SnakeDQN.train``, runs of about ``--seconds``).

Each process builds two identical models of ``benchmark-grad``'s step
(:func:`~sb3_snake.benchmark.matmul.train_step_model`). A model's first ``SnakeDQN.train`` call
starts the compile, and its count of gradient steps fixes the steps a compiled call holds, so
one model's first call makes 1 step and the other's 4; each waits for its compile child and
adopts the compiled update. Then the two are timed in turn, ``--rounds`` times, so both see
the machine in the same state. Every process has empty compile caches of its own (inductor's
and the package's); processes alternate which arm compiles first, since the arm compiled
second finds some of the first's work in the inductor cache.

    python scripts/steps_per_compiled_call_ab.py --processes 2 --batch-size 128 --output steps_per_call_ab.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARMS = (1, 4)
#: Gradient steps per timed ``SnakeDQN.train`` call, as ``benchmark-grad``'s.
STEPS_PER_TRAIN_CALL = 4


def measure(order: tuple[int, ...], options: argparse.Namespace) -> list[dict]:
    """One process's arms, compiled in ``order``, then timed in turn."""
    import torch

    from sb3_snake.acceleration.settings import OptimizationSettings
    from sb3_snake.benchmark.matmul import train_step_model
    from sb3_snake.common.timing import time_runs

    batch_size = options.batch_size
    threads = torch.get_num_threads()
    settings = OptimizationSettings(
        use_bf16=False, use_flash_attention=False, use_torch_compile=True, num_threads=threads
    )
    models, results = {}, {}
    for arm in order:
        model = train_step_model(settings, "cpu", options.board_size, options.transitions, batch_size)
        start = time.perf_counter()
        model.train(gradient_steps=arm, batch_size=batch_size)  # compiles calls of `arm` steps, and waits
        results[arm] = {"arm": arm, "compiled_as": order.index(arm) + 1, "compile_seconds": time.perf_counter() - start}
        decision = model.active_optimizations.compile
        if not decision.active:
            raise SystemExit(f"error: the arm of {arm} steps per call was not compiled: {decision.reason}")
        assert model.step_choice.current.steps_per_call == arm, "the first call's steps fix a compiled call's"
        models[arm] = model
        results[arm]["samples_per_second"] = []
    for _ in range(options.rounds):
        for arm in order:
            model = models[arm]
            durations, calls = time_runs(
                lambda model=model: model.train(gradient_steps=STEPS_PER_TRAIN_CALL, batch_size=batch_size),
                lambda: None,
                options.seconds,
                1,
            )
            results[arm]["samples_per_second"].append(batch_size * STEPS_PER_TRAIN_CALL * calls / durations[0])
    return [{"steps_per_call": arm, "batch_size": batch_size, "threads": threads, **results[arm]} for arm in order]


def this_program() -> list[str]:
    """How this process was started, without its arguments: the workers start the same way
    (with the interpreter's options, or the ``-c`` code that runs this file)."""
    arguments = len(sys.argv) - 1
    return [sys.executable, *sys.orig_argv[1 : len(sys.orig_argv) - arguments]]


def run_processes(options: argparse.Namespace, argv: list[str]) -> list[dict]:
    """``options.processes`` workers, one after another, each with empty caches of its own."""
    runs = []
    for process in range(options.processes):
        order = ARMS if process % 2 == 0 else ARMS[::-1]
        with tempfile.TemporaryDirectory(prefix="steps-per-call-") as caches:
            env = {
                **os.environ,
                "TORCHINDUCTOR_CACHE_DIR": f"{caches}/inductor",
                "SB3_SNAKE_CACHE_DIR": f"{caches}/sb3-snake",
            }
            command = [*this_program(), *argv, "--measure", ",".join(map(str, order))]
            output = subprocess.run(command, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
        for result in json.loads(output.splitlines()[-1]):
            runs.append({"process": process, **result})
            print(json.dumps(runs[-1]), file=sys.stderr)
    return runs


def report(runs: list[dict], options: argparse.Namespace) -> dict:
    from sb3_snake.common.system import system_info

    summary = {}
    for arm in ARMS:
        mine = [r for r in runs if r["steps_per_call"] == arm]
        summary[arm] = {
            "samples_per_second_median": statistics.median(x for r in mine for x in r["samples_per_second"]),
            "compile_seconds_when_compiled_first": [r["compile_seconds"] for r in mine if r["compiled_as"] == 1],
        }
    # The machine's speed drifts within minutes, so the comparison is of runs made side by side.
    ratios = [
        four / one
        for process in range(options.processes)
        for one, four in zip(
            *(
                r["samples_per_second"]
                for arm in ARMS
                for r in runs
                if r["process"] == process and r["steps_per_call"] == arm
            ),
            strict=True,
        )
    ]
    summary["ratio_4_to_1"] = {"median": statistics.median(ratios), "each_round": ratios}
    return {
        "benchmark": "steps_per_compiled_call",
        "system": system_info(),
        "command": f"python scripts/steps_per_compiled_call_ab.py --processes {options.processes} "
        f"--batch-size {options.batch_size}",
        "cache": "empty inductor and package caches per process; the arm compiled second finds the first's work",
        "statistic": f"{options.rounds} timed runs of about {options.seconds} s per arm and process, arms in turn",
        "runs": runs,
        "summary": summary,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, help="the JSON written (required but with --measure)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--board-size", type=int, default=10)
    parser.add_argument("--transitions", type=int, default=16384, help="random play in each replay buffer")
    parser.add_argument("--rounds", type=int, default=5, help="timed runs per arm and process")
    parser.add_argument("--seconds", type=float, default=0.5, help="about how long each timed run lasts")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # a worker: its arms, in order, as JSON on stdout
    options = parser.parse_args(argv)
    if options.measure:
        print(json.dumps(measure(tuple(int(arm) for arm in options.measure.split(",")), options)))
        return 0
    if options.output is None:
        parser.error("--output is required")
    result = report(run_processes(options, argv), options)
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
