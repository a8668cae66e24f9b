"""Replay buffers on disk: ``<stem>.replay.npz`` beside a model, read back without running code.

A buffer is saved as its filled rows in time order (:func:`save_replay_buffer`), with what it
was recorded with (:data:`RECORDED`) and the env steps of its model (:data:`SAVED_AT`), and read
with ``numpy.load(allow_pickle=False)``: every array is checked before any is copied, and a
buffer recorded otherwise than its model plays, or cut apart from its model, is refused in one
line (:func:`load_replay_buffer`). Older formats: :mod:`~sb3_snake.persistence.migrations`.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch
from stable_baselines3.common.buffers import ReplayBuffer

from sb3_snake.common.errors import UsageError
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.persistence.migrations import unrecorded_buffer_problem, unshaped_rewards

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


def replay_buffer_path(model_path: Path) -> Path:
    return Path(model_path).with_name(Path(model_path).stem + ".replay.npz")


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
        arrays["rewards"] = unshaped_rewards(arrays, scale, model.gamma, path)
    if saved_envs != buffer.n_envs:
        if getattr(buffer, "n_steps", 1) > 1:
            raise UsageError(
                f"replay buffer {path} holds n-step transitions of {saved_envs} games: move it away to resume "
                "without it, or resume with as many games to keep it",
                fix={"n_envs": saved_envs},
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
        return unrecorded_buffer_problem(bool(model["egocentric"]))
    for name in RECORDED:
        value = arrays.get(name)
        if value is None or value.shape != () or value.dtype.kind not in "iub":
            return f"has {name} {None if value is None else value.tolist()}, not one integer"
    saved = {name: int(arrays[name]) for name in RECORDED}
    if (saved["egocentric"], saved["n_actions"]) != (model["egocentric"], model["n_actions"]):
        return (
            f"was recorded on the {view_of(saved['n_actions'])} view with {saved['n_actions']} actions; "
            f"the model plays the {view_of(model['n_actions'])} view with {model['n_actions']} actions"
        )
    if (saved["board_size"], saved["channels"]) != (model["board_size"], model["channels"]):
        return (
            f"was recorded on {saved['board_size']}x{saved['board_size']} boards of {saved['channels']} channels; "
            f"the model plays {model['board_size']}x{model['board_size']} boards of {model['channels']}"
        )
    return ""


def view_of(n_actions: int) -> str:
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


def _repack(array: np.ndarray, n_envs: int) -> np.ndarray:
    flat = array.reshape(-1, *array.shape[2:])
    usable = len(flat) - len(flat) % n_envs
    return flat[len(flat) - usable :].reshape(usable // n_envs, n_envs, *array.shape[2:])
