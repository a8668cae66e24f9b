"""Models on disk: written atomically, loaded without unpickling anything.

An SB3 zip holds pickled entries that SB3's loader unpickles, so a crafted file runs any code
it likes. :func:`load_model` instead rebuilds the model from the plain-JSON description every
saved zip holds (:data:`~sb3_snake.q_learning.save_format.METADATA_ENTRY`, :mod:`sb3_snake.q_learning.save_format`)
and loads the weights with ``torch.load(weights_only=True)``; a file without it is refused unless
``trusted``. Every file is written through :func:`~sb3_snake.common.paths.atomic_write`, so a
crash leaves the previous file intact. A model's board is checked against its env in one place
(:func:`check_env`). Every failure is one :class:`~sb3_snake.common.errors.UsageError`.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import torch
from gymnasium import spaces

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import atomic_write, write_text_atomically
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.envs.rules import board_options, board_space
from sb3_snake.persistence.migrations import saved_board_options
from sb3_snake.persistence.replay_file import replay_buffer_path, save_replay_buffer, view_of
from sb3_snake.pqn import PQN
from sb3_snake.q_learning.save_format import (
    ACTION_COUNTS,
    BOARD_SHAPES,
    CHANNEL_COUNTS,
    METADATA_ENTRY,
    described_policy_kwargs,
    read_metadata,
)

#: What a model file holds: either of the package's learners.
Model = SnakeDQN | PQN


def save_model(model: Model, path: Path, replay_buffer: bool = False) -> None:
    """Save ``model`` to ``path`` (a ``.zip``) atomically; with ``replay_buffer``, its buffer
    beside it as ``<stem>.replay.npz``, also atomically."""
    with atomic_write(path) as temporary:
        model.save(temporary)
        if replay_buffer:
            # The pair is written both or neither: the buffer goes into place only once the model
            # is written whole, and the model only once the buffer is; a full disk keeps the old pair.
            # Both carry the env steps they were saved at, so a pair cut apart is refused on resume.
            with atomic_write(replay_buffer_path(path)) as buffer_temporary:
                save_replay_buffer(model.replay_buffer, buffer_temporary, model.num_timesteps)


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` as indented JSON, atomically."""
    write_text_atomically(path, json.dumps(value, indent=2) + "\n")


def saved_metadata(path: Path, trusted: bool = False) -> dict[str, Any]:
    """A saved model's description: read from its JSON entry, or, when ``trusted``, from the model
    SB3's full loader rebuilds (so models saved without the entry work too)."""
    return load_model(path, trusted=True).metadata() if trusted else read_metadata(path)


def load_model(
    path: Path | str,
    optimizations: OptimizationSettings | None = None,
    *,
    trusted: bool = False,
    env: Any = None,
    device: torch.device | str = "auto",
    for_training: bool = False,
) -> Model:
    """Load a saved SnakeDQN or PQN (the file says which); every failure is one
    :class:`UsageError` that says what to do.

    :param optimizations: applied to the loaded model (``None``: ``OptimizationSettings.unmeasured()``).
    :param trusted: use SB3's full loader, which unpickles parts of the file and so can run
        code from it: only for files you trust (a model made by plain SB3, say).
    :param env: the env to continue on; its board must be the model's.
    :param for_training: keep the replay buffer's full size (a resumed run); otherwise the
        model is for acting and gets a buffer of one transition, ``auto`` settings take their
        unmeasured values (a gradient-step measurement would decide nothing for acting), and it
        is not compiled: acting (``eval``, ``play``, a benchmark's checkpoints) is over before a
        compilation pays for itself (even with a warm compile cache, a short eval ran slower
        compiled than not, and a cold compile stalls it far longer).
    """
    if optimizations is not None and not for_training:
        optimizations = optimizations.without_auto() if optimizations.auto_fields else optimizations
        optimizations = optimizations.resolved({"use_torch_compile": False}, {"use_torch_compile": "loaded for acting"})
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"model file {path} does not exist")
    if trusted:
        model = _load_trusted(path, optimizations, env, device)
    else:
        model = _load_safely(path, read_metadata(path), optimizations, env, device, for_training)
    _check_snake_model(model, path)
    _check_finite(model, path)
    if env is not None:
        space = model.observation_space
        check_env(path, space.shape[-1], board_options(space), model.action_space.n, env)
    return model


def check_env(path: Path, board_size: int, channels: dict[str, bool], n_actions: int, env: Any) -> None:
    """The one check that ``env`` plays the boards (side, optional channels) and the actions the
    model at ``path`` was trained on; one :class:`UsageError` naming the argument that fixes it."""
    given_size, given_channels = env.observation_space.shape[-1], board_options(env.observation_space)
    if board_size != given_size:
        raise UsageError(
            f"model {path} was trained on a {board_size}x{board_size} board, not {given_size}x{given_size}",
            fix={"board_size": board_size},
        )
    for name, used in channels.items():
        if given_channels[name] != used:
            raise UsageError(
                f"model {path} was trained {'with' if used else 'without'} the {name} channel", fix={name: used}
            )
    if n_actions != env.action_space.n:
        raise UsageError(
            f"model {path} was trained on the {view_of(n_actions)} view with {n_actions} actions",
            fix={"egocentric": n_actions == 3},
        )


def one_line(error: BaseException) -> str:
    """``error``'s type and message on one line (torch's load errors list each tensor on a line)."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def _load_trusted(path: Path, optimizations: OptimizationSettings | None, env: Any, device: Any) -> Model:
    name = _described_algorithm(path)
    loader = TRUSTED_LOADERS.get(name) if isinstance(name, str) else None
    if loader is None:
        raise UsageError(f"model file {path} names the learner {name!r}, which sb3-snake cannot load")
    try:
        return loader(path, optimizations, env, device)
    except Exception as error:  # noqa: BLE001 - any failure to read the zip is a bad model file
        raise UsageError(f"model file {path} cannot be loaded ({one_line(error)})") from None


def _load_trusted_pqn(path: Path, optimizations: OptimizationSettings | None, env: Any, device: Any) -> PQN:
    # an older file's network named as it was built (SB3's loader reads the pickled kwargs)
    kwargs = described_policy_kwargs(read_metadata(path))
    return PQN.load(path, env=env, device=device, custom_objects={"policy_kwargs": kwargs})


def _load_trusted_dqn(path: Path, optimizations: OptimizationSettings | None, env: Any, device: Any) -> SnakeDQN:
    return SnakeDQN.load(path, env=env, device=device, optimizations=optimizations)


#: SB3's own (pickle-reading) loader of each learner, by the name its files give it.
TRUSTED_LOADERS = {"PQN": _load_trusted_pqn, "SnakeDQN": _load_trusted_dqn}


def _described_algorithm(path: Path) -> str:
    """The learner a file's description names; SnakeDQN where there is none (plain SB3's files,
    and sb3-snake's before PQN) or it cannot be read (the full loader then says what is wrong)."""
    try:
        with zipfile.ZipFile(path) as archive:
            described = json.loads(archive.read(METADATA_ENTRY).decode("utf-8"))
        return described.get("algorithm", "SnakeDQN") if isinstance(described, dict) else "SnakeDQN"
    except (KeyError, zipfile.BadZipFile, OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return "SnakeDQN"


def _check_finite(model: Model, path: Path) -> None:
    """Refuse weights that are NaN or infinite: such a network plays its first move every time."""
    for name, tensor in model.policy.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise UsageError(
                f"model file {path} holds weights that are not finite (NaN or infinite) in {name}: it cannot "
                "play or train; use an earlier checkpoint"
            )


def _check_snake_model(model: Model, path: Path) -> None:
    shape = getattr(model.observation_space, "shape", None)
    if (
        not isinstance(model.action_space, spaces.Discrete)
        or model.action_space.n not in ACTION_COUNTS
        or shape is None
        or len(shape) != 3
        or shape[0] not in CHANNEL_COUNTS
    ):
        raise UsageError(
            f"model file {path} is not a Snake model: it acts on {model.observation_space} with "
            f"{model.action_space}, not on ({BOARD_SHAPES}) boards with 4 actions (or 3, egocentric)"
        )


def _rebuild_pqn(
    policy: str,
    env: Any,
    device: Any,
    optimizations: Any,
    policy_kwargs: Any,
    hyperparameters: dict,
    for_training: bool,
) -> PQN:
    return PQN(policy, env, device=device, policy_kwargs=policy_kwargs, _init_setup_model=False, **hyperparameters)


def _rebuild_dqn(
    policy: str,
    env: Any,
    device: Any,
    optimizations: Any,
    policy_kwargs: Any,
    hyperparameters: dict,
    for_training: bool,
) -> SnakeDQN:
    train_freq = (hyperparameters.pop("train_freq"), hyperparameters.pop("train_freq_unit"))
    if not for_training:
        hyperparameters["buffer_size"] = 1  # a model that only acts keeps no replay buffer
    return SnakeDQN(
        policy,
        env=env,
        device=device,
        optimizations=optimizations,
        policy_kwargs=policy_kwargs,
        train_freq=train_freq,
        _init_setup_model=False,
        **hyperparameters,
    )


#: Each learner's model rebuilt, unset up, from the arguments its file describes, by the name its
#: files give it (a description without one was written by SnakeDQN before PQN existed).
REBUILDERS = {"PQN": _rebuild_pqn, "SnakeDQN": _rebuild_dqn}


def _load_safely(
    path: Path,
    metadata: dict[str, Any],
    optimizations: OptimizationSettings | None,
    env: Any,
    device: Any,
    for_training: bool,
) -> Model:
    hyperparameters = dict(metadata["hyperparameters"])
    policy_kwargs = described_policy_kwargs(metadata)
    try:
        rebuild = REBUILDERS[metadata.get("algorithm", "SnakeDQN")]
        model = rebuild(metadata["policy"], env, device, optimizations, policy_kwargs, hyperparameters, for_training)
    except (TypeError, ValueError) as error:
        raise UsageError(f"model file {path} has a malformed {METADATA_ENTRY}: {error}") from None
    if env is None:
        shape = metadata["observation_shape"]
        model.observation_space = board_space(shape[-1], **saved_board_options(metadata))
        model.action_space = spaces.Discrete(metadata["n_actions"])
        model.n_envs = metadata["n_envs"]
    else:
        size, channels = metadata["observation_shape"][-1], saved_board_options(metadata)
        check_env(path, size, channels, metadata["n_actions"], env)
    try:
        model._setup_model()
    except (TypeError, ValueError, RuntimeError, AssertionError) as error:
        # Values the schema lets through that still do not make a network together (a policy
        # that cannot read Snake boards, an embedding its heads do not divide...).
        raise UsageError(
            f"model file {path} has a malformed {METADATA_ENTRY}: {type(error).__name__}: {error}"
        ) from None
    for name, value in metadata["counters"].items():
        setattr(model, name, value)
    try:
        with zipfile.ZipFile(path) as archive:
            entries = _weight_entries(archive, model, path)  # names and sizes checked before any is read
            params = {
                name[: -len(".pth")]: torch.load(
                    io.BytesIO(archive.read(name)), map_location=model.device, weights_only=True
                )
                for name in entries
            }
        model.set_parameters(params, exact_match=True, device=model.device)
    except UsageError:
        raise
    except Exception as error:  # noqa: BLE001 - weights that do not fit the described model
        raise UsageError(f"model file {path} cannot be loaded ({one_line(error)})") from None
    return model


#: Bytes a weights entry may take beyond the state it holds: the format's own headers and names.
ENTRY_OVERHEAD = 1 << 20
#: The largest multiple of the policy's own state an entry may hold (the optimizer's: Adam's two moments).
ENTRY_STATES = 4


def _weight_entries(archive: zipfile.ZipFile, model: Model, path: Path) -> list[str]:
    """The weights entries of ``archive`` for ``model``, refused before any is read where one is
    not the model's (SB3's names: ``policy.pth``, ``policy.optimizer.pth``) or declares more bytes
    than the model's own state could (a crafted file's extra or swollen entries)."""
    expected = {f"{name}.pth" for name in model._get_torch_save_params()[0]}
    found = [name for name in archive.namelist() if name.endswith(".pth") and name != "pytorch_variables.pth"]
    unknown, missing = sorted(set(found) - expected), sorted(expected - set(found))
    if unknown:
        raise UsageError(
            f"model file {path} holds entries {unknown} that no {type(model).__name__} writes; "
            "it is not a model this project wrote"
        )
    if missing:
        raise UsageError(f"model file {path} lacks its weights {missing}; it is not a whole model this project wrote")
    state = sum(t.numel() * t.element_size() for t in model.policy.state_dict().values())
    limit = ENTRY_STATES * state + ENTRY_OVERHEAD
    for name in found:
        declared = archive.getinfo(name).file_size
        if declared > limit:
            raise UsageError(
                f"model file {path}: entry {name} would unpack to {declared:,} bytes, more than the {limit:,} "
                f"its model's weights take; it is not a model this project wrote"
            )
    return found
