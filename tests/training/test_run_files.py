"""The run folder's files that SB3's own tools read: monitor.csv (``load_results``,
``results_plotter``), progress.csv (SB3's CSV output, with the greedy evaluations as
``EvalCallback`` records them), evaluations.npz (``EvalCallback``'s file), each continued by a
resumed run."""

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from stable_baselines3.common import results_plotter
from stable_baselines3.common.callbacks import EvalCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.monitor import load_results

from sb3_snake.common.errors import UsageError
from sb3_snake.envs import BatchedSnakeVecEnv
from sb3_snake.envs.rules import board_options
from sb3_snake.persistence import load_model
from sb3_snake.training.evaluation import egocentric
from sb3_snake.training.run import train
from sb3_snake.training.run_files import ProgressCSV
from tests.conftest import FAST, tiny_config

#: Greedy games per evaluation; the run's evaluation at the end of training plays them.
GAMES = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny run whose one greedy evaluation is the one at the end of training (--eval-every's default)."""
    run_dir = tmp_path_factory.mktemp("run")
    summary = train(tiny_config(select_episodes=GAMES), FAST, run_dir)
    return run_dir, summary


def in_file_order(frame: pd.DataFrame) -> pd.DataFrame:
    # load_results sorts by time, and games that end in one step share it; "index" is the row in the file.
    return frame.sort_values("index")


def test_monitor_csv_holds_the_episodes_of_episodes_json_as_load_results_reads_them(run):
    run_dir, summary = run
    episodes = json.loads((run_dir / "episodes.json").read_text())
    frame = in_file_order(load_results(str(run_dir)))
    assert len(frame) == summary["episodes"] == len(episodes["lengths"]) == 12
    assert frame["l"].tolist() == episodes["lengths"] and frame["score"].tolist() == episodes["scores"]
    assert frame["long_start"].tolist() == episodes["long_starts"] and frame["t"].is_monotonic_increasing
    assert frame["l"].sum() <= summary["total_env_steps"]


def test_progress_csv_has_the_greedy_evaluation_and_the_optimizations(run):
    run_dir, summary = run
    progress = pd.read_csv(run_dir / "progress.csv")
    evaluations = progress.dropna(subset=["eval/mean_reward"])
    assert len(evaluations) == 1
    row, last = evaluations.iloc[0], summary["last_evaluation"]
    saved = np.load(run_dir / "evaluations.npz")
    assert row["time/total_timesteps"] == last["env_steps"] and row["eval/mean_score"] == last["mean_score"]
    assert row["eval/mean_reward"] == pytest.approx(saved["results"].mean())
    assert row["eval/mean_ep_length"] == pytest.approx(saved["ep_lengths"].mean())
    assert row["eval/success_rate"] == last["wins"] / GAMES
    assert progress["optimizations/torch_compile"].dropna().tolist() == [0]  # once, as training starts
    assert progress["optimizations/device"].dropna().tolist() == ["cpu"]
    assert "train/loss" in progress and "rollout/ep_rew_mean" in progress  # SB3's own metrics too


def test_evaluations_npz_is_what_sb3s_eval_callback_writes(run, tmp_path):
    run_dir, summary = run
    ours = np.load(run_dir / "evaluations.npz")
    assert ours["timesteps"].tolist() == [summary["last_evaluation"]["env_steps"]]
    assert ours["results"].shape == ours["ep_lengths"].shape == ours["successes"].shape == (1, GAMES)
    assert ours["successes"].sum() == summary["last_evaluation"]["wins"]
    # SB3's EvalCallback on the same model, for its keys, dtypes and shapes.
    model = load_model(run_dir / "model.zip", FAST)
    model.set_logger(configure(None, []))
    board = {"board_size": 5, "egocentric": egocentric(model), **board_options(model.observation_space)}
    model.set_env(BatchedSnakeVecEnv(4, **board))
    eval_env = BatchedSnakeVecEnv(1, seed=0, **board)
    callback = EvalCallback(eval_env, n_eval_episodes=GAMES, eval_freq=1, log_path=str(tmp_path), warn=False)
    callback.init_callback(model)
    callback.on_step()
    theirs = np.load(tmp_path / "evaluations.npz")
    assert sorted(ours.files) == sorted(theirs.files)
    for key in theirs.files:
        assert (ours[key].dtype.kind, ours[key].shape) == (theirs[key].dtype.kind, theirs[key].shape), key


@pytest.mark.parametrize("x_axis", results_plotter.POSSIBLE_X_AXES)
def test_results_plotter_plots_the_run_folder(run, x_axis):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib import pyplot

    run_dir, _ = run
    results_plotter.plot_results([str(run_dir)], None, x_axis, "snake")
    (axes,) = pyplot.gcf().axes
    assert len(axes.collections[0].get_offsets()) == 12  # a point per episode; the mean wants 100 episodes
    pyplot.close("all")


def test_a_run_resumed_into_its_folder_continues_the_files(run, tmp_path):
    first_dir, first = run
    run_dir = tmp_path / "run"
    shutil.copytree(first_dir, run_dir)
    second = train(tiny_config(select_episodes=GAMES), FAST, run_dir, resume=run_dir / "model.zip")
    frame = in_file_order(load_results(str(run_dir)))
    assert len(frame) == first["episodes"] + second["episodes"] and frame["t"].is_monotonic_increasing
    evaluations = np.load(run_dir / "evaluations.npz")
    steps = [first["last_evaluation"]["env_steps"], second["last_evaluation"]["env_steps"]]
    assert evaluations["timesteps"].tolist() == steps and steps[0] < steps[1]
    assert evaluations["results"].shape == (2, GAMES)
    progress = pd.read_csv(run_dir / "progress.csv")
    assert progress.dropna(subset=["eval/mean_reward"])["time/total_timesteps"].tolist() == steps
    assert progress["time/total_timesteps"].is_monotonic_increasing


def test_progress_csv_continues_a_file_and_takes_new_columns(tmp_path):
    path = tmp_path / "progress.csv"
    path.write_text("time/total_timesteps,b\n1,2\n3,")  # the last row cut off by a kill
    output = ProgressCSV(path)
    output.write({"time/total_timesteps": 5, "c": "x"}, {"time/total_timesteps": None, "c": None})
    output.close()
    assert path.read_text() == 'time/total_timesteps,b,c\n1,2,\n5,,"x"\n'


def resumed_into_a_copy(run, tmp_path, spoil):
    """Resume the run into a copy of its folder after ``spoil(folder)``: the UsageError it raises,
    and the bytes of every file of the folder before and after (which must not change)."""
    first_dir, _ = run
    run_dir = tmp_path / "run"
    shutil.copytree(first_dir, run_dir)
    spoil(run_dir)
    before = {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file() and not path.is_symlink()}
    with pytest.raises(UsageError) as error:
        train(tiny_config(select_episodes=GAMES), FAST, run_dir, resume=run_dir / "model.zip")
    after = {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file() and not path.is_symlink()}
    assert "\n" not in str(error.value)
    return str(error.value), before, after


def replace_with_folder(name):
    def spoil(run_dir):
        (run_dir / name).unlink()
        (run_dir / name).mkdir()

    return spoil


def read_only(name):
    def spoil(run_dir):
        (run_dir / name).chmod(0o444)

    return spoil


def written(name, data):
    def spoil(run_dir):
        (run_dir / name).write_bytes(data)

    return spoil


@pytest.mark.parametrize(
    ("spoil", "words"),
    [
        (replace_with_folder("progress.csv"), "progress file .*progress.csv is not a regular file"),
        (replace_with_folder("monitor.csv"), "monitor file .*monitor.csv is not a regular file"),
        (read_only("progress.csv"), "progress file .*progress.csv is read-only"),
        (read_only("monitor.csv"), "monitor file .*monitor.csv is read-only"),
        (written("progress.csv", b"\xff\xfe" * 512), "progress file .*progress.csv is not text"),
        (written("progress.csv", b"name,score\nalice,3\nbob,4"), "is not a progress.csv of SB3's logger"),
    ],
    ids=["progress-folder", "monitor-folder", "progress-read-only", "monitor-read-only", "progress-bytes", "other-csv"],
)
def test_a_run_file_the_resumed_run_cannot_continue_is_refused_before_training_and_nothing_changes(
    run, tmp_path, spoil, words
):
    message, before, after = resumed_into_a_copy(run, tmp_path, spoil)
    assert re.search(words, message) and "move it away" in message or "make it writable" in message
    assert after == before  # monitor.csv gained no rows, progress.csv kept its lines


def test_a_progress_csv_that_links_to_another_file_is_not_followed(run, tmp_path):
    users_file = tmp_path / "notes.csv"
    users_file.write_text("mine,keep\n1,2\n3")

    def link(run_dir):
        (run_dir / "progress.csv").unlink()
        (run_dir / "progress.csv").symlink_to(users_file)

    message, _, _ = resumed_into_a_copy(run, tmp_path, link)
    assert "is a symbolic link, which sb3-snake does not write through" in message
    assert users_file.read_text() == "mine,keep\n1,2\n3"


def test_a_file_where_tensorboard_continues_its_folder_is_refused_in_one_line_before_training(run, tmp_path):
    first_dir, _ = run
    run_dir, tensorboard = tmp_path / "run", tmp_path / "tb"
    shutil.copytree(first_dir, run_dir)
    tensorboard.mkdir()
    (tensorboard / "run_1").write_text("not a folder")  # where a resumed run continues its TensorBoard log
    before = (run_dir / "monitor.csv").read_bytes()
    config = tiny_config(select_episodes=GAMES, tensorboard_log=str(tensorboard))
    with pytest.raises(UsageError, match=r"TensorBoard folder .*run_1 is a file, not a folder") as error:
        train(config, FAST, run_dir, resume=run_dir / "model.zip")
    assert "\n" not in str(error.value) and (run_dir / "monitor.csv").read_bytes() == before
