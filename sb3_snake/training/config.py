"""``TrainConfig``: everything a training run is asked to do, each option declared once with
:func:`~sb3_snake.common.options.option` (value, one-line help, its
:class:`~sb3_snake.training.roles.Role`, the values it takes, and for the batch size its ``.env``
key), from which the CLI builds its options and the library sorts the fields. An option whose
value a model file holds takes the file's range (:func:`option_values`); a run's memory: :mod:`~.memory`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sb3_snake.autotune.search import batch_candidates
from sb3_snake.common.errors import UsageError, divisors_near
from sb3_snake.common.options import AUTO, Values, choice, declared, defaults_of, number, option, options_of
from sb3_snake.common.system import check_device
from sb3_snake.dqn.snake_dqn import DEFAULT_BATCH_SIZE
from sb3_snake.envs.rules import MAX_STALL_GROWTH, MIN_BOARD_SIZE, SnakeRules
from sb3_snake.q_learning.save_format import MAX_BOARD_SIZE
from sb3_snake.q_learning.save_schema import (
    EXTRACTOR_SCHEMA,
    HYPERPARAMETER_SCHEMA,
    MAX_BATCH_SIZE,
    MAX_ENVS,
    MAX_GRADIENT_STEPS,
    MAX_WIDTH,
    PQN_HYPERPARAMETER_SCHEMA,
)
from sb3_snake.training.evaluation import MAX_SEED
from sb3_snake.training.roles import (
    ALGORITHM,
    ALGORITHMS,
    BATCHES_FROM,
    BOARD,
    DEFAULT_LEARNER,
    DQN_RUN_OPTION,
    EXTRACTOR,
    GAMES,
    LEARNER_DEFAULT_SOURCES,
    LEARNER_DEFAULTS,
    LEARNING,
    MACHINE,
    NETWORK,
    POLICY_ALIASES_BY_OPTION,
    PQN_DEFAULTS,
    PQN_LEARNING,
    PQN_SNAKE_DEFAULTS,
    REPLAY_LEARNING,
    REPLAY_SHAPE,
    RUN_OPTION,
    SCHEDULE,
    Role,
    learner_problem,
)
from sb3_snake.training.schedule import schedule_kwargs

#: Upper bound on env steps of a run that stops by episodes, so ``learn`` always has a total.
MAX_TIMESTEPS = 10**12
#: Episodes of a run given no limit at all.
DEFAULT_EPISODES = 1000

#: The most gradient samples per env step a run may ask for. Published DQN variants replay at most
#: a few hundred; beyond this, each env step waits on an update so long that the run learns
#: nothing from new games, and a typo (``1e300``) would make one update outlast any time limit.
MAX_REPLAY_RATIO = 4096
#: The fewest: a thousandth of a sample per env step. Below it a run learns next to nothing from
#: what it plays, and the largest batch would come less often than a model file records
#: (``train_freq``: :data:`sb3_snake.q_learning.save_schema.MAX_TRAIN_FREQ` env steps).
MIN_REPLAY_RATIO = 1e-3

#: The batch size: a size a model file may hold, or ``auto`` (measured on the machine).
BATCH_SIZE = number(1, MAX_BATCH_SIZE, integer=True, auto=True)


@declared
@dataclass(frozen=True)
class TrainConfig:
    """Everything a run is asked to do. Defaults make ``sb3-snake train --episodes 1000`` a short
    run that visibly learns on a CPU. A value that cannot work raises one UsageError."""

    episodes: int | None = option(
        None, "Stop once this many episodes (all games) finished; 1000 with no limit.", RUN_OPTION, values=number(1)
    )
    timesteps: int | None = option(
        None, "Stop after this many env steps (all games together).", RUN_OPTION, values=number(1)
    )
    time_limit_minutes: float | None = option(
        None, "Stop after this many minutes of training.", RUN_OPTION, flag="--time-limit"
    )
    n_envs: int | None = option(
        None, "Games stepped together (default: 16 for dqn, 128 for pqn).", GAMES, values=number(1, MAX_ENVS)
    )
    board_size: int = option(
        10, f"Side of the board (4 to {MAX_BOARD_SIZE}).", BOARD, values=number(MIN_BOARD_SIZE, MAX_BOARD_SIZE)
    )
    seed: int = option(0, "Seed of envs, networks and exploration.", GAMES, values=number(0, MAX_SEED))
    device: str = option("auto", "auto, cpu or cuda.", MACHINE, values=choice(("auto", "cpu", "cuda")))
    countdown: bool = option(
        False, "Observe a countdown channel: on each body cell, the moves until it is free.", BOARD
    )
    reachable: bool = option(
        False,
        "Observe a reachability channel: 1 on each cell the head can reach through free cells (the tail's too).",
        BOARD,
    )
    egocentric: bool = option(
        True,
        "See the board turned to the snake's heading and act with 3 turns: left, straight, right "
        "(off: the board as it is, 4 directions).",
        BOARD,
    )
    stall_growth: int = option(
        4,
        "Steps without food allowed per cell of the snake, beyond board_size ** 2 (0: Snake-v0's rule).",
        GAMES,
        values=number(0, MAX_STALL_GROWTH),
    )
    long_starts: float = option(
        0.2,
        "Share of training games that start with a long snake (50-85% of the board); evaluation starts short.",
        GAMES,
        values=number(0, 1),
    )
    algo: str = option(
        DEFAULT_LEARNER,
        "The learner: pqn (PQN: many games, Q(lambda), no replay; the default, which fills the board) "
        "or dqn (SnakeDQN: SB3's DQN with replay).",
        ALGORITHM,
        values=choice(ALGORITHMS),
    )
    policy: str | None = option(
        None,
        "PQN's network: mlp, cnn or attention (default: mlp; dqn learns with attention).",
        ALGORITHM,
        values=choice(tuple(POLICY_ALIASES_BY_OPTION)),
    )
    learning_rate: float = option(5e-4, "Adam step size.", LEARNING)
    learning_rate_half_life: int | None = option(
        None,
        "Env steps in which the learning rate halves, dqn's after --early-steps (0: constant; "
        "default: 800000 for dqn, 0 for pqn).",
        LEARNING,
    )
    buffer_size: int = option(100_000, "Replay capacity (transitions).", REPLAY_LEARNING)
    learning_starts: int = option(1_000, "Env steps of random play before learning.", REPLAY_LEARNING)
    batch_size: int | str = option(
        DEFAULT_BATCH_SIZE,
        "Samples per gradient step (dqn: replayed; pqn: a minibatch, which must divide a rollout); "
        "auto: measured, the smallest batch close to the fastest.",
        LEARNING,
        key="OPTIMAL_BATCH_SIZE",
        values=BATCH_SIZE,
    )
    replay_ratio: float = option(
        32.0,
        "Gradient samples per env step (SB3's DQN default: 8).",
        SCHEDULE,
        values=number(MIN_REPLAY_RATIO, MAX_REPLAY_RATIO),
    )
    early_replay_ratio: float = option(
        16.0,
        "Gradient samples per env step for the first --early-steps.",
        SCHEDULE,
        values=number(MIN_REPLAY_RATIO, MAX_REPLAY_RATIO),
    )
    early_steps: int = option(50_000, "Env steps trained at --early-replay-ratio (0: none).", SCHEDULE)
    train_freq: int | None = option(None, "Vector-env steps between updates (default: from --replay-ratio).", SCHEDULE)
    gradient_steps: int | None = option(
        None,
        "Gradient steps per update (default: from --replay-ratio).",
        SCHEDULE,
        values=number(1, MAX_GRADIENT_STEPS),
    )
    gamma: float = option(0.99, "Discount.", LEARNING)
    target_update_interval: int = option(1_000, "Env steps between target network copies.", REPLAY_LEARNING)
    exploration_initial_eps: float = option(1.0, "Epsilon at the start.", LEARNING)
    exploration_final_eps: float | None = option(None, "Final epsilon (default 0.02 for dqn, 0.005 for pqn).", LEARNING)
    exploration_steps: int | None = option(
        None, "Env steps of linear epsilon decay (default: 10000 for dqn, 25000 for pqn).", LEARNING
    )
    safe_exploration: bool | None = option(
        None, "Random moves only among those that do not die at once (default: off for dqn, on for pqn).", LEARNING
    )
    double_dqn: bool = option(False, "Double DQN targets (online net picks, target net values).", REPLAY_LEARNING)
    dueling: bool = option(False, "Dueling head: Q = V + A - mean(A).", NETWORK)
    head_view: bool = option(True, "The extractor also sees the board re-centred on the snake's head.", NETWORK)
    head_view_dim: int = option(
        64, "Features of the head view (with --head-view).", EXTRACTOR, values=number(1, MAX_WIDTH)
    )
    embed_dim: int = option(32, "Width of the extractor's transformer (a multiple of its 2 heads).", EXTRACTOR)
    num_layers: int = option(
        0, "Transformer blocks of the extractor (0: token embedding and attention pooling).", EXTRACTOR
    )
    conv_stem: int = option(
        0, "Channels of a 3x3 convolutional stem that makes the extractor's tokens (0: none).", EXTRACTOR
    )
    n_steps: int = option(1, "n-step returns (SB3's NStepReplayBuffer).", REPLAY_SHAPE)
    symmetry_augmentation: bool | None = option(
        None,
        "Learn from each move under a random symmetry of the game (egocentric: its mirror image; "
        "default: on for dqn, off for pqn).",
        LEARNING,
    )
    food_shaping: float = option(
        1.0, "Potential-based reward shaping towards the food, its scale (0: off; scores unchanged).", LEARNING
    )
    rollout_steps: int = option(
        PQN_DEFAULTS["n_steps"], "Moves of every game per PQN rollout (PQN's n_steps).", PQN_LEARNING
    )
    n_epochs: int = option(PQN_SNAKE_DEFAULTS["n_epochs"], "Passes over each rollout.", PQN_LEARNING)
    q_lambda: float = option(
        PQN_DEFAULTS["q_lambda"],
        "Lambda of the Q(lambda) targets (0: one-step; 1: to the rollout's end).",
        PQN_LEARNING,
    )
    averaging_half_life: int | None = option(
        None,
        "Env steps in which the past halves its weight in the averaged network that the greedy policy "
        "plays and saves (0: it plays the trained network; default: 0 for dqn, 100000 for pqn).",
        LEARNING,
        values=number(0, 2**63 - 1, integer=True),
    )
    fatal_move_targets: bool | None = option(
        None, "Also fit the moves that die at once to their known value (default: off for dqn, on for pqn).", LEARNING
    )
    stall_as_death: bool | None = option(
        None,
        "Learn a stall (too long without food) as a death, no bootstrap (default: off for dqn, on for pqn).",
        LEARNING,
    )
    population: int = option(
        1,
        "PQN learners side by side, ranked every --population-interval; the best is saved (1: one).",
        PQN_LEARNING,
        values=number(1, 64, integer=True),
    )
    population_interval: int = option(
        100_000,
        "Env steps of each --population member between the greedy rankings.",
        PQN_LEARNING,
        values=number(1, 2**63 - 1, integer=True),
    )
    checkpoint_every: int | None = option(
        None, "Episodes between atomic checkpoints (checkpoint.zip).", RUN_OPTION, values=number(1)
    )
    select_every: int | None = option(
        None, "Env steps between greedy evaluations that keep best_model.zip.", RUN_OPTION, values=number(1)
    )
    select_episodes: int = option(
        32, "Greedy games per evaluation during training (--eval-every, --select-every).", RUN_OPTION, values=number(1)
    )
    eval_every_minutes: float = option(
        2.0,
        "Minutes of training between greedy evaluations shown on the progress line and in summary.json (0: none).",
        RUN_OPTION,
        flag="--eval-every",
        values=number(0),
    )
    save_replay_buffer: bool = option(False, "Save the replay buffer beside checkpoints and the model.", DQN_RUN_OPTION)
    tensorboard_log: str | None = option(
        None, "Folder for SB3's TensorBoard logs (needs the tensorboard extra).", RUN_OPTION
    )
    verbose: int = option(0, "1: print SB3's training metrics.", RUN_OPTION, values=number(0, 2))
    #: Where a value that more than the caller may set came from (the batch size: override,
    #: hyperparams file, resumed model, environment, .env, default, or how auto chose it).
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.episodes is None and self.timesteps is None and self.time_limit_minutes is None:
            object.__setattr__(self, "episodes", DEFAULT_EPISODES)
        problem = self._learner_problem()
        # The learner's defaults, recorded as such: ``replace(config, algo=...)`` resolves them again.
        for name, value in ({} if problem else LEARNER_DEFAULTS[self.algo]).items():
            if getattr(self, name) is None or self.source(name) in LEARNER_DEFAULT_SOURCES.values():
                object.__setattr__(self, name, value)
                object.__setattr__(self, "sources", {**self.sources, name: LEARNER_DEFAULT_SOURCES[self.algo]})
        problem = problem or self._first_problem()
        if problem:
            raise UsageError(problem)

    def _learner_problem(self) -> str:
        return learner_problem(self, OPTIONS, DEFAULTS, option_values)

    def _first_problem(self) -> str:
        def finite(value: float) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

        for name in OPTIONS:
            value, values = getattr(self, name), option_values(name)
            if values is not None and values.low is not None and value is not None and values.check(value):
                within = values.within + (" or auto" if values.takes_auto else "")
                return (
                    f"{name} must be {within}, got {value!r}"
                    if isinstance(value, str)
                    else f"{name} must be {within}, got {value}"
                )
        checks = [
            (
                self.time_limit_minutes is None or (finite(self.time_limit_minutes) and self.time_limit_minutes > 0),
                f"time limit must be a positive number of minutes, got {self.time_limit_minutes}",
            ),
            (
                self.embed_dim % 2 == 0,
                f"embed_dim must be an even number (2 attention heads) from 2 to {MAX_WIDTH}, got {self.embed_dim}",
            ),
            (
                not self.batches_from_rollout or self.batch_size == AUTO or self.rollout_samples % self.batch_size == 0,
                f"batch_size must divide PQN's rollout of {self.rollout_samples} samples ({self.n_envs} games x "
                f"{self.rollout_steps} moves) into minibatches of one size, got {self.batch_size}: "
                f"use a divisor such as {divisors_near(self.rollout_samples, self.batch_size)}, "
                "or change n_envs or rollout_steps",
            ),
        ]
        problem = next((message for ok, message in checks if not ok), "")
        if problem:
            return problem
        try:
            # names a board size or a stall growth the game cannot have
            SnakeRules(
                self.board_size, countdown=self.countdown, stall_growth=self.stall_growth, reachable=self.reachable
            )
            check_device(self.device, option="device")
        except ValueError as error:
            return str(error)
        return ""

    def source(self, name: str) -> str:
        """Where field ``name``'s value came from (``default`` unless recorded in ``sources``)."""
        return self.sources.get(name, "default")

    @property
    def batches_from_rollout(self) -> bool:
        """Whether the learner cuts its batches from the rollout it played (PQN), rather than
        drawing them from a replay buffer (:data:`~sb3_snake.training.roles.BATCHES_FROM`)."""
        return BATCHES_FROM[self.algo] == "rollout"

    @property
    def rollout_samples(self) -> int:
        """The samples of one PQN rollout: every game's ``rollout_steps`` moves."""
        return self.n_envs * self.rollout_steps

    @property
    def max_batch_size(self) -> int:
        """The largest batch the learner can draw: the replay buffer's size (dqn), a rollout (pqn)."""
        return self.rollout_samples if self.batches_from_rollout else self.buffer_size

    @property
    def planned_batch_size(self) -> int:
        """The batch size a run plans for before ``auto`` is measured: the largest it may choose."""
        if self.batch_size != AUTO:
            return self.batch_size
        return max(batch_candidates(self.max_batch_size, divides=self.batches_from_rollout))

    def batch(self) -> int:
        if self.batch_size == AUTO:
            raise UsageError(
                "batch_size is auto: resolve it first (sb3_snake.training.run.resolve_settings, as train does)"
            )
        return self.batch_size

    def check_batch_size(self) -> None:
        """Raise UsageError unless the batch size (``auto``: the largest it may choose) fits the replay buffer."""
        if self.planned_batch_size > self.buffer_size:
            raise UsageError(
                f"batch size {self.planned_batch_size} is larger than the replay buffer "
                f"({self.buffer_size} transitions)",
                fix={"batch_size": "lower", "buffer_size": "raise"},
            )

    def network(self) -> dict[str, Any]:
        """What shapes the network and the replay buffer (the fields of a fixed :class:`Role`):
        fixed once a model is built. The head view's switch is folded into its size, as the
        extractor takes it (0: no head view)."""
        shape = {name: getattr(self, name) for name in NETWORK_FIELDS}
        shape["head_view_dim"] = self.head_view_dim if shape.pop("head_view") else 0
        return shape

    def policy_kwargs(self) -> dict[str, Any]:
        network = self.network()
        extractor = {name: network[name] for name in EXTRACTOR_SIZES}
        return {"dueling": self.dueling, "features_extractor_kwargs": extractor}

    def pqn_kwargs(self) -> dict[str, Any]:
        """The arguments of :class:`~sb3_snake.pqn.pqn.PQN` this config sets (:data:`PQN_ARGUMENTS`;
        the batch size, resolved, as the minibatches that cut a rollout into batches of it)."""
        shared = {name: getattr(self, name) for name in SHARED_MODEL_FIELDS if name != "batch_size"}
        return {
            **shared,
            **{argument: getattr(self, name) for name, argument in PQN_ARGUMENTS.items()},
            "n_minibatches": self.rollout_samples // self.batch(),
            "seed": self.seed,
            "verbose": self.verbose,
        }

    def pqn_policy_kwargs(self) -> dict[str, Any]:
        """The ``policy_kwargs`` of PQN's policy: none beyond its defaults (the network's options are SnakeDQN's)."""
        return {}

    def dqn_kwargs(self) -> dict[str, Any]:
        """The arguments of :class:`~sb3_snake.dqn.snake_dqn.SnakeDQN` this config sets (its batch size resolved)."""
        return {
            **{name: getattr(self, name) for name in MODEL_FIELDS},
            "batch_size": self.batch(),
            "seed": self.seed,
            "verbose": self.verbose,
            **schedule_kwargs(self),
            "policy_kwargs": self.policy_kwargs(),
        }


#: TrainConfig's options, by field name, in field order.
OPTIONS = options_of(TrainConfig)
#: Each option's declared default (``None`` for a learner's default: :data:`LEARNER_DEFAULTS`).
DEFAULTS = defaults_of(TrainConfig)


def option_values(name: str) -> Values | None:
    """What TrainConfig option ``name`` takes: as declared, or, for a value a model file holds (a
    hyperparameter the model saves, an extractor size), the range the file may hold it in
    (:mod:`sb3_snake.q_learning.save_schema`), so that a model a run saves can always be loaded."""
    declared = OPTIONS[name]
    if declared.values is not None:
        return declared.values
    if declared.role.learner == "pqn":  # held in a PQN file under PQN's own argument name
        saved = PQN_HYPERPARAMETER_SCHEMA.get(PQN_ARGUMENTS[name])
    else:
        saved = (EXTRACTOR_SCHEMA if declared.role.extractor else HYPERPARAMETER_SCHEMA).get(name)
    return saved if isinstance(saved, Values) else None


def fields_of(role: Callable[[Role], bool]) -> tuple[str, ...]:
    """The names of the TrainConfig options whose :class:`Role` satisfies ``role``, in field order."""
    return tuple(name for name, declared in OPTIONS.items() if role(declared.role))


#: TrainConfig fields that are SnakeDQN arguments of the same name, saved with the model.
MODEL_FIELDS = fields_of(lambda role: role.model_argument and role.learner in (None, "dqn"))
#: The fields both learners take by name.
SHARED_MODEL_FIELDS = fields_of(lambda role: role.model_argument and role.learner is None)
#: The PQN group's fields and the :class:`~sb3_snake.pqn.pqn.PQN` argument each one sets.
PQN_ARGUMENTS = {
    name: "n_steps" if name == "rollout_steps" else name for name in fields_of(lambda role: role.learner == "pqn")
}
#: TrainConfig fields a hyperparameter file may set; the others are run limits, outputs, the device.
HYPERPARAMETER_FIELDS = fields_of(lambda role: role.hyperparameter)
#: TrainConfig fields that shape the network or the replay buffer: a resumed model keeps them.
NETWORK_FIELDS = fields_of(lambda role: role.fixed)
#: The extractor's sizes a run sets (TrainConfig fields of the same name).
EXTRACTOR_SIZES = fields_of(lambda role: role.extractor)
