"""The optimization layer, proven over real DQN gradient steps on CPU, and its CUDA rules as logic."""

import threading
import types
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch._dynamo
from torch.nn.attention import SDPBackend
from torch.profiler import profile

from sb3_snake import BatchedSnakeVecEnv
from sb3_snake.acceleration.description import summary_lines
from sb3_snake.acceleration.optimizations import (
    COMPILE_ON_CPU_ONLY,
    ActiveOptimizations,
    Decision,
    choose_num_threads,
    compile_unavailable,
    decide_bf16,
    decide_compile,
    decide_cuda_graph,
    decide_flash,
    decide_sdpa_backend,
    probe_bf16,
    probe_flash,
    threads_for,
    torch_threads,
    use_device_replay_buffer,
)
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.common.system import cpu_cores, cpu_has_native_bf16
from sb3_snake.dqn.snake_dqn import SnakeDQN
from sb3_snake.networks.attention import AttentionPool, SelfAttention
from sb3_snake.update.compile import MAIN_THREAD_ONLY, WHOLE_UPDATE, Compile, Phase, decide_compiled_update
from sb3_snake.update.steps import CompiledSteps, EagerSteps
from tests.conftest import SMALL_POLICY, small_dqn

FLASH_KERNEL = "aten::_scaled_dot_product_flash_attention_for_cpu"
COMPILED = OptimizationSettings(
    use_bf16=False,
    use_flash_attention=False,
    use_torch_compile=True,
    num_threads=1,
    compile_after=0,
    compile_in_background=False,
)


def compiled_after(steps: int) -> OptimizationSettings:
    """:data:`COMPILED`, the compile starting after ``steps`` gradient steps."""
    return replace(COMPILED, compile_after=steps)


needs_bf16 = pytest.mark.skipif(not cpu_has_native_bf16(), reason="this CPU has no native bf16")


def make_model(**settings):
    options = {"use_bf16": False, "use_flash_attention": False, "use_torch_compile": False, "num_threads": 1}
    return small_dqn(OptimizationSettings(**{**options, **settings}), board_size=6, transitions=64)


def kernel_names(model):
    with profile() as prof:
        model.train(gradient_steps=2, batch_size=32)
    return {event.name for event in prof.events()}


def test_flash_kernel_runs_when_on_and_never_when_off():
    assert FLASH_KERNEL in kernel_names(make_model(use_flash_attention=True))
    names_off = kernel_names(make_model(use_flash_attention=False))
    assert FLASH_KERNEL not in names_off
    assert any("scaled_dot_product_attention_math" in name for name in names_off)


def _layer_output_dtypes(model):
    dtypes, hooks = {}, []

    def record(name):
        def hook(module, inputs, output):
            dtypes[name] = output.dtype

        return hook

    for name, module in model.q_net.features_extractor.named_modules():
        if isinstance(module, (torch.nn.Linear, SelfAttention, AttentionPool)):
            hooks.append(module.register_forward_hook(record(name)))
    q_values = model.q_net(torch.as_tensor(model.observation_space.sample()[None]))
    for hook in hooks:
        hook.remove()
    return dtypes, q_values.dtype


@needs_bf16
def test_bf16_layers_produce_bfloat16_and_q_values_stay_float32():
    model = make_model(use_bf16=True)
    assert model.active_optimizations.bf16.active
    dtypes, q_dtype = _layer_output_dtypes(model)
    assert set(dtypes.values()) == {torch.bfloat16} and len(dtypes) >= 6
    assert q_dtype == torch.float32
    model.train(gradient_steps=1, batch_size=32)  # the TD loss runs in float32 without error


def test_without_bf16_everything_is_float32():
    dtypes, q_dtype = _layer_output_dtypes(make_model(use_bf16=False))
    assert set(dtypes.values()) == {torch.float32} and q_dtype == torch.float32


def test_a_deferred_compile_trains_eagerly_first_then_compiles_once(instant_compile):
    model = small_dqn(compiled_after(3), board_size=6, transitions=64)
    assert type(model.step_choice.current) is EagerSteps and instant_compile.started == []
    deferred = f"after the first 3 gradient steps, in a child process: {WHOLE_UPDATE}"  # when, where, what
    assert model.active_optimizations.compile == Decision.on(deferred)
    summary = summary_lines(model.active_optimizations)
    assert any(f"enabled ({deferred})" in line for line in summary)
    pending = model.optimizations_in_effect().compile
    assert pending == Decision.off("deferred to gradient step 3, not reached (0 trained)")
    assert not model.compile_state.running
    for _ in range(5):
        model.train(gradient_steps=1, batch_size=32)
    assert instant_compile.started == [32]
    assert isinstance(model.step_choice.current, CompiledSteps) and model.step_choice.current.calls == 2
    in_effect = model.optimizations_in_effect().compile
    assert model.compile_state.running and in_effect.active and in_effect.reason.startswith(deferred)
    assert (
        "compiled in a child process in 0 s for calls of 1 gradient step, adopted at gradient step 3 (training paused"
        in in_effect.reason
    )


def test_on_the_cpu_a_model_whose_update_is_not_compiled_whole_is_not_compiled(instant_compile):
    policy_kwargs = {"optimizer_class": torch.optim.SGD, "features_extractor_kwargs": {"embed_dim": 8}}
    model = small_dqn(compiled_after(3), board_size=6, transitions=64, policy_kwargs=policy_kwargs)
    off = Decision.off("the whole update is compiled for Adam only, not SGD")
    assert model.active_optimizations.compile == off
    for _ in range(4):
        model.train(gradient_steps=1, batch_size=32)
    assert instant_compile.started == [] and model.optimizations_in_effect().compile == off


def test_on_the_cpu_compile_compiles_the_whole_update_at_the_first_update(instant_compile):
    model = small_dqn(COMPILED, board_size=6, transitions=64)
    assert model.active_optimizations.compile == Decision.on(f"in a child process: {WHOLE_UPDATE}")
    assert type(model.step_choice.current) is EagerSteps and model.q_net._compiled_call_impl is None
    model.train(gradient_steps=2, batch_size=32)
    assert isinstance(model.step_choice.current, CompiledSteps) and model.q_net._compiled_call_impl is None
    assert model.step_choice.current.steps_per_call == 2 and model.step_choice.current.calls == 1
    assert model.compile_state.running and model.optimizations_in_effect().compile.active


def background_model(counts=(2, 1)):
    """A model compiling in the background whose thread count is the run's to choose (``counts``), at 2 threads."""
    model = small_dqn(replace(COMPILED, compile_in_background=True), board_size=6, transitions=64)
    model.active_optimizations = replace(model.active_optimizations, adaptive_threads=counts)
    torch.set_num_threads(2)
    return model


@pytest.fixture
def threads_restored():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_training_leaves_the_child_a_core_and_the_graph_runs_at_the_runs_own_count(instant_compile, threads_restored):
    model = background_model()
    choice, compile = model.step_choice, model.compile_state
    model.train(gradient_steps=2, batch_size=32)  # starts the child; training leaves it a core meanwhile
    assert compile.phase is Phase.COMPILING and type(choice.current) is EagerSteps
    assert (compile.job.steps_per_call, compile.job.threads, torch.get_num_threads()) == (2, 2, 1)
    model.train(gradient_steps=2, batch_size=32)  # adopts the graph, at the run's count again
    assert (choice.current.steps_per_call, choice.current.threads, choice.current.calls) == (2, 2, 1)
    assert compile.phase is Phase.RUNNING and compile.job is None and torch.get_num_threads() == 2
    assert not compile.due(model._n_updates)


def test_new_values_while_the_child_compiles_drop_its_graph_at_adoption_and_compile_again(
    instant_compile, threads_restored
):
    model = background_model()
    model.train(gradient_steps=2, batch_size=32)  # starts the child
    assert model.compile_state.job.graph.gamma != 0.5
    model.gamma = 0.5
    model.step_choice.reload()  # eager steps read the new value; the child compiles the old one
    model.train(gradient_steps=2, batch_size=32)  # its graph is refused at adoption
    choice, compile = model.step_choice, model.compile_state
    assert type(choice.current) is EagerSteps and compile.phase is Phase.WAITING and compile.due(4)
    assert torch.get_num_threads() == 2
    model.train(gradient_steps=2, batch_size=32)  # compiles again, with the new gamma
    assert compile.job.graph.gamma == 0.5 and compile.since == 4 and compile.phase is Phase.COMPILING


def test_the_whole_update_is_compiled_on_the_cpu_only_and_for_what_it_supports(monkeypatch):
    from sb3_snake.common import system

    assert decide_compiled_update("") == Decision.on(WHOLE_UPDATE)
    assert decide_compiled_update("not Adam") == Decision.off("not Adam")
    # A GPU never compiles, and is not asked about the compiler: the compile would run in training.
    monkeypatch.setattr(system, "compile_unavailable_reason", lambda: pytest.fail("asked about the compiler"))
    assert compile_unavailable("cuda") == COMPILE_ON_CPU_ONLY
    assert "where a crash of it ends the run" in COMPILE_ON_CPU_ONLY
    asked = OptimizationSettings(use_torch_compile=True, use_bf16=False, use_flash_attention=False)
    on_gpu = ActiveOptimizations.decide(asked, "cuda")  # decidable without a GPU, as CI has none
    assert on_gpu.compile == Decision.off(COMPILE_ON_CPU_ONLY) and on_gpu.cuda_graph == Decision.on()
    monkeypatch.setattr(system, "compile_unavailable_reason", lambda: "no compiler here")
    assert compile_unavailable("cpu") == "no compiler here"


def test_the_compile_describes_each_of_its_phases():
    """The one wording of the compile decision: off and why, what, when, where, pending, done, failed."""
    whole = decide_compiled_update("")
    assert Compile(Decision.not_requested(), whole).planned == Decision.not_requested()
    unavailable = Decision.off("no torch.compile here")
    assert Compile(unavailable, whole, after=5).in_effect(0) == unavailable
    assert Compile(Decision.on(), Decision.off("not Adam")).phase is Phase.OFF
    compile = Compile(Decision.on(), whole, after=1_000, background=True)
    planned = f"after the first 1,000 gradient steps, in a child process while training goes on: {WHOLE_UPDATE}"
    assert compile.planned == Decision.on(planned) and compile.phase is Phase.WAITING
    assert compile.in_effect(10) == Decision.off("deferred to gradient step 1,000, not reached (10 trained)")
    assert not compile.due(999) and compile.due(1_000) and not compile.running
    compile.phase, compile.since = Phase.COMPILING, 1_000
    compile.job = types.SimpleNamespace(child=types.SimpleNamespace(pid=42), close=lambda: None)
    compiling = "compiling in a child process (pid 42) since gradient step 1,000 (1,200 trained)"
    assert compile.in_effect(1_200) == Decision.off(compiling) and not compile.due(1_200) and compile.compiling
    compile.stop()
    stopped = "was compiling in a child process since gradient step 1,000 when training stopped, and was stopped"
    assert compile.in_effect(1_300) == Decision.off(f"{stopped} (1,300 trained)") and compile.due(1_300)
    assert compile.job is None and compile.phase is Phase.WAITING
    compile.phase, compile.since = Phase.RUNNING, None
    compile.outcome = "compiled in a child process in 50 s for calls of 1 gradient step, adopted at gradient step 1,400"
    assert compile.in_effect(2_000) == Decision.on(f"{planned}; {compile.outcome}") and compile.running
    assert not compile.due(2_000)
    compile.start_over(2_100)  # new constants: compiled again from here
    assert compile.due(2_100) and compile.outcome == "" and not compile.running
    compile.turn_off("compile failed: RuntimeError: no")
    assert compile.planned == compile.in_effect(2_000) == Decision.off("compile failed: RuntimeError: no")
    assert not compile.running and not compile.due(2_000)


def test_a_compiled_update_whose_first_call_fails_is_reported_off_and_training_goes_on(
    monkeypatch, caplog, instant_compile
):
    def fail(*arguments):
        raise RuntimeError("no C++ compiler\nmore detail")

    monkeypatch.setattr("sb3_snake.update.compile.load", lambda path, *context: fail)
    model = small_dqn(compiled_after(1), board_size=6, transitions=64)
    model.train(gradient_steps=1, batch_size=32)
    assert model.active_optimizations.compile.active and type(model.step_choice.current) is EagerSteps
    with caplog.at_level("WARNING"):
        model.train(gradient_steps=2, batch_size=32)  # adopts, fails at its first call, trains these steps eagerly
    failure = "compile failed: RuntimeError: no C++ compiler more detail"  # every line, on one
    assert model.active_optimizations.compile == Decision.off(failure)
    assert model.optimizations_in_effect().compile == Decision.off(failure)
    assert f"torch.compile requested but not active: {failure}; training eagerly" in caplog.text
    assert type(model.step_choice.current) is EagerSteps and model._n_updates == 3
    assert not model.compile_state.running and model.compile_state.phase is Phase.OFF
    model.train(gradient_steps=1, batch_size=32)  # goes on eagerly
    assert type(model.step_choice.current) is EagerSteps and model._n_updates == 4


def test_a_deferred_compile_is_not_saved_and_a_loaded_model_defers_what_is_left(tmp_path, instant_compile):
    model = small_dqn(compiled_after(4), board_size=6, transitions=64)
    model.train(gradient_steps=2, batch_size=32)
    model.save(tmp_path / "m.zip")
    loaded = SnakeDQN.load(tmp_path / "m.zip", optimizations=compiled_after(4))
    assert loaded.compile_state.due(4) and not loaded.compile_state.due(3)
    assert (
        loaded.compile_state.planned.reason == f"after the first 4 gradient steps, in a child process: {WHOLE_UPDATE}"
    )
    done = small_dqn(compiled_after(1), board_size=6, transitions=64)
    done.train(gradient_steps=2, batch_size=32)
    done.save(tmp_path / "done.zip")
    reloaded = SnakeDQN.load(tmp_path / "done.zip", optimizations=COMPILED)
    assert reloaded.compile_state.due(reloaded._n_updates)  # compiles again, at its first update
    assert reloaded.active_optimizations.compile == Decision.on(f"in a child process: {WHOLE_UPDATE}")


def test_without_compile_nothing_is_compiled(instant_compile):
    model = make_model()
    model.train(gradient_steps=2, batch_size=32)
    assert not model.active_optimizations.compile.active and type(model.step_choice.current) is EagerSteps
    assert instant_compile.started == [] and model.compile_state.job is None


@pytest.mark.parametrize("settings", [{}, {"use_flash_attention": True}, {"use_bf16": True}])
def test_save_then_load_gives_identical_greedy_actions(tmp_path, settings):
    if settings.get("use_bf16") and not cpu_has_native_bf16():
        pytest.skip("this CPU has no native bf16")
    model = make_model(**settings)
    model.train(gradient_steps=3, batch_size=32)
    model.save(tmp_path / "model.zip")
    loaded = SnakeDQN.load(tmp_path / "model.zip", optimizations=model.optimizations)
    obs = np.stack([model.observation_space.sample() for _ in range(64)])
    np.testing.assert_array_equal(model.predict(obs, deterministic=True)[0], loaded.predict(obs, deterministic=True)[0])
    assert loaded.active_optimizations == model.active_optimizations


def test_batch_size_is_the_shared_default_unless_given():
    """A learning value, not a setting: SnakeDQN's default is sb3-snake train's (TrainConfig's)."""
    from sb3_snake.dqn.snake_dqn import DEFAULT_BATCH_SIZE
    from sb3_snake.training.config import TrainConfig

    env = BatchedSnakeVecEnv(2, board_size=5, seed=0)
    settings = OptimizationSettings(use_torch_compile=False, num_threads=1)
    built = SnakeDQN("AttentionPolicy", env, optimizations=settings, policy_kwargs=SMALL_POLICY)
    assert built.batch_size == DEFAULT_BATCH_SIZE == TrainConfig().batch_size == 128
    assert (
        SnakeDQN("AttentionPolicy", env, optimizations=settings, batch_size=5, policy_kwargs=SMALL_POLICY).batch_size
        == 5
    )


def test_mlp_policy_keeps_working_with_the_forward_context():
    env = BatchedSnakeVecEnv(2, board_size=5, seed=0)
    model = SnakeDQN(
        "MlpPolicy",
        env,
        optimizations=OptimizationSettings(
            use_bf16=True, use_flash_attention=True, use_torch_compile=False, num_threads=1
        ),
        learning_starts=0,
        buffer_size=64,
        batch_size=8,
        device="cpu",
    )
    model.learn(40)
    assert model.q_net(torch.as_tensor(env.reset())).dtype == torch.float32


def test_building_a_model_leaves_the_thread_count_alone():
    """Library code changes no process state: only the entry point's torch_threads does."""
    with torch_threads(2):
        model = make_model(num_threads=1)
        assert torch.get_num_threads() == 2 and model.active_optimizations.num_threads == 1


def test_torch_threads_sets_and_restores():
    before = torch.get_num_threads()
    other = 2 if before == 1 else 1
    with torch_threads(other):
        assert torch.get_num_threads() == other
    assert torch.get_num_threads() == before


# ---------------------------------------------------------------- decision logic (CUDA rules on CPU)


def test_flash_on_cuda_needs_bf16():
    assert decide_flash(True, "cuda", bf16_active=True) == Decision.on()
    off = decide_flash(True, "cuda", bf16_active=False)
    assert not off.active and "needs bf16 or fp16" in off.reason and "other SDPA backends" in off.reason
    assert decide_flash(True, "cpu", bf16_active=False) == Decision.on()
    assert decide_flash(False, "cuda", bf16_active=True) == Decision.not_requested()
    assert "cannot run" in decide_flash(True, "cuda", True, kernel_available=False).reason


def test_bf16_needs_hardware_support():
    assert decide_bf16(True, "cuda", hardware_bf16=True).active
    assert decide_bf16(True, "cuda", hardware_bf16=False).reason == "this GPU has no bf16 support"
    assert "AVX512-BF16" in decide_bf16(True, "cpu", hardware_bf16=False).reason
    assert decide_bf16(False, "cpu", hardware_bf16=True) == Decision.not_requested()


def test_compile_unavailable_is_reported():
    assert decide_compile(True, "torch 1.13 has no torch.compile") == Decision.off("torch 1.13 has no torch.compile")
    assert decide_compile(True).active and not decide_compile(False).active


def test_compile_off_never_asks_whether_compile_is_available(monkeypatch):
    """The question imports torch's compiler, which a run with compile off has no need of."""
    from sb3_snake.common import system

    monkeypatch.setattr(system, "compile_unavailable_reason", lambda: pytest.fail("asked about the compiler"))
    off = OptimizationSettings(use_torch_compile=False, use_bf16=False, use_flash_attention=False)
    assert ActiveOptimizations.decide(off, "cpu").compile == Decision.not_requested()


def test_the_cuda_graph_needs_cuda_and_a_device_buffer():
    assert decide_cuda_graph(True, "cuda", device_buffer=True) == Decision.on()
    assert decide_cuda_graph(False, "cuda", device_buffer=True) == Decision.not_requested()
    assert decide_cuda_graph(True, "cpu", device_buffer=True).reason == "CUDA graphs need a CUDA device, not cpu"
    assert "host memory" in decide_cuda_graph(True, "cuda", device_buffer=False).reason


def test_the_cuda_graph_is_reported_with_its_reason():
    active = make_model().active_optimizations
    report = active.as_dict()
    assert report["cuda_graph_requested"] is True and report["cuda_graph_active"] is False
    assert report["cuda_graph_reason"] == "CUDA graphs need a CUDA device, not cpu"
    line = "CUDA graph:       disabled (CUDA graphs need a CUDA device, not cpu) (from default)"
    assert line in summary_lines(active)
    off = make_model(use_cuda_graph=False).active_optimizations
    assert off.as_dict()["cuda_graph_requested"] is False and off.cuda_graph.describe() == "disabled"


def test_thread_rule():
    assert choose_num_threads(3, "cpu", 2) == (3, "set explicitly")
    assert choose_num_threads("auto", "cpu", 2)[0] == 2
    assert choose_num_threads("auto", "cuda", 16)[0] == 4
    assert choose_num_threads("auto", "cuda", 1)[0] == 1
    assert threads_for(OptimizationSettings(num_threads=3), "cpu") == 3
    assert threads_for(OptimizationSettings(), "cpu") == choose_num_threads("auto", "cpu", cpu_cores())[0]


def test_flash_off_excludes_the_flash_backend_in_the_context():
    settings = OptimizationSettings(use_flash_attention=False, use_bf16=False, num_threads=1)
    active = ActiveOptimizations.decide(settings, "cpu")
    q = torch.ones(1, 1, 4, 8)
    with profile() as prof, active.forward_context():
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert FLASH_KERNEL not in {e.name for e in prof.events()}


def test_probes_run_real_ops_on_cpu():
    assert probe_flash(torch.device("cpu"), torch.float32) == (True, "")
    assert probe_bf16(torch.device("cpu")) == (True, "")  # autocast runs on any CPU, natively or not


def test_requested_but_inactive_is_logged(caplog, monkeypatch):
    monkeypatch.setattr("sb3_snake.common.system.cpu_has_native_bf16", lambda: False)
    with caplog.at_level("WARNING"):
        model = make_model(use_bf16=True)
    assert not model.active_optimizations.bf16.active
    assert "neither AVX512-BF16 nor AMX" in model.active_optimizations.bf16.reason
    assert "requested but not active" in caplog.text


def test_as_dict_reports_requested_and_active():
    report = make_model(use_flash_attention=True).active_optimizations.as_dict()
    assert report["flash_attention_requested"] is True and report["flash_attention_active"] is True
    assert report["torch_compile_requested"] is False and report["sources"]["use_bf16"] == "default"
    assert "batch_size" not in report and "batch_size" not in report["sources"]  # a learning value: hyperparameters


def test_a_named_sdpa_backend_restricts_attention_to_that_kernel():
    math_only = make_model(sdpa_backend="math")
    assert math_only.active_optimizations.sdpa.active
    assert math_only.active_optimizations.sdpa_backends == [SDPBackend.MATH]
    names = kernel_names(math_only)
    assert FLASH_KERNEL not in names and any("scaled_dot_product_attention_math" in name for name in names)
    assert math_only.active_optimizations.as_dict()["sdpa_backend"] == "math"


def test_a_backend_that_cannot_run_falls_back_with_its_reason():
    decision = decide_sdpa_backend("efficient", "cpu", kernel_runs=False)
    assert decision == Decision.off(decision.reason) and "efficient SDPA kernel cannot run on cpu" in decision.reason
    assert decide_sdpa_backend("auto", "cpu", kernel_runs=False) == Decision.not_requested()
    assert decide_sdpa_backend("math", "cuda", kernel_runs=True) == Decision.on()
    settings = OptimizationSettings(sdpa_backend="efficient", use_bf16=False, num_threads=1)
    active = ActiveOptimizations.decide(settings, "cpu")  # no efficient kernel on CPU
    assert not active.sdpa.active and "PyTorch chooses among the others" in active.sdpa_description
    assert SDPBackend.FLASH_ATTENTION not in active.sdpa_backends


def test_unresolved_auto_takes_the_unmeasured_values_with_a_warning(caplog):
    with caplog.at_level("WARNING"):
        model = make_model(use_torch_compile="auto", use_bf16="auto")
    assert "USE_TORCH_COMPILE, USE_BF16: auto, but not measured" in caplog.text
    settings = model.active_optimizations.settings
    assert settings.use_torch_compile is False and settings.use_bf16 is False
    assert "not measured" in settings.source("use_torch_compile")


def test_an_unmeasured_auto_asks_for_nothing_that_may_not_run(caplog, monkeypatch):
    monkeypatch.setattr("sb3_snake.common.system.cpu_has_native_bf16", lambda: False)
    with caplog.at_level("WARNING"):
        make_model(use_bf16=True)
    assert "requested but not active" in caplog.text  # asked for explicitly: warned
    caplog.clear()
    fallback = OptimizationSettings(use_torch_compile=False, num_threads=1).without_auto()  # bf16 and flash auto
    with caplog.at_level("WARNING"):
        model = small_dqn(fallback, board_size=6, transitions=64)
    assert not model.active_optimizations.bf16.requested and not model.active_optimizations.flash.requested
    assert "requested but not active" not in caplog.text


def test_the_replay_buffer_lives_on_cuda_devices_and_in_host_memory_for_the_cpu():
    assert use_device_replay_buffer("cuda")[0] and "saves a host-to-device copy" in use_device_replay_buffer("cuda")[1]
    assert use_device_replay_buffer("cpu") == (False, "CPU: SB3's NumPy sampling measured as fast or faster")


def test_a_model_trained_on_another_thread_than_the_main_one_is_not_compiled(instant_compile):
    model = small_dqn(COMPILED, board_size=6, transitions=64)
    thread = threading.Thread(target=model.train, kwargs={"gradient_steps": 2, "batch_size": 32})
    thread.start()
    thread.join()
    assert instant_compile.started == [] and model._n_updates == 2  # trained, eagerly
    assert model.active_optimizations.compile == Decision.off(MAIN_THREAD_ONLY)
