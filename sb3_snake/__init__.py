"""sb3-snake: fast Snake environments and an attention DQN for Stable-Baselines3.

Importing the package registers the Gymnasium id ``sb3_snake/Snake-v0``.
"""

import gymnasium as gym

from sb3_snake.acceleration.optimizations import ActiveOptimizations
from sb3_snake.acceleration.settings import OptimizationSettings, SettingsError
from sb3_snake.dqn.extractor import SnakeAttentionExtractor
from sb3_snake.dqn.policies import AttentionPolicy
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.envs import BatchedSnakeVecEnv, SnakeEnv
from sb3_snake.persistence import load_model

__version__ = "0.2.0"
__all__ = [
    "ActiveOptimizations",
    "AttentionPolicy",
    "BatchedSnakeVecEnv",
    "OptimizationSettings",
    "SettingsError",
    "SnakeAttentionExtractor",
    "SnakeDQN",
    "SnakeEnv",
    "__version__",
    "load_model",
]

SNAKE_ENV_ID = "sb3_snake/Snake-v0"

if SNAKE_ENV_ID not in gym.registry:
    gym.register(id=SNAKE_ENV_ID, entry_point="sb3_snake.envs.snake_env:SnakeEnv")
