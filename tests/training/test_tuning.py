"""sb3-snake tune: workers sharing a journal file and a real PostgreSQL (SQLite takes the
journal's file lock), pruning, failures, the report, and hyperparameter files."""

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

import sb3_snake.training.evaluation as evaluation
import sb3_snake.training.tuning.trial as trial_run
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.cli import app
from sb3_snake.common.errors import UsageError
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.hyperparameters import check_hyperparameters
from sb3_snake.training.learners import LEARNERS
from sb3_snake.training.tuning import (
    TUNE_SEED_OFFSET,
    TuneConfig,
    finish,
    load_study,
    trial_config,
    tune,
    write_report,
)
from tests.conftest import scripted_games

FAST = OptimizationSettings(use_torch_compile=False, use_bf16=False, num_threads=1)
TINY_TRIAL = TrainConfig(
    algo="dqn", episodes=None, timesteps=48, board_size=4, n_envs=4, learning_starts=16, buffer_size=2048, device="cpu"
)
#: The same tiny trial, as tune's options.
TINY_OPTIONS = ["--algo", "dqn", "--timesteps", "48", "--board-size", "4", "--n-envs", "4", "--eval-episodes", "2"]
TINY_OPTIONS += ["--n-evaluations", "2", "--no-compile", "--no-bf16", "--no-flash-attention", "--threads", "1"]
runner = CliRunner()


def tiny_tune(tmp_path, **changes) -> TuneConfig:
    values = {"study_name": "t", "storage": str(tmp_path / "study.log"), "n_trials": 3, "n_evaluations": 3}
    values.update(eval_episodes=2, trial=TINY_TRIAL, n_startup_trials=0, seed=0)
    return TuneConfig(**{**values, **changes})


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_search_space_covers_the_documented_hyperparameters_and_fits_train():
    trial = optuna.trial.FixedTrial(
        {"learning_rate": 3e-4, "gamma": 0.99, "batch_size": 256, "replay_ratio": 16.0}
        | {"target_update_interval": 1000, "exploration_steps": 5000, "exploration_final_eps": 0.01, "n_steps": 3}
        | {"double_dqn": True, "dueling": False, "symmetry_augmentation": False, "embed_dim": 32, "head_view_dim": 64}
        | {"food_shaping": 0.5, "countdown": True, "reachable": True, "num_layers": 0}
        | {"egocentric": True, "long_starts": 0.1, "stall_growth": 4}
    )
    values = LEARNERS["dqn"].search_space(trial)
    config_values = check_hyperparameters(values)
    assert config_values["batch_size"] == 256  # a learning value like the others, no longer a setting
    TrainConfig(algo="dqn", **config_values)  # every drawn value is a valid config value (tune searches dqn)
    assert set(values) >= {"learning_rate", "gamma", "replay_ratio", "target_update_interval", "exploration_steps"}
    assert {"exploration_final_eps", "n_steps", "double_dqn", "dueling", "symmetry_augmentation"} <= set(values)
    assert {"embed_dim", "num_layers", "head_view_dim", "food_shaping", "countdown", "reachable"} <= set(values)
    assert {"egocentric", "long_starts", "stall_growth"} <= set(values)


def test_pqn_search_space_fits_train():
    trial = optuna.trial.FixedTrial(
        {"learning_rate": 3e-4, "gamma": 0.99, "q_lambda": 0.8, "n_epochs": 2, "batch_size": 64}
        | {"exploration_steps": 10_000, "exploration_final_eps": 0.01, "averaging_half_life": 0}
        | {"food_shaping": 0.5, "policy": "cnn"}
    )
    values = LEARNERS["pqn"].search_space(trial)
    config = TrainConfig(algo="pqn", n_envs=12, **check_hyperparameters(values))
    assert (config.n_epochs, config.q_lambda, config.policy, config.batch_size) == (2, 0.8, "cnn", 64)
    assert config.pqn_kwargs()["n_minibatches"] == 6  # 12 games x 32 moves in minibatches of 64
    assert {"learning_rate", "n_epochs", "q_lambda", "exploration_steps", "averaging_half_life"} <= set(values)


PQN_TRIAL = TrainConfig(algo="pqn", episodes=None, timesteps=256, board_size=4, n_envs=4, device="cpu")


def test_tune_searches_pqn_and_its_best_file_trains_pqn(tmp_path):
    config = tiny_tune(tmp_path, pruner="none", n_trials=1, trial=PQN_TRIAL, n_evaluations=1)
    study = tune(config, FAST, notify=lambda line: None)
    assert [t.state.name for t in study.trials] == ["COMPLETE"], study.trials[0].user_attrs
    assert study.user_attrs["algo"] == "pqn"
    params = study.trials[0].params
    summary = json.loads((config.folder / "trial_0000" / "summary.json").read_text())
    assert summary["learner"]["name"] == "PQN"
    trained = summary["hyperparameters"]
    # Every drawn value trained, learners' defaults among them (policy, exploration, averaging).
    for name in ("n_epochs", "q_lambda", "policy", "exploration_steps", "exploration_final_eps", "averaging_half_life"):
        expected = {"mlp": "MlpPolicy", "cnn": "CnnPolicy", "attention": "AttentionPolicy"}.get(
            params[name], params[name]
        )
        assert trained[name] == expected, name
    write_report(study, config.folder)
    best = json.loads((config.folder / "best_hyperparameters.json").read_text())
    assert best == {"algo": "pqn", "board_size": 4, "n_envs": 4, **study.best_trial.params}
    TrainConfig(**check_hyperparameters(best))  # train --hyperparams reads it as a PQN run


def test_a_pqn_batch_that_does_not_divide_the_rollout_fails_its_trial_with_the_reason(tmp_path, monkeypatch):
    real = LEARNERS["pqn"]
    draws = iter([{"batch_size": 48}, {}])  # 48 does not divide 4 games x 32 moves

    def sample(trial):
        return {**real.search_space(trial), "policy": "mlp", **next(draws)}

    monkeypatch.setattr(trial_run, "learner", lambda algo: replace(real, search_space=sample))
    config = tiny_tune(tmp_path, pruner="none", n_trials=2, trial=PQN_TRIAL, n_evaluations=1)
    study = tune(config, FAST, notify=lambda line: None)
    assert [trial.state.name for trial in study.trials] == ["FAIL", "COMPLETE"]
    assert "batch_size must divide PQN's rollout of 128 samples" in study.trials[0].user_attrs["failure"]


def test_a_study_keeps_its_learner_and_its_games(tmp_path):
    tune(tiny_tune(tmp_path, pruner="none", n_trials=1), FAST, notify=lambda line: None)  # a dqn study
    with pytest.raises(UsageError, match="study t searches the dqn learner's space.*pqn \\(the default learner\\)"):
        tune(tiny_tune(tmp_path, n_trials=1, trial=PQN_TRIAL), FAST, notify=lambda line: None)
    with pytest.raises(UsageError, match="study t plays --n-envs 4, and this run asks for 8: use --n-envs 4"):
        tune(tiny_tune(tmp_path, n_trials=1, trial=replace(TINY_TRIAL, n_envs=8)), FAST, notify=lambda line: None)


def test_a_study_begun_before_tune_had_algo_is_a_dqn_study(tmp_path):
    config = tiny_tune(tmp_path)
    old = load_study(config)  # as an older tune left it: a trial, and no learner recorded
    distribution = optuna.distributions.CategoricalDistribution([8.0, 16.0])
    old.add_trial(
        optuna.trial.create_trial(params={"replay_ratio": 8.0}, distributions={"replay_ratio": distribution}, value=1.0)
    )
    assert "algo" not in old.user_attrs
    write_report(old, config.folder)
    best = json.loads((config.folder / "best_hyperparameters.json").read_text())
    assert best == {"algo": "dqn", "replay_ratio": 8.0, "early_steps": 0}
    with pytest.raises(UsageError, match="searches the dqn learner's space"):
        tune(tiny_tune(tmp_path, n_trials=1, trial=PQN_TRIAL), FAST, notify=lambda line: None)


def scripted_evaluations(monkeypatch, values):
    values = iter(values)
    monkeypatch.setattr(evaluation, "evaluate", lambda *args, **kwargs: scripted_games(next(values)))


def test_a_trial_without_a_budget_trains_the_default_minutes():
    assert trial_config() == TrainConfig(episodes=None, time_limit_minutes=2.0) == TuneConfig().trial
    assert trial_config().algo == "pqn"  # the default learner's space, unless --algo says otherwise
    steps = trial_config(timesteps=500, board_size=6)
    assert (steps.timesteps, steps.time_limit_minutes, steps.episodes, steps.board_size) == (500, None, None, 6)
    both = trial_config(timesteps=500, time_limit_minutes=1.0)
    assert (both.timesteps, both.time_limit_minutes) == (500, 1.0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_trials": 0}, "n_trials must be at least 1, got 0"),
        ({"sampler": "grid"}, "sampler must be one of tpe, random, got 'grid'"),
        ({"study_name": " "}, "study_name must not be empty"),
        ({"trial": TrainConfig(episodes=None)}, "a trial needs a budget"),
        ({"study_name": ".."}, "study_name '..' is not a safe folder name"),
        ({"study_name": "/abs/path"}, "study_name '/abs/path' is not a safe folder name"),
        ({"study_name": "a/../../b"}, "is not a safe folder name"),
    ],
)
def test_a_search_that_cannot_run_is_a_usage_error(changes, message):
    with pytest.raises(UsageError, match=message):
        TuneConfig(**changes)


def test_a_storage_or_study_that_cannot_be_opened_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="give a journal file ending in .log or a URL"):
        load_study(TuneConfig(storage="study.db"))
    with pytest.raises(UsageError, match="no study journal"):
        load_study(TuneConfig(storage=str(tmp_path / "none.log")), create=False)
    load_study(TuneConfig(study_name="other", storage=str(tmp_path / "s.log")))
    with pytest.raises(UsageError, match="no study 'snake' in"):
        load_study(TuneConfig(storage=str(tmp_path / "s.log")), create=False)


def test_a_trial_evaluates_on_its_own_seeds_and_its_final_value_on_the_next(tmp_path, monkeypatch):
    """Every n_evaluations-th of the step budget, and once at the end: new games each time."""
    seeds = []

    def scripted(model, episodes, seed, seed_offset):
        seeds.append(seed_offset + seed)
        return scripted_games(float(len(seeds)))

    monkeypatch.setattr(evaluation, "evaluate", scripted)
    study = tune(tiny_tune(tmp_path, n_trials=1, pruner="none"), FAST, notify=lambda line: None)
    assert seeds == [TUNE_SEED_OFFSET + index for index in range(4)]  # 3 during training (48 steps / 3), 1 final
    trial = study.trials[0]
    assert trial.intermediate_values == {0: 1.0, 1: 2.0, 2: 3.0}
    assert trial.user_attrs["evaluations"] == [1.0, 2.0, 3.0, 4.0] and trial.value == 4.0


def test_a_bad_trial_is_pruned_by_the_median_pruner(tmp_path, monkeypatch):
    # Two trials score 5 at every evaluation; the third scores 0 and is stopped at its second report.
    scripted_evaluations(monkeypatch, [5.0] * 8 + [0.0] * 4)
    lines = []
    study = tune(tiny_tune(tmp_path, pruner="median"), FAST, notify=lines.append)
    states = [trial.state for trial in study.trials]
    assert states == [optuna.trial.TrialState.COMPLETE] * 2 + [optuna.trial.TrialState.PRUNED]
    assert study.trials[2].intermediate_values == {0: 0.0, 1: 0.0} and "pruned after evaluation 2" in str(
        study.trials[2].user_attrs["pruned"]
    )
    assert lines[0].startswith("trial 0: COMPLETE value 5.00 in ") and "learning_rate=" in lines[0]
    assert lines[1] == "best so far: trial 0, value 5.00" and lines[-2].startswith("trial 2: PRUNED")


def test_a_failing_trial_is_recorded_with_its_reason_and_the_study_goes_on(tmp_path, monkeypatch):
    real = LEARNERS["dqn"]
    draws = iter([{"batch_size": 4096}, {}, {}])  # the first cannot fit the 2048-transition buffer

    def sample(trial):
        return {**real.search_space(trial), **next(draws)}

    monkeypatch.setattr(trial_run, "learner", lambda algo: replace(real, search_space=sample))
    study = tune(tiny_tune(tmp_path, pruner="none"), FAST, notify=lambda line: None)
    assert [trial.state.name for trial in study.trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    assert "batch size 4096 is larger than the replay buffer" in study.trials[0].user_attrs["failure"]


def test_concurrent_trials_keep_one_thread_count(tmp_path, monkeypatch):
    # --n-jobs trials share the process's threads, so auto does not adapt within a trial there;
    # a trial of its own does.
    monkeypatch.setattr("sb3_snake.common.system.cpu_cores", lambda: 2)
    scripted_evaluations(monkeypatch, [1.0] * 40)
    auto = replace(FAST, num_threads="auto")
    for n_jobs, expected in ((2, None), (1, [2, 1])):
        config = tiny_tune(tmp_path, study_name=f"jobs{n_jobs}", n_trials=2, n_jobs=n_jobs, pruner="none")
        tune(config, auto, notify=lambda line: None)
        summaries = [json.loads(path.read_text()) for path in sorted(config.folder.glob("trial_*/summary.json"))]
        assert len(summaries) == 2
        assert all((summary["threads"] or {}).get("counts") == expected for summary in summaries)


def test_ctrl_c_marks_the_running_trial_failed_and_the_study_continues(tmp_path):
    config = tiny_tune(tmp_path)
    study = load_study(config)
    trial = study.ask()

    def interrupted() -> float:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finish(study, trial, interrupted, notify=lambda line: None)
    assert study.trials[0].state.name == "FAIL" and study.trials[0].user_attrs["failure"] == "interrupted"
    again = tune(tiny_tune(tmp_path, n_trials=1, pruner="none"), FAST, notify=lambda line: None)
    assert [trial.number for trial in again.trials] == [0, 1] and again.trials[1].state.name == "COMPLETE"


def test_report_files_and_the_hyperparameter_round_trip(tmp_path):
    config = tiny_tune(tmp_path, pruner="none", n_trials=2)
    study = tune(config, FAST, notify=lambda line: None)
    written = {path.name for path in write_report(study, config.folder)}
    assert {"trials.csv", "best_hyperparameters.json", "optimization_history.png"} <= written
    rows = (config.folder / "trials.csv").read_text().splitlines()
    assert rows[0].startswith("number,state,value,duration_seconds,") and len(rows) == 3
    best = json.loads((config.folder / "best_hyperparameters.json").read_text())
    # Trials train one ratio throughout; the study's learner, board and games go with its best values.
    assert best == {"algo": "dqn", "board_size": 4, "n_envs": 4, **study.best_trial.params, "early_steps": 0}
    trial_run = json.loads((config.folder / "trial_0000" / "summary.json").read_text())["hyperparameters"]
    assert trial_run["early_steps"] == 0 and trial_run["replay_ratio"] == study.trials[0].params["replay_ratio"]

    report = runner.invoke(app, ["tune", "--report", "--storage", config.storage, "--study-name", "t"])
    assert report.exit_code == 0, report.output
    assert f"best so far: trial {study.best_trial.number}" in report.output and "wrote " in report.output

    best_file = str(config.folder / "best_hyperparameters.json")
    args = ["train", "--hyperparams", best_file, "--episodes", "2", "--board-size", "4", "--n-envs", "4"]
    args += ["--no-compile", "--learning-starts", "16", "--output", str(tmp_path / "run"), "--learning-rate", "0.0042"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    trained = json.loads((tmp_path / "run" / "summary.json").read_text())["hyperparameters"]
    assert trained["learning_rate"] == 0.0042  # the flag wins over the file
    keys = ("gamma", "batch_size", "n_steps", "double_dqn", "exploration_steps", "dueling", "embed_dim", "early_steps")
    for key in keys:
        assert trained[key] == best[key], key
    assert f"batch size:       {best['batch_size']} (from hyperparams file)" in result.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"learning_rat": 0.001}', "unknown key 'learning_rat'; did you mean learning_rate?"),
        ('{"episodes": 5}', "unknown key 'episodes'"),
        ('{"compile_after": 5}', "unknown key 'compile_after'"),
        ("[1, 2]", "must hold one mapping"),
        ('{"early_steps": "abc"}', "early_steps must be a whole number, got 'abc'"),
        ('{"learning_rate_half_life": 1.5}', "learning_rate_half_life must be a whole number or null, got 1.5"),
        ('{"dueling": 1}', "dueling must be true or false, got 1"),
        ('{"learning_rate": true}', "learning_rate must be a number, got True"),
        ("{not json", "is not valid json"),
    ],
)
def test_a_bad_hyperparameter_file_is_one_line(tmp_path, content, message):
    path = tmp_path / "hyper.json"
    path.write_text(content)
    result = runner.invoke(app, ["train", "--hyperparams", str(path)])
    assert result.exit_code == 2 and message in result.output and result.output.count("\n") == 1, result.output


def test_yaml_hyperparameters_as_rl_zoo_writes_them(tmp_path):
    path = tmp_path / "hyper.yml"
    path.write_text("learning_rate: 0.002\nbatch_size: 64\n")
    from sb3_snake.training.hyperparameters import read_hyperparameters

    assert read_hyperparameters(path) == {"learning_rate": 0.002, "batch_size": 64}


def test_hyperparameter_values_take_their_fields_types():
    """A whole float is a whole number (1e5 as JSON may write it), an int is a number, null where allowed."""
    from sb3_snake.training.hyperparameters import check_hyperparameters

    config_values = check_hyperparameters(
        {"buffer_size": 1e5, "learning_rate": 1, "train_freq": None, "double_dqn": True}
    )
    assert config_values == {"buffer_size": 100_000, "learning_rate": 1, "train_freq": None, "double_dqn": True}
    assert type(config_values["buffer_size"]) is int


# ---------------------------------------------------------------- several workers, one study


def run_two_workers(storage: str, cwd: Path) -> list[subprocess.CompletedProcess]:
    """Two ``sb3-snake tune`` processes at once, 2 trials each at most, 3 in total at most: both
    must contribute, and no trial number may be drawn twice."""
    program = shutil.which("sb3-snake")
    if program is None:
        pytest.skip("sb3-snake is not installed as a program (pip install -e .)")
    command = [program, "tune", "--storage", storage, "--study-name", "shared", "--n-trials", "2"]
    command += ["--max-total-trials", "3", "--pruner", "none", *TINY_OPTIONS]
    workers = [subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    workers.append(subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return [subprocess.CompletedProcess(w.args, w.wait(timeout=300), w.stdout.read(), "") for w in workers]


def assert_shared_study(storage_object, completed):
    for worker in completed:
        assert worker.returncode == 0, worker.stdout
    study = optuna.load_study(study_name="shared", storage=storage_object)
    numbers = [trial.number for trial in study.trials]
    assert sorted(numbers) == [0, 1, 2]  # exactly --max-total-trials, no number twice
    workers = {trial.user_attrs["worker"] for trial in study.trials}
    assert len(workers) == 2  # each ran at most 2 of the 3, so both contributed


@pytest.mark.slow
def test_two_workers_share_one_journal_file(tmp_path):
    journal = tmp_path / "shared.log"
    completed = run_two_workers(str(journal), tmp_path)
    backend = optuna.storages.journal.JournalFileBackend(str(journal))
    assert_shared_study(optuna.storages.JournalStorage(backend), completed)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _postgres_bin() -> Path | None:
    for directory in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (directory / "pg_ctl").exists():
            return directory
    found = shutil.which("pg_ctl")
    return Path(found).resolve().parent if found else None


@pytest.fixture(scope="module")
def postgres_url():
    """A real PostgreSQL server on 127.0.0.1, started for these tests and stopped after them.

    Skips only where no server can be started (no binaries, no driver, no postgres user when
    running as root); CI's machine has all three.
    """
    pytest.importorskip("psycopg2", reason="the PostgreSQL driver is the distributed extra")
    binaries = _postgres_bin()
    if binaries is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    base = Path(tempfile.mkdtemp(prefix="sb3-snake-pg-"))
    base.chmod(0o755)
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres user to run the server as")
        os.chown(base, account.pw_uid, account.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port, data = _free_port(), base / "data"

    def run(*command: str) -> None:
        subprocess.run([*as_user, *command], check=True, capture_output=True, timeout=120)

    try:
        run(str(binaries / "initdb"), "-D", str(data), "--auth=trust", "-U", "postgres")
        options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1"
        run(str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(base / "log"), "-w", "start")
        run(str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "tune")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, FileNotFoundError) as error:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"no PostgreSQL server could be started: {error}")
    yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/tune"
    subprocess.run([*as_user, str(binaries / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True)
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_two_workers_share_one_postgresql_server(tmp_path, postgres_url):
    assert_shared_study(postgres_url, run_two_workers(postgres_url, tmp_path))


# --- hardening: names, storages, journals, drivers, signals ------------------------------------------


def test_two_storages_with_one_study_name_do_not_share_a_folder(tmp_path):
    load_study(TuneConfig(study_name="s", storage=str(tmp_path / "a.log")))
    load_study(TuneConfig(study_name="s", storage=str(tmp_path / "a.log")))  # the same storage again: fine
    with pytest.raises(UsageError, match=r"study folder runs/tune/s holds the study 's' of .*a\.log, not of sqlite"):
        load_study(TuneConfig(study_name="s", storage=f"sqlite:///{tmp_path / 'b.db'}"))
    assert not (tmp_path / "b.db").exists()


def test_the_study_folder_records_no_password(tmp_path):
    from sb3_snake.training.tuning.storage import storage_identity

    url = "postgresql://snake:secret@db-host/tune"
    assert storage_identity(TuneConfig(storage=url)) == "postgresql://snake:***@db-host/tune"


def test_a_torn_last_journal_line_is_cut_off_and_the_study_goes_on(tmp_path, caplog):
    config = tiny_tune(tmp_path, n_trials=1, pruner="none")
    tune(config, FAST, notify=lambda line: None)
    journal = Path(config.storage)
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code": 4, "worker_id": "x", "trial_')  # a worker killed mid-write
    with caplog.at_level("WARNING"):
        again = tune(config, FAST, notify=lambda line: None)
    assert "removed a torn last line" in caplog.text and str(journal) in caplog.text
    assert [trial.state.name for trial in again.trials] == ["COMPLETE", "COMPLETE"]
    assert journal.read_bytes().startswith(whole) and journal.read_bytes().endswith(b"\n")


def test_a_corrupt_journal_line_is_refused_naming_the_file_and_line(tmp_path):
    config = tiny_tune(tmp_path)
    load_study(config)
    journal = Path(config.storage)
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join([lines[0] + b'{"op_code": 4', *lines[1:]]))
    with pytest.raises(UsageError, match=rf"study journal {journal} line 1 is not a complete record"):
        load_study(config)


@pytest.mark.parametrize("kind", ["folder", "unwritable", "fifo"])
def test_an_unusable_journal_path_is_one_line(tmp_path, kind):
    path = {"folder": tmp_path / "dir.log", "unwritable": Path("/proc/sb3-snake/x.log"), "fifo": tmp_path / "f.log"}[
        kind
    ]
    if kind == "folder":
        path.mkdir()
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(UsageError, match=rf"study journal {path} "):
        load_study(TuneConfig(storage=str(path)))


def test_a_missing_database_driver_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "psycopg2", None)  # as if psycopg2 were not installed
    with pytest.raises(UsageError, match=r'needs its database driver .*pip install "sb3-snake\[distributed\]"'):
        load_study(TuneConfig(storage="postgresql://snake:pw@127.0.0.1:1/tune"))


def test_report_on_a_missing_sqlite_database_creates_nothing(tmp_path):
    result = runner.invoke(app, ["tune", "--report", "--storage", f"sqlite:///{tmp_path / 'new.db'}"])
    assert result.exit_code == 2 and "no study database" in result.output
    assert not (tmp_path / "new.db").exists()


@pytest.mark.slow
def test_sigterm_marks_the_running_trial_failed_and_exits_143(tmp_path):
    import signal
    import sys
    import time

    storage = tmp_path / "study.log"
    command = [sys.executable, "-c", "from sb3_snake.cli import main; main()", "tune", "--storage", str(storage)]
    command += ["--study-name", "term"]
    # SnakeDQN's space: every draw of it runs on these tiny games (some of PQN's batch sizes do not
    # divide a 4-game rollout, and a trial that fails at once is not the running trial to stop).
    command += ["--algo", "dqn", "--time-limit", "1", "--board-size", "4", "--n-envs", "4", "--no-compile"]
    command += ["--threads", "1"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _trial_running(storage):
            time.sleep(0.2)
        assert _trial_running(storage), "no trial started"
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143, output
    assert "Traceback" not in output and "marked failed" in output
    backend = optuna.storages.journal.JournalFileBackend(str(storage))
    study = optuna.load_study(study_name="term", storage=optuna.storages.JournalStorage(backend))
    assert [trial.state.name for trial in study.trials] == ["FAIL"]


def _trial_running(journal: Path) -> bool:
    """Whether the journal records a trial's ``worker`` (Optuna's SET_TRIAL_USER_ATTR operation),
    which a worker sets as it takes the trial, just before running it."""
    from optuna.storages.journal._storage import JournalOperation

    if not journal.exists():
        return False
    for line in journal.read_bytes().splitlines():
        try:
            operation = json.loads(line)
        except ValueError:
            continue  # a line being written
        if operation.get("op_code") == JournalOperation.SET_TRIAL_USER_ATTR and "worker" in operation["user_attr"]:
            return True
    return False


# --- workers that die: their trials fail and run again ------------------------------------------


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # retried_trial_number
def test_a_running_trial_whose_worker_is_gone_fails_and_runs_again_once(tmp_path, caplog):
    """On a journal (no heartbeat in Optuna 5) a worker is gone when its process on this machine
    is; a live one, or one on another machine, keeps its trial. The retry takes the failed
    trial's place in --max-total-trials, and the report names what it retries."""
    config = tiny_tune(tmp_path, n_trials=1, max_total_trials=3, pruner="none")
    study = load_study(config)
    finished = subprocess.Popen(["true"])
    finished.wait()
    workers = [f"{socket.gethostname()}:{os.getpid()}", "elsewhere:1", f"{socket.gethostname()}:{finished.pid}"]
    for worker in workers:
        trial = study.ask()
        trial.set_user_attr("worker", worker)
        trial.suggest_float("learning_rate", 1e-4, 2e-3, log=True)
    lines = []
    with caplog.at_level("WARNING"):
        study = tune(config, FAST, notify=lines.append)
    assert [trial.state.name for trial in study.trials] == ["RUNNING", "RUNNING", "FAIL", "COMPLETE"]
    assert lines[0].startswith("trial 3: COMPLETE") and lines[0].endswith(" (retry of trial 2)")
    killed, retry = study.trials[2:]
    assert optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(retry) == 2
    assert retry.params["learning_rate"] == killed.params["learning_rate"]
    assert f"trial 2: its worker {workers[2]} stopped without finishing it; marked FAIL, and queued" in caplog.text
    write_report(study, config.folder)
    rows = (config.folder / "trials.csv").read_text().splitlines()
    assert rows[0].endswith(",failure,retry_of") and rows[3].endswith(",,") and rows[4].endswith(",2")


def _heartbeat_written(url: str) -> bool:
    """Whether the SQLite study of ``url`` holds a heartbeat (Optuna's ``trial_heartbeats`` table)."""
    import sqlite3

    path = Path(url[len("sqlite:///") :])
    if not path.exists():
        return False
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
            return connection.execute("SELECT COUNT(*) FROM trial_heartbeats").fetchone()[0] > 0
    except sqlite3.OperationalError:  # the schema not created yet, or the file locked a moment
        return False


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # retried_trial_number
@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_the_trial_of_a_killed_worker_fails_and_the_next_worker_runs_it_again(tmp_path, kind):
    """A worker killed outright (SIGKILL) cannot mark its trial: the next worker finds it (a
    database by its heartbeat, a journal by the worker's process), marks it FAIL and runs it
    again, and --max-total-trials counts it once."""
    import signal
    import sys
    import time

    storage = str(tmp_path / "study.log") if kind == "journal" else f"sqlite:///{tmp_path / 'study.db'}"
    journal = Path(storage)
    started = (lambda: _trial_running(journal)) if kind == "journal" else (lambda: _heartbeat_written(storage))
    command = [sys.executable, "-c", "from sb3_snake.cli import main; main()", "tune", "--storage", storage]
    command += ["--study-name", "t", "--time-limit", "1", "--algo", "dqn", "--board-size", "4", "--n-envs", "4"]
    command += ["--no-compile", "--threads", "1"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not started():
            time.sleep(0.2)
        assert started(), "no trial started"
    finally:
        process.send_signal(signal.SIGKILL)
        output, _ = process.communicate(timeout=60)  # reaped: no process has its id any more
    assert process.returncode == -signal.SIGKILL, output
    if kind == "sqlite":
        time.sleep(2)  # past the grace period of 1 s on SQLite's clock, which counts whole seconds
    config = tiny_tune(tmp_path, storage=storage, n_trials=1, max_total_trials=1, pruner="none")
    study = tune(config, FAST, notify=lambda line: None, heartbeat_interval=1, grace_period=1)
    assert [trial.state.name for trial in study.trials] == ["FAIL", "COMPLETE"], output
    killed, retry = study.trials
    assert optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(retry) == 0
    assert retry.params.items() >= killed.params.items()  # the hyperparameters drawn before the kill
