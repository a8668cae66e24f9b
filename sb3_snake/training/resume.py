"""Resuming: the config a saved model trained with, read by the learner that saved it (its
:class:`~sb3_snake.training.learners.Learner`'s ``saved_config``); applying a config to the
loaded model, and refusing what cannot change on resume, is that learner's ``resume``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sb3_snake.common.errors import UsageError
from sb3_snake.persistence import saved_metadata
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.learners import learner_of_file


def resume_config(path: Path, trusted: bool = False, **changes: Any) -> TrainConfig:
    """The config the saved model at ``path`` trained with, with ``changes`` applied.

    Either learner's model resumes as the learner it is (``changes`` may not ask for the other).
    Run limits and run options are not part of a model and come from ``changes`` or the
    defaults; the batch size is the model's unless ``changes`` has one.
    """
    metadata = saved_metadata(path, trusted)
    saved = learner_of_file(metadata.get("algorithm", "SnakeDQN"), path)  # SnakeDQN's files before PQN named none
    if changes.get("algo", saved.algo) != saved.algo:
        raise UsageError(
            f"model {path} is a {saved.name} model, and the learner cannot change on resume: "
            "leave algo out, or start a new run"
        )
    return TrainConfig(**{**saved.saved_config(metadata), **changes})
