"""``torch.compile`` probed in a child process: compile and run a tiny function, and say how it went.

The capability report's ``--probe-compile`` runs the compiler for real (a C++ compiler is
invoked on a CPU), which can crash the process it runs in; the probe therefore runs as a child
(:class:`~sb3_snake.common.child_process.ChildProcess`), and a crash, a hang past
:data:`PROBE_TIMEOUT` or an error is the one-line reason compile is reported unavailable.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from sb3_snake.common import system
from sb3_snake.common.child_process import ChildProcess, tie_to_parent

#: Seconds the probe may take (a cold compile of a tiny function takes a few on a small CPU).
PROBE_TIMEOUT = 300.0


def probe_compile() -> tuple[bool, str]:
    """Whether ``torch.compile`` compiles and runs a tiny function here, and why not."""
    reason = system.compile_unavailable_reason()
    if reason:
        return False, reason
    with tempfile.TemporaryDirectory(prefix="sb3-snake-probe-") as folder:
        child = ChildProcess(__name__, [], Path(folder) / "probe.log", PROBE_TIMEOUT)
        try:
            child.wait()
        finally:
            child.stop()
        outcome = child.outcome()
    return (False, f"the compile probe {outcome}") if outcome else (True, "")


def main(argv: list[str] | None = None) -> int:
    """The child: compile ``relu(x) * 2`` with ``fullgraph=True``, run it, check the result."""
    tie_to_parent()
    compiled = torch.compile(lambda x: torch.relu(x) * 2, fullgraph=True)
    if compiled(torch.ones(4))[0] != 2:
        print("the compiled function computed a wrong result", flush=True)
        return 1
    return 0
