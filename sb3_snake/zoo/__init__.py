"""Hyperparameters for RL Baselines3 Zoo, one module per algorithm.

RL Zoo (``pip install "sb3-snake[zoo]"``) reads a Python module's ``hyperparams`` dict, keyed by env id, when
``-conf`` names the module; the algorithm comes from ``--algo``, so each algorithm has its module::

    python -m rl_zoo3.train --algo dqn --env sb3_snake/Snake-v0 --gym-packages sb3_snake -conf sb3_snake.zoo.dqn

Both modules configure :data:`ENV_IDS` with :class:`~sb3_snake.networks.attention.SnakeAttentionExtractor` at the
sizes ``sb3-snake train`` trains. Neither imports RL Zoo, and ``import sb3_snake`` imports neither, so RL Zoo
stays an optional extra. Design notes: docs/design-notes.md, "sb3_snake/zoo/__init__.py".
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
    from sb3_snake.networks.attention import SnakeAttentionExtractor

    return {
        "features_extractor_class": SnakeAttentionExtractor,
        "features_extractor_kwargs": TrainConfig(algo="dqn").policy_kwargs()["features_extractor_kwargs"],
    }
