"""A run's config and settings from a caller's options, as ``sb3-snake train`` builds them.

Precedence, highest first: the options given, a hyperparameter file, what a resumed model
trained with, then for a value that ``.env`` may set (the batch size, ``OPTIMAL_BATCH_SIZE``)
the process environment and the ``.env`` file, then :class:`~sb3_snake.training.config.TrainConfig`'s
defaults. A resumed model keeps its batch size over the environment and ``.env``, as over the
defaults. A Python caller gets exactly what the command line does by calling :func:`configure_run`,
or :func:`load_config` for a new run's config alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from sb3_snake.acceleration.settings import OptimizationSettings, environment_layers
from sb3_snake.common.errors import UsageError
from sb3_snake.common.options import resolve, table_rows
from sb3_snake.common.paths import check_writable_dir
from sb3_snake.training.config import OPTIONS, TrainConfig
from sb3_snake.training.hyperparameters import FILE_SOURCE, apply_hyperparameters, read_hyperparameters
from sb3_snake.training.resume import resume_config

#: Where a value the caller gives says it came from.
OVERRIDE = "override"
#: Where a resumed run's value that the caller and the file leave out says it came from.
RESUMED = "resumed model"
#: TrainConfig's options that the environment and ``.env`` may set (``option(key=...)``).
KEYED_OPTIONS = {name: declared for name, declared in OPTIONS.items() if declared.key is not None}


def load_config(env_file: str | os.PathLike | None = None, **values: Any) -> TrainConfig:
    """A new run's config: ``values`` (``None`` ones ignored), else the process environment, else
    the ``.env`` file, else the defaults, for each option that ``.env`` may set (the batch size);
    ``config.source(name)`` says which one won.

    :param env_file: the ``.env`` to read; ``None`` reads ``.env`` in the working directory when
        there is one (as :meth:`OptimizationSettings.load <sb3_snake.acceleration.settings.OptimizationSettings.load>`).
    :raises UsageError: a value that cannot work, naming its key and where it came from.
    """
    given, sources = resolve([(OVERRIDE, values), *environment_layers(env_file, KEYED_OPTIONS)])
    return TrainConfig(**given, sources={name: sources[name] for name in KEYED_OPTIONS if name in sources})


def configure_run(
    options: Mapping[str, Any],
    settings: OptimizationSettings,
    hyperparameters: Path | None = None,
    resume: Path | None = None,
    trusted: bool = False,
    env_file: str | os.PathLike | None = None,
) -> tuple[TrainConfig, OptimizationSettings]:
    """The config and settings of a run; every problem with them is one UsageError.

    :param options: TrainConfig field values the caller sets (the command line's flags).
    :param settings: the run's settings (``OptimizationSettings.load``), returned as they are.
    :param hyperparameters: a hyperparameter file (JSON or YAML, as ``tune`` writes) under ``options``.
    :param resume: a saved model whose values fill in what ``options`` and the file leave out;
        without it, the environment, ``.env`` and TrainConfig's defaults do.
    :param trusted: read ``resume`` with SB3's full loader, which runs pickled code.
    :param env_file: the ``.env`` a new run's batch size may come from (``None``: ``./.env`` when present).
    :return: ``(config, settings)``, ready for :func:`sb3_snake.training.run.train`; ``config.sources``
        says where its batch size came from.
    """
    values = dict(options)
    if hyperparameters is not None:
        values = apply_hyperparameters(read_hyperparameters(hyperparameters), values)
    sources = {name: OVERRIDE if name in options else FILE_SOURCE for name in KEYED_OPTIONS if name in values}
    if resume is not None:
        config = resume_config(resume, trusted, **values)
        sources = {**dict.fromkeys(KEYED_OPTIONS, RESUMED), **sources}
    else:
        config = load_config(env_file, **values)
        sources = {**config.sources, **sources}
    check_tensorboard(config.tensorboard_log)
    return replace(config, sources=sources), settings


def configuration_table() -> str:
    """The table of ``.env`` keys (Markdown) of docs/configuration.md, "Where settings come from":
    each key a ``.env`` may hold, its flag, values, default and help, as declared: the batch
    size's (TrainConfig's), then the settings'."""
    header = ["| key | flag | values | default | meaning |", "|-----|------|--------|---------|---------|"]
    return "\n".join([*header, *table_rows(TrainConfig), *table_rows(OptimizationSettings)])


def check_tensorboard(folder: str | None) -> None:
    """``tensorboard_log`` needs TensorBoard installed and a folder that can be written."""
    if folder is None:
        return
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise UsageError('--tensorboard-log needs TensorBoard: pip install "sb3-snake[tensorboard]"') from None
    check_writable_dir(Path(folder), what="--tensorboard-log folder", create=True)
