"""SnakeDQN's own update: faithful to SB3's, Double DQN targets, the dueling head, n-step returns."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from stable_baselines3 import DQN

from sb3_snake import SnakeDQN
from sb3_snake.settings import OptimizationSettings
from tests.conftest import small_dqn

PLAIN = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=1)


def filled_model(**kwargs):
    return small_dqn(PLAIN, board_size=5, transitions=128, **kwargs)


def fixed_batch(model, monkeypatch):
    batch = model.replay_buffer.sample(32)
    monkeypatch.setattr(model.replay_buffer, "sample", lambda *args, **kwargs: batch)
    return batch


def test_update_matches_sb3_dqn_train(monkeypatch):
    ours = filled_model()
    theirs = copy.deepcopy(ours)
    fixed_batch(ours, monkeypatch)
    monkeypatch.setattr(theirs.replay_buffer, "sample", ours.replay_buffer.sample)
    ours.train(gradient_steps=3, batch_size=32)
    DQN.train(theirs, gradient_steps=3, batch_size=32)
    for mine, reference in zip(ours.q_net.parameters(), theirs.q_net.parameters(), strict=True):
        torch.testing.assert_close(mine, reference)
    assert ours.logger.name_to_value["train/loss"] == pytest.approx(theirs.logger.name_to_value["train/loss"])


def test_double_dqn_target(monkeypatch):
    model = filled_model(double_dqn=True)
    batch = fixed_batch(model, monkeypatch)
    with torch.no_grad():
        best = model.q_net(batch.next_observations).argmax(dim=1, keepdim=True)
        next_q = model.q_net_target(batch.next_observations).gather(1, best)
        target = batch.rewards + (1 - batch.dones) * model.gamma * next_q
        current = model.q_net(batch.observations).gather(1, batch.actions.long())
        expected = F.smooth_l1_loss(current, target).item()
    model.train(gradient_steps=1, batch_size=32)
    assert model.logger.name_to_value["train/loss"] == pytest.approx(expected, rel=1e-5)


def test_dueling_head_saves_and_loads(tmp_path):
    model = filled_model(policy_kwargs={"dueling": True})
    assert model.q_net.dueling and hasattr(model.q_net, "value_net")
    model.train(gradient_steps=2, batch_size=32)
    model.save(tmp_path / "m.zip")
    loaded = SnakeDQN.load(tmp_path / "m.zip", optimizations=PLAIN)
    assert loaded.q_net.dueling
    obs = np.stack([model.observation_space.sample() for _ in range(16)])
    torch.testing.assert_close(model.q_net(torch.as_tensor(obs)), loaded.q_net(torch.as_tensor(obs)))


def test_dueling_q_values_are_value_plus_centred_advantage():
    model = filled_model(policy_kwargs={"dueling": True})
    obs = torch.as_tensor(np.stack([model.observation_space.sample() for _ in range(4)]))
    features = model.q_net.extract_features(obs, model.q_net.features_extractor)
    advantage, value = model.q_net.q_net(features), model.q_net.value_net(features)
    torch.testing.assert_close(model.q_net(obs), value + advantage - advantage.mean(dim=1, keepdim=True))


def test_n_step_returns_use_sb3_buffer():
    model = filled_model(n_steps=3)
    assert type(model.replay_buffer).__name__ == "NStepReplayBuffer"
    assert model.replay_buffer.sample(8).discounts is not None
    model.train(gradient_steps=1, batch_size=32)
