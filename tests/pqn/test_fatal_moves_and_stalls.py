"""PQN's ``fatal_move_targets`` (the moves that die at once fitted to their known value) and
``stall_as_death`` (a stall learned as a lost game): the targets' arithmetic, under every
symmetry, what the rollout keeps, what is saved, and where they are refused."""

import gymnasium as gym
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecNormalize

from sb3_snake import BatchedSnakeVecEnv, TrainConfig
from sb3_snake.common.errors import UsageError
from sb3_snake.envs.action_masks import action_masks
from sb3_snake.envs.rules import DEATH_REWARD
from sb3_snake.persistence import load_model, save_model
from sb3_snake.pqn import PQN
from sb3_snake.q_learning.targets import fatal_move_values, food_potential, shaping_rewards


def pqn(egocentric=True, n_envs=32, seed=0, env_kwargs=None, **kwargs):
    game = {"board_size": 6, "egocentric": egocentric, "long_starts": 0.5, **(env_kwargs or {})}
    env = BatchedSnakeVecEnv(n_envs, seed=seed, **game)
    defaults = {"n_steps": 16, "food_shaping": 1.0, "safe_exploration": True, "fatal_move_targets": True}
    return PQN("MlpPolicy", env, seed=seed, device="cpu", **{**defaults, **kwargs})


def rollout_of(model, callback=None):
    model._setup_learn(10_000, None)
    return model.collect_rollout(model._init_callback(callback))


def loss_of(model, rollout):
    """The loss of one gradient step over the whole rollout, at a learning rate of 0 (the
    network does not move, so the loss is that of the network as built)."""
    model._setup_learn(10_000, None)  # the logger the loss is recorded in
    model.train(rollout)
    return model.logger.name_to_value["train/loss"]


def test_a_fatal_moves_value_is_the_death_and_the_shaping_potential_lost():
    boards = torch.as_tensor(BatchedSnakeVecEnv(64, seed=3, board_size=7, long_starts=0.5).reset())
    dead = torch.ones(len(boards), dtype=torch.bool)
    for scale in (0.0, 1.0, 2.5):
        expected = DEATH_REWARD + shaping_rewards(scale, 0.99, boards, boards, dead)
        torch.testing.assert_close(fatal_move_values(scale, boards), expected)
    torch.testing.assert_close(fatal_move_values(1.0, boards), -1.0 - food_potential(boards))


@pytest.mark.parametrize("safe_exploration", [True, False])
@pytest.mark.parametrize("egocentric", [True, False])
def test_the_rollout_keeps_each_boards_fatal_moves_and_their_value(egocentric, safe_exploration):
    """Safe exploration or not; with it, no fatal move is played while a safe one exists."""
    model = pqn(egocentric, exploration_initial_eps=1.0, safe_exploration=safe_exploration)
    rollout = rollout_of(model)
    safe = action_masks(rollout.observations, egocentric)
    assert torch.equal(rollout.fatal_moves, ~safe) and rollout.fatal_moves.any()
    torch.testing.assert_close(rollout.fatal_values, fatal_move_values(1.0, rollout.observations))
    played_fatal = rollout.fatal_moves.gather(1, rollout.actions[:, None]).squeeze(1) & safe.any(dim=1)
    assert played_fatal.any() != safe_exploration
    assert rollout_of(pqn(egocentric, fatal_move_targets=False)).fatal_moves is None


def test_train_s_options_reach_pqn():
    for value in (True, False):
        config = TrainConfig(algo="pqn", fatal_move_targets=value, stall_as_death=not value)
        assert (config.pqn_kwargs()["fatal_move_targets"], config.pqn_kwargs()["stall_as_death"]) == (value, not value)


def test_the_loss_adds_half_the_squared_error_of_every_fatal_move_to_the_td_error():
    model = pqn(learning_rate=0.0, n_epochs=1, n_minibatches=1)
    rollout = rollout_of(model)
    with torch.no_grad():
        q_values = model.q_net(rollout.observations)
    chosen = q_values.gather(1, rollout.actions[:, None]).squeeze(1)
    td = 0.5 * (chosen - rollout.returns).square().mean()
    fatal = 0.5 * ((q_values - rollout.fatal_values[:, None]).square() * rollout.fatal_moves).sum(dim=1).mean()
    assert loss_of(model, rollout) == pytest.approx((td + fatal).item(), rel=1e-5)
    plain = pqn(learning_rate=0.0, n_epochs=1, n_minibatches=1, fatal_move_targets=False)
    plain.q_net.load_state_dict(model.q_net.state_dict())
    assert loss_of(plain, rollout._replace(fatal_moves=None, fatal_values=None)) == pytest.approx(td.item(), rel=1e-5)


@pytest.mark.parametrize("egocentric", [True, False])
def test_under_a_symmetry_the_fatal_moves_are_those_of_the_turned_board(egocentric, monkeypatch):
    """Training on a rollout under a symmetry is training, unaugmented, on the turned boards
    with their own fatal moves (the masks are kept in the rollout's action order); each of the
    board's symmetries in turn (egocentric: itself and its mirror image; else eight)."""
    augmented = pqn(egocentric, learning_rate=0.0, n_epochs=1, n_minibatches=1, symmetry_augmentation=True)
    plain = pqn(egocentric, learning_rate=0.0, n_epochs=1, n_minibatches=1)
    plain.q_net.load_state_dict(augmented.q_net.state_dict())
    rollout = rollout_of(augmented)
    augmentation = augmented._augmentation
    for symmetry in augmentation.symmetries.tolist():
        symmetries = torch.full((len(rollout.actions),), symmetry)
        monkeypatch.setattr(augmentation, "draw", lambda count, symmetries=symmetries: symmetries[:count])
        boards = augmentation.transform(rollout.observations, symmetries)
        turned = rollout._replace(
            observations=boards,
            actions=augmentation.actions[symmetries, rollout.actions],
            fatal_moves=~action_masks(boards, egocentric),
            fatal_values=fatal_move_values(1.0, boards),
        )
        assert symmetry == 0 or not torch.equal(turned.fatal_moves, rollout.fatal_moves)  # the moves do turn
        assert loss_of(augmented, rollout) == pytest.approx(loss_of(plain, turned), rel=1e-5)


class Stalls(BaseCallback):
    """Records where each rollout step's games were truncated (the rollout's flat indices)."""

    def __init__(self):
        super().__init__()
        self.truncated = []

    def _on_step(self):
        self.truncated.append(self.locals["truncated"].clone())
        return True


def test_a_stall_is_learned_as_a_death_and_the_games_stay_the_rules():
    """Stalls of 6 moves: with ``stall_as_death`` a stall's target is a death's (its reward, the
    potential lost, no bootstrap); the games played, their rewards and scores are the same."""
    runs = []
    for stall_as_death in (True, False):
        model = pqn(seed=4, env_kwargs={"max_steps_without_food": 6}, stall_as_death=stall_as_death)
        model.exploration_initial_eps = model.exploration_final_eps = 0.0  # greedy: it circles and stalls
        stalls = Stalls()
        runs.append((model, rollout_of(model, stalls), torch.cat(stalls.truncated)))
    (_, as_death, stalled), (_, plain, stalled_plain) = runs
    assert torch.equal(stalled, stalled_plain) and stalled.sum() >= 5
    assert torch.equal(as_death.actions, plain.actions) and torch.equal(as_death.observations, plain.observations)
    scores = [[info["r"] for info in model.ep_info_buffer] for model, *_ in runs]
    assert scores[0] == scores[1] and scores[0]
    expected = DEATH_REWARD - food_potential(as_death.observations[stalled])
    torch.testing.assert_close(as_death.returns[stalled], expected)
    assert not torch.allclose(plain.returns[stalled], expected)


@pytest.mark.parametrize("name", ["fatal_move_targets", "stall_as_death", "safe_exploration", "food_shaping"])
def test_the_options_that_read_snake_s_rules_are_refused_in_one_line_where_they_cannot_apply(name):
    with pytest.raises(UsageError, match=f"^{name} reads Snake boards.*turn {name} off$"):
        PQN("MlpPolicy", gym.make("CartPole-v1"), device="cpu", **{name: True})
    env = VecNormalize(BatchedSnakeVecEnv(4, board_size=6))
    with pytest.raises(UsageError, match=f"^{name} needs the env's own observations and rewards; remove VecNormalize$"):
        PQN("MlpPolicy", env, device="cpu", **{name: True})


def test_the_options_are_saved_with_the_model_and_older_files_load_without_them(tmp_path):
    from tests.conftest import rewrite_metadata

    save_model(pqn(stall_as_death=True), tmp_path / "pqn.zip")
    loaded = load_model(tmp_path / "pqn.zip")
    assert (loaded.fatal_move_targets, loaded.stall_as_death) == (True, True)
    assert PQN.load(tmp_path / "pqn.zip", device="cpu").stall_as_death is True

    def older(described):
        for name in ("fatal_move_targets", "stall_as_death"):
            del described["hyperparameters"][name]
        return described

    rewrite_metadata(tmp_path / "pqn.zip", tmp_path / "older.zip", older)
    loaded = load_model(tmp_path / "older.zip")
    assert (loaded.fatal_move_targets, loaded.stall_as_death) == (False, False)
