"""The save format of a model, both directions: the plain-JSON description in every saved zip.

SB3's loader unpickles a zip's entries, which runs whatever code a crafted file holds, so every
zip :meth:`SnakeDQN.save <sb3_snake.dqn.snake_dqn.SnakeDQN.save>` writes also holds
:data:`METADATA_ENTRY`: the model in plain JSON, written by :func:`write_metadata` and read back,
checked, by :func:`read_metadata`. ``policy_kwargs`` may name classes from
:data:`PORTABLE_CLASSES` only. Duck-typed (any SB3 DQN with ``hyperparameters()``), so both the
model and the loader import it.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from stable_baselines3.common.torch_layers import FlattenExtractor, NatureCNN
from torch import nn

from sb3_snake.common import system
from sb3_snake.common.errors import UsageError
from sb3_snake.common.options import Values, number
from sb3_snake.dqn.extractor import SnakeAttentionExtractor
from sb3_snake.dqn.policies import POLICY_ALIASES
from sb3_snake.envs.rules import (
    CHANNEL_COUNTS,
    MIN_BOARD_SIZE,
    board_options,
    channel_options,
    observation_channels,
)

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
    "safe_exploration",
)
#: Counters that a resumed run continues from.
COUNTERS = ("num_timesteps", "_n_updates", "_n_calls", "_episode_num", "exploration_rate")

#: The largest board a model file may describe (the head view alone grows with its square).
MAX_BOARD_SIZE = 256
BOARD_SHAPES = f"(C, n, n) with C from {CHANNEL_COUNTS[0]} to {CHANNEL_COUNTS[-1]}"
#: Actions of a model: the four absolute directions, or three turns seen from the snake (egocentric).
ACTION_COUNTS = (4, 3)

TRUST_HINT = "if you trust where it came from, load it trusted"
#: The argument that loads a file with SB3's full loader (:class:`UsageError`'s ``fix``).
TRUSTED = {"trusted": True}


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
        "observation_channels": observation_channels(**board_options(model.observation_space)),
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
                    + TRUST_HINT,
                    fix=TRUSTED,
                )
            check_entry_sizes(archive, path)
            described = json.loads(archive.read(METADATA_ENTRY).decode("utf-8"))
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise UsageError(f"model file {path} cannot be loaded ({type(error).__name__}: {error})") from None
    problem = metadata_problem(described) or _memory_problem(described)
    if problem:
        fix = TRUSTED if problem.endswith(TRUST_HINT) else None
        raise UsageError(f"model file {path} has a malformed {METADATA_ENTRY}: {problem}", fix=fix)
    return described


def _memory_problem(described: dict[str, Any]) -> str:
    """A network the description asks for that would not fit in memory, stated before it is built:
    its parameters counted on the meta device (shapes only), times the copies a model keeps."""
    shape = described["observation_shape"]
    kwargs = decode_policy_kwargs(described["policy_kwargs"])
    extractor_class = kwargs.get("features_extractor_class", SnakeAttentionExtractor)
    space = gym.spaces.Box(0, 1, tuple(shape), dtype="uint8")
    try:
        with torch.device("meta"):
            if extractor_class is SnakeAttentionExtractor or described["policy"] == "AttentionPolicy":
                extractor = SnakeAttentionExtractor(space, **kwargs.get("features_extractor_kwargs", {}))
                features = extractor.features_dim
                parameters = sum(p.numel() for p in extractor.parameters())
            else:
                features, parameters = int(torch.tensor(shape).prod()), 0
    except Exception as error:  # noqa: BLE001 - sizes that cannot be laid out at all
        return f"its network cannot be laid out ({type(error).__name__}: {error})"
    widths = [features, *kwargs.get("net_arch", []), 4]
    parameters += sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))
    needed, available = 5 * 4 * parameters, system.available_memory_bytes()  # online, target, grads, Adam's two
    if available is not None and needed > available:
        return f"its network needs about {needed / 2**30:.1f} GiB and {available / 2**30:.1f} GiB are available"
    return ""


def metadata_problem(described: Any) -> str:
    """What makes a model's description one :func:`read_metadata` refuses (``""``: nothing), the
    memory its network needs aside: for a writer that checks before it writes, and for tests."""
    if not isinstance(described, dict) or described.get("format") != METADATA_FORMAT:
        return f"format is not {METADATA_FORMAT!r}"
    shape = described.get("observation_shape")
    if not (isinstance(shape, list) and len(shape) == 3 and all(type(n) is int for n in shape)):
        return f"observation_shape {shape!r} is not three integers"
    if shape[0] not in CHANNEL_COUNTS or shape[1] != shape[2] or not MIN_BOARD_SIZE <= shape[1] <= MAX_BOARD_SIZE:
        return f"observation_shape {shape} is not that of a Snake board ({BOARD_SHAPES}), 4 <= n <= 256"
    names = described.get("observation_channels")  # absent from files written before it
    if names is not None and (
        not isinstance(names, list) or names != observation_channels(**channel_options(names)) or len(names) != shape[0]
    ):
        return f"observation_channels {names!r} are not the {shape[0]} channels of a Snake board"
    if described.get("n_actions") not in ACTION_COUNTS or type(described.get("n_actions")) is not int:
        return f"n_actions is {described.get('n_actions')!r}, not 4 (directions) or 3 (egocentric turns)"
    if described.get("policy") not in POLICY_ALIASES:
        return f"policy {described.get('policy')!r} is not one of {', '.join(POLICY_ALIASES)}"
    if described.get("policy_kwargs") is None:
        return "its policy_kwargs hold objects that only the full loader rebuilds; " + TRUST_HINT
    for section in ("hyperparameters", "counters"):
        if not isinstance(described.get(section), dict):
            return f"{section} is missing"
        if any(not isinstance(value, (bool, int, float, str, type(None))) for value in described[section].values()):
            return f"{section} hold values that are not plain numbers"
    if type(described.get("n_envs")) is not int or not 1 <= described["n_envs"] <= MAX_ENVS:
        return f"n_envs is not an integer from 1 to {MAX_ENVS}"
    return (
        _section_problem(
            "hyperparameters", described["hyperparameters"], HYPERPARAMETER_SCHEMA, REQUIRED_HYPERPARAMETERS
        )
        or _section_problem("counters", described["counters"], COUNTER_SCHEMA, ())
        or _policy_kwargs_problem(described["policy_kwargs"])
    )


# ---------------------------------------------------------------------- the schema

#: Bytes the JSON description may take unpacked (a few kilobytes in practice).
MAX_METADATA_BYTES = 1 << 20
#: Bytes one weights entry may take unpacked: far above any Snake policy, far below a zip bomb.
MAX_ENTRY_BYTES = 1 << 31
#: The most games a model may say it trained with (the batched env's games are tensors of that size).
MAX_ENVS = 1 << 20
#: The largest width of any layer a model file may describe, and the most layers.
MAX_WIDTH, MAX_LAYERS = 1 << 16, 64
#: The most gradient steps of one update, replay samples of one step, and env steps between updates
#: a model file may hold: far beyond what learns (an update of that many steps outlasts any run).
MAX_GRADIENT_STEPS, MAX_BATCH_SIZE, MAX_TRAIN_FREQ = 100_000, 1 << 20, 1 << 31
#: The largest share of the scheduled updates a model may train in its early phase: an early
#: replay ratio over the ratio after it. ``sb3-snake train``'s ratios (a thousandth to 4,096
#: samples per env step) give at most about 8 million, rounding included; above this is no run's.
MAX_EARLY_UPDATE_FRACTION = 2.0**32


def _problem(entry: Any, value: Any) -> str:
    """What is wrong with ``value`` for a schema entry (a range of :class:`Values`, or a check of
    its own), in the file's words: ``must be ...``; ``""``: nothing."""
    if isinstance(entry, Values):
        return f"must be {entry.kind}" if entry.check(value) else ""
    return entry(value)


def _choice(*values: Any) -> Any:
    return lambda value: "" if type(value) is type(values[0]) and value in values else f"must be one of {list(values)}"


_COUNT, _SHARE = number(0, 2**63 - 1, integer=True), number(0, 1)
_WIDTH = number(1, MAX_WIDTH, integer=True)
_GRADIENT_STEPS = number(1, MAX_GRADIENT_STEPS, integer=True)
#: Each hyperparameter a model file may hold, and what its value must be.
HYPERPARAMETER_SCHEMA: dict[str, Any] = {
    "seed": number(0, 2**32 - 1, integer=True, optional=True),
    "learning_rate": number(1e-12, 10),
    "buffer_size": number(1, 1 << 32, integer=True),
    "learning_starts": _COUNT,
    "batch_size": number(1, MAX_BATCH_SIZE, integer=True),
    "tau": _SHARE,
    "gamma": _SHARE,
    "gradient_steps": lambda v: "" if v == -1 else _problem(_GRADIENT_STEPS, v),
    "target_update_interval": number(1, 2**63 - 1, integer=True),
    "exploration_initial_eps": _SHARE,
    "exploration_final_eps": _SHARE,
    "exploration_fraction": _SHARE,
    "max_grad_norm": number(1e-12, 1e12),
    "n_steps": number(1, 1000, integer=True),
    "exploration_steps": number(1, 2**63 - 1, integer=True, optional=True),
    "double_dqn": _choice(False, True),
    "symmetry_augmentation": _choice(False, True),
    "early_steps": _COUNT,
    # 0: no updates in the early phase; above 1: more than after it (an early ratio above the ratio).
    "early_update_fraction": number(0, MAX_EARLY_UPDATE_FRACTION),
    "food_shaping": number(0, 1e6),
    "learning_rate_half_life": _COUNT,
    "safe_exploration": _choice(False, True),
    "train_freq": number(1, MAX_TRAIN_FREQ, integer=True),
    "train_freq_unit": _choice("step", "episode"),
}
#: What every sb3-snake model file has held (the rest came later and have defaults).
REQUIRED_HYPERPARAMETERS = (
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
    "train_freq",
    "train_freq_unit",
)
#: The counters a model file may set on the loaded model: these attributes and no others.
COUNTER_SCHEMA: dict[str, Any] = {name: _COUNT for name in COUNTERS if name != "exploration_rate"}
COUNTER_SCHEMA["exploration_rate"] = _SHARE


def hyperparameter_problem(name: str, value: Any) -> str:
    """What keeps a model file from holding ``value`` as hyperparameter ``name`` (``""``: nothing),
    worded as reading one back says it: for a writer that checks before it writes."""
    return _section_problem("hyperparameters", {name: value}, HYPERPARAMETER_SCHEMA, ())


def _section_problem(section: str, values: dict[str, Any], schema: dict[str, Any], required: Any) -> str:
    unknown = sorted(set(values) - set(schema))
    if unknown:
        return f"{section} has unknown keys {unknown}"
    missing = [name for name in required if name not in values]
    if missing:
        return f"{section} lacks {missing}"
    for name, value in values.items():
        problem = _problem(schema[name], value)
        if problem:
            return f"{section}.{name} {value!r} {problem}"
    return ""


#: The keys ``policy_kwargs`` may hold, each checked by :func:`_policy_kwargs_problem`.
POLICY_KWARGS = {
    "net_arch",
    "features_extractor_class",
    "features_extractor_kwargs",
    "optimizer_class",
    "optimizer_kwargs",
    "activation_fn",
    "normalize_images",
    "dueling",
}
#: The keys of the attention extractor a model file may set, and their ranges.
EXTRACTOR_SCHEMA: dict[str, Any] = {
    "features_dim": number(1, MAX_WIDTH, integer=True),
    "embed_dim": number(2, MAX_WIDTH, integer=True),
    "num_heads": number(1, 64, integer=True),
    "num_layers": number(0, MAX_LAYERS, integer=True),
    "mlp_ratio": number(1, 16, integer=True),
    "patch_size": number(1, 256, integer=True, optional=True),
    "head_view_dim": number(0, MAX_WIDTH, integer=True),
    "conv_stem": number(0, MAX_WIDTH, integer=True),
}
#: Adam's and the other portable optimizers' keyword arguments a model file may set.
OPTIMIZER_SCHEMA: dict[str, Any] = {
    "eps": number(0, 1),
    "weight_decay": number(0, 1e3),
    "betas": lambda v: (
        ""
        if isinstance(v, list) and len(v) == 2 and not any(_SHARE.check(b) for b in v)
        else "must be two numbers from 0 to 1"
    ),
    "amsgrad": _choice(False, True),
    "fused": lambda v: "" if v is None or isinstance(v, bool) else "must be true, false or null",
    "foreach": lambda v: "" if v is None or isinstance(v, bool) else "must be true, false or null",
    "momentum": number(0, 1),
    "alpha": number(0, 1),
    "centered": _choice(False, True),
}


def _policy_kwargs_problem(kwargs: Any) -> str:
    if not isinstance(kwargs, dict):
        return "policy_kwargs is not a mapping"
    unknown = sorted(set(kwargs) - POLICY_KWARGS)
    if unknown:
        return f"policy_kwargs has unknown keys {unknown}"
    net_arch = kwargs.get("net_arch", [])
    widths = net_arch if isinstance(net_arch, list) else []
    if not isinstance(net_arch, list) or len(widths) > MAX_LAYERS or any(_WIDTH.check(w) for w in widths):
        return (
            f"policy_kwargs.net_arch {net_arch!r} must be a list of at most {MAX_LAYERS} widths from 1 to {MAX_WIDTH}"
        )
    for key in ("features_extractor_class", "optimizer_class", "activation_fn"):
        if key in kwargs and not (isinstance(kwargs[key], dict) and set(kwargs[key]) == {"class"}):
            return f"policy_kwargs.{key} must name a class"
    for key, schema in (("features_extractor_kwargs", EXTRACTOR_SCHEMA), ("optimizer_kwargs", OPTIMIZER_SCHEMA)):
        if key in kwargs:
            if not isinstance(kwargs[key], dict):
                return f"policy_kwargs.{key} is not a mapping"
            problem = _section_problem(f"policy_kwargs.{key}", kwargs[key], schema, ())
            if problem:
                return problem
    for key in ("normalize_images", "dueling"):
        if key in kwargs and not isinstance(kwargs[key], bool):
            return f"policy_kwargs.{key} must be true or false"
    return ""


def check_entry_sizes(archive: zipfile.ZipFile, path: Path) -> None:
    """Refuse a zip whose entries would unpack to more than a model ever holds (a zip bomb),
    from the sizes its directory states, before any entry is read."""
    for info in archive.infolist():
        limit = MAX_METADATA_BYTES if info.filename == METADATA_ENTRY else MAX_ENTRY_BYTES
        if info.file_size > limit:
            raise UsageError(
                f"model file {path}: entry {info.filename} would unpack to {info.file_size:,} bytes, more than the "
                f"{limit:,} a model holds; it is not a model this project wrote"
            )


def decode_policy_kwargs(value: Any) -> Any:
    """The inverse of :func:`encode_policy_kwargs`: names of :data:`PORTABLE_CLASSES` back to
    classes; any other name is refused."""
    if isinstance(value, list):
        return [decode_policy_kwargs(element) for element in value]
    if isinstance(value, dict):
        if set(value) == {"class"}:
            if value["class"] not in PORTABLE_CLASSES:
                raise UsageError(
                    f"class {value['class']!r} is not one the safe loader rebuilds; " + TRUST_HINT, TRUSTED
                )
            return PORTABLE_CLASSES[value["class"]]
        return {key: decode_policy_kwargs(element) for key, element in value.items()}
    return value
