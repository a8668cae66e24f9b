"""The whole update compiled as one graph (CPU): the same steps as the eager EagerSteps, on the
optimizer's own state, through the saved file the training process loads, and refused where it
would differ. The compile runs here in the test's main thread (what the compile child runs);
tests/update/test_compile_child.py has the child itself."""

import pytest
import torch
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_snake.acceleration.optimizations import forward_context
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.system import cpu_has_native_bf16
from sb3_snake.dqn.gradient_step import DQNUpdate, DQNUpdateGraph
from sb3_snake.update.child import artifact_key, compile_graph, load, save
from sb3_snake.update.compile import Phase, steps_per_call_for, unsupported_reason
from sb3_snake.update.graph import graph_arguments, split
from sb3_snake.update.steps import CompiledSteps
from tests.conftest import small_dqn

EAGER = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=1)
COMPILED = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=True, num_threads=1)
#: AOTAutograd's eager backend instead of inductor, for the tests of what is traced and guarded
#: rather than of inductor's kernels: dynamo captures the same single graph under the same
#: guards, but no C++ is generated and built (minutes of the suite on a 2-core machine).
GRAPH_ONLY = "aot_eager"


def dqn_graph_arguments(model, graph):
    """The graph's tensor arguments on ``model``'s own tensors, as training passes them."""
    return graph_arguments(model.policy.optimizer, graph, DQNUpdate(model).frozen())


def adopt_compiled(model, folder, steps=1, batch_size=32, backend="inductor"):
    """Compile ``model``'s update for calls of ``steps`` batches of ``batch_size`` as the compile
    child does, save it, load it back, and make it the model's update."""
    graph = DQNUpdateGraph(model)
    learning_rate = torch.zeros(())
    batches = split(DQNUpdate(model).sample(steps, batch_size), steps)
    arguments = (batches, learning_rate, *dqn_graph_arguments(model, graph))
    active = model.active_optimizations
    with forward_context("cpu", active.bf16.active, active.sdpa_backends):
        path = folder / f"update-{artifact_key(graph, arguments, {'backend': backend})}.bin"
        save(compile_graph(graph, arguments, backend=backend), path)
    function = load(path, "cpu", active.bf16.active, active.sdpa_backends)  # as training loads it
    update = CompiledSteps(model.step_choice.update, graph, function, steps, batch_size)
    model.step_choice.current, model.step_choice.compile.phase = update, Phase.RUNNING
    return update


def twins(folder, eager_settings=EAGER, compiled_settings=COMPILED, steps=1, backend="inductor", **options):
    """An eager model and a compiled one with the same weights and the same replay buffer."""
    eager = small_dqn(eager_settings, board_size=6, transitions=96, **options)
    compiled = small_dqn(compiled_settings, board_size=6, transitions=96, **options)
    compiled.policy.load_state_dict(eager.policy.state_dict())
    adopt_compiled(compiled, folder, steps, backend=backend)
    return eager, compiled


def meaningful(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` without the key projection's bias, whose gradient is zero in exact arithmetic.

    Adding a bias to every key adds the same number to each of a query's scores, which softmax
    ignores; its computed gradient is rounding noise, and Adam divides that noise by its own
    size and steps by up to the learning rate in its sign. Eager and compiled kernels round
    differently (how differently depends on the CPU), so those elements cannot be compared.
    """
    if not name.endswith("attention.qkv.bias"):
        return tensor
    third = tensor.shape[0] // 3
    return torch.cat([tensor[:third], tensor[2 * third :]])


def assert_same_training_state(eager, compiled):
    for (name, a), b in zip(eager.q_net.named_parameters(), compiled.q_net.parameters(), strict=True):
        torch.testing.assert_close(meaningful(name, b), meaningful(name, a), rtol=1e-4, atol=1e-6, msg=name)
        state_a, state_b = eager.policy.optimizer.state[a], compiled.policy.optimizer.state[b]
        for key in ("exp_avg", "exp_avg_sq"):
            a_state, b_state = meaningful(name, state_a[key]), meaningful(name, state_b[key])
            torch.testing.assert_close(b_state, a_state, rtol=1e-4, atol=1e-8, msg=f"{name} {key}")
        torch.testing.assert_close(state_b["step"], state_a["step"], msg=f"{name} step")


def step_both(eager, compiled, steps=3, rtol=1e-4, per_call=1):
    """``steps`` updates of both models on the same batches: the eager one a batch at a time,
    the compiled one ``per_call`` batches to a call of its graph."""
    for _ in range(steps // per_call):
        data = eager.replay_buffer.sample(per_call * 32)
        batches = [
            ReplayBufferSamples(*(f if f is None else f[k * 32 : (k + 1) * 32] for f in data)) for k in range(per_call)
        ]
        eager_loss = torch.stack([eager.step_choice.update.gradient_step(batch) for batch in batches]).mean()
        compiled_loss = compiled.step_choice.current.graph_call(data, per_call)
        torch.testing.assert_close(compiled_loss, eager_loss, rtol=rtol, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "backend", "per_call"),
    [
        ({}, "inductor", 2),
        ({"double_dqn": True, "n_steps": 3, "policy_kwargs": {"dueling": True}, "food_shaping": 0.5}, GRAPH_ONLY, 3),
    ],
    ids=["dqn", "double-dueling-3step-shaped"],
)
def test_compiled_updates_train_as_the_eager_ones(options, backend, per_call, tmp_path):
    # the options change the graph's content; inductor's kernels are tested by the first case
    eager, compiled = twins(tmp_path, steps=per_call, backend=backend, **options)
    step_both(eager, compiled, steps=6, per_call=per_call)  # each step reads what the one before wrote
    assert compiled.step_choice.current.calls == 6 // per_call
    assert_same_training_state(eager, compiled)
    assert all(p.grad is None for p in compiled.q_net.parameters())  # gradients stay inside the graph


@pytest.mark.slow
@pytest.mark.skipif(not cpu_has_native_bf16(), reason="this CPU has no native bf16")
def test_in_bf16_with_the_flash_kernel_the_compiled_update_trains_as_the_eager_one(tmp_path):
    options = {"use_bf16": True, "use_flash_attention": True, "num_threads": 1}
    eager_settings = OptimizationSettings(**options, use_torch_compile=False)
    eager, compiled = twins(tmp_path, eager_settings, OptimizationSettings(**options, use_torch_compile=True))
    assert compiled.active_optimizations.bf16.active and compiled.active_optimizations.flash.active
    step_both(eager, compiled, rtol=1e-2)  # bf16 products round differently once compiled
    assert compiled.step_choice.current.calls == 3 and not compiled.step_choice.current.failure  # no fallback to eager


@pytest.mark.parametrize("bf16", [False, True])
def test_a_graph_loaded_outside_any_autocast_runs_in_the_context_it_was_compiled_for(bf16, tmp_path):
    # the training process loads with no autocast entered; the guards must expect the context of
    # the calls (bf16 autocast needs no native bf16 to be entered, so this runs on every CPU)
    model = small_dqn(EAGER, board_size=6, transitions=96)
    graph = DQNUpdateGraph(model)
    batches = split(DQNUpdate(model).sample(1, 32), 1)
    arguments = (batches, torch.zeros(()), *dqn_graph_arguments(model, graph))
    with forward_context("cpu", bf16, ["MATH"]):
        save(compile_graph(graph, arguments, backend=GRAPH_ONLY), tmp_path / "update.bin")
    function = load(tmp_path / "update.bin", "cpu", bf16, ["MATH"])
    assert not torch.is_autocast_enabled("cpu")
    with forward_context("cpu", bf16, ["MATH"]):
        assert torch.isfinite(function(graph, *arguments))  # its guards accept the call


def test_a_new_learning_rate_and_loaded_parameters_are_used_by_the_same_compiled_function(tmp_path):
    eager, compiled = twins(tmp_path, backend=GRAPH_ONLY)
    function = compiled.step_choice.current.function
    step_both(eager, compiled, steps=1)
    for model in (eager, compiled):
        model.policy.optimizer.param_groups[0]["lr"] = 0.01
    step_both(eager, compiled, steps=1)
    assert_same_training_state(eager, compiled)
    eager.save(tmp_path / "eager.zip")
    step_both(eager, compiled, steps=1)  # both move on; then both go back to the saved state
    eager.set_parameters(str(tmp_path / "eager.zip"))
    compiled.set_parameters(str(tmp_path / "eager.zip"))
    step_both(eager, compiled, steps=1)
    assert_same_training_state(eager, compiled)
    assert compiled.step_choice.current.function is function and compiled.step_choice.current.calls == 4


def test_new_values_baked_into_the_graph_make_the_compile_due_again(tmp_path):
    _, compiled = twins(tmp_path, backend=GRAPH_ONLY)
    compiled.set_hyperparameters(learning_rate=0.01)  # a tensor of the graph: it holds
    assert isinstance(compiled.step_choice.current, CompiledSteps)
    compiled.set_hyperparameters(gamma=0.9)  # a constant of the graph: compiled again, with the new value
    assert not isinstance(compiled.step_choice.current, CompiledSteps)
    assert compiled.compile_state.due(compiled._n_updates)


def serve_rows(model, data) -> None:
    """Make ``model``'s replay buffer return the rows of ``data`` in order, as many as each
    sample asks for: twins then train on the same batches however they draw them."""
    served = 0

    def sample(batch_size, env=None):
        nonlocal served
        rows = slice(served, served + batch_size)
        served += batch_size
        return ReplayBufferSamples(*(field if field is None else field[rows] for field in data))

    model.replay_buffer.sample = sample


def test_whole_calls_run_compiled_and_the_rest_of_a_count_eagerly(tmp_path):
    eager, compiled = twins(tmp_path, steps=4, backend=GRAPH_ONLY)
    data = eager.replay_buffer.sample(10 * 32)
    for model in (eager, compiled):
        serve_rows(model, data)
    for gradient_steps in (4, 6):  # one call of 4 steps; then one of 4 and two eager steps
        for model in (eager, compiled):
            model.train(gradient_steps=gradient_steps, batch_size=32)
        loss = compiled.logger.name_to_value["train/loss"]
        assert loss == pytest.approx(eager.logger.name_to_value["train/loss"], rel=1e-4)
    update = compiled.step_choice.current
    assert update.steps_per_call == 4 and update.calls == 2 and compiled._n_updates == 10
    assert_same_training_state(eager, compiled)  # Adam's step counts included: 10
    assert all(parameter.grad is None for parameter in compiled.q_net.parameters())  # not kept by the eager steps


def test_another_batch_size_than_the_graphs_trains_eagerly(tmp_path):
    _, compiled = twins(tmp_path, backend=GRAPH_ONLY)
    compiled.train(gradient_steps=2, batch_size=16)  # the graph is for 32: its guards would refuse 16
    update = compiled.step_choice.current
    assert isinstance(update, CompiledSteps) and update.calls == 0 and not update.failure
    compiled.train(gradient_steps=2, batch_size=32)
    assert update.calls == 2


def test_a_first_call_that_fails_trains_eagerly_and_turns_the_compile_off(tmp_path, monkeypatch):
    _, compiled = twins(tmp_path, backend=GRAPH_ONLY)

    def refused(*arguments):
        raise RuntimeError("GuardManager check failed, reason: a guard\nand more")

    monkeypatch.setattr(compiled.step_choice.current, "function", refused)
    before = [parameter.detach().clone() for parameter in compiled.q_net.parameters()]
    compiled.train(gradient_steps=2, batch_size=32)
    assert compiled._n_updates == 2 and any(
        not torch.equal(a, b) for a, b in zip(before, compiled.q_net.parameters(), strict=True)
    )  # the steps were trained, eagerly
    decision = compiled.active_optimizations.compile
    assert (
        not decision.active
        and decision.reason == "compile failed: RuntimeError: GuardManager check failed, reason: a guard and more"
    )  # the whole message, on one line
    assert not isinstance(compiled.step_choice.current, CompiledSteps)


def test_a_graph_holds_the_most_steps_that_divide_the_first_count():
    assert [steps_per_call_for(n) for n in (1, 2, 3, 4, 5, 6, 8, 9, 12)] == [1, 2, 3, 4, 1, 3, 4, 3, 4]


def test_the_artifact_key_changes_with_what_the_code_is_compiled_for():
    model = small_dqn(EAGER, board_size=5)
    graph = DQNUpdateGraph(model)
    batches = split(DQNUpdate(model).sample(2, 32), 2)
    arguments = (batches, torch.zeros(()), *dqn_graph_arguments(model, graph))
    key = artifact_key(graph, arguments, {"backend": "inductor"})
    assert key == artifact_key(graph, arguments, {"backend": "inductor"})
    assert key != artifact_key(graph, arguments, {"backend": "aot_eager"})
    assert key != artifact_key(graph, arguments, {"backend": "inductor", "threads": 2})  # guarded, compiled in
    other_batch = (split(DQNUpdate(model).sample(2, 16), 2), *arguments[1:])
    assert key != artifact_key(graph, other_batch, {"backend": "inductor"})
    model.gamma = 0.5
    assert key != artifact_key(DQNUpdateGraph(model), arguments, {"backend": "inductor"})


def test_only_plain_adam_and_float_observations_are_compiled_whole():
    model = small_dqn(EAGER, board_size=5)
    assert unsupported_reason(DQNUpdate(model)) == ""
    model.policy.optimizer.param_groups[0]["amsgrad"] = True
    assert unsupported_reason(DQNUpdate(model)) == "the whole update is not compiled with Adam's amsgrad"
    partial = small_dqn(EAGER, board_size=5)
    partial.policy.optimizer.param_groups[0]["params"] = list(partial.q_net.parameters())[:-1]
    expected = "the whole update is compiled for an optimizer of exactly the online network's parameters"
    assert unsupported_reason(DQNUpdate(partial)) == expected
    other = small_dqn(EAGER, board_size=5, policy_kwargs={"optimizer_class": torch.optim.AdamW})
    assert unsupported_reason(DQNUpdate(other)) == "the whole update is compiled for Adam only, not AdamW"
    compiled = small_dqn(COMPILED, board_size=5, policy_kwargs={"optimizer_class": torch.optim.AdamW})
    decision = compiled.active_optimizations.compile  # on a CPU nothing else is compiled
    assert not decision.active and decision.reason == "the whole update is compiled for Adam only, not AdamW"
