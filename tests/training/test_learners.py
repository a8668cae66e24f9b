"""The learners' registry: each learner declared once, and the run built from the declaration
trains exactly what the learner's class trains with the arguments the run gave it before the
registry existed (recorded at commit 698108c in tests/data/learner_arguments_698108c.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.errors import UsageError
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.learners import LEARNERS, learner, learner_of_file
from sb3_snake.training.roles import ALGORITHMS, LEARNER_DEFAULTS
from sb3_snake.training.run import build_env, build_model

EAGER = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=1)
BEFORE = json.loads((Path(__file__).parents[1] / "data" / "learner_arguments_698108c.json").read_text())
#: The configs whose arguments were recorded, and the env steps each trains here (past SnakeDQN's
#: learning starts; two PQN rollouts).
CONFIGS = {
    "dqn": (TrainConfig(algo="dqn", seed=3, n_envs=8, batch_size=32), 1_200),
    "pqn": (TrainConfig(algo="pqn", seed=3, n_envs=8, batch_size=64), 512),
}


def test_every_learner_is_declared_once_with_its_own_defaults():
    assert tuple(LEARNERS) == ALGORITHMS
    for algo, declared in LEARNERS.items():
        assert declared.algo == algo and declared.defaults == LEARNER_DEFAULTS[algo]
        assert declared.model_class.description_name == declared.name  # the name its files give
        assert learner_of_file(declared.name, Path("m.zip")) is declared
    with pytest.raises(UsageError, match="model m.zip is a PPO model, which sb3-snake train cannot continue"):
        learner_of_file("PPO", Path("m.zip"))


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_the_arguments_are_those_the_run_gave_before_the_registry(algo):
    config, _ = CONFIGS[algo]
    policy, kwargs = learner(algo).arguments(config)
    before = BEFORE[algo]
    assert policy == before["policy"]
    if algo == "pqn":  # a population came later: one learner, the default, trains as before (test_population.py)
        assert (kwargs.pop("population"), kwargs.pop("population_interval")) == (1, 100_000)
    assert {**kwargs, "policy_kwargs": kwargs["policy_kwargs"]} == {
        **before["kwargs"],
        "policy_kwargs": before["policy_kwargs"],
    }


def _direct(algo, config):
    """The learner's class built as the run built it before the registry."""
    before = BEFORE[algo]
    return LEARNERS[algo].model_class(
        before["policy"],
        build_env(config),
        optimizations=EAGER,
        device="cpu",
        policy_kwargs=before["policy_kwargs"],
        **before["kwargs"],
    )


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_a_seeded_run_trains_the_same_weights_as_before_the_registry(algo):
    config, steps = CONFIGS[algo]
    torch.set_num_threads(1)
    start = {name: value.clone() for name, value in _direct(algo, config).policy.state_dict().items()}
    built = build_model(config, EAGER)  # each built just before it learns: building seeds torch's global RNG
    built.learn(steps)
    direct = _direct(algo, config)
    direct.learn(steps)
    assert built.num_timesteps == direct.num_timesteps >= steps
    ours, theirs = built.policy.state_dict(), direct.policy.state_dict()
    assert ours.keys() == theirs.keys() == start.keys()
    for name, value in ours.items():
        assert torch.equal(value, theirs[name]), name
    assert any(not torch.equal(value, start[name]) for name, value in ours.items())  # the runs trained


def test_the_tables_below_the_run_name_every_learner_and_no_other():
    import importlib

    from sb3_snake.training.learners import REGISTERED_ELSEWHERE

    for dotted, key in REGISTERED_ELSEWHERE.items():
        module, table = dotted.rsplit(".", 1)
        keys = set(getattr(importlib.import_module(module), table))
        assert keys == {getattr(declared, key) for declared in LEARNERS.values()}, dotted
