"""Capturing a learner's gradient step as a CUDA graph: the warm-up and the capture both learners'
captured steps share (SnakeDQN's ``CapturedSteps``, PQN's ``CapturedMinibatches``).

A graph replays the kernels of one recorded step with no launch cost; what it records must read no
host value, so each learner's step reads its batch from tensors of fixed addresses. Adam must run
with ``capturable=True`` (:func:`make_capturable`); random numbers drawn inside come from
generators registered with the graph. Design: docs/gpu.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

#: Eager steps before a CUDA graph is captured (Adam's state, cuBLAS workspaces, autocast's casts).
WARMUP_STEPS = 3


def make_capturable(optimizer: torch.optim.Optimizer) -> None:
    """Adam (or any optimizer with the option) steps with device tensors only, as a graph needs."""
    for group in optimizer.param_groups:
        if "capturable" in group:
            group["capturable"] = True


def warm_up(step: Callable[[], None], steps: int) -> None:
    """``steps`` calls of ``step`` on a side stream, as PyTorch asks before a capture."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(steps):
            step()
    torch.cuda.current_stream().wait_stream(stream)


def capture(
    step: Callable[[], None], optimizer: torch.optim.Optimizer, generators: Iterable[torch.Generator] = ()
) -> tuple[torch.cuda.CUDAGraph | None, str]:
    """``step`` recorded once as a CUDA graph: ``(graph, "")``, or ``(None, why)`` when the capture
    failed. Gradients are set to None first: allocated inside the graph, they are written afresh
    on every replay instead of added to tensors from outside it. ``generators``: the step's own
    random generators (a capture refuses one it was not told of)."""
    optimizer.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    for generator in generators:
        graph.register_generator_state(generator)
    try:
        with torch.cuda.graph(graph):
            step()
    except RuntimeError as error:
        return None, f"the capture failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
    return graph, ""
