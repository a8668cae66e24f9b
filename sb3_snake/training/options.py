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

from sb3_snake.acceleration.settings import (
    OptimizationSettings,
    Setting,
    read_environment,
    setting_rows,
    table_row,
)
from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import check_writable_dir
from sb3_snake.training.config import TrainConfig, option_fields, option_flag
from sb3_snake.training.hyperparameters import FILE_SOURCE, apply_hyperparameters, read_hyperparameters
from sb3_snake.training.resume import resume_config

#: Where a value the caller gives says it came from.
OVERRIDE = "override"
#: Where a resumed run's value that the caller and the file leave out says it came from.
RESUMED = "resumed model"


def environment_options() -> dict[str, Setting]:
    """TrainConfig's options that the environment and ``.env`` may set (``option(env=...)``), as
    the settings declare theirs: key, flag, values and help."""
    return {
        f.name: Setting(f.metadata["env"], option_flag(f.name), f.metadata["values"], f.metadata["help"])
        for f in option_fields()
        if f.metadata["env"]
    }


def load_config(env_file: str | os.PathLike | None = None, **values: Any) -> TrainConfig:
    """A new run's config: ``values`` (``None`` ones ignored), else the process environment, else
    the ``.env`` file, else the defaults, for each option that ``.env`` may set (the batch size);
    ``config.source(name)`` says which one won.

    :param env_file: the ``.env`` to read; ``None`` reads ``.env`` in the working directory when
        there is one (as :meth:`OptimizationSettings.load <sb3_snake.acceleration.settings.OptimizationSettings.load>`).
    :raises UsageError: a value that cannot work, naming its key and where it came from.
    """
    given = {name: value for name, value in values.items() if value is not None}
    read = {name: declared.key for name, declared in environment_options().items() if name not in given}
    from_environment, sources = read_environment(env_file, read)
    given_sources = {name: OVERRIDE for name in environment_options() if name in given}
    return TrainConfig(**from_environment, **given, sources={**sources, **given_sources})


def parse_option(name: str, text: str) -> Any:
    """TrainConfig option ``name``'s value from the text of its flag (an option declared with
    ``values``, such as ``--batch-size``); one UsageError naming the flag."""
    try:
        return environment_options()[name].values.parse(text)
    except ValueError as error:
        raise UsageError(f"{option_flag(name)} {text!r}: {error}") from None


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
    sources = {name: OVERRIDE if name in options else FILE_SOURCE for name in environment_options() if name in values}
    if resume is not None:
        config = resume_config(resume, trusted, **values)
        sources = {**dict.fromkeys(environment_options(), RESUMED), **sources}
    else:
        config = load_config(env_file, **values)
        sources = {**config.sources, **sources}
    check_tensorboard(config.tensorboard_log)
    return replace(config, sources=sources), settings


def configuration_table() -> str:
    """The table of ``.env`` keys (Markdown) of docs/configuration.md, "Where settings come from":
    each key a ``.env`` may hold, its flag, values, default and help, as declared: the batch
    size's (TrainConfig's), then the settings'."""
    defaults = {f.name: f.default for f in option_fields()}
    rows = [table_row(declared, defaults[name]) for name, declared in environment_options().items()]
    header = ["| key | flag | values | default | meaning |", "|-----|------|--------|---------|---------|"]
    return "\n".join([*header, *rows, *setting_rows()])


def check_tensorboard(folder: str | None) -> None:
    """``tensorboard_log`` needs TensorBoard installed and a folder that can be written."""
    if folder is None:
        return
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise UsageError('--tensorboard-log needs TensorBoard: pip install "sb3-snake[tensorboard]"') from None
    check_writable_dir(Path(folder), what="--tensorboard-log folder", create=True)
