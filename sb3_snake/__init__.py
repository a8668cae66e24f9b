"""sb3-snake: fast Snake environments, an attention DQN and PQN for Stable-Baselines3.

Importing the package registers the Gymnasium ids ``sb3_snake/Snake-v0`` and
``sb3_snake/SnakeEgocentric-v0``, for ``gym.make`` and ``gym.make_vec``.
"""

from importlib.metadata import PackageNotFoundError, version

import gymnasium as gym

from sb3_snake.acceleration.optimizations import ActiveOptimizations
from sb3_snake.acceleration.settings import OptimizationSettings, SettingsError
from sb3_snake.dqn.policies import AttentionPolicy
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.envs import BatchedSnakeVecEnv, SnakeEnv
from sb3_snake.networks.attention import SnakeAttentionExtractor
from sb3_snake.persistence import load_model
from sb3_snake.pqn import PQN
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.run import build_model, train

try:  # one place for the version: pyproject.toml, as installed
    __version__ = version("sb3-snake")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
__all__ = [
    "ActiveOptimizations",
    "AttentionPolicy",
    "BatchedSnakeVecEnv",
    "OptimizationSettings",
    "PQN",
    "SettingsError",
    "SnakeAttentionExtractor",
    "SnakeDQN",
    "SnakeEnv",
    "TrainConfig",
    "__version__",
    "build_model",
    "load_model",
    "train",
]

SNAKE_ENV_ID = "sb3_snake/Snake-v0"
#: The same game seen from the snake: the board turned so that it moves up, three relative actions.
EGOCENTRIC_SNAKE_ENV_ID = "sb3_snake/SnakeEgocentric-v0"

# gym.make_vec builds the torch-batched SnakeVectorEnv by default, many SnakeEnv with vectorization_mode="sync"/"async".
_ENTRY_POINTS = {
    "entry_point": "sb3_snake.envs.snake_env:SnakeEnv",
    "vector_entry_point": "sb3_snake.envs.vector_env:SnakeVectorEnv",
}
if SNAKE_ENV_ID not in gym.registry:
    gym.register(id=SNAKE_ENV_ID, **_ENTRY_POINTS)
if EGOCENTRIC_SNAKE_ENV_ID not in gym.registry:
    gym.register(id=EGOCENTRIC_SNAKE_ENV_ID, **_ENTRY_POINTS, kwargs={"egocentric": True})
