"""The optimization layer: what this machine supports, what will be active, and applying it.

Each optimization is decided once, by small pure functions (the CUDA-only rules testable on a CPU), into a
:class:`Decision`: requested, active, and the reason when a requested one cannot be active.
:class:`ActiveOptimizations` holds a model's decisions and builds the one context around the networks' forward
passes (:func:`forward_context`): FlashAttention or one ``SDPA_BACKEND`` kernel, and BF16 autocast.
``torch.compile`` (on a CPU only; run by :mod:`sb3_snake.update`), the CUDA graph and the thread count
(:func:`choose_num_threads`) are decided here too; threads are set only by the entry point that owns the
process, through :func:`torch_threads`, never by building or loading a model.
Design notes: docs/design-notes.md, "sb3_snake/acceleration/optimizations.py".
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common import system

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

_ALL_BACKENDS = [
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.CUDNN_ATTENTION,
    SDPBackend.MATH,
]
_WITHOUT_FLASH = [backend for backend in _ALL_BACKENDS if backend != SDPBackend.FLASH_ATTENTION]
#: ``SDPA_BACKEND`` names and their kernels.
SDPA_KERNELS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


@dataclass(frozen=True)
class Decision:
    """Whether an optimization was asked for, whether it is active, and why not when it is not
    (or, for an active one, a qualification such as when it starts)."""

    requested: bool
    active: bool
    reason: str = ""

    @classmethod
    def on(cls, reason: str = "") -> Decision:
        """Asked for and active (``reason``: a qualification, such as when it starts)."""
        return cls(True, True, reason)

    @classmethod
    def off(cls, reason: str) -> Decision:
        """Asked for but not active, because of ``reason``."""
        return cls(True, False, reason)

    @classmethod
    def not_requested(cls) -> Decision:
        """Not asked for, so not active."""
        return cls(False, False)

    def describe(self) -> str:
        if self.active:
            return f"enabled ({self.reason})" if self.reason else "enabled"
        return "disabled" if not self.requested else f"disabled ({self.reason})"


# ---------------------------------------------------------------------- decisions (pure)


def decide_bf16(requested: bool, device_type: str, hardware_bf16: bool) -> Decision:
    """BF16 autocast is active when requested and the device computes bf16 natively."""
    if not requested:
        return Decision.not_requested()
    if not hardware_bf16:
        reason = "this GPU has no bf16 support" if device_type == "cuda" else "this CPU has neither AVX512-BF16 nor AMX"
        return Decision.off(reason)
    return Decision.on()


def decide_flash(requested: bool, device_type: str, bf16_active: bool, kernel_available: bool = True) -> Decision:
    """FlashAttention is active when requested and its kernel can run for the device and dtype."""
    if not requested:
        return Decision.not_requested()
    if device_type == "cuda" and not bf16_active:
        return Decision.off(
            "FlashAttention on CUDA needs bf16 or fp16 inputs and BF16 is off; using the other SDPA backends"
        )
    if not kernel_available:
        return Decision.off(f"the flash SDPA kernel cannot run on {device_type} with torch {torch.__version__}")
    return Decision.on()


def decide_sdpa_backend(backend: str, device_type: str, kernel_runs: bool) -> Decision:
    """A named non-flash SDPA kernel is active when it runs for the device and dtype
    (``auto`` and ``flash`` are not requests of this decision: flash has its own)."""
    if backend in ("auto", "flash"):
        return Decision.not_requested()
    if not kernel_runs:
        return Decision.off(
            f"the {backend} SDPA kernel cannot run on {device_type} here; PyTorch chooses among the others"
        )
    return Decision.on()


def decide_compile(requested: bool, unavailable_reason: str = "") -> Decision:
    if not requested:
        return Decision.not_requested()
    if unavailable_reason:
        return Decision.off(unavailable_reason)
    return Decision.on()


#: Why ``torch.compile`` is off on a GPU: see :func:`compile_unavailable`.
COMPILE_ON_CPU_ONLY = (
    "compiled on a CPU only: on CUDA the compiler would run in the training process, where a crash of it "
    "ends the run (the compile child is built for the CPU)"
)


def compile_unavailable(device_type: str) -> str:
    """Why ``torch.compile`` is not used for a model on ``device_type``, or ``""`` when it is.

    Only a CPU compiles: there a child process compiles the whole gradient step and training
    loads what it saved (:mod:`sb3_snake.update.child`), so no crash of the compiler can take
    training down. On CUDA the compile ran in the training process (the networks compiled in
    place): a crash of the compiler there would be one of training, and a cold compile stopped
    training while it ran; its gain over the captured step (the CUDA graph, which already
    removes the launch cost of the step's many small kernels) was never measured. Until a compile
    child is built and measured for CUDA, a GPU trains with the CUDA graph and no compile
    (docs/gpu.md). On a CPU: :func:`~sb3_snake.common.system.compile_unavailable_reason`.
    """
    if device_type != "cpu":
        return COMPILE_ON_CPU_ONLY
    return system.compile_unavailable_reason()


def use_device_replay_buffer(device_type: str) -> tuple[bool, str]:
    """Whether a model on ``device_type`` keeps its replay buffer on the device, and why.

    On CUDA, always: SB3's buffer copies every batch from host memory. On the CPU, no:
    ``sb3-snake benchmark-replay`` found the two samplers within a small fraction of a CPU
    gradient step of each other, 1-step and n-step (benchmark_results/replay_sampling_*.json), so
    the CPU keeps SB3's own buffer, with which every CPU result was measured.
    """
    if device_type == "cuda":
        return True, "CUDA: sampling on the device saves a host-to-device copy per batch"
    return False, "CPU: SB3's NumPy sampling measured as fast or faster"


def decide_cuda_graph(requested: bool, device_type: str, device_buffer: bool) -> Decision:
    """The gradient step is captured as one CUDA graph when requested, on CUDA, with the replay
    buffer on the device (a host buffer copies every batch from host memory, which a graph
    cannot redo)."""
    if not requested:
        return Decision.not_requested()
    if device_type != "cuda":
        return Decision.off(f"CUDA graphs need a CUDA device, not {device_type}")
    if not device_buffer:
        return Decision.off("the replay buffer is in host memory; a graph needs it on the device")
    return Decision.on()


def choose_num_threads(setting: int | str, device_type: str, cpu_cores: int | None) -> tuple[int, str]:
    """The torch intra-op thread count a command starts with for ``setting``, and why.

    ``auto`` rule: when the networks train on the CPU, every core (the gradient step's matrix
    products divide among them, and on a quiet machine more threads are faster than one), and a
    training run then measures that count against one thread while it trains
    (:func:`adaptive_thread_counts`), because the machine may not stay quiet; when they train on a
    GPU, the CPU only feeds it, so one thread per core beyond the first, at most 4 (a rule, not
    yet measured on a GPU machine).
    """
    cores = max(1, cpu_cores or 1)
    if setting != "auto":
        return int(setting), "set explicitly"
    if device_type == "cuda":
        return max(1, min(4, cores - 1)), "auto: GPU training, the CPU only feeds it"
    adaptive = adaptive_thread_counts(setting, device_type, cores)
    if adaptive:
        choices = " or ".join(map(str, adaptive))
        return cores, f"auto: CPU training, one per core to start, then {choices}, measured while training"
    return cores, "auto: CPU training, one per core"


def adaptive_thread_counts(setting: int | str, device_type: str, cpu_cores: int | None) -> tuple[int, ...]:
    """The thread counts a training run chooses between as it trains (:mod:`sb3_snake.acceleration.threads`),
    the starting one first; empty where the count stays as :func:`choose_num_threads` set it.

    Only ``auto`` on a CPU of more than one core: one thread per core is fastest while every core
    is free and many times slower than one thread while another process holds a core (threads
    that wait for each other wait for the busiest core), and which of the two holds can change
    within a run. An explicit count is the user's and stays; a GPU run's CPU threads only feed
    the device.
    """
    cores = max(1, cpu_cores or 1)
    if setting != "auto" or device_type != "cpu" or cores == 1:
        return ()
    return (cores, 1)


def threads_for(settings: OptimizationSettings, device: str) -> int:
    """The thread count a run with ``settings`` on ``device`` (``auto``, ``cpu`` or ``cuda``)
    trains with: what an entry point passes to :func:`torch_threads`."""
    return choose_num_threads(settings.num_threads, system.resolve_device(device).type, system.cpu_cores())[0]


# ---------------------------------------------------------------------- probes (run real ops)


def probe_bf16(device: torch.device) -> tuple[bool, str]:
    """Run a tiny bf16 matmul under autocast on ``device``."""
    try:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = torch.ones(8, 8, device=device) @ torch.ones(8, 8, device=device)
        ok = out.dtype == torch.bfloat16 and float(out[0, 0]) == 8.0
        return ok, "" if ok else f"autocast produced {out.dtype}"
    except RuntimeError as error:
        return False, str(error).splitlines()[0]


def probe_sdpa(device: torch.device, dtype: torch.dtype, backend: str) -> tuple[bool, str]:
    """Run a tiny SDPA restricted to the ``backend`` kernel (an ``SDPA_KERNELS`` name).

    On CUDA, PyTorch explains a refused kernel in warnings ("Expected query, key and value to
    all be of dtype: {Half, BFloat16}...") and then raises "No available kernel"; the warnings
    are kept out of the user's terminal and the explaining one becomes the reason.
    """
    q = torch.ones(1, 1, 4, 8, device=device, dtype=dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([SDPA_KERNELS[backend]]):
                torch.nn.functional.scaled_dot_product_attention(q, q, q)
            return True, ""
        except RuntimeError as error:
            messages = (str(warning.message).split(" (Triggered internally")[0] for warning in caught)
            reasons = [m for m in messages if "not used because" not in m and "runtime disabled" not in m]
            return False, reasons[0] if reasons else str(error).splitlines()[0]


def probe_flash(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    """Run a tiny SDPA restricted to the flash backend on ``device`` in ``dtype``."""
    return probe_sdpa(device, dtype, "flash")


# ---------------------------------------------------------------------- active set for a model


@dataclass(frozen=True)
class ActiveOptimizations:
    """What a model runs with: the settings, the device, and each decision."""

    settings: OptimizationSettings
    device: str
    bf16: Decision
    flash: Decision
    compile: Decision
    num_threads: int
    num_threads_reason: str
    sdpa: Decision = Decision.not_requested()  #: a named non-flash SDPA kernel
    cuda_graph: Decision = Decision.not_requested()  #: the gradient step replayed as one CUDA graph
    adaptive_threads: tuple[int, ...] = ()  #: counts a training run measures and chooses between

    @classmethod
    def decide(
        cls, settings: OptimizationSettings, device: torch.device | str, device_buffer: bool | None = None
    ) -> ActiveOptimizations:
        """What is active with ``settings`` on ``device``; ``auto`` settings nobody resolved
        (:mod:`sb3_snake.autotune`) take their unmeasured values
        (:data:`~sb3_snake.acceleration.settings.UNMEASURED`), and their sources say so.
        ``device_buffer``: whether the model's replay buffer is on the device (``None``: the
        default buffer for ``device``, as a model built there gets)."""
        settings = settings.without_auto() if settings.auto_fields else settings
        device = torch.device(device)
        bf16 = decide_bf16(settings.use_bf16, device.type, system.native_bf16(device))
        kernel_dtype = torch.bfloat16 if bf16.active else torch.float32
        flash_runs = probe_flash(device, kernel_dtype)[0] if settings.use_flash_attention else True
        flash = decide_flash(settings.use_flash_attention, device.type, bf16.active, flash_runs)
        backend = settings.sdpa_backend
        backend_runs = backend in ("auto", "flash") or probe_sdpa(device, kernel_dtype, backend)[0]
        sdpa = decide_sdpa_backend(backend, device.type, backend_runs)
        # Asked only when requested: the question imports the compiler, which compile off never needs.
        unavailable = compile_unavailable(device.type) if settings.use_torch_compile else ""
        compile_decision = decide_compile(settings.use_torch_compile, unavailable)
        cores = system.cpu_cores()
        threads, why = choose_num_threads(settings.num_threads, device.type, cores)
        adaptive = adaptive_thread_counts(settings.num_threads, device.type, cores)
        if device_buffer is None:
            device_buffer = use_device_replay_buffer(device.type)[0]
        graph = decide_cuda_graph(settings.use_cuda_graph, device.type, device_buffer)
        return cls(settings, str(device), bf16, flash, compile_decision, threads, why, sdpa, graph, adaptive)

    def without_attention(self, network: str) -> ActiveOptimizations:
        """These decisions for ``network``, which runs no ``scaled_dot_product_attention`` (an MLP,
        the CNN): an attention kernel asked for is reported off, with the reason, since choosing
        one changes nothing it runs."""
        idle = f"{network} has no attention, so no SDPA call for a kernel to run"
        return replace(
            self,
            flash=Decision.off(idle) if self.flash.requested else self.flash,
            sdpa=Decision.off(idle) if self.sdpa.requested else self.sdpa,
        )

    @property
    def sdpa_backends(self) -> list[SDPBackend]:
        """The kernels scaled-dot-product attention may use."""
        if self.flash.active:
            return [SDPBackend.FLASH_ATTENTION]
        if self.sdpa.active:
            return [SDPA_KERNELS[self.settings.sdpa_backend]]
        return _WITHOUT_FLASH

    @property
    def sdpa_description(self) -> str:
        """The attention kernel in words, for the summary."""
        if self.flash.active:
            return "flash"
        if self.sdpa.active:
            return self.settings.sdpa_backend
        choice = "PyTorch's choice without flash"
        return f"{choice} ({self.sdpa.reason})" if self.sdpa.requested else choice

    @property
    def device_type(self) -> str:
        return torch.device(self.device).type

    def forward_context(self) -> contextlib.AbstractContextManager[None]:
        """:func:`forward_context` as decided, around a forward pass."""
        return forward_context(self.device_type, self.bf16.active, self.sdpa_backends)

    def as_dict(self) -> dict[str, Any]:
        """Requested and active state of every optimization, for summaries and W&B."""
        return {
            "device": self.device,
            "compile_mode": self.settings.compile_mode,
            "num_threads": self.num_threads,
            "adaptive_threads": list(self.adaptive_threads),
            "sdpa_backend": self.sdpa_description,
            **{
                f"{name}_{key}": value
                for name in ("bf16", "flash_attention", "torch_compile", "cuda_graph")
                for key, value in asdict(self._decision(name)).items()
            },
            "sources": dict(self.settings.sources),
            "auto": dict(self.settings.auto_record) or None,
        }

    def _decision(self, name: str) -> Decision:
        return {
            "bf16": self.bf16,
            "flash_attention": self.flash,
            "torch_compile": self.compile,
            "cuda_graph": self.cuda_graph,
        }[name]


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op thread count set to ``count`` inside, and restored on leaving."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextlib.contextmanager
def forward_context(device_type: str, bf16: bool, sdpa_backends: Sequence[SDPBackend | str]) -> Iterator[None]:
    """The SDPA kernels allowed (backends or their names) and bf16 autocast when ``bf16``: the
    context of every forward pass, eager or compiled (a compiled update is compiled, loaded and
    run in the same one)."""
    backends = [getattr(SDPBackend, backend) if isinstance(backend, str) else backend for backend in sdpa_backends]
    with contextlib.ExitStack() as stack:
        stack.enter_context(sdpa_kernel(backends))
        if bf16:
            stack.enter_context(torch.autocast(device_type, dtype=torch.bfloat16))
        yield
