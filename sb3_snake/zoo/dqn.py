"""RL Zoo hyperparameters for SB3's DQN on ``sb3_snake/Snake-v0`` and ``sb3_snake/SnakeEgocentric-v0``
(``-conf sb3_snake.zoo.dqn``).

The values are ``sb3-snake train``'s defaults where plain SB3 DQN has them: 16 games, batch 128,
learning rate 5e-4, a target copy every 1,000 env steps, epsilon from 1 to 0.02 over the first
10,000 env steps, and 32 gradient samples per env step (``gradient_steps`` = 32 x 16 / 128 per
vector step). What only ``SnakeDQN`` and ``sb3-snake train`` have (the device replay buffer, the
compiled update, the early replay ratio, the learning-rate half-life, shaping towards the food,
the mirror images, the long starts) is not here, nor is train's longer stall limit; the
egocentric id trains train's view with these same values. ``sb3-snake train`` is the way to the rest.
"""

from sb3_snake.training.config import TrainConfig
from sb3_snake.zoo import ENV_IDS, extractor_policy_kwargs

_DEFAULTS = TrainConfig(algo="dqn")  # SnakeDQN's defaults: the learner SB3's DQN is
_TIMESTEPS = 1_000_000

hyperparams = {
    env_id: {
        "n_timesteps": _TIMESTEPS,
        "policy": "MlpPolicy",
        "n_envs": _DEFAULTS.n_envs,
        "learning_rate": _DEFAULTS.learning_rate,
        "buffer_size": _DEFAULTS.buffer_size,
        "learning_starts": _DEFAULTS.learning_starts,
        "batch_size": int(_DEFAULTS.batch_size),
        "gamma": _DEFAULTS.gamma,
        "target_update_interval": _DEFAULTS.target_update_interval,
        "train_freq": 1,
        "gradient_steps": int(_DEFAULTS.replay_ratio * _DEFAULTS.n_envs / int(_DEFAULTS.batch_size)),
        "exploration_fraction": _DEFAULTS.exploration_steps / _TIMESTEPS,
        "exploration_final_eps": _DEFAULTS.exploration_final_eps,
        "policy_kwargs": {**extractor_policy_kwargs(), "net_arch": []},
    }
    for env_id in ENV_IDS
}
