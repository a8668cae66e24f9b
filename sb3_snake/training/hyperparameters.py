"""Hyperparameter files (JSON, or YAML as RL Zoo writes them): which keys they may hold, and
their values checked against ``TrainConfig``'s fields."""

from __future__ import annotations

import difflib
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from sb3_snake.training.config import TrainConfig

#: Keys of a hyperparameter file besides TrainConfig's fields: the settings a search may choose.
SETTING_KEYS = ("batch_size",)
#: TrainConfig fields that are run limits and outputs, not hyperparameters; a file may not set them.
RUN_KEYS = (
    "episodes",
    "timesteps",
    "time_limit_minutes",
    "device",
    "checkpoint_every",
    "select_every",
    "select_episodes",
    "save_replay_buffer",
    "tensorboard_log",
    "verbose",
    "compile_after",
)


def hyperparameter_keys() -> list[str]:
    return [f.name for f in fields(TrainConfig) if f.name not in RUN_KEYS] + list(SETTING_KEYS)


def split_hyperparameters(values: dict[str, Any], origin: str = "hyperparameters") -> tuple[dict, dict]:
    """``(config_values, settings_values)`` of a hyperparameter mapping; an unknown key is one
    ValueError that names the nearest known key."""
    known = hyperparameter_keys()
    for key in values:
        if key not in known:
            nearest = difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
            hint = f"; did you mean {nearest[0]}?" if nearest else f"; known: {', '.join(known)}"
            raise ValueError(f"{origin}: unknown key {key!r}{hint}")
    try:
        config_values = {key: _field_value(key, value) for key, value in values.items() if key not in SETTING_KEYS}
    except ValueError as error:
        raise ValueError(f"{origin}: {error}") from None
    return config_values, {key: value for key, value in values.items() if key in SETTING_KEYS}


#: How a hyperparameter's type is named when a value does not have it.
_KIND_NAMES = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a string", "None": "null"}


def _field_value(name: str, value: Any) -> Any:
    """``value`` as TrainConfig field ``name`` declares it (a whole float such as ``1e5`` as an
    int; a bool is not a number), else one ValueError saying what it must be."""
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
        raise ValueError(f"{name} must be {' or '.join(_KIND_NAMES[kind] for kind in kinds)}, got {value!r}")
    return value


def read_hyperparameters(path: Path) -> dict[str, Any]:
    """A hyperparameter file (``.json``, or ``.yaml``/``.yml`` as RL Zoo writes them): one mapping of
    keys from :func:`hyperparameter_keys` to values. Every problem is one ValueError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"hyperparameter file {path} cannot be read ({error})") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            values = yaml.safe_load(text)
        else:
            values = json.loads(text)
    except Exception as error:  # noqa: BLE001 - JSON or YAML syntax, reported in one line
        raise ValueError(
            f"hyperparameter file {path} is not valid {path.suffix.lstrip('.') or 'JSON'}: {error}"
        ) from None
    if not isinstance(values, dict):
        raise ValueError(f"hyperparameter file {path} must hold one mapping of keys to values")
    split_hyperparameters(values, origin=f"hyperparameter file {path}")
    return values
