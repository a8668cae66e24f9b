"""Where a study lives and how its workers share it: the Optuna storage (a journal file or a
database), the study with its sampler and pruner, the lock under which workers take trials, and
the recovery of a trial whose worker died."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
from optuna.trial import FrozenTrial, TrialState

from sb3_snake.common.errors import UsageError
from sb3_snake.common.paths import check_regular_file
from sb3_snake.common.system import process_gone
from sb3_snake.training.tuning.space import TuneConfig

logger = logging.getLogger(__name__)
#: What a database says when two workers create Optuna's schema at once (the loser opens it again).
_SCHEMA_RACE = ("already exists", "UNIQUE constraint failed", "duplicate key value", "database is locked")

#: Seconds between the heartbeats of a running trial in a database storage. A thread beside the
#: training writes them, so a trial of any length keeps beating; each is one small write, which
#: once a minute costs nothing, even on SQLite, where every write locks the whole file a moment.
HEARTBEAT_INTERVAL = 60
#: Seconds without a heartbeat after which a running trial's worker counts as dead: three
#: intervals, so that a live worker's heartbeat delayed by a busy database or machine is not
#: taken for a death, while a dead worker's trial still runs again within minutes. The
#: database's clock dates both ends, so the workers' clocks need not agree.
GRACE_PERIOD = 3 * HEARTBEAT_INTERVAL
#: Times a trial whose worker died runs again, with the same hyperparameters: once, so that a
#: trial that kills its own worker (out of the machine's memory, say) is not retried for ever.
MAX_RETRY = 1
#: The trial's user attribute naming the worker that runs it, ``host:pid``.
WORKER = "worker"
_Retry = optuna.storages.RetryHeartbeatStaleTrialCallback  # Optuna 4.9's name (before: RetryFailedTrialCallback)


def open_storage(
    config: TuneConfig,
    create: bool = True,
    *,
    heartbeat_interval: int | None = HEARTBEAT_INTERVAL,
    grace_period: int = GRACE_PERIOD,
) -> Any:
    """The Optuna storage of ``config.storage`` (see :mod:`sb3_snake.training.tuning`); a bad
    storage raises :class:`~sb3_snake.common.errors.UsageError`, one line.

    :param config: the search, whose ``storage`` and ``folder`` say where the study lives.
    :param create: a journal file may be created (else it must exist).
    :param heartbeat_interval: seconds between a running trial's heartbeats in a database
        (None: none; a journal has none in Optuna 5, see :func:`fail_stale_trials`).
    :param grace_period: seconds without a heartbeat after which a trial's worker counts as dead.
    """
    storage = config.storage
    if storage is None or ("://" not in storage and storage.endswith(".log")):
        path = Path(storage) if storage else config.folder / "journal.log"
        check_regular_file(path, "study journal")
        if not create and not path.is_file():
            raise UsageError(f"no study journal {path} (run a study first)", fix={"storage": "set"})
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            backend = JournalFileBackend(str(path))
            repair_journal(path, backend)
            return JournalStorage(backend)
        except OSError as error:
            raise UsageError(
                f"study journal {path} cannot be opened ({error.strerror or error}); choose a writable place"
            ) from None
    if "://" not in storage:
        raise UsageError(f"storage {storage!r}: give a journal file ending in .log or a URL such as sqlite:///study.db")
    if not create and storage.startswith("sqlite:///") and not Path(storage[len("sqlite:///") :]).is_file():
        # Opening a missing SQLite file would create it: a report would leave an empty database behind.
        raise UsageError(f"no study database {storage[len('sqlite:///') :]}; run a study first")
    beats: dict[str, Any] = {}
    if heartbeat_interval is not None:
        beats = {"heartbeat_interval": heartbeat_interval, "grace_period": grace_period}
        beats["heartbeat_stale_trial_callback"] = RetryStaleTrial()
    for attempt in range(5):
        try:
            with _heartbeat_warnings_off():
                return optuna.storages.RDBStorage(storage, **beats)
        except ImportError as error:  # the driver (psycopg2, pymysql), however Optuna or SQLAlchemy report it
            driver = getattr(error, "name", None) or error
            raise UsageError(
                f"storage {storage.split('://')[0]}:// needs its database driver ({driver}): "
                'pip install "sb3-snake[distributed]"'
            ) from None
        except Exception as error:  # noqa: BLE001 - a server that cannot be reached, a bad URL
            if not any(sign in str(error) for sign in _SCHEMA_RACE) or attempt == 4:
                raise UsageError(f"storage {storage}: cannot open ({type(error).__name__}: {error})") from None
            time.sleep(0.2 * (attempt + 1))  # another worker was creating the schema: open it again
    raise AssertionError("unreachable")


#: The file in a study's folder that names the storage whose study the folder holds.
STORAGE_MARK = "storage.txt"


def storage_identity(config: TuneConfig) -> str:
    """The storage of ``config``'s study as the study folder records it: an absolute journal path,
    or the URL with any password masked (the folder is no place for secrets)."""
    if config.storage is None:
        return str((config.folder / "journal.log").absolute())
    if "://" not in config.storage:
        return str(Path(config.storage).absolute())
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", config.storage)


def check_study_folder(config: TuneConfig) -> None:
    """Keep one storage's study per folder: two storages with the same study name would write
    their trial models, ``trials.csv`` and ``best_hyperparameters.json`` over each other's. Refuses
    a folder another storage's study holds; writes nothing (see :func:`mark_study_folder`)."""
    mark = config.folder / STORAGE_MARK
    if mark.is_file():
        recorded, identity = mark.read_text(encoding="utf-8", errors="replace").strip(), storage_identity(config)
        if recorded != identity:
            raise UsageError(
                f"study folder {config.folder} holds the study {config.study_name!r} of {recorded}, not of {identity}",
                fix={"study_name": "change", "storage": recorded},
            )


def mark_study_folder(config: TuneConfig) -> None:
    """Record in the study's folder which storage its study lives in, once that storage opened."""
    mark = config.folder / STORAGE_MARK
    if mark.is_file():
        return
    try:
        config.folder.mkdir(parents=True, exist_ok=True)
        mark.write_text(storage_identity(config) + "\n", encoding="utf-8")
    except OSError as error:
        raise UsageError(f"study folder {config.folder} cannot be written ({error.strerror or error})") from None


def repair_journal(path: Path, backend: JournalFileBackend) -> None:
    """Make a journal that a killed worker left torn readable again, or refuse it naming the file.

    Optuna appends one JSON line per operation under the journal's lock. A worker killed while
    writing leaves a last line without its newline; the next worker would append to it and make
    the journal unreadable for good. Under the same lock, such a torn last line (an operation
    that never completed) is cut off with a warning; any other line that is not JSON is refused.
    """
    if not path.is_file() or path.stat().st_size == 0:
        return
    lock = backend._lock  # the lock Optuna's own writers take (no public accessor)
    while not lock.acquire():
        time.sleep(0.01)
    try:
        data = path.read_bytes()
        lines = data.split(b"\n")
        torn = lines.pop()  # after the last newline: empty unless the last line is torn
        for number, line in enumerate(lines, start=1):
            try:
                json.loads(line)
            except ValueError:
                raise UsageError(
                    f"study journal {path} line {number} is not a complete record (a worker killed while writing?); "
                    "remove that line to continue the study"
                ) from None
        if torn:
            with path.open("r+b") as file:
                file.truncate(len(data) - len(torn))
            logger.warning(
                "study journal %s: removed a torn last line (%d bytes) that a killed worker left", path, len(torn)
            )
    finally:
        lock.release()


def make_sampler(config: TuneConfig) -> optuna.samplers.BaseSampler:
    if config.sampler == "random":
        return optuna.samplers.RandomSampler(seed=config.seed)
    return optuna.samplers.TPESampler(n_startup_trials=config.n_startup_trials, seed=config.seed)


def make_pruner(config: TuneConfig) -> optuna.pruners.BasePruner:
    if config.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=config.n_startup_trials, n_warmup_steps=1)
    if config.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def load_study(
    config: TuneConfig,
    create: bool = True,
    *,
    heartbeat_interval: int | None = HEARTBEAT_INTERVAL,
    grace_period: int = GRACE_PERIOD,
) -> optuna.Study:
    """The study in its storage: created on first use (by whichever worker comes first).

    :param create: create the study (and its journal) if missing; else a missing one raises
        :class:`~sb3_snake.common.errors.UsageError`.
    :param heartbeat_interval: and ``grace_period``: as :func:`open_storage` takes them.
    """
    check_study_folder(config)  # before the storage opens: a clash leaves no file behind
    storage = open_storage(config, create, heartbeat_interval=heartbeat_interval, grace_period=grace_period)
    if not create:
        try:
            study = optuna.load_study(study_name=config.study_name, storage=storage)
        except KeyError:
            raise UsageError(f"no study {config.study_name!r} in {config.storage or config.folder}") from None
        mark_study_folder(config)
        return study
    mark_study_folder(config)
    return optuna.create_study(
        study_name=config.study_name,
        storage=storage,
        sampler=make_sampler(config),
        pruner=make_pruner(config),
        direction="maximize",
        load_if_exists=True,
    )


def ask_trial(study: optuna.Study, max_total_trials: int | None) -> optuna.Trial | None:
    """A trial for this worker, its :data:`WORKER` set, or None once the study has
    ``max_total_trials`` (:func:`trials_taken`). Call it under :func:`trial_slot_lock`.

    As ``Study.optimize`` does before each trial, it first fails the trials whose worker died
    (:func:`fail_stale_trials`); a trial queued again that way is the next one asked for.
    """
    fail_stale_trials(study)
    if max_total_trials is not None and trials_taken(study) >= max_total_trials:
        return None
    with _heartbeat_warnings_off():
        trial = study.ask()
    # Set before the lock is released: a retry carries the dead worker's name, which no other
    # worker may read as this trial's.
    trial.set_user_attr(WORKER, f"{socket.gethostname()}:{os.getpid()}")
    return trial


def trials_taken(study: optuna.Study) -> int:
    """The trials that count against ``--max-total-trials``: those asked for, less each one whose
    worker died and that was queued again (its retry counts instead, once asked for)."""
    trials = study.get_trials(deepcopy=False)
    with _heartbeat_warnings_off():
        requeued = {number for trial in trials for number in _Retry.retry_history(trial)}
    return sum(trial.state != TrialState.WAITING and trial.number not in requeued for trial in trials)


def retry_of(trial: FrozenTrial) -> int | None:
    """The number of the trial whose worker died and that ``trial`` runs again, if any."""
    with _heartbeat_warnings_off():
        return _Retry.retried_trial_number(trial)


def fail_stale_trials(study: optuna.Study) -> None:
    """Mark FAIL the running trials whose worker died, and queue each to run again
    (:class:`RetryStaleTrial`). Call it under :func:`trial_slot_lock`.

    A database knows a dead worker by its heartbeat (none for the grace period; Optuna's
    ``fail_stale_trials``). A journal has no heartbeat in Optuna 5, and knows one by its process:
    on this machine and gone (:func:`_worker_gone`); a worker on another machine sharing the
    journal is taken as alive.
    """
    with _heartbeat_warnings_off():
        if not isinstance(study._storage, JournalStorage):  # the storage Optuna opened (no public accessor)
            optuna.storages.fail_stale_trials(study)  # calls the storage's RetryStaleTrial
            return
        retry = RetryStaleTrial()
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if _worker_gone(trial):
                retry(study, study.tell(trial.number, state=TrialState.FAIL))


def heartbeat(study: optuna.Study, trial: optuna.Trial) -> contextlib.AbstractContextManager:
    """Beat for ``trial`` while the block runs, as ``Study.optimize`` does around each trial (a
    thread that writes every ``heartbeat_interval``); nothing where the storage has no heartbeat."""
    from optuna.storages._heartbeat import get_heartbeat_thread  # Study.optimize's, no public name

    return get_heartbeat_thread(trial._trial_id, study._storage)


class RetryStaleTrial:
    """What becomes of a trial whose worker died: Optuna's retry queues it again with the same
    hyperparameters (:data:`MAX_RETRY` times at most), and a warning says so."""

    def __init__(self, max_retry: int = MAX_RETRY) -> None:
        with _heartbeat_warnings_off():
            self.retry = _Retry(max_retry=max_retry)
        self.max_retry = max_retry

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.retry(study, trial)
        again = len(_Retry.retry_history(trial)) < self.max_retry
        logger.warning(
            "trial %d: its worker %s stopped without finishing it; marked FAIL, %s",
            trial.number,
            trial.user_attrs.get(WORKER, "(unknown)"),
            "and queued to run again" if again else f"not run again (retried {self.max_retry} times)",
        )


def _worker_gone(trial: FrozenTrial) -> bool:
    """Whether the process that runs ``trial`` is known to be gone: on this machine, and no process
    has its id. A worker elsewhere, or a trial with no :data:`WORKER`, is taken as alive."""
    host, _, pid = str(trial.user_attrs.get(WORKER, "")).rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and process_gone(int(pid))


@contextlib.contextmanager
def _heartbeat_warnings_off() -> Iterator[None]:
    """Optuna marks its heartbeat and retry experimental, and warns that the heartbeat is meant for
    ``Study.optimize``: tune takes Study.optimize's steps itself (stale trials, ask, heartbeat)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", "Heartbeat of storage is supposed to be used with Study.optimize")
        yield


def trial_slot_lock(config: TuneConfig, study: optuna.Study) -> Callable[[], contextlib.AbstractContextManager]:
    """A lock all workers of the study share, for "count the trials, then ask for one".

    A lock file beside a journal or SQLite file; a PostgreSQL advisory lock; MySQL's GET_LOCK.
    """
    storage = study._storage  # the storage object Optuna opened (public API has no accessor)
    url = config.storage or ""
    if url.startswith(("postgresql", "mysql")):
        return lambda: _database_lock(storage, config.study_name, url.split(":")[0].split("+")[0])
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
    else:
        path = Path(config.storage) if config.storage else config.folder / "journal.log"
    return lambda: _file_lock(path.with_name(path.name + ".trials.lock"))


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    lock = JournalFileOpenLock(str(path))
    while not lock.acquire():
        time.sleep(0.01)
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def _database_lock(storage: Any, study_name: str, dialect: str) -> Iterator[None]:
    from sqlalchemy import text

    key = zlib.crc32(f"sb3-snake tune {study_name}".encode()) & 0x7FFFFFFF
    engine = getattr(storage, "engine", None) or storage._backend.engine  # RDBStorage, possibly cached
    with engine.connect() as connection:
        if dialect == "postgresql":
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
            release = text("SELECT pg_advisory_unlock(:key)")
        else:
            connection.execute(text("SELECT GET_LOCK(:name, 600)"), {"name": f"sb3_snake_{key}"})
            release = text("SELECT RELEASE_LOCK(:name)")
        try:
            yield
        finally:
            connection.execute(release, {"key": key, "name": f"sb3_snake_{key}"})
            connection.commit()
