"""The whole update compiled as one graph (CPU): the same steps as the eager UpdateStep, on the
optimizer's own state, and refused where it would differ."""

import functools
import sys
import threading

import pytest
import torch
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.system import cpu_has_native_bf16
from sb3_snake.dqn.update import background
from sb3_snake.dqn.update.compile import unsupported_reason
from sb3_snake.dqn.update.compiled import SWITCH_INTERVAL, CompiledUpdate, steps_per_call_for
from sb3_snake.dqn.update.step import UpdateStep
from tests.conftest import small_dqn

EAGER = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=False, num_threads=1)
COMPILED = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=True, num_threads=1)


_holds: list[threading.Event] = []  # the events of hold_background_compile, released after each test


@pytest.fixture(autouse=True)
def no_compile_left_running():
    """Each test releases the compiles it held and waits for the background compiles it
    started, abandoned ones too: one left running would hold dynamo's compile lock, and make the
    next test's compile wait for it."""
    yield
    while _holds:
        _holds.pop().set()
    while background.background_compile_running():
        threading.Event().wait(0.01)


@pytest.fixture
def two_threads(monkeypatch):
    """Two threads on what reads as a 2-core CPU (``ADAPTIVE`` settings adapt between 2 and 1); the
    test's count is put back after."""
    monkeypatch.setattr("sb3_snake.common.system.cpu_cores", lambda: 2)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def twins(eager_settings=EAGER, compiled_settings=COMPILED, **options):
    """An eager model and a compiled one with the same weights and the same replay buffer."""
    eager = small_dqn(eager_settings, board_size=6, transitions=96, **options)
    compiled = small_dqn(compiled_settings, board_size=6, transitions=96, **options)
    compiled.policy.load_state_dict(eager.policy.state_dict())
    assert isinstance(compiled.updates.current, CompiledUpdate)
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
        eager_loss = torch.stack([eager.updates.current(batch) for batch in batches]).mean()
        compiled_loss = compiled.updates.current.update(data, per_call)
        torch.testing.assert_close(compiled_loss, eager_loss, rtol=rtol, atol=1e-7)


def graph_only(monkeypatch) -> None:
    """Compile with AOTAutograd's eager backend instead of inductor, for the tests of what is
    captured rather than of inductor's kernels: dynamo captures the same single graph under the
    same guards, so what it would bake in, recompile for or refuse shows as with inductor, but
    no C++ is generated and built (minutes of the suite on a 2-core machine)."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "kernels", "per_call"),
    [
        ({}, "inductor", 2),
        ({"double_dqn": True, "n_steps": 3, "policy_kwargs": {"dueling": True}, "food_shaping": 0.5}, "graph only", 3),
    ],
    ids=["dqn", "double-dueling-3step-shaped"],
)
def test_compiled_updates_train_as_the_eager_ones(options, kernels, per_call, monkeypatch):
    if kernels == "graph only":  # the options change the graph's content; inductor's kernels are tested above
        graph_only(monkeypatch)
    eager, compiled = twins(**options)
    step_both(eager, compiled, steps=6, per_call=per_call)  # each step reads what the one before wrote
    assert compiled.updates.current.calls == 6 // per_call
    assert_same_training_state(eager, compiled)
    assert all(p.grad is None for p in compiled.q_net.parameters())  # gradients stay inside the graph


@pytest.mark.slow
@pytest.mark.skipif(not cpu_has_native_bf16(), reason="this CPU has no native bf16")
def test_in_bf16_with_the_flash_kernel_the_compiled_update_trains_as_the_eager_one():
    options = {"use_bf16": True, "use_flash_attention": True, "num_threads": 1}
    eager_settings = OptimizationSettings(**options, use_torch_compile=False)
    eager, compiled = twins(eager_settings, OptimizationSettings(**options, use_torch_compile=True))
    assert compiled.active_optimizations.bf16.active and compiled.active_optimizations.flash.active
    step_both(eager, compiled, rtol=1e-2)  # bf16 products round differently once compiled
    assert compiled.updates.current is not None and compiled.updates.current.calls == 3  # no fallback to eager
    assert compiled.active_optimizations.compile.active


@pytest.mark.slow
def test_a_new_learning_rate_and_loaded_parameters_are_used_without_a_new_compile(tmp_path, monkeypatch):
    graph_only(monkeypatch)  # a baked-in learning rate or a recompile is dynamo's doing, not inductor's
    eager, compiled = twins()
    step_both(eager, compiled, steps=1)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
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
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # nothing compiled again
    assert compiled.updates.current.calls == 4


@pytest.mark.slow
def test_a_background_compile_leaves_the_model_alone_and_its_graph_serves_the_model(monkeypatch):
    graph_only(monkeypatch)  # which tensors the graph reads and whether it compiles again is dynamo's doing
    eager, compiled = twins(double_dqn=True)
    update = compiled.updates.current
    before = [parameter.detach().clone() for parameter in compiled.policy.parameters()]
    update.compile_in_background(compiled.replay_buffer.sample(32))
    update.finish_background()  # waits for the thread
    assert update.failure == ""
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for parameter, kept in zip(compiled.policy.parameters(), before, strict=True):
        torch.testing.assert_close(parameter, kept, rtol=0, atol=0)  # the compile ran on copies
    assert not compiled.policy.optimizer.state  # and Adam's state is not created behind the optimizer's back
    step_both(eager, compiled, steps=2)
    assert_same_training_state(eager, compiled)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # the model's own tensors: no new compile


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


@pytest.mark.slow
def test_the_first_call_fixes_the_steps_of_a_graph_and_other_counts_train_as_eagerly(monkeypatch):
    graph_only(monkeypatch)  # how many graphs are compiled is dynamo's doing
    eager, compiled = twins()
    data = eager.replay_buffer.sample(10 * 32)
    for model in (eager, compiled):
        serve_rows(model, data)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for gradient_steps in (4, 6):  # one call of 4 steps; then one of 4 and two eager steps
        for model in (eager, compiled):
            model.train(gradient_steps=gradient_steps, batch_size=32)
        loss = compiled.logger.name_to_value["train/loss"]
        assert loss == pytest.approx(eager.logger.name_to_value["train/loss"], rel=1e-4)
    update = compiled.updates.current
    assert update.steps_per_call == 4 and update.calls == 2 and compiled._n_updates == 10
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs + 1  # nothing compiled again
    assert_same_training_state(eager, compiled)  # Adam's step counts included: 10
    assert all(parameter.grad is None for parameter in compiled.q_net.parameters())  # not kept by the eager steps


def test_a_graph_holds_the_most_steps_that_divide_the_first_count():
    assert [steps_per_call_for(n) for n in (1, 2, 3, 4, 5, 6, 8, 9, 12)] == [1, 2, 3, 4, 1, 3, 4, 3, 4]


def hold_background_compile(monkeypatch, then_compile: bool = True) -> threading.Event:
    """Make background compiles wait for the returned event before they compile (or, with
    ``then_compile`` False, end without compiling, for tests of what comes before)."""
    release, compile_on_copies = threading.Event(), CompiledUpdate._compile_on_copies
    _holds.append(release)

    def held(self, *args):
        release.wait()
        if then_compile:
            compile_on_copies(self, *args)

    monkeypatch.setattr(CompiledUpdate, "_compile_on_copies", held)
    return release


#: Compiled, with the thread count the run's to choose (adaptive) on a 2-core CPU.
ADAPTIVE = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=True, num_threads="auto")


@pytest.mark.slow
def test_training_goes_on_eagerly_until_the_background_compile_is_ready(monkeypatch, two_threads):
    graph_only(monkeypatch)
    release = hold_background_compile(monkeypatch)
    switch_interval = sys.getswitchinterval()
    model = small_dqn(ADAPTIVE, board_size=6, transitions=96, compile_in_background=True)
    assert model.active_optimizations.adaptive_threads == (2, 1)
    for _ in range(3):
        model.train(gradient_steps=2, batch_size=32)
    assert type(model.updates.current) is UpdateStep and model._n_updates == 6
    in_effect = model.optimizations_in_effect().compile
    assert not in_effect.active
    assert in_effect.reason == "compiling in the background since gradient step 0 (6 trained)"
    assert torch.get_num_threads() == 1  # training left a core to the compile
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL)  # and asks for the GIL back sooner
    release.set()  # the compile (its thread count set, then training's lowered) starts only now
    model.updates.pending.finish_background()
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    model.train(gradient_steps=2, batch_size=32)
    assert isinstance(model.updates.current, CompiledUpdate) and model.updates.current.calls == 1  # of 2 steps
    assert torch.get_num_threads() == 2  # back to the count the graph was compiled for
    assert sys.getswitchinterval() == pytest.approx(switch_interval)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # so it is not compiled again
    assert model.optimizations_in_effect().compile.active and model.compile_state.active
    assert model._n_updates == 8


def test_training_that_stops_mid_compile_abandons_it_and_compiles_again_after_it(monkeypatch, two_threads):
    graph_only(monkeypatch)
    release = hold_background_compile(monkeypatch)
    switch_interval = sys.getswitchinterval()
    model = small_dqn(ADAPTIVE, board_size=6, transitions=96, compile_in_background=True, train_freq=8)
    model.learn(16)  # training ends while the compile is held
    abandoned = model.updates.pending
    assert abandoned is None and model.compile_state.compiling_since is None
    assert sys.getswitchinterval() == pytest.approx(switch_interval) and torch.get_num_threads() == 2
    in_effect = model.optimizations_in_effect().compile
    assert not in_effect.active
    assert in_effect.reason.startswith("still compiling in the background (since gradient step ")
    assert in_effect.reason.endswith(f"when training stopped ({model._n_updates:,} trained)")
    model.train(gradient_steps=1, batch_size=32)
    assert model.updates.pending is None  # the abandoned compile still runs: none starts beside it
    release.set()
    while background.background_compile_running():
        threading.Event().wait(0.01)
    model.train(gradient_steps=1, batch_size=32)  # starts the compile again (the hold is released)
    model.updates.pending.finish_background()
    model.train(gradient_steps=1, batch_size=32)
    assert isinstance(model.updates.current, CompiledUpdate) and model.compile_state.active


def test_eager_steps_beside_a_background_compile_keep_their_gradient_tensors(monkeypatch, two_threads):
    """The compile reads the live parameters' gradients while it traces: eager steps meanwhile
    zero them in place rather than have backward assign new ones (see ``update.background``)."""
    hold_background_compile(monkeypatch)
    model = small_dqn(ADAPTIVE, board_size=5, compile_in_background=True)
    model.train(gradient_steps=1, batch_size=32)  # starts the compile (held), then one eager step
    assert model.updates.pending is not None and background.background_compile_running()
    gradients = [parameter.grad for parameter in model.q_net.parameters()]
    assert all(gradient is not None for gradient in gradients)
    model.train(gradient_steps=2, batch_size=32)
    assert all(p.grad is g for p, g in zip(model.q_net.parameters(), gradients, strict=True))
    assert any(gradient.abs().sum() > 0 for gradient in gradients)  # filled by the last backward
    model.updates.close()


def test_zero_grad_frees_the_gradients_unless_a_background_compile_runs():
    parameter = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([parameter])
    parameter.sum().backward()
    gradient = parameter.grad
    release = threading.Event()
    compiling = threading.Thread(target=release.wait)
    compiling.start()
    background.register(compiling)
    try:
        background.zero_grad(optimizer)
        assert parameter.grad is gradient and not gradient.any()  # the same tensor, zeroed
    finally:
        release.set()
        compiling.join()
        background.unregister(compiling)
    background.zero_grad(optimizer)
    assert parameter.grad is None


def test_an_explicit_thread_count_is_left_alone_while_compiling(monkeypatch, two_threads):
    hold_background_compile(monkeypatch, then_compile=False)
    model = small_dqn(COMPILED, board_size=5, compile_in_background=True)  # --threads 1: the user's
    model.train(gradient_steps=1, batch_size=32)
    assert model.updates.pending is not None and torch.get_num_threads() == 2
    model.updates.close()


def test_the_compiling_thread_sets_its_thread_count_before_training_lowers_its_own(monkeypatch, two_threads):
    """Setting a count resets process-wide state too, so the two threads never set one at once."""
    hold_background_compile(monkeypatch, then_compile=False)
    model = small_dqn(ADAPTIVE, board_size=5, compile_in_background=True)
    calls, real = [], torch.set_num_threads

    def slow_set(count):  # a slow reset, which the other thread's call must not overlap
        calls.append(("start", threading.current_thread().name, count))
        threading.Event().wait(0.05)
        real(count)
        calls.append(("end", threading.current_thread().name, count))

    monkeypatch.setattr(torch, "set_num_threads", slow_set)
    model.train(gradient_steps=1, batch_size=32)  # starts the compile
    training = threading.current_thread().name
    assert calls == [
        ("start", "sb3-snake-compile", 2),
        ("end", "sb3-snake-compile", 2),
        ("start", training, 1),
        ("end", training, 1),
    ]
    model.updates.close()


def test_a_background_compile_that_fails_leaves_training_eager_with_the_reason(monkeypatch, caplog):
    def failing_compile(function, **options):
        def compiled(*args):
            raise RuntimeError("no compiler here")

        return compiled

    monkeypatch.setattr(torch, "compile", failing_compile)
    release = hold_background_compile(monkeypatch)
    model = small_dqn(COMPILED, board_size=5, compile_in_background=True)
    model.train(gradient_steps=1, batch_size=32)  # starts the compile
    release.set()
    model.updates.pending.finish_background()
    model.train(gradient_steps=1, batch_size=32)  # finds it failed
    assert type(model.updates.current) is UpdateStep and model.updates.pending is None
    compile_decision = model.active_optimizations.compile
    assert not compile_decision.active and compile_decision.reason == "compile failed: RuntimeError: no compiler here"
    assert "training eagerly" in caplog.text
    model.train(gradient_steps=1, batch_size=32)
    assert model._n_updates == 3 and model.updates.pending is None  # and it is not tried again


def test_inductors_plain_symbolic_trace_is_made_before_a_background_compile(monkeypatch):
    loop_body = pytest.importorskip("torch._inductor.loop_body")
    traced_in = []
    real = torch.fx.symbolic_trace

    def recording(*args, **kwargs):
        traced_in.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.fx, "symbolic_trace", recording)
    loop_body.InterpreterShim._dummy_gm.cache_clear()
    model = small_dqn(COMPILED, board_size=5)
    release = hold_background_compile(monkeypatch, then_compile=False)  # the thread does nothing
    model.updates.current.compile_in_background(model.replay_buffer.sample(32))
    assert traced_in == [threading.current_thread().name]  # traced here, before the thread runs
    release.set()
    model.updates.current.finish_background()


def test_only_plain_adam_and_float_observations_are_compiled_whole():
    model = small_dqn(EAGER, board_size=5)
    assert unsupported_reason(model) == ""
    model.policy.optimizer.param_groups[0]["amsgrad"] = True
    assert unsupported_reason(model) == "the whole update is not compiled with Adam's amsgrad"
    partial = small_dqn(EAGER, board_size=5)
    partial.policy.optimizer.param_groups[0]["params"] = list(partial.q_net.parameters())[:-1]
    expected = "the whole update is compiled for an optimizer of exactly the online network's parameters"
    assert unsupported_reason(partial) == expected
    other = small_dqn(EAGER, board_size=5, policy_kwargs={"optimizer_class": torch.optim.AdamW})
    assert unsupported_reason(other) == "the whole update is compiled for Adam only, not AdamW"
