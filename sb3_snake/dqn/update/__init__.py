"""One gradient step of ``SnakeDQN`` (``eager.EagerSteps``), and the ways to run it: eagerly,
compiled as one graph (``compiled``, CPU), or captured as one CUDA graph (``captured``, GPU);
chosen in one place with one fallback (``choice.StepChoice``), the compile's own state
(``compile.CompileState``), and the compile in a child process that training survives
(``child.CompileJob``)."""
