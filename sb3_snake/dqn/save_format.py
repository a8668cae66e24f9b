"""The save format of a model, both directions: the plain-JSON description in every saved zip.

SB3's zip holds pickled entries (spaces, schedules, the policy class) that its loader unpickles,
which runs whatever code a crafted file holds. Every zip that :meth:`SnakeDQN.save
<sb3_snake.dqn.snake_dqn.SnakeDQN.save>` writes therefore also holds :data:`METADATA_ENTRY`: the
model in plain JSON (policy name, spaces, hyperparameters, counters), written by
:func:`write_metadata` and read back, checked, by :func:`read_metadata`, so that
:func:`sb3_snake.persistence.load_model` rebuilds a model without unpickling anything.
``policy_kwargs`` may name classes, by name, from :data:`PORTABLE_CLASSES` only.

This module works on any SB3 DQN that has ``hyperparameters()`` (duck-typed: it imports no
``SnakeDQN``), so the model that saves and the loader that builds one both import it.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.torch_layers import FlattenExtractor, NatureCNN
from torch import nn

from sb3_snake.common.errors import UsageError
from sb3_snake.dqn.extractor import SnakeAttentionExtractor
from sb3_snake.dqn.policies import POLICY_ALIASES
from sb3_snake.envs.rules import BASE_CHANNELS, MIN_BOARD_SIZE, NUM_CHANNELS

#: The zip entry of a saved model that describes it in plain JSON.
METADATA_ENTRY = "sb3_snake.json"
METADATA_FORMAT = "sb3-snake model"
METADATA_VERSION = 1

#: DQN hyperparameters kept in the metadata and reported as what a run really trained with.
HYPERPARAMETERS = (
    "seed",
    "learning_rate",
    "buffer_size",
    "learning_starts",
    "batch_size",
    "tau",
    "gamma",
    "gradient_steps",
    "target_update_interval",
    "exploration_initial_eps",
    "exploration_final_eps",
    "exploration_fraction",
    "max_grad_norm",
    "n_steps",
    "exploration_steps",
    "double_dqn",
    "symmetry_augmentation",
    "early_steps",
    "early_update_fraction",
    "food_shaping",
    "learning_rate_half_life",
)
#: Counters that a resumed run continues from.
COUNTERS = ("num_timesteps", "_n_updates", "_n_calls", "_episode_num", "exploration_rate")

#: The largest board a model file may describe (the head view alone grows with its square).
MAX_BOARD_SIZE = 256
#: Channels of a model's boards: without and with the countdown.
CHANNEL_COUNTS = (BASE_CHANNELS, NUM_CHANNELS)
BOARD_SHAPES = f"({BASE_CHANNELS}, n, n) or ({NUM_CHANNELS}, n, n)"

TRUST_HINT = "if you trust where it came from, pass --trust-model (Python: load_model(path, trusted=True))"


def _portable_classes() -> dict[str, type]:
    classes = [SnakeAttentionExtractor, FlattenExtractor, NatureCNN, torch.optim.Adam, torch.optim.AdamW]
    classes += [nn.ReLU, nn.Tanh, nn.GELU, nn.SiLU, nn.ELU, nn.LeakyReLU, torch.optim.SGD, torch.optim.RMSprop]
    return {f"{cls.__module__}.{cls.__qualname__}": cls for cls in classes}


#: Classes that may appear in ``policy_kwargs`` of a model loaded without unpickling, by name.
PORTABLE_CLASSES = _portable_classes()


# ---------------------------------------------------------------------- writing


def encode_policy_kwargs(value: Any) -> Any:
    """``policy_kwargs`` as JSON: classes of :data:`PORTABLE_CLASSES` become ``{"class": name}``;
    anything else that JSON cannot hold makes the whole value ``None`` (not portable)."""

    def encode(item: Any) -> Any:
        if item is None or isinstance(item, (bool, int, float, str)):
            return item
        if isinstance(item, (list, tuple)):
            return [encode(element) for element in item]
        if isinstance(item, dict) and all(isinstance(key, str) for key in item):
            return {key: encode(element) for key, element in item.items()}
        name = f"{getattr(item, '__module__', '')}.{getattr(item, '__qualname__', '')}"
        if isinstance(item, type) and PORTABLE_CLASSES.get(name) is item:
            return {"class": name}
        raise TypeError(name)

    try:
        return encode(value)
    except TypeError:
        return None


def metadata(model: Any) -> dict[str, Any]:
    """``model`` in plain JSON: enough to rebuild it without unpickling (:func:`read_metadata`)."""
    policy = next((name for name, cls in model.policy_aliases.items() if cls is type(model.policy)), None)
    return {
        "format": METADATA_FORMAT,
        "version": METADATA_VERSION,
        "policy": policy,
        "observation_shape": list(model.observation_space.shape),
        "n_actions": int(model.action_space.n),
        "n_envs": model.n_envs,
        "policy_kwargs": encode_policy_kwargs(model.policy_kwargs),
        "hyperparameters": model.hyperparameters(),
        "counters": {name: getattr(model, name) for name in COUNTERS},
    }


def write_metadata(model: Any, path: Any) -> None:
    """Add :data:`METADATA_ENTRY` to the zip SB3's ``save`` wrote at ``path`` (a file path;
    SB3 adds ``.zip`` to one without a suffix). A file object is left as it is."""
    if isinstance(path, (str, os.PathLike)):
        target = Path(path) if Path(path).suffix else Path(f"{path}.zip")
        with zipfile.ZipFile(target, "a") as archive:
            archive.writestr(METADATA_ENTRY, json.dumps(metadata(model), indent=1))


# ---------------------------------------------------------------------- reading


def read_metadata(path: Path) -> dict[str, Any]:
    """The :data:`METADATA_ENTRY` of a saved model, checked; :class:`UsageError` (one line) otherwise."""
    try:
        with zipfile.ZipFile(path) as archive:
            if METADATA_ENTRY not in archive.namelist():
                raise UsageError(
                    f"model file {path} has no sb3-snake description ({METADATA_ENTRY}): it was made by plain SB3, "
                    f"another program or sb3-snake before 0.2, and loading it would unpickle code from it; "
                    + TRUST_HINT
                )
            described = json.loads(archive.read(METADATA_ENTRY).decode("utf-8"))
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"model file {path} cannot be loaded ({type(error).__name__}: {error})") from None
    problem = _metadata_problem(described)
    if problem:
        raise UsageError(f"model file {path} has a malformed {METADATA_ENTRY}: {problem}")
    return described


def _metadata_problem(described: Any) -> str:
    if not isinstance(described, dict) or described.get("format") != METADATA_FORMAT:
        return f"format is not {METADATA_FORMAT!r}"
    shape = described.get("observation_shape")
    if not (isinstance(shape, list) and len(shape) == 3 and all(type(n) is int for n in shape)):
        return f"observation_shape {shape!r} is not three integers"
    if shape[0] not in CHANNEL_COUNTS or shape[1] != shape[2] or not MIN_BOARD_SIZE <= shape[1] <= MAX_BOARD_SIZE:
        return f"observation_shape {shape} is not that of a Snake board ({BOARD_SHAPES}), 4 <= n <= 256"
    if described.get("n_actions") != 4:
        return f"n_actions is {described.get('n_actions')!r}, not 4"
    if described.get("policy") not in POLICY_ALIASES:
        return f"policy {described.get('policy')!r} is not one of {', '.join(POLICY_ALIASES)}"
    if described.get("policy_kwargs") is None:
        return "its policy_kwargs hold objects that only the full loader rebuilds; " + TRUST_HINT
    for section in ("hyperparameters", "counters"):
        if not isinstance(described.get(section), dict):
            return f"{section} is missing"
        if any(not isinstance(value, (bool, int, float, str, type(None))) for value in described[section].values()):
            return f"{section} hold values that are not plain numbers"
    if type(described.get("n_envs")) is not int or described["n_envs"] < 1:
        return "n_envs is not a positive integer"
    return ""


def decode_policy_kwargs(value: Any) -> Any:
    """The inverse of :func:`encode_policy_kwargs`: names of :data:`PORTABLE_CLASSES` back to
    classes; any other name is refused."""
    if isinstance(value, list):
        return [decode_policy_kwargs(element) for element in value]
    if isinstance(value, dict):
        if set(value) == {"class"}:
            if value["class"] not in PORTABLE_CLASSES:
                raise UsageError(f"class {value['class']!r} is not one the safe loader rebuilds; " + TRUST_HINT)
            return PORTABLE_CLASSES[value["class"]]
        return {key: decode_policy_kwargs(element) for key, element in value.items()}
    return value
