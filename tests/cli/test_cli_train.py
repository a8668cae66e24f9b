"""``sb3-snake train``, ``eval``, ``play`` and ``plot`` (``sb3_snake.cli.train``), through Typer's runner
and as an installed program."""

import json
import os
import shutil
import signal
import subprocess
import time
import zipfile

import pytest
import torch
from typer.testing import CliRunner

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.cli import app
from sb3_snake.common.paths import TEMPORARY_MARK, atomic_write
from sb3_snake.persistence import load_model

runner = CliRunner()
FAST_SETTINGS = OptimizationSettings(use_torch_compile=False, use_bf16=False, num_threads=1)


# ---------------------------------------------------------------- train, eval, play

TINY = [
    "--algo",
    "dqn",
    "--device",
    "cpu",
    "--n-envs",
    "4",
    "--board-size",
    "5",
    "--seed",
    "1",
    "--learning-starts",
    "16",
    "--exploration-steps",
    "50",
    "--buffer-size",
    "2000",
    "--no-compile",
    "--no-bf16",
    "--batch-size",
    "16",
]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    result = runner.invoke(
        app,
        [
            "train",
            "--episodes",
            "12",
            *TINY,
            "--flash-attention",
            "--output",
            str(run_dir),
            "--checkpoint-every",
            "5",
            "--save-replay-buffer",
        ],
    )
    assert result.exit_code == 0, result.output
    return run_dir, result.output


def test_train_writes_model_and_summary_with_exact_episodes(trained_run):
    run_dir, output = trained_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["episodes"] == 12
    for key in (
        "env_steps",
        "wall_seconds",
        "env_steps_per_second",
        "mean_score_last_100",
        "best_score",
        "hyperparameters",
        "optimizations",
        "active",
    ):
        assert key in summary
    assert (run_dir / "model.zip").is_file() and (run_dir / "checkpoint.zip").is_file()
    assert "12 episodes" in output
    # Beside the exploring games' figures, what the final model plays greedily.
    last = summary["last_evaluation"]
    assert last["env_steps"] == summary["total_env_steps"]
    assert f"last greedy {last['mean_score']:.2f} (longest {last['longest']}" in output


def test_overrides_are_visible_in_the_summary_and_json(trained_run):
    run_dir, output = trained_run
    assert "batch size:       16 (from override)" in output
    assert "torch.compile:    disabled (from override)" in output
    assert "BF16 autocast:    disabled (from override)" in output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["batch_size"] == {"value": 16, "source": "override"}
    assert summary["optimizations"]["use_flash_attention"] == {"value": True, "source": "override"}
    assert summary["active"]["flash_attention_active"] is True
    assert summary["hyperparameters"]["board_size"] == 5


def test_eval_json(trained_run):
    run_dir, _ = trained_run
    result = runner.invoke(app, ["eval", str(run_dir / "model.zip"), "--episodes", "6", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["episodes"] == 6 and report["board_size"] == 5
    assert 0 <= report["mean_score"] <= report["max_score"] and 0 <= report["win_rate"] <= 1


@pytest.mark.parametrize("command", [["eval", "--episodes", "2"], ["play", "--fps", "0"]])
def test_eval_and_play_never_compile_even_when_the_env_file_says_so(trained_run, tmp_path, monkeypatch, command):
    compiled = []
    monkeypatch.setattr("sb3_snake.update.compile.CompileJob", lambda *args, **kwargs: compiled.append(args))
    env_file = tmp_path / "compile.env"
    env_file.write_text("USE_TORCH_COMPILE=true\n")
    model = str(trained_run[0] / "model.zip")
    result = runner.invoke(app, [command[0], model, *command[1:], "--env-file", str(env_file)])
    assert result.exit_code == 0, result.output
    assert compiled == []


def test_play_text_and_gif(trained_run, tmp_path):
    run_dir, _ = trained_run
    result = runner.invoke(app, ["play", str(run_dir / "model.zip"), "--fps", "0"])
    assert result.exit_code == 0, result.output
    assert "#######" in result.output and "score" in result.output
    gif = tmp_path / "game.gif"
    result = runner.invoke(app, ["play", str(run_dir / "model.zip"), "--gif", str(gif)])
    assert result.exit_code == 0, result.output
    assert gif.read_bytes()[:4] == b"GIF8"


def test_plot_of_a_trained_run(trained_run, tmp_path):
    run_dir, _ = trained_run
    result = runner.invoke(app, ["plot", str(run_dir), "--output", str(tmp_path / "curve.png"), "--window", "5"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
@pytest.mark.parametrize("ratio", ["8", "0.001", "4096"])
def test_a_model_trained_below_the_early_replay_ratio_evaluates(tmp_path, ratio):
    """``train --replay-ratio 8`` (below the early ratio, 16; tune draws 8) saved an early fraction
    of 2.0, and ``eval`` of its model exited 2: the reader's range of that fraction ended at 1."""
    run = ["train", *TINY, "--timesteps", "64", "--replay-ratio", ratio, "--output", str(tmp_path / "r")]
    trained = runner.invoke(app, run)
    assert trained.exit_code == 0, trained.output
    evaluated = runner.invoke(app, ["eval", str(tmp_path / "r" / "model.zip"), "--episodes", "3", "--json"])
    assert evaluated.exit_code == 0, evaluated.output


def test_time_limit_without_episodes_runs_until_the_limit(tmp_path):
    args = ["train", "--time-limit", "0.05", "--no-head-view", *TINY, "--output", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stopped_by"] == "time_limit" and summary["target_episodes"] is None
    assert summary["hyperparameters"]["head_view"] is False
    assert "stopped by the time limit" in result.output


def test_resume_from_checkpoint(trained_run, tmp_path):
    run_dir, _ = trained_run
    result = runner.invoke(
        app,
        [
            "train",
            "--episodes",
            "3",
            *TINY,
            "--resume",
            str(run_dir / "checkpoint.zip"),
            "--output",
            str(tmp_path / "resumed"),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert summary["episodes"] == 3 and summary["resumed_from"].endswith("checkpoint.zip")
    assert summary["total_env_steps"] > summary["env_steps"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_cuda_without_gpu_exits_2():
    result = runner.invoke(app, ["train", "--device", "cuda"])
    assert result.exit_code == 2 and "no CUDA GPU is available" in result.output


def test_corrupt_model_file_exits_2(tmp_path):
    corrupt = tmp_path / "model.zip"
    corrupt.write_bytes(b"not a zip")
    result = runner.invoke(app, ["eval", str(corrupt)])
    assert result.exit_code == 2 and "cannot be loaded" in result.output


def test_malformed_env_file_exits_2(tmp_path):
    env_file = tmp_path / "bad.env"
    env_file.write_text("USE_BF16=maybe\n")
    result = runner.invoke(app, ["train", "--env-file", str(env_file)])
    assert result.exit_code == 2 and "USE_BF16='maybe'" in result.output and "bad.env" in result.output


def test_a_negative_compile_start_exits_2_in_one_line(tmp_path):
    result = runner.invoke(app, ["train", "--compile-after", "-1", "--output", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["error: --compile-after '-1': expected an integer of 0 or more"]
    assert not (tmp_path / "x").exists()


def test_bad_input_is_refused_before_auto_settings_are_measured(tmp_path):
    env_file = tmp_path / "auto.env"
    env_file.write_text("USE_FLASH_ATTENTION=auto\nOPTIMAL_BATCH_SIZE=auto\n")
    result = runner.invoke(app, ["train", "--n-envs", "1048576", "--board-size", "64", "--env-file", str(env_file)])
    assert result.exit_code == 2 and result.output.startswith("error: this run needs about"), result.output
    assert "measuring" not in result.output


@pytest.mark.slow
def test_auto_settings_are_measured_before_training_and_recorded(tmp_path):
    env_file = tmp_path / "auto.env"
    env_file.write_text("USE_FLASH_ATTENTION=auto\nOPTIMAL_BATCH_SIZE=auto\n")
    assert TINY[-2:] == ["--batch-size", "16"]
    tiny = TINY[:-2]
    args = ["train", "--episodes", "2", *tiny, "--env-file", str(env_file), "--output", str(tmp_path / "run")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "measuring auto settings (OPTIMAL_BATCH_SIZE, USE_FLASH_ATTENTION) on this machine" in result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["batch_size"]["value"] in (256, 512, 1024, 2048)
    assert summary["hyperparameters"]["batch_size"] == summary["batch_size"]["value"]
    assert summary["batch_size"]["source"].startswith("auto: chose ")
    assert summary["optimizations"]["use_flash_attention"]["source"].startswith("auto: chose ")
    again = runner.invoke(app, [*args[:-1], str(tmp_path / "run2")])
    assert again.exit_code == 0 and "measuring auto settings" not in again.output  # cached


def test_resume_with_another_board_size_exits_2(trained_run, tmp_path):
    run_dir, _ = trained_run
    args = [a if a != "5" else "6" for a in TINY]
    result = runner.invoke(
        app,
        ["train", "--episodes", "2", *args, "--resume", str(run_dir / "model.zip"), "--output", str(tmp_path / "x")],
    )
    assert result.exit_code == 2 and "trained on a 5x5 board, not 6x6" in result.output


def start_training(tmp_path, *extra):
    program = shutil.which("sb3-snake")
    if program is None:
        pytest.skip("sb3-snake is not installed as a program (pip install -e .)")
    run_dir = tmp_path / "interrupted"
    process = subprocess.Popen(
        [program, "train", "--episodes", "1000000", *TINY, "--output", str(run_dir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("run folder:"):
            break
    return process, run_dir, lines


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_cleanly_saves_and_exits_non_zero(tmp_path, sig, code):
    process, run_dir, lines = start_training(tmp_path, "--checkpoint-every", "1")
    deadline = time.monotonic() + 120
    while not (run_dir / "checkpoint.zip").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # until the first game has ended (its checkpoint is written)
    process.send_signal(sig)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == code, "".join(lines) + output
    assert "stopping after this step, saving... (Ctrl-C again to abort)" in output
    assert f"stopped by {sig.name}; the model and summary were saved" in output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "stop" and summary["stop_reason"] == sig.name
    assert 0 < summary["episodes"] < 1000000
    model = load_model(run_dir / "model.zip", OptimizationSettings(use_torch_compile=False, num_threads=1))
    assert model.observation_space.shape == (5, 5, 5)


@pytest.mark.slow
def test_a_signal_while_building_aborts_at_once_and_leaves_nothing(tmp_path):
    process, run_dir, lines = start_training(tmp_path, "--compile")
    process.send_signal(signal.SIGINT)  # the summary was printed; compilation may still run
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, "".join(lines) + output
    assert "aborted before training started; nothing was saved" in output
    assert not run_dir.exists()


def test_an_abort_during_the_final_save_leaves_the_previous_files_and_no_temporary(tmp_path, monkeypatch):
    import sb3_snake.training.summary as summary  # where the run's files are saved

    first = runner.invoke(app, ["train", "--episodes", "3", *TINY, "--output", str(tmp_path), "--save-replay-buffer"])
    assert first.exit_code == 0, first.output
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}

    def aborted_save(model, path, replay_buffer=False):
        with atomic_write(path) as temporary:
            temporary.write_bytes(b"half a model")
            raise KeyboardInterrupt  # a second Ctrl-C in the middle of the save

    monkeypatch.setattr(summary, "save_model", aborted_save)
    args = ["train", "--episodes", "3", *TINY, "--output", str(tmp_path), "--save-replay-buffer", "--overwrite"]
    result = runner.invoke(app, [*args[:-1], "--resume", str(tmp_path / "model.zip")])
    assert result.exit_code == 130 and "aborted; files saved before it are intact" in result.output
    after = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    saved = ("model.zip", "model.replay.npz", "summary.json", "episodes.json")
    assert {name: after[name] for name in saved} == {name: before[name] for name in saved}  # as they were
    assert sorted(after) == sorted(before) and not any(TEMPORARY_MARK in name for name in after)  # nothing partial
    assert after["monitor.csv"].startswith(before["monitor.csv"])  # the games played were appended


@pytest.mark.slow
def test_train_with_wandb_offline_logs_config_and_metrics(tmp_path, fake_wandb):
    fake = fake_wandb
    result = runner.invoke(
        app,
        [
            "train",
            "--episodes",
            "30",
            *TINY,
            "--output",
            str(tmp_path),
            "--wandb",
            "--wandb-mode",
            "offline",
            "--wandb-project",
            "cli-test",
            "--verbose",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert fake.init_kwargs["mode"] == "offline" and fake.init_kwargs["project"] == "cli-test"
    optimizations = fake.init_kwargs["config"]["optimizations"]
    assert (
        optimizations["torch_compile_requested"] is False
        and optimizations["sources"]["use_torch_compile"] == "override"
    )
    assert fake.init_kwargs["config"]["hyperparameters"]["batch_size"] == 16  # a hyperparameter, not an optimization
    assert sum("episode/score" in m for m in fake.logged) == 30
    assert any("train/loss" in m for m in fake.logged)
    assert "exploration_rate" in result.output and "loss" in result.output  # --verbose 1 prints SB3's metrics
    assert json.loads((tmp_path / "summary.json").read_text())["wandb_mode"] == "offline"


# ---------------------------------------------------------------- hardening


def test_two_runs_into_the_same_folder(tmp_path):
    args = ["train", "--episodes", "2", *TINY, "--output", str(tmp_path / "run"), "--checkpoint-every", "1"]
    assert runner.invoke(app, args).exit_code == 0
    stale_checkpoint = (tmp_path / "run" / "checkpoint.zip").read_bytes()
    again = runner.invoke(app, args[:-2])
    assert again.exit_code == 2 and "already holds a run" in again.output and "--overwrite" in again.output
    replaced = runner.invoke(app, [*args[:-2], "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert (
        not (tmp_path / "run" / "checkpoint.zip").exists()
        or stale_checkpoint != (tmp_path / "run" / "checkpoint.zip").read_bytes()
    )


def test_runs_without_a_name_never_share_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outputs = [runner.invoke(app, ["train", "--episodes", "2", *TINY]).output for _ in range(2)]
    saved = [line.split()[1] for output in outputs for line in output.splitlines() if line.startswith("saved ")]
    assert len(set(saved)) == 2 and all(zipfile.is_zipfile(tmp_path / path) for path in saved)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_an_unwritable_output_fails_before_training(tmp_path):
    result = runner.invoke(app, ["train", "--episodes", "2", *TINY, "--output", "/proc/self/run"])
    assert result.exit_code == 2 and "is not writable" in result.output and "batch size:" not in result.output


@pytest.mark.parametrize(
    ("gif", "message"), [("nodir/x.gif", "folder nodir does not exist"), ("game.txt", "must end in .gif")]
)
def test_play_checks_the_gif_before_the_game(trained_run, monkeypatch, gif, message):
    import sb3_snake.training.evaluation as evaluation

    monkeypatch.setattr(evaluation, "play", lambda *a, **k: pytest.fail("the game ran before the check"))
    result = runner.invoke(app, ["play", str(trained_run[0] / "model.zip"), "--gif", gif])
    assert result.exit_code == 2 and message in result.output


def gif_place(tmp_path, case):
    """The --gif of each way an output path can be unusable, made in ``tmp_path``."""
    if case == "long name":
        return tmp_path / ("g" * 296 + ".gif")
    link = tmp_path / "game.gif"
    target = {
        "dangling link": tmp_path / "gone" / "game.gif",
        "link into a read-only folder": "/proc/game.gif",
        "link loop": tmp_path / "loop.gif",
    }[case]
    link.symlink_to(target)
    if case == "link loop":
        (tmp_path / "loop.gif").symlink_to(link)
    return link


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("dangling link", "/gone does not exist; create it first"),
        pytest.param(
            "link into a read-only folder",
            "(a link to /proc/game.gif): folder /proc is not writable",
            marks=pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc"),
        ),
        ("long name", "the file name is too long for the file system; choose a shorter one"),
        ("link loop", "cannot be used (Too many levels of symbolic links)"),
    ],
)
def test_an_unusable_gif_path_is_one_line_before_the_model_is_loaded(tmp_path, monkeypatch, case, message):
    import sb3_snake.persistence as persistence

    monkeypatch.setattr(persistence, "load_model", lambda *a, **k: pytest.fail("the model was loaded before the check"))
    gif = gif_place(tmp_path, case)
    result = runner.invoke(app, ["play", str(tmp_path / "model.zip"), "--gif", str(gif)])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert len(result.output.splitlines()) == 1 and message in result.output and str(gif) in result.output


def test_a_gif_through_a_link_is_written_where_the_link_points(trained_run, tmp_path):
    (tmp_path / "games").mkdir()
    link = tmp_path / "game.gif"
    link.symlink_to(tmp_path / "games" / "game.gif")
    result = runner.invoke(app, ["play", str(trained_run[0] / "model.zip"), "--gif", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and (tmp_path / "games" / "game.gif").read_bytes()[:4] == b"GIF8"
    assert [path.name for path in (tmp_path / "games").iterdir()] == ["game.gif"]


def test_a_full_disk_while_writing_the_gif_is_one_line_and_leaves_the_old_file(trained_run, tmp_path, monkeypatch):
    import errno

    from PIL import Image

    def full_disk(self, path, *args, **kwargs):
        with open(path, "wb") as file:
            file.write(b"GIF89a half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Image.Image, "save", full_disk)
    gif = tmp_path / "game.gif"
    gif.write_bytes(b"old")
    result = runner.invoke(app, ["play", str(trained_run[0] / "model.zip"), "--gif", str(gif)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output.splitlines() == [f"error: cannot write {gif} (No space left on device); it was left as it was"]
    assert gif.read_bytes() == b"old" and [path.name for path in tmp_path.iterdir()] == ["game.gif"]


def test_eval_of_a_model_trained_elsewhere_is_one_line(tmp_path):
    from stable_baselines3 import DQN

    DQN("MlpPolicy", "CartPole-v1", buffer_size=100).save(tmp_path / "cartpole.zip")
    for extra, message in (([], "has no sb3-snake description"), (["--trust-model"], "is not a Snake model")):
        result = runner.invoke(app, ["eval", str(tmp_path / "cartpole.zip"), *extra])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_resume_through_the_cli_applies_the_options(trained_run, tmp_path):
    run_dir, _ = trained_run
    args = ["train", "--episodes", "2", *TINY, "--resume", str(run_dir / "model.zip"), "--output", str(tmp_path / "r")]
    args += ["--learning-rate", "0.1", "--gamma", "0.5", "--batch-size", "64", "--n-envs", "8"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "batch size:       64 (from override)" in result.output
    model = load_model(tmp_path / "r" / "model.zip", OptimizationSettings(num_threads=1))
    assert (model.learning_rate, model.gamma, model.batch_size, model.n_envs) == (0.1, 0.5, 64, 8)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())["hyperparameters"]
    assert (summary["learning_rate"], summary["gamma"], summary["batch_size"]) == (0.1, 0.5, 64)


def test_resume_with_a_truncated_replay_buffer_is_one_line(trained_run, tmp_path):
    run_dir, _ = trained_run
    for name in ("checkpoint.zip", "checkpoint.replay.npz"):
        (tmp_path / name).write_bytes((run_dir / name).read_bytes())
    buffer = tmp_path / "checkpoint.replay.npz"
    buffer.write_bytes(buffer.read_bytes()[:2000])
    args = ["train", "--episodes", "2", *TINY, "--resume", str(tmp_path / "checkpoint.zip")]
    result = runner.invoke(app, [*args, "--output", str(tmp_path / "out")])
    assert result.exit_code == 2 and "replay buffer" in result.output and "cannot be read" in result.output
    assert not (tmp_path / "out").exists()


def test_wandb_mode_in_the_environment_alone_does_not_start_wandb(tmp_path, fake_wandb, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "dryrun")
    result = runner.invoke(app, ["train", "--episodes", "2", *TINY, "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert fake_wandb.init_kwargs is None and not (tmp_path / "wandb").exists()


def test_tensorboard_log_without_tensorboard_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "torch.utils.tensorboard", None)
    result = runner.invoke(app, ["train", "--episodes", "2", *TINY, "--tensorboard-log", str(tmp_path / "tb")])
    assert result.exit_code == 2 and 'pip install "sb3-snake[tensorboard]"' in result.output


def test_train_help_shows_every_option_with_its_help_in_its_panel():
    result = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    run_panel = result.output.split("Run, checkpoints and logging")[1].split("╰")[0]
    for text in ("Run name: writes into runs/NAME.", "Replace the run already in that folder.", "--verbose"):
        assert text in run_panel
    assert "--no-overwrite" not in result.output and "--no-trust-model" not in result.output
    environment = result.output.split("Environment")[1].split("╰")[0]
    assert "--device" in environment and "auto, cpu or cuda." in environment
    assert "Adam step size." in result.output.split("Learner (both)")[1].split("╰")[0]
    assert "Replay capacity" in result.output.split("DQN hyperparameters (--algo dqn)")[1].split("╰")[0]
    assert "Passes over each rollout." in result.output.split("PQN hyperparameters (--algo pqn)")[1].split("╰")[0]


# ---------------------------------------------------------------- a full disk


def _full_disk_after(monkeypatch, good_saves):
    """Every model save after the first ``good_saves`` fails as on a full disk."""
    import errno

    from sb3_snake.dqn.snake_dqn import SnakeDQN

    original, saves = SnakeDQN.save, []

    def save(self, path, *args, **kwargs):
        saves.append(path)
        if len(saves) > good_saves:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, path, *args, **kwargs)

    monkeypatch.setattr(SnakeDQN, "save", save)


def test_a_full_disk_while_training_is_one_line_naming_the_last_good_checkpoint(tmp_path, monkeypatch):
    _full_disk_after(monkeypatch, good_saves=1)
    run_dir = tmp_path / "run"
    args = ["train", "--episodes", "12", *TINY, "--output", str(run_dir), "--checkpoint-every", "4"]
    result = runner.invoke(app, [*args, "--save-replay-buffer"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in result.output
    assert f"cannot write {run_dir / 'checkpoint.zip'} (No space left on device)" in lines[0]
    assert f"the last good checkpoint is {run_dir / 'checkpoint.zip'}" in lines[0]
    assert (run_dir / "checkpoint.zip").is_file() and (run_dir / "checkpoint.replay.npz").is_file()
    assert not list(run_dir.glob("*.tmp.*")) and (run_dir / "episodes.json").is_file()


def test_a_model_and_its_buffer_are_written_both_or_neither(tmp_path, monkeypatch):
    import errno

    import sb3_snake.persistence as persistence
    from sb3_snake.common.errors import OutputError
    from tests.conftest import small_dqn

    model = small_dqn(FAST_SETTINGS, transitions=64)
    path = tmp_path / "checkpoint.zip"
    persistence.save_model(model, path, replay_buffer=True)
    before = (path.read_bytes(), persistence.replay_buffer_path(path).read_bytes())
    model.num_timesteps += 100

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("sb3_snake.persistence.model_file.save_replay_buffer", no_space)
    with pytest.raises(OutputError, match=r"checkpoint.replay.npz \(No space left on device\)"):
        persistence.save_model(model, path, replay_buffer=True)
    assert (path.read_bytes(), persistence.replay_buffer_path(path).read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.replay.npz", "checkpoint.zip"]


def test_resume_refuses_a_model_and_buffer_saved_at_different_steps(tmp_path):
    import sb3_snake.persistence as persistence
    from sb3_snake import BatchedSnakeVecEnv
    from tests.conftest import small_dqn

    model = small_dqn(FAST_SETTINGS, transitions=64)
    path = tmp_path / "checkpoint.zip"
    persistence.save_model(model, path, replay_buffer=True)
    model.num_timesteps += 272
    persistence.save_model(model, path)  # the model moved on; its buffer did not
    resumed = persistence.load_model(path, FAST_SETTINGS, env=BatchedSnakeVecEnv(8, board_size=5), for_training=True)
    with pytest.raises(ValueError, match=r"was saved at .* env steps and its model at .*: they are not a pair"):
        persistence.load_replay_buffer(resumed, persistence.replay_buffer_path(path))


@pytest.mark.slow
def test_training_on_a_small_tmpfs_ends_in_one_line(tmp_path):
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("this machine does not let the tests mount a tmpfs")
    try:
        args = ["train", "--episodes", "200", *TINY, "--board-size", "10", "--buffer-size", "20000"]
        result = runner.invoke(
            app, [*args, "--output", str(disk / "run"), "--checkpoint-every", "8", "--save-replay-buffer"]
        )
        assert result.exit_code == 1, result.output
        assert "Traceback" not in result.output and "No space left on device" in result.output
        assert not list((disk / "run").glob("*.tmp.*"))
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.parametrize("name", ["a[/]b", "[red]x"])
def test_paths_with_rich_markup_are_printed_as_text(name, tmp_path):
    output = tmp_path / name
    result = runner.invoke(app, ["train", "--timesteps", "64", *TINY, "--threads", "1", "--output", str(output)])
    assert result.exit_code == 0, result.output
    assert f"run folder:       {output}" in result.output
    assert (output / "model.zip").is_file()


@pytest.mark.parametrize("fps", ["1e-300", "-1", "nan", "inf", "1e9"])
def test_play_refuses_a_frame_rate_outside_its_bounds_in_one_line(trained_run, fps):
    run_dir, _ = trained_run
    result = runner.invoke(app, ["play", str(run_dir / "model.zip"), "--fps", fps])
    assert result.exit_code == 2
    assert "fps must be 0 (no wait) or from 0.0167 (a frame a minute) to 1000" in result.output
    assert "Traceback" not in result.output


def test_a_slow_frame_rate_within_the_bounds_waits_at_most_a_minute_a_frame(monkeypatch):
    import io

    from sb3_snake.envs.render import MIN_FPS, draw_text

    waits = []
    monkeypatch.setattr("time.sleep", waits.append)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    draw_text("frame", out=Terminal(), fps=MIN_FPS)
    assert waits == [pytest.approx(60.0)]
