"""Models and replay buffers on disk: written atomically, read back without running code.

**Loading safely.** An SB3 zip holds pickled entries (spaces, schedules, the policy class),
and SB3's loader unpickles them with cloudpickle: a crafted file runs any code it likes while
it loads. :func:`load_model` never does that. It reads the
:data:`~sb3_snake.dqn.save_format.METADATA_ENTRY` entry that
:meth:`SnakeDQN.save <sb3_snake.dqn.snake_dqn.SnakeDQN.save>` writes (plain JSON: policy name,
spaces, hyperparameters, counters; both directions of that format are
:mod:`sb3_snake.dqn.save_format`), rebuilds the model from it, and loads the weights with
``torch.load(weights_only=True)``. A file without that entry (made by plain SB3, by another
program, or by sb3-snake before 0.2) is refused with the way out: ``trusted=True`` (the CLI's
``--trust-model``) uses SB3's full loader, for files whose origin you trust.

**Replay buffers** are saved beside a model as ``<stem>.replay.npz``: the buffer's arrays in
time order, read back with ``numpy.load(allow_pickle=False)``, so a resumed run never
unpickles either. SB3's ``<stem>.replay.pkl`` is read only when trusted. The rewards are the
env's own (``env_rewards`` says so); a buffer saved before reward shaping moved into the TD
targets holds shaped rewards, which :func:`load_replay_buffer` unshapes. A buffer also records
what it was recorded with (:data:`RECORDED`: the view, the actions, the board, the channels), and
a model that plays otherwise refuses it.

**Atomic writes.** Every file goes through :func:`sb3_snake.common.paths.atomic_write`: a unique
temporary name, then a rename, so a crash or a second Ctrl-C leaves the previous file intact
and no temporary file behind.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import atomic_write, write_text_atomically
from sb3_snake.dqn.save_format import (
    ACTION_COUNTS,
    BOARD_SHAPES,
    CHANNEL_COUNTS,
    METADATA_ENTRY,
    decode_policy_kwargs,
    read_metadata,
)
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.dqn.targets import shaping_rewards
from sb3_snake.envs.rules import NUM_CHANNELS, board_options, board_space, channel_options

#: The arrays of an SB3 replay buffer that a saved buffer holds (``next_observations`` too,
#: unless the buffer was made with ``optimize_memory_usage``).
REPLAY_ARRAYS = ("observations", "actions", "rewards", "dones", "timeouts")
#: The flag of a saved buffer whose rewards are the env's own; one without it stored them shaped.
ENV_REWARDS = "env_rewards"
#: The env steps of the model a buffer was saved with (saved as a pair with it).
SAVED_AT = "num_timesteps"
#: What a saved buffer was recorded with, each an integer, checked against the model that loads it:
#: the view (1: egocentric), the number of actions, the board's side and its channels. A buffer
#: saved before these were recorded is taken as of the whole board, as every release then wrote.
RECORDED = ("egocentric", "n_actions", "board_size", "channels")


# ---------------------------------------------------------------------- saving


def save_model(model: SnakeDQN, path: Path, replay_buffer: bool = False) -> None:
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


def replay_buffer_path(model_path: Path) -> Path:
    return Path(model_path).with_name(Path(model_path).stem + ".replay.npz")


def legacy_replay_buffer_path(model_path: Path) -> Path:
    """Where SB3's pickled buffer of earlier sb3-snake runs lies (read only when trusted)."""
    return Path(model_path).with_name(Path(model_path).stem + ".replay.pkl")


def _time_ordered(buffer: ReplayBuffer, array: np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(array, torch.Tensor):  # a DeviceReplayBuffer's
        array = array.cpu().numpy()
    if buffer.full:
        return np.concatenate([array[buffer.pos :], array[: buffer.pos]])
    return array[: buffer.pos]


def save_replay_buffer(buffer: ReplayBuffer, path: Path, num_timesteps: int | None = None) -> None:
    """The filled rows of ``buffer``'s arrays, oldest first, as an uncompressed ``.npz`` (SB3's
    NumPy buffers and :class:`~sb3_snake.dqn.replay.DeviceReplayBuffer` alike), with the env
    steps of the model it belongs to (``num_timesteps``), which :func:`load_replay_buffer` checks."""
    names = [*REPLAY_ARRAYS, *(() if buffer.optimize_memory_usage else ("next_observations",))]
    arrays = {name: _time_ordered(buffer, getattr(buffer, name)) for name in names}
    steps = {} if num_timesteps is None else {SAVED_AT: np.int64(num_timesteps)}
    record = {name: np.int64(value) for name, value in _recorded_with(buffer).items()}
    with open(path, "wb") as file:
        np.savez(file, n_envs=np.int64(buffer.n_envs), **{ENV_REWARDS: np.bool_(True)}, **steps, **record, **arrays)


def _recorded_with(buffer: ReplayBuffer) -> dict[str, int]:
    """What ``buffer``'s transitions are (:data:`RECORDED`), read from its spaces: three actions
    are the egocentric view's turns."""
    n_actions, shape = int(buffer.action_space.n), buffer.observation_space.shape
    return {"egocentric": int(n_actions == 3), "n_actions": n_actions, "board_size": shape[-1], "channels": shape[0]}


def load_replay_buffer(model: SnakeDQN, path: Path) -> int:
    """Fill ``model.replay_buffer`` from a ``.npz`` written by :func:`save_replay_buffer`.

    The most recent transitions that fit are kept. With a different number of games than
    saved, 1-step transitions are repacked (each is independent); n-step ones are refused,
    since their order per game is what their returns are computed from. A buffer saved while
    shaping was added to the stored rewards (no ``env_rewards`` flag) has the model's
    ``food_shaping`` term taken off again, so that it holds the env's rewards as the model
    expects (:mod:`sb3_snake.dqn.targets`).

    :return: the number of transitions loaded.
    :raises UsageError: one line, for a truncated, corrupt or mismatched file.
    """
    buffer = model.replay_buffer
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as error:
        raise UsageError(f"replay buffer {path} cannot be read ({type(error).__name__}: {error})") from None
    missing = [name for name in REPLAY_ARRAYS if name not in arrays]
    if missing or "n_envs" not in arrays:
        raise UsageError(f"replay buffer {path} lacks {', '.join(missing or ['n_envs'])}; it is not a saved buffer")
    problem = _record_problem(arrays, buffer) or _replay_problem(arrays, buffer)
    if problem:
        raise UsageError(f"replay buffer {path} {problem}; move it away to resume without it")
    for name in RECORDED:
        arrays.pop(name, None)
    saved_at = arrays.pop(SAVED_AT, None)
    if saved_at is not None and int(saved_at) != model.num_timesteps:
        raise UsageError(
            f"replay buffer {path} was saved at {int(saved_at):,} env steps and its model at {model.num_timesteps:,}: "
            "they are not a pair (a save cut short?); move the buffer away to resume without it"
        )
    saved_envs = int(arrays.pop("n_envs"))
    scale = getattr(model, "food_shaping", 0.0)
    if not arrays.pop(ENV_REWARDS, False) and scale:
        arrays["rewards"] = _unshaped_rewards(arrays, scale, model.gamma, path)
    if saved_envs != buffer.n_envs:
        if getattr(buffer, "n_steps", 1) > 1:
            raise UsageError(
                f"replay buffer {path} holds n-step transitions of {saved_envs} games; resume with "
                f"--n-envs {saved_envs} to keep it, or move it away to resume without it"
            )
        arrays = {name: _repack(array, buffer.n_envs) for name, array in arrays.items()}
    rows = min(len(arrays["observations"]), buffer.buffer_size)
    for name, array in arrays.items():
        target = getattr(buffer, name, None)
        if target is not None:
            recent = array[len(array) - rows :]
            target[:rows] = (
                torch.as_tensor(recent, device=target.device) if isinstance(target, torch.Tensor) else recent
            )
    if "next_observations" not in arrays and not buffer.optimize_memory_usage:
        raise UsageError(f"replay buffer {path} holds no next observations; it was saved with optimize_memory_usage")
    buffer.pos, buffer.full = rows % buffer.buffer_size, rows == buffer.buffer_size
    return rows * buffer.n_envs


def _record_problem(arrays: dict[str, np.ndarray], buffer: ReplayBuffer) -> str:
    """How what the saved arrays were recorded with (:data:`RECORDED`) differs from ``buffer``'s
    model: another view, other actions, another board or other channels."""
    model = _recorded_with(buffer)
    if not any(name in arrays for name in RECORDED):
        # Saved before buffers recorded this: every release then played the whole board only.
        if model["egocentric"]:
            return "does not say which view it was recorded on (saved before buffers did, on the whole board)"
        return ""
    for name in RECORDED:
        value = arrays.get(name)
        if value is None or value.shape != () or value.dtype.kind not in "iub":
            return f"has {name} {None if value is None else value.tolist()}, not one integer"
    saved = {name: int(arrays[name]) for name in RECORDED}
    if (saved["egocentric"], saved["n_actions"]) != (model["egocentric"], model["n_actions"]):
        return (
            f"was recorded on the {_view(saved['n_actions'])} view with {saved['n_actions']} actions; "
            f"the model plays the {_view(model['n_actions'])} view with {model['n_actions']} actions"
        )
    if (saved["board_size"], saved["channels"]) != (model["board_size"], model["channels"]):
        return (
            f"was recorded on {saved['board_size']}x{saved['board_size']} boards of {saved['channels']} channels; "
            f"the model plays {model['board_size']}x{model['board_size']} boards of {model['channels']}"
        )
    return ""


def _view(n_actions: int) -> str:
    """The view a model or buffer of ``n_actions`` actions plays: three turns are the egocentric view's."""
    return "egocentric" if n_actions == 3 else "board-wide"


def _replay_problem(arrays: dict[str, np.ndarray], buffer: ReplayBuffer) -> str:
    """What makes saved arrays unfit for ``buffer``: shapes, dtypes and values, checked before any
    is copied, so a crafted or foreign file cannot crash a run midway."""
    n_envs = arrays["n_envs"]
    if n_envs.shape != () or n_envs.dtype.kind not in "iu" or not 1 <= int(n_envs) <= 1 << 20:
        return f"has n_envs {n_envs!r}, not one positive integer"
    observations = arrays["observations"]
    if observations.ndim != 2 + len(buffer.obs_shape) or observations.shape[2:] != tuple(buffer.obs_shape):
        return (
            f"holds observations of shape {observations.shape[2:]}, the model {buffer.obs_shape}; "
            "it belongs to another board size"
        )
    rows, games = observations.shape[:2]
    if games != int(n_envs):
        return f"holds {games} games per row but says n_envs {int(n_envs)}"
    expected = {
        "observations": (observations.shape, "u"),
        "next_observations": (observations.shape, "u"),
        "actions": ((rows, games, 1), "iu"),
        "rewards": ((rows, games), "f"),
        "dones": ((rows, games), "fbiu"),
        "timeouts": ((rows, games), "fbiu"),
    }
    for name, (shape, kinds) in expected.items():
        if name in arrays and (arrays[name].shape != shape or arrays[name].dtype.kind not in kinds):
            return (
                f"has {name} of shape {arrays[name].shape} and dtype {arrays[name].dtype}, not {shape} of the model's"
            )
    actions, count = arrays["actions"], int(buffer.action_space.n)
    if actions.size and (actions.min() < 0 or actions.max() >= count):
        return f"has actions from {actions.min()} to {actions.max()}, not 0 to {count - 1}"
    if not np.isfinite(arrays["rewards"]).all():
        return "has rewards that are not finite"
    return ""


def _unshaped_rewards(arrays: dict[str, np.ndarray], scale: float, gamma: float, path: Path) -> np.ndarray:
    """The rewards of a buffer saved with shaping in them, less the term it added to each."""
    if "next_observations" not in arrays:
        raise UsageError(
            f"replay buffer {path} holds shaped rewards and no next observations to unshape them with; "
            "move it away to resume without it"
        )
    observations = torch.as_tensor(arrays["observations"]).flatten(0, 1)
    next_observations = torch.as_tensor(arrays["next_observations"]).flatten(0, 1)
    terminated = torch.as_tensor(arrays["dones"] * (1 - arrays["timeouts"])).flatten() > 0
    shaping = shaping_rewards(scale, gamma, observations, next_observations, terminated).numpy()
    rewards = arrays["rewards"]
    return (rewards - shaping.reshape(rewards.shape)).astype(rewards.dtype)


def _repack(array: np.ndarray, n_envs: int) -> np.ndarray:
    flat = array.reshape(-1, *array.shape[2:])
    usable = len(flat) - len(flat) % n_envs
    return flat[len(flat) - usable :].reshape(usable // n_envs, n_envs, *array.shape[2:])


# ---------------------------------------------------------------------- loading


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
) -> SnakeDQN:
    """Load a saved SnakeDQN; every failure is one :class:`UsageError` that says what to do.

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
    if env is not None:
        _check_board(path, _board_of(model.observation_space), _board_of(env.observation_space))
        _check_actions(path, model.action_space.n, env.action_space.n)
    return model


def saved_board_options(described: dict[str, Any]) -> dict[str, bool]:
    """The optional channels of a saved model's boards (:func:`~sb3_snake.envs.rules.board_options`):
    from its ``observation_channels``, or, in a file written before models recorded them, from
    the channel count (six channels: the countdown, the only optional channel then)."""
    if "observation_channels" in described:
        return channel_options(described["observation_channels"])
    return {"countdown": described["observation_shape"][0] == NUM_CHANNELS, "reachable": False}


def _board_of(space: Any) -> tuple[int, dict[str, bool]]:
    """A board's side and its optional channels (:func:`~sb3_snake.envs.rules.board_options`)."""
    return space.shape[-1], board_options(space)


def _check_board(path: Path, trained: tuple[int, dict[str, bool]], given: tuple[int, dict[str, bool]]) -> None:
    """One line when ``env``'s boards (side, optional channels) are not those the model was trained on."""
    (n, trained_channels), (m, given_channels) = trained, given
    if n != m:
        raise UsageError(f"model {path} was trained on a {n}x{n} board, not {m}x{m}; pass --board-size {n}")
    for name, used in trained_channels.items():
        if given_channels[name] != used:
            flag = f"--{name}" if used else f"--no-{name}"
            raise UsageError(
                f"model {path} was trained {'with' if used else 'without'} the {name} channel; pass {flag}"
            )


def one_line(error: BaseException) -> str:
    """``error``'s type and message on one line (torch's load errors list each tensor on a line)."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def _check_actions(path: Path, trained: int, given: int) -> None:
    """One line when ``env`` does not act as the model was trained to: directions or turns."""
    if trained != given:
        flag = "--egocentric" if trained == 3 else "--no-egocentric"
        raise UsageError(f"model {path} was trained on the {_view(trained)} view with {trained} actions; pass {flag}")


def _load_trusted(path: Path, optimizations: OptimizationSettings | None, env: Any, device: Any) -> SnakeDQN:
    try:
        return SnakeDQN.load(path, env=env, device=device, optimizations=optimizations)
    except Exception as error:  # noqa: BLE001 - any failure to read the zip is a bad model file
        raise UsageError(f"model file {path} cannot be loaded ({one_line(error)})") from None


def _check_snake_model(model: SnakeDQN, path: Path) -> None:
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


def _load_safely(
    path: Path,
    metadata: dict[str, Any],
    optimizations: OptimizationSettings | None,
    env: Any,
    device: Any,
    for_training: bool,
) -> SnakeDQN:
    hyperparameters = dict(metadata["hyperparameters"])
    train_freq = (hyperparameters.pop("train_freq"), hyperparameters.pop("train_freq_unit"))
    if not for_training:
        hyperparameters["buffer_size"] = 1
    try:
        model = SnakeDQN(
            metadata["policy"],
            env=env,
            device=device,
            optimizations=optimizations,
            policy_kwargs=decode_policy_kwargs(metadata["policy_kwargs"]),
            train_freq=train_freq,
            _init_setup_model=False,
            **hyperparameters,
        )
    except (TypeError, ValueError) as error:
        raise UsageError(f"model file {path} has a malformed {METADATA_ENTRY}: {error}") from None
    if env is None:
        shape = metadata["observation_shape"]
        model.observation_space = board_space(shape[-1], **saved_board_options(metadata))
        model.action_space = spaces.Discrete(metadata["n_actions"])
        model.n_envs = metadata["n_envs"]
    else:
        trained = (metadata["observation_shape"][-1], saved_board_options(metadata))
        _check_board(path, trained, _board_of(env.observation_space))
        _check_actions(path, metadata["n_actions"], env.action_space.n)
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
            params = {
                name[: -len(".pth")]: torch.load(
                    io.BytesIO(archive.read(name)), map_location=model.device, weights_only=True
                )
                for name in archive.namelist()
                if name.endswith(".pth") and name != "pytorch_variables.pth"
            }
        model.set_parameters(params, exact_match=True, device=model.device)
    except Exception as error:  # noqa: BLE001 - weights that do not fit the described model
        raise UsageError(f"model file {path} cannot be loaded ({one_line(error)})") from None
    return model
