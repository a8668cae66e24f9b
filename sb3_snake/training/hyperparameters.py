"""Hyperparameter files (JSON, or YAML as RL Zoo writes them): which keys they may hold, their
values checked against ``TrainConfig``'s fields, and how a file's values join those a caller
gives (:func:`apply_hyperparameters`: given values win, the file wins over ``.env``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import UsageError, did_you_mean
from sb3_snake.training.config import HYPERPARAMETER_FIELDS, TrainConfig

#: Keys of a hyperparameter file besides TrainConfig's fields: the settings a search may choose.
SETTING_KEYS = ("batch_size",)
#: Where a setting taken from a hyperparameter file says it came from.
FILE_SOURCE = "hyperparams file"


def hyperparameter_keys() -> list[str]:
    """The keys a hyperparameter file may hold: TrainConfig's hyperparameter fields, then :data:`SETTING_KEYS`."""
    return [*HYPERPARAMETER_FIELDS, *SETTING_KEYS]


def split_hyperparameters(values: Mapping[str, Any], origin: str = "hyperparameters") -> tuple[dict, dict]:
    """``(config_values, settings_values)`` of a hyperparameter mapping; an unknown key is one
    UsageError that names the nearest known key."""
    known = hyperparameter_keys()
    for key in values:
        if key not in known:
            raise UsageError(f"{origin}: unknown key {key!r}; {did_you_mean(str(key), known)}")
    try:
        config_values = {key: _field_value(key, value) for key, value in values.items() if key not in SETTING_KEYS}
    except UsageError as error:
        raise UsageError(f"{origin}: {error}") from None
    return config_values, {key: value for key, value in values.items() if key in SETTING_KEYS}


def apply_hyperparameters(
    values: Mapping[str, Any], given: Mapping[str, Any], settings: OptimizationSettings
) -> tuple[dict[str, Any], OptimizationSettings]:
    """The config values and settings of a run whose hyperparameters come from ``values`` (a
    file's, as :func:`read_hyperparameters` returns them) below what the caller gives.

    :param given: TrainConfig field values the caller sets (the CLI's flags); they win over the file.
    :param settings: the run's settings; the file's ``batch_size`` replaces theirs, with the
        source :data:`FILE_SOURCE`, unless theirs was given as an override (``--batch-size``).
    :return: ``(config_values, settings)``: ``given`` over the file's config values, and the settings.
    """
    from_file, file_settings = split_hyperparameters(values)
    if "batch_size" in file_settings and settings.source("batch_size") != "override":
        settings = settings.resolved({"batch_size": file_settings["batch_size"]}, {"batch_size": FILE_SOURCE})
    return {**from_file, **given}, settings


#: How a hyperparameter's type is named when a value does not have it.
_KIND_NAMES = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a string", "None": "null"}


def _field_value(name: str, value: Any) -> Any:
    """``value`` as TrainConfig field ``name`` declares it (a whole float such as ``1e5`` as an
    int; a bool is not a number), else one UsageError saying what it must be."""
    kinds = next(f for f in fields(TrainConfig) if f.name == name).type.split(" | ")
    if isinstance(value, bool):
        fits = "bool" in kinds
    elif isinstance(value, (int, float)):
        if "int" in kinds and float(value).is_integer():
            return int(value)
        fits = "float" in kinds
    else:
        fits = (value is None and "None" in kinds) or (isinstance(value, str) and "str" in kinds)
    if not fits:
        raise UsageError(f"{name} must be {' or '.join(_KIND_NAMES[kind] for kind in kinds)}, got {value!r}")
    return value


def read_hyperparameters(path: Path) -> dict[str, Any]:
    """A hyperparameter file (``.json``, or ``.yaml``/``.yml`` as RL Zoo writes them): one mapping of
    keys from :func:`hyperparameter_keys` to values. Every problem is one UsageError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"hyperparameter file {path} cannot be read ({error})") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            values = yaml.safe_load(text)
        else:
            values = json.loads(text)
    except Exception as error:  # noqa: BLE001 - JSON or YAML syntax, reported in one line
        raise UsageError(
            f"hyperparameter file {path} is not valid {path.suffix.lstrip('.') or 'JSON'}: {error}"
        ) from None
    if not isinstance(values, dict):
        raise UsageError(f"hyperparameter file {path} must hold one mapping of keys to values")
    split_hyperparameters(values, origin=f"hyperparameter file {path}")
    return values
