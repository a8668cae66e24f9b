"""PQN: SB3's interface (learn, callbacks, predict, save and load), both step paths alike, its
exploration, its averaged network, its checks, and that it learns."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnvWrapper
from torch import nn

from sb3_snake import BatchedSnakeVecEnv
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import UsageError
from sb3_snake.common.schedules import averaging_rate
from sb3_snake.envs.action_masks import action_masks
from sb3_snake.persistence import load_model, save_model
from sb3_snake.pqn import PQN
from sb3_snake.training.evaluation import evaluate

GAME = {"board_size": 6, "stall_growth": 4, "egocentric": True}
#: The options that read Snake's boards and rules in the targets.
SNAKE_TARGETS = dict.fromkeys(("safe_exploration", "fatal_move_targets", "stall_as_death"), True)


def snake_pqn(n_envs=16, seed=0, env=None, **kwargs):
    env = env if env is not None else BatchedSnakeVecEnv(n_envs, seed=seed, **GAME)
    return PQN("MlpPolicy", env, seed=seed, device="cpu", **{"n_steps": 8, "food_shaping": 1.0, **kwargs})


class Passthrough(VecEnvWrapper):
    """A VecEnv wrapper that changes nothing: the env is no longer a BatchedSnakeVecEnv, so PQN
    steps it through SB3's ``VecEnv.step``."""

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        return self.venv.step_wait()


def test_the_network_has_layer_norm_and_there_is_no_target_network():
    model = snake_pqn()
    assert sum(isinstance(module, nn.LayerNorm) for module in model.q_net.modules()) == 2
    assert not hasattr(model.policy, "q_net_target")
    assert list(model.policy.optimizer.param_groups[0]["params"]) == list(model.q_net.parameters())


@pytest.mark.parametrize(
    ("policy_kwargs", "fused"),
    [({}, True), ({"optimizer_kwargs": {"fused": False}}, False), ({"optimizer_class": torch.optim.SGD}, None)],
)
def test_adam_is_fused_unless_the_optimizer_arguments_say_otherwise(policy_kwargs, fused, tmp_path):
    model = snake_pqn(policy_kwargs=policy_kwargs)
    assert model.policy.optimizer.defaults.get("fused") is fused
    model.save(tmp_path / "model.zip")
    assert PQN.load(tmp_path / "model.zip", device="cpu").policy.optimizer.defaults.get("fused") is fused


@pytest.mark.parametrize("options", [{}, SNAKE_TARGETS])
def test_sb3_s_vec_env_step_gives_the_same_rollout_as_the_tensors(options):
    """Long games, truncations and deaths in 64 moves of 8 games: the terminal observations and
    TimeLimit.truncated of SB3's step give the same targets as the tensors' own."""
    rollouts = []
    for wrap in (False, True):
        env = BatchedSnakeVecEnv(8, seed=5, long_starts=0.5, **GAME)
        model = snake_pqn(env=Passthrough(env) if wrap else env, seed=5, n_steps=64, **options)
        model._setup_learn(10_000, None)
        rollouts.append(model.collect_rollout(model._init_callback(None)))
    for tensors, sb3 in zip(*rollouts, strict=True):
        torch.testing.assert_close(tensors, sb3)


def test_a_callback_stops_learning_at_its_step():
    class StopAt(BaseCallback):
        def _on_step(self):
            return self.num_timesteps < 40

    model = snake_pqn(n_envs=4)
    model.learn(10_000, callback=StopAt())
    assert model.num_timesteps == 40


def test_save_and_load_keep_the_network_the_hyperparameters_and_the_counters(tmp_path):
    model = snake_pqn(q_lambda=0.5, n_minibatches=2)
    model.learn(512)
    model.save(tmp_path / "pqn.zip")
    loaded = PQN.load(tmp_path / "pqn.zip", device="cpu")
    boards = torch.as_tensor(BatchedSnakeVecEnv(32, seed=9, **GAME).reset())
    with torch.no_grad():
        torch.testing.assert_close(loaded.q_net(boards), model.q_net(boards))
        average = loaded.policy.q_net_average(boards)
        torch.testing.assert_close(average, model.policy.q_net_average(boards))
        assert not torch.allclose(average, loaded.q_net(boards))  # the two networks were saved apart
    assert (loaded.q_lambda, loaded.n_minibatches, loaded.num_timesteps) == (0.5, 2, model.num_timesteps)
    assert loaded.policy.optimizer.state_dict()["state"].keys() == model.policy.optimizer.state_dict()["state"].keys()


def test_the_learning_rate_halves_every_half_life_of_env_steps_and_is_saved(tmp_path):
    model = snake_pqn(n_envs=16, learning_rate_half_life=256)  # a rollout: 8 moves of 16 games, 128 env steps
    model.learn(384)
    # the last update follows the third rollout, at 384 env steps: one and a half half-lives
    assert model.policy.optimizer.param_groups[0]["lr"] == pytest.approx(5e-4 * 0.5**1.5)
    save_model(model, tmp_path / "model.zip")
    assert load_model(tmp_path / "model.zip").learning_rate_half_life == 256


@pytest.mark.parametrize("half_life", [0, 256, 1000])
def test_the_averaged_network_moves_towards_the_trained_one_after_each_rollout(half_life):
    """After each rollout's gradient steps the averaged network moves ``averaging_rate`` of the way
    to the trained one (a half-life of 0: it is the trained one); the rollouts act with the trained one."""
    model = snake_pqn(n_envs=16, averaging_half_life=half_life)  # a rollout: 8 moves of 16 games
    trained = [parameter.detach().clone() for parameter in model.q_net.parameters()]
    average = [parameter.clone() for parameter in trained]
    tau = averaging_rate(128, half_life)

    def check_after_update(moved=True):  # after each rollout's update (none before the first)
        if moved:
            for mean, now in zip(average, model.q_net.parameters(), strict=True):
                mean.lerp_(now.detach(), tau)
        for mean, played in zip(average, model.policy.q_net_average.parameters(), strict=True):
            torch.testing.assert_close(played, mean)

    class Record(BaseCallback):
        def _on_rollout_start(self):
            check_after_update(moved=self.num_timesteps > 0)

        def _on_step(self):
            return True

    model.learn(384, callback=Record())
    check_after_update()  # the third rollout's
    moved = any(not torch.equal(a, b) for a, b in zip(trained, model.q_net.parameters(), strict=True))
    pairs = zip(model.q_net.parameters(), model.policy.q_net_average.parameters(), strict=True)
    same = all(torch.equal(a, b) for a, b in pairs)
    assert moved and same == (half_life == 0)
    assert not any(parameter.requires_grad for parameter in model.policy.q_net_average.parameters())


def test_the_rollouts_act_with_the_trained_network_and_predict_with_the_averaged_one():
    model = snake_pqn(exploration_initial_eps=0.0, exploration_final_eps=0.0)
    with torch.no_grad():
        for parameter in model.policy.q_net_average.parameters():
            parameter.normal_()  # an averaged network that plays apart from the trained one
    model._setup_learn(10_000, None)
    rollout = model.collect_rollout(model._init_callback(None))
    with torch.no_grad():
        trained = model.q_net(rollout.observations).argmax(dim=1)
        averaged = model.policy.q_net_average(rollout.observations).argmax(dim=1)
    assert torch.equal(rollout.actions, trained) and not torch.equal(trained, averaged)
    predicted, _ = model.predict(rollout.observations.numpy(), deterministic=True)
    assert (predicted == averaged.numpy()).all()


@pytest.mark.parametrize(
    ("env_steps", "half_life", "tau"), [(100, 100, 0.5), (50, 100, 1 - 0.5**0.5), (4096, 0, 1.0), (200, 100, 0.75)]
)
def test_the_averaging_rate_halves_the_past_every_half_life(env_steps, half_life, tau):
    assert averaging_rate(env_steps, half_life) == pytest.approx(tau)


def test_exploration_falls_linearly_to_its_final_epsilon():
    model = snake_pqn(exploration_initial_eps=1.0, exploration_final_eps=0.1, exploration_steps=1000)
    assert [model.epsilon(steps) for steps in (0, 500, 1000, 5000)] == pytest.approx([1.0, 0.55, 0.1, 0.1])


@pytest.mark.parametrize("egocentric", [True, False])
def test_safe_exploration_never_picks_a_fatal_move_while_a_safe_one_exists(egocentric):
    env = BatchedSnakeVecEnv(256, seed=2, board_size=6, long_starts=1.0, egocentric=egocentric)
    model = PQN("MlpPolicy", env, safe_exploration=True, exploration_initial_eps=1.0, seed=2, device="cpu")
    boards = env.reset_tensors()
    for _ in range(20):
        safe = action_masks(boards, egocentric=egocentric)
        moves = model.explore(boards, torch.zeros(len(boards), env.action_space.n))
        chosen = safe.gather(1, moves[:, None]).squeeze(1)
        assert (chosen | ~safe.any(dim=1)).all()
        boards = env.step_tensors(moves).observations


def test_predict_is_greedy_when_deterministic_and_random_at_epsilon_one():
    model = snake_pqn(exploration_initial_eps=1.0)
    model.learn(512)  # the averaged network now differs from the trained one
    boards = BatchedSnakeVecEnv(64, seed=4, **GAME).reset()
    greedy, _ = model.predict(boards, deterministic=True)
    with torch.no_grad():
        assert (greedy == model.policy.q_net_average(torch.as_tensor(boards)).argmax(dim=1).numpy()).all()
    model.exploration_rate = 1.0
    random = np.concatenate([model.predict(boards)[0] for _ in range(5)])
    assert set(random.tolist()) == {0, 1, 2}


def test_any_discrete_gymnasium_env_trains():
    model = PQN("MlpPolicy", gym.make("CartPole-v1"), n_steps=16, n_minibatches=4, seed=0, device="cpu")
    model.learn(64)
    assert model.num_timesteps == 64 and model._n_updates == 4 * 2 * 4  # 4 rollouts of 2 passes of 4


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (
            {"n_minibatches": 200},
            r"n_minibatches must divide the rollout's 128 samples .* got 200 \(divisors near it: 128\)",
        ),
        ({"n_minibatches": 100}, r"n_minibatches must divide .* got 100 \(divisors near it: 64 or 128\)"),
        ({"n_minibatches": 3}, r"n_minibatches must divide .* got 3 \(divisors near it: 2 or 4\)"),
        ({"n_epochs": 101}, "n_epochs must be an integer from 1 to 100, got 101"),
        ({"q_lambda": 1.5}, "q_lambda must be from 0 to 1, got 1.5"),
        ({"n_steps": 0}, "n_steps must be a positive integer, got 0"),
        ({"averaging_half_life": -1}, "averaging_half_life must be 0 or more env steps, got -1"),
    ],
)
def test_values_that_cannot_work_are_refused_in_one_line(kwargs, words):
    with pytest.raises(UsageError, match=words):
        snake_pqn(**kwargs)


def test_reading_snake_boards_is_refused_on_other_envs():
    with pytest.raises(UsageError, match="food_shaping reads Snake boards.*turn food_shaping off"):
        PQN("MlpPolicy", gym.make("CartPole-v1"), food_shaping=1.0, device="cpu")


@pytest.mark.parametrize("policy", ["CnnPolicy", "AttentionPolicy"])
def test_the_cnn_and_attention_policies_train(policy):
    env = BatchedSnakeVecEnv(8, seed=1, **GAME)
    model = PQN(policy, env, n_steps=4, seed=1, device="cpu")
    before = [parameter.clone() for parameter in model.q_net.parameters()]
    model.learn(64)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.q_net.parameters(), strict=True))


def test_symmetry_augmentation_fits_the_mirrored_boards_with_left_and_right_swapped(monkeypatch):
    """Every draw the mirror: training on a rollout is training, unaugmented, on its mirror image."""
    models = [snake_pqn(seed=3, symmetry_augmentation=augmented) for augmented in (True, False)]
    models[0]._setup_learn(10_000, None)
    rollout = models[0].collect_rollout(models[0]._init_callback(None))
    augmentation = models[0]._augmentation
    monkeypatch.setattr(augmentation, "draw", lambda count: torch.full((count,), 4))
    mirrored = rollout._replace(
        observations=augmentation.transform(rollout.observations, torch.full((len(rollout.actions),), 4)),
        actions=2 - rollout.actions,
    )
    models[1].q_net.load_state_dict(models[0].q_net.state_dict())
    for model, fitted in zip(models, (rollout, mirrored), strict=True):
        model.set_logger(models[0].logger)
        torch.manual_seed(0)
        model.train(fitted)
    for augmented, plain in zip(models[0].q_net.parameters(), models[1].q_net.parameters(), strict=True):
        torch.testing.assert_close(augmented, plain)


@pytest.mark.slow
def test_pqn_learns_to_eat_on_a_small_board():
    """200,000 env steps on 6x6 (about 10 s on one core): a random policy eats under one food a
    game; PQN's greedy games eat several (9.97 in the prototype's measurement at this budget)."""
    env = BatchedSnakeVecEnv(128, seed=1, long_starts=0.2, **GAME)
    model = PQN("MlpPolicy", env, food_shaping=1.0, seed=1, device="cpu")
    model.learn(200_000)
    assert evaluate(model, 100, seed=0)["mean_score"] > 4


@pytest.mark.parametrize("policy", ["MlpPolicy", "CnnPolicy"])
def test_the_safe_loader_rebuilds_a_pqn_that_plays_as_the_saved_one(tmp_path, policy):
    from tests.test_persistence import craft

    env = BatchedSnakeVecEnv(16, seed=6, **GAME)
    model = PQN(policy, env, n_steps=8, q_lambda=0.3, symmetry_augmentation=True, seed=6, device="cpu")
    model.learn(256)
    save_model(model, tmp_path / "pqn.zip")
    crafted, marker = tmp_path / "crafted.zip", tmp_path / "pwned"
    craft(tmp_path / "pqn.zip", crafted, marker)
    loaded = load_model(crafted)  # reads sb3_snake.json and the weights only
    assert not marker.exists() and isinstance(loaded, PQN) and isinstance(loaded.policy, type(model.policy))
    assert loaded.hyperparameters() == model.hyperparameters() and loaded.num_timesteps == 256
    boards = torch.as_tensor(BatchedSnakeVecEnv(32, seed=9, **GAME).reset())
    with torch.no_grad():
        torch.testing.assert_close(loaded.q_net(boards), model.q_net(boards))
        torch.testing.assert_close(loaded.policy.q_net_average(boards), model.policy.q_net_average(boards))
    assert evaluate(loaded, 4, seed=1) == evaluate(model, 4, seed=1)


RUN = ["train", "--n-envs", "4", "--board-size", "6", "--device", "cpu", "--threads", "1", "--no-compile"]
RUN += ["--rollout-steps", "8", "--batch-size", "8", "--eval-every", "0", "--wandb-mode", "disabled"]


def test_a_pqn_run_resumes_with_its_weights_counters_and_hyperparameters(tmp_path):
    from typer.testing import CliRunner

    from sb3_snake.cli import app

    runner = CliRunner()
    first = runner.invoke(app, [*RUN, "--timesteps", "256", "--n-epochs", "3", "--output", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    saved = load_model(tmp_path / "a" / "model.zip")
    resumed = runner.invoke(
        app,
        ["train", "--resume", str(tmp_path / "a" / "model.zip"), "--timesteps", "256", "--threads", "1"]
        + ["--no-compile", "--eval-every", "0", "--wandb-mode", "disabled", "--output", str(tmp_path / "b")],
    )
    assert resumed.exit_code == 0, resumed.output
    model = load_model(tmp_path / "b" / "model.zip")
    assert isinstance(model, PQN) and model.n_epochs == 3 and model.n_envs == 4  # the saved run's, not the defaults
    assert model.num_timesteps == 512 and model._n_updates > saved._n_updates
    assert model.hyperparameters() == {**saved.hyperparameters(), "learning_rate": model.learning_rate}


def test_a_resumed_pqn_takes_a_new_learning_rate_and_refuses_other_changes_in_one_line(tmp_path):
    from sb3_snake.training.resume import resume_config
    from sb3_snake.training.run import build_model

    save_model(snake_pqn(n_envs=8, n_epochs=3), tmp_path / "pqn.zip")
    config = resume_config(tmp_path / "pqn.zip", learning_rate=1e-4, device="cpu")
    assert (config.algo, config.policy, config.n_envs, config.n_epochs) == ("pqn", "mlp", 8, 3)
    settings = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=1)
    model = build_model(config, settings, resume=tmp_path / "pqn.zip")
    assert isinstance(model, PQN) and model.learning_rate == 1e-4 and model.lr_schedule(1.0) == 1e-4
    changed = resume_config(tmp_path / "pqn.zip", n_epochs=5, device="cpu")
    with pytest.raises(UsageError, match=r"--n-epochs cannot change when a PQN model resumes: it was trained with 3"):
        build_model(changed, settings, resume=tmp_path / "pqn.zip")
    with pytest.raises(UsageError, match=r"is a PQN model, and the learner cannot change on resume"):
        resume_config(tmp_path / "pqn.zip", algo="dqn")


def test_a_pqn_description_with_a_dqn_hyperparameter_is_refused(tmp_path):
    from tests.conftest import rewrite_metadata

    save_model(snake_pqn(), tmp_path / "pqn.zip")

    def edit(described):
        described["hyperparameters"]["buffer_size"] = 10
        return described

    rewrite_metadata(tmp_path / "pqn.zip", tmp_path / "edited.zip", edit)
    with pytest.raises(UsageError, match=r"hyperparameters has unknown keys \['buffer_size'\]"):
        load_model(tmp_path / "edited.zip")


def test_a_pqn_file_without_an_averaged_network_is_refused_in_one_line(tmp_path):
    """Files saved before the averaged network hold neither its half-life nor its weights."""
    from tests.conftest import rewrite_metadata

    save_model(snake_pqn(), tmp_path / "pqn.zip")

    def edit(described):
        del described["hyperparameters"]["averaging_half_life"]
        return described

    rewrite_metadata(tmp_path / "pqn.zip", tmp_path / "edited.zip", edit)
    with pytest.raises(UsageError, match=r"hyperparameters lacks \['averaging_half_life'\]") as error:
        load_model(tmp_path / "edited.zip")
    assert "\n" not in str(error.value)


def test_an_update_counts_exactly_the_gradient_steps_it_ran():
    model = snake_pqn(n_envs=16, n_minibatches=4, n_epochs=3)  # rollouts of 128 samples: minibatches of 32
    model.learn(128)
    assert model._n_updates == 3 * 4 and model.batch_size == 32
    assert model.logger.name_to_value["train/n_updates"] == 12


def test_a_long_update_ends_between_minibatches_when_asked_and_counts_what_ran():
    from sb3_snake.pqn.pqn import UPDATE_CHUNK

    model = snake_pqn(n_envs=16, n_minibatches=64, n_epochs=100)  # 6,400 gradient steps a rollout
    asked = []
    model.update_interrupt = lambda: asked.append(model._n_updates) or len(asked) > 3
    model.learn(128)
    assert model._n_updates == 4 * UPDATE_CHUNK  # four calls ran; asked before the fifth, it stopped
    assert all(p.isfinite().all() for p in model.q_net.parameters())


@pytest.mark.slow
def test_pqn_learns_on_sb3_s_cartpole():
    """An env it was not tuned for: SB3's CartPole, 30,000 env steps of 8 games."""
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=8, seed=0)
    model = PQN("MlpPolicy", env, n_steps=16, n_minibatches=4, exploration_steps=5_000, seed=0, device="cpu")
    model.learn(30_000)
    rewards = []
    for episode in range(5):
        single = gym.make("CartPole-v1")
        obs, _ = single.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = single.step(int(action))
            total, done = total + reward, terminated or truncated
        rewards.append(total)
    assert np.mean(rewards) > 50  # a random policy plays about 22
