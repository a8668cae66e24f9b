"""What a model file may hold: the names of each section of its plain-JSON description
(:mod:`sb3_snake.q_learning.save_format`) and the range of every value, for SnakeDQN's files and PQN's.
The reader checks a description against these before anything is built (``metadata_problem``),
and a run checks what it will save against them first (:func:`hyperparameter_problem`), so that
whatever a run saves loads again.
"""

from __future__ import annotations

from typing import Any

from sb3_snake.common.options import Values, number
from sb3_snake.envs.batched_vec_env import MAX_GAMES

#: DQN hyperparameters kept in the metadata and reported as what a run really trained with.
HYPERPARAMETERS = (
    "seed",
    "learning_rate",
    "buffer_size",
    "learning_starts",
    "batch_size",
    "tau",
    "gamma",
    "gradient_steps",
    "target_update_interval",
    "exploration_initial_eps",
    "exploration_final_eps",
    "exploration_fraction",
    "max_grad_norm",
    "n_steps",
    "exploration_steps",
    "double_dqn",
    "symmetry_augmentation",
    "early_steps",
    "early_update_fraction",
    "food_shaping",
    "learning_rate_half_life",
    "safe_exploration",
    "fatal_move_targets",
    "stall_as_death",
    "averaging_half_life",
)
#: The policies a SnakeDQN file may name (``SnakeDQN.policy_aliases``), and a PQN file (``PQN.policy_aliases``).
DQN_POLICIES = ("MlpPolicy", "CnnPolicy", "MultiInputPolicy", "AttentionPolicy")
PQN_POLICIES = ("MlpPolicy", "CnnPolicy", "AttentionPolicy")
#: Counters that a resumed run continues from.
COUNTERS = ("num_timesteps", "_n_updates", "_n_calls", "_episode_num", "exploration_rate")
#: PQN's hyperparameters kept in the metadata (its constructor's names), and its counters.
PQN_HYPERPARAMETERS = (
    "seed",
    "learning_rate",
    "n_steps",
    "n_epochs",
    "n_minibatches",
    "gamma",
    "q_lambda",
    "exploration_initial_eps",
    "exploration_final_eps",
    "exploration_steps",
    "max_grad_norm",
    "food_shaping",
    "safe_exploration",
    "symmetry_augmentation",
    "averaging_half_life",
    "learning_rate_half_life",
    "fatal_move_targets",
    "stall_as_death",
)
#: PQN's hyperparameters that came later: a file without one trained without it (PQN's default: 0, off).
PQN_LATER_HYPERPARAMETERS = ("learning_rate_half_life", "fatal_move_targets", "stall_as_death")
#: What every PQN file has held (its seed aside).
PQN_REQUIRED_HYPERPARAMETERS = tuple(
    name for name in PQN_HYPERPARAMETERS if name != "seed" and name not in PQN_LATER_HYPERPARAMETERS
)
PQN_COUNTERS = ("num_timesteps", "_n_updates", "_episode_num", "exploration_rate")

#: Bytes the JSON description may take unpacked (a few kilobytes in practice).
MAX_METADATA_BYTES = 1 << 20
#: Bytes one weights entry may take unpacked: far above any Snake policy, far below a zip bomb.
MAX_ENTRY_BYTES = 1 << 31
#: The most games a model may say it trained with: the most a batched env holds.
MAX_ENVS = MAX_GAMES
#: The largest width of any layer a model file may describe, and the most layers.
MAX_WIDTH, MAX_LAYERS = 1 << 16, 64
#: The most gradient steps of one update, replay samples of one step, and env steps between updates
#: a model file may hold: far beyond what learns (an update of that many steps outlasts any run).
MAX_GRADIENT_STEPS, MAX_BATCH_SIZE, MAX_TRAIN_FREQ = 100_000, 1 << 20, 1 << 31
#: The most passes PQN makes over a rollout: each pass is a gradient sample per env step (the
#: paper's runs make 1 to 4); a hundred is far past what learns, and more makes one update outlast
#: any time limit.
MAX_EPOCHS = 100
#: The largest share of the scheduled updates a model may train in its early phase: an early
#: replay ratio over the ratio after it. ``sb3-snake train``'s ratios (a thousandth to 4,096
#: samples per env step) give at most about 8 million, rounding included; above this is no run's.
MAX_EARLY_UPDATE_FRACTION = 2.0**32


def _problem(entry: Any, value: Any) -> str:
    """What is wrong with ``value`` for a schema entry (a range of :class:`Values`, or a check of
    its own), in the file's words: ``must be ...``; ``""``: nothing."""
    if isinstance(entry, Values):
        return f"must be {entry.kind}" if entry.check(value) else ""
    return entry(value)


def _choice(*values: Any) -> Any:
    return lambda value: "" if type(value) is type(values[0]) and value in values else f"must be one of {list(values)}"


_COUNT, _SHARE = number(0, 2**63 - 1, integer=True), number(0, 1)
_WIDTH = number(1, MAX_WIDTH, integer=True)
_GRADIENT_STEPS = number(1, MAX_GRADIENT_STEPS, integer=True)
#: Each hyperparameter a model file may hold, and what its value must be.
HYPERPARAMETER_SCHEMA: dict[str, Any] = {
    "seed": number(0, 2**32 - 1, integer=True, optional=True),
    "learning_rate": number(1e-12, 10),
    "buffer_size": number(1, 1 << 32, integer=True),
    "learning_starts": _COUNT,
    "batch_size": number(1, MAX_BATCH_SIZE, integer=True),
    "tau": _SHARE,
    "gamma": _SHARE,
    "gradient_steps": lambda v: "" if v == -1 else _problem(_GRADIENT_STEPS, v),
    "target_update_interval": number(1, 2**63 - 1, integer=True),
    "exploration_initial_eps": _SHARE,
    "exploration_final_eps": _SHARE,
    "exploration_fraction": _SHARE,
    "max_grad_norm": number(1e-12, 1e12),
    "n_steps": number(1, 1000, integer=True),
    "exploration_steps": number(1, 2**63 - 1, integer=True, optional=True),
    "double_dqn": _choice(False, True),
    "symmetry_augmentation": _choice(False, True),
    "early_steps": _COUNT,
    # 0: no updates in the early phase; above 1: more than after it (an early ratio above the ratio).
    "early_update_fraction": number(0, MAX_EARLY_UPDATE_FRACTION),
    "food_shaping": number(0, 1e6),
    "learning_rate_half_life": _COUNT,
    "safe_exploration": _choice(False, True),
    "fatal_move_targets": _choice(False, True),
    "stall_as_death": _choice(False, True),
    "averaging_half_life": _COUNT,
    "train_freq": number(1, MAX_TRAIN_FREQ, integer=True),
    "train_freq_unit": _choice("step", "episode"),
}
#: Each hyperparameter a PQN file may hold (its seed aside, all of them), and what its value must be.
PQN_HYPERPARAMETER_SCHEMA: dict[str, Any] = {
    "seed": HYPERPARAMETER_SCHEMA["seed"],
    "learning_rate": HYPERPARAMETER_SCHEMA["learning_rate"],
    "n_steps": number(1, MAX_TRAIN_FREQ, integer=True),
    "n_epochs": number(1, MAX_EPOCHS, integer=True),
    "n_minibatches": number(1, MAX_TRAIN_FREQ, integer=True),
    "gamma": _SHARE,
    "q_lambda": _SHARE,
    "exploration_initial_eps": _SHARE,
    "exploration_final_eps": _SHARE,
    "exploration_steps": _COUNT,
    "max_grad_norm": HYPERPARAMETER_SCHEMA["max_grad_norm"],
    "food_shaping": HYPERPARAMETER_SCHEMA["food_shaping"],
    "safe_exploration": _choice(False, True),
    "symmetry_augmentation": _choice(False, True),
    "averaging_half_life": _COUNT,
    "learning_rate_half_life": HYPERPARAMETER_SCHEMA["learning_rate_half_life"],
    "fatal_move_targets": _choice(False, True),
    "stall_as_death": _choice(False, True),
}
#: What every sb3-snake model file has held (the rest came later and have defaults).
REQUIRED_HYPERPARAMETERS = (
    "learning_rate",
    "buffer_size",
    "learning_starts",
    "batch_size",
    "tau",
    "gamma",
    "gradient_steps",
    "target_update_interval",
    "exploration_initial_eps",
    "exploration_final_eps",
    "exploration_fraction",
    "max_grad_norm",
    "train_freq",
    "train_freq_unit",
)
#: The counters a model file may set on the loaded model: these attributes and no others.
COUNTER_SCHEMA: dict[str, Any] = {name: _COUNT for name in COUNTERS if name != "exploration_rate"}
COUNTER_SCHEMA["exploration_rate"] = _SHARE


def hyperparameter_problem(name: str, value: Any) -> str:
    """What keeps a model file from holding ``value`` as hyperparameter ``name`` (``""``: nothing),
    worded as reading one back says it: for a writer that checks before it writes."""
    return section_problem("hyperparameters", {name: value}, HYPERPARAMETER_SCHEMA, ())


def section_problem(section: str, values: dict[str, Any], schema: dict[str, Any], required: Any) -> str:
    unknown = sorted(set(values) - set(schema))
    if unknown:
        return f"{section} has unknown keys {unknown}"
    missing = [name for name in required if name not in values]
    if missing:
        return f"{section} lacks {missing}"
    for name, value in values.items():
        problem = _problem(schema[name], value)
        if problem:
            return f"{section}.{name} {value!r} {problem}"
    return ""


#: The keys ``policy_kwargs`` may hold, each checked by :func:`policy_kwargs_problem`.
POLICY_KWARGS = {
    "net_arch",
    "features_extractor_class",
    "features_extractor_kwargs",
    "optimizer_class",
    "optimizer_kwargs",
    "activation_fn",
    "normalize_images",
    "dueling",
    "layer_norm",
    "averaged",
}
#: The keys of the attention extractor a model file may set, and their ranges.
EXTRACTOR_SCHEMA: dict[str, Any] = {
    "features_dim": number(1, MAX_WIDTH, integer=True),
    "embed_dim": number(2, MAX_WIDTH, integer=True),
    "num_heads": number(1, 64, integer=True),
    "num_layers": number(0, MAX_LAYERS, integer=True),
    "mlp_ratio": number(1, 16, integer=True),
    "patch_size": number(1, 256, integer=True, optional=True),
    "head_view_dim": number(0, MAX_WIDTH, integer=True),
    "conv_stem": number(0, MAX_WIDTH, integer=True),
    # SnakeCnnExtractor's convolutions
    "channels": lambda v: (
        ""
        if isinstance(v, list) and 1 <= len(v) <= MAX_LAYERS and not any(_WIDTH.check(c) for c in v)
        else f"must be a list of 1 to {MAX_LAYERS} widths from 1 to {MAX_WIDTH}"
    ),
}
#: Adam's and the other portable optimizers' keyword arguments a model file may set.
OPTIMIZER_SCHEMA: dict[str, Any] = {
    "eps": number(0, 1),
    "weight_decay": number(0, 1e3),
    "betas": lambda v: (
        ""
        if isinstance(v, list) and len(v) == 2 and not any(_SHARE.check(b) for b in v)
        else "must be two numbers from 0 to 1"
    ),
    "amsgrad": _choice(False, True),
    "fused": lambda v: "" if v is None or isinstance(v, bool) else "must be true, false or null",
    "foreach": lambda v: "" if v is None or isinstance(v, bool) else "must be true, false or null",
    "momentum": number(0, 1),
    "alpha": number(0, 1),
    "centered": _choice(False, True),
}


def policy_kwargs_problem(kwargs: Any) -> str:
    if not isinstance(kwargs, dict):
        return "policy_kwargs is not a mapping"
    unknown = sorted(set(kwargs) - POLICY_KWARGS)
    if unknown:
        return f"policy_kwargs has unknown keys {unknown}"
    net_arch = kwargs.get("net_arch", [])
    widths = net_arch if isinstance(net_arch, list) else []
    if not isinstance(net_arch, list) or len(widths) > MAX_LAYERS or any(_WIDTH.check(w) for w in widths):
        return (
            f"policy_kwargs.net_arch {net_arch!r} must be a list of at most {MAX_LAYERS} widths from 1 to {MAX_WIDTH}"
        )
    for key in ("features_extractor_class", "optimizer_class", "activation_fn"):
        if key in kwargs and not (isinstance(kwargs[key], dict) and set(kwargs[key]) == {"class"}):
            return f"policy_kwargs.{key} must name a class"
    for key, schema in (("features_extractor_kwargs", EXTRACTOR_SCHEMA), ("optimizer_kwargs", OPTIMIZER_SCHEMA)):
        if key in kwargs:
            if not isinstance(kwargs[key], dict):
                return f"policy_kwargs.{key} is not a mapping"
            problem = section_problem(f"policy_kwargs.{key}", kwargs[key], schema, ())
            if problem:
                return problem
    for key in ("normalize_images", "dueling", "layer_norm", "averaged"):
        if key in kwargs and not isinstance(kwargs[key], bool):
            return f"policy_kwargs.{key} must be true or false"
    return ""
