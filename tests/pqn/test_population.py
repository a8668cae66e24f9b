"""A population inside one PQN run: one member trains what a plain run trains, the exploit step
copies weights and Adam's state exactly, the leader is what plays and what is saved, each member's
schedules run on its own games, and what cannot apply is refused in one line."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_snake import BatchedSnakeVecEnv
from sb3_snake.common.errors import UsageError
from sb3_snake.persistence import load_model, save_model
from sb3_snake.pqn import PQN
from sb3_snake.pqn import population as population_module
from sb3_snake.pqn.population import PERTURBATIONS, copy_optimizer_state, greedy_mean_score

GAME = {"board_size": 6, "stall_growth": 4, "egocentric": True}
RUN = ["train", "--board-size", "6", "--n-envs", "4", "--rollout-steps", "8", "--batch-size", "8", "--threads", "1"]
RUN += ["--no-compile", "--eval-every", "0", "--wandb-mode", "disabled"]


def snake_pqn(population=1, seed=0, n_envs=8, **kwargs):
    env = BatchedSnakeVecEnv(n_envs, seed=seed, **GAME)
    arguments = {"n_steps": 8, "n_minibatches": 4, "population_interval": 64, "population_games": 2, **kwargs}
    return PQN("MlpPolicy", env, seed=seed, device="cpu", population=population, **arguments)


def weights(policy):
    return {name: value.clone() for name, value in policy.state_dict().items()}


def same_weights(first, second):
    return first.keys() == second.keys() and all(torch.equal(first[name], second[name]) for name in first)


def scores_of(table):
    """A stand-in for the greedy ranking: member ``i`` scores ``table[i]``."""
    scores = iter(table)
    return lambda policy, env: next(scores)


def test_a_population_of_one_trains_exactly_what_a_plain_run_trains():
    torch.set_num_threads(1)
    plain = PQN("MlpPolicy", BatchedSnakeVecEnv(8, seed=3, **GAME), seed=3, device="cpu", n_steps=8, n_minibatches=4)
    plain.learn(512)
    one = snake_pqn(population=1, seed=3)
    one.learn(512)
    assert one._population is None and one.num_timesteps == plain.num_timesteps == 512
    assert same_weights(weights(one.policy), weights(plain.policy))
    assert one.exploration_rate == plain.exploration_rate


def test_the_members_play_their_own_games_and_all_of_them_count():
    model = snake_pqn(population=3)
    envs = [member.state["env"] for member in model._population.members]
    assert envs[0] is model.env and len({id(env) for env in envs}) == 3
    starts = [member.state["policy"] for member in model._population.members]
    assert not same_weights(weights(starts[0]), weights(starts[1]))  # drawn apart
    model.learn(3 * 64)
    assert model.num_timesteps == 3 * 64 and model.member_timesteps == 64
    trained = [member.state["_n_updates"] for member in model._population.members]
    assert trained == [4 * 2] * 3  # each member: one rollout of 64 samples, 2 passes of 4 minibatches


def test_each_member_explores_over_its_own_env_steps():
    model = snake_pqn(population=2, exploration_steps=128, exploration_final_eps=0.0)
    model.learn(128)  # 64 env steps each: half of a member's exploration
    assert model.exploration_rate == pytest.approx(1 - (64 - 8) / 128)  # the last move of a rollout of 8 each


def test_the_exploit_step_copies_weights_and_adam_state_exactly_into_the_same_tensors(monkeypatch):
    monkeypatch.setattr(population_module, "greedy_mean_score", lambda policy, env: 0.0)  # level: no exploit
    model = snake_pqn(population=2, population_interval=10**9, learning_rate=1e-3, exploration_final_eps=0.05)
    model.learn(2 * 128)
    assert model._population.exploits == []
    population = model._population
    best, worst = population.members
    best.score, worst.score = 3.0, 1.0
    before = [value.data_ptr() for value in worst.policy.state_dict().values()]
    states_before = [state["exp_avg"].data_ptr() for state in worst.policy.optimizer.state.values()]
    population.exploit(best, worst, member_steps=128)
    assert same_weights(weights(worst.policy), weights(best.policy))
    assert [value.data_ptr() for value in worst.policy.state_dict().values()] == before
    pairs = zip(best.policy.optimizer.state.values(), worst.policy.optimizer.state.values(), strict=True)
    for source, target in pairs:
        assert source.keys() == target.keys()
        for name in source:
            assert torch.equal(source[name], target[name]), name
    assert [state["exp_avg"].data_ptr() for state in worst.policy.optimizer.state.values()] == states_before
    assert worst.state["learning_rate"] in [pytest.approx(1e-3 * factor) for factor in PERTURBATIONS]
    assert worst.state["lr_schedule"](0.5) == worst.state["learning_rate"]
    assert worst.state["exploration_final_eps"] in [pytest.approx(0.05 * factor) for factor in PERTURBATIONS]
    assert population.exploits[-1]["from"] == 0 and population.exploits[-1]["to"] == 1


def test_an_optimizer_without_state_yet_takes_a_copy():
    source_net, target_net = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    source, target = torch.optim.Adam(source_net.parameters()), torch.optim.Adam(target_net.parameters())
    source_net(torch.ones(1, 3)).sum().backward()
    source.step()
    copy_optimizer_state(source, target)
    for parameter_source, parameter_target in zip(source_net.parameters(), target_net.parameters(), strict=True):
        held = target.state[parameter_target]["exp_avg"]
        assert torch.equal(held, source.state[parameter_source]["exp_avg"])
        assert held.data_ptr() != source.state[parameter_source]["exp_avg"].data_ptr()


def test_the_worst_quarter_takes_the_best_weights_and_ties_take_nothing(monkeypatch):
    monkeypatch.setattr(population_module, "greedy_mean_score", lambda policy, env: 0.0)
    model = snake_pqn(population=4, population_interval=10**9, learning_rate=1e-3, exploration_final_eps=0.05)
    model.learn(4 * 64)
    population = model._population
    assert population.rankings == 1 and population.leader == 0 and model.policy is population.members[0].policy
    monkeypatch.setattr(population_module, "greedy_mean_score", scores_of([1.0, 5.0, 3.0, 5.0]))
    population.rank(model, member_steps=64)  # the shown leader, member 0, is the worst
    assert population.leader == 1 and [exploit["to"] for exploit in population.exploits] == [0]
    assert same_weights(weights(population.members[0].policy), weights(population.members[1].policy))
    exploit = population.exploits[0]
    population.show(model, 0)
    assert model.learning_rate == exploit["learning_rate"] != 1e-3  # perturbed, and kept
    assert model.exploration_final_eps == exploit["exploration_final_eps"] != 0.05
    monkeypatch.setattr(population_module, "greedy_mean_score", scores_of([2.0, 2.0, 2.0, 2.0]))
    population.rank(model, member_steps=128)
    assert len(population.exploits) == 1  # all level: nobody is behind the best


def test_the_leader_plays_and_is_saved_whichever_member_the_model_shows(monkeypatch, tmp_path):
    monkeypatch.setattr(population_module, "greedy_mean_score", scores_of([0.0, 0.0, 4.0]))
    model = snake_pqn(population=3, population_interval=64)
    model.learn(3 * 64)  # one round, then a ranking: member 2 leads, the worst takes its weights
    population = model._population
    assert population.rankings == 1 and population.leader == 2 and model.policy is population.members[2].policy
    leader = weights(population.members[2].policy)
    population.show(model, 1)  # as during member 1's turn
    observations = BatchedSnakeVecEnv(8, seed=5, **GAME).reset()
    from_leader, _ = population.members[2].policy.predict(observations, deterministic=True)
    assert np.array_equal(model.predict(observations, deterministic=True)[0], from_leader)
    save_model(model, tmp_path / "model.zip")
    assert model.policy is population.members[1].policy  # saving showed the leader, then member 1 again
    loaded = load_model(tmp_path / "model.zip")
    assert isinstance(loaded, PQN) and loaded.population == 1 and loaded._population is None
    assert same_weights(weights(loaded.policy), leader)


def test_the_learn_ends_with_a_ranking_so_the_saved_leader_is_the_best_now(monkeypatch):
    monkeypatch.setattr(population_module, "greedy_mean_score", scores_of([0.0, 2.0]))
    model = snake_pqn(population=2, population_interval=10**9)
    model.learn(2 * 64)  # long before the first interval
    assert model._population.rankings == 1 and model._population.leader == 1
    assert model.policy is model._population.members[1].policy


def test_every_member_is_ranked_on_the_same_games_when_no_seed_is_given(monkeypatch):
    boards = []

    def record(policy, env):
        boards.append(env.reset_tensors().clone())
        return 0.0

    monkeypatch.setattr(population_module, "greedy_mean_score", record)
    env = BatchedSnakeVecEnv(8, seed=None, **GAME)
    model = PQN("MlpPolicy", env, n_steps=8, n_minibatches=4, population=3, population_games=4, device="cpu")
    model.learn(3 * 64)
    assert len(boards) == 3 and all(torch.equal(board, boards[0]) for board in boards)


def test_a_member_that_diverges_takes_the_leaders_weights_and_the_leader_stops_the_run(monkeypatch):
    from sb3_snake.common.errors import TrainingDiverged

    monkeypatch.setattr(population_module, "greedy_mean_score", lambda policy, env: 0.0)
    model = snake_pqn(population=2, population_interval=10**9, learning_rate=1e-3)
    population = model._population
    real_train = PQN.train

    def train(self, rollout):
        if population.shown == 1:
            raise TrainingDiverged("the TD loss became nan", fix={"learning_rate": "lower"})
        real_train(self, rollout)

    monkeypatch.setattr(PQN, "train", train)
    model.learn(2 * 64)  # member 1's trained network is the leader's (its average then moved towards it)
    assert same_weights(weights(population.members[1].policy.q_net), weights(population.members[0].policy.q_net))
    assert population.exploits[0]["diverged"] and population.exploits[0]["learning_rate"] == pytest.approx(8e-4)
    population.leader = 1
    with pytest.raises(TrainingDiverged):
        model.learn(2 * 64, reset_num_timesteps=False)


def test_greedy_scores_are_the_first_game_of_every_slot():
    model = snake_pqn()
    model.learn(256)
    played = greedy_mean_score(model.policy, BatchedSnakeVecEnv(6, seed=9, **GAME))
    env, first = BatchedSnakeVecEnv(6, seed=9, **GAME), {}
    observations = env.reset()
    while len(first) < 6:
        actions, _ = model.policy.predict(observations, deterministic=True)
        observations, _, dones, infos = env.step(actions)
        for index in np.flatnonzero(dones):
            first.setdefault(int(index), infos[index]["score"])
    assert played == pytest.approx(np.mean(list(first.values())))


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"population": 0}, "population must be a positive integer, got 0"),
        ({"population": 2, "population_interval": 0}, "population_interval must be a positive integer, got 0"),
        ({"population": 2, "population_games": 0}, "population_games must be a positive integer, got 0"),
    ],
)
def test_population_values_that_cannot_work_are_refused_in_one_line(kwargs, words):
    with pytest.raises(UsageError, match=words):
        snake_pqn(**kwargs)


def test_a_population_needs_games_it_can_copy():
    env = DummyVecEnv([lambda: gym.make("CartPole-v1")] * 2)
    with pytest.raises(UsageError, match="population needs a BatchedSnakeVecEnv.*set it to 1"):
        PQN("MlpPolicy", env, device="cpu", n_steps=8, n_minibatches=2, population=2)


def test_train_with_a_population_saves_its_best_and_reports_it(tmp_path):
    from typer.testing import CliRunner

    from sb3_snake.cli import app

    runner = CliRunner()
    out = tmp_path / "run"
    options = ["--population", "2", "--population-interval", "32", "--timesteps", "256", "--output", str(out)]
    result = runner.invoke(app, [*RUN, *options])
    assert result.exit_code == 0, result.output
    assert "population:       2 learners" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_steps"] == 256
    assert (summary["hyperparameters"]["population"], summary["hyperparameters"]["population_interval"]) == (2, 32)
    model = load_model(out / "model.zip")
    assert isinstance(model, PQN) and model.population == 1 and model.n_envs == 4


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--algo", "dqn", "--population", "2"], "population"),
        (["--population", "65"], "population"),
    ],
)
def test_train_refuses_a_population_where_it_cannot_apply_in_one_line(options, words, tmp_path):
    from typer.testing import CliRunner

    from sb3_snake.cli import app

    run = [
        "train",
        "--board-size",
        "6",
        "--n-envs",
        "4",
        "--timesteps",
        "64",
        "--no-compile",
        "--wandb-mode",
        "disabled",
    ]
    result = CliRunner().invoke(app, [*run, *options, "--output", str(tmp_path / "run")])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], result.output
    assert not (tmp_path / "run" / "model.zip").exists()


def test_a_population_cannot_resume_a_saved_model(tmp_path):
    from typer.testing import CliRunner

    from sb3_snake.cli import app

    runner = CliRunner()
    first = runner.invoke(app, [*RUN, "--timesteps", "64", "--output", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    resumed = runner.invoke(
        app,
        ["train", "--resume", str(tmp_path / "a" / "model.zip"), "--population", "2", "--timesteps", "64"]
        + ["--threads", "1", "--no-compile", "--eval-every", "0", "--wandb-mode", "disabled"]
        + ["--output", str(tmp_path / "b")],
    )
    assert resumed.exit_code != 0
    assert "--population cannot resume a saved model" in resumed.output
    assert not (tmp_path / "b" / "model.zip").exists()


def test_the_run_compiles_once_and_every_member_runs_it_on_its_own_tensors(instant_compile):
    from dataclasses import replace

    from sb3_snake.acceleration.settings import OptimizationSettings
    from sb3_snake.update.steps import CompiledSteps

    eager = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=1)
    settings = replace(eager, use_torch_compile=True, compile_after=0, compile_in_background=False)
    model = snake_pqn(population=3, optimizations=settings)
    model.learn(2 * 3 * 64)
    choices = [member.state["step_choice"] for member in model._population.members]
    assert instant_compile.started == [model.batch_size]  # one compile child for the run
    assert all(isinstance(choice.current, CompiledSteps) for choice in choices)
    assert len({id(choice.current.function) for choice in choices}) == 1
    assert all(choice.current.calls > 0 and not choice.current.failure for choice in choices)
    tensors = [choice.current._tensors[0][0].data_ptr() for choice in choices]  # each its own parameters
    assert len(set(tensors)) == 3
    assert model.optimizations_in_effect().compile.active


@pytest.mark.slow
def test_a_member_running_the_shared_compiled_update_trains_as_the_eager_step(tmp_path):
    from sb3_snake.update.child import compile_graph, load, save
    from sb3_snake.update.graph import graph_arguments, split
    from sb3_snake.update.steps import CompiledSteps
    from tests.pqn.test_optimization_layer import GRAPH_ONLY, assert_same_weights, fit_both, small_pqn

    source, member, eager = small_pqn(), small_pqn(), small_pqn()
    with torch.no_grad():  # other weights than the member's
        for parameter in source.policy.parameters():
            parameter.mul_(1.5)
    eager.policy.load_state_dict(member.policy.state_dict())
    rollout = eager.collect_rollout(eager._init_callback(None))
    update = source.step_choice.update
    update.start_pass(rollout, torch.arange(len(rollout.returns)).view(-1, source.batch_size))
    graph = update.graph()
    arguments = (split(update.example(2, source.batch_size), 2), torch.zeros(()))
    arguments += graph_arguments(source.policy.optimizer, graph, update.frozen())
    save(compile_graph(graph, arguments, backend=GRAPH_ONLY), tmp_path / "update.bin")
    function = load(tmp_path / "update.bin", "cpu", False, ["MATH"])
    own = member.step_choice.update
    member.step_choice.current = CompiledSteps(own, own.graph(), function, 2, member.batch_size)
    fit_both(eager, member, rollout)
    assert member.step_choice.current.calls > 0 and not member.step_choice.current.failure
    assert_same_weights(eager, member)


def test_the_memory_estimate_counts_every_member():
    from sb3_snake.training.config import TrainConfig
    from sb3_snake.training.learners import learner

    one = learner("pqn").memory(TrainConfig(), 400, 10_000)
    four = learner("pqn").memory(TrainConfig(population=4), 400, 10_000)
    assert {name: 4 * value for name, value in one.items() if name != "one minibatch"} == {
        name: value for name, value in four.items() if name != "one minibatch"
    }
    assert four["one minibatch"] == one["one minibatch"]  # one member fits at a time
