"""RL Zoo hyperparameters for SB3's PPO on ``sb3_snake/Snake-v0`` and ``sb3_snake/SnakeEgocentric-v0``
(``-conf sb3_snake.zoo.ppo``).

Many games and short rollouts, as PPO on Snake is usually run: 64 games x 128 steps per update,
four epochs of minibatches of 512, a little entropy to keep exploring, and the attention
extractor with a small policy and value head each. A starting point, not a tuned result:
``python -m rl_zoo3.train ... -optimize`` searches from it.
"""

from sb3_snake.zoo import ENV_IDS, extractor_policy_kwargs

hyperparams = {
    env_id: {
        "n_timesteps": 5_000_000,
        "policy": "MlpPolicy",
        "n_envs": 64,
        "n_steps": 128,
        "batch_size": 512,
        "n_epochs": 4,
        "learning_rate": 3e-4,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "clip_range": 0.2,
        "ent_coef": 0.01,
        "policy_kwargs": {**extractor_policy_kwargs(), "net_arch": {"pi": [64], "vf": [64]}},
    }
    for env_id in ENV_IDS
}
