"""SnakeDQN's gradient step in its three forms: SB3's ``DQN.train`` body for one batch as written
(:func:`gradient_step`), as a pure function of tensors that a child process compiles
(:class:`DQNUpdateGraph`), and captured as a CUDA graph that samples on the device
(:class:`CapturedSteps`); and SnakeDQN's side of the update machinery (:class:`DQNUpdate`: batches
sampled from the replay buffer, augmented when the model augments).

The machinery that runs them (the way in effect, the compile, the fallback) is
:mod:`sb3_snake.update`'s, shared with PQN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from torch import nn
from torch.func import functional_call

from sb3_snake.dqn.replay import DeviceReplayBuffer
from sb3_snake.dqn.targets import td_targets
from sb3_snake.envs.action_masks import action_masks
from sb3_snake.q_learning.targets import fatal_move_loss, fatal_move_values
from sb3_snake.update.capture import WARMUP_STEPS, capture, make_capturable, warm_up
from sb3_snake.update.graph import QValues, UpdateGraph

if TYPE_CHECKING:
    from stable_baselines3 import DQN


def gradient_step(model: DQN, batch: ReplayBufferSamples) -> torch.Tensor:
    """One gradient step on ``batch`` (augmented already), SB3's ``DQN.train`` body for one
    batch: TD targets, the Huber loss, backward, clipping, the optimizer's step. The loss,
    detached and not read, so that a call reads all of its losses at once."""
    online = model.q_net if model.double_dqn else None
    target_q_values = td_targets(batch, model.q_net_target, online, model.gamma, model.food_shaping)
    q_values = model.q_net(batch.observations)
    loss = F.smooth_l1_loss(q_values.gather(1, batch.actions.long()), target_q_values)
    if model.fatal_move_targets:
        loss = loss + fatal_moves_loss(q_values, batch.observations, model.food_shaping)
    model.policy.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.policy.parameters(), model.max_grad_norm)
    model.policy.optimizer.step()
    return loss.detach()


def fatal_moves_loss(q_values: torch.Tensor, observations: torch.Tensor, food_shaping: float) -> torch.Tensor:
    """The fatal moves' term of a batch (:func:`~sb3_snake.q_learning.targets.fatal_move_loss`), its
    moves read from the boards as sampled (turned by the augmentation already)."""
    fatal = ~action_masks(observations, egocentric=q_values.shape[1] == 3)
    return fatal_move_loss(q_values, fatal, fatal_move_values(food_shaping, observations))


class DQNUpdateGraph(UpdateGraph):
    """:func:`gradient_step` as a pure function of tensors: the online network trained, the target
    network's parameters frozen (passed as the graph's ``frozen`` tensors), gamma, Double DQN and
    the food shaping's scale baked in."""

    sources = (*UpdateGraph.sources, "dqn/gradient_step.py", "dqn/targets.py", "q_learning/targets.py")
    sources += ("envs/action_masks.py",)

    def __init__(self, model: DQN):
        super().__init__(model.q_net, model.policy.optimizer, model.max_grad_norm)
        self.target = QValues(model.q_net_target)
        self.target_names = [name for name, _ in self.target.named_parameters()]
        self.gamma, self.double_dqn, self.food_shaping = float(model.gamma), bool(model.double_dqn), model.food_shaping
        self.fatal_move_targets = bool(model.fatal_move_targets)

    def constants(self) -> tuple[Any, ...]:
        return (*super().constants(), self.gamma, self.double_dqn, self.food_shaping, self.fatal_move_targets)

    def loss(self, online: Any, frozen: list[torch.Tensor], batch: ReplayBufferSamples) -> torch.Tensor:
        target_weights = dict(zip(self.target_names, frozen, strict=True))

        def target(observations: torch.Tensor) -> torch.Tensor:
            return functional_call(self.target, target_weights, (observations,))

        chooser = online if self.double_dqn else None
        target_q_values = td_targets(batch, target, chooser, self.gamma, self.food_shaping)
        q_values = online(batch.observations)
        loss = F.smooth_l1_loss(q_values.gather(1, batch.actions.long()), target_q_values)
        if self.fatal_move_targets:
            loss = loss + fatal_moves_loss(q_values, batch.observations, self.food_shaping)
        return loss


class DQNUpdate:
    """SnakeDQN's side of its gradient steps (:class:`~sb3_snake.update.protocols.LearnerUpdate`):
    uniform batches of its replay buffer, augmented when the model augments, and its TD loss."""

    def __init__(self, model: DQN):
        self.model = model

    def sample(self, steps: int, batch_size: int) -> ReplayBufferSamples:
        """The batches of ``steps`` gradient steps, one after another, drawn at once (independent
        uniform draws, as ``steps`` draws would be) and augmented when the model augments."""
        model = self.model
        data = model.replay_buffer.sample(steps * batch_size, env=model._vec_normalize_env)
        return data if model._augmentation is None else model._augmentation(data)

    def example(self, steps: int, batch_size: int) -> ReplayBufferSamples:
        return self.sample(steps, batch_size)  # a draw more from the buffer changes no batch to come

    def gradient_step(self, batch: ReplayBufferSamples) -> torch.Tensor:
        return gradient_step(self.model, batch)

    def graph(self) -> DQNUpdateGraph:
        return DQNUpdateGraph(self.model)

    def frozen(self) -> list[torch.Tensor]:
        return list(self.model.q_net_target.parameters())

    def networks(self) -> dict[str, nn.Module]:
        return {"q_net": self.model.q_net, "q_net_target": self.model.q_net_target}

    def captured(self, batch_size: int) -> CapturedSteps | None:
        """:class:`CapturedSteps`, where no VecNormalize changes the samples."""
        return None if self.model._vec_normalize_env is not None else CapturedSteps(self.model, batch_size)


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
        make_capturable(model.policy.optimizer)

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
        warm_up(self.recorded_step, steps)
        self.eager_steps += steps

    def _capture(self, rates: tuple[float, ...]) -> None:
        augmentation = self.model._augmentation
        # the augmentation's own generator: a capture refuses one it was not told of
        generators = [] if augmentation is None else [augmentation.generator]
        graph, self.failure = capture(self.recorded_step, self.model.policy.optimizer, generators)
        if graph is not None:
            self.graph, self.learning_rates = graph, rates
