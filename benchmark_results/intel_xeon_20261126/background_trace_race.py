"""Try to reproduce the race between a background compile's trace and the eager steps beside it.

Each round traces ``CompiledUpdate``'s update in the background thread exactly as training does
(``compile_in_background``: copies of the parameters, the GIL's short switch interval), with
dynamo's eager backend, so that only the trace runs (the crash's stack was in dynamo's
``describe_tensor``, before inductor), while the main thread makes eager steps until it ends.

    python background_trace_race.py old 50   # eager steps free their gradients (as before 59dd84c)
    python background_trace_race.py new 50   # they zero them in place while a compile runs

Prints one line per round; a crash prints every thread's stack (faulthandler).
"""

import faulthandler
import functools
import sys
import time

import torch

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.benchmark.matmul import train_step_model
from sb3_snake.dqn.update import background, compiled
from sb3_snake.dqn.update.step import UpdateStep


def main(arm: str, rounds: int) -> None:
    faulthandler.enable()
    compiled.torch.compile = functools.partial(torch.compile, backend="eager")  # dynamo's trace only
    if arm == "old":
        background.zero_grad = lambda optimizer: optimizer.zero_grad(set_to_none=True)
    settings = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=True, num_threads=2)
    model = train_step_model(settings, "cpu", 10, 4096, 128)
    eager, start = UpdateStep(model), time.time()
    for r in range(rounds):
        torch._dynamo.reset()
        update = compiled.CompiledUpdate(model, model.active_optimizations)
        update.compile_in_background(update.sample(4, 128), 4)
        steps = 0
        while update.compiling:
            eager.update(eager.sample(1, 128))
            steps += 1
        update.finish_background()
        elapsed = time.time() - start
        print(f"round {r}: {steps} eager steps beside the trace, {update.failure=}, {elapsed:.0f} s", flush=True)
    print("survived", rounds, "rounds")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
