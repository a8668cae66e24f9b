"""Snake environments: the per-game Gymnasium reference and the torch-batched SB3 VecEnv."""

from sb3_snake.envs.batched_vec_env import BatchedSnakeVecEnv, BatchedStep
from sb3_snake.envs.rules import SnakeRules
from sb3_snake.envs.snake_env import SnakeEnv

__all__ = ["BatchedSnakeVecEnv", "BatchedStep", "SnakeEnv", "SnakeRules"]
