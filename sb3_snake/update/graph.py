"""``UpdateGraph``: a learner's gradient steps as a pure function of tensors, the code that is compiled.

A learner subclasses :class:`UpdateGraph` with its loss (:meth:`UpdateGraph.loss`: SnakeDQN's TD
error against its target network, PQN's squared error against its rollout's targets);
:meth:`UpdateGraph.forward` runs one step per batch it is given, each reading what the one before
wrote: the loss's gradients (``torch.func.grad_and_value`` over ``functional_call``), clipping as
``clip_grad_norm_`` and Adam as ``torch.optim.Adam`` compute them, in place on the tensors passed.
Everything else it reads is a constant of the module, so the compiled function depends only on the
tensors' shapes and dtypes: a child process compiles it on its own copies and training runs it on
the model's. Why whole, and written out rather than traced from ``optimizer.step()``: docs/compile.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

import torch
from torch import nn
from torch.func import functional_call, grad_and_value

#: Adam's state per parameter, in the order the graph takes it.
ADAM_STATE = ("exp_avg", "exp_avg_sq", "step")

Batch = TypeVar("Batch", bound=NamedTuple)


class QValues(nn.Module):
    """A Q-network's forward pass without its context and SB3's preprocessing (observations
    become float32 as ``preprocess_obs`` makes a non-image ``Box`` one): what dynamo can trace.
    ``network`` is a :class:`~sb3_snake.networks.q_network.SnakeQNetwork` (``q_values`` from features)."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        features = self.network.features_extractor(observations.float())
        return self.network.q_values(features).float()


class UpdateGraph(nn.Module):
    """The gradient steps of one learner as a function of their tensors: the Q-network it trains
    (:attr:`online`, whose parameters are swapped for the tensors passed to :meth:`forward` by
    ``functional_call``), the frozen tensors the loss also reads (a target network's parameters),
    and constants.

    :param online: the trained Q-network (a module with ``features_extractor`` and ``q_values``).
    :param optimizer: its ``torch.optim.Adam`` (one parameter group), whose betas and eps are baked in.
    :param max_grad_norm: the gradients' norm is clipped to this.
    """

    #: The package's modules (paths below ``sb3_snake/``) whose code the graph runs: their sources
    #: enter the compiled file's key, so an edit compiles it again. A learner's graph adds its own.
    sources: tuple[str, ...] = (
        "update/graph.py",
        "networks/q_network.py",
        "networks/attention.py",
        "networks/cnn.py",
        "envs/rules.py",
    )

    def __init__(self, online: nn.Module, optimizer: torch.optim.Optimizer, max_grad_norm: float):
        super().__init__()
        self.online = QValues(online)
        self.names = [name for name, _ in self.online.named_parameters()]
        group = optimizer.param_groups[0]
        self.max_grad_norm, self.betas, self.eps = float(max_grad_norm), tuple(group["betas"]), group["eps"]

    def constants(self) -> tuple[Any, ...]:
        """The values baked into a compiled graph: another value needs another compile."""
        return self.max_grad_norm, self.betas, self.eps

    def loss(self, online: Any, frozen: list[torch.Tensor], batch: Any) -> torch.Tensor:
        """The learner's loss of one ``batch``; ``online(observations)`` gives the trained network's
        Q-values with the parameters being differentiated; ``frozen`` the other tensors it reads."""
        raise NotImplementedError

    def forward(
        self,
        batches: Any,
        learning_rate: torch.Tensor,
        parameters: list[torch.Tensor],
        frozen: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
        steps: list[torch.Tensor],
    ) -> torch.Tensor:
        """One gradient step per batch of ``batches`` (each field shaped ``(steps, batch_size,
        ...)``, :func:`split`), in order, updating ``parameters`` and Adam's state in place; their
        mean loss, detached."""
        losses = []
        for k in range(batches[0].shape[0]):
            detached = [parameter.detach() for parameter in parameters]
            gradients, loss = grad_and_value(self._loss)(detached, frozen, batch_at(batches, k))
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(gradients)))
            gradients = torch._foreach_mul(gradients, (self.max_grad_norm / (norm + 1e-6)).clamp(max=1.0))
            self._adam(learning_rate, parameters, gradients, exp_avgs, exp_avg_sqs, steps)
            losses.append(loss.detach())
        return torch.stack(losses).mean()

    def _loss(self, parameters: list[torch.Tensor], frozen: list[torch.Tensor], batch: Any) -> torch.Tensor:
        weights = dict(zip(self.names, parameters, strict=True))

        def online(observations: torch.Tensor) -> torch.Tensor:
            return functional_call(self.online, weights, (observations,))

        return self.loss(online, frozen, batch)

    def _adam(
        self,
        learning_rate: torch.Tensor,
        parameters: list[torch.Tensor],
        gradients: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
        steps: list[torch.Tensor],
    ) -> None:
        """``torch.optim.Adam``'s step (no weight decay, amsgrad or maximize), in place."""
        beta1, beta2 = self.betas
        with torch.no_grad():
            torch._foreach_add_(steps, 1)
            torch._foreach_lerp_(exp_avgs, gradients, 1 - beta1)
            torch._foreach_mul_(exp_avg_sqs, beta2)
            torch._foreach_addcmul_(exp_avg_sqs, gradients, gradients, 1 - beta2)
            step = steps[0]  # every parameter has taken the same steps
            step_size = learning_rate / (1 - beta1**step)
            denominators = torch._foreach_div(torch._foreach_sqrt(exp_avg_sqs), (1 - beta2**step).sqrt())
            torch._foreach_add_(denominators, self.eps)
            updates = torch._foreach_div(exp_avgs, denominators)
            torch._foreach_mul_(updates, -step_size)
            torch._foreach_add_(parameters, updates)


def graph_arguments(
    optimizer: torch.optim.Optimizer, graph: UpdateGraph, frozen: Sequence[torch.Tensor] = ()
) -> tuple[list[torch.Tensor], ...]:
    """The arguments of ``graph``'s forward after the batches and the learning rate, on the
    model's own tensors: the trained network's parameters, the ``frozen`` tensors, and Adam's
    state (created as ``torch.optim.Adam`` creates it, for parameters that have none yet)."""
    parameters = [parameter for _, parameter in graph.online.named_parameters()]
    for parameter in parameters:
        if not optimizer.state[parameter]:
            optimizer.state[parameter].update(new_adam_state(parameter))
    states = [optimizer.state[parameter] for parameter in parameters]
    adam = tuple([state[name] for state in states] for name in ADAM_STATE)
    return (parameters, list(frozen), *adam)


def new_adam_state(parameter: torch.Tensor) -> dict[str, torch.Tensor]:
    """Adam's state of a parameter that has taken no step, as ``torch.optim.Adam`` creates it."""
    return {
        "step": torch.zeros((), dtype=torch.float32, device=parameter.device),
        "exp_avg": torch.zeros_like(parameter, memory_format=torch.preserve_format),
        "exp_avg_sq": torch.zeros_like(parameter, memory_format=torch.preserve_format),
    }


def split(data: Batch, steps: int) -> Batch:
    """``data`` (``steps`` batches one after another) with each field shaped ``(steps, batch_size, ...)``."""
    return type(data)(*(None if field is None else field.unflatten(0, (steps, -1)) for field in data))


def batch_at(batches: Batch, k: int) -> Batch:
    """The ``k``-th batch of :func:`split`'s ``batches``."""
    return type(batches)(*(None if field is None else field[k] for field in batches))


def batch_size_of(batches: Any) -> tuple[int, int]:
    """``(steps, batch_size)`` of :func:`split`'s ``batches``: the first field's leading shape."""
    steps, size = batches[0].shape[:2]
    return int(steps), int(size)
