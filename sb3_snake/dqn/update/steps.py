"""Three ways to run a call of N gradient steps, side by side, and the one place that picks one.

Every way implements :class:`GradientSteps` and runs the same step (:func:`gradient_step`):
:class:`EagerSteps` as written, :class:`CompiledSteps` through the compiled
:class:`~sb3_snake.dqn.update.graph.UpdateGraph` (CPU), :class:`CapturedSteps` as one CUDA graph
replayed (GPU). :class:`StepChoice` picks one and owns the model's
:class:`~sb3_snake.dqn.update.compile.Compile`; a way that fails sets ``failure``, finishes its
call eagerly, and :meth:`StepChoice._turn_off` (the one fallback) records why. Why each way
exists and what it was measured to buy: docs/compile.md.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import torch
import torch.nn.functional as F
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_snake.acceleration.optimizations import Decision, forward_context
from sb3_snake.dqn.replay import DeviceReplayBuffer
from sb3_snake.dqn.targets import td_targets
from sb3_snake.dqn.update.compile import Compile, Phase, compile_failure
from sb3_snake.dqn.update.graph import UpdateGraph, batch_at, graph_arguments, sample, split

if TYPE_CHECKING:
    from collections.abc import Callable

    from stable_baselines3 import DQN

logger = logging.getLogger(__name__)

#: Eager updates before a CUDA graph is captured (Adam's state, cuBLAS workspaces, autocast's casts).
WARMUP_STEPS = 3


def gradient_step(model: DQN, batch: ReplayBufferSamples) -> torch.Tensor:
    """One gradient step on ``batch`` (augmented already), SB3's ``DQN.train`` body for one
    batch: TD targets, the Huber loss, backward, clipping, the optimizer's step. The loss,
    detached and not read, so that a call reads all of its losses at once."""
    online = model.q_net if model.double_dqn else None
    target_q_values = td_targets(batch, model.q_net_target, online, model.gamma, model.food_shaping)
    current_q_values = model.q_net(batch.observations).gather(1, batch.actions.long())
    loss = F.smooth_l1_loss(current_q_values, target_q_values)
    model.policy.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.policy.parameters(), model.max_grad_norm)
    model.policy.optimizer.step()
    return loss.detach()


class GradientSteps(Protocol):
    """A way to run a call of gradient steps."""

    #: The ``ActiveOptimizations`` field this way stands for ("" when eager).
    decision: str
    #: Its name in the warning when it fails.
    label: str
    #: Why it turned itself off, if it did ("" while it holds).
    failure: str

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        """``gradient_steps`` steps, each on a batch of ``batch_size`` sampled for it; their mean loss, not read."""

    def fits(self, batch_size: int) -> bool:
        """Whether it runs steps of ``batch_size`` (a captured graph holds one size)."""

    def reload(self) -> bool:
        """The model's parameters, optimizer state or hyperparameters were replaced: whether it
        still holds (after reading what it must read again)."""


class EagerSteps:
    """The gradient steps of ``model`` (a :class:`~sb3_snake.SnakeDQN`), as written."""

    decision, label = "", "eager"

    def __init__(self, model: DQN):
        self.model, self.failure = model, ""

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        return torch.stack([self.gradient_step(self.sample(1, batch_size)) for _ in range(gradient_steps)]).mean()

    def sample(self, steps: int, batch_size: int) -> ReplayBufferSamples:
        return sample(self.model, steps, batch_size)

    def gradient_step(self, batch: ReplayBufferSamples) -> torch.Tensor:
        return gradient_step(self.model, batch)

    def fits(self, batch_size: int) -> bool:
        return True

    def reload(self) -> bool:
        return True


class CompiledSteps:
    """The gradient steps of ``model`` through ``function``, a compiled ``graph`` loaded from the
    compile child's file, on the model's own tensors (parameters and Adam's state updated in
    place, so saving, loading and SB3's target copies see the same tensors).

    A call runs ``steps_per_call`` steps per call of ``function`` (their batches sampled at once,
    so a seeded run that compiles draws other batches than one that does not); the rest of a
    count, and every step of another batch size, run eagerly. The learning rate is a tensor
    filled before each call; the thread count ``function`` was compiled for is set where another
    was. A first call that fails sets :attr:`failure` and runs eagerly.

    :param model: a :class:`~sb3_snake.SnakeDQN` whose update compiles whole.
    :param function: ``graph`` compiled, called as ``function(graph, *arguments)``.
    :param steps_per_call: the gradient steps of one call of ``function``.
    :param batch_size: the batch size ``function`` was compiled for.
    :param threads: the thread count ``function`` was compiled for (None: the count now).
    """

    decision, label = "compile", "torch.compile"

    def __init__(
        self,
        model: DQN,
        graph: UpdateGraph,
        function: Callable[..., torch.Tensor],
        steps_per_call: int,
        batch_size: int,
        threads: int | None = None,
    ):
        self.model, self.graph, self.function, self.failure = model, graph, function, ""
        self.steps_per_call, self.batch_size = steps_per_call, batch_size
        self.threads = threads or torch.get_num_threads()
        self.learning_rate = torch.zeros((), device=model.device)
        self.calls = 0  #: calls of the compiled function
        self._tensors: tuple = ()  #: the parameters and Adam's state, read again after a reload

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        if self.failure or batch_size != self.batch_size:
            return self._eager(sample(self.model, gradient_steps, batch_size), gradient_steps)
        per_call = self.steps_per_call
        calls, rest = divmod(gradient_steps, per_call)
        total = sum(
            self.graph_call(sample(self.model, per_call, batch_size), per_call) * per_call for _ in range(calls)
        )
        if rest:  # eagerly, rather than compile a second graph for them
            total = total + self._eager(sample(self.model, rest, batch_size), rest) * rest
        return total / gradient_steps

    def graph_call(self, data: ReplayBufferSamples, steps: int) -> torch.Tensor:
        """One call of ``function``: ``steps`` gradient steps whose batches lie one after another
        in ``data``; their mean loss. Eagerly once the first call failed."""
        if self.failure:
            return self._eager(data, steps)
        try:
            self.learning_rate.fill_(self.model.policy.optimizer.param_groups[0]["lr"])
            self._tensors = self._tensors or graph_arguments(self.model, self.graph)
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
        return self.graph.constants() == UpdateGraph(self.model).constants()

    def _eager(self, data: ReplayBufferSamples, steps: int) -> torch.Tensor:
        batches = split(data, steps)
        loss = torch.stack([gradient_step(self.model, batch_at(batches, k)) for k in range(steps)]).mean()
        self.model.policy.optimizer.zero_grad(set_to_none=True)  # the compiled steps keep no gradients
        return loss


class CapturedSteps:
    """The gradient steps of ``model`` at ``batch_size`` on CUDA: :data:`WARMUP_STEPS` eager on a
    side stream, then :func:`gradient_step` on a batch drawn on the device, captured once as a
    CUDA graph and replayed.

    The graph holds no host value: the buffer's fill level and last row are a device tensor
    (:attr:`extent`) written before each call, and rows are drawn as ``floor(rand * filled)``
    on the device. Adam runs with ``capturable=True``. The learning rate, gamma, clipping and
    Double DQN are baked in: a new learning rate captures again, and :meth:`reload` drops the
    graph. The augmentation's generator is registered with the graph, so a captured run draws
    the numbers an eager run of the same steps draws. A capture that fails sets :attr:`failure`.

    :param model: a :class:`~sb3_snake.SnakeDQN` whose replay buffer is a :class:`DeviceReplayBuffer`.
    :param batch_size: transitions per step; another batch size needs another capture.
    """

    decision, label = "cuda_graph", "CUDA graph"

    def __init__(self, model: DQN, batch_size: int):
        buffer = model.replay_buffer
        if not isinstance(buffer, DeviceReplayBuffer):
            raise TypeError(f"a captured update samples a DeviceReplayBuffer, not {type(buffer).__name__}")
        self.model, self.buffer, self.batch_size, self.failure = model, buffer, batch_size, ""
        #: ``[rows filled, last row written]``, written before each call, read by the graph.
        self.extent = torch.zeros(2, dtype=torch.int64, device=buffer.device)
        self.loss_sum = torch.zeros((), device=buffer.device)  #: the sum of this call's losses
        self.graph: torch.cuda.CUDAGraph | None = None
        self.learning_rates: tuple[float, ...] = ()  #: the rates baked into the graph
        self.eager_steps = 0  #: steps run eagerly so far (the warm-up)
        self.replays = 0  #: steps run by replaying the graph
        for group in model.policy.optimizer.param_groups:
            if "capturable" in group:
                group["capturable"] = True

    def refresh(self) -> None:
        """Write the buffer's extent and zero the loss sum (fills with host scalars: no copy that
        would wait for the device)."""
        self.extent[0].fill_(self.buffer.size())
        self.extent[1].fill_(self.buffer.last_row)
        self.loss_sum.zero_()

    def sample(self, steps: int, batch_size: int) -> ReplayBufferSamples:
        """Uniform batches drawn on the device from :attr:`extent` alone, augmented when the model augments."""
        rows_filled, last_row = self.extent[0], self.extent[1]
        draws = torch.rand(steps * batch_size, device=self.extent.device)
        rows = torch.minimum((draws * rows_filled).long(), rows_filled - 1)
        envs = torch.randint(self.buffer.n_envs, (steps * batch_size,), device=self.extent.device)
        data = self.buffer.samples_at(rows, envs, last_row=last_row)
        augmentation = self.model._augmentation
        return data if augmentation is None else augmentation(data)

    def recorded_step(self) -> None:
        """What the graph records: one step on a batch drawn on the device, its loss added to :attr:`loss_sum`."""
        self.loss_sum.add_(gradient_step(self.model, self.sample(1, self.batch_size)))

    def fits(self, batch_size: int) -> bool:
        return batch_size == self.batch_size

    def reload(self) -> bool:
        return False  # the graph baked in gamma, clipping, Double DQN and the optimizer's state tensors

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        self.refresh()
        rates = tuple(group["lr"] for group in self.model.policy.optimizer.param_groups)
        if self.graph is not None and rates != self.learning_rates:
            self.graph = None
        left = gradient_steps
        if self.graph is None and self.eager_steps < WARMUP_STEPS:
            warm = min(left, WARMUP_STEPS - self.eager_steps)
            self._warm_up(warm)
            left -= warm
        if self.graph is None and self.eager_steps >= WARMUP_STEPS and left and not self.failure:
            self._capture(rates)
        if self.graph is None:  # the capture failed (or the warm-up took every step): eagerly
            for _ in range(left):
                self.recorded_step()
            self.eager_steps += left
        else:
            for _ in range(left):
                self.graph.replay()
            self.replays += left
        return self.loss_sum / gradient_steps

    def _warm_up(self, steps: int) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(steps):
                self.recorded_step()
        torch.cuda.current_stream().wait_stream(stream)
        self.eager_steps += steps

    def _capture(self, rates: tuple[float, ...]) -> None:
        # Gradients set to None now are allocated inside the graph, which then writes them afresh
        # on every replay instead of adding to tensors from outside it.
        self.model.policy.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        augmentation = self.model._augmentation
        if augmentation is not None:  # its own generator: a capture refuses one it was not told of
            graph.register_generator_state(augmentation.generator)
        try:
            with torch.cuda.graph(graph):
                self.recorded_step()
        except RuntimeError as error:
            self.failure = f"the capture failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
            return
        self.graph, self.learning_rates = graph, rates


class StepChoice:
    """The gradient steps of ``model``: the way that runs them (:attr:`current`) and the model's
    :class:`~sb3_snake.dqn.update.compile.Compile`.

    Built with the model, after ``active_optimizations`` were decided; keeps the model's
    ``active_optimizations.compile`` and ``.cuda_graph`` saying what really runs. Captured when
    the CUDA graph is active and no VecNormalize changes the samples; compiled once the compile
    is adopted; eager otherwise.

    :param model: a :class:`~sb3_snake.SnakeDQN`.
    """

    def __init__(self, model: DQN):
        self.model = model
        self.compile = Compile.for_model(model)
        self._record("compile", self.compile.planned)
        self.current: GradientSteps = self._choose(model.batch_size)

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        """``gradient_steps`` steps of ``batch_size``, after the compile moved on (started when
        due, adopted when done); their mean loss, on the device and not read."""
        model, compile = self.model, self.compile
        was_off = compile.phase is Phase.OFF
        adopted = compile.advance(model, batch_size, gradient_steps)
        if compile.phase is Phase.OFF and not was_off:
            self._turn_off("compile", "torch.compile", compile.failure)
        elif adopted is not None:
            update = CompiledSteps(model, *adopted)
            if update.reload():
                self.current = update
                self._record("compile", compile.in_effect(model._n_updates))
            else:  # new gamma, clipping or Adam values while the child compiled: compile those
                compile.start_over(model._n_updates)
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
        model = self.model
        if model.active_optimizations.cuda_graph.active and model._vec_normalize_env is None:
            self.current = CapturedSteps(model, batch_size)
        else:
            self.current = EagerSteps(model)
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
