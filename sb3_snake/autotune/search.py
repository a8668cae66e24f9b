"""The search behind ``auto``: which candidates are measured, in which stages, and what wins.

Pure given a measurement (:data:`Measure`, samples/s of one candidate over one slice) and the device's facts
(:class:`Machine`), so tests drive it with a formula. Three stages: (1) precision and attention kernel, eager, at
the run's batch size (:data:`PROBE_BATCH_SIZE` when that is auto too), bf16 only where the hardware computes it
natively, where the fastest must beat fp32 with PyTorch's own kernel by :data:`PLAIN_MARGIN`; (2)
``torch.compile`` of that winner, where available, which must win by :data:`COMPILE_MARGIN`; (3) the batch size,
eager: the smallest of :data:`BATCH_CANDIDATES` within :data:`BATCH_TOLERANCE` of the fastest. Every stage times
its candidates in turn, forwards then backwards, :data:`ROUNDS` slices each, and takes each one's median.
Design notes: docs/design-notes.md, "sb3_snake/autotune/search.py".
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from sb3_snake.acceleration.optimizations import compile_unavailable, probe_sdpa
from sb3_snake.acceleration.settings import AUTO, OptimizationSettings
from sb3_snake.common import system

#: Batch sizes tried when ``OPTIMAL_BATCH_SIZE=auto``.
BATCH_CANDIDATES = (256, 512, 1024, 2048)
#: Batch size of stages 1 and 2 when the batch size is auto too.
PROBE_BATCH_SIZE = 512
#: A batch within this fraction of the fastest counts as fast enough.
BATCH_TOLERANCE = 0.9
#: How much faster compiled must be than eager to be chosen.
COMPILE_MARGIN = 1.05
#: How much faster bf16 or a named attention kernel must be than fp32 with PyTorch's own kernel
#: (what an unmeasured ``auto`` stands for) to be chosen.
PLAIN_MARGIN = 1.05
#: Slices each candidate of a stage is timed in, the candidates in turn (an even count: every
#: other round runs backwards, so a steady drift cancels out of the medians).
ROUNDS = 4


@dataclass(frozen=True)
class Candidate:
    """One configuration measured: what each auto setting would be."""

    use_bf16: bool
    sdpa_backend: str  #: "flash", "efficient", "math", "cudnn", or "auto": PyTorch's choice without flash
    use_torch_compile: bool
    batch_size: int

    def settings(self, threads: int | str = "auto") -> OptimizationSettings:
        return OptimizationSettings(
            use_bf16=self.use_bf16,
            use_flash_attention=self.sdpa_backend == "flash",
            sdpa_backend=self.sdpa_backend,
            use_torch_compile=self.use_torch_compile,
            num_threads=threads,
        )


#: Samples/s of the gradient step of one candidate, over one timed slice (a stage calls it
#: :data:`ROUNDS` times per candidate, in turn).
Measure = Callable[[Candidate], float]


@dataclass(frozen=True)
class Machine:
    """What the search needs to know of the device, found by probes (injectable for tests)."""

    device_type: str
    hardware_bf16: bool
    compile_unavailable: str  #: why torch.compile is not used on this device, or ""
    kernels: tuple[str, ...]  #: SDPA kernel names that run here ("auto" always does)
    #: Those of ``kernels`` that run on bf16 inputs only (on CUDA: flash, and cudnn where it runs).
    bf16_only: tuple[str, ...] = ()

    @classmethod
    def probe(cls, device: torch.device) -> Machine:
        hardware_bf16 = system.native_bf16(device)
        names = ("flash", "efficient", "cudnn") if device.type == "cuda" else ("flash",)
        dtypes = (torch.float32, torch.bfloat16) if hardware_bf16 else (torch.float32,)
        runs = {name: [probe_sdpa(device, dtype, name)[0] for dtype in dtypes] for name in names}  # fp32 first
        kernels = tuple(name for name in names if any(runs[name]))
        bf16_only = tuple(name for name in kernels if not runs[name][0])
        return cls(device.type, hardware_bf16, compile_unavailable(device.type), (*kernels, "auto"), bf16_only)


def search(
    settings: OptimizationSettings,
    machine: Machine,
    measure: Measure,
    batch_candidates: Sequence[int] = BATCH_CANDIDATES,
    *,
    batch_size: int | str,
) -> dict[str, Any]:
    """Measure the candidates for ``settings``' auto switches and ``batch_size`` (a size, or
    ``auto``: measured over ``batch_candidates``), stage by stage; return the choice, every
    measurement and, per field, the evidence in words."""
    timings = _Timings(measure)
    auto = set(settings.auto_fields)
    evidence: dict[str, str] = {}
    bf16_options = _bf16_options(settings, machine, evidence)
    kernel_options = _kernel_options(settings, machine)
    batch = min(PROBE_BATCH_SIZE, max(batch_candidates)) if batch_size == AUTO else batch_size

    stage1 = _stage1_candidates(machine, bf16_options, kernel_options, batch)
    best, rule = _choose_precision_and_kernel(timings, stage1, bf16_options, kernel_options, batch)
    if "use_bf16" in auto and len(bf16_options) > 1:
        evidence["use_bf16"] = _precision_evidence(timings, stage1, best)
    if "use_flash_attention" in auto:
        evidence["use_flash_attention"] = _kernel_evidence(timings, stage1, best)
    if "use_torch_compile" in auto:
        best = _choose_compile(timings, machine, best, evidence)
    elif settings.use_torch_compile:
        best = replace(best, use_torch_compile=True)
    if batch_size == AUTO:
        best = _choose_batch_size(timings, best, batch_candidates, evidence)
    return {"chosen": asdict(best), "evidence": evidence, "rule": rule, "measurements": timings.records}


@dataclass
class _Timings:
    """The measurements of one search: each candidate's rate, and a record of every stage's."""

    measure: Measure
    rates: dict[Candidate, float] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)

    def rate(self, candidate: Candidate) -> float:
        return self.rates[candidate]

    def stage(self, stage: int, candidates: Sequence[Candidate]) -> None:
        """Time ``candidates`` in turn, :data:`ROUNDS` times, every other round backwards; each
        one's rate is the median of its slices."""
        slices: dict[Candidate, list[float]] = {candidate: [] for candidate in candidates}
        for round_ in range(ROUNDS):
            for candidate in candidates if round_ % 2 == 0 else candidates[::-1]:
                slices[candidate].append(self.measure(candidate))
        for candidate, rates in slices.items():
            self.rates[candidate] = statistics.median(rates)
            self.records.append(
                {"stage": stage, "candidate": asdict(candidate), "samples_per_second": self.rates[candidate]}
            )


def _stage1_candidates(
    machine: Machine, bf16_options: list[bool], kernel_options: list[str], batch: int | str
) -> list[Candidate]:
    """Stage 1's candidates: each precision with each kernel, eager (compiling each candidate
    would take minutes)."""
    every = [Candidate(bf16, kernel, False, batch) for bf16 in bf16_options for kernel in kernel_options]
    # A kernel that runs on bf16 inputs only is a candidate with bf16 only (timing it without would
    # time PyTorch's fallback under its name). Where nothing else is left (flash asked for, no
    # bf16) it stays, and the optimization layer reports it inactive with its reason.
    stage1 = [c for c in every if c.use_bf16 or c.sdpa_backend not in machine.bf16_only]
    return stage1 or every


def _choose_precision_and_kernel(
    timings: _Timings, stage1: list[Candidate], bf16_options: list[bool], kernel_options: list[str], batch: int | str
) -> tuple[Candidate, str]:
    """Stage 1: the fastest of ``stage1``, unless it does not beat the plain candidate by
    :data:`PLAIN_MARGIN`; and that rule in words ("" where it did not apply)."""
    if len(stage1) == 1:
        return stage1[0], ""  # nothing to choose: not measured
    timings.stage(1, stage1)
    best = max(stage1, key=timings.rate)
    plain = Candidate(min(bf16_options), "auto" if "auto" in kernel_options else kernel_options[0], False, batch)
    if plain not in stage1:
        return best, ""
    rule = (
        f"a change from {_precision_name(plain.use_bf16)} with {_kernel_name(plain.sdpa_backend)} "
        f"({timings.rate(plain):,.0f} samples/s) is kept only when it is at least {PLAIN_MARGIN:.2f}x as fast"
    )
    return (plain if timings.rate(best) < PLAIN_MARGIN * timings.rate(plain) else best), rule


def _precision_evidence(timings: _Timings, stage1: list[Candidate], best: Candidate) -> str:
    """Stage 1's precision against the fastest candidate in the other (on a tie, the one with the
    same kernel), which may differ in kernel too: then the rival is named whole, so one name never
    carries two rates."""
    others = [c for c in stage1 if c.use_bf16 != best.use_bf16]
    if not others:
        return f"chose {str(best.use_bf16).lower()}: the only precision {best.sdpa_backend} runs in here"
    rate = timings.rate
    other = max(others, key=lambda c: (rate(c), c.sdpa_backend == best.sdpa_backend))
    kernel = f" with {_kernel_name(other.sdpa_backend)}" if other.sdpa_backend != best.sdpa_backend else ""
    named = _precision_name(other.use_bf16) + kernel
    return _versus(best.use_bf16, _precision_name(best.use_bf16), named, rate(best), rate(other))


def _kernel_evidence(timings: _Timings, stage1: list[Candidate], best: Candidate) -> str:
    """Stage 1's kernel against the fastest candidate with another (on a tie, the one in the same
    precision), named whole as in :func:`_precision_evidence`."""
    others = [c for c in stage1 if c.sdpa_backend != best.sdpa_backend]
    if not others:
        return f"chose {_kernel_name(best.sdpa_backend)}: the only kernel that runs here"
    rate = timings.rate
    other = max(others, key=lambda c: (rate(c), c.use_bf16 == best.use_bf16))
    precision = f" in {_precision_name(other.use_bf16)}" if other.use_bf16 != best.use_bf16 else ""
    named = _kernel_name(other.sdpa_backend) + precision
    chosen_kernel = "PyTorch's default kernel" if best.sdpa_backend == "auto" else best.sdpa_backend
    return _versus(chosen_kernel, None, named, rate(best), rate(other))


def _choose_compile(timings: _Timings, machine: Machine, best: Candidate, evidence: dict[str, str]) -> Candidate:
    """Stage 2: compile, against the eager winner timed again beside it."""
    if machine.compile_unavailable:
        evidence["use_torch_compile"] = f"chose false: {machine.compile_unavailable} (not measured)"
        return best
    compiled = replace(best, use_torch_compile=True)
    timings.stage(2, [best, compiled])
    rate = timings.rate
    chosen, other = (compiled, best) if rate(compiled) >= COMPILE_MARGIN * rate(best) else (best, compiled)
    evidence["use_torch_compile"] = _versus(
        chosen.use_torch_compile, _compiled_name(chosen), _compiled_name(other), rate(chosen), rate(other)
    )
    evidence["use_torch_compile"] += f" (compiled must be at least {COMPILE_MARGIN:.2f}x as fast)"
    return chosen


def _choose_batch_size(
    timings: _Timings, best: Candidate, batch_candidates: Sequence[int], evidence: dict[str, str]
) -> Candidate:
    """Stage 3: batch size, eager (a compiled update is compiled for one batch size)."""
    sizes = [replace(best, use_torch_compile=False, batch_size=size) for size in batch_candidates]
    timings.stage(3, sizes)
    rates = {candidate.batch_size: timings.rate(candidate) for candidate in sizes}
    chosen = smallest_fast_enough(rates)
    listed = ", ".join(f"{size}: {value:,.0f}" for size, value in rates.items())
    evidence["batch_size"] = (
        f"chose {chosen}: the smallest batch within {BATCH_TOLERANCE:.0%} of the fastest, "
        f"measured {listed} samples/s eager"
    )
    return replace(best, batch_size=chosen)


def smallest_fast_enough(rates: dict[int, float], tolerance: float = BATCH_TOLERANCE) -> int:
    """The smallest batch size whose samples/s is within ``tolerance`` of the fastest."""
    threshold = tolerance * max(rates.values())
    return min(size for size, value in rates.items() if value >= threshold)


def _bf16_options(settings: OptimizationSettings, machine: Machine, evidence: dict[str, str]) -> list[bool]:
    if settings.use_bf16 != AUTO:
        return [settings.use_bf16]
    if not machine.hardware_bf16:
        where = "this GPU" if machine.device_type == "cuda" else "this CPU"
        evidence["use_bf16"] = f"chose false: {where} has no native bf16 (not measured)"
        return [False]
    return [False, True]


def _kernel_options(settings: OptimizationSettings, machine: Machine) -> list[str]:
    if settings.sdpa_backend != AUTO:
        return [settings.sdpa_backend]
    if settings.use_flash_attention != AUTO:
        return ["flash" if settings.use_flash_attention else "auto"]
    return list(machine.kernels)


def _precision_name(use_bf16: bool) -> str:
    return "bf16" if use_bf16 else "fp32"


def _kernel_name(backend: str) -> str:
    return "PyTorch's default kernel (flash excluded)" if backend == "auto" else f"the {backend} kernel"


def _compiled_name(candidate: Candidate) -> str:
    return "compiled" if candidate.use_torch_compile else "eager"


def _versus(chosen: Any, chosen_name: str | None, other_name: str, chosen_rate: float, other_rate: float) -> str:
    """``chose <value> (<name>): <rate> samples/s against <rate> for <the other>``, in plain words."""
    value = str(chosen).lower() if isinstance(chosen, bool) else str(chosen)
    named = f" ({chosen_name})" if chosen_name else ""
    return f"chose {value}{named}: {chosen_rate:,.0f} samples/s against {other_rate:,.0f} for {other_name}"


def batch_candidates(max_batch_size: int | None = None, divides: bool = False) -> tuple[int, ...]:
    """:data:`BATCH_CANDIDATES` that fit ``max_batch_size`` (SnakeDQN's replay buffer) or, with
    ``divides``, that divide it (PQN's rollout, cut into minibatches of one size); else that size alone."""
    if max_batch_size is None:
        return BATCH_CANDIDATES
    fits = (lambda size: max_batch_size % size == 0) if divides else (lambda size: size <= max_batch_size)
    return tuple(size for size in BATCH_CANDIDATES if fits(size)) or (max_batch_size,)
