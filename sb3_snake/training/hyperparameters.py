"""Hyperparameter files (JSON, or YAML as RL Zoo writes them): which keys they may hold (the
hyperparameter fields of ``TrainConfig``, the batch size among them), their values checked
against those fields, and how a file's values join those a caller gives
(:func:`apply_hyperparameters`: given values win, the file wins over ``.env``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from sb3_snake.common.errors import UsageError, did_you_mean
from sb3_snake.common.paths import check_regular_file
from sb3_snake.training.config import HYPERPARAMETER_FIELDS, OPTIONS, TrainConfig

#: Where a value taken from a hyperparameter file says it came from.
FILE_SOURCE = "hyperparams file"


def hyperparameter_keys() -> list[str]:
    """The keys a hyperparameter file may hold: TrainConfig's hyperparameter fields."""
    return list(HYPERPARAMETER_FIELDS)


def check_hyperparameters(values: Mapping[str, Any], origin: str = "hyperparameters") -> dict[str, Any]:
    """The TrainConfig values of a hyperparameter mapping, each as its field declares it; an
    unknown key is one UsageError that names the nearest known key."""
    known = hyperparameter_keys()
    for key in values:
        if key not in known:
            raise UsageError(f"{origin}: unknown key {key!r}; {did_you_mean(str(key), known)}")
    try:
        return {key: _field_value(key, value) for key, value in values.items()}
    except UsageError as error:
        raise UsageError(f"{origin}: {error}") from None


def apply_hyperparameters(values: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """The config values of a run whose hyperparameters come from ``values`` (a file's, as
    :func:`read_hyperparameters` returns them) below what the caller gives.

    :param given: TrainConfig field values the caller sets (the CLI's flags); they win over the file.
    :return: ``given`` over the file's values.
    """
    return {**check_hyperparameters(values), **given}


#: How a hyperparameter's type is named when a value does not have it.
_KIND_NAMES = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a string", "None": "null"}


def _field_value(name: str, value: Any) -> Any:
    """``value`` as TrainConfig field ``name`` declares it (a whole float such as ``1e5`` as an
    int; a bool is not a number; a batch size a size or ``auto``), else one UsageError saying
    what it must be. Ranges are the config's to check."""
    declared = next(f for f in fields(TrainConfig) if f.name == name)
    values = OPTIONS[name].values
    if values is not None and (values.choices or values.takes_auto):  # a size or auto, a choice
        if values.check(value):
            raise UsageError(f"{name} must be {values.words}, got {value!r}")
        return value
    kinds = declared.type.split(" | ")
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
    check_regular_file(path, "hyperparameter file")
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
    check_hyperparameters(values, origin=f"hyperparameter file {path}")
    return values
