"""The compile child and its artifact: the update compiled in a process of its own, which training survives.

:class:`CompileJob` is the training process's side: it writes the
:class:`~sb3_snake.update.graph.UpdateGraph` (either learner's), one call's arguments and the compile's options
to a private folder and starts :func:`main` as a child process. :func:`main` finds the compiled
update in the cache folder or compiles it (:func:`compile_graph`, ``aot_compile``), saves it
(:func:`save`), loads and runs it once, and exits 0; anything else is a failure, in one line
(:meth:`CompileJob.failure`). The training process then loads the file on its main thread
(:func:`load`). Files are kept under a key of everything the compiled code depends on
(:func:`artifact_key`). :data:`FAULT_ENV` makes a child crash, hang or fail on purpose, for the
tests. Why, and the torch 2.13 workarounds: docs/compile.md.
"""

from __future__ import annotations

import faulthandler
import hashlib
import json
import logging
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.nn.attention import SDPBackend

from sb3_snake.acceleration.optimizations import forward_context
from sb3_snake.common.child_process import ChildProcess, tie_to_parent
from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import (
    UntrustedCacheError,
    cache_dir,
    check_writable_dir,
    private_dir,
    read_private,
    write_private,
    write_text_atomically,
)
from sb3_snake.common.system import process_gone
from sb3_snake.update.graph import UpdateGraph

logger = logging.getLogger(__name__)

#: Seconds a compile child may take before it is stopped and training goes on eagerly.
COMPILE_TIMEOUT = 900.0
#: The start of a job folder's name in the temporary folder; the training process's id follows.
FOLDER_PREFIX = "sb3-snake-compile-"
#: ``crash``, ``hang`` or ``fail``: the child does that instead of compiling (for tests).
FAULT_ENV = "SB3_SNAKE_COMPILE_FAULT"
#: Inductor's own variable for the folder of its kernel cache.
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


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
        #: Inductor's cache folder the child writes its kernels to, and training loads them from.
        self.inductor_cache = private_inductor_cache()
        environment = {
            "TORCHINDUCTOR_COMPILE_THREADS": str(max(1, compile_threads)),
            "TORCHINDUCTOR_CACHE_DIR": str(self.inductor_cache),
        }
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


def private_inductor_cache() -> Path:
    """The folder of inductor's kernel cache a compile may use: the one configured
    (``TORCHINDUCTOR_CACHE_DIR``, else inductor's default in the temporary folder) where it is
    this user's alone, else, with a one-line warning, a folder of the package's private cache.
    Compiled kernels are shared libraries that are loaded, and so run: one planted in a folder
    another user owns or can write would run in the child and in training."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    configured = Path(os.environ.get(INDUCTOR_CACHE_ENV) or default_cache_dir())
    try:
        if configured.is_symlink():
            raise UntrustedCacheError(f"cache folder {configured} is a symbolic link; not used")
        return private_dir(configured)
    except OSError as error:
        own = cache_dir() / "inductor"
        logger.warning("inductor's cache: %s; compiling with %s instead", " ".join(str(error).split()), own)
        return private_dir(own)


@contextmanager
def inductor_cache(folder: Path) -> Iterator[None]:
    """Inductor's cache folder set to ``folder`` inside (the variable restored on leaving): the
    kernels a compiled update loads are read from the folder its child wrote them to."""
    before = os.environ.get(INDUCTOR_CACHE_ENV)
    os.environ[INDUCTOR_CACHE_ENV] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(INDUCTOR_CACHE_ENV, None)
        else:
            os.environ[INDUCTOR_CACHE_ENV] = before


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


#: Bumped when the file's content changes meaning, so older files are compiled again.
ARTIFACT_VERSION = 1
#: The largest compiled update a file may hold (a few megabytes in practice).
MAX_ARTIFACT_BYTES = 1 << 30


def compile_graph(graph: UpdateGraph, arguments: tuple[Any, ...], mode: str = "default", backend: str = "inductor"):
    """``graph``'s forward compiled for ``arguments`` (call it with ``graph`` first, then them),
    in the caller's forward context. Takes tens of seconds to minutes with inductor on a small CPU."""
    options = {"mode": mode} if backend == "inductor" else {}
    compiled = torch.compile(UpdateGraph.forward, fullgraph=True, dynamic=False, backend=backend, **options)
    return compiled.aot_compile(((graph, *arguments), {}))


def save(function: Any, path: Path) -> None:
    """Write a function of :func:`compile_graph` to ``path`` atomically, in a folder private to
    the user (:func:`~sb3_snake.common.paths.write_private`: a link there is replaced, not followed)."""
    write_private(path, type(function).serialize(function).serialized_data)


def load(
    path: Path, device_type: str, bf16: bool, sdpa_backends: Sequence[SDPBackend | str]
) -> Callable[..., torch.Tensor]:
    """The function :func:`save` wrote to ``path``, ready to call (no trace, no lowering) in the
    :func:`forward_context` of the same ``device_type``, ``bf16`` and ``sdpa_backends``.

    Only a regular file private to the user, in a folder private to them, is loaded
    (:func:`~sb3_snake.common.paths.read_private`; else
    :class:`~sb3_snake.common.paths.UntrustedCacheError` says why):
    deserializing runs code. It is loaded in that context, since torch 2.13's loader rebuilds each tensor guard's
    expected dispatch keys from the thread's state at load time: loaded outside autocast, a
    graph compiled under bf16 autocast refuses every call made under it. The loader also
    registers the guards it rebuilds on imported modules (``collections.namedtuple``, the
    pytree registry: the batches are a named tuple) with the dynamo trace in progress, and
    fails where there is none, so the load runs in an empty tracing context.
    """
    from torch._dynamo.aot_compile import AOTCompiledFunction
    from torch._guards import TracingContext, tracing
    from torch._subclasses.fake_tensor import FakeTensorMode

    data = read_private(path, MAX_ARTIFACT_BYTES)  # loading runs its code: our own files only
    with forward_context(device_type, bf16, sdpa_backends), tracing(TracingContext(FakeTensorMode())):
        return AOTCompiledFunction.deserialize(data)


def prepare_load() -> None:
    """Import now the modules any compiled update's code imports when it is loaded (about a second
    of inductor's Python on a small CPU, once per process). Training calls it when the compile
    starts, before the child competes for the cores, so that adopting the compile later pauses
    for the file's own loading and the CPU's vector-instruction probe only; the probe is left to
    the load, since by then the child has built its test program into the shared compile cache."""
    import torch._dynamo.aot_compile  # noqa: F401
    import torch._inductor.codegen.memory_planning  # noqa: F401
    import torch._inductor.select_algorithm  # noqa: F401


def artifact_key(graph: UpdateGraph, arguments: tuple[Any, ...], options: dict[str, Any]) -> str:
    """A name for the compiled update of ``graph`` on ``arguments`` with the compile's ``options``,
    which changes whenever the code compiled, or what it was compiled for, would."""
    digest = hashlib.sha256()
    for part in (
        ARTIFACT_VERSION,
        torch.__version__,
        sys.version,
        platform.machine(),
        torch.backends.cpu.get_cpu_capability(),
        sorted(options.items()),
        repr(graph),
        graph.constants(),
        _layouts(arguments),
    ):
        digest.update(repr(part).encode())
    package = Path(__file__).resolve().parents[1]
    for module in graph.sources:  # the code the graph runs: an edit compiles it again
        digest.update((package / module).read_bytes())
    return digest.hexdigest()[:32]


def artifact_path(key: str) -> Path:
    """Where the compiled update of ``key`` is kept: the cache folder's ``compiled/``."""
    return cache_dir() / "compiled" / f"update-{key}.bin"


def _layouts(value: Any) -> Any:
    """What a compiled graph's guards check of its arguments: each tensor's shape, stride, dtype,
    device and whether it requires grad, in the arguments' structure."""
    if isinstance(value, torch.Tensor):
        return tuple(value.shape), value.stride(), str(value.dtype), str(value.device), value.requires_grad
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(_layouts(item) for item in value)
    return value
