"""The gradient step's machinery, which both learners use: the ways to run a call of gradient
steps and the compile that makes one of them.

A learner's ``train`` -> :meth:`StepChoice.run <sb3_snake.update.steps.StepChoice.run>`, which
first lets the learner's :class:`~sb3_snake.update.compile.Compile` move on (start the compile
child when due, adopt what it saved when done), then runs the call through the way in effect:
eager, compiled (the learner's :class:`~sb3_snake.update.graph.UpdateGraph`, compiled by
:mod:`~sb3_snake.update.child`, CPU) or captured (a CUDA graph: :mod:`~sb3_snake.update.capture`).
A way that fails turns itself off and the call finishes eagerly. The learner's side of it all is
one :class:`~sb3_snake.update.protocols.LearnerUpdate`.
"""
