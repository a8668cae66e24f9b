"""The run folder's files that SB3's own tools read: monitor.csv (``load_results``,
``results_plotter``), progress.csv (SB3's CSV output, with the greedy evaluations as
``EvalCallback`` records them), evaluations.npz (``EvalCallback``'s file), each continued by a
resumed run."""

import json
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
from sb3_snake.training.run_directory import RunDirectoryError, claim_run_directory
from sb3_snake.training.run_files import EvaluationsFile, MonitorFile, ProgressCSV
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
    path.write_text("a,b\n1,2\n3,")  # the last row cut off by a kill
    output = ProgressCSV(path)
    output.write({"a": 5, "c": "x"}, {"a": None, "c": None})
    output.close()
    assert path.read_text() == 'a,b,c\n1,2,\n5,,"x"\n'


def test_a_file_the_resumed_run_cannot_continue_is_refused_in_one_line(tmp_path):
    five_games = {"results": [[0.0] * 5], "ep_lengths": [[1] * 5], "successes": [[False] * 5]}
    np.savez(tmp_path / "evaluations.npz", timesteps=[1], **five_games)
    with pytest.raises(UsageError, match="into another folder; pass select_episodes=5 or change run_dir"):
        EvaluationsFile(tmp_path / "evaluations.npz", games=GAMES)
    (tmp_path / "monitor.csv").write_text("r,l,t\n1,2,3\n")  # no header line
    with pytest.raises(UsageError, match="not a monitor.csv of sb3-snake"):
        MonitorFile(tmp_path / "monitor.csv")


def test_the_sb3_files_mark_a_folder_as_holding_a_run(tmp_path):
    (tmp_path / "monitor.csv").write_text("#{}\n")
    (tmp_path / "evaluations.npz").write_bytes(b"")
    with pytest.raises(RunDirectoryError, match=r"already holds a run \(monitor.csv, evaluations.npz\)"):
        with claim_run_directory(tmp_path):
            pass
    with claim_run_directory(tmp_path, overwrite=True):
        assert not (tmp_path / "monitor.csv").exists() and not (tmp_path / "evaluations.npz").exists()
