"""``sb3-snake train --algo pqn``: the learner chosen by the config, its defaults, the options
each learner refuses, what the run reports, and that seeded runs repeat."""

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from sb3_snake.cli import app
from sb3_snake.common.errors import UsageError
from sb3_snake.persistence import load_model
from sb3_snake.pqn import PQN
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.evaluation import evaluate
from sb3_snake.training.memory import check_memory, memory_estimate
from sb3_snake.training.roles import LEARNER_DEFAULTS
from sb3_snake.training.run import build_model, train
from tests.conftest import FAST

runner = CliRunner()


def tiny_pqn(**changes):
    """A PQN run of seconds: 8 games on a 5x5 board, rollouts of 8 moves, 3,000 env steps."""
    values = {"algo": "pqn", "timesteps": 3_000, "n_envs": 8, "board_size": 5, "seed": 1, "device": "cpu"}
    return TrainConfig(**{**values, "rollout_steps": 8, "batch_size": 2, "exploration_steps": 1_000, **changes})


def test_a_change_of_learner_resolves_its_defaults_again_and_keeps_what_was_given():
    assert replace(TrainConfig(), algo="pqn").n_envs == 128 and replace(TrainConfig(), algo="pqn").policy == "mlp"
    assert replace(TrainConfig(algo="pqn"), algo="dqn").safe_exploration is False
    assert replace(TrainConfig(n_envs=32), algo="pqn").n_envs == 32


def test_pqns_options_take_the_range_a_pqn_file_holds():
    for values, words in [
        ({"batch_size": 0}, "batch_size must be from 1"),
        ({"q_lambda": 1.5}, "q_lambda must be from 0 to 1"),
        ({"n_epochs": 101}, "n_epochs must be from 1 to 100"),
        (
            {"n_envs": 2, "rollout_steps": 2, "batch_size": 3},
            r"batch_size must divide PQN's rollout of 4 samples \(2 games x 2 moves\) .* got 3: use a divisor such "
            "as 2 or 4, or change n_envs or rollout_steps",
        ),
    ]:
        with pytest.raises(UsageError, match=words):
            TrainConfig(algo="pqn", **values)


def test_each_learner_takes_its_own_defaults_and_a_given_value_wins():
    for algo, defaults in LEARNER_DEFAULTS.items():
        config = TrainConfig(algo=algo)
        assert {name: getattr(config, name) for name in defaults} == defaults
    assert TrainConfig(algo="pqn").n_envs == 128 and TrainConfig(algo="pqn", n_envs=32).n_envs == 32
    assert TrainConfig(algo="pqn", symmetry_augmentation=True).symmetry_augmentation is True
    # Resolved once: a config made from another by replace keeps the values it had.
    assert replace(TrainConfig(algo="pqn"), seed=3).n_envs == 128


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"algo": "pqn", "buffer_size": 5_000}, "buffer_size is for the dqn learner, and this run's algo is pqn"),
        ({"algo": "pqn", "dueling": True}, "dueling is for the dqn learner"),
        ({"algo": "pqn", "save_replay_buffer": True}, "save_replay_buffer is for the dqn learner"),
        ({"algo": "dqn", "q_lambda": 0.9}, "q_lambda is for the pqn learner, and this run's algo is dqn"),
        ({"algo": "dqn", "n_epochs": 3}, "n_epochs is for the pqn learner"),
        ({"algo": "dqn", "rollout_steps": 8}, "rollout_steps is for the pqn learner"),
        ({"algo": "dqn", "policy": "cnn"}, "policy cnn is for the pqn learner (dqn's is attention)"),
        ({"algo": "ppo"}, "algo must be one of dqn, pqn, got 'ppo'"),
        ({"algo": None}, "algo must be one of dqn, pqn, got None"),
        ({"algo": "pqn", "policy": "lstm"}, "policy must be one of mlp, cnn, attention, got 'lstm'"),
    ],
)
def test_an_option_of_the_other_learner_is_refused_in_one_line(values, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")) as error:
        TrainConfig(**values)
    assert "\n" not in str(error.value)


def test_the_batch_size_sets_pqns_minibatch_and_the_minibatches_follow_from_it():
    assert TrainConfig(algo="pqn").pqn_kwargs()["n_minibatches"] == 32  # 128 games x 32 moves / 128
    config = TrainConfig(algo="pqn", batch_size=512, sources={"batch_size": ".env"})
    assert config.pqn_kwargs()["n_minibatches"] == 8
    assert TrainConfig(algo="pqn", n_envs=256, batch_size=512).pqn_kwargs()["n_minibatches"] == 16


def test_a_pqn_run_trains_saves_and_reports_pqn(tmp_path):
    summary = train(tiny_pqn(checkpoint_every=10), FAST, tmp_path)
    assert isinstance(load_model(tmp_path / "checkpoint.zip"), PQN)  # saved while training
    assert summary["stopped_by"] == "timesteps" and summary["env_steps"] >= 3_000
    trained = summary["hyperparameters"]
    assert trained["algo"] == "pqn" and trained["policy"] == "MlpPolicy" and trained["n_envs"] == 8
    assert (
        trained["rollout_steps"] == 8
        and "n_steps" not in trained
        and trained["q_lambda"] == 0.65
        and trained["exploration_steps"] == 1_000
    )
    assert not {"buffer_size", "replay_ratio", "dueling", "embed_dim"} & set(trained)  # SnakeDQN's, unused
    assert summary["batch_size"] == {"value": 2, "source": "default; 8 moves x 8 games in 32 minibatches"}
    model = load_model(tmp_path / "model.zip")
    assert isinstance(model, PQN) and model.num_timesteps == summary["total_env_steps"]
    assert evaluate(model, 4, seed=0)["episodes"] == 4
    assert (tmp_path / "progress.csv").is_file() and (tmp_path / "monitor.csv").is_file()


def test_seeded_pqn_runs_repeat_exactly(tmp_path):
    for name in ("a", "b"):
        train(tiny_pqn(), FAST, tmp_path / name)
    episodes = [json.loads((tmp_path / name / "episodes.json").read_text()) for name in ("a", "b")]
    for record in episodes:
        record.pop("wall_seconds")
    assert episodes[0] == episodes[1] and len(episodes[0]["scores"]) > 0


@pytest.mark.parametrize("policy", ["cnn", "attention"])
def test_the_policy_option_builds_pqns_network(policy):
    model = build_model(tiny_pqn(policy=policy, board_size=8), FAST)
    assert isinstance(model, PQN) and type(model.policy).__name__ == f"PQN{policy.capitalize()}Policy"


def test_pqns_memory_is_its_rollout_and_a_run_that_cannot_fit_is_refused():
    parts = memory_estimate(TrainConfig(algo="pqn"))
    assert set(parts) == {"rollout", "games", "network", "one minibatch"}
    assert parts["rollout"] == 128 * 32 * (5 * 100 + 24)
    with pytest.raises(UsageError, match="rollout_steps"):
        check_memory(TrainConfig(algo="pqn", board_size=256, n_envs=1 << 16), available=2**34)


def test_the_cli_trains_pqn_and_refuses_a_dqn_option_in_one_line(tmp_path):
    common = ["train", "--algo", "pqn", "--n-envs", "8", "--board-size", "5", "--device", "cpu", "--no-compile"]
    result = runner.invoke(app, [*common, "--timesteps", "1500", "--output", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "learner:          PQN (MlpPolicy; the default learner)" in result.output
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["hyperparameters"]["algo"] == "pqn"
    refused = runner.invoke(app, [*common, "--buffer-size", "5000", "--output", str(tmp_path / "refused")])
    assert refused.exit_code == 2 and refused.output.count("\n") == 1
    assert "buffer_size is for the dqn learner" in refused.output and not (tmp_path / "refused").exists()


def test_resuming_a_dqn_model_as_pqn_is_refused_in_one_line(tmp_path):
    from tests.conftest import tiny_config

    train(tiny_config(episodes=4), FAST, tmp_path / "dqn")
    result = runner.invoke(app, ["train", "--resume", str(tmp_path / "dqn" / "model.zip"), "--algo", "pqn"])
    assert result.exit_code == 2 and "the learner cannot change on resume" in result.output


def test_a_time_limit_ends_a_long_pqn_update_between_minibatches_and_saves_the_model(tmp_path):
    # 8 games x 32 moves in minibatches of 2, 100 passes: one update is 12,800 gradient steps
    config = tiny_pqn(timesteps=None, time_limit_minutes=0.005, rollout_steps=32, n_epochs=100)
    summary = train(config, FAST, tmp_path)
    assert summary["stopped_by"] == "time_limit" and 8 * 32 <= summary["env_steps"] < 2 * 8 * 32  # one rollout
    model = load_model(tmp_path / "model.zip")
    assert 0 < model._n_updates < 100 * 128  # the update stopped part of the way, and says how far
    assert all(parameter.isfinite().all() for parameter in model.q_net.parameters())


def test_n_epochs_has_a_sane_bound_in_one_line():
    with pytest.raises(UsageError, match="n_epochs must be from 1 to 100, got 1000") as error:
        TrainConfig(algo="pqn", n_epochs=1000)
    assert "\n" not in str(error.value)
