"""Models and replay buffers on disk: the safe loader, crafted files, replay round trips."""

import base64
import json
import re
import zipfile

import cloudpickle
import numpy as np
import pytest
import torch
from stable_baselines3 import DQN

from sb3_snake import BatchedSnakeVecEnv, SnakeDQN
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import UsageError
from sb3_snake.persistence import (
    RECORDED,
    load_model,
    load_replay_buffer,
    read_metadata,
    replay_buffer_path,
    save_model,
    save_replay_buffer,
)
from sb3_snake.q_learning.save_format import METADATA_ENTRY
from sb3_snake.q_learning.targets import shaping_rewards
from sb3_snake.training.evaluation import evaluate
from tests.conftest import rewrite_metadata, small_dqn

FAST = OptimizationSettings(use_torch_compile=False, use_bf16=False, num_threads=1)


def greedy(model, observations):
    return model.predict(observations, deterministic=True)[0]


@pytest.fixture
def saved(tmp_path):
    model = small_dqn(FAST, transitions=128, policy_kwargs={"dueling": True}, n_steps=1)
    model.train(gradient_steps=3, batch_size=32)
    path = tmp_path / "model.zip"
    save_model(model, path, replay_buffer=True)
    return model, path


def test_safe_load_acts_as_the_saved_model(saved):
    model, path = saved
    safe = load_model(path, FAST)
    trusted = load_model(path, FAST, trusted=True)
    observations = np.stack([model.observation_space.sample() for _ in range(64)])
    np.testing.assert_array_equal(greedy(safe, observations), greedy(model, observations))
    np.testing.assert_array_equal(greedy(trusted, observations), greedy(model, observations))
    assert safe.q_net.dueling and safe.num_timesteps == model.num_timesteps
    assert safe.hyperparameters() | {"buffer_size": 0} == model.hyperparameters() | {"buffer_size": 0}


def test_a_model_with_the_countdown_loads_safely_with_its_bounds_and_plays(tmp_path):
    model = small_dqn(FAST, countdown=True)
    model.train(gradient_steps=3, batch_size=32)
    save_model(model, tmp_path / "model.zip")
    safe = load_model(tmp_path / "model.zip", FAST)
    assert read_metadata(tmp_path / "model.zip")["observation_shape"] == [6, 5, 5]
    assert safe.observation_space == model.observation_space  # the countdown's bound scales its input
    # A file from before models recorded their channels: six were the countdown.
    legacy = rewrite_metadata(
        tmp_path / "model.zip",
        tmp_path / "legacy.zip",
        lambda meta: {k: v for k, v in meta.items() if k != "observation_channels"},
    )
    assert load_model(legacy, FAST).observation_space == model.observation_space
    observations = torch.as_tensor(np.stack([model.observation_space.sample() for _ in range(64)])).float()
    with torch.no_grad():
        torch.testing.assert_close(safe.q_net(observations), model.q_net(observations))
    assert evaluate(safe, episodes=4)["episodes"] == 4  # on boards with the countdown


def test_metadata_is_plain_json(saved):
    _, path = saved
    with zipfile.ZipFile(path) as archive:
        metadata = json.loads(archive.read(METADATA_ENTRY))
    assert metadata["policy"] == "AttentionPolicy" and metadata["observation_shape"] == [5, 5, 5]
    assert metadata["policy_kwargs"]["dueling"] is True and metadata["hyperparameters"]["batch_size"] == 32
    assert read_metadata(path) == metadata


def craft(path, target, marker):
    """Copy the model at ``path`` to ``target`` with a pickled payload that writes ``marker``."""

    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('ran')",))

    with zipfile.ZipFile(path) as source, zipfile.ZipFile(target, "w") as crafted:
        for name in source.namelist():
            content = source.read(name)
            if name == "data":
                data = json.loads(content)
                blob = base64.b64encode(cloudpickle.dumps(Payload())).decode()
                data["policy_class"] = {":type:": "<class 'type'>", ":serialized:": blob}
                content = json.dumps(data).encode()
            crafted.writestr(name, content)


def test_a_crafted_model_does_not_run_code_when_loaded_safely(saved, tmp_path):
    _, path = saved
    crafted, marker = tmp_path / "crafted.zip", tmp_path / "pwned"
    craft(path, crafted, marker)
    load_model(crafted, FAST)  # the safe loader reads sb3_snake.json and the weights only
    assert not marker.exists()
    # The payload is real: SB3's own loader runs it (and then fails on what it returned).
    with pytest.raises(ValueError, match="cannot be loaded"):
        load_model(crafted, FAST, trusted=True)
    assert marker.read_text() == "ran"


def test_models_without_our_description_need_trust(tmp_path):
    path = tmp_path / "cartpole.zip"
    DQN("MlpPolicy", "CartPole-v1", buffer_size=100).save(path)
    with pytest.raises(ValueError, match=r"has no sb3-snake description .* load it trusted; pass trusted=True"):
        load_model(path, FAST)
    with pytest.raises(ValueError, match=r"is not a Snake model: it acts on Box.* with Discrete\(2\)"):
        load_model(path, FAST, trusted=True)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"observation_shape": [5, 10**6, 10**6]}, "is not that of a Snake board"),
        ({"policy": "EvilPolicy"}, "policy 'EvilPolicy' is not one of"),
        ({"policy_kwargs": {"activation_fn": {"class": "os.system"}}}, "class 'os.system' is not one the safe loader"),
        ({"hyperparameters": {"gamma": [1, 2]}}, "hyperparameters hold values that are not plain numbers"),
        ({"format": "other"}, "format is not"),
        ({"observation_channels": ["head", "body", "food", "tail", "neck", "reachable"]}, "are not the 5 channels"),
        ({"observation_channels": ["head", "body", "food", "tail", "snout"]}, "are not the 5 channels"),
    ],
)
def test_malformed_descriptions_are_one_line(saved, tmp_path, change, message):
    _, path = saved
    target = rewrite_metadata(path, tmp_path / "bad.zip", lambda metadata: {**metadata, **change})
    with pytest.raises(ValueError, match=message):
        load_model(target, FAST)


@pytest.mark.parametrize("named", ["PPO", ["PQN"]])
def test_a_trusted_load_of_a_file_naming_another_learner_is_one_line(saved, tmp_path, named):
    _, path = saved
    target = rewrite_metadata(path, tmp_path / "other.zip", lambda metadata: {**metadata, "algorithm": named})
    with pytest.raises(
        UsageError,
        match=rf"^model file \S+other.zip names the learner {re.escape(repr(named))}, which sb3-snake cannot load$",
    ):
        load_model(target, FAST, trusted=True)


def test_not_a_zip_and_missing_file(tmp_path):
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="cannot be loaded .BadZipFile"):
        load_model(tmp_path / "bad.zip", FAST)
    with pytest.raises(ValueError, match="does not exist"):
        load_model(tmp_path / "missing.zip", FAST)


def test_replay_buffer_round_trip_keeps_every_transition(saved, tmp_path):
    model, path = saved
    assert replay_buffer_path(path).is_file()
    resumed = load_model(path, FAST, env=BatchedSnakeVecEnv(8, board_size=5), for_training=True, device="cpu")
    assert load_replay_buffer(resumed, replay_buffer_path(path)) == 128
    original, loaded = model.replay_buffer, resumed.replay_buffer
    for name in ("observations", "next_observations", "actions", "rewards", "dones"):
        np.testing.assert_array_equal(getattr(loaded, name)[: loaded.pos], getattr(original, name)[: original.pos])
    assert (loaded.pos, loaded.full) == (original.pos, original.full)


def test_replay_buffer_kept_in_time_order_when_it_wrapped(tmp_path):
    model = small_dqn(FAST, transitions=96)  # 8 games, buffer of 512 -> 64 rows
    buffer = model.replay_buffer
    buffer.full, buffer.pos = True, 5
    buffer.rewards[:, 0] = np.arange(64)
    save_replay_buffer(buffer, tmp_path / "r.npz")
    fresh = small_dqn(FAST, transitions=0)
    load_replay_buffer(fresh, tmp_path / "r.npz")
    assert fresh.replay_buffer.full and fresh.replay_buffer.pos == 0
    np.testing.assert_array_equal(fresh.replay_buffer.rewards[:, 0], np.r_[np.arange(5, 64), np.arange(5)])


def test_replay_buffer_with_other_games_is_repacked_for_one_step_and_refused_for_n_step(tmp_path):
    one_step = small_dqn(FAST, transitions=128)
    save_replay_buffer(one_step.replay_buffer, tmp_path / "one.npz")
    other = load_model(
        _save(one_step, tmp_path / "m.zip"), FAST, env=BatchedSnakeVecEnv(4, board_size=5), for_training=True
    )
    assert load_replay_buffer(other, tmp_path / "one.npz") == 128
    n_step = small_dqn(FAST, transitions=128, n_steps=3)
    save_replay_buffer(n_step.replay_buffer, tmp_path / "n.npz")
    other = load_model(
        _save(n_step, tmp_path / "n.zip"), FAST, env=BatchedSnakeVecEnv(4, board_size=5), for_training=True
    )
    with pytest.raises(ValueError, match="holds n-step transitions of 8 games: .*; pass n_envs=8"):
        load_replay_buffer(other, tmp_path / "n.npz")


@pytest.mark.parametrize(
    ("recorded", "loading", "message"),
    [
        ({"egocentric": True}, {}, "recorded on the egocentric view with 3 actions; the model plays the board-wide"),
        ({}, {"egocentric": True}, "recorded on the board-wide view with 4 actions; the model plays the egocentric"),
        ({"board_size": 6}, {}, "recorded on 6x6 boards of 5 channels; the model plays 5x5 boards of 5"),
        ({"countdown": True}, {}, "recorded on 5x5 boards of 6 channels; the model plays 5x5 boards of 5"),
    ],
)
def test_a_replay_buffer_recorded_otherwise_than_the_model_plays_is_refused(tmp_path, recorded, loading, message):
    """A board-wide model took an egocentric buffer (its turns 0-2 are directions too) and trained
    on turned boards; the file now says what it was recorded with."""
    save_replay_buffer(small_dqn(FAST, transitions=64, **recorded).replay_buffer, tmp_path / "r.replay.npz")
    model = small_dqn(FAST, transitions=0, **loading)
    with pytest.raises(UsageError, match=message) as error:
        load_replay_buffer(model, tmp_path / "r.replay.npz")
    assert "move it away to resume without it" in str(error.value) and model.replay_buffer.size() == 0


def test_a_replay_buffer_saved_before_it_recorded_its_view_is_taken_as_board_wide(tmp_path):
    """Every release before these records played the whole board only: such a file loads into a
    board-wide model, checked as before, and an egocentric model refuses it."""
    path = tmp_path / "old.replay.npz"
    save_replay_buffer(small_dqn(FAST, transitions=64).replay_buffer, path)
    with np.load(path) as stored:
        np.savez(path, **{name: stored[name] for name in stored.files if name not in RECORDED})
    assert load_replay_buffer(small_dqn(FAST, transitions=0), path) == 64
    with pytest.raises(UsageError, match="does not say which view it was recorded on"):
        load_replay_buffer(small_dqn(FAST, transitions=0, egocentric=True), path)


def _save(model, path):
    save_model(model, path)
    return path


def test_a_truncated_replay_buffer_is_one_line(saved):
    model, path = saved
    buffer = replay_buffer_path(path)
    buffer.write_bytes(buffer.read_bytes()[:3000])
    resumed = load_model(path, FAST, env=BatchedSnakeVecEnv(8, board_size=5), for_training=True, device="cpu")
    with pytest.raises(ValueError, match=r"replay buffer .*model.replay.npz cannot be read"):
        load_replay_buffer(resumed, buffer)


def test_save_is_atomic_and_leaves_nothing_behind_when_interrupted(saved, monkeypatch):
    model, path = saved
    before = path.read_bytes()

    def interrupted(self, target, **kwargs):
        target.write_bytes(b"half a zip")
        raise KeyboardInterrupt

    monkeypatch.setattr(SnakeDQN, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_model(model, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.replay.npz", "model.zip"]


def test_loaded_weights_are_on_the_cpu_without_unpickling(saved):
    _, path = saved
    model = load_model(path, FAST, device="cpu")
    assert all(parameter.device == torch.device("cpu") for parameter in model.q_net.parameters())


def test_a_replay_buffer_saved_with_shaped_rewards_is_loaded_with_the_env_rewards(tmp_path):
    """Buffers saved while shaping was added to the stored rewards carry no ``env_rewards`` flag:
    a model that shapes takes its term off again, as the TD targets add it (sb3_snake.dqn.targets);
    a buffer saved now holds the env's rewards and says so."""
    model = small_dqn(FAST, transitions=128, food_shaping=0.5)
    buffer = model.replay_buffer
    save_replay_buffer(buffer, tmp_path / "new.replay.npz")
    with np.load(tmp_path / "new.replay.npz") as stored:
        arrays = {name: stored[name] for name in stored.files}
    assert arrays.pop("env_rewards")
    observations, next_observations = (
        torch.as_tensor(arrays[name]).flatten(0, 1) for name in ("observations", "next_observations")
    )
    terminated = torch.as_tensor(arrays["dones"] * (1 - arrays["timeouts"])).flatten() > 0
    shaping = shaping_rewards(0.5, model.gamma, observations, next_observations, terminated).numpy()
    assert (shaping != 0).any()
    np.savez(tmp_path / "old.replay.npz", **{**arrays, "rewards": arrays["rewards"] + shaping.reshape(-1, 8)})
    for name in ("old", "new"):
        fresh = small_dqn(FAST, transitions=0, food_shaping=0.5)
        assert load_replay_buffer(fresh, tmp_path / f"{name}.replay.npz") == 128
        np.testing.assert_allclose(fresh.replay_buffer.rewards[:16], buffer.rewards[:16], atol=1e-6, err_msg=name)
    unshaped = small_dqn(FAST, transitions=0)  # a model without shaping stored its rewards as they were
    load_replay_buffer(unshaped, tmp_path / "old.replay.npz")
    np.testing.assert_array_equal(unshaped.replay_buffer.rewards[:16], arrays["rewards"] + shaping.reshape(-1, 8))


# --- hardening: the description is input, and so are its sizes -------------------------------------


def _edit(section, change):
    def edit(metadata):
        values = dict(metadata[section])
        for key, value in change.items():
            if value is _DELETE:
                values.pop(key)
            else:
                values[key] = value
        return {**metadata, section: values}

    return edit


_DELETE = object()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_edit("hyperparameters", {"train_freq": _DELETE}), r"hyperparameters lacks \['train_freq'\]"),
        (_edit("policy_kwargs", {"bogus": 1}), r"policy_kwargs has unknown keys \['bogus'\]"),
        (_edit("policy_kwargs", {"features_extractor_kwargs": {"embed_dim": -2}}), "embed_dim -2 must be an integer"),
        (lambda m: {**m, "policy": "CnnPolicy"}, "malformed sb3_snake.json"),
        (_edit("policy_kwargs", {"optimizer_kwargs": {"bogus": 1}}), r"optimizer_kwargs has unknown keys \['bogus'\]"),
        (_edit("hyperparameters", {"learning_rate": "abc"}), "learning_rate 'abc' must be a number"),
        (_edit("counters", {"predict": 1}), r"counters has unknown keys \['predict'\]"),
        (_edit("counters", {"__class__": 1}), r"counters has unknown keys \['__class__'\]"),
        (_edit("hyperparameters", {"train_freq": 0}), "train_freq 0 must be an integer from 1"),
        (_edit("hyperparameters", {"batch_size": _DELETE}), r"hyperparameters lacks \['batch_size'\]"),
        (_edit("policy_kwargs", {"features_extractor_kwargs": {"embed_dim": 10**12}}), "embed_dim"),
        (_edit("policy_kwargs", {"net_arch": [10**7, 10**7]}), "net_arch"),
        (lambda m: {**m, "n_envs": 10**9}, "n_envs is not an integer from 1 to"),
        (lambda m: {**m, "n_actions": 5}, r"n_actions is 5, not 4 \(directions\) or 3 \(egocentric turns\)"),
        (lambda m: {**m, "n_actions": 3}, "egocentric|malformed|cannot be loaded"),  # the network has 4 outputs
    ],
)
@pytest.mark.parametrize("for_training", [False, True], ids=["eval-play", "resume"])
def test_an_edited_description_is_one_line_naming_the_file(saved, tmp_path, edit, message, for_training):
    _, path = saved
    target = rewrite_metadata(path, tmp_path / "bad.zip", edit)
    env = BatchedSnakeVecEnv(8, board_size=5) if for_training else None
    with pytest.raises(ValueError, match=message) as error:
        load_model(target, FAST, env=env, for_training=for_training, device="cpu")
    assert str(target) in str(error.value) and "\n" not in str(error.value)


def test_a_network_too_large_for_memory_is_refused_before_it_is_built(saved, tmp_path, monkeypatch):
    from sb3_snake.common import system

    _, path = saved
    monkeypatch.setattr(system, "available_memory_bytes", lambda: 2**20)
    target = rewrite_metadata(path, tmp_path / "big.zip", _edit("policy_kwargs", {"net_arch": [4096, 4096]}))
    with pytest.raises(ValueError, match=r"its network needs about .* GiB and 0.0 GiB are available"):
        load_model(target, FAST)


def test_a_zip_bomb_is_refused_before_its_entry_is_read(saved, tmp_path, monkeypatch):
    _, path = saved
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path) as original, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as crafted:
        for name in original.namelist():
            if name != METADATA_ENTRY:
                crafted.writestr(name, original.read(name))
        crafted.writestr(METADATA_ENTRY, b" " * (3 << 20))  # 3 MiB of blanks: a few kilobytes packed
    with zipfile.ZipFile(bomb) as archive:
        assert archive.getinfo(METADATA_ENTRY).compress_size < 20_000  # small on disk, 3 MiB unpacked
    read = []
    monkeypatch.setattr(zipfile.ZipFile, "read", lambda self, name, pwd=None: read.append(name) or b"")
    with pytest.raises(ValueError, match=rf"model file {bomb}: entry {METADATA_ENTRY} would unpack to 3,145,728 bytes"):
        load_model(bomb, FAST)
    assert not read


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda a: {**a, "actions": np.full_like(a["actions"], 99)}, "has actions from 99 to 99, not 0 to 3"),
        (lambda a: {**a, "n_envs": np.array([8, 8])}, "has n_envs .* not one positive integer"),
        (lambda a: {**a, "rewards": a["rewards"][:, :4]}, r"has rewards of shape \(16, 4\)"),
        (lambda a: {**a, "rewards": np.full_like(a["rewards"], np.nan)}, "has rewards that are not finite"),
        (lambda a: {**a, "n_actions": np.array([4, 4])}, r"has n_actions \[4, 4\], not one integer"),
        (lambda a: {**a, "board_size": np.float64(5)}, "has board_size 5.0, not one integer"),
    ],
)
def test_a_crafted_replay_buffer_is_one_line_naming_the_file(saved, tmp_path, edit, message):
    _, path = saved
    buffer = replay_buffer_path(path)
    with np.load(buffer) as stored:
        arrays = edit({name: stored[name] for name in stored.files})
    np.savez(buffer, **arrays)
    resumed = load_model(path, FAST, env=BatchedSnakeVecEnv(8, board_size=5), for_training=True, device="cpu")
    with pytest.raises(ValueError, match=message) as error:
        load_replay_buffer(resumed, buffer)
    assert str(buffer) in str(error.value) and "move it away" in str(error.value)
