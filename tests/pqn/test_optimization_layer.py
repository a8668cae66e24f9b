"""The optimization layer on PQN (``sb3_snake.pqn.gradient_step`` run by ``sb3_snake.update``): the
compiled minibatch step trains as the eager one, the card's flags change what a PQN run really runs
(each seen inside a gradient step), a batch size that does not fit the rollout is refused, a crash
of the compiler leaves the run training eagerly, and PQN files saved before all this still load."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from stable_baselines3.common.logger import Logger
from typer.testing import CliRunner

from sb3_snake import BatchedSnakeVecEnv
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.cli import app
from sb3_snake.common import system
from sb3_snake.networks.q_network import SnakeQNetwork
from sb3_snake.persistence import load_model
from sb3_snake.pqn import PQN
from sb3_snake.update.child import FAULT_ENV, compile_graph, load, save
from sb3_snake.update.graph import graph_arguments, split
from sb3_snake.update.steps import CompiledSteps, EagerSteps

runner = CliRunner()
DATA = Path(__file__).resolve().parents[1] / "data"
EAGER = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=1)
#: AOTAutograd's eager backend: the graph dynamo captures and its guards, without building C++.
GRAPH_ONLY = "aot_eager"


def small_pqn(settings=EAGER, policy="MlpPolicy", **kwargs):
    """A PQN of 8 games on a 6x6 board, the options ``sb3-snake train`` turns on, rollouts of 8 moves."""
    env = BatchedSnakeVecEnv(8, board_size=6, seed=0, egocentric=True)
    options = {"safe_exploration": True, "fatal_move_targets": True, "stall_as_death": True, "food_shaping": 1.0}
    model = PQN(
        policy, env, n_steps=8, n_minibatches=4, seed=0, device="cpu", optimizations=settings, **options, **kwargs
    )
    model.set_logger(Logger(folder=None, output_formats=[]))
    model._setup_learn(64, None)
    return model


def twins(tmp_path, backend=GRAPH_ONLY, per_call=2, **kwargs):
    """An eager PQN and one whose minibatch step runs compiled, with the same weights, and a rollout."""
    eager, compiled = small_pqn(**kwargs), small_pqn(**kwargs)
    compiled.policy.load_state_dict(eager.policy.state_dict())
    rollout = eager.collect_rollout(eager._init_callback(None))
    update = compiled.step_choice.update
    update.start_pass(rollout, torch.arange(len(rollout.returns)).view(-1, compiled.batch_size))
    graph = update.graph()
    arguments = (split(update.example(per_call, compiled.batch_size), per_call), torch.zeros(()))
    arguments += graph_arguments(compiled.policy.optimizer, graph, update.frozen())
    save(compile_graph(graph, arguments, backend=backend), tmp_path / "update.bin")
    function = load(tmp_path / "update.bin", "cpu", False, ["MATH"])
    compiled.step_choice.current = CompiledSteps(update, graph, function, per_call, compiled.batch_size)
    return eager, compiled, rollout


def fit_both(eager, compiled, rollout, passes=2):
    """``passes`` passes over ``rollout`` in the same order, through each model's way of running steps."""
    for k in range(passes):
        order = torch.randperm(len(rollout.returns), generator=torch.Generator().manual_seed(k))
        for model in (eager, compiled):
            model.step_choice.update.start_pass(rollout, order.view(-1, model.batch_size))
            loss = model.step_choice.current.run(model.n_minibatches, model.batch_size)
            assert torch.isfinite(loss)


def assert_same_weights(eager, compiled, rtol=1e-4, atol=1e-6):
    """The same parameters and Adam state, within float tolerance: the moments' elements near zero
    carry rounding noise of a few 1e-7 (eager and compiled kernels sum in other orders)."""
    for (name, a), b in zip(eager.q_net.named_parameters(), compiled.q_net.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=rtol, atol=atol, msg=name)
        for key, key_atol in (("exp_avg", 10 * atol), ("exp_avg_sq", atol / 100), ("step", 0)):
            state_a, state_b = eager.policy.optimizer.state[a][key], compiled.policy.optimizer.state[b][key]
            torch.testing.assert_close(state_b, state_a, rtol=rtol, atol=key_atol, msg=f"{name} {key}")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "options"),
    [("inductor", {}), (GRAPH_ONLY, {"symmetry_augmentation": True})],
    ids=["mlp-inductor", "mlp-augmented"],
)
def test_the_compiled_minibatch_step_trains_as_the_eager_one(tmp_path, backend, options):
    eager, compiled, rollout = twins(tmp_path, backend=backend, **options)
    if options.get("symmetry_augmentation"):  # both draw the same symmetries
        compiled._augmentation.generator.set_state(eager._augmentation.generator.get_state())
    assert type(eager.step_choice.current) is EagerSteps
    fit_both(eager, compiled, rollout)  # each step reads what the one before wrote
    steps = compiled.step_choice.current
    assert steps.calls == 2 * (compiled.n_minibatches // 2) and not steps.failure
    assert_same_weights(eager, compiled)
    assert all(parameter.grad is None for parameter in compiled.q_net.parameters())  # kept inside the graph


def test_the_bf16_graph_runs_within_bf16s_own_tolerance(tmp_path, monkeypatch):
    # bf16 autocast runs on every CPU (slowly where the CPU has no native bf16): the numbers, not the speed
    monkeypatch.setattr(system, "native_bf16", lambda device: True)
    settings = replace(EAGER, use_bf16=True)
    eager, compiled, rollout = twins(tmp_path, settings=settings)
    assert eager.active_optimizations.bf16.active and compiled.active_optimizations.bf16.active
    fit_both(eager, compiled, rollout, passes=1)
    assert_same_weights(eager, compiled, rtol=2e-2, atol=2e-3)


class Recorder:
    """What each forward pass of a Q-network saw: whether it was a training step's (gradients on),
    its rows, whether bf16 autocast was on, and which attention kernels were allowed."""

    def __init__(self, monkeypatch):
        self.seen = []
        original = SnakeQNetwork.q_values

        def q_values(network, features):
            self.seen.append(
                {
                    "training": torch.is_grad_enabled(),
                    "rows": features.shape[0],
                    "bf16": torch.is_autocast_enabled("cpu"),
                    "flash": torch.backends.cuda.flash_sdp_enabled(),
                    "math": torch.backends.cuda.math_sdp_enabled(),
                }
            )
            return original(network, features)

        monkeypatch.setattr(SnakeQNetwork, "q_values", q_values)

    def training_steps(self):
        return [seen for seen in self.seen if seen["training"]]


PQN_RUN = ["train", "--algo", "pqn", "--n-envs", "4", "--board-size", "5", "--device", "cpu", "--threads", "1"]
PQN_RUN += ["--rollout-steps", "8", "--timesteps", "96"]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--batch-size", "16"], {"rows": 16}),
        (["--batch-size", "4"], {"rows": 4}),
        (["--bf16"], {"bf16": True}),
        (["--no-bf16"], {"bf16": False}),
        (["--flash-attention", "--policy", "attention"], {"flash": True, "math": False}),
        (["--no-flash-attention", "--policy", "attention"], {"flash": False, "math": True}),
    ],
)
def test_the_cards_flags_change_what_the_pqn_run_runs_in_its_gradient_steps(flags, expected, tmp_path, monkeypatch):
    monkeypatch.setattr(system, "native_bf16", lambda device: True)  # bf16 decided on, where asked, on any CPU
    recorder = Recorder(monkeypatch)
    given = ["--no-compile", "--batch-size", "8", "--no-bf16", "--no-flash-attention"]
    result = runner.invoke(app, [*PQN_RUN, *given, *flags, "--output", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    steps = recorder.training_steps()
    assert steps and all(seen[key] == value for seen in steps for key, value in expected.items())
    acting = [seen for seen in recorder.seen if not seen["training"]]  # the rollout's forward passes too
    assert all(seen[key] == value for seen in acting for key, value in expected.items() if key != "rows")


@pytest.mark.parametrize(("policy", "kernel_runs"), [("mlp", False), ("cnn", False), ("attention", True)])
def test_an_attention_kernel_is_reported_active_only_for_a_network_with_attention(policy, kernel_runs, tmp_path):
    flags = ["--no-compile", "--batch-size", "8", "--no-bf16", "--flash-attention", "--policy", policy]
    result = runner.invoke(app, [*PQN_RUN, *flags, "--output", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    active = json.loads((tmp_path / "run" / "summary.json").read_text())["active"]
    assert active["flash_attention_requested"] is True
    assert active["flash_attention_active"] is kernel_runs
    assert kernel_runs or "has no attention" in active["flash_attention_reason"]


def test_the_compile_flag_runs_pqns_steps_compiled_and_no_compile_eagerly(tmp_path, monkeypatch, instant_compile):
    runs = {}
    for flag in ("--compile", "--no-compile"):
        result = runner.invoke(
            app, [*PQN_RUN, "--batch-size", "8", flag, "--compile-after", "0", "--output", str(tmp_path / flag)]
        )
        assert result.exit_code == 0, result.output
        runs[flag] = json.loads((tmp_path / flag / "summary.json").read_text())["active"]
    assert runs["--compile"]["torch_compile_active"] is True and instant_compile.started == [8]
    assert runs["--no-compile"]["torch_compile_requested"] is False


def test_a_batch_size_that_does_not_divide_the_rollout_is_refused_in_one_line(tmp_path):
    result = runner.invoke(app, [*PQN_RUN, "--batch-size", "12", "--output", str(tmp_path / "run")])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "batch_size must divide PQN's rollout of 32 samples (4 games x 8 moves)" in result.output
    assert "use a divisor such as 8 or 16" in result.output and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_crash_of_the_compiler_leaves_a_pqn_run_training_eagerly(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "crash")
    model = small_pqn(replace(EAGER, use_torch_compile=True, compile_after=0, compile_in_background=False))
    model.learn(3 * 64)
    assert model._n_updates == 3 * 2 * model.n_minibatches and type(model.step_choice.current) is EagerSteps
    decision = model.optimizations_in_effect().compile
    assert not decision.active and decision.reason.startswith("compile child was killed by SIGSEGV")


def test_a_pqn_model_reports_what_the_layer_really_runs():
    model = small_pqn(replace(EAGER, use_torch_compile=True, compile_after=500))
    active = model.optimizations_in_effect()
    assert active.compile.requested and not active.compile.active
    assert active.compile.reason == "deferred to gradient step 500, not reached (0 trained)"
    assert not active.cuda_graph.active and active.cuda_graph.reason == "CUDA graphs need a CUDA device, not cpu"
    assert model.q_net.forward_context is not None and model.policy.q_net_average.forward_context is not None


@pytest.mark.parametrize("policy", ["mlp", "cnn", "attention"])
def test_pqn_files_saved_before_the_layer_applied_to_pqn_still_load_and_play(policy):
    model = load_model(DATA / f"pqn_{policy}_ce7c078.zip")
    assert isinstance(model, PQN) and model.num_timesteps == 64
    board = BatchedSnakeVecEnv(2, board_size=5, seed=0, egocentric=True).reset()
    actions, _ = model.predict(board, deterministic=True)
    assert actions.shape == (2,)
