"""``CompiledSteps``: SnakeDQN's gradient steps run by a compiled ``UpdateGraph`` (CPU).

The function it runs was compiled by a child process and loaded from the file it saved
(:mod:`sb3_snake.dqn.update.child`); this class only calls it, on the model's own tensors: both
networks' parameters and Adam's state in ``optimizer.state``, updated in place, so saving,
loading, SB3's target-network copies and an eager step in between see the same tensors. The
learning rate is a tensor filled before each call, so a schedule changes nothing compiled.

**Several gradient steps per call** (:attr:`CompiledSteps.steps_per_call`): each call pays for
its guards and wrapper before any kernel runs, so :meth:`CompiledSteps.run` samples and
augments the batches of several steps at once and runs them as one graph, each step reading
what the one before wrote. The count is fixed when the compile starts (:func:`steps_per_call_for`,
at most :data:`MAX_STEPS_PER_CALL`; in the background a graph of one step runs first, see
:class:`~sb3_snake.dqn.update.compile.CompileState`); a call of another count makes whole
compiled calls and runs the rest eagerly, never compiling a graph for its count. Because a
call's batches are drawn at once, a seeded run that compiles draws other batches than one that
does not.

**Its thread count**: the graph was compiled for one intra-op thread count, which its guards
check, so each call sets that count where something else set another (the threads callback,
a run that restores its count at the end and trains again).

A call that fails (the loaded function's guards refuse the tensors, say) at the first call sets
:attr:`~sb3_snake.dqn.update.eager.EagerSteps.failure`, and that call's steps run eagerly.
On CUDA the gradient step is captured as a CUDA graph instead (:mod:`sb3_snake.dqn.update.captured`).
The design and its measurements: docs/how-it-works.md, "The compiled update".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_snake.dqn.update.artifact import forward_context
from sb3_snake.dqn.update.compile import compile_failure
from sb3_snake.dqn.update.eager import EagerSteps
from sb3_snake.dqn.update.graph import UpdateGraph, batch_at, graph_arguments, split

if TYPE_CHECKING:
    from stable_baselines3 import DQN

    from sb3_snake.acceleration.optimizations import ActiveOptimizations

#: The most gradient steps one compiled call runs (the graph, and its compile, grow with it).
MAX_STEPS_PER_CALL = 4


class CompiledSteps(EagerSteps):
    """The gradient steps of ``model`` through ``function``, a compiled ``graph``.

    :param model: a :class:`~sb3_snake.SnakeDQN` whose update can be compiled whole
        (:func:`~sb3_snake.dqn.update.compile.unsupported_reason`).
    :param active: the optimizations in effect (bf16, SDPA kernels), the compile's context.
    :param graph: the :class:`UpdateGraph` of ``model`` that ``function`` was compiled for.
    :param function: the compiled graph, called as ``function(graph, *arguments)``.
    :param steps_per_call: the gradient steps of one call of ``function``.
    :param batch_size: the batch size ``function`` was compiled for (another one trains eagerly).
    :param threads: the thread count ``function`` was compiled for (None: the count now).
    """

    decision = "compile"
    label = "torch.compile"

    def __init__(
        self,
        model: DQN,
        active: ActiveOptimizations,
        graph: UpdateGraph,
        function: Callable[..., torch.Tensor],
        steps_per_call: int,
        batch_size: int,
        threads: int | None = None,
    ):
        super().__init__(model)
        self.graph, self.function = graph, function
        self.threads = threads or torch.get_num_threads()
        self.steps_per_call, self.batch_size = steps_per_call, batch_size
        self.sdpa_backends, self.bf16 = active.sdpa_backends, active.bf16.active
        self.learning_rate = torch.zeros((), device=model.device)
        self.calls = 0  #: calls of the compiled function
        self._tensors: tuple = ()  #: the parameters and Adam's state, read again after a reload

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        """``gradient_steps`` updates, :attr:`steps_per_call` to a compiled call, each call's
        batches sampled and augmented at once; the rest of the count eagerly, and all of it at
        another batch size than the graph's. Their mean loss, not read."""
        if self.failure or batch_size != self.batch_size:
            return self._eager(self.sample(gradient_steps, batch_size), gradient_steps)
        per_call = self.steps_per_call
        calls, rest = divmod(gradient_steps, per_call)
        total = sum(self.graph_call(self.sample(per_call, batch_size), per_call) * per_call for _ in range(calls))
        if rest:  # eagerly, rather than compile a second graph for them
            total = total + self._eager(self.sample(rest, batch_size), rest) * rest
        return total / gradient_steps

    def graph_call(self, data: ReplayBufferSamples, steps: int) -> torch.Tensor:
        """One call of the compiled graph: ``steps`` gradient steps whose batches lie one after
        another in ``data``; their mean loss. Eagerly once the first call failed."""
        if self.failure:
            return self._eager(data, steps)
        try:
            loss = self._call_function(data, steps)
        except Exception as error:  # noqa: BLE001 - reported as the reason compile is off
            if self.calls:  # it ran before: not a compile failure
                raise
            self.failure = compile_failure(error)
            return self._eager(data, steps)
        self.calls += 1
        return loss

    def _call_function(self, data: ReplayBufferSamples, steps: int) -> torch.Tensor:
        """The compiled function on ``steps`` batches, on the model's own tensors."""
        self.learning_rate.fill_(self.model.policy.optimizer.param_groups[0]["lr"])
        self._tensors = self._tensors or graph_arguments(self.model, self.graph)
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        with forward_context(self.model.device.type, self.bf16, self.sdpa_backends):
            return self.function(self.graph, split(data, steps), self.learning_rate, *self._tensors)

    def reload(self) -> bool:
        """Holds while the values compiled in are the model's (new parameters and Adam state
        are read again); a new gamma, clipping or Adam setting needs another compile."""
        self._tensors = ()
        return self.graph.constants() == UpdateGraph(self.model).constants()

    def _eager(self, data: ReplayBufferSamples, steps: int) -> torch.Tensor:
        """The eager updates of the ``steps`` batches of ``data``, one after another; their mean loss."""
        batches = split(data, steps)
        loss = torch.stack([self.gradient_step(batch_at(batches, k)) for k in range(steps)]).mean()
        self.model.policy.optimizer.zero_grad(set_to_none=True)  # the compiled steps keep no gradients
        return loss


def steps_per_call_for(gradient_steps: int) -> int:
    """The gradient steps a compiled call holds when the compile starts at a call of
    ``gradient_steps``: the largest count up to :data:`MAX_STEPS_PER_CALL` that divides it, so
    that calls of the same count run compiled whole."""
    return max(steps for steps in range(1, MAX_STEPS_PER_CALL + 1) if gradient_steps % steps == 0)
