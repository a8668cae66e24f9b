"""Settings measured on the machine that runs them: resolving ``auto``.

``OPTIMAL_BATCH_SIZE``, ``USE_BF16``, ``USE_FLASH_ATTENTION`` (with ``SDPA_BACKEND``) and
``USE_TORCH_COMPILE`` accept ``auto``. What is fastest differs between machines (bf16 with
compile was 1.3x faster than fp32 on a Zen 4 CPU with AVX512-BF16 and slower on a Xeon
without it), so a value measured once and committed is wrong somewhere else. :func:`resolve_auto`
replaces each ``auto`` by a value chosen from a short measurement of the gradient step of the
very policy the run trains, at the thread count it trains with, in three stages:

1. **precision and attention kernel**, eager (compiling every candidate would take minutes on
   a CPU), at the run's batch size (512 when that is auto too): bf16 on and off (on only where
   the hardware computes bf16 natively; without it bf16 is not measured and stays off) against
   each SDPA kernel that runs on the device (flash, and PyTorch's choice without flash; on CUDA
   also efficient and cudnn, flash only with bf16). The fastest wins if it is
   :data:`PLAIN_MARGIN` faster than fp32 with PyTorch's own kernel, the value an unmeasured
   ``auto`` stands for; a closer race keeps that (a 3% lead is within the measurement's noise,
   and eager bf16 at batch 128 was 0.74x fp32 on the Zen 4 machine where noise made it win).
2. **torch.compile**: where it is unavailable it stays off; otherwise the winner of stage 1 is
   compiled and measured. Compile must be :data:`COMPILE_MARGIN` faster to win, because it
   costs a warm-up at the start of every run (the measurement's compile also warms the
   inductor cache, which the run's own compile then reuses).
3. **batch size**, eager, over :data:`BATCH_CANDIDATES`: the smallest within
   :data:`BATCH_TOLERANCE` of the fastest (DQN at a fixed replay ratio learns per update, so a
   much larger batch that is barely faster is a worse choice; the same rule as ``sb3-snake
   benchmark --write-env``).

Every stage times its candidates in turn, forwards then backwards (A B C, C B A, A B C, ...),
:data:`ROUNDS` slices each, and takes each one's median: the 2-core machines' speed drifted by
a fifth within minutes, and candidates timed one after the other took that drift for a
difference between them; in this order a steady drift weighs on every candidate alike.

Settings given a plain value (flags, the environment, ``.env``) are not measured: they win
over ``auto``. The result is cached per machine in :func:`cache_dir` (``~/.cache/sb3-snake``,
or ``$XDG_CACHE_HOME/sb3-snake``, or ``$SB3_SNAKE_CACHE_DIR``), keyed by the device's name, core
count, thread count, torch version, the policy's shape and the settings that were asked for; a
cache file that cannot be read or does not match is measured again, never fatal, and a cache
that cannot be written only costs the next run the measurement again, and so does a measurement
during which other processes (or the host) took half a core or more: it decides that run only.
Each resolved field's source tells the story, e.g. ``auto: chose true, measured 16,300 vs 12,600
samples/s (true vs false) on 2026-11-22; cache ~/.cache/sb3-snake/auto-....json``; the
configuration summary and ``python test_optimizations.py`` print it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.logger import Logger

from sb3_snake.acceleration.optimizations import probe_sdpa
from sb3_snake.acceleration.settings import AUTO, OptimizationSettings
from sb3_snake.common import system
from sb3_snake.common.paths import write_text_atomically
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.dqn.update.captured import WARMUP_STEPS
from sb3_snake.envs import BatchedSnakeVecEnv

logger = logging.getLogger(__name__)

#: Environment variable naming the cache folder.
CACHE_ENV = "SB3_SNAKE_CACHE_DIR"
#: Bumped when the measurement changes, so old cache files are measured again.
CACHE_VERSION = 2
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
#: Cores taken by other processes (or the host) during a measurement above which it is not cached.
CONTENDED_CORES = 0.5
#: Seconds of timed gradient steps per measured configuration (warm-up not counted).
MEASURE_SECONDS = 0.6
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
            batch_size=self.batch_size,
            use_bf16=self.use_bf16,
            use_flash_attention=self.sdpa_backend == "flash",
            sdpa_backend=self.sdpa_backend,
            use_torch_compile=self.use_torch_compile,
            num_threads=threads,
        )


#: Samples/s of the gradient step of one candidate, over one timed slice (a stage calls it
#: :data:`ROUNDS` times per candidate, in turn).
Measure = Callable[[Candidate], float]


# ---------------------------------------------------------------------- the search (pure, given a measure)


@dataclass(frozen=True)
class Machine:
    """What the search needs to know of the device, found by probes (injectable for tests)."""

    device_type: str
    hardware_bf16: bool
    compile_unavailable: str  #: why torch.compile cannot run, or ""
    kernels: tuple[str, ...]  #: SDPA kernel names that run here ("auto" always does)
    #: Those of ``kernels`` that run on bf16 inputs only (on CUDA: flash, and cudnn where it runs).
    bf16_only: tuple[str, ...] = ()

    @classmethod
    def probe(cls, device: torch.device) -> Machine:
        hardware_bf16 = system.cuda_supports_bf16() if device.type == "cuda" else system.cpu_has_native_bf16()
        names = ("flash", "efficient", "cudnn") if device.type == "cuda" else ("flash",)
        dtypes = (torch.float32, torch.bfloat16) if hardware_bf16 else (torch.float32,)
        runs = {name: [probe_sdpa(device, dtype, name)[0] for dtype in dtypes] for name in names}  # fp32 first
        kernels = tuple(name for name in names if any(runs[name]))
        bf16_only = tuple(name for name in kernels if not runs[name][0])
        return cls(device.type, hardware_bf16, system.compile_unavailable_reason(), (*kernels, "auto"), bf16_only)


def search(
    settings: OptimizationSettings,
    machine: Machine,
    measure: Measure,
    batch_candidates: Sequence[int] = BATCH_CANDIDATES,
) -> dict[str, Any]:
    """Measure the candidates for ``settings``' auto fields, stage by stage; return the choice,
    every measurement and, per field, the evidence in words."""
    measured: dict[Candidate, float] = {}
    records: list[dict[str, Any]] = []

    def measure_stage(stage: int, candidates: Sequence[Candidate]) -> None:
        """Time ``candidates`` in turn, :data:`ROUNDS` times, every other round backwards; each
        one's rate is the median of its slices."""
        slices: dict[Candidate, list[float]] = {candidate: [] for candidate in candidates}
        for round_ in range(ROUNDS):
            for candidate in candidates if round_ % 2 == 0 else candidates[::-1]:
                slices[candidate].append(measure(candidate))
        for candidate, rates in slices.items():
            measured[candidate] = statistics.median(rates)
            records.append({"stage": stage, "candidate": asdict(candidate), "samples_per_second": measured[candidate]})

    rate = measured.__getitem__
    auto = set(settings.auto_fields)
    evidence: dict[str, str] = {}
    bf16_options = _bf16_options(settings, machine, evidence)
    kernel_options = _kernel_options(settings, machine)
    batch = min(PROBE_BATCH_SIZE, max(batch_candidates)) if "batch_size" in auto else settings.batch_size

    # Stage 1: precision and attention kernel, eager (compiling each candidate would take minutes).
    every = [Candidate(bf16, kernel, False, batch) for bf16 in bf16_options for kernel in kernel_options]
    # A kernel that runs on bf16 inputs only is a candidate with bf16 only (timing it without would
    # time PyTorch's fallback under its name). Where nothing else is left (flash asked for, no
    # bf16) it stays, and the optimization layer reports it inactive with its reason.
    stage1 = [c for c in every if c.use_bf16 or c.sdpa_backend not in machine.bf16_only]
    stage1 = stage1 or every
    if len(stage1) == 1:
        best, margin = stage1[0], ""  # nothing to choose: not measured
    else:
        measure_stage(1, stage1)
        best = max(stage1, key=rate)
        plain = Candidate(min(bf16_options), "auto" if "auto" in kernel_options else kernel_options[0], False, batch)
        margin = (
            f"; anything but {_precision_name(plain.use_bf16)} with {_kernel_name(plain.sdpa_backend)} "
            f"({rate(plain):,.0f} samples/s) needs {PLAIN_MARGIN:.2f}x it"
            if plain in stage1
            else ""
        )
        if margin and rate(best) < PLAIN_MARGIN * rate(plain):
            best = plain
    # Each setting is set against the fastest candidate without its choice (on a tie, the one
    # that shares the other setting), which may differ in the other setting too: then the rival
    # is named whole, so one name never carries two rates.
    if "use_bf16" in auto and len(bf16_options) > 1:
        others = [c for c in stage1 if c.use_bf16 != best.use_bf16]
        if others:
            other = max(others, key=lambda c: (rate(c), c.sdpa_backend == best.sdpa_backend))
            kernel = f" with {_kernel_name(other.sdpa_backend)}" if other.sdpa_backend != best.sdpa_backend else ""
            named = str(other.use_bf16).lower() + kernel
            evidence["use_bf16"] = _versus(best.use_bf16, named, rate(best), rate(other)) + margin
        else:
            evidence["use_bf16"] = (
                f"chose {str(best.use_bf16).lower()}: the only precision {best.sdpa_backend} runs in here"
            )
    others = [c for c in stage1 if c.sdpa_backend != best.sdpa_backend]
    if "use_flash_attention" in auto and others:
        other = max(others, key=lambda c: (rate(c), c.use_bf16 == best.use_bf16))
        precision = f" in {_precision_name(other.use_bf16)}" if other.use_bf16 != best.use_bf16 else ""
        named = _kernel_name(other.sdpa_backend) + precision
        evidence["use_flash_attention"] = (
            _versus(_kernel_name(best.sdpa_backend), named, rate(best), rate(other)) + margin
        )
    elif "use_flash_attention" in auto:
        evidence["use_flash_attention"] = f"chose {_kernel_name(best.sdpa_backend)}: the only kernel that runs here"

    # Stage 2: compile, against the eager winner timed again beside it.
    if "use_torch_compile" in auto:
        if machine.compile_unavailable:
            evidence["use_torch_compile"] = f"chose false: {machine.compile_unavailable} (not measured)"
        else:
            compiled = replace(best, use_torch_compile=True)
            measure_stage(2, [best, compiled])
            chosen, other = (compiled, best) if rate(compiled) >= COMPILE_MARGIN * rate(best) else (best, compiled)
            evidence["use_torch_compile"] = _versus(
                chosen.use_torch_compile, other.use_torch_compile, rate(chosen), rate(other)
            )
            evidence["use_torch_compile"] += f", {COMPILE_MARGIN:.2f}x needed"
            best = chosen
    elif settings.use_torch_compile:
        best = replace(best, use_torch_compile=True)

    # Stage 3: batch size, eager (a compiled network recompiles for each new batch size).
    if "batch_size" in auto:
        sizes = [replace(best, use_torch_compile=False, batch_size=size) for size in batch_candidates]
        measure_stage(3, sizes)
        rates = {candidate.batch_size: rate(candidate) for candidate in sizes}
        chosen = smallest_fast_enough(rates)
        listed = ", ".join(f"{size}: {value:,.0f}" for size, value in rates.items())
        evidence["batch_size"] = (
            f"chose {chosen}, measured {listed} samples/s eager (smallest within {BATCH_TOLERANCE:.0%} of the fastest)"
        )
        best = replace(best, batch_size=chosen)

    return {"chosen": asdict(best), "evidence": evidence, "measurements": records}


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
    return "PyTorch's choice without flash" if backend == "auto" else backend


def _versus(chosen: Any, other: Any, chosen_rate: float, other_rate: float) -> str:
    def word(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    return (
        f"chose {word(chosen)}, measured {chosen_rate:,.0f} vs {other_rate:,.0f} samples/s "
        f"({word(chosen)} vs {word(other)})"
    )


# ---------------------------------------------------------------------- the real measurement


def fill_replay_buffer(model: SnakeDQN, env: BatchedSnakeVecEnv, transitions: int, seed: int = 0) -> None:
    """Add at least ``transitions`` real transitions of uniformly random play to the model's buffer."""
    obs, rng = env.reset(), np.random.default_rng(seed)
    while model.replay_buffer.size() * env.num_envs < transitions and not model.replay_buffer.full:
        actions = rng.integers(4, size=env.num_envs)
        next_obs, rewards, dones, infos = env.step(actions)
        model.replay_buffer.add(obs, next_obs, actions, rewards, dones, infos)
        obs = next_obs


def filled_model(
    settings: OptimizationSettings,
    device: torch.device | str,
    board_size: int,
    transitions: int,
    policy_kwargs: dict[str, Any] | None = None,
    n_envs: int = 256,
    countdown: bool = False,
) -> SnakeDQN:
    """A fresh SnakeDQN for timing gradient steps: ``transitions`` of random play in its
    buffer, learning from the first step, no logging."""
    env = BatchedSnakeVecEnv(n_envs, board_size=board_size, device=device, seed=0, countdown=countdown)
    model = SnakeDQN(
        "AttentionPolicy",
        env,
        optimizations=settings,
        policy_kwargs=policy_kwargs,
        buffer_size=transitions,
        learning_starts=0,
        device=device,
        seed=0,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))
    fill_replay_buffer(model, env, transitions)
    return model


class GradientStepMeter:
    """The :data:`Measure` of a real run: samples/s of ``SnakeDQN.train`` per candidate (with
    the CUDA graph as the run asks), one timed slice of at least ``seconds`` a call. A
    candidate's first call builds its model and runs untimed warm-up steps (compilation and the
    graph's capture included); the model is kept for its later slices."""

    def __init__(
        self,
        device: torch.device,
        policy_kwargs: dict[str, Any],
        board_size: int,
        seconds: float = MEASURE_SECONDS / ROUNDS,
        countdown: bool = False,
        use_cuda_graph: bool = True,
    ):
        self.device, self.policy_kwargs, self.board_size = device, policy_kwargs, board_size
        self.seconds, self.countdown, self.use_cuda_graph = seconds, countdown, use_cuda_graph
        self.models: dict[Candidate, SnakeDQN] = {}

    def __call__(self, candidate: Candidate) -> float:
        model = self.models.get(candidate) or self._build(candidate)
        if self.device.type == "cuda":
            torch.cuda.synchronize()  # the clock starts when the work before it has finished
        steps, start = 0, time.perf_counter()
        while steps < 1 or time.perf_counter() - start < self.seconds:
            model.train(gradient_steps=1, batch_size=candidate.batch_size)
            steps += 1
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return steps * candidate.batch_size / (time.perf_counter() - start)

    def _build(self, candidate: Candidate) -> SnakeDQN:
        transitions = max(2048, 2 * candidate.batch_size)
        settings = replace(candidate.settings(torch.get_num_threads()), use_cuda_graph=self.use_cuda_graph)
        model = filled_model(
            settings, self.device, self.board_size, transitions, self.policy_kwargs, n_envs=64, countdown=self.countdown
        )
        model.train(gradient_steps=WARMUP_STEPS + 1, batch_size=candidate.batch_size)
        self.models[candidate] = model
        return model


# ---------------------------------------------------------------------- cache and resolution


def cache_dir() -> Path:
    """Where measured choices are kept: ``$SB3_SNAKE_CACHE_DIR``, else the user's cache folder."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sb3-snake"


def batch_candidates(max_batch_size: int | None = None) -> tuple[int, ...]:
    """:data:`BATCH_CANDIDATES` that fit ``max_batch_size`` (the replay buffer), or that size alone."""
    if max_batch_size is None:
        return BATCH_CANDIDATES
    return tuple(size for size in BATCH_CANDIDATES if size <= max_batch_size) or (max_batch_size,)


def cache_key(
    settings: OptimizationSettings,
    device: torch.device,
    policy_kwargs: dict[str, Any],
    board_size: int,
    max_batch_size: int | None = None,
    countdown: bool = False,
) -> dict[str, Any]:
    """What a measurement depends on: machine, software, threads, policy (and the boards it
    reads) and the settings asked for."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else system.cpu_model()
    asked = {
        key: getattr(settings, key)
        for key in (
            "batch_size",
            "use_bf16",
            "use_flash_attention",
            "sdpa_backend",
            "use_torch_compile",
            "compile_mode",
            "use_cuda_graph",
        )
    }
    return {
        "version": CACHE_VERSION,
        "device": device.type,
        "device_name": name,
        "cores": system.cpu_cores(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "board_size": board_size,
        "countdown": countdown,
        "policy_kwargs": json.loads(json.dumps(policy_kwargs, sort_keys=True, default=str)),
        "asked": asked,
        "batch_candidates": list(batch_candidates(max_batch_size)) if settings.batch_size == AUTO else None,
    }


def cache_path(key: dict[str, Any], folder: Path | None = None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return (folder or cache_dir()) / f"auto-{digest}.json"


def read_cache(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The cached result for ``key``, or None when missing, unreadable, corrupt or for another key."""
    if not path.exists():
        return None
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(entry, dict) or entry.get("key") != key:
            raise ValueError("it does not match this machine and run")
        Candidate(**entry["result"]["chosen"])  # every field present, and nothing else
        if not isinstance(entry["result"]["evidence"], dict) or not isinstance(entry["date"], str):
            raise ValueError("fields are missing")
    except (OSError, ValueError, KeyError, TypeError) as error:
        logger.warning("auto settings cache %s cannot be used (%s); measuring again", path, error)
        return None
    return entry


def write_cache(path: Path, key: dict[str, Any], result: dict[str, Any], measured_on: str) -> bool:
    """Keep ``result``; a cache that cannot be written is a warning, not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, json.dumps({"key": key, "date": measured_on, "result": result}, indent=2) + "\n")
    except OSError as error:
        logger.warning("auto settings cache %s cannot be written (%s); the next run measures again", path, error)
        return False
    return True


def resolve_auto(
    settings: OptimizationSettings,
    device: torch.device | str,
    policy_kwargs: dict[str, Any],
    board_size: int,
    *,
    measure: Measure | None = None,
    machine: Machine | None = None,
    allow_measure: bool = True,
    max_batch_size: int | None = None,
    countdown: bool = False,
    progress: Callable[[str], None] = lambda line: None,
    today: Callable[[], str] = lambda: date.today().isoformat(),
    load_meter: Callable[[], Callable[[], float | None]] | None = None,
) -> OptimizationSettings:
    """``settings`` with every ``auto`` replaced by the value measured fastest on this machine.

    A cached choice for the same key is used as is. Without one, the candidates are measured
    (``measure``, by default a :class:`GradientStepMeter` on ``device`` with the policy of
    ``policy_kwargs``) and the choice cached; with ``allow_measure=False`` (acting, or a report
    that must not spend the time) the unmeasured values stand in (``settings.UNMEASURED``), and the
    sources say so.
    ``max_batch_size`` (the replay buffer's size) bounds the batch sizes tried; ``countdown``
    says whether the boards carry the countdown channel.

    A measurement during which other processes (or the host of a virtual machine) took
    :data:`CONTENDED_CORES` or more (``load_meter``, by default
    :func:`sb3_snake.common.system.other_load_meter`) decides this run but is not cached: beside a busy
    process the gradient step ran 10x slower with every core, and a choice measured then would
    stand for every later run on the machine.
    """
    if not settings.auto_fields:
        return settings
    device = torch.device(device)
    key = cache_key(settings, device, policy_kwargs, board_size, max_batch_size, countdown)
    path = cache_path(key)
    entry = read_cache(path, key)
    if entry is None and not allow_measure:
        return settings.without_auto(
            "auto, not measured on this machine yet (the first sb3-snake train measures it): "
            f"the value that runs everywhere; cache {path}"
        )
    if entry is None:
        progress(
            f"measuring auto settings ({', '.join(OptimizationSettings.env_key(n) for n in settings.auto_fields)}) "
            f"on this machine; cached in {path}"
        )
        machine = machine or Machine.probe(device)
        measure = measure or GradientStepMeter(
            device, policy_kwargs, board_size, countdown=countdown, use_cuda_graph=settings.use_cuda_graph
        )
        started, taken = time.perf_counter(), (load_meter or system.other_load_meter)()
        result = search(settings, machine, measure, batch_candidates(max_batch_size))
        result["seconds"] = time.perf_counter() - started
        others = taken()
        result["cores_taken_by_others"] = others
        entry = {"key": key, "date": today(), "result": result}
        if others is not None and others >= CONTENDED_CORES:
            where = f"not cached: other processes took {others:.1f} cores while it was measured"
            progress(f"auto settings: {where}; the next run measures again")
            return apply_choice(settings, entry, where)
        write_cache(path, key, result, entry["date"])
    return apply_choice(settings, entry, f"cache {path}")


def apply_choice(settings: OptimizationSettings, entry: dict[str, Any], where: str) -> OptimizationSettings:
    """``settings`` with the measured choice in place of each ``auto``, its source the evidence
    and ``where`` it is kept."""
    chosen = Candidate(**entry["result"]["chosen"])
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    fields = {
        "use_bf16": chosen.use_bf16,
        "use_flash_attention": chosen.sdpa_backend == "flash",
        "use_torch_compile": chosen.use_torch_compile,
        "batch_size": chosen.batch_size,
    }
    for name in settings.auto_fields:
        values[name] = fields[name]
        evidence = entry["result"]["evidence"].get(name, f"chose {fields[name]}")
        sources[name] = f"auto: {evidence} on {entry['date']}; {where}"
    if "use_flash_attention" in settings.auto_fields and settings.sdpa_backend == AUTO:
        values["sdpa_backend"] = chosen.sdpa_backend
        sources["sdpa_backend"] = sources["use_flash_attention"]
    return settings.resolved(values, sources)
