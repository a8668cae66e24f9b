"""Hyperparameters for RL Baselines3 Zoo, one module per algorithm.

RL Zoo (``pip install "sb3-snake[zoo]"``) reads a Python module's ``hyperparams`` dict, keyed by
env id, when ``-conf`` names the module. The algorithm comes from ``--algo``, so each algorithm
has its module::

    python -m rl_zoo3.train --algo dqn --env sb3_snake/Snake-v0 --gym-packages sb3_snake -conf sb3_snake.zoo.dqn
    python -m rl_zoo3.train --algo ppo --env sb3_snake/Snake-v0 --gym-packages sb3_snake -conf sb3_snake.zoo.ppo
    python -m rl_zoo3.enjoy --algo dqn --env sb3_snake/Snake-v0 --gym-packages sb3_snake -f logs/

``--env sb3_snake/SnakeEgocentric-v0`` trains the egocentric game with the same values. ``enjoy``
draws the text board on stdout (the envs' ``human`` render mode: no pygame needed).

Both use :class:`~sb3_snake.dqn.extractor.SnakeAttentionExtractor` with the sizes ``sb3-snake
train`` trains. RL Zoo then gives ``enjoy``, ``record_video``, its Optuna search and the
Hugging Face Hub scripts for these envs. Neither module imports RL Zoo, and ``import sb3_snake``
imports neither module, so RL Zoo stays an optional extra.
"""

from sb3_snake.training.config import TrainConfig

#: The env id both modules configure (registered when ``sb3_snake`` is imported).
ENV_ID = "sb3_snake/Snake-v0"
#: The same game seen from the snake, which both modules configure with the same values.
EGOCENTRIC_ENV_ID = "sb3_snake/SnakeEgocentric-v0"
#: Every env id the modules configure.
ENV_IDS = (ENV_ID, EGOCENTRIC_ENV_ID)


def extractor_policy_kwargs() -> dict:
    """``policy_kwargs`` with the attention extractor at ``sb3-snake train``'s sizes."""
    from sb3_snake.dqn.extractor import SnakeAttentionExtractor

    return {
        "features_extractor_class": SnakeAttentionExtractor,
        "features_extractor_kwargs": TrainConfig().policy_kwargs()["features_extractor_kwargs"],
    }
