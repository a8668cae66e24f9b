"""``UpdateGraph``: SnakeDQN's gradient steps as a pure function of tensors, the code that is compiled.

:meth:`UpdateGraph.forward` runs one step per batch it is given, each reading what the one before
wrote: TD targets (:func:`~sb3_snake.dqn.targets.td_targets`), the Huber loss, its gradients
(``torch.func.grad_and_value`` over ``functional_call``), clipping as ``clip_grad_norm_`` and
Adam as ``torch.optim.Adam`` compute them, in place on the tensors passed. Everything else it
reads is a constant of the module, so the compiled function depends only on the tensors' shapes
and dtypes: a child process compiles it on its own copies and training runs it on the model's.
Why whole, and written out rather than traced from ``optimizer.step()``: docs/compile.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from torch import nn
from torch.func import functional_call, grad_and_value

from sb3_snake.dqn.targets import td_targets

if TYPE_CHECKING:
    from stable_baselines3 import DQN

#: Adam's state per parameter, in the order the graph takes it.
ADAM_STATE = ("exp_avg", "exp_avg_sq", "step")


class _QValues(nn.Module):
    """A Q-network's forward pass without its context and SB3's preprocessing (observations
    become float32 as ``preprocess_obs`` makes a non-image ``Box`` one): what dynamo can trace."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        features = self.network.features_extractor(observations.float())
        return self.network.q_values(features).float()


class UpdateGraph(nn.Module):
    """The gradient steps of ``model`` (a :class:`~sb3_snake.SnakeDQN` trained with plain Adam)
    as a function of their tensors: both Q-networks and the constants the steps read.

    The networks are the model's own modules; their parameters are swapped for the tensors
    passed to :meth:`forward` (``functional_call``).
    """

    def __init__(self, model: DQN):
        super().__init__()
        self.online, self.target = _QValues(model.q_net), _QValues(model.q_net_target)
        self.names = [name for name, _ in self.online.named_parameters()]
        self.target_names = [name for name, _ in self.target.named_parameters()]
        group = model.policy.optimizer.param_groups[0]
        self.gamma, self.double_dqn, self.food_shaping = float(model.gamma), bool(model.double_dqn), model.food_shaping
        self.max_grad_norm, self.betas, self.eps = float(model.max_grad_norm), tuple(group["betas"]), group["eps"]

    def constants(self) -> tuple[Any, ...]:
        """The values baked into a compiled graph: another value needs another compile."""
        return self.gamma, self.double_dqn, self.food_shaping, self.max_grad_norm, self.betas, self.eps

    def forward(
        self,
        batches: ReplayBufferSamples,
        learning_rate: torch.Tensor,
        parameters: list[torch.Tensor],
        target_parameters: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
        steps: list[torch.Tensor],
    ) -> torch.Tensor:
        """One gradient step per batch of ``batches`` (each field shaped ``(steps, batch_size,
        ...)``, :func:`split`), in order, updating ``parameters`` and Adam's state in place; their
        mean loss, detached."""
        losses = []
        for k in range(batches.observations.shape[0]):
            detached = [parameter.detach() for parameter in parameters]
            gradients, loss = grad_and_value(self._loss)(detached, target_parameters, batch_at(batches, k))
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(gradients)))
            gradients = torch._foreach_mul(gradients, (self.max_grad_norm / (norm + 1e-6)).clamp(max=1.0))
            self._adam(learning_rate, parameters, gradients, exp_avgs, exp_avg_sqs, steps)
            losses.append(loss.detach())
        return torch.stack(losses).mean()

    def _loss(
        self, parameters: list[torch.Tensor], target_parameters: list[torch.Tensor], data: ReplayBufferSamples
    ) -> torch.Tensor:
        weights = dict(zip(self.names, parameters, strict=True))
        target_weights = dict(zip(self.target_names, target_parameters, strict=True))

        def online(observations: torch.Tensor) -> torch.Tensor:
            return functional_call(self.online, weights, (observations,))

        def target(observations: torch.Tensor) -> torch.Tensor:
            return functional_call(self.target, target_weights, (observations,))

        chooser = online if self.double_dqn else None
        target_q_values = td_targets(data, target, chooser, self.gamma, self.food_shaping)
        return F.smooth_l1_loss(online(data.observations).gather(1, data.actions.long()), target_q_values)

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


def graph_arguments(model: DQN, graph: UpdateGraph) -> tuple[list[torch.Tensor], ...]:
    """The arguments of ``graph``'s forward after the batches and the learning rate, on
    ``model``'s own tensors: both networks' parameters and Adam's state (created as
    ``torch.optim.Adam`` creates it, for parameters that have none yet)."""
    optimizer = model.policy.optimizer
    parameters = [parameter for _, parameter in graph.online.named_parameters()]
    for parameter in parameters:
        if not optimizer.state[parameter]:
            optimizer.state[parameter].update(new_adam_state(parameter))
    states = [optimizer.state[parameter] for parameter in parameters]
    adam = tuple([state[name] for state in states] for name in ADAM_STATE)
    target_parameters = [parameter for _, parameter in graph.target.named_parameters()]
    return (parameters, target_parameters, *adam)


def new_adam_state(parameter: torch.Tensor) -> dict[str, torch.Tensor]:
    """Adam's state of a parameter that has taken no step, as ``torch.optim.Adam`` creates it."""
    return {
        "step": torch.zeros((), dtype=torch.float32, device=parameter.device),
        "exp_avg": torch.zeros_like(parameter, memory_format=torch.preserve_format),
        "exp_avg_sq": torch.zeros_like(parameter, memory_format=torch.preserve_format),
    }


def sample(model: DQN, steps: int, batch_size: int) -> ReplayBufferSamples:
    """The batches of ``steps`` gradient steps, one after another, drawn at once (independent
    uniform draws, as ``steps`` draws would be) and augmented when the model augments."""
    data = model.replay_buffer.sample(steps * batch_size, env=model._vec_normalize_env)
    return data if model._augmentation is None else model._augmentation(data)


def split(data: ReplayBufferSamples, steps: int) -> ReplayBufferSamples:
    """``data`` (``steps`` batches one after another) with each field shaped ``(steps, batch_size, ...)``."""
    return ReplayBufferSamples(*(None if field is None else field.unflatten(0, (steps, -1)) for field in data))


def batch_at(batches: ReplayBufferSamples, k: int) -> ReplayBufferSamples:
    """The ``k``-th batch of :func:`split`'s ``batches``."""
    return ReplayBufferSamples(*(None if field is None else field[k] for field in batches))
