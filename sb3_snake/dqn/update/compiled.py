"""``CompiledUpdate``: SnakeDQN's whole gradient step compiled as one graph, for the CPU.

An eager update of ``sb3-snake train``'s policy at batch 128 calls about 1,000 operators (the
sampled batch's conversion, two forward passes, the loss, backward, clipping, Adam), and on a
2-core CPU the matrix products take a quarter of its time; the rest is dispatch and small
kernels. Compiling the two Q-networks alone, as ``torch.compile`` did here before, left the
loss, the backward pass's bookkeeping, clipping and Adam eager, and SB3's observation
preprocessing (a NumPy test of the space) broke each network's graph: 1.0-1.2x the eager step.

This module compiles the update itself, ``torch.compile(fullgraph=True)`` over one function:

- **Gradients inside the graph**: ``torch.func.grad_and_value`` of the Huber loss with respect
  to the online network's parameters (``functional_call``), so the backward pass is traced too.
  The target network's values and Double DQN's choice are taken under ``no_grad`` as
  :meth:`~sb3_snake.dqn.snake_dqn.SnakeDQN.gradient_step` takes them.
- **Clipping** as ``torch.nn.utils.clip_grad_norm_`` computes it (the norm of the parameters'
  norms, ``max_norm / (norm + 1e-6)`` capped at 1).
- **Adam as ``torch.optim.Adam`` computes it, on the optimizer's own state**: ``exp_avg``,
  ``exp_avg_sq`` and ``step`` are the tensors in ``optimizer.state``, updated in place, as are
  the parameters. Saving, loading, SB3's target-network copies and an eager step in between
  see the same tensors. The learning rate is a tensor filled before each call, so a rate that
  changes (a schedule, ``learning_rate_half_life``) recompiles nothing.
- **The forward context** of the optimization layer around the call: the SDPA kernel
  restriction, and bf16 autocast when active, under which the graph is traced (autocast
  entered inside a ``grad_and_value`` failed to trace on torch 2.13). Everything outside the
  networks is elementwise or a reduction, which autocast leaves in float32, and Q-values leave
  the networks as float32, as in the eager step.

What it does not take (:func:`unsupported_reason`): optimizers other than Adam without weight
decay, AMSGrad, ``maximize`` or ``differentiable``; parameter groups other than one; observations
that SB3 would preprocess beyond ``float()`` (images, dicts). Those keep compiling the networks.
A compile that fails (at the first call, which compiles) turns this off for the model, with
the error as the compile decision's reason, and training goes on eagerly.

On CUDA the gradient step is captured as a CUDA graph instead (:mod:`sb3_snake.dqn.update.captured`),
which removes the launch overhead this removes on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from torch import nn
from torch.func import functional_call, grad_and_value
from torch.nn.attention import sdpa_kernel

if TYPE_CHECKING:
    from stable_baselines3 import DQN

    from sb3_snake.acceleration.optimizations import ActiveOptimizations


def td_targets(
    data: ReplayBufferSamples,
    target: Callable[[torch.Tensor], torch.Tensor],
    online: Callable[[torch.Tensor], torch.Tensor] | None,
    gamma: float,
) -> torch.Tensor:
    """DQN's TD targets of a batch, without gradients: ``r + (1 - done) * discount * Q'(s', a')``,
    ``a'`` the target network's best action, or the online network's when ``online`` is given
    (Double DQN); the discount is the batch's own (n-step returns) or ``gamma``."""
    discounts = data.discounts if data.discounts is not None else gamma
    with torch.no_grad():
        next_q_values = target(data.next_observations)
        if online is not None:
            next_actions = online(data.next_observations).argmax(dim=1, keepdim=True)
            next_q_values = next_q_values.gather(1, next_actions)
        else:
            next_q_values = next_q_values.max(dim=1, keepdim=True).values
        return data.rewards + (1 - data.dones) * discounts * next_q_values


def unsupported_reason(model: DQN) -> str:
    """Why ``model``'s update cannot be compiled whole, or ``""`` when it can."""
    optimizer = model.policy.optimizer
    if type(optimizer) is not torch.optim.Adam:
        return f"the whole update is compiled for Adam only, not {type(optimizer).__name__}"
    if len(optimizer.param_groups) != 1:
        return "the whole update is compiled for one parameter group only"
    group = optimizer.param_groups[0]
    if {id(p) for p in group["params"]} != {id(p) for p in model.q_net.parameters()}:
        return "the whole update is compiled for an optimizer of exactly the online network's parameters"
    for option in ("amsgrad", "maximize", "differentiable", "weight_decay"):
        if group.get(option):
            return f"the whole update is not compiled with Adam's {option}"
    space = model.observation_space
    if not isinstance(space, spaces.Box) or (model.policy.normalize_images and is_image_space(space)):
        return "the whole update is compiled for observations that need only float(), not images or dicts"
    return ""


class _QValues(nn.Module):
    """A Q-network's forward pass without its context and SB3's preprocessing (observations
    become float32 as ``preprocess_obs`` makes a non-image ``Box`` one): what dynamo can trace."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        features = self.network.features_extractor(observations.float())
        return self.network.q_values(features).float()


class CompiledUpdate:
    """The gradient steps of ``model`` (a :class:`~sb3_snake.SnakeDQN`), one compiled call each.

    :param model: the model; its update must be supported (:func:`unsupported_reason`).
    :param active: the optimizations in effect (compile mode, bf16, SDPA kernels).
    """

    def __init__(self, model: DQN, active: ActiveOptimizations):
        self.model = model
        self.sdpa_backends = active.sdpa_backends
        self.device_type, self.bf16 = model.device.type, active.bf16.active
        self.online, self.target = _QValues(model.q_net), _QValues(model.q_net_target)
        named = list(self.online.named_parameters())
        self.names = [name for name, _ in named]
        self.parameters = [parameter for _, parameter in named]
        self.buffers = dict(self.online.named_buffers())
        self.optimizer = model.policy.optimizer
        self.group = self.optimizer.param_groups[0]
        self.learning_rate = torch.zeros((), device=model.device)
        self.state: tuple[list[torch.Tensor], ...] = ()  #: Adam's exp_avg, exp_avg_sq and step, per parameter
        self.calls = 0  #: updates run (the first one compiles)
        self.function = torch.compile(self._update, fullgraph=True, dynamic=False, mode=active.settings.compile_mode)

    def _adam_state(self) -> tuple[list[torch.Tensor], ...]:
        """Adam's state tensors of every parameter, created as ``torch.optim.Adam`` creates them."""
        for parameter in self.parameters:
            state = self.optimizer.state[parameter]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=parameter.device)
                state["exp_avg"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
        names = ("exp_avg", "exp_avg_sq", "step")
        return tuple([self.optimizer.state[parameter][name] for parameter in self.parameters] for name in names)

    def _loss(self, parameters: list[torch.Tensor], data: ReplayBufferSamples) -> torch.Tensor:
        model = self.model
        target_q_values = td_targets(data, self.target, self.online if model.double_dqn else None, model.gamma)
        weights = {**dict(zip(self.names, parameters, strict=True)), **self.buffers}
        current_q_values = functional_call(self.online, weights, (data.observations,))
        return F.smooth_l1_loss(current_q_values.gather(1, data.actions.long()), target_q_values)

    def _update(
        self,
        data: ReplayBufferSamples,
        learning_rate: torch.Tensor,
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
        steps: list[torch.Tensor],
    ) -> torch.Tensor:
        parameters = self.parameters
        gradients, loss = grad_and_value(self._loss)([p.detach() for p in parameters], data)
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(gradients)))
        gradients = torch._foreach_mul(gradients, (self.model.max_grad_norm / (norm + 1e-6)).clamp(max=1.0))
        beta1, beta2 = self.group["betas"]
        with torch.no_grad():
            torch._foreach_add_(steps, 1)
            torch._foreach_lerp_(exp_avgs, gradients, 1 - beta1)
            torch._foreach_mul_(exp_avg_sqs, beta2)
            torch._foreach_addcmul_(exp_avg_sqs, gradients, gradients, 1 - beta2)
            step = steps[0]  # every parameter has taken the same steps
            step_size = learning_rate / (1 - beta1**step)
            denominators = torch._foreach_div(torch._foreach_sqrt(exp_avg_sqs), (1 - beta2**step).sqrt())
            torch._foreach_add_(denominators, self.group["eps"])
            updates = torch._foreach_div(exp_avgs, denominators)
            torch._foreach_mul_(updates, -step_size)
            torch._foreach_add_(parameters, updates)
        return loss.detach()

    def __call__(self, data: ReplayBufferSamples) -> torch.Tensor:
        """One update from one sampled batch; the loss, detached."""
        self.learning_rate.fill_(self.group["lr"])
        self.state = self.state or self._adam_state()
        with sdpa_kernel(self.sdpa_backends), torch.autocast(self.device_type, torch.bfloat16, enabled=self.bf16):
            loss = self.function(data, self.learning_rate, *self.state)
        self.calls += 1
        return loss
