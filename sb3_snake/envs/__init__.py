"""Snake environments: the per-game Gymnasium reference and the torch-batched SB3 and Gymnasium vector envs.

- :mod:`~sb3_snake.envs.rules`: what both environments agree on (actions, channels, starts, checks);
- :mod:`~sb3_snake.envs.snake_env`: ``SnakeEnv``, one game, the readable reference;
- :mod:`~sb3_snake.envs.batched_state`: how the batched games are stored as tensors;
- :mod:`~sb3_snake.envs.batched_games`: the rules applied to all games at once on that store;
- :mod:`~sb3_snake.envs.batched_vec_env`: ``BatchedSnakeVecEnv``, SB3's ``VecEnv`` around them;
- :mod:`~sb3_snake.envs.vector_env`: ``SnakeVectorEnv``, Gymnasium's ``VectorEnv`` around them (``gym.make_vec``);
- :mod:`~sb3_snake.envs.render`: drawing observations as text or images.
"""

from sb3_snake.envs.batched_games import BatchedStep
from sb3_snake.envs.batched_vec_env import BatchedSnakeVecEnv
from sb3_snake.envs.rules import SnakeRules
from sb3_snake.envs.snake_env import SnakeEnv
from sb3_snake.envs.vector_env import SnakeVectorEnv

__all__ = ["BatchedSnakeVecEnv", "BatchedStep", "SnakeEnv", "SnakeRules", "SnakeVectorEnv"]
