"""The compile child: the update compiled in a process of its own, which training survives.

:class:`CompileJob` is the training process's side. It writes what the compile needs (the
:class:`~sb3_snake.dqn.update.graph.UpdateGraph`, the arguments of one call and the compile's
options) to a private folder and starts this module as a child process
(:class:`~sb3_snake.common.child_process.ChildProcess`); training polls it at step boundaries,
and once it has ended, loads the compiled update it saved (:func:`~sb3_snake.dqn.update.artifact.load`)
on its main thread. A child that crashes, hangs past its timeout or fails costs a compile, never
the run: the job's :meth:`~CompileJob.failure` says what happened, in one line. Stopping
training stops the child and removes the folder (:meth:`CompileJob.close`).

:func:`main` is the child's side (``main([REQUEST, ARTIFACT])``). It finds
the compiled update in the cache folder, or compiles and saves it there
(:func:`~sb3_snake.dqn.update.artifact.compile_graph`), then loads the saved file and runs it
once, so that what the training process will load has loaded and run here first. It writes a
small JSON result beside the request and exits 0; anything else is a failure.

The child compiles for the thread count training will run the graph at (the count is compiled
into the kernels and guarded), and builds its C++ kernels on the cores training leaves it.
:data:`FAULT_ENV` makes a child crash, hang or fail on purpose: the tests use it to show what
training does then.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import torch

from sb3_snake.common.child_process import ChildProcess, tie_to_parent
from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import check_writable_dir, private_dir, write_text_atomically
from sb3_snake.common.system import process_gone
from sb3_snake.dqn.update.artifact import artifact_key, artifact_path, compile_graph, forward_context, load, save
from sb3_snake.dqn.update.graph import UpdateGraph

logger = logging.getLogger(__name__)

#: Seconds a compile child may take before it is stopped and training goes on eagerly.
COMPILE_TIMEOUT = 900.0
#: The start of a job folder's name in the temporary folder; the training process's id follows.
FOLDER_PREFIX = "sb3-snake-compile-"
#: ``crash``, ``hang`` or ``fail``: the child does that instead of compiling (for tests).
FAULT_ENV = "SB3_SNAKE_COMPILE_FAULT"


class CompileJob:
    """One compile of ``graph`` for ``arguments`` in a child process.

    :param graph: the update to compile; the training process calls the result with it.
    :param arguments: the arguments of one call (the model's own tensors and sampled batches).
    :param options: ``device_type``, ``bf16``, ``sdpa_backends``, ``mode``, ``backend`` and
        ``threads``, the intra-op thread count the graph will run at (compiled into its kernels
        and guarded: another count is refused).
    :param compile_threads: processes the child builds its kernels with.
    :param timeout: seconds before the child is stopped (None: :data:`COMPILE_TIMEOUT`).
    """

    def __init__(
        self,
        graph: UpdateGraph,
        arguments: tuple[Any, ...],
        options: dict[str, Any],
        compile_threads: int = 1,
        timeout: float | None = None,
    ):
        self.graph, self.threads = graph, options["threads"]
        #: The calls compiled for: gradient steps per call, and their batch size.
        self.steps_per_call, self.batch_size = arguments[0].observations.shape[:2]
        remove_orphaned_folders()
        self.folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        self.artifact = _artifact_place(artifact_key(graph, arguments, options), self.folder)
        self.cached_before = self.artifact.is_file()
        request = self.folder / "request.pt"
        torch.save(
            {"graph": graph, "arguments": arguments, "options": options},
            request,
        )
        environment = {"TORCHINDUCTOR_COMPILE_THREADS": str(max(1, compile_threads))}
        self.child = ChildProcess(
            __name__,
            [str(request), str(self.artifact)],
            self.folder / "child.log",
            COMPILE_TIMEOUT if timeout is None else timeout,
            environment,
        )
        # Closed however the job ends: by close(), or when it is collected or Python exits (a
        # model whose training never returned through learn()).
        self._close = weakref.finalize(self, _close_job, self.child, self.folder)

    def poll(self) -> bool:
        """Whether the child has ended (a child past its timeout is stopped here)."""
        return self.child.poll() is not None

    def wait(self, interrupted: Any = lambda: False) -> bool:
        """Wait for the child; False when ``interrupted()`` said to stop waiting first."""
        return self.child.wait(interrupted) is not None

    def failure(self) -> str:
        """Why the compile failed, in one line, or ``""`` once the child compiled and checked it."""
        outcome = self.child.outcome()
        if outcome:
            return f"compile child {outcome}"
        if not self.artifact.is_file():
            return "compile child ended without a compiled update"
        return ""

    def result(self) -> dict[str, Any]:
        """The child's own account: ``seconds`` it spent, and whether the update was ``cached``."""
        try:
            return json.loads((self.folder / "result.json").read_text())
        except (OSError, ValueError):
            return {}

    def close(self) -> None:
        """Stop the child if it still runs, reap it, and remove the job's folder (a compiled
        update kept there, when the cache folder could not take it, goes with it)."""
        self._close()


def remove_orphaned_folders() -> None:
    """Remove the job folders of training processes that are gone (killed outright, say, so that
    they could not remove their own): this user's, named by a process id that no process has."""
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        pid = folder.name[len(FOLDER_PREFIX) :].split("-")[0]
        try:
            owned = folder.lstat().st_uid == os.getuid() and folder.is_dir() and not folder.is_symlink()
        except OSError:
            continue
        if owned and pid.isdigit() and process_gone(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _close_job(child: ChildProcess, folder: Path) -> None:
    child.stop()
    shutil.rmtree(folder, ignore_errors=True)


def _artifact_place(key: str, fallback: Path) -> Path:
    """The cache folder's file for ``key``, or one in ``fallback`` (the job's private folder)
    where that folder cannot be written or is not private to the user (a warning says why)."""
    path = artifact_path(key)
    try:
        private_dir(path.parent)
        check_writable_dir(path.parent, "compile cache folder")
    except (UsageError, OSError) as error:
        logger.warning("the compiled update is kept for this run only: %s", " ".join(str(error).split()))
        return fallback / path.name
    return path


def _inject_fault(fault: str) -> None:
    if fault == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif fault == "hang":
        threading.Event().wait()
    elif fault == "fail":
        raise RuntimeError("compile failed on purpose (SB3_SNAKE_COMPILE_FAULT=fail)")


def main(argv: list[str]) -> int:
    """The child, started by :class:`CompileJob`: ``REQUEST ARTIFACT``; see the module docstring."""
    tie_to_parent()
    faulthandler.enable()
    request_path, artifact = (Path(argument) for argument in argv)
    _inject_fault(os.environ.get(FAULT_ENV, ""))
    request = torch.load(request_path, weights_only=False)  # written by our parent, in its private folder
    graph, arguments, options = request["graph"], request["arguments"], request["options"]
    torch.set_num_threads(options["threads"])
    started = time.perf_counter()
    cached = artifact.is_file()
    context = (options["device_type"], options["bf16"], options["sdpa_backends"])
    with forward_context(*context):
        if cached:
            try:
                load(artifact, *context)(graph, *arguments)  # the child's own copies: nothing to keep
            except Exception as error:  # noqa: BLE001 - a stale or broken file is compiled again
                print(f"cached compiled update {artifact} not used: {type(error).__name__}: {error}", flush=True)
                cached = False
        if not cached:
            save(compile_graph(graph, arguments, options["mode"], options["backend"]), artifact)
            # what the training process will load, loaded and run here first
            load(artifact, *context)(graph, *arguments)
    seconds = time.perf_counter() - started
    write_text_atomically(request_path.parent / "result.json", json.dumps({"seconds": seconds, "cached": cached}))
    return 0
