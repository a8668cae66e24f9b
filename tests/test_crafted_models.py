"""Crafted and unusual model files against the safe loader (``sb3_snake.persistence.model_file``):
extra or swollen weights entries refused before they are read, every network sized as the network
it is, weights that are not finite refused, and every network either learner trains saving and
loading with each of its options."""

import tracemalloc
import zipfile

import gymnasium as gym
import pytest
import torch

from sb3_snake import BatchedSnakeVecEnv, SnakeDQN
from sb3_snake.common.errors import UsageError
from sb3_snake.dqn.policies import POLICY_ALIASES
from sb3_snake.envs.rules import board_space
from sb3_snake.persistence import load_model, save_model
from sb3_snake.pqn import PQN
from sb3_snake.pqn.policies import PQN_POLICY_ALIASES
from sb3_snake.q_learning.save_format import NETWORKS, encode_policy_kwargs, trained_parameters
from tests.conftest import FAST, rewrite_metadata


def tiny_pqn(policy="MlpPolicy", policy_kwargs=None, board_size=5):
    env = BatchedSnakeVecEnv(4, board_size=board_size, seed=0, egocentric=True)
    model = PQN(policy, env, n_steps=4, n_minibatches=2, seed=0, device="cpu", policy_kwargs=policy_kwargs)
    return model.learn(32)


def copy_with(path, target, extra=None, replace=None):
    """``path``'s zip at ``target`` with ``extra`` entries added and ``replace``'s swapped in."""
    with zipfile.ZipFile(path) as original, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as crafted:
        for name in original.namelist():
            crafted.writestr(name, (replace or {}).get(name, original.read(name)))
        for name, data in (extra or {}).items():
            crafted.writestr(name, data)
    return target


def test_extra_weights_entries_are_refused_before_anything_is_read(tmp_path):
    path = tmp_path / "model.zip"
    save_model(tiny_pqn(), path)
    zeros = b"\0" * (64 << 20)  # 64 MiB each unpacked, a few hundred kilobytes packed
    crafted = copy_with(path, tmp_path / "crafted.zip", {f"extra{k}.pth": zeros for k in range(6)})
    tracemalloc.start()
    with pytest.raises(UsageError, match=r"holds entries \['extra0.pth', .*\] that no PQN writes"):
        load_model(crafted)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 32 << 20  # not one of them was read


def test_a_weights_entry_larger_than_the_model_could_hold_is_refused_unread(tmp_path):
    path = tmp_path / "model.zip"
    save_model(tiny_pqn(), path)
    crafted = copy_with(path, tmp_path / "crafted.zip", replace={"policy.pth": b"\0" * (256 << 20)})
    tracemalloc.start()
    with pytest.raises(UsageError, match=r"entry policy.pth would unpack to 268,435,456 bytes, more than the"):
        load_model(crafted)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 32 << 20


#: The networks a Snake board builds (SB3's NatureCNN takes images only: SnakeDQN's CnnPolicy never builds here).
BUILT_NETWORKS = sorted(set(NETWORKS) - {("SnakeDQN", "CnnPolicy")})


@pytest.mark.parametrize(("algorithm", "policy"), BUILT_NETWORKS)
@pytest.mark.parametrize("policy_kwargs", [{}, {"net_arch": [32, 16]}], ids=["defaults", "net_arch"])
def test_every_network_is_sized_as_the_network_it_is(algorithm, policy, policy_kwargs):
    space = board_space(6)
    aliases = POLICY_ALIASES if algorithm == "SnakeDQN" else PQN_POLICY_ALIASES
    policy_object = aliases[policy](space, gym.spaces.Discrete(3), lambda _: 1e-3, **policy_kwargs)
    described = {
        "version": 2,
        "algorithm": algorithm,
        "policy": policy,
        "observation_shape": list(space.shape),
        "policy_kwargs": encode_policy_kwargs(policy_kwargs),
        "n_actions": 3,
    }
    assert trained_parameters(described) == sum(p.numel() for p in policy_object.q_net.parameters())


def test_a_pqn_mlp_too_large_for_memory_is_refused_in_one_line_before_it_is_built(tmp_path, monkeypatch):
    from sb3_snake.common import system

    path = tmp_path / "model.zip"
    save_model(tiny_pqn(), path)
    monkeypatch.setattr(system, "available_memory_bytes", lambda: 8 << 30)

    def wide_and_large(described):
        return {**described, "observation_shape": [5, 256, 256], "policy_kwargs": {"net_arch": [12288]}}

    target = rewrite_metadata(path, tmp_path / "wide.zip", wide_and_large)
    with pytest.raises(UsageError, match=r"its network needs about 75.0 GiB and 8.0 GiB are available") as error:
        load_model(target)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("learner", ["pqn", "dqn"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("trusted", [False, True], ids=["safe", "trusted"])
def test_weights_that_are_not_finite_are_refused_in_one_line(learner, value, trusted, tmp_path):
    if learner == "pqn":
        model = tiny_pqn()
    else:
        env = BatchedSnakeVecEnv(4, board_size=5, seed=0)
        model = SnakeDQN("MlpPolicy", env, learning_starts=0, buffer_size=64, batch_size=8, device="cpu")
    with torch.no_grad():
        next(model.q_net.parameters()).view(-1)[0] = value
    save_model(model, tmp_path / "model.zip")
    with pytest.raises(UsageError, match=r"holds weights that are not finite \(NaN or infinite\) in ") as error:
        load_model(tmp_path / "model.zip", trusted=trusted)
    assert "\n" not in str(error.value)


#: Every network PQN trains, with each keyword argument its extractor takes.
PQN_NETWORKS = [
    ("MlpPolicy", {}),
    ("MlpPolicy", {"net_arch": [16, 8], "layer_norm": False}),
    ("CnnPolicy", {}),
    ("CnnPolicy", {"features_extractor_kwargs": {"channels": [4, 8], "features_dim": 16}}),
    ("AttentionPolicy", {}),
    (
        "AttentionPolicy",
        {
            "features_extractor_kwargs": {
                "features_dim": 16,
                "embed_dim": 8,
                "num_heads": 1,
                "num_layers": 2,
                "patch_size": 2,
            }
        },
    ),
]


@pytest.mark.parametrize(("policy", "policy_kwargs"), PQN_NETWORKS, ids=lambda value: str(value)[:40])
def test_every_network_pqn_trains_saves_and_loads(policy, policy_kwargs, tmp_path):
    model = tiny_pqn(policy, policy_kwargs, board_size=6)
    save_model(model, tmp_path / "model.zip")
    loaded = load_model(tmp_path / "model.zip")
    assert type(loaded.policy) is type(model.policy)
    for (name, a), b in zip(model.policy.state_dict().items(), loaded.policy.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, msg=name)
    board = BatchedSnakeVecEnv(2, board_size=6, seed=1, egocentric=True).reset()
    assert (loaded.predict(board, deterministic=True)[0] == model.predict(board, deterministic=True)[0]).all()


def test_a_pqn_cnn_file_written_before_the_fix_loads_and_plays():
    from pathlib import Path

    model = load_model(Path(__file__).parent / "data" / "pqn_cnn_ce7c078.zip", FAST)
    assert model.policy_kwargs["features_extractor_kwargs"]["channels"] == [4, 8]
