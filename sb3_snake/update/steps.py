"""The ways to run a call of N gradient steps, side by side, and the one place that picks one.

Both learners run their gradient steps through a :class:`StepChoice`, built on the learner's side of
the step, a :class:`LearnerUpdate` (SnakeDQN's: batches sampled from its replay buffer and its TD loss;
PQN's: the minibatches of its rollout and its Q(lambda) loss). Every way implements
:class:`GradientSteps` and runs the same step: :class:`EagerSteps` as written, :class:`CompiledSteps`
through the learner's :class:`~sb3_snake.update.graph.UpdateGraph` compiled in a child process (CPU),
and the learner's own captured steps (a CUDA graph replayed; :mod:`sb3_snake.update.capture`).
:class:`StepChoice` picks one and owns the learner's :class:`~sb3_snake.update.compile.Compile`; a way
that fails sets ``failure``, finishes its call eagerly, and :meth:`StepChoice._turn_off` (the one
fallback) records why. Why each way exists and what it was measured to buy: docs/compile.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from sb3_snake.acceleration.optimizations import Decision, forward_context
from sb3_snake.update.compile import Compile, Phase, compile_failure
from sb3_snake.update.graph import UpdateGraph, batch_at, graph_arguments, split
from sb3_snake.update.protocols import GradientSteps, LearnerUpdate

logger = logging.getLogger(__name__)


class EagerSteps:
    """The gradient steps of a learner (its :class:`LearnerUpdate`), as written."""

    decision, label = "", "eager"

    def __init__(self, update: LearnerUpdate):
        self.update, self.failure = update, ""

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        update = self.update
        return torch.stack([update.gradient_step(update.sample(1, batch_size)) for _ in range(gradient_steps)]).mean()

    def fits(self, batch_size: int) -> bool:
        return True

    def reload(self) -> bool:
        return True


class CompiledSteps:
    """The gradient steps of a learner through ``function``, its ``graph`` compiled and loaded from
    the compile child's file, on the model's own tensors (parameters and Adam's state updated in
    place, so saving, loading and SB3's target copies see the same tensors).

    A call runs ``steps_per_call`` steps per call of ``function`` (their batches sampled at once,
    so a seeded run that compiles may draw other batches than one that does not); the rest of a
    count, and every step of another batch size, run eagerly. The learning rate is a tensor
    filled before each call; the thread count ``function`` was compiled for is set where another
    was. A first call that fails sets :attr:`failure` and runs eagerly.

    :param update: the learner's side of the step, whose whole step compiles.
    :param function: ``graph`` compiled, called as ``function(graph, *arguments)``.
    :param steps_per_call: the gradient steps of one call of ``function``.
    :param batch_size: the batch size ``function`` was compiled for.
    :param threads: the thread count ``function`` was compiled for (None: the count now).
    """

    decision, label = "compile", "torch.compile"

    def __init__(
        self,
        update: LearnerUpdate,
        graph: UpdateGraph,
        function: Callable[..., torch.Tensor],
        steps_per_call: int,
        batch_size: int,
        threads: int | None = None,
    ):
        self.update, self.model, self.graph, self.function = update, update.model, graph, function
        self.failure = ""
        self.steps_per_call, self.batch_size = steps_per_call, batch_size
        self.threads = threads or torch.get_num_threads()
        self.learning_rate = torch.zeros((), device=self.model.device)
        self.calls = 0  #: calls of the compiled function
        self._tensors: tuple = ()  #: the parameters and Adam's state, read again after a reload

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        sample = self.update.sample
        if self.failure or batch_size != self.batch_size:
            return self._eager(sample(gradient_steps, batch_size), gradient_steps)
        per_call = self.steps_per_call
        calls, rest = divmod(gradient_steps, per_call)
        total = sum(self.graph_call(sample(per_call, batch_size), per_call) * per_call for _ in range(calls))
        if rest:  # eagerly, rather than compile a second graph for them
            total = total + self._eager(sample(rest, batch_size), rest) * rest
        return total / gradient_steps

    def graph_call(self, data: Any, steps: int) -> torch.Tensor:
        """One call of ``function``: ``steps`` gradient steps whose batches lie one after another
        in ``data``; their mean loss. Eagerly once the first call failed."""
        if self.failure:
            return self._eager(data, steps)
        try:
            optimizer = self.model.policy.optimizer
            self.learning_rate.fill_(optimizer.param_groups[0]["lr"])
            self._tensors = self._tensors or graph_arguments(optimizer, self.graph, self.update.frozen())
            if torch.get_num_threads() != self.threads:
                torch.set_num_threads(self.threads)
            active = self.model.active_optimizations
            with forward_context(self.model.device.type, active.bf16.active, active.sdpa_backends):
                loss = self.function(self.graph, split(data, steps), self.learning_rate, *self._tensors)
        except Exception as error:  # noqa: BLE001 - reported as the reason compile is off
            if self.calls:  # it ran before: not a compile failure
                raise
            self.failure = compile_failure(error)
            return self._eager(data, steps)
        self.calls += 1
        return loss

    def fits(self, batch_size: int) -> bool:
        return True

    def reload(self) -> bool:
        """Holds while the constants compiled in are the model's (new parameters and Adam state
        are read again); a new gamma, clipping or Adam setting needs another compile."""
        self._tensors = ()
        return self.graph.constants() == self.update.graph().constants()

    def _eager(self, data: Any, steps: int) -> torch.Tensor:
        batches = split(data, steps)
        loss = torch.stack([self.update.gradient_step(batch_at(batches, k)) for k in range(steps)]).mean()
        self.model.policy.optimizer.zero_grad(set_to_none=True)  # the compiled steps keep no gradients
        return loss


class StepChoice:
    """The gradient steps of a learner: the way that runs them (:attr:`current`) and the learner's
    :class:`~sb3_snake.update.compile.Compile`.

    Built with the model, after ``active_optimizations`` were decided; keeps the model's
    ``active_optimizations.compile`` and ``.cuda_graph`` saying what really runs. Captured when
    the CUDA graph is active and the learner has a captured way; compiled once the compile is
    adopted; eager otherwise.

    :param update: the learner's side of its gradient step.
    """

    def __init__(self, update: LearnerUpdate):
        self.update, self.model = update, update.model
        self.compile = Compile.for_update(update)
        self._record("compile", self.compile.planned)
        self.current: GradientSteps = self._choose(self.model.batch_size)

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        """``gradient_steps`` steps of ``batch_size``, after the compile moved on (started when
        due, adopted when done); their mean loss, on the device and not read."""
        update, compile = self.update, self.compile
        was_off = compile.phase is Phase.OFF
        adopted = compile.advance(update, batch_size, gradient_steps)
        if compile.phase is Phase.OFF and not was_off:
            self._turn_off("compile", "torch.compile", compile.failure)
        elif adopted is not None:
            compiled = CompiledSteps(update, *adopted)
            if compiled.reload():
                self.current = compiled
                self._record("compile", compile.in_effect(self.model._n_updates))
            else:  # new gamma, clipping or Adam values while the child compiled: compile those
                compile.start_over(self.model._n_updates)
        step = self.current if self.current.fits(batch_size) else self._choose(batch_size)
        mean_loss = step.run(gradient_steps, batch_size)
        if step.failure:
            self._turn_off(step.decision, step.label, step.failure)
        return mean_loss

    def reload(self) -> None:
        """Parameters, optimizer state or hyperparameters were replaced: a way that baked them in
        is dropped (a compiled one compiles again), the others read them again."""
        if not self.current.reload():
            if isinstance(self.current, CompiledSteps):
                self.compile.start_over(self.model._n_updates)
            self.current = self._choose(self.model.batch_size)

    def close(self) -> None:
        """Training stopped: a compile child still running is stopped (see :meth:`Compile.stop`)."""
        self.compile.stop()

    def _choose(self, batch_size: int) -> GradientSteps:
        """The one place that picks the way that is not compiled."""
        captured = self.update.captured(batch_size) if self.model.active_optimizations.cuda_graph.active else None
        self.current = captured if captured is not None else EagerSteps(self.update)
        return self.current

    def _turn_off(self, decision: str, label: str, failure: str) -> None:
        """The one fallback: ``decision`` off with ``failure`` as its reason, eager from now on."""
        logger.warning("%s requested but not active: %s; training eagerly", label, failure)
        if decision == "compile" and self.compile.phase is not Phase.OFF:
            self.compile.turn_off(failure)
        self._record(decision, Decision.off(failure))
        self._choose(self.model.batch_size)

    def _record(self, decision: str, value: Decision) -> None:
        self.model.active_optimizations = replace(self.model.active_optimizations, **{decision: value})
