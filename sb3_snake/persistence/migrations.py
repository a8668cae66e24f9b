"""Reading files that older releases wrote: one function per older format.

Each says which release wrote the format and from which release it can be dropped (when files
of that age are no longer read). Nothing here writes an old format: saving always writes the
current one (:mod:`~sb3_snake.persistence.model_file`, :mod:`~sb3_snake.persistence.replay_file`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from sb3_snake.common.errors import UsageError
from sb3_snake.envs.rules import NUM_CHANNELS, channel_options
from sb3_snake.q_learning.targets import shaping_rewards


def legacy_replay_buffer_path(model_path: Path) -> Path:
    """Where SB3's pickled replay buffer of a run lies (read only when trusted).

    Written by 0.1.0, whose runs saved ``<stem>.replay.pkl``; drop in 0.3.0."""
    return Path(model_path).with_name(Path(model_path).stem + ".replay.pkl")


def unshaped_rewards(arrays: dict[str, np.ndarray], scale: float, gamma: float, path: Path) -> np.ndarray:
    """The rewards of a replay buffer saved with shaping added to them, less the term it added.

    Written by 0.1.0, which shaped the stored rewards (since 0.2.0 shaping is in the TD targets
    and buffers say ``env_rewards``); drop in 0.3.0."""
    if "next_observations" not in arrays:
        raise UsageError(
            f"replay buffer {path} holds shaped rewards and no next observations to unshape them with; "
            "move it away to resume without it"
        )
    observations = torch.as_tensor(arrays["observations"]).flatten(0, 1)
    next_observations = torch.as_tensor(arrays["next_observations"]).flatten(0, 1)
    terminated = torch.as_tensor(arrays["dones"] * (1 - arrays["timeouts"])).flatten() > 0
    shaping = shaping_rewards(scale, gamma, observations, next_observations, terminated).numpy()
    rewards = arrays["rewards"]
    return (rewards - shaping.reshape(rewards.shape)).astype(rewards.dtype)


def unrecorded_buffer_problem(egocentric: bool) -> str:
    """Whether a replay buffer that does not record its view may fill a model of the
    ``egocentric`` view ("" when it may): every release that wrote such buffers played the
    whole board only.

    Written by 0.2.0 and earlier; drop in 0.4.0."""
    if egocentric:
        return "does not say which view it was recorded on (saved before buffers did, on the whole board)"
    return ""


def saved_board_options(described: dict[str, Any]) -> dict[str, bool]:
    """The optional channels of a saved model's boards (:func:`~sb3_snake.envs.rules.board_options`),
    from its ``observation_channels``, or from its channel count where it has none (six channels:
    the countdown, then the only optional channel).

    Models without ``observation_channels`` were written by 0.2.0 and earlier; drop that branch in 0.4.0."""
    if "observation_channels" in described:
        return channel_options(described["observation_channels"])
    return {"countdown": described["observation_shape"][0] == NUM_CHANNELS, "reachable": False}
