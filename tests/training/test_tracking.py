"""W&B tracking: only with --wandb, WANDB_* configure it, never blocks or breaks training."""

import json

import pytest

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.run import train
from sb3_snake.training.tracking import INIT_TIMEOUT_SECONDS, WandbOptions, WandbRun, resolve_mode

FAST = OptimizationSettings(use_torch_compile=False, use_bf16=False, num_threads=1)


def tiny_config(**changes):
    values = {"algo": "dqn", "episodes": 12, "n_envs": 4, "board_size": 5, "seed": 1, "learning_starts": 16}
    values["buffer_size"] = 2_000
    return TrainConfig(**{**values, "batch_size": 16, "device": "cpu", **changes})


def test_wandb_gets_config_episodes_and_training_metrics(tmp_path, fake_wandb):
    summary = train(tiny_config(episodes=20), FAST, tmp_path, wandb_options=WandbOptions(True, "proj", "offline"))
    kwargs = fake_wandb.init_kwargs
    assert kwargs["project"] == "proj" and kwargs["mode"] == "offline" and kwargs["dir"] == str(tmp_path)
    config = kwargs["config"]
    assert config["hyperparameters"]["board_size"] == 5 and config["hyperparameters"]["batch_size"] == 16
    assert config["optimizations"]["torch_compile_requested"] is False
    assert config["optimizations"]["bf16_active"] is False and "flash_attention_active" in config["optimizations"]
    assert config["capabilities"]["cpu_cores"] >= 1 and "cpu_native_bf16" in config["capabilities"]
    episode_logs = [m for m in fake_wandb.logged if "episode/score" in m]
    assert len(episode_logs) == 20
    assert any("train/loss" in m for m in fake_wandb.logged)
    assert fake_wandb.summary["episodes"] == 20 and fake_wandb.finished
    assert summary["wandb_mode"] == "offline"


def test_wandb_online_without_key_goes_offline(tmp_path, fake_wandb, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    messages = []
    run = WandbRun("p", "online", {}, tmp_path, notify=messages.append)
    assert run.mode == "offline" and fake_wandb.init_kwargs["mode"] == "offline"
    assert "no API key" in messages[0]


def test_wandb_failure_never_stops_training(tmp_path, fake_wandb):
    def broken_init(**kwargs):
        raise RuntimeError("network unreachable")

    fake_wandb.init = broken_init
    messages = []
    run = WandbRun("p", "offline", {}, tmp_path, notify=messages.append)
    assert not run.active and "network unreachable" in messages[0]
    run.log({"x": 1})
    run.finish({})


def test_real_wandb_offline_run_writes_locally(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run = WandbRun("sb3-snake-test", "offline", {"a": 1}, tmp_path)
    assert run.active
    run.log({"episode/score": 3})
    run.finish({"episodes": 1})
    assert list((tmp_path / "wandb").glob("offline-run-*"))


@pytest.mark.parametrize("mode", ["online", "offline", "dryrun"])
def test_without_the_flag_wandb_is_never_touched(tmp_path, fake_wandb, monkeypatch, mode):
    """WANDB_MODE only configures W&B: it never turns it on, and a legacy value never breaks a run."""
    monkeypatch.setenv("WANDB_MODE", mode)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    summary = train(tiny_config(episodes=3), FAST, tmp_path / "run")
    assert fake_wandb.init_kwargs is None and not fake_wandb.logged
    assert summary["wandb_mode"] == "disabled" and not (tmp_path / "run" / "wandb").exists()


def test_wandb_mode_variable_configures_a_run_that_asked_for_wandb(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert resolve_mode("offline") == "offline"
    monkeypatch.setenv("WANDB_MODE", "dryrun")  # W&B's legacy spelling of offline
    assert resolve_mode("online") == "offline"
    monkeypatch.setenv("WANDB_MODE", "loud")
    with pytest.raises(ValueError, match="WANDB_MODE in the environment must be one of online, offline, disabled"):
        resolve_mode("online")


def test_wandb_start_up_has_a_short_timeout(tmp_path, fake_wandb, monkeypatch):
    monkeypatch.delenv("WANDB_INIT_TIMEOUT", raising=False)
    WandbRun("p", "offline", {}, tmp_path)
    assert fake_wandb.init_kwargs["settings"]["init_timeout"] == INIT_TIMEOUT_SECONDS <= 10
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "3")
    WandbRun("p", "offline", {}, tmp_path)
    assert fake_wandb.init_kwargs["settings"]["init_timeout"] == 3.0


def test_off_run_logs_nothing(fake_wandb):
    run = WandbRun.off()
    run.log({"x": 1})
    run.finish({"y": 2})
    assert not run.active and run.mode == "disabled" and fake_wandb.init_kwargs is None
    json.dumps({"mode": run.mode})
