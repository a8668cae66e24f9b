"""The compiled update as a file: compiled ahead of time in one process, loaded in another.

:func:`compile_graph` compiles :class:`~sb3_snake.dqn.update.graph.UpdateGraph`'s forward with
``torch.compile(fullgraph=True).aot_compile``: dynamo traces it once, AOTAutograd and inductor
compile its forward and backward, and the result, with its guards, is saved to a file
(:func:`save`). :func:`load` gives it back as a callable with no trace and no lowering: it only
reads the file and loads the kernels, so the training process adopts a compile made by a child
process in about a second rather than tracing the graph again for ten or more (a warm inductor
cache skips the lowering, not dynamo's trace). The guards still run at every call: tensors of
another shape, dtype or layout, or other constants, are refused with an error, not miscomputed.

Files are kept in the cache folder (:func:`artifact_path`) under a key of everything the code
depends on (:func:`artifact_key`): torch, Python, the CPU's vector instructions, the package's
own update code, the graph's modules and constants, the arguments' layouts and the compile's
options, the thread count the graph runs at among them. A second run on the same machine finds
its file there.

``aot_compile`` is marked experimental in torch 2.13; :func:`load` works around one defect of it
(see its docstring). Whatever fails here fails in the compile child, or at the first call in
the training process, which then trains eagerly with the reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import platform
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from sb3_snake.common.paths import cache_dir, read_private, write_private
from sb3_snake.dqn.update.graph import UpdateGraph

#: Bumped when the file's content changes meaning, so older files are compiled again.
ARTIFACT_VERSION = 1
#: The largest compiled update a file may hold (a few megabytes in practice).
MAX_ARTIFACT_BYTES = 1 << 30
#: The package's modules whose code a compiled update runs (their sources enter the key).
_TRACED_MODULES = ("dqn/update/graph.py", "dqn/targets.py", "dqn/extractor.py", "dqn/policies.py", "envs/rules.py")


@contextlib.contextmanager
def forward_context(device_type: str, bf16: bool, sdpa_backends: Sequence[SDPBackend | str]) -> Iterator[None]:
    """The context a compiled update is compiled and run in: the SDPA kernels allowed (or their
    names), and bf16 autocast when active (entered inside a ``grad_and_value`` it failed to
    trace on torch 2.13)."""
    backends = [getattr(SDPBackend, backend) if isinstance(backend, str) else backend for backend in sdpa_backends]
    with sdpa_kernel(backends), torch.autocast(device_type, torch.bfloat16, enabled=bf16):
        yield


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
    package = Path(__file__).resolve().parents[2]
    for module in _TRACED_MODULES:
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
