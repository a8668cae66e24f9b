"""A run's config and settings from a caller's options, as ``sb3-snake train`` builds them.

Precedence, highest first: the options given, a hyperparameter file, what a resumed model
trained with, then :class:`~sb3_snake.training.config.TrainConfig`'s defaults. A Python caller
gets exactly what the command line does by calling :func:`configure_run`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import check_writable_dir
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.hyperparameters import apply_hyperparameters, read_hyperparameters
from sb3_snake.training.resume import resume_config


def configure_run(
    options: Mapping[str, Any],
    settings: OptimizationSettings,
    hyperparameters: Path | None = None,
    resume: Path | None = None,
    trusted: bool = False,
) -> tuple[TrainConfig, OptimizationSettings]:
    """The config and settings of a run; every problem with them is one UsageError.

    :param options: TrainConfig field values the caller sets (the command line's flags).
    :param settings: the run's settings (``OptimizationSettings.load``); a hyperparameter file's
        batch size replaces theirs unless theirs was given as an override.
    :param hyperparameters: a hyperparameter file (JSON or YAML, as ``tune`` writes) under ``options``.
    :param resume: a saved model whose values fill in what ``options`` and the file leave out;
        without it, TrainConfig's defaults do.
    :param trusted: read ``resume`` with SB3's full loader, which runs pickled code.
    :return: ``(config, settings)``, ready for :func:`sb3_snake.training.run.train`.
    """
    values = dict(options)
    if hyperparameters is not None:
        values, settings = apply_hyperparameters(read_hyperparameters(hyperparameters), values, settings)
    config = resume_config(resume, trusted, **values) if resume is not None else TrainConfig(**values)
    check_tensorboard(config.tensorboard_log)
    return config, settings


def check_tensorboard(folder: str | None) -> None:
    """``tensorboard_log`` needs TensorBoard installed and a folder that can be written."""
    if folder is None:
        return
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise UsageError('--tensorboard-log needs TensorBoard: pip install "sb3-snake[tensorboard]"') from None
    check_writable_dir(Path(folder), what="--tensorboard-log folder", create=True)
