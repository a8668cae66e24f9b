"""RL Baselines3 Zoo trains on our env with our hyperparameter modules, through its own command."""

import subprocess
import sys

import pytest

pytest.importorskip("rl_zoo3", reason="RL Zoo is an optional extra: pip install -e '.[zoo]'")

from sb3_snake.zoo import EGOCENTRIC_ENV_ID, ENV_ID, ENV_IDS, dqn, ppo  # noqa: E402

#: Small enough for a test: a few hundred env steps, few games, learning from the start.
QUICK = {
    "dqn": ["n_envs:4", "learning_starts:64", "batch_size:32", "buffer_size:1000"],
    "ppo": ["n_envs:4", "n_steps:64", "batch_size:64", "n_epochs:1"],
}


def test_each_module_configures_the_env_with_the_attention_extractor():
    from sb3_snake.networks.attention import SnakeAttentionExtractor

    for module in (dqn, ppo):
        assert tuple(module.hyperparams) == ENV_IDS == (ENV_ID, EGOCENTRIC_ENV_ID)
        for env_id in ENV_IDS:
            kwargs = module.hyperparams[env_id]["policy_kwargs"]
            assert kwargs["features_extractor_class"] is SnakeAttentionExtractor
        assert module.hyperparams[EGOCENTRIC_ENV_ID] == module.hyperparams[ENV_ID]
    assert dqn.hyperparams[ENV_ID]["gradient_steps"] * 128 == 32 * 16  # 32 samples per env step, 16 games


def test_importing_the_package_leaves_rl_zoo_out():
    code = "import sys, sb3_snake; assert not any(m.startswith(('rl_zoo3', 'sb3_snake.zoo')) for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_rl_zoo_trains_and_saves_a_model_that_plays(tmp_path, algo):
    logs = tmp_path / "logs"
    command = [
        sys.executable, "-m", "rl_zoo3.train", "--algo", algo, "--env", ENV_ID, "--gym-packages", "sb3_snake",
        "-conf", f"sb3_snake.zoo.{algo}", "-n", "300", "--seed", "0", "--device", "cpu", "-f", str(logs),
        "--eval-freq", "-1", "--hyperparams", *QUICK[algo],
    ]  # fmt: skip
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (saved,) = [p for p in (logs / algo).rglob("*.zip") if "best_model" not in p.name]

    import gymnasium as gym
    from stable_baselines3 import DQN, PPO

    from sb3_snake.networks.attention import SnakeAttentionExtractor

    model = {"dqn": DQN, "ppo": PPO}[algo].load(saved, device="cpu")
    assert isinstance(model.policy.features_extractor, SnakeAttentionExtractor) or isinstance(
        getattr(model.policy, "q_net", model.policy).features_extractor, SnakeAttentionExtractor
    )
    assert model.num_timesteps >= 300
    env = gym.make(ENV_ID)
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(int(action))


@pytest.mark.slow
def test_rl_zoo_trains_the_egocentric_env_and_enjoy_draws_its_games(tmp_path):
    """``rl_zoo3.train`` ended in "Hyperparameters not found" for the egocentric id, and
    ``rl_zoo3.enjoy`` failed for both (it asks for ``render_mode="human"``, which Gymnasium then
    drew with pygame)."""
    logs, zoo = tmp_path / "logs", ["--algo", "dqn", "--env", EGOCENTRIC_ENV_ID, "--gym-packages", "sb3_snake"]
    train = [sys.executable, "-m", "rl_zoo3.train", *zoo, "-conf", "sb3_snake.zoo.dqn", "-n", "200", "--seed", "0"]
    train += ["--device", "cpu", "-f", str(logs), "--eval-freq", "-1", "--hyperparams", *QUICK["dqn"]]
    trained = subprocess.run(train, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    enjoy = [sys.executable, "-m", "rl_zoo3.enjoy", *zoo, "-f", str(logs), "-n", "20", "--device", "cpu"]
    played = subprocess.run(enjoy, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert played.returncode == 0, played.stdout[-3000:] + played.stderr[-3000:]
    assert played.stdout.count("############") >= 2 * 20  # a 10x10 board, framed, each step
