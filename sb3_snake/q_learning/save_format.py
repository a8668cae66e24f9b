"""The save format of a model, both directions: the plain-JSON description in every saved zip.

SB3's loader unpickles a zip's entries, which runs whatever code a crafted file holds, so every
zip :meth:`SnakeDQN.save <sb3_snake.dqn.snake_dqn.SnakeDQN.save>` and ``PQN.save`` write also
holds :data:`METADATA_ENTRY`: the model in plain JSON (its ``algorithm`` one of
:data:`ALGORITHMS`), written by :func:`write_metadata` and read back, checked, by
:func:`read_metadata`. ``policy_kwargs`` may name classes from :data:`PORTABLE_CLASSES` only.
Duck-typed (a model with ``description_name`` and ``hyperparameters()``), so both learners and the
loader import it.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import torch
from stable_baselines3.common.torch_layers import FlattenExtractor, NatureCNN
from torch import nn

from sb3_snake.common import system
from sb3_snake.common.errors import UsageError
from sb3_snake.envs.rules import (
    CHANNEL_COUNTS,
    MIN_BOARD_SIZE,
    board_options,
    channel_options,
    observation_channels,
)
from sb3_snake.networks.attention import SnakeAttentionExtractor
from sb3_snake.networks.cnn import SnakeCnnExtractor
from sb3_snake.networks.patch_attention import PatchAttentionExtractor
from sb3_snake.q_learning.save_schema import (
    COUNTER_SCHEMA,
    COUNTERS,
    DQN_POLICIES,
    HYPERPARAMETER_SCHEMA,
    MAX_ENTRY_BYTES,
    MAX_ENVS,
    MAX_METADATA_BYTES,
    PQN_COUNTERS,
    PQN_HYPERPARAMETER_SCHEMA,
    PQN_POLICIES,
    PQN_REQUIRED_HYPERPARAMETERS,
    REQUIRED_HYPERPARAMETERS,
    policy_kwargs_problem,
    section_problem,
)

#: The zip entry of a saved model that describes it in plain JSON.
METADATA_ENTRY = "sb3_snake.json"
METADATA_FORMAT = "sb3-snake model"
#: 2: PQN's ``AttentionPolicy`` is :class:`~sb3_snake.networks.patch_attention.PatchAttentionExtractor`'s
#: (a version-1 PQN file of that policy naming no extractor was built on ``SnakeAttentionExtractor``).
METADATA_VERSION = 2


class FileSchema(NamedTuple):
    """What one learner's files hold: the policies it takes, its counters, and its
    hyperparameters' ranges with those every file of it has held."""

    policies: tuple[str, ...]
    counters: tuple[str, ...]
    hyperparameters: dict[str, Any]
    required: tuple[str, ...]


#: The learners a description may name (a learner's ``description_name``), and each one's
#: :class:`FileSchema` (a description without ``algorithm`` was written by SnakeDQN before PQN existed).
ALGORITHMS: dict[str, FileSchema] = {
    "SnakeDQN": FileSchema(DQN_POLICIES, COUNTERS, HYPERPARAMETER_SCHEMA, REQUIRED_HYPERPARAMETERS),
    "PQN": FileSchema(PQN_POLICIES, PQN_COUNTERS, PQN_HYPERPARAMETER_SCHEMA, PQN_REQUIRED_HYPERPARAMETERS),
}

#: The largest board a model file may describe (the head view alone grows with its square).
MAX_BOARD_SIZE = 256
BOARD_SHAPES = f"(C, n, n) with C from {CHANNEL_COUNTS[0]} to {CHANNEL_COUNTS[-1]}"
#: Actions of a model: the four absolute directions, or three turns seen from the snake (egocentric).
ACTION_COUNTS = (4, 3)

TRUST_HINT = "if you trust where it came from, load it trusted"
#: The argument that loads a file with SB3's full loader (:class:`UsageError`'s ``fix``).
TRUSTED = {"trusted": True}


def _portable_classes() -> dict[str, type]:
    classes = [SnakeAttentionExtractor, PatchAttentionExtractor, SnakeCnnExtractor, FlattenExtractor, NatureCNN]
    classes += [torch.optim.Adam]
    classes.append(torch.optim.AdamW)
    classes += [nn.ReLU, nn.Tanh, nn.GELU, nn.SiLU, nn.ELU, nn.LeakyReLU, torch.optim.SGD, torch.optim.RMSprop]
    return {f"{cls.__module__}.{cls.__qualname__}": cls for cls in classes} | MOVED_CLASSES


#: The names files written before the networks moved to :mod:`sb3_snake.networks` give their classes.
MOVED_CLASSES = {
    "sb3_snake.dqn.extractor.SnakeAttentionExtractor": SnakeAttentionExtractor,
    "sb3_snake.pqn.policies.SnakeCnnExtractor": SnakeCnnExtractor,
}


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


def policy_alias(model: Any) -> str | None:
    """The name under which ``model``'s learner knows its policy (``"MlpPolicy"``, ...), or None
    for a policy class given directly."""
    return next((name for name, cls in model.policy_aliases.items() if cls is type(model.policy)), None)


def metadata(model: Any) -> dict[str, Any]:
    """``model`` in plain JSON: enough to rebuild it without unpickling (:func:`read_metadata`)."""
    policy = policy_alias(model)
    algorithm = model.description_name
    return {
        "format": METADATA_FORMAT,
        "version": METADATA_VERSION,
        "algorithm": algorithm,
        "policy": policy,
        "observation_shape": list(model.observation_space.shape),
        "observation_channels": observation_channels(**board_options(model.observation_space)),
        "n_actions": int(model.action_space.n),
        "n_envs": model.n_envs,
        "policy_kwargs": encode_policy_kwargs(model.policy_kwargs),
        "hyperparameters": model.hyperparameters(),
        "counters": {name: getattr(model, name) for name in ALGORITHMS[algorithm].counters},
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


#: Each learner's policies by name: the features extractor they build and the head's hidden layers
#: where ``policy_kwargs`` give none, and whether those layers carry LayerNorm (PQN's). The memory
#: estimate sizes a file's network from it (a test holds it to the policies themselves).
NETWORKS: dict[tuple[str, str], tuple[type, list[int], bool]] = {
    ("SnakeDQN", "AttentionPolicy"): (SnakeAttentionExtractor, [], False),
    ("SnakeDQN", "MlpPolicy"): (FlattenExtractor, [64, 64], False),
    ("SnakeDQN", "CnnPolicy"): (NatureCNN, [64, 64], False),
    ("PQN", "MlpPolicy"): (FlattenExtractor, [256, 256], True),
    ("PQN", "CnnPolicy"): (SnakeCnnExtractor, [], True),
    ("PQN", "AttentionPolicy"): (PatchAttentionExtractor, [256], True),
}


def described_policy_kwargs(described: dict[str, Any]) -> dict[str, Any]:
    """A description's ``policy_kwargs`` as classes, with the extractor an older file was built on
    named where the file names none: a version-1 PQN ``AttentionPolicy`` file's
    ``SnakeAttentionExtractor`` (PQN's attention network until version 2). Written by 0.2.0; drop in 0.4.0."""
    kwargs = decode_policy_kwargs(described["policy_kwargs"])
    old_pqn_attention = (described.get("algorithm"), described["policy"]) == ("PQN", "AttentionPolicy")
    if old_pqn_attention and described.get("version", 1) < 2 and "features_extractor_class" not in kwargs:
        kwargs["features_extractor_class"] = SnakeAttentionExtractor
    return kwargs


def trained_parameters(described: dict[str, Any]) -> int:
    """The trained parameters of the Q-network a description asks for, counted from shapes alone
    (its extractor laid out on the meta device), before anything is built: ValueError where it
    cannot be laid out at all."""
    shape = described["observation_shape"]
    kwargs = described_policy_kwargs(described)
    extractor_class, net_arch, layer_norm = NETWORKS[(described.get("algorithm", "SnakeDQN"), described["policy"])]
    extractor_class = kwargs.get("features_extractor_class", extractor_class)
    space = gym.spaces.Box(0, 1, tuple(shape), dtype="uint8")
    try:
        with torch.device("meta"):  # shapes only: no memory is taken, however large
            extractor = extractor_class(space, **kwargs.get("features_extractor_kwargs", {}))
    except Exception as error:  # noqa: BLE001 - sizes that cannot be laid out at all
        raise ValueError(f"its network cannot be laid out ({type(error).__name__}: {error})") from None
    heads = 2 if kwargs.get("dueling") else 1  # a dueling head adds a value stream of the same layers
    hidden = kwargs.get("net_arch") if kwargs.get("net_arch") is not None else net_arch
    widths = [extractor.features_dim, *hidden]
    norms = sum(2 * w for w in hidden) if kwargs.get("layer_norm", layer_norm) else 0
    head = sum(a * b + b for a, b in zip(widths, widths[1:], strict=False)) + norms
    outputs = widths[-1] * described["n_actions"] + described["n_actions"] + (widths[-1] + 1) * (heads - 1)
    return sum(p.numel() for p in extractor.parameters()) + heads * head + outputs


def _memory_problem(described: dict[str, Any]) -> str:
    """A network the description asks for that would not fit in memory, stated before it is built:
    its trained parameters (:func:`trained_parameters`) times the copies a model keeps."""
    try:
        parameters = trained_parameters(described)
    except ValueError as error:
        return str(error)
    # the trained network and its copy (target or average), gradients, Adam's two moments
    needed, available = 5 * 4 * parameters, system.available_memory_bytes()
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
    algorithm = described.get("algorithm", "SnakeDQN")
    if algorithm not in ALGORITHMS:
        return f"algorithm {algorithm!r} is not one of {', '.join(ALGORITHMS)}"
    schema = ALGORITHMS[algorithm]
    aliases = schema.policies
    if described.get("policy") not in aliases:
        return f"policy {described.get('policy')!r} is not one of {', '.join(aliases)}"
    if described.get("policy_kwargs") is None:
        return "its policy_kwargs hold objects that only the full loader rebuilds; " + TRUST_HINT
    for section in ("hyperparameters", "counters"):
        if not isinstance(described.get(section), dict):
            return f"{section} is missing"
        if any(not isinstance(value, (bool, int, float, str, type(None))) for value in described[section].values()):
            return f"{section} hold values that are not plain numbers"
    if type(described.get("n_envs")) is not int or not 1 <= described["n_envs"] <= MAX_ENVS:
        return f"n_envs is not an integer from 1 to {MAX_ENVS}"
    counters = {name: COUNTER_SCHEMA[name] for name in schema.counters}
    return (
        section_problem("hyperparameters", described["hyperparameters"], schema.hyperparameters, schema.required)
        or section_problem("counters", described["counters"], counters, ())
        or policy_kwargs_problem(described["policy_kwargs"])
    )


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
