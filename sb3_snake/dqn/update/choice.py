"""``StepChoice``: which way a model's gradient steps run, chosen in one place, with one fallback.

Three ways run the same :class:`~sb3_snake.dqn.update.eager.EagerSteps`:

- **captured** (:class:`~sb3_snake.dqn.update.captured.CapturedSteps`): when the CUDA graph is
  active (CUDA, a replay buffer on the device) and no VecNormalize changes the samples;
- **compiled** (:class:`~sb3_snake.dqn.update.compiled.CompiledSteps`): on a CPU (the only
  device that compiles), once the compile child (:class:`~sb3_snake.dqn.update.child.CompileJob`)
  has compiled the whole update and this process has loaded it (:meth:`StepChoice._adopt`).
  The child is started here when the compile is due, with batches of the replay buffer;
  training goes on eagerly meanwhile (or waits, without ``background``), and is polled at each
  call. In the background the compile comes in two stages
  (:class:`~sb3_snake.dqn.update.compile.CompileState`): a graph of one gradient step, then the
  wider one, each adopted when it is ready;
- **eager**: otherwise.

:meth:`StepChoice._choose` is the only place that picks one; it picks again only when what it
depends on changes (the compile is adopted, a captured graph's batch size, new parameters or
hyperparameters, a fallback). :meth:`StepChoice._turn_off` is the only fallback: a compile or
capture that fails is reported once (a warning, and the model's ``active_optimizations`` say it
is off, with the reason), and training goes on eagerly. Every compile, dynamo's trace included,
happens in the child; the training process only loads what the child saved, on its main thread.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from sb3_snake.acceleration.optimizations import Decision
from sb3_snake.common import system
from sb3_snake.common.compile_record import record_compile
from sb3_snake.dqn.update.artifact import load, prepare_load
from sb3_snake.dqn.update.captured import CapturedSteps
from sb3_snake.dqn.update.child import CompileJob
from sb3_snake.dqn.update.compile import CompileState, compile_failure, network_hooks
from sb3_snake.dqn.update.compiled import CompiledSteps, steps_per_call_for
from sb3_snake.dqn.update.eager import EagerSteps
from sb3_snake.dqn.update.graph import UpdateGraph, graph_arguments, split

if TYPE_CHECKING:
    from stable_baselines3 import DQN

logger = logging.getLogger(__name__)

#: The compile decision's reason when a model trains on another thread than the main one.
MAIN_THREAD_ONLY = "a compiled update is adopted on a process's main thread only, and this model trains on another"
#: The ``torch.compile`` backend of the compile child (the tests take ``aot_eager``, which builds no C++).
COMPILE_BACKEND = "inductor"


class StepChoice:
    """The gradient steps of ``model``: its :class:`CompileState` and the :class:`EagerSteps` that runs them.

    Built with the model (``SnakeDQN._setup_model``), after ``active_optimizations`` were decided;
    keeps the model's ``active_optimizations.compile`` and ``.cuda_graph`` saying what really runs.

    :param model: a :class:`~sb3_snake.SnakeDQN`; its settings say when the compile starts
        (``compile_after``) and whether training goes on meanwhile (``compile_in_background``).
    """

    def __init__(self, model: DQN):
        self.model = model
        active, settings = model.active_optimizations, model.active_optimizations.settings
        self.compile = CompileState.for_model(
            model, active.compile, settings.compile_after, settings.compile_mode, settings.compile_in_background
        )
        self._record("compile", self.compile.planned)
        self.current: EagerSteps | None = None
        self.job: CompileJob | None = None  #: the compile child, while it runs
        self._start_pause = 0.0  # seconds training paused to start the child (sampling, the request, imports)
        self._lowered: tuple[int, int] | None = None  # (the run's thread count, the one taken beside the child)
        self._first_graph: CompiledSteps | None = None  # the first of two stages, while a wider graph may replace it
        self.current = self._choose(model.batch_size)

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        """``gradient_steps`` updates of ``batch_size``, after starting the compile when it is due
        and adopting it when it is done; their mean loss, on the device and not read."""
        if self.job is not None and self.job.poll():
            self._adopt()
        if self.compile.due(self.model._n_updates):  # the first compile, or the wider graph once the first runs
            self._start_compile(batch_size, gradient_steps)
        step = self.current if self.current is not None and self.current.fits(batch_size) else None
        step = step or self._choose(batch_size)
        mean_loss = step.run(gradient_steps, batch_size)
        if step.failure and step is not self._first_graph and self._first_graph is not None:
            self._keep_first_graph(step.failure)  # the wider graph failed at its first call
        elif step.failure:
            self._turn_off(step.decision, step.label, step.failure)
        return mean_loss

    def reload(self) -> None:
        """The model's parameters, optimizer state or hyperparameters were replaced: an update
        that baked them in is dropped (the next call chooses again; a compiled one compiles again),
        the others read them again."""
        if self.current is not None and not self.current.reload():
            if isinstance(self.current, CompiledSteps):
                self._compile_again()
            self.current = None

    def _choose(self, batch_size: int) -> EagerSteps:
        """The one place that picks how updates run (see the module docstring)."""
        model = self.model
        if model.active_optimizations.cuda_graph.active and model._vec_normalize_env is None:
            self.current = CapturedSteps(model, batch_size)
        else:
            self.current = EagerSteps(model)
        return self.current

    def _start_compile(self, batch_size: int, gradient_steps: int) -> None:
        """Start the compile child on sampled (and augmented) batches of ``batch_size``, as many
        as the next graph's call takes (:meth:`CompileState.next_steps_per_call`; the first
        compile fixes the steps it aims at from ``gradient_steps``); wait for it without ``background``."""
        if threading.current_thread() is not threading.main_thread():
            # Loading compiled code, as every use of the compiler, is for a process's main thread;
            # models that train on other threads (tune --n-jobs) train eagerly.
            self._turn_off("compile", "torch.compile", MAIN_THREAD_ONLY)
            return
        hooks = network_hooks(self.model)
        if hooks:
            reason = f"compile declined: the compiled update would not call the networks' {'; '.join(hooks)}"
            self._turn_off("compile", "torch.compile", f"{reason}; remove them to compile")
            return
        started = time.perf_counter()
        prepare_load()  # first, while training has the cores to itself
        model, active, compile = self.model, self.model.active_optimizations, self.compile
        if not compile.compiled:
            compile.steps_wanted = steps_per_call_for(gradient_steps)
        steps = compile.next_steps_per_call()
        graph = UpdateGraph(model)
        learning_rate = torch.full((), model.policy.optimizer.param_groups[0]["lr"], device=model.device)
        batches = split(EagerSteps(model).sample(steps, batch_size), steps)
        arguments = (batches, learning_rate, *graph_arguments(model, graph))
        # Training leaves the child a core where the count is the run's to choose (adaptive, as
        # --threads auto on a CPU; an explicit count is the user's): on a small CPU, intra-op
        # threads on every core beside a busy compiler collapse. The first of two graphs runs
        # beside the second's compile, so it is compiled for that lowered count; the last one
        # for the run's own count, which its adoption restores (_restore_threads).
        threads = self._lowered[0] if self._lowered else torch.get_num_threads()
        training_threads = threads - 1 if active.adaptive_threads and threads > 1 else threads
        options = {
            "device_type": model.device.type,
            "bf16": active.bf16.active,
            "sdpa_backends": [backend.name for backend in active.sdpa_backends],
            "mode": compile.mode,
            "backend": COMPILE_BACKEND,
            "threads": threads if steps == compile.steps_wanted else training_threads,
        }
        try:
            self.job = CompileJob(graph, arguments, options, compile_threads=system.cpu_cores() - training_threads)
        except Exception as error:  # noqa: BLE001 - a compile that cannot start is declined, as one that fails
            self._turn_off("compile", "torch.compile", compile_failure(error, "compile could not start"))
            return
        compile.compiling_since, compile.stopped_since = model._n_updates, None
        compile.child_pid = self.job.child.pid
        if training_threads != threads:
            self._lowered = (threads, training_threads)
            torch.set_num_threads(training_threads)
        self._start_pause = time.perf_counter() - started
        logger.info(
            "compiling the whole update, %d gradient steps per call, in a child process (pid %d) from gradient step %d",
            steps,
            self.job.child.pid,
            model._n_updates,
        )
        if not compile.background and self.job.wait(self._interrupted):
            self._adopt()

    def _interrupted(self) -> bool:
        interrupt = getattr(self.model, "update_interrupt", None)
        return bool(interrupt and interrupt())

    def _adopt(self) -> None:
        """The compile child ended: when it compiled the update, load it and run it from now on
        (the last graph at the run's own thread count, restored here); otherwise the compile is
        off with the child's failure as the reason, or, where a first graph runs already, that
        one goes on (:meth:`CompileState.keep_first_graph`)."""
        job, self.job = self.job, None
        started = time.perf_counter()
        compile = self.compile
        compile.compiling_since = compile.child_pid = compile.stopped_since = None
        failure = job.failure()
        function = None
        if not failure:
            try:
                active = self.model.active_optimizations
                function = load(job.artifact, self.model.device.type, active.bf16.active, active.sdpa_backends)
            except Exception as error:  # noqa: BLE001 - reported as the reason compile is off
                failure = compile_failure(error)
        result = job.result()
        job.close()
        if function is None and self._first_graph is not None:
            self._keep_first_graph(failure)
            return
        if function is None:
            self._restore_threads()
            self._turn_off("compile", "torch.compile", failure)
            return
        update = CompiledSteps(
            self.model,
            self.model.active_optimizations,
            job.graph,
            function,
            job.steps_per_call,
            job.batch_size,
            job.threads,
        )
        if not update.reload():  # new gamma, clipping or Adam values while the child compiled: compile them
            self._compile_again()
            return
        if job.steps_per_call == compile.steps_wanted:  # the last graph: the run's own count again
            self._restore_threads()
        else:
            self._first_graph = update
        self.current, compile.compiled, compile.steps_per_call = update, True, job.steps_per_call
        cache = "found in the compile cache" if result.get("cached") else "compiled"
        adopted = (
            f"{cache} in a child process in {job.child.seconds:,.0f} s for calls of {job.steps_per_call} "
            f"gradient step{'s' if job.steps_per_call > 1 else ''}, adopted at gradient step "
            f"{self.model._n_updates:,} (training paused {self._start_pause:.1f} s to start it, "
            f"{time.perf_counter() - started:.1f} s to adopt it)"
        )
        compile.outcome = f"{compile.outcome}; then {adopted}" if compile.outcome else adopted
        logger.info("compiled update adopted: %s", adopted)
        record_compile(compile.outcome, compiled=True)
        self._record("compile", compile.in_effect(self.model._n_updates))

    def _restore_threads(self) -> None:
        """Back to the run's own thread count where training lowered it for the child (and
        nothing set another since)."""
        lowered, self._lowered = self._lowered, None
        if lowered is not None and torch.get_num_threads() == lowered[1]:
            torch.set_num_threads(lowered[0])

    def close(self) -> None:
        """Training stopped (``SnakeDQN.learn`` returned or raised): a compile child still
        running is stopped and reaped, its folder removed, and the thread count training
        lowered for it restored. Training that resumes starts the compile again; what the child
        had written to the compile cache stays there."""
        since = self._stop_job()
        if since is None:
            return
        self._restore_threads()
        compile = self.compile
        compile.stopped_since = since
        logger.info("training stopped while the update compiled in a child process: the child was stopped")
        if compile.compiled:
            record_compile(f"{compile.outcome}; {compile.widening()}", compiled=True)
        else:
            record_compile("stopped with training before the compile child ended", compiled=False)

    def _compile_again(self) -> None:
        """New gamma, clipping or Adam values: every graph compiled, or compiling, for the old ones
        is dropped (a child still running stopped, the run's thread count restored), and the
        compile is due again from now, with the new values."""
        self._stop_job()
        self._restore_threads()
        self._first_graph, self.current = None, None
        self.compile.start_over(self.model._n_updates)

    def _stop_job(self) -> int | None:
        """Stop and reap the compile child, if one runs; the gradient step it started at (None: none ran)."""
        if self.job is None:
            return None
        job, self.job = self.job, None
        job.close()
        since, self.compile.compiling_since, self.compile.child_pid = self.compile.compiling_since, None, None
        return since

    def _keep_first_graph(self, failure: str) -> None:
        """The wider graph failed (in its child, its load or its first call): the first one goes
        on, at the thread count it was compiled for, and is the last."""
        first, compile = self._first_graph, self.compile
        self.current, compile.steps_per_call = first, first.steps_per_call
        compile.keep_first_graph(
            f"{failure}; the first goes on at {first.threads} thread{'s' if first.threads > 1 else ''}"
        )
        logger.warning("the wider compiled graph failed: %s; the first goes on", failure)
        record_compile(compile.outcome, compiled=True)
        self._record("compile", compile.in_effect(self.model._n_updates))

    def _turn_off(self, decision: str, label: str, failure: str) -> None:
        """The one fallback: ``decision`` off with ``failure`` as its reason; eager updates from
        now on (a compile child still running is stopped, the run's thread count restored)."""
        logger.warning("%s requested but not active: %s; training eagerly", label, failure)
        if decision == "compile":
            self._stop_job()
            self._restore_threads()
            self.compile.failure, self._first_graph = failure, None
            record_compile(failure, compiled=False)
        self._record(decision, Decision.off(failure))
        self.current = None

    def _record(self, decision: str, value: Decision) -> None:
        self.model.active_optimizations = replace(self.model.active_optimizations, **{decision: value})
