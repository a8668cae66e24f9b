"""``UpdateChoice``: which way a model's gradient steps run, chosen in one place, with one fallback.

Three ways run the same :class:`~sb3_snake.dqn.update.step.UpdateStep`:

- **captured** (:class:`~sb3_snake.dqn.update.captured.CapturedUpdate`): when the CUDA graph is
  active (CUDA, a replay buffer on the device) and no VecNormalize changes the samples;
- **compiled** (:class:`~sb3_snake.dqn.update.compiled.CompiledUpdate`): when the whole update
  is compiled (a CPU, once the :class:`~sb3_snake.dqn.update.compile.CompileState` compiled).
  A background compile is started here when it is due, with batches of the replay buffer, and
  the eager step runs on until the compiled one is ready (:meth:`UpdateChoice._adopt`);
- **eager**: otherwise (with the networks compiled in place where the compile says so).

:meth:`UpdateChoice._choose` is the only place that picks one; it picks again only when what it
depends on changes (the compile happens, a captured graph's batch size, new parameters or
hyperparameters, a fallback). :meth:`UpdateChoice._turn_off` is the only fallback: a compile or
capture that fails is reported once (a warning, and the model's ``active_optimizations`` say it
is off, with the error as the reason), and training goes on eagerly.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from sb3_snake.acceleration.optimizations import Decision
from sb3_snake.dqn.update.background import background_compile_running
from sb3_snake.dqn.update.captured import CapturedUpdate
from sb3_snake.dqn.update.compile import CompileState
from sb3_snake.dqn.update.compiled import CompiledUpdate, steps_per_call_for
from sb3_snake.dqn.update.step import UpdateStep

if TYPE_CHECKING:
    from stable_baselines3 import DQN

logger = logging.getLogger(__name__)


class UpdateChoice:
    """The gradient steps of ``model``: its :class:`CompileState` and the :class:`UpdateStep` that runs them.

    Built with the model (``SnakeDQN._setup_model``), after ``active_optimizations`` were decided:
    it compiles at once unless the compile is deferred, and keeps the model's
    ``active_optimizations.compile`` and ``.cuda_graph`` saying what really runs.

    :param model: a :class:`~sb3_snake.SnakeDQN`.
    :param compile_after: gradient steps trained eagerly before an active compile.
    :param compile_in_background: compile the whole update in a thread while training goes on.
    """

    def __init__(self, model: DQN, compile_after: int, compile_in_background: bool = False):
        self.model = model
        active = model.active_optimizations
        self.compile = CompileState.for_model(
            model, active.compile, compile_after, active.settings.compile_mode, compile_in_background
        )
        self._record("compile", self.compile.planned)
        self.current: UpdateStep | None = None
        self.pending: CompiledUpdate | None = None  #: the update compiling in the background, if one is
        self._lowered_to: int | None = None  # the thread count training took while it compiles
        if not self.compile.in_background:  # a background compile needs batches: the first run starts it
            self._compile_if_due()
        self.current = self._choose(model.batch_size)

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        """``gradient_steps`` updates of ``batch_size``, compiling first when the compile is due
        (or starting to, in the background); their mean loss, on the device and not read."""
        self._compile_if_due(batch_size, gradient_steps)
        if self.pending is not None and not self.pending.compiling:
            self._adopt(self.pending)
        step = self.current if self.current is not None and self.current.fits(batch_size) else None
        step = step or self._choose(batch_size)
        mean_loss = step.run(gradient_steps, batch_size)
        if step.failure:
            self._turn_off(step.decision, step.label, step.failure)
        return mean_loss

    def reload(self) -> None:
        """The model's parameters, optimizer state or hyperparameters were replaced: an update
        that baked them in is dropped (the next call chooses again), the others read them again."""
        if self.current is not None and not self.current.reload():
            self.current = None

    def _choose(self, batch_size: int) -> UpdateStep:
        """The one place that picks how updates run (see the module docstring)."""
        model = self.model
        if model.active_optimizations.cuda_graph.active and model._vec_normalize_env is None:
            self.current = CapturedUpdate(model, batch_size)
        elif self.compile.compiles_whole_update:
            self.current = CompiledUpdate(model, model.active_optimizations)
        else:
            self.current = UpdateStep(model)
        return self.current

    def _compile_if_due(self, batch_size: int | None = None, gradient_steps: int = 1) -> None:
        if not self.compile.due(self.model._n_updates):
            return
        if self.compile.in_background:
            if not background_compile_running():  # one at a time: an abandoned one fills the cache for this one
                self._start_background_compile(batch_size, gradient_steps)
            return
        failure = self.compile.compile_now(self.model)
        self.current = None  # chosen again: the compiled update, or a graph of the compiled networks
        if failure:
            self._turn_off("compile", "torch.compile", failure)
        else:
            self._record("compile", self.compile.planned)

    def _start_background_compile(self, batch_size: int, gradient_steps: int) -> None:
        """Compile in a thread with sampled (and augmented) batches of ``batch_size``, as many as
        a compiled call of ``gradient_steps`` steps takes; the eager step runs on meanwhile."""
        model = self.model
        self.pending = CompiledUpdate(model, model.active_optimizations)
        steps = steps_per_call_for(gradient_steps)
        self.pending.compile_in_background(self.pending.sample(steps, batch_size), steps)
        self.compile.compiling_since, self.compile.abandoned_since = model._n_updates, None
        # Training leaves one of its threads to the compile where the count is the run's to
        # choose (adaptive, as --threads auto on a CPU; an explicit count is the user's): on a
        # small CPU, intra-op threads on every core beside a busy compiler collapse. Back to the
        # graph's count in _adopt or close.
        if model.active_optimizations.adaptive_threads and self.pending.threads > 1:
            self._lowered_to = self.pending.threads - 1
            torch.set_num_threads(self._lowered_to)
        logger.info("compiling the whole update in the background from gradient step %d", model._n_updates)

    def _adopt(self, compiled: CompiledUpdate) -> None:
        """A background compile ended: training goes back to the thread count it had (the one the
        graph was compiled for), and the compiled update runs from now on or, when the compile
        failed, the compile is off."""
        compiled.finish_background()
        self.pending, self.compile.compiling_since, self._lowered_to = None, None, None
        if torch.get_num_threads() != compiled.threads:
            logger.info("threads: back to %d, the count the compile started at", compiled.threads)
            torch.set_num_threads(compiled.threads)
        if compiled.failure:
            self._turn_off("compile", "torch.compile", compiled.failure)
            return
        self.compile.compiled = True
        self.current = compiled
        self._record("compile", self.compile.planned)

    def close(self) -> None:
        """Training stopped (``SnakeDQN.learn`` returned or raised): a compile still running in
        the background is abandoned, left to finish on its own with its result unused, and what
        it held is released now, the thread count training lowered for it too. Training that
        resumes compiles again once that thread is done, warm from the cache it filled; waiting
        for it here would keep the caller waiting for tens of seconds after training."""
        if self.pending is None:
            return
        pending, lowered = self.pending, self._lowered_to
        self.compile.abandoned_since = self.compile.compiling_since
        self.pending, self.compile.compiling_since, self._lowered_to = None, None, None
        pending.abandon()
        if lowered is not None and torch.get_num_threads() == lowered:  # not restored by a callback since
            torch.set_num_threads(pending.threads)
        logger.info("training stopped while the update compiled in the background: that compile is abandoned")

    def _turn_off(self, decision: str, label: str, failure: str) -> None:
        """The one fallback: ``decision`` off with ``failure`` as its reason; eager updates from now on."""
        logger.warning("%s requested but not active: %s; training eagerly", label, failure)
        if decision == "compile":
            self.compile.failure = failure
        self._record(decision, Decision(True, False, failure))
        self.current = None

    def _record(self, decision: str, value: Decision) -> None:
        self.model.active_optimizations = replace(self.model.active_optimizations, **{decision: value})
