"""Facts about this machine: CPU, cores, memory, devices, bf16 and compile capability.

The lowest module of the package beside ``settings`` and ``envs``: everything above it
(optimizations, training, the capability report, the benchmarks, the CLI) asks here, so each
fact is found in one place and the device check is written once.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from sb3_snake.common.errors import UsageError

#: The device names a user may give.
DEVICES = ("auto", "cpu", "cuda")


def first_processor(cpuinfo: str | None = None) -> dict[str, str]:
    """The fields of the first processor in Linux's ``/proc/cpuinfo`` (or ``cpuinfo``, that
    file's text), as written; empty where there is no such file. Every processor of a machine
    this package runs on is the same model, so the first stands for all."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return {}
    fields: dict[str, str] = {}
    for line in cpuinfo.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_model() -> str:
    """The CPU's marketing name, from /proc/cpuinfo where there is one."""
    return first_processor().get("model name") or platform.processor() or platform.machine()


#: Where each architecture's /proc/cpuinfo names vendor, family, model and flags, and the flags
#: :func:`cpu_identity` keeps: the vector units that decide which kernels run fast (x86: AVX2
#: only, AVX-512 with or without bf16, Intel's AMX; Arm: SVE, SME, bf16 and int8 matrix
#: multiplies). The prefixes are each architecture's own: x86's ``smep`` and ``sme`` (memory
#: protection and encryption) are not Arm's SME.
_CPUINFO_FIELDS = (
    ("vendor_id", "cpu family", "model", "flags", ("avx2", "avx512", "amx")),  # x86
    ("CPU implementer", "CPU architecture", "CPU part", "Features", ("sve", "sme", "bf16", "i8mm")),  # Arm
)


def cpu_identity(cpuinfo: str | None = None) -> dict[str, Any] | None:
    """Which generation the CPU is: ``{"vendor", "family", "model", "vector_flags"}`` of its first
    processor (:func:`first_processor`; ``cpuinfo``: the file's text), read from the x86
    fields (vendor_id, cpu family, model, flags) or the Arm ones (CPU implementer, CPU
    architecture, CPU part, Features); ``None`` where there is no such file or it has neither
    (macOS, other systems: there the name alone stands).

    The marketing name alone does not tell machines apart: a cloud's "AMD EPYC" is a Zen 2, 3, 4
    or 5 from one day to the next, and what is fastest on one is not on another. Family and model
    name the generation (AMD family 23 is Zen 1-2, 25 Zen 3-4, 26 Zen 5), and the vector flags say
    which kernels the CPU has, e.g. native bf16 (``avx512_bf16``, ``amx_bf16``, Arm's ``bf16``).
    Values are kept as the file writes them (strings), so no machine's format can fail the read.
    """
    fields = first_processor(cpuinfo)
    for vendor, family, model, flags, vector_prefixes in _CPUINFO_FIELDS:
        if family in fields and model in fields:
            return {
                "vendor": fields.get(vendor, ""),
                "family": fields[family],
                "model": fields[model],
                "vector_flags": sorted(f for f in fields.get(flags, "").split() if f.startswith(vector_prefixes)),
            }
    return None


def cpu_description(name: str, identity: dict[str, Any] | None) -> str:
    """``AMD EPYC (family 25, model 1)``: the name with the generation where it is known."""
    if isinstance(identity, dict) and "family" in identity and "model" in identity:
        return f"{name} (family {identity['family']}, model {identity['model']})"
    return name


def cpu_cores() -> int:
    """CPU cores this process may run on (its affinity where the OS says, else all)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def process_gone(pid: int) -> bool:
    """Whether no process of this machine has the id ``pid`` (an id too large for the system has
    none). Another user's process, an error, or Windows (whose ``os.kill`` would end the process)
    count as alive: whoever asks may take over what a gone process held, never a live one's."""
    if os.name == "nt":
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except (ProcessLookupError, OverflowError):
        return True
    except OSError:  # PermissionError: another user's process has the id
        return False
    return False


def processes() -> dict[int, tuple[int, float]] | None:
    """Every process's parent and the CPU seconds it has used, from ``/proc`` (Linux), or ``None``."""
    try:
        tick, entries = os.sysconf("SC_CLK_TCK"), os.scandir("/proc")
    except (AttributeError, ValueError, OSError):
        return None
    table = {}
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                text = Path(entry.path, "stat").read_text()
                fields = text[text.rindex(")") + 2 :].split()  # from field 3 (state) on; the name may hold spaces
                table[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
            except (OSError, ValueError, IndexError):
                continue  # a process that ended while it was read
    return table


def _steal_seconds() -> float | None:
    """CPU seconds the host of this virtual machine has taken from it (``steal`` in /proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def descendants(pid: int, parents: dict[int, int]) -> set[int]:
    """``pid`` and every process below it, given each process's parent."""
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found, stack = {pid}, [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def other_load_meter() -> Callable[[], float | None]:
    """Start measuring the CPU others take; the function returned says how many cores they took,
    on average, since: every process outside this one and its descendants (torch.compile's
    workers are descendants) and the vCPU time the host of a virtual machine took away. ``None``
    where that cannot be read (not Linux)."""
    before, steal_before, started = processes(), _steal_seconds(), time.perf_counter()

    def taken() -> float | None:
        after, steal_after, elapsed = processes(), _steal_seconds(), time.perf_counter() - started
        if before is None or after is None or elapsed <= 0:
            return None
        ours = descendants(os.getpid(), {pid: parent for pid, (parent, _) in after.items()})
        # A process that started since counts whole: all of its time is in the interval.
        others = sum(seconds - before.get(pid, (0, 0.0))[1] for pid, (_, seconds) in after.items() if pid not in ours)
        if steal_before is not None and steal_after is not None:
            others += steal_after - steal_before
        return max(0.0, others / elapsed)

    return taken


def available_memory_bytes() -> int | None:
    """Memory that can be allocated without swapping (``MemAvailable``), or ``None`` if unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def native_bf16(device: str | torch.device) -> bool:
    """Whether ``device`` computes bf16 natively, so that bf16 autocast can be a speed-up rather
    than an emulation: a GPU that supports bf16, a CPU with AVX512-BF16 or AMX. The one answer
    to that question: the optimization layer's decision, ``auto``'s search and the capability
    report all ask here."""
    if torch.device(device).type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return cpu_has_native_bf16()


def cpu_has_native_bf16() -> bool:
    """True when the CPU has AVX512-BF16 or AMX (the CPU half of :func:`native_bf16`)."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def compile_unavailable_reason() -> str:
    """Why ``torch.compile`` cannot be used here, or ``""`` when it can: its cache folder unusable
    (:func:`compile_cache_problem`, asked first: the compiler's import needs that folder), or no
    compiler for this torch, Python or platform."""
    problem = compile_cache_problem()
    if problem:
        return problem
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile is not supported on this Python or platform"
    return ""


#: The variable that names torch's compile cache folder (inductor's, and dynamo's within it).
COMPILE_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def compile_cache_problem() -> str:
    """Why the compile cache folder that ``TORCHINDUCTOR_CACHE_DIR`` names cannot be used (a file
    where a folder must be, no permission to make it or to write in it), or ``""``; unset, torch
    uses a folder of its own in the temporary folder. Checked without importing the compiler:
    the import makes that folder, and fails with a traceback where it cannot."""
    folder = os.environ.get(COMPILE_CACHE_ENV)
    if not folder:
        return ""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return (
            f"the compile cache {COMPILE_CACHE_ENV}={folder} cannot be made a folder ({error.strerror or error}); "
            "point it at a folder you can write, or unset it"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        return (
            f"the compile cache {COMPILE_CACHE_ENV}={folder} is not a folder you can write; "
            "point it at one you can, or unset it"
        )
    return ""


def import_compiler_despite_cache() -> str:
    """When ``TORCHINDUCTOR_CACHE_DIR`` is unusable (:func:`compile_cache_problem`), import torch's
    compiler now with the variable pointing at a temporary folder, then set it back; return the
    problem (``""``: nothing was done).

    torch imports its compiler even with compile off (its optimizers' ``add_param_group`` and
    ops on the meta device ask for it), and that import makes the cache folder, so an unusable one
    stopped every run with a traceback. Imported here, it is not imported again; nothing compiles
    while the cache stays unusable (:func:`compile_unavailable_reason` says why), so the temporary
    folder holds nothing. For the entry point that owns the process (the CLI, a benchmark's run).
    """
    problem = compile_cache_problem()
    if not problem or "torch._dynamo" in sys.modules:
        return problem
    configured = os.environ[COMPILE_CACHE_ENV]
    with tempfile.TemporaryDirectory(prefix="sb3-snake-no-compile-cache-") as folder:
        os.environ[COMPILE_CACHE_ENV] = folder
        try:
            import torch._dynamo  # noqa: F401 - imported for its side effect, made harmless here
        finally:
            os.environ[COMPILE_CACHE_ENV] = configured
    return problem


def check_device(device: str, option: str = "--device", allow_auto: bool = True) -> str:
    """Return ``device`` if it is usable here, else raise one UsageError that says how to fix it.

    The one device check of the package: the CLI's options, ``TrainConfig``, the benchmarks,
    the capability report and the batched env all come here.
    """
    choices = DEVICES if allow_auto else DEVICES[1:]
    if device not in choices:
        raise UsageError(f"{option} must be {', '.join(choices[:-1])} or {choices[-1]}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        fallback = "cpu or auto" if allow_auto else "cpu"
        raise UsageError(f"{option} cuda was requested but no CUDA GPU is available; use {option} {fallback}")
    return device


def check_torch_device(device: str | torch.device, option: str = "device") -> torch.device:
    """A torch device (``cpu``, ``cuda``, ``cuda:N``) that exists here, or one UsageError."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise UsageError(f"{option} must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None
    if resolved.type == "cuda":
        check_device("cuda", option, allow_auto=False)
    return resolved


def resolve_device(device: str) -> torch.device:
    """The torch device for ``auto``, ``cpu`` or ``cuda`` (``auto``: CUDA when a GPU is there)."""
    check_device(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def system_info() -> dict[str, Any]:
    """Hardware and software versions, recorded with every benchmark result and training run."""
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_id": cpu_identity(),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "stable_baselines3": _package_version("stable-baselines3"),
        "gymnasium": _package_version("gymnasium"),
        "numpy": _package_version("numpy"),
        "sb3_snake": _package_version("sb3-snake"),
        "gpu": None,
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        info["gpu"] = {"name": properties.name, "memory_gib": round(properties.total_memory / 2**30, 1)}
    return info


def capabilities() -> dict[str, Any]:
    """Facts about the machine that decide which optimizations can be active."""
    return {**system_info(), "cpu_native_bf16": native_bf16("cpu"), "cuda_bf16": native_bf16("cuda")}
