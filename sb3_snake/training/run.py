"""A training run, top to bottom: settings, run folder, model, logging, callbacks, learn, summary, save.

:func:`train` is what ``sb3-snake train`` calls; a Python user gets the same run with
``train(TrainConfig(...))`` (the settings read as the CLI reads them, or given). :class:`TrainConfig` declares every
option once (value, one-line help, group), and the CLI builds its options from it.

Resuming: :func:`~sb3_snake.training.resume.resume_config` gives the config a saved model
trained with, changed by what the caller asks; :func:`train` applies the whole config to the
loaded model (what cannot change, such as the board or the network's shape, is refused), and
the summary records what the model really trained with, read back from the model.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.logger import HumanOutputFormat, KVWriter, Logger, TensorBoardOutputFormat
from stable_baselines3.common.utils import get_latest_run_id

from sb3_snake.acceleration.description import summary_lines
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.autotune import resolve_auto
from sb3_snake.common.console import plain_console
from sb3_snake.common.errors import OutputError, TrainingDiverged
from sb3_snake.common.paths import check_writable_dir
from sb3_snake.common.system import capabilities, resolve_device
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.envs import BatchedSnakeVecEnv
from sb3_snake.persistence import (
    legacy_replay_buffer_path,
    load_model,
    replay_buffer_path,
    write_json,
)
from sb3_snake.pqn import PQN
from sb3_snake.training.callbacks import EpisodeRecord, RunCallbacks, RunCancelled, StopRequest
from sb3_snake.training.config import MAX_TIMESTEPS, POLICY_ALIASES_BY_OPTION, TrainConfig
from sb3_snake.training.learners import learner
from sb3_snake.training.memory import check_memory
from sb3_snake.training.roles import DEFAULT_LEARNER
from sb3_snake.training.run_directory import claim_run_directory
from sb3_snake.training.run_files import PROGRESS_NAME, ProgressCSV, check_run_files
from sb3_snake.training.summary import Outcome, batch_size_source, build_summary, save_run, trained_hyperparameters
from sb3_snake.training.tracking import WandbOptions, WandbOutput, WandbRun, resolve_mode


def train(
    config: TrainConfig,
    settings: OptimizationSettings | None = None,
    run_dir: Path | None = None,
    *,
    resume: Path | None = None,
    trust_model: bool = False,
    overwrite: bool = False,
    wandb_options: WandbOptions = WandbOptions(),  # noqa: B008 - frozen, so one shared default is safe
    stop: StopRequest | None = None,
    callbacks: list[BaseCallback] | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Train until the first limit of ``config`` (episodes, env steps, wall time) or ``stop``.

    Writes ``model.zip``, ``summary.json`` and ``episodes.json`` into ``run_dir`` (a new folder
    under ``runs/`` when ``None``), plus ``checkpoint.zip`` every ``config.checkpoint_every``
    episodes and ``best_model.zip`` when ``config.select_every`` is set, and returns the summary.
    As training goes it writes the files SB3's tools read: ``monitor.csv``, ``progress.csv`` and,
    with evaluations on the clock, ``evaluations.npz`` (:mod:`sb3_snake.training.run_files`).
    A loss that becomes NaN stops the run: the summary is written, ``model.zip`` is not (the
    last checkpoint stays the last good model), and :class:`TrainingDiverged` is raised.
    ``callbacks`` (SB3 callbacks) run after the run's own, as with ``learn(callback=...)``.
    ``settings`` ``None`` reads them as the CLI does without flags (:meth:`OptimizationSettings.load`).
    """
    settings = settings if settings is not None else OptimizationSettings.load()
    console, stop, resumed = console or plain_console(), stop or StopRequest(), resume is not None
    # Bad input refused before any ``auto`` is measured, then ``auto`` measured (or read from its cache).
    check_before_measuring(config)
    config, settings = resolve_settings(config, settings, console)
    with claim_run_directory(run_dir, overwrite=overwrite, resuming=resumed, keep=_kept(resume)) as run_dir:
        check_run_files(run_dir, tensorboard_folder(config, run_dir, resumed))  # what it would continue or write
        # The model, what it shows, and where it logs.
        model = build_model(config, settings, resume, trust_model)
        print_configuration(model, config, run_dir, console)
        tracking = open_tracking(wandb_options, run_config(model, config), run_dir, console)
        model.set_logger(build_logger(config, run_dir, tracking, console, resumed=resumed))
        record_optimizations(model)
        # Callbacks, learn, then the summary and the files, the summary last.
        threads = model.active_optimizations.adaptive_threads
        run_callbacks = RunCallbacks.build(config, run_dir, tracking, stop, console, threads, extra=callbacks or [])
        try:
            outcome = learn(model, config, run_callbacks, stop, resumed=resumed)
            summary = build_summary(model, config, run_callbacks, outcome)
            summary.update(run_dir=str(run_dir), resumed_from=str(resume) if resume else None, wandb_mode=tracking.mode)
            save_run(model, run_dir, summary, run_callbacks.record, config.save_replay_buffer, outcome.diverged is None)
        except OutputError as error:  # a full disk: what was saved before stays whole, and is named
            _save_what_fits(run_dir, run_callbacks.record)
            raise OutputError(error.path, error.reason, error.errno, note=_last_good(run_dir)) from None
        tracking.finish({key: value for key, value in summary.items() if isinstance(value, (int, float, str))})
        stop.phase = "finished"
    if outcome.diverged is not None:
        diverged = outcome.diverged
        raise TrainingDiverged(f"{diverged.message}; model.zip was not written, {_last_good(run_dir)}", diverged.fix)
    return summary


def _kept(resume: Path | None) -> tuple[Path, ...]:
    if resume is None:
        return ()
    return (Path(resume), replay_buffer_path(resume), legacy_replay_buffer_path(resume))


def _save_what_fits(run_dir: Path, record: EpisodeRecord) -> None:
    """The episodes so far, if the disk still takes them (a small file, and the curve of the run)."""
    try:
        write_json(run_dir / "episodes.json", asdict(record))
    except OSError:
        pass


def _last_good(run_dir: Path) -> str:
    checkpoint = run_dir / "checkpoint.zip"
    if checkpoint.is_file():
        return f"the last good checkpoint is {checkpoint}"
    return "and no checkpoint was written (checkpoint_every saves one)"


# ---------------------------------------------------------------------- settings


def check_before_measuring(config: TrainConfig) -> None:
    """Refuse a batch the buffer cannot hold, or a run that cannot fit in memory (with the largest
    batch ``auto`` could choose), before anything is measured (a PQN batch that does not divide
    the rollout is the config's own refusal)."""
    learner(config.algo).check(config)
    check_memory(config)


def resolve_settings(
    config: TrainConfig, settings: OptimizationSettings, console: Console | None = None, allow_measure: bool = True
) -> tuple[TrainConfig, OptimizationSettings]:
    """``config``'s batch size and ``settings`` with each ``auto`` measured on this machine for
    this run's learner and policy (or read from the cache of an earlier measurement; without
    ``allow_measure``, the unmeasured values where nothing is cached):
    :func:`sb3_snake.autotune.resolve_auto`; the batch size's source says how."""
    notify = (lambda line: console.print(line, highlight=False, soft_wrap=True)) if console else (lambda line: None)
    device = resolve_device(config.device)
    settings, batch_size, batch_source = resolve_auto(
        settings,
        config.batch_size,
        device,
        learner(config.algo).network(config),
        config.board_size,
        max_batch_size=config.max_batch_size,
        countdown=config.countdown,
        progress=notify,
        learner=config.algo,
        rollout=(config.n_envs, config.rollout_steps) if config.batches_from_rollout else None,
        allow_measure=allow_measure,
    )
    if batch_source is not None:
        config = replace(config, batch_size=batch_size, sources={**config.sources, "batch_size": batch_source})
    return config, settings


# ---------------------------------------------------------------------- the model


def build_model(
    config: TrainConfig | None = None,
    settings: OptimizationSettings | None = None,
    resume: Path | None = None,
    trusted: bool = False,
) -> SnakeDQN | PQN:
    """The env and model ``sb3-snake train`` trains for ``config`` (``None``: its defaults), with
    ``auto`` settings resolved (measured on this machine, or read from the cache): a new one, or
    one resumed from a checkpoint (with its saved replay buffer, and the config applied).

    ``settings`` ``None`` reads them as the CLI does without flags
    (:meth:`OptimizationSettings.load`: environment, then ``.env``, then the defaults). What
    ``train`` adds around the model is the run: its limits, folder, logging, callbacks and files.
    ``config.algo`` chooses the learner: :class:`SnakeDQN` with the attention policy, or
    :class:`~sb3_snake.pqn.pqn.PQN` with ``config.policy``; a resumed model is the learner it was saved as.
    """
    config = config if config is not None else TrainConfig()
    settings = settings if settings is not None else OptimizationSettings.load()
    device = resolve_device(config.device)
    config, settings = resolve_settings(config, settings)
    env, trains = build_env(config), learner(config.algo)
    if resume is None:
        policy, kwargs = trains.arguments(config)
        return trains.model_class(policy, env, optimizations=settings, device=device, **kwargs)
    model = load_model(resume, settings, trusted=trusted, env=env, device=device, for_training=True)
    trains.resume(model, config, Path(resume), trusted)
    return model


def build_env(config: TrainConfig, n_envs: int | None = None) -> BatchedSnakeVecEnv:
    """The games ``sb3-snake train`` plays for ``config`` (``n_envs`` of them: default, the config's),
    on the CPU: its board, channels, view, stall growth, long starts and seed."""
    return BatchedSnakeVecEnv(
        config.n_envs if n_envs is None else n_envs,
        board_size=config.board_size,
        device="cpu",
        seed=config.seed,
        countdown=config.countdown,
        stall_growth=config.stall_growth,
        long_starts=config.long_starts,
        egocentric=config.egocentric,
        reachable=config.reachable,
    )


# ---------------------------------------------------------------------- what the run shows and logs


def learner_line(config: TrainConfig) -> str:
    """The learner and its network in words, and whether it is the default: ``PQN (MlpPolicy; the
    default learner)``."""
    name = learner(config.algo).name
    why = "the default learner" if config.algo == DEFAULT_LEARNER else "--algo " + config.algo
    return f"{name} ({POLICY_ALIASES_BY_OPTION[config.policy]}; {why})"


def population_line(config: TrainConfig) -> str:
    """``--population`` in words: its learners, their games, and when they are ranked."""
    return (
        f"{config.population} learners of {config.n_envs} games each, ranked every "
        f"{config.population_interval:,} env steps of each; the best is saved"
    )


def print_configuration(model: SnakeDQN | PQN, config: TrainConfig, run_dir: Path, console: Console) -> None:
    """The configuration summary: each optimization as requested and as active, and the run."""
    extra = {
        "learner": learner_line(config),
        "batch size": f"{model.batch_size} (from {batch_size_source(config)})",
        "envs": config.n_envs,
        **({"population": population_line(config)} if config.population > 1 else {}),
        "board size": f"{config.board_size}x{config.board_size}",
        "run folder": run_dir,
    }
    for line in summary_lines(model.active_optimizations, extra):
        console.print(line, highlight=False, soft_wrap=True)


def run_config(model: SnakeDQN | PQN, config: TrainConfig) -> dict[str, Any]:
    """What W&B records as the run's config: hyperparameters, optimizations, the machine."""
    return {
        "hyperparameters": trained_hyperparameters(model, config),
        "optimizations": model.active_optimizations.as_dict(),
        "capabilities": capabilities(),
    }


def open_tracking(options: WandbOptions, config: dict[str, Any], run_dir: Path, console: Console) -> WandbRun:
    """A W&B run when ``options.enabled``, else one that never touches W&B."""
    if not options.enabled:
        return WandbRun.off()
    notify = lambda text: console.print(text, highlight=False)  # noqa: E731
    return WandbRun(options.project, resolve_mode(options.mode), config, run_dir, name=run_dir.name, notify=notify)


def build_logger(
    config: TrainConfig, run_dir: Path, tracking: WandbRun, console: Console, resumed: bool = False
) -> Logger:
    """SB3's logger in ``run_dir`` with SB3's own outputs: ``progress.csv`` always (continued on
    resume), stdout with ``verbose`` (the run's own progress line is the console otherwise),
    TensorBoard with ``tensorboard_log`` (numbered ``<run>_<n>`` as SB3 numbers them), and W&B when active."""
    outputs: list[KVWriter] = [ProgressCSV(run_dir / PROGRESS_NAME)]
    if config.verbose:
        outputs.append(HumanOutputFormat(console.file))
    folder = tensorboard_folder(config, run_dir, resumed)
    if folder is not None:
        outputs.append(TensorBoardOutputFormat(str(folder)))
    if tracking.active:
        outputs.append(WandbOutput(tracking))
    return Logger(folder=str(run_dir), output_formats=outputs)


def tensorboard_folder(config: TrainConfig, run_dir: Path, resumed: bool) -> Path | None:
    """The folder SB3's TensorBoard output writes (``<run>_<n>``, numbered as SB3 numbers them;
    a resumed run continues its last), or None without ``tensorboard_log``."""
    if not config.tensorboard_log:
        return None
    check_writable_dir(Path(config.tensorboard_log), "TensorBoard folder", create=True)
    latest = get_latest_run_id(config.tensorboard_log, run_dir.name)
    number = latest if resumed and latest > 0 else latest + 1
    return Path(config.tensorboard_log) / f"{run_dir.name}_{number}"


def record_optimizations(model: SnakeDQN | PQN) -> None:
    """Which optimizations are in effect as training starts, once, in SB3's logger: each
    ``optimizations/<name>`` 1 or 0 (a compile deferred to a later gradient step is 0 here;
    ``summary.json`` has what was in effect at the end), and the device and attention kernel as
    text, which SB3's CSV, TensorBoard and stdout outputs take (W&B's output keeps numbers only)."""
    active = model.optimizations_in_effect().as_dict()
    for key, value in active.items():
        if key.endswith("_active"):
            model.logger.record(f"optimizations/{key.removesuffix('_active')}", int(value))
    for key in ("device", "sdpa_backend"):
        model.logger.record(f"optimizations/{key}", str(active[key]))


# ---------------------------------------------------------------------- callbacks and learning


def learn(
    model: SnakeDQN | PQN, config: TrainConfig, callbacks: RunCallbacks, stop: StopRequest, resumed: bool
) -> Outcome:
    """``model.learn`` until a callback stops it; wall time and env steps of this run only."""
    if stop.requested:
        raise RunCancelled(f"{stop.reason} before training started; nothing was trained or saved")
    stop.phase, diverged = "training", None
    start = callbacks.budget.start_time = time.perf_counter()
    steps_before = model.num_timesteps
    model.update_interrupt = callbacks.budget.interrupts_updates  # a long update ends within a second of a stop
    try:
        model.learn(
            MAX_TIMESTEPS,
            callback=CallbackList(callbacks.all),
            reset_num_timesteps=not resumed,
            # SB3's count: episodes for DQN (one line per round of games), rollouts for PQN.
            log_interval=learner(config.algo).log_interval(config),
        )
    except TrainingDiverged as error:
        diverged = error
    finally:
        model.update_interrupt = None
        callbacks.progress.close()
        callbacks.monitor.close()
        model.logger.close()  # progress.csv, and TensorBoard's events flushed
        if callbacks.threads is not None:
            callbacks.threads.close()
        stop.phase = "saving"
    return Outcome(time.perf_counter() - start, model.num_timesteps - steps_before, diverged)
