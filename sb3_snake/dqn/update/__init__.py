"""SnakeDQN's gradient step and the ways to run it.

``SnakeDQN.train`` -> :meth:`StepChoice.run <sb3_snake.dqn.update.steps.StepChoice.run>`, which
first lets the model's :class:`~sb3_snake.dqn.update.compile.Compile` move on (start the compile
child when due, adopt what it saved when done), then runs the call through the way in effect:
:class:`~sb3_snake.dqn.update.steps.EagerSteps` (:func:`~sb3_snake.dqn.update.steps.gradient_step`
as written), :class:`~sb3_snake.dqn.update.steps.CompiledSteps` (the
:class:`~sb3_snake.dqn.update.graph.UpdateGraph` compiled by :mod:`~sb3_snake.dqn.update.child`,
CPU) or :class:`~sb3_snake.dqn.update.steps.CapturedSteps` (a CUDA graph). A way that fails
turns itself off and the call finishes eagerly.
"""
