"""What the update machinery needs: of a learner (:class:`LearnerUpdate`, its side of the gradient
step), and of a way to run a call of gradient steps (:class:`GradientSteps`)."""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn

from sb3_snake.update.graph import UpdateGraph


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


class LearnerUpdate(Protocol):
    """A learner's side of its gradient step: what the ways to run it need of the learner.

    ``model`` is the learner (an SB3 algorithm with ``policy.optimizer``, ``device``, ``_n_updates``,
    ``active_optimizations`` and ``update_interrupt``)."""

    model: Any

    def sample(self, steps: int, batch_size: int) -> Any:
        """The batches of ``steps`` gradient steps, one after another in each field (a named
        tuple of tensors whose first dimension is ``steps * batch_size``)."""

    def example(self, steps: int, batch_size: int) -> Any:
        """Batches shaped as :meth:`sample`'s, for a compile to trace, without using up what
        training samples next."""

    def gradient_step(self, batch: Any) -> torch.Tensor:
        """One gradient step as written, on ``batch``; its loss, detached and not read."""

    def graph(self) -> UpdateGraph:
        """The same step as a pure function of tensors, what is compiled."""

    def frozen(self) -> list[torch.Tensor]:
        """The tensors the graph reads besides the trained parameters (a target network's)."""

    def networks(self) -> dict[str, nn.Module]:
        """The networks the step runs, by name (a compiled step calls none of their hooks)."""

    def captured(self, batch_size: int) -> GradientSteps | None:
        """The learner's CUDA-graph way for steps of ``batch_size``, or None where it has none."""
