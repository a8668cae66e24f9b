"""PQN's minibatch step in its three forms: as written (:func:`gradient_step`), as a pure function
of tensors that a child process compiles (:class:`PQNUpdateGraph`), and captured as a CUDA graph
that gathers its minibatch from the rollout on the device (:class:`CapturedMinibatches`); and PQN's
side of the update machinery (:class:`PQNUpdate`: the minibatches of the rollout being fitted).

Each step fits a minibatch's Q-values of the moves played to the rollout's Q(lambda) targets
(half the squared error) and, where the rollout has them, the Q-values of the moves that die at once
to their known value (:func:`~sb3_snake.q_learning.targets.fatal_move_loss`); then backward, the
gradients clipped, Adam. The machinery that runs them (the way in effect, the compile, the fallback)
is :mod:`sb3_snake.update`'s, shared with SnakeDQN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from sb3_snake.q_learning.targets import fatal_move_loss
from sb3_snake.update.capture import WARMUP_STEPS, capture, make_capturable, warm_up
from sb3_snake.update.graph import UpdateGraph

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm


class Samples(NamedTuple):
    """What PQN fits, one row per sample (a whole rollout, flattened over steps and games, or one
    minibatch of it): the boards played (as the env gave them), the moves played and their
    Q(lambda) targets; with fatal-move targets, which moves die at once (``(N, A)`` bool, in the
    boards' own frame) and their known value (``(N,)``)."""

    observations: torch.Tensor
    actions: torch.Tensor
    returns: torch.Tensor
    fatal_moves: torch.Tensor | None = None
    fatal_values: torch.Tensor | None = None


def minibatch_loss(q_values: torch.Tensor, batch: Samples) -> torch.Tensor:
    """Half the squared error of the moves played against their targets, plus the fatal moves'
    term where ``batch`` has it."""
    chosen = q_values.gather(1, batch.actions[:, None]).squeeze(1)
    loss = 0.5 * F.mse_loss(chosen, batch.returns)
    if batch.fatal_moves is not None:
        loss = loss + fatal_move_loss(q_values, batch.fatal_moves, batch.fatal_values)
    return loss


def gradient_step(model: BaseAlgorithm, batch: Samples) -> torch.Tensor:
    """One gradient step of ``model`` on ``batch``: the loss, backward, the gradients' norm
    clipped to ``max_grad_norm``, Adam. The loss, detached and not read."""
    loss = minibatch_loss(model.q_net(batch.observations), batch)
    model.policy.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.policy.parameters(), model.max_grad_norm)
    model.policy.optimizer.step()
    return loss.detach()


class PQNUpdateGraph(UpdateGraph):
    """:func:`gradient_step` as a pure function of tensors: the Q-network trained, nothing frozen
    (PQN has no target network), clipping and Adam's settings baked in."""

    sources = (*UpdateGraph.sources, "pqn/gradient_step.py", "q_learning/targets.py")

    def __init__(self, model: BaseAlgorithm):
        super().__init__(model.q_net, model.policy.optimizer, model.max_grad_norm)

    def loss(self, online: Any, frozen: list[torch.Tensor], batch: Samples) -> torch.Tensor:
        return minibatch_loss(online(batch.observations), batch)


class PQNUpdate:
    """PQN's side of its gradient steps (:class:`~sb3_snake.update.protocols.LearnerUpdate`): the
    minibatches of one pass over a rollout, in the order :meth:`start_pass` was given, each
    shown under a random symmetry when the model augments."""

    def __init__(self, model: BaseAlgorithm):
        self.model = model
        self.rollout: Samples | None = None  #: the rollout being fitted, one row per sample
        self.order: torch.Tensor | None = None  #: ``(n_minibatches, batch_size)``: this pass's rows
        self.taken = 0  #: the minibatches of this pass handed out so far

    def start_pass(self, rollout: Samples, order: torch.Tensor) -> None:
        """Fit ``rollout`` next, its minibatches the rows of ``order`` (``(n_minibatches, batch_size)``)."""
        self.rollout, self.order, self.taken = rollout, order, 0

    def next_rows(self, steps: int) -> torch.Tensor:
        """The rows of the pass's next ``steps`` minibatches, ``(steps, batch_size)``."""
        assert self.order is not None and self.taken + steps <= len(self.order), "more minibatches than a pass"
        rows = self.order[self.taken : self.taken + steps]
        self.taken += steps
        return rows

    def gather(self, source: Samples, rows: torch.Tensor) -> Samples:
        """The samples ``rows`` (flat) of ``source``, under random symmetries when the model
        augments: the boards turned, the moves played turned with them, and the fatal moves
        moved to where each went (the targets are the same under every symmetry)."""
        batch = Samples(*(None if field is None else field[rows] for field in source))
        augmentation = self.model._augmentation
        if augmentation is None:
            return batch
        symmetries = augmentation.draw(len(rows))
        moved = augmentation.actions[symmetries]  # (B, A): where each move went
        fatal = batch.fatal_moves
        return batch._replace(
            observations=augmentation.transform(batch.observations, symmetries),
            actions=moved.gather(1, batch.actions[:, None]).squeeze(1),
            fatal_moves=None if fatal is None else torch.zeros_like(fatal).scatter(1, moved, fatal),
        )

    def sample(self, steps: int, batch_size: int) -> Samples:
        assert self.rollout is not None and self.order is not None, "start_pass first"
        return self.gather(self.rollout, self.next_rows(steps).flatten())

    def example(self, steps: int, batch_size: int) -> Samples:
        """The pass's first ``steps`` minibatches, not handed out and not augmented (the same shapes)."""
        assert self.rollout is not None and self.order is not None, "start_pass first"
        rows = self.order[:steps].flatten()
        return Samples(*(None if field is None else field[rows] for field in self.rollout))

    def gradient_step(self, batch: Samples) -> torch.Tensor:
        return gradient_step(self.model, batch)

    def graph(self) -> PQNUpdateGraph:
        return PQNUpdateGraph(self.model)

    def frozen(self) -> list[torch.Tensor]:
        return []

    def networks(self) -> dict[str, nn.Module]:
        return {"q_net": self.model.q_net}

    def captured(self, batch_size: int) -> CapturedMinibatches:
        return CapturedMinibatches(self, batch_size)


class CapturedMinibatches:
    """PQN's minibatch steps at ``batch_size`` on CUDA: :data:`~sb3_snake.update.capture.WARMUP_STEPS`
    eager on a side stream, then one step captured as a CUDA graph and replayed.

    The graph reads no host value: each rollout is copied into tensors of fixed addresses
    (:attr:`rollout`, once per rollout, on the device), and each step gathers its minibatch there
    by a fixed index tensor (:attr:`rows`) written from the pass's order before its replay (a copy
    on the device). Adam runs with ``capturable=True``; the learning rate and clipping are baked
    in (a new learning rate captures again), and the augmentation's generator is registered with
    the graph. A capture that fails sets :attr:`failure`.

    :param update: PQN's side of the step (:class:`PQNUpdate`), whose pass the steps fit.
    :param batch_size: samples per step; another batch size needs another capture.
    """

    decision, label = "cuda_graph", "CUDA graph"

    def __init__(self, update: PQNUpdate, batch_size: int):
        self.update, self.model, self.batch_size, self.failure = update, update.model, batch_size, ""
        device = self.model.device
        self.rows = torch.zeros(batch_size, dtype=torch.int64, device=device)  #: the step's rows of the rollout
        self.loss_sum = torch.zeros((), device=device)  #: the sum of this call's losses
        self.rollout: Samples | None = None  #: the fixed copy of the rollout the graph reads
        self._copied: Samples | None = None  #: the rollout last copied there
        self.graph: torch.cuda.CUDAGraph | None = None
        self.learning_rates: tuple[float, ...] = ()  #: the rates baked into the graph
        self.eager_steps = 0  #: steps run eagerly so far (the warm-up)
        self.replays = 0  #: steps run by replaying the graph
        make_capturable(self.model.policy.optimizer)

    def fits(self, batch_size: int) -> bool:
        return batch_size == self.batch_size

    def reload(self) -> bool:
        return False  # the graph baked in clipping and the optimizer's state tensors

    def recorded_step(self) -> None:
        """What the graph records: one step on the minibatch :attr:`rows` of :attr:`rollout`."""
        self.loss_sum.add_(gradient_step(self.model, self.update.gather(self.rollout, self.rows)))

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        self._hold_rollout()
        self.loss_sum.zero_()
        rates = tuple(group["lr"] for group in self.model.policy.optimizer.param_groups)
        if self.graph is not None and rates != self.learning_rates:
            self.graph = None
        for _ in range(gradient_steps):
            self.rows.copy_(self.update.next_rows(1)[0])
            if self.graph is None and self.eager_steps >= WARMUP_STEPS and not self.failure:
                # recorded, not run: the replay below runs the step
                self.graph, self.failure = capture(self.recorded_step, self.model.policy.optimizer, self._generators())
                self.learning_rates = rates
            if self.graph is not None:
                self.graph.replay()
                self.replays += 1
            elif self.eager_steps < WARMUP_STEPS:
                warm_up(self.recorded_step, 1)
                self.eager_steps += 1
            else:  # the capture failed: eagerly
                self.recorded_step()
                self.eager_steps += 1
        return self.loss_sum / gradient_steps

    def _hold_rollout(self) -> None:
        """Copy the rollout being fitted into the graph's fixed tensors, once per rollout."""
        rollout = self.update.rollout
        if rollout is self._copied:
            return
        layout = [None if field is None else (field.shape, field.dtype) for field in rollout]
        held = None if self.rollout is None else [None if f is None else (f.shape, f.dtype) for f in self.rollout]
        if layout != held:  # a rollout of another shape: new tensors, and a new graph
            self.rollout = Samples(*(None if field is None else torch.empty_like(field) for field in rollout))
            self.graph = None
        for held_field, field in zip(self.rollout, rollout, strict=True):
            if field is not None:
                held_field.copy_(field)
        self._copied = rollout

    def _generators(self) -> list[torch.Generator]:
        augmentation = self.model._augmentation
        return [] if augmentation is None else [augmentation.generator]
