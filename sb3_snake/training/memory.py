"""The memory a run will hold, estimated before training, so a run that cannot fit is refused
up front, in one line that says what to lower."""

from __future__ import annotations

import math

import torch

from sb3_snake.common.errors import UsageError
from sb3_snake.common.system import available_memory_bytes
from sb3_snake.envs.rules import board_space
from sb3_snake.networks.attention import SnakeAttentionExtractor
from sb3_snake.training.config import TrainConfig

#: Share of the available memory a run may plan to use.
MEMORY_HEADROOM = 0.9


def memory_estimate(config: TrainConfig) -> dict[str, int]:
    """Bytes a run of this config will hold, by part (an estimate, stated before training)."""
    space = board_space(config.board_size, config.countdown, config.reachable)
    channels, cells = space.shape[0], config.board_size**2
    observation = channels * cells
    games = config.n_envs * (4 * observation + cells + 128) + 8 * cells * cells
    if config.algo == "pqn":
        return pqn_memory_estimate(config, observation, games)
    sizes = config.policy_kwargs()["features_extractor_kwargs"]
    try:
        with torch.device("meta"):  # shapes only: no memory is taken, however large
            extractor = SnakeAttentionExtractor(space, **sizes)
    except (RuntimeError, OverflowError, ValueError, TypeError, MemoryError) as error:
        raise UsageError(
            f"a network of {sizes} cannot even be laid out ({error})",
            fix={"embed_dim": "lower", "head_view_dim": "lower"},
        ) from None
    parameters = sum(parameter.numel() for parameter in extractor.parameters())
    head_view_inputs = channels * (2 * config.board_size - 1) ** 2 if config.head_view else 0
    return {
        "replay buffer": config.buffer_size * (2 * observation + 24),
        "games": games,
        # online and target networks, gradients, Adam's two moments
        "networks": 5 * 4 * parameters,
        "one batch": 4 * 4 * config.planned_batch_size * (head_view_inputs + observation),
    }


#: Features PQN's network has before its 256-wide LayerNorm layers, by policy, for a board of
#: ``side`` with ``observation`` inputs: the flat board, the CNN's 64 channels at a quarter of the
#: side (two stride-2 convolutions), or the attention extractor's pooled features (about 2 x 256).
_PQN_FEATURES = {
    "mlp": lambda side, observation: observation,
    "cnn": lambda side, observation: 64 * math.ceil(side / 4) ** 2,
    "attention": lambda side, observation: 512,
}


def pqn_memory_estimate(config: TrainConfig, observation: int, games: int) -> dict[str, int]:
    """Bytes a PQN run holds: its rollout (uint8 boards, and a few numbers a sample), its games,
    one network with gradients and Adam's two moments, and one minibatch in float32."""
    features = _PQN_FEATURES[config.policy](config.board_size, observation)
    parameters = features * 256 + 256 * 256 + 8 * 256
    samples = config.n_envs * config.rollout_steps
    return {
        "rollout": samples * (observation + 24),
        "games": games,
        "network": 4 * 4 * parameters,
        "one minibatch": 4 * 4 * config.planned_batch_size * (observation + 3 * 256),
    }


def check_memory(config: TrainConfig, available: int | None = None) -> None:
    """Raise UsageError, stating what is needed, when the run would not fit in memory."""
    available = available_memory_bytes() if available is None else available
    parts = memory_estimate(config)
    needed = sum(parts.values())
    if available is not None and needed > MEMORY_HEADROOM * available:
        detail = ", ".join(f"{name} {size / 2**30:.1f} GiB" for name, size in parts.items())
        raise UsageError(
            f"this run needs about {needed / 2**30:.1f} GiB ({detail}) but {available / 2**30:.1f} GiB are available",
            fix={
                "buffer_size" if config.algo == "dqn" else "rollout_steps": "lower",
                "n_envs": "lower",
                "board_size": "lower",
            },
        )
