"""One run of a system and a seed, in a process of its own: started fresh with the clock already
running, trained with checkpoints on that clock (or every so many env steps), its result written
back as JSON. Several may run at once, each waited on by a thread of the parent, and
:func:`stop_runs` stops them all. Plain SB3's ``total_timesteps`` on a budget of minutes comes
from a short calibration run."""

from __future__ import annotations

import contextlib
import faulthandler
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from sb3_snake.benchmark.learning.clock import Checkpoints, Stopwatch

#: Seconds of plain SB3 learning whose env steps/s sets its ``total_timesteps``.
CALIBRATION_SECONDS = 10.0


@dataclass(frozen=True)
class RunSpec:
    """One run: its system, seed and board, its budget and checkpoints, and where it writes."""

    system: str
    seed: int
    budget: float  #: where training stops, in ``budget_unit``
    every: float  #: the distance between checkpoints, in ``budget_unit``
    board_size: int
    directory: str
    env_file: str | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    total_timesteps: int | None = None  #: plain_sb3 only: what its exploration schedule spans
    budget_unit: str = "seconds"  #: counted ``seconds`` or ``env_steps`` (:data:`~.clock.BUDGET_UNITS`)
    threads: int | None = None  #: torch threads; None: sb3_snake's settings', torch's own for the others

    def checkpoints(self, stopwatch: Stopwatch, directory: Path, save: Callable[[Any, Path], None]) -> Checkpoints:
        """The callback that saves this run's checkpoints into ``directory`` and stops it at the budget."""
        return Checkpoints(stopwatch, self.every, self.budget, directory, save, by=self.budget_unit)


class RunFailed(RuntimeError):
    """A run's process ended without its result (an error, or a crash such as a segmentation
    fault); the message says how it ended and where its output is."""


#: The run processes alive now, by pid, so that a parent running several at once can stop them
#: all (:func:`stop_runs`); the lock also keeps one thread's environment for its process's start
#: out of another's.
_RUNNING: dict[int, BaseProcess] = {}
_RUNNING_LOCK = threading.Lock()


def run_in_process(spec: RunSpec, cache_dir: str | None) -> dict[str, Any]:
    """Train ``spec`` in a fresh process (spawned); the clock starts before the process does.
    Safe to call from several threads at once, a run each.

    ``cache_dir``: a folder for the run's own compile and auto-settings caches (None: the user's).
    """
    result_path = Path(spec.directory) / "run.json"
    result_path.parent.mkdir(parents=True, exist_ok=True)
    caches = {"TORCHINDUCTOR_CACHE_DIR": None, "SB3_SNAKE_CACHE_DIR": None}
    if cache_dir is not None:
        caches = {"TORCHINDUCTOR_CACHE_DIR": f"{cache_dir}/inductor", "SB3_SNAKE_CACHE_DIR": f"{cache_dir}/sb3-snake"}
    start = time.time()
    with _RUNNING_LOCK, _environment(**caches):
        process = multiprocessing.get_context("spawn").Process(
            target=_run_and_write, args=(asdict(spec), start, str(result_path))
        )
        process.start()
        _RUNNING[process.pid] = process
    try:
        process.join()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM turned into it: no run trains on, orphaned
        _stop(process)
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING.pop(process.pid, None)
    if process.exitcode != 0 or not result_path.is_file():
        code = process.exitcode
        how = f"exit code {code}" + (f": {_signal_name(-code)}" if code is not None and code < 0 else "")
        raise RunFailed(
            f"the {spec.system} run of seed {spec.seed} failed ({how}); "
            f"its output is in {Path(spec.directory) / 'train.log'}"
        )
    return json.loads(result_path.read_text())


def stop_runs() -> None:
    """Stop every run process of :func:`run_in_process` still alive: what a parent interrupted
    while other threads wait on its runs does, so that none trains on, orphaned."""
    with _RUNNING_LOCK:
        processes = list(_RUNNING.values())
    for process in processes:
        _stop(process)


def _stop(process: BaseProcess) -> None:
    process.terminate()
    process.join(10)
    if process.is_alive():
        process.kill()
        process.join()


def compile_cache_state(cache_dir: str | None) -> str:
    """``cold`` when the compile cache ``cache_dir`` (None: torch's default) is empty or missing."""
    if cache_dir is None:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()
    path = Path(cache_dir)
    return "warm" if path.is_dir() and any(path.iterdir()) else "cold"


def _signal_name(number: int) -> str:
    """``SIGSEGV`` for 11; the number itself for a signal the enum does not name (a real-time one)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@contextlib.contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    """Environment variables set (None: left as they are) for processes started inside."""
    previous = {key: os.environ.get(key) for key in values}
    os.environ.update({key: value for key, value in values.items() if value is not None})
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run_and_write(spec: dict[str, Any], start: float, result_path: str) -> None:
    from sb3_snake.common.system import import_compiler_despite_cache

    faulthandler.enable()  # a native crash prints every thread's stack (the parent names the log)
    import_compiler_despite_cache()  # this process's own entry point, as the CLI's is
    try:
        result = run_system(RunSpec(**spec), Stopwatch(start))
    except KeyboardInterrupt:
        # Ctrl-C reaches the whole process group; the parent says what happened, in one line.
        raise SystemExit(130) from None
    Path(result_path).write_text(json.dumps(result, indent=2) + "\n")


def run_system(spec: RunSpec, stopwatch: Stopwatch) -> dict[str, Any]:
    """Train one system for the budget on ``stopwatch``, saving checkpoints; runs in the child.

    ``startup_seconds`` in the result is the counted time already gone when this starts: the
    process's start and its imports, when the clock began in the parent.
    """
    startup_seconds = stopwatch.elapsed()
    directory = Path(spec.directory)
    checkpoints_dir = directory / "checkpoints"
    checkpoints_dir.mkdir(parents=True, exist_ok=True)
    trainers = {
        "sb3_snake": _train_sb3_snake,
        "plain_sb3": _train_plain_sb3,
        "sb3_ppo": _train_sb3_ppo,
        "pqn": _train_pqn,
    }
    trainer = trainers[spec.system]
    with open(directory / "train.log", "w") as log:
        result = trainer(spec, stopwatch, checkpoints_dir, log)
    return {"system": spec.system, "seed": spec.seed, "startup_seconds": startup_seconds, **result}


def sb3_snake_config(spec: RunSpec) -> Any:
    """The :class:`~sb3_snake.training.config.TrainConfig` an sb3_snake run trains with: the
    spec's hyperparameters over ``.env``'s batch size and the defaults, with the spec's seed and
    board; one UsageError for a value that cannot work, as ``train --hyperparams`` gives."""
    from sb3_snake.training.hyperparameters import check_hyperparameters
    from sb3_snake.training.options import load_config

    # The budget is the checkpoints' to enforce; the config's limit is only a backstop.
    if spec.budget_unit == "seconds":
        backstop: dict[str, Any] = {"time_limit_minutes": 2 * spec.budget / 60}
    else:
        backstop = {"timesteps": 2 * int(spec.budget)}
    return load_config(
        spec.env_file,
        **{**check_hyperparameters(spec.hyperparameters), "seed": spec.seed, "board_size": spec.board_size},
        **backstop,
    )


def check_sb3_snake_run(spec: RunSpec) -> None:
    """Raise the UsageError ``sb3-snake train`` would for this sb3_snake run (its config, a batch
    the buffer cannot hold, memory), so that a plan is refused before any run starts."""
    from sb3_snake.training.run import check_before_measuring

    check_before_measuring(sb3_snake_config(spec))


def _train_sb3_snake(spec: RunSpec, stopwatch: Stopwatch, checkpoints_dir: Path, log: Any) -> dict[str, Any]:
    import torch

    from sb3_snake.acceleration.optimizations import threads_for, torch_threads
    from sb3_snake.acceleration.settings import OptimizationSettings
    from sb3_snake.common.console import plain_console
    from sb3_snake.persistence import save_model
    from sb3_snake.training.run import train

    settings = OptimizationSettings.load(spec.env_file, num_threads=spec.threads)
    config = sb3_snake_config(spec)
    threads = threads_for(settings, config.device)
    checkpoints = spec.checkpoints(stopwatch, checkpoints_dir, lambda model, path: save_model(model, path))
    with torch_threads(threads):
        summary = train(
            config,
            settings,
            Path(spec.directory) / "run",
            callbacks=[checkpoints],
            console=plain_console(file=log, width=100),
        )
        threads = torch.get_num_threads()
    return {
        "checkpoints": checkpoints.saved,
        "env_steps": summary["env_steps"],
        "threads": threads,
        "batch_size": summary["hyperparameters"]["batch_size"],
        "optimizations": summary["active"],
    }


def _train_plain_sb3(spec: RunSpec, stopwatch: Stopwatch, checkpoints_dir: Path, log: Any) -> dict[str, Any]:
    import torch
    from stable_baselines3 import DQN

    from sb3_snake.envs import SnakeEnv

    # On the CPU even where a GPU exists, as benchmark.end_to_end does: a 64x64 MLP at batch
    # 32 runs faster there. torch's own thread count, as a user's script would have, unless the
    # plan gives one (runs side by side share the cores).
    model = DQN("MlpPolicy", SnakeEnv(board_size=spec.board_size), seed=spec.seed, device="cpu")
    checkpoints = spec.checkpoints(stopwatch, checkpoints_dir, lambda model, path: model.save(path))
    with _torch_threads(spec.threads):
        model.learn(spec.total_timesteps or 10**12, callback=checkpoints)
        if not checkpoints.saved or checkpoints.saved[-1]["env_steps"] != model.num_timesteps:
            seconds = stopwatch.elapsed()  # total_timesteps came first
            checkpoints.checkpoint(min(seconds, spec.budget) if spec.budget_unit == "seconds" else seconds)
        threads = torch.get_num_threads()
    log.write(f"plain SB3 DQN: {model.num_timesteps} env steps of total_timesteps={spec.total_timesteps}\n")
    return {
        "checkpoints": checkpoints.saved,
        "env_steps": int(model.num_timesteps),
        "threads": threads,
        "total_timesteps": spec.total_timesteps,
    }


def _train_sb3_ppo(spec: RunSpec, stopwatch: Stopwatch, checkpoints_dir: Path, log: Any) -> dict[str, Any]:
    """The peer a user would pick: SB3's PPO with the same attention extractor on the batched
    env, with the RL Zoo settings of :mod:`sb3_snake.zoo.ppo`, on the CPU with torch's threads."""
    import torch
    from stable_baselines3 import PPO

    from sb3_snake.envs import BatchedSnakeVecEnv
    from sb3_snake.zoo import ENV_ID
    from sb3_snake.zoo.ppo import hyperparams

    settings = dict(hyperparams[ENV_ID])
    n_envs, policy = settings.pop("n_envs"), settings.pop("policy")
    settings.pop("n_timesteps")
    env = BatchedSnakeVecEnv(n_envs, board_size=spec.board_size, seed=spec.seed)
    model = PPO(policy, env, seed=spec.seed, device="cpu", **settings)
    checkpoints = spec.checkpoints(stopwatch, checkpoints_dir, lambda model, path: model.save(path))
    with _torch_threads(spec.threads):
        model.learn(10**12, callback=checkpoints)
        threads = torch.get_num_threads()
    log.write(f"SB3 PPO: {model.num_timesteps} env steps\n")
    return {"checkpoints": checkpoints.saved, "env_steps": int(model.num_timesteps), "threads": threads}


#: What the ``pqn`` system trains: ``sb3-snake train --algo pqn`` with PQN's defaults.
PQN_HYPERPARAMETERS = {"algo": "pqn"}


def _train_pqn(spec: RunSpec, stopwatch: Stopwatch, checkpoints_dir: Path, log: Any) -> dict[str, Any]:
    """``sb3-snake train --algo pqn``: the sb3_snake run (its game, settings, threads and files)
    with PQN as the learner and its defaults (:data:`PQN_HYPERPARAMETERS`)."""
    return _train_sb3_snake(replace(spec, hyperparameters=PQN_HYPERPARAMETERS), stopwatch, checkpoints_dir, log)


def _torch_threads(count: int | None) -> contextlib.AbstractContextManager[None]:
    """torch's thread count set to ``count`` inside; None: left as torch chose it."""
    from sb3_snake.acceleration.optimizations import torch_threads

    return contextlib.nullcontext() if count is None else torch_threads(count)


def calibrate_plain_sb3(seconds: float = CALIBRATION_SECONDS, board_size: int = 10) -> float:
    """Env steps/s of plain SB3 DQN learning with its defaults (a throwaway model)."""
    from stable_baselines3 import DQN

    from sb3_snake.envs import SnakeEnv

    model = DQN("MlpPolicy", SnakeEnv(board_size=board_size), seed=0, device="cpu")
    stopwatch = Stopwatch(time.time())
    stop = Checkpoints(stopwatch, every=float("inf"), budget=seconds, directory=Path(), save=lambda *_: None)
    model.learn(10**12, callback=stop)
    return model.num_timesteps / max(stopwatch.elapsed(), 1e-9)
