"""``CapturedSteps``: SnakeDQN's whole gradient step captured as one CUDA graph and replayed.

On a GPU an update of this policy is bound by the host, not the GPU: sampling, two forward
passes, the loss, backward, gradient clipping and Adam launch a few hundred small kernels, so
an update takes about as long whatever its batch size, up to thousands of samples (docs/gpu.md,
"Measured on an NVIDIA H100"). A CUDA graph records those launches once and replays them with one call, so an update
costs what its kernels cost on the GPU.

What a graph needs, and how this module meets it:

- **No host values inside.** The replay buffer's fill level and last row change between
  updates; they live in a small device tensor (:attr:`CapturedSteps.extent`) written before
  each call, and rows are drawn as ``floor(rand * filled)`` on the device
  (:meth:`DeviceReplayBuffer.samples_at` takes the last row as a tensor). Only buffers on the
  device qualify (:func:`sb3_snake.acceleration.optimizations.decide_cuda_graph`).
- **Fixed memory.** Batches, activations and gradients live in the graph's private pool; the
  parameters and Adam's state are updated in place, as are the target network's copies, so
  SB3's target updates, ``load_state_dict`` and saving see the same tensors.
- **An optimizer that can be captured**: ``capturable=True`` (Adam's step counters stay on
  the device). The learning rate is a number baked into the graph: when SB3's schedule changes
  it, the step is captured again (a constant rate, as ``sb3-snake train`` uses, never does).
  So are the other values the step reads on the host (gamma, the clipping norm, Double DQN,
  augmentation): ``SnakeDQN.set_hyperparameters`` drops the graph, as does ``set_parameters``,
  whose optimizer state arrives in new tensors.
- **Warm-up outside the capture**: the first :data:`WARMUP_STEPS` updates run eagerly on a
  side stream (they are real updates and count as such), which creates Adam's state and
  cuBLAS's workspace before the capture records anything.

What the graph records is the eager :class:`~sb3_snake.dqn.update.eager.EagerSteps` on a batch
drawn on the device. The random draws come from the default CUDA generator and, for the
symmetries, the augmentation's own (registered with the graph: a capture refuses a generator it
was not told of), whose offsets a replay advances as the same eager calls would, so a captured
run draws the numbers an eager run of the same steps draws. Nothing is compiled on CUDA
(:func:`~sb3_snake.acceleration.optimizations.compile_unavailable`): the graph holds the eager
networks. A capture that fails sets :attr:`~EagerSteps.failure`, and the call's steps run eagerly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_snake.dqn.replay import DeviceReplayBuffer
from sb3_snake.dqn.update.eager import EagerSteps

if TYPE_CHECKING:
    from stable_baselines3 import DQN

#: Eager updates before the capture (Adam's state, cuBLAS workspaces, autocast's casts).
WARMUP_STEPS = 3


class CapturedSteps(EagerSteps):
    """The gradient steps of ``model`` at ``batch_size``: a few eager, then one graph replayed.

    :param model: a :class:`~sb3_snake.SnakeDQN` whose replay buffer is a :class:`DeviceReplayBuffer`.
    :param batch_size: transitions per update; another batch size needs another capture.
    """

    decision = "cuda_graph"
    label = "CUDA graph"

    def __init__(self, model: DQN, batch_size: int):
        buffer = model.replay_buffer
        if not isinstance(buffer, DeviceReplayBuffer):
            raise TypeError(f"a captured update samples a DeviceReplayBuffer, not {type(buffer).__name__}")
        super().__init__(model)
        self.buffer, self.batch_size = buffer, batch_size
        device = buffer.device
        #: ``[rows filled, last row written]``, written before each call, read by the graph.
        self.extent = torch.zeros(2, dtype=torch.int64, device=device)
        #: The sum of the losses of this call's updates.
        self.loss_sum = torch.zeros((), device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.learning_rates: tuple[float, ...] = ()  #: the rates baked into the graph
        self.eager_steps = 0  #: updates run eagerly so far (the warm-up)
        self.replays = 0  #: updates run by replaying the graph
        for group in model.policy.optimizer.param_groups:
            if "capturable" in group:
                group["capturable"] = True

    def refresh(self) -> None:
        """Write the buffer's extent for the graph to read, and zero the loss sum (fills with
        host scalars: no copy from host memory, which would wait for the device)."""
        self.extent[0].fill_(self.buffer.size())
        self.extent[1].fill_(self.buffer.last_row)
        self.loss_sum.zero_()

    def sample(self, steps: int, batch_size: int) -> ReplayBufferSamples:
        """The batches of ``steps`` gradient steps, uniform, drawn on the device from :attr:`extent`
        alone (augmented when the model augments)."""
        rows_filled, last_row = self.extent[0], self.extent[1]
        draws = torch.rand(steps * batch_size, device=self.extent.device)
        rows = torch.minimum((draws * rows_filled).long(), rows_filled - 1)
        envs = torch.randint(self.buffer.n_envs, (steps * batch_size,), device=self.extent.device)
        data = self.buffer.samples_at(rows, envs, last_row=last_row)
        augmentation = self.model._augmentation
        return data if augmentation is None else augmentation(data)

    def recorded_step(self) -> None:
        """One eager gradient step on a batch drawn on the device, its loss added to
        :attr:`loss_sum`: what the graph records."""
        self.loss_sum.add_(self.gradient_step(self.sample(1, self.batch_size)))

    def fits(self, batch_size: int) -> bool:
        return batch_size == self.batch_size

    def reload(self) -> bool:
        return False  # the graph baked in gamma, clipping, Double DQN and the optimizer's state tensors

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        """A call of ``gradient_steps`` gradient steps of :attr:`batch_size` (which ``batch_size``
        is: :meth:`fits`); their mean loss, on the device (not read here)."""
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
        if augmentation is not None:  # its own generator: the graph advances it on each replay, as eager draws do
            graph.register_generator_state(augmentation.generator)
        try:
            with torch.cuda.graph(graph):
                self.recorded_step()
        except RuntimeError as error:
            self.failure = f"the capture failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
            return
        self.graph, self.learning_rates = graph, rates
