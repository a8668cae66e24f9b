"""Gradient steps per compiled call, 1 against 4: the cold compile's seconds and the compiled
step's samples/s at one batch size, timed as ``sb3-snake benchmark-grad`` times a row (calls of
4 steps through ``SnakeDQN.train``, runs of about 0.5 s).

Each process builds two identical models, fixes one's graph at 1 step a call and the other's at
4, compiles both (in the process's order; an empty inductor cache per process), and then times
them in turn, ``rounds`` times, so both see the machine in the same state. Processes alternate
which arm compiles first, since a second compile in a process is warmer than the first.

    python steps_per_call_ab.py 2 128 > steps_per_call_ab.json
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ARMS = (1, 4)
ROUNDS_PER_PROCESS = 5


def measure(order: tuple[int, ...], batch_size: int) -> list[dict]:
    import torch

    from sb3_snake.acceleration.autotune import filled_model
    from sb3_snake.acceleration.settings import OptimizationSettings
    from sb3_snake.common.timing import time_runs
    from sb3_snake.training.config import TrainConfig

    threads = torch.get_num_threads()
    settings = OptimizationSettings(
        use_bf16=False, use_flash_attention=False, use_torch_compile=True, num_threads=threads
    )
    models, results = {}, {}
    for arm in order:
        model = filled_model(settings, "cpu", 10, 16384, TrainConfig().policy_kwargs(), batch_size=batch_size)
        model.updates.current.steps_per_call = arm  # fixed before the first call
        start = time.perf_counter()
        model.train(gradient_steps=4, batch_size=batch_size)  # compiles
        results[arm] = {"arm": arm, "compiled_as": order.index(arm) + 1, "compile_seconds": time.perf_counter() - start}
        assert model.updates.current.calls == 4 // arm and model.active_optimizations.compile.active
        models[arm] = model
    for arm in order:
        results[arm]["samples_per_second"] = []
    for _ in range(ROUNDS_PER_PROCESS):
        for arm in order:
            model = models[arm]
            durations, calls = time_runs(
                lambda model=model: model.train(gradient_steps=4, batch_size=batch_size), lambda: None, 0.5, 1
            )
            results[arm]["samples_per_second"].append(batch_size * 4 * calls / durations[0])
    return [{"steps_per_call": arm, "batch_size": batch_size, "threads": threads, **results[arm]} for arm in order]


def main(processes: int, batch_size: int) -> None:
    runs = []
    for process in range(processes):
        order = ARMS if process % 2 == 0 else ARMS[::-1]
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
            command = [sys.executable, __file__, "--arms", ",".join(map(str, order)), str(batch_size)]
            output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
        for result in json.loads(output):
            runs.append({"process": process, **result})
            print(json.dumps(runs[-1]), file=sys.stderr)
    print(json.dumps(report(runs, processes, batch_size), indent=2))


def report(runs: list[dict], processes: int, batch_size: int) -> dict:
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
        for process in range(processes)
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
        "command": f"python steps_per_call_ab.py {processes} {batch_size}",
        "cache": "an empty inductor cache per process; the arm compiled second finds the first's work",
        "statistic": f"{ROUNDS_PER_PROCESS} timed runs of about 0.5 s per arm and process, arms in turn",
        "runs": runs,
        "summary": summary,
    }


if __name__ == "__main__":
    if sys.argv[1] == "--arms":
        print(json.dumps(measure(tuple(int(arm) for arm in sys.argv[2].split(",")), int(sys.argv[3]))))
    else:
        main(int(sys.argv[1]), int(sys.argv[2]))
