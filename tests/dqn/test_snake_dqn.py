"""SnakeDQN and its eager update: faithful to SB3's, Double DQN targets, the dueling head, n-step
returns, the early phase, the learning-rate half-life, and new hyperparameters on a built model."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from stable_baselines3 import DQN

from sb3_snake import SnakeDQN
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import TrainingDiverged, UsageError
from sb3_snake.common.schedules import half_life_factor
from tests.conftest import fixed_batch, small_dqn

PLAIN = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=1)


def filled_model(**kwargs):
    return small_dqn(PLAIN, board_size=5, transitions=128, **kwargs)


@pytest.mark.parametrize("n_steps", [1, 3])
def test_update_matches_sb3_dqn_train(monkeypatch, n_steps):
    """Parameter for parameter, with 1-step and n-step returns (SB3 discounts those by gamma**n)."""
    ours = filled_model(n_steps=n_steps)
    theirs = copy.deepcopy(ours)
    batch = fixed_batch(ours, monkeypatch)
    assert (batch.discounts is not None) == (n_steps > 1)
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


def test_a_nan_loss_raises_training_diverged():
    model = filled_model()
    with torch.no_grad():
        next(model.q_net.parameters()).fill_(float("nan"))
    with pytest.raises(TrainingDiverged, match="the TD loss became nan by update 1"):
        model.train(gradient_steps=1, batch_size=32)


def test_without_settings_the_unmeasured_defaults_are_used_not_dotenv(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("USE_BF16=maybe\n")  # malformed: would fail if it were read
    with caplog.at_level("WARNING"):
        model = small_dqn(None)
    assert model.optimizations == OptimizationSettings.unmeasured()
    assert model.optimizations.auto_fields == () and not caplog.text  # nothing left to measure or warn about
    assert not model.active_optimizations.compile.requested
    model.save(tmp_path / "m.zip")
    assert SnakeDQN.load(tmp_path / "m.zip").optimizations == OptimizationSettings.unmeasured()


def test_early_phase_trains_its_fraction_of_the_gradient_steps():
    """1.5 of every 3 scheduled steps, the remainder carried over, then all 3 from early_steps on."""
    model = filled_model(early_steps=1_000, early_update_fraction=0.5)
    model.num_timesteps = 999
    counts = []
    for _ in range(4):
        model.train(gradient_steps=3, batch_size=32)
        counts.append(model._n_updates)
    assert counts == [1, 3, 4, 6]
    model.num_timesteps = 1_000
    model.train(gradient_steps=3, batch_size=32)
    assert model._n_updates == 9


@pytest.mark.parametrize(
    ("env_steps", "half_life", "factor"),
    [
        (5_000, 0, 1.0),
        (-10, 800, 1.0),
        (99, 800, 1.0),
        (100, 800, 0.5**0.125),
        (300, 800, 0.5**0.375),
        (800, 800, 0.5),
        (2_400, 800, 0.125),
    ],
)
def test_half_life_factor_halves_in_eighths(env_steps, half_life, factor):
    assert half_life_factor(env_steps, half_life) == pytest.approx(factor)


def test_learning_rate_halves_per_half_life_after_the_early_phase():
    """The optimizer trains at SB3's rate until early_steps, then at half of it one half-life later."""
    model = filled_model(learning_rate=1e-3, early_steps=1_000, learning_rate_half_life=800)
    rates = []
    for env_steps in (999, 1_000, 1_400, 1_800):
        model.num_timesteps = env_steps
        model.train(gradient_steps=1, batch_size=32)
        rates.append(model.policy.optimizer.param_groups[0]["lr"])
        assert model.logger.name_to_value["train/learning_rate"] == pytest.approx(rates[-1])
    assert rates == pytest.approx([1e-3, 1e-3, 1e-3 * 0.5**0.5, 5e-4])
    assert model.hyperparameters()["learning_rate"] == 1e-3  # the rate asked for, not the decayed one


def test_set_hyperparameters_rebuilds_what_depends_on_them():
    model = filled_model(n_steps=3)
    model.set_hyperparameters(learning_rate=0.01, gamma=0.5, buffer_size=256, symmetry_augmentation=True, train_freq=3)
    assert model.lr_schedule(1.0) == 0.01 and model.replay_buffer.gamma == 0.5
    assert model.replay_buffer.buffer_size == 256 // 8 and model.replay_buffer.size() == 0
    assert model._augmentation is not None and model.train_freq.frequency == 3
    with pytest.raises(UsageError, match="cannot set n_steps on a built model: it fixes the replay buffer's kind"):
        model.set_hyperparameters(n_steps=1)
    with pytest.raises(UsageError, match="cannot set gama on a built model; did you mean gamma"):
        model.set_hyperparameters(gama=0.5)


def test_a_long_update_asks_between_chunks_whether_to_go_on():
    """A stop or a time limit ends an update of many gradient steps within a chunk, not at its end."""
    from sb3_snake.dqn.snake_dqn import UPDATE_CHUNK

    model = filled_model()
    asked = []
    model.update_interrupt = lambda: asked.append(model._n_updates) or len(asked) >= 2
    model.train(gradient_steps=10 * UPDATE_CHUNK, batch_size=8)
    assert model._n_updates == 2 * UPDATE_CHUNK and len(asked) == 2
    model.update_interrupt = None
    model.train(gradient_steps=3, batch_size=8)  # a usual update never asks, and runs whole
    assert model._n_updates == 2 * UPDATE_CHUNK + 3


@pytest.mark.parametrize("egocentric", [False, True], ids=["absolute", "egocentric"])
def test_safe_exploration_never_picks_a_fatal_move_while_a_safe_one_exists(egocentric):
    """Both ways a model acts: the tensor loop (batched env) and SB3's ``predict`` (any VecEnv of
    SnakeEnvs), and ``predict`` on mirror images of the boards, every move a random one."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    from sb3_snake import SnakeEnv
    from sb3_snake.envs.rules import mirror_action, mirror_observation

    model = filled_model(egocentric=egocentric, safe_exploration=True)
    model.exploration_rate = 1.0
    batched = model.get_env()
    singles = DummyVecEnv([lambda: SnakeEnv(5, egocentric=egocentric)] * 8)
    singles.seed(3)
    observations = (batched.reset(), singles.reset())
    fatal_when_safe = 0
    for _ in range(150):
        for k, env in enumerate((batched, singles)):
            masks = np.stack(env.env_method("action_masks"))
            if k == 0:
                actions = model._act_on_tensors(torch.as_tensor(observations[k]), 0, env.num_envs).numpy()
            else:
                actions, _ = model.predict(observations[k], deterministic=False)
            if egocentric and k == 1:  # the mirror image's move, mirrored back, is safe too
                mirrored, _ = model.predict(mirror_observation(observations[k]), deterministic=False)
                fatal_when_safe += int((masks.any(1) & ~masks[np.arange(8), mirror_action(mirrored)]).sum())
            fatal_when_safe += int((masks.any(1) & ~masks[np.arange(8), actions]).sum())
            observations = (*observations[:k], env.step(actions)[0], *observations[k + 1 :])
    assert fatal_when_safe == 0


def test_safe_exploration_is_refused_in_one_line_where_it_cannot_read_boards():
    import gymnasium as gym

    with pytest.raises(UsageError, match="safe_exploration reads the moves that do not die from Snake boards"):
        SnakeDQN("MlpPolicy", gym.make("CartPole-v1"), safe_exploration=True)
