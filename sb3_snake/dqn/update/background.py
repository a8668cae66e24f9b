"""The background compiles still running in this process, and what eager steps do meanwhile.

A background compile
(:meth:`~sb3_snake.dqn.update.compiled.CompiledUpdate.compile_in_background`) runs its update on
copies of the parameters, but the networks it traces are the model's own modules:
``functional_call`` swaps their parameters for the copies, so dynamo reads the live parameters
first, gradients included, to describe them as fake tensors. An eager step that sets its
gradients to ``None`` (``zero_grad(set_to_none=True)``) has its backward pass assign new
gradient tensors to the parameters from the autograd engine, which runs without the GIL, and its
next ``zero_grad`` free them: a compile that reads ``.grad`` meanwhile can read a tensor being
replaced, or keep one that is then freed. Training processes died with a segmentation fault
during a background compile, and the one whose stacks ``faulthandler`` printed had the compiling
thread in dynamo's ``describe_tensor`` of a gradient and the training thread in ``zero_grad``.
The race was not reproduced on demand, so it is the likely cause, not a proven one (the
benchmarks page has the crash and the attempt to reproduce it). While any background compile
runs, eager steps therefore zero their gradients in place (:func:`zero_grad`): the same gradient
tensors throughout, which backward fills in place and nothing frees. The registry counts
abandoned compiles too, since they go on tracing the same modules.
"""

from __future__ import annotations

import threading

import torch

_running: set[threading.Thread] = set()  # background compiles still running, abandoned ones included
_running_lock = threading.Lock()


def background_compile_running() -> bool:
    """Whether a background compile of this process is still running (one abandoned by a model
    whose training ended included): a new one waits for it, and then finds its work in the cache."""
    with _running_lock:
        return any(thread.is_alive() for thread in _running)


def register(thread: threading.Thread) -> None:
    """``thread`` compiles in the background from now on, until it calls :func:`unregister`."""
    with _running_lock:
        _running.add(thread)


def unregister(thread: threading.Thread) -> None:
    """``thread``'s compile ended, however it ended."""
    with _running_lock:
        _running.discard(thread)


def zero_grad(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.zero_grad()`` for an eager step: gradients set to ``None`` (PyTorch's default,
    which frees them between steps), or zeroed in place while a background compile runs (see
    the module docstring)."""
    optimizer.zero_grad(set_to_none=not background_compile_running())
