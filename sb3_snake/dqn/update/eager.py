"""``EagerSteps``: a ``SnakeDQN``'s gradient steps run eagerly, and the one interface of every
way to run them (:class:`~sb3_snake.dqn.update.compiled.CompiledSteps` on a CPU,
:class:`~sb3_snake.dqn.update.captured.CapturedSteps` on CUDA).

The interface, in three words: :meth:`~EagerSteps.gradient_step` is one gradient step on one
batch; :meth:`~EagerSteps.run` is a call of several, on batches it samples
(:meth:`~EagerSteps.sample`), which returns their mean loss; :attr:`~EagerSteps.failure` says
why a faster way turned itself off. :class:`~sb3_snake.dqn.update.choice.StepChoice` chooses
which way runs. One gradient step is SB3's ``DQN.train`` body for one batch, with this
package's options: TD targets (Double DQN, n-step discounts, reward shaping;
:func:`~sb3_snake.dqn.targets.td_targets`), the Huber loss, ``zero_grad(set_to_none=True)``,
backward, gradient clipping and the optimizer's step. Unlike SB3 it returns the loss as a
tensor, detached and not read: :meth:`EagerSteps.run` reads nothing on the host, so the model
reads all of a call's losses at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_snake.dqn.targets import td_targets

if TYPE_CHECKING:
    from stable_baselines3 import DQN


class EagerSteps:
    """The gradient steps of ``model`` (a :class:`~sb3_snake.SnakeDQN`), eagerly.

    A subclass that runs them another way names the optimization it stands for
    (:attr:`decision`, a field of :class:`~sb3_snake.acceleration.optimizations.ActiveOptimizations`)
    and, when that fails at its first call, sets :attr:`failure`, finishes the call's steps
    eagerly, and is replaced by eager steps (:class:`~sb3_snake.dqn.update.choice.StepChoice`).

    :param model: the model whose networks, optimizer and replay buffer it uses.
    """

    #: The ``ActiveOptimizations`` field this way of running stands for ("" when eager).
    decision = ""
    #: The optimization's name in the warning when it fails.
    label = "eager"

    def __init__(self, model: DQN):
        self.model = model
        self.failure = ""  #: why this way of running turned itself off, if it did

    def run(self, gradient_steps: int, batch_size: int) -> torch.Tensor:
        """A call of ``gradient_steps`` gradient steps, each on a batch of ``batch_size`` sampled
        for it; their mean loss, not read."""
        losses = [self.gradient_step(self.sample(1, batch_size)) for _ in range(gradient_steps)]
        return torch.stack(losses).mean()

    def sample(self, steps: int, batch_size: int) -> ReplayBufferSamples:
        """The batches of ``steps`` gradient steps, one after another, drawn from the replay
        buffer at once (independent uniform draws, as ``steps`` draws would be) and augmented
        when the model augments."""
        model = self.model
        data = model.replay_buffer.sample(steps * batch_size, env=model._vec_normalize_env)
        return data if model._augmentation is None else model._augmentation(data)

    def gradient_step(self, batch: ReplayBufferSamples) -> torch.Tensor:
        """One gradient step on ``batch`` (as sampled: augmented already): TD targets, the Huber
        loss, backward, clipping and the optimizer's step. The loss, detached."""
        model = self.model
        online = model.q_net if model.double_dqn else None
        target_q_values = td_targets(batch, model.q_net_target, online, model.gamma, model.food_shaping)
        current_q_values = model.q_net(batch.observations).gather(1, batch.actions.long())
        loss = F.smooth_l1_loss(current_q_values, target_q_values)
        model.policy.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.policy.parameters(), model.max_grad_norm)
        model.policy.optimizer.step()
        return loss.detach()

    def fits(self, batch_size: int) -> bool:
        """Whether this object runs gradient steps of ``batch_size`` (a captured graph holds one size)."""
        return True

    def reload(self) -> bool:
        """The model's parameters, optimizer state or hyperparameters were replaced: whether this
        object still holds (after reading what it must read again)."""
        return True
