"""``Compile``: the life of one learner's compiled update, as a state machine.

:class:`Phase` names its states: WAITING (asked for, its gradient step not reached), COMPILING
(a child process compiles it: :class:`~sb3_snake.update.child.CompileJob`), RUNNING (the
training process loaded what the child saved; :class:`~sb3_snake.update.steps.CompiledSteps`
runs it) and OFF (not asked for, not available, or failed: :attr:`Compile.failure` says why).
It serves either learner through its :class:`~sb3_snake.update.protocols.LearnerUpdate`.
Only :class:`Compile` changes the phase, and it alone says in words what is in effect
(:attr:`Compile.planned`, :meth:`Compile.in_effect`). Nothing is traced or compiled in the
training process, so a crash of the compiler costs the compile, not the run. The design:
docs/compile.md.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space

from sb3_snake.acceleration.optimizations import Decision
from sb3_snake.common import system
from sb3_snake.common.compile_record import record_compile
from sb3_snake.update.child import CompileJob, inductor_cache, load, prepare_load
from sb3_snake.update.graph import graph_arguments, split

if TYPE_CHECKING:
    from sb3_snake.update.protocols import LearnerUpdate

logger = logging.getLogger(__name__)

#: The compile decision's reason when the compiled update runs.
WHOLE_UPDATE = "the whole update as one graph: forward, backward, clipping and Adam"
#: The reason when a model trains on another thread than its process's main one (tune --n-jobs).
MAIN_THREAD_ONLY = "a compiled update is adopted on a process's main thread only, and this model trains on another"
#: The ``torch.compile`` backend of the compile child (the tests take ``aot_eager``, which builds no C++).
COMPILE_BACKEND = "inductor"
#: The most gradient steps one compiled call runs (the graph, and its compile, grow with it).
MAX_STEPS_PER_CALL = 4
#: The most characters of an error's message a compile failure keeps (a guard's report runs to a few hundred).
FAILURE_CHARACTERS = 2000


class Phase(enum.Enum):
    """Where a model's compile stands."""

    WAITING = "waiting"
    COMPILING = "compiling"
    RUNNING = "running"
    OFF = "off"


@dataclass
class Compile:
    """The compile of one model's update: asked for, when, and how it went.

    :param requested: the compile decision before anything was compiled (off, with the reason,
        where it was not asked for or is unavailable on this machine).
    :param whole_update: :func:`decide_compiled_update` for the model (off where it cannot compile).
    :param after: gradient steps trained eagerly before the compile starts (0: at the first update).
    :param mode: the ``torch.compile`` mode.
    :param background: train on eagerly while the child compiles (else wait for it, so that the
        switch falls at a fixed gradient step and a seeded run repeats).
    """

    requested: Decision
    whole_update: Decision
    after: int = 0
    mode: str = "default"
    background: bool = False
    phase: Phase = Phase.WAITING
    failure: str = ""  #: why the phase is OFF, where the compile was asked for
    since: int | None = None  #: the gradient step the last child started at (None once adopted)
    outcome: str = ""  #: how the compile went, once RUNNING
    job: CompileJob | None = field(default=None, repr=False)  #: the child, while COMPILING
    _threads: tuple[int, int] | None = field(default=None, repr=False)  # (the run's count, the lowered one)
    _start_pause: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if not self.requested.active:
            self.phase = Phase.OFF
        elif not self.whole_update.active:
            self.phase, self.failure = Phase.OFF, self.whole_update.reason

    @classmethod
    def for_update(cls, update: LearnerUpdate) -> Compile:
        """The compile of a model just built (``update.model``), from its ``active_optimizations``:
        a compile deferred by ``compile_after`` gradient steps counts from the model's own."""
        model = update.model
        active, settings = model.active_optimizations, model.active_optimizations.settings
        after = settings.compile_after if settings.compile_after > model._n_updates else 0
        whole = decide_compiled_update(unsupported_reason(update))
        return cls(active.compile, whole, after, settings.compile_mode, settings.compile_in_background)

    @property
    def running(self) -> bool:
        """Whether the compiled update runs (a compiled graph holds its thread count)."""
        return self.phase is Phase.RUNNING

    @property
    def compiling(self) -> bool:
        """Whether a child process compiles the update now."""
        return self.phase is Phase.COMPILING

    def due(self, n_updates: int) -> bool:
        """Whether the compile child starts at the next call, with ``n_updates`` trained."""
        return self.phase is Phase.WAITING and n_updates >= self.after

    def advance(self, update: LearnerUpdate, batch_size: int, gradient_steps: int) -> tuple[Any, ...] | None:
        """Move on at a call of ``gradient_steps`` steps of ``batch_size``: start the child when
        due (and wait for it, without ``background``), adopt what it saved once it has ended.
        Returns :class:`~sb3_snake.update.steps.CompiledSteps`' arguments after ``update``
        when the compiled update was adopted now; else None (a failure moves the phase to OFF)."""
        model = update.model
        if self.due(model._n_updates):
            self._start(update, batch_size, gradient_steps)
            interrupt = getattr(model, "update_interrupt", None) or (lambda: False)
            if self.job is not None and not self.background and self.job.wait(interrupt):
                return self._adopt(model)
        elif self.job is not None and self.job.poll():
            return self._adopt(model)
        return None

    def _start(self, update: LearnerUpdate, batch_size: int, gradient_steps: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.turn_off(MAIN_THREAD_ONLY)  # loading compiled code, as any use of the compiler, is the main thread's
            return
        model = update.model
        hooks = network_hooks(update)
        if hooks:
            hooks = "; ".join(hooks)
            self.turn_off(
                f"compile declined: the compiled update would not call the networks' {hooks}; remove them to compile"
            )
            return
        started = time.perf_counter()
        prepare_load()  # first, while training has the cores to itself
        steps, active = steps_per_call_for(gradient_steps), model.active_optimizations
        graph, optimizer = update.graph(), model.policy.optimizer
        learning_rate = torch.full((), optimizer.param_groups[0]["lr"], device=model.device)
        batches = split(update.example(steps, batch_size), steps)
        arguments = (batches, learning_rate, *graph_arguments(optimizer, graph, update.frozen()))
        # Where the thread count is the run's to choose, training leaves the child a core while it
        # compiles: on a small CPU, intra-op threads on every core beside a busy compiler collapse.
        threads = torch.get_num_threads()
        training_threads = threads - 1 if active.adaptive_threads and threads > 1 else threads
        options = {
            "device_type": model.device.type,
            "bf16": active.bf16.active,
            "sdpa_backends": [backend.name for backend in active.sdpa_backends],
            "mode": self.mode,
            "backend": COMPILE_BACKEND,
            "threads": threads,
        }
        try:
            self.job = CompileJob(graph, arguments, options, compile_threads=system.cpu_cores() - training_threads)
        except Exception as error:  # noqa: BLE001 - a compile that cannot start is declined, as one that fails
            self.turn_off(compile_failure(error, "compile could not start"))
            return
        self.phase, self.since = Phase.COMPILING, model._n_updates
        if training_threads != threads:
            self._threads = (threads, training_threads)
            torch.set_num_threads(training_threads)
        self._start_pause = time.perf_counter() - started
        logger.info(
            "compiling the whole update, %d gradient steps per call, in a child process (pid %d) from gradient step %d",
            steps,
            self.job.child.pid,
            model._n_updates,
        )

    def _adopt(self, model: Any) -> tuple[Any, ...] | None:
        """The child ended: load what it saved (RUNNING), or turn off with its failure (OFF)."""
        job, self.job = self.job, None
        started = time.perf_counter()
        self._restore_threads()
        failure, function = job.failure(), None
        if not failure:
            try:
                active = model.active_optimizations
                with inductor_cache(job.inductor_cache):  # its kernels, from where the child wrote them
                    function = load(job.artifact, model.device.type, active.bf16.active, active.sdpa_backends)
            except Exception as error:  # noqa: BLE001 - reported as the reason compile is off
                failure = compile_failure(error)
        result = job.result()
        job.close()
        if function is None:
            self.turn_off(failure)
            return None
        self.phase, self.since = Phase.RUNNING, None
        cache = "found in the compile cache" if result.get("cached") else "compiled"
        plural = "s" if job.steps_per_call > 1 else ""
        self.outcome = (
            f"{cache} in a child process in {job.child.seconds:,.0f} s for calls of {job.steps_per_call} "
            f"gradient step{plural}, adopted at gradient step {model._n_updates:,} (training paused "
            f"{self._start_pause:.1f} s to start it, {time.perf_counter() - started:.1f} s to adopt it)"
        )
        logger.info("compiled update adopted: %s", self.outcome)
        record_compile(self.outcome, compiled=True)
        return job.graph, function, job.steps_per_call, job.batch_size, job.threads

    def stop(self) -> None:
        """Training stopped: a child still compiling is stopped and reaped, its folder removed
        (what it wrote to the compile cache stays), and the compile is WAITING again."""
        if self.phase is not Phase.COMPILING:
            return
        self._stop_job()
        self.phase = Phase.WAITING
        logger.info("training stopped while the update compiled in a child process: the child was stopped")
        record_compile("stopped with training before the compile child ended", compiled=False)

    def turn_off(self, failure: str) -> None:
        """OFF with ``failure`` as the reason (a child still running is stopped)."""
        self._stop_job()
        self.phase, self.failure = Phase.OFF, failure
        record_compile(failure, compiled=False)

    def start_over(self, n_updates: int) -> None:
        """New gamma, clipping or Adam values: what was compiled, or is compiling, for the old
        ones is dropped, and the compile is due again from ``n_updates``."""
        self._stop_job()
        self.phase, self.after, self.since, self.outcome = Phase.WAITING, n_updates, None, ""

    def _stop_job(self) -> None:
        job, self.job = self.job, None
        if job is not None:
            job.close()
        self._restore_threads()

    def _restore_threads(self) -> None:
        """Back to the run's own thread count where training lowered it (and nothing set another since)."""
        lowered, self._threads = self._threads, None
        if lowered is not None and torch.get_num_threads() == lowered[1]:
            torch.set_num_threads(lowered[0])

    @property
    def planned(self) -> Decision:
        """The compile decision in words: what it compiles and from when, or why it is off."""
        if not self.requested.active:
            return self.requested
        if self.phase is Phase.OFF:
            return Decision.off(self.failure)
        when = f"after the first {self.after:,} gradient steps" if self.after else ""
        where = "in a child process while training goes on" if self.background else "in a child process"
        return Decision.on(f"{', '.join(part for part in (when, where) if part)}: {self.whole_update.reason}")

    def in_effect(self, n_updates: int) -> Decision:
        """:attr:`planned` where RUNNING (with how it went) or OFF; otherwise off, saying why
        not yet (a run's summary and the threads callback ask this)."""
        if self.phase is Phase.RUNNING:
            return Decision.on(f"{self.planned.reason}; {self.outcome}")
        if self.phase is Phase.OFF:
            return self.planned
        trained = f"({n_updates:,} trained)"
        if self.phase is Phase.COMPILING:
            pid = self.job.child.pid if self.job is not None else "?"
            return Decision.off(
                f"compiling in a child process (pid {pid}) since gradient step {self.since:,} {trained}"
            )
        if self.since is not None:
            return Decision.off(
                f"was compiling in a child process since gradient step {self.since:,} when training stopped, "
                f"and was stopped {trained}"
            )
        return Decision.off(f"deferred to gradient step {self.after:,}, not reached {trained}")


def steps_per_call_for(gradient_steps: int) -> int:
    """The gradient steps of one compiled call when the compile starts at a call of
    ``gradient_steps``: the most, up to :data:`MAX_STEPS_PER_CALL`, that divide it, so that
    calls of the same count run compiled whole."""
    return max(steps for steps in range(1, MAX_STEPS_PER_CALL + 1) if gradient_steps % steps == 0)


def unsupported_reason(update: LearnerUpdate) -> str:
    """Why a learner's update (``update``) cannot be compiled whole, or ``""`` when it can."""
    model = update.model
    optimizer = model.policy.optimizer
    if type(optimizer) is not torch.optim.Adam:
        return f"the whole update is compiled for Adam only, not {type(optimizer).__name__}"
    if len(optimizer.param_groups) != 1:
        return "the whole update is compiled for one parameter group only"
    group = optimizer.param_groups[0]
    if {id(p) for p in group["params"]} != {id(p) for p in update.networks()["q_net"].parameters()}:
        return "the whole update is compiled for an optimizer of exactly the online network's parameters"
    for option in ("amsgrad", "maximize", "differentiable", "weight_decay"):
        if group.get(option):
            return f"the whole update is not compiled with Adam's {option}"
    space = model.observation_space
    if not isinstance(space, spaces.Box) or (model.policy.normalize_images and is_image_space(space)):
        return "the whole update is compiled for observations that need only float(), not images or dicts"
    return ""


def decide_compiled_update(unsupported: str) -> Decision:
    """Whether the model's whole gradient step compiles: not where ``unsupported`` says why."""
    return Decision.off(unsupported) if unsupported else Decision.on(WHOLE_UPDATE)


#: A module's hooks, by the attribute that holds them, and how a reason names each kind.
_HOOK_KINDS = {
    "_forward_pre_hooks": "forward pre-hook",
    "_forward_hooks": "forward hook",
    "_backward_pre_hooks": "backward pre-hook",
    "_backward_hooks": "backward hook",
}


def network_hooks(update: LearnerUpdate) -> list[str]:
    """The hooks on the modules of a learner's Q-networks, each named with its module (``forward
    hook <lambda> on q_net.q_net.0``): the compiled update never calls them, so any declines it."""
    found = []
    for network_name, network in update.networks().items():
        for name, module in network.named_modules():
            for attribute, kind in _HOOK_KINDS.items():
                for hook in getattr(module, attribute, {}).values():
                    where = f"{network_name}.{name}" if name else network_name
                    found.append(f"{kind} {getattr(hook, '__name__', type(hook).__name__)} on {where}")
    return found


def compile_failure(error: BaseException, what: str = "compile failed") -> str:
    """A failed compile as the compile decision's reason, ``what`` first: one line holding the
    whole message (lines joined, white space folded), so that it says why, not only where."""
    message = " ".join(str(error).split())
    if len(message) > FAILURE_CHARACTERS:
        message = message[: FAILURE_CHARACTERS - 3] + "..."
    return f"{what}: {type(error).__name__}: {message}"
