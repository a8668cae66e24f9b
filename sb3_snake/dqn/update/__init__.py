"""One gradient step of ``SnakeDQN``, and the ways to run it: eagerly, compiled as one graph
(CPU), or captured as one CUDA graph (GPU)."""
