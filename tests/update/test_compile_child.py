"""The compile child (``sb3_snake.update.child``): the update compiled in a process of its
own and adopted by training, and what training does when the child crashes, hangs or fails, or
when training stops while it runs. The child compiles with AOTAutograd's eager backend here
(no C++ build); tests/update/test_compiled_update.py compares inductor's kernels with the eager step."""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback

from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.capabilities import capability_report, format_capability_report
from sb3_snake.common import system
from sb3_snake.common.compile_record import last_compile
from sb3_snake.update.child import FAULT_ENV
from sb3_snake.update.steps import CompiledSteps
from tests.conftest import small_dqn
from tests.update.test_compiled_update import EAGER, assert_same_training_state, serve_rows

COMPILED = OptimizationSettings(
    use_bf16=False, use_flash_attention=False, use_torch_compile=True, num_threads=1, compile_after=0
)


@pytest.fixture(autouse=True)
def graph_only_child(monkeypatch, tmp_path):
    """The child compiles with ``aot_eager``, into a cache folder of the test's own."""
    monkeypatch.setattr("sb3_snake.update.compile.COMPILE_BACKEND", "aot_eager")
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path / "cache"))


def compiling_model(background=False, **options):
    settings = replace(COMPILED, compile_in_background=background)
    return small_dqn(settings, board_size=6, transitions=96, **options)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_the_child_compiles_the_update_and_training_adopts_it_then_a_second_run_finds_it_cached():
    eager = small_dqn(EAGER, board_size=6, transitions=96)
    compiled = compiling_model()
    compiled.policy.load_state_dict(eager.policy.state_dict())
    data = eager.replay_buffer.sample(10 * 32)
    for model in (eager, compiled):
        serve_rows(model, data)
    compiled.train(gradient_steps=2, batch_size=32)  # waits for the child, then trains compiled
    eager.replay_buffer.sample(2 * 32)  # the child's batches, drawn first, were not trained on
    eager.train(gradient_steps=2, batch_size=32)
    for model in (eager, compiled):
        model.train(gradient_steps=4, batch_size=32)
    update = compiled.step_choice.current
    assert isinstance(update, CompiledSteps) and update.calls == 3 and update.steps_per_call == 2
    decision = compiled.optimizations_in_effect().compile
    assert decision.active and "compiled in a child process in" in decision.reason
    assert "adopted at gradient step 0 (training paused" in decision.reason
    loss = compiled.logger.name_to_value["train/loss"]
    assert loss == pytest.approx(eager.logger.name_to_value["train/loss"], rel=1e-4)
    assert_same_training_state(eager, compiled)
    assert last_compile()["compiled"] is True

    again = compiling_model()
    again.train(gradient_steps=2, batch_size=32)
    assert "found in the compile cache in a child process" in again.optimizations_in_effect().compile.reason


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("crash", "compile child was killed by SIGSEGV after"),
        ("fail", "compile child exited with code 1: RuntimeError: compile failed on purpose"),
    ],
)
def test_a_child_that_crashes_or_fails_leaves_training_eager_and_says_so(fault, reason, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, fault)
    model = compiling_model()
    model.train(gradient_steps=2, batch_size=32)
    model.train(gradient_steps=2, batch_size=32)
    assert model._n_updates == 4 and not isinstance(model.step_choice.current, CompiledSteps)
    decision = model.optimizations_in_effect().compile
    assert not decision.active and decision.reason.startswith(reason)
    assert "\n" not in decision.reason
    assert model.compile_state.job is None  # reaped
    record = last_compile()
    assert record["compiled"] is False and record["outcome"] == decision.reason
    report = format_capability_report(capability_report(OptimizationSettings(num_threads=1), "cpu"))
    assert f"last training compile ({record['at']}): {decision.reason}" in report


def test_a_child_past_its_timeout_is_stopped_and_reaped(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "hang")
    monkeypatch.setattr("sb3_snake.update.child.COMPILE_TIMEOUT", 0.5)
    model = compiling_model()
    model.train(gradient_steps=2, batch_size=32)  # waits for the child, which its timeout stops
    decision = model.optimizations_in_effect().compile
    assert not decision.active and decision.reason == "compile child did not finish within 0 s and was stopped"


def test_training_goes_on_eagerly_while_the_child_compiles_and_stopping_stops_it(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "hang")
    model = compiling_model(background=True)
    for _ in range(3):
        model.train(gradient_steps=2, batch_size=32)
    assert model._n_updates == 6 and model.compile_state.compiling and model.compile_state.since == 0
    pid = model.compile_state.job.child.pid
    assert alive(pid)
    assert (
        f"compiling in a child process (pid {pid}) since gradient step 0"
        in model.optimizations_in_effect().compile.reason
    )
    folder = model.compile_state.job.folder

    class StopNow(BaseCallback):
        def _on_step(self):
            raise KeyboardInterrupt  # Ctrl-C, or an exception in training

    with pytest.raises(KeyboardInterrupt):
        model.learn(100, callback=StopNow())
    assert not alive(pid) and not folder.exists()
    reason = model.optimizations_in_effect().compile.reason
    assert reason.startswith("was compiling in a child process since gradient step 0 when training stopped")
    assert model.compile_state.due(model._n_updates)  # training that resumes compiles again


@pytest.mark.slow
def test_a_compiled_graph_runs_at_the_thread_count_it_was_compiled_for():
    model = compiling_model()  # compiled for 1 thread (COMPILED), waiting for the child
    model.train(gradient_steps=2, batch_size=32)
    assert isinstance(model.step_choice.current, CompiledSteps) and model.step_choice.current.threads == 1
    torch.set_num_threads(2)  # as a callback restoring its count at the end of training would
    try:
        model.train(gradient_steps=2, batch_size=32)  # the guards would refuse 2 threads
        assert torch.get_num_threads() == 1 and model.step_choice.current.calls == 2
    finally:
        torch.set_num_threads(1)


def test_a_child_dies_with_its_parent(tmp_path):
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from sb3_snake.common.child_process import ChildProcess;"
            f"child = ChildProcess('sb3_snake.update.child', ['x', 'y'], Path({str(tmp_path)!r}) / 'log');"
            "print(child.pid, flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, FAULT_ENV: "hang"},
    )
    pid = int(parent.stdout.readline())
    parent.kill()  # no chance to stop its child
    parent.wait()
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:  # the kernel delivers the death signal at once
        time.sleep(0.01)
    assert not alive(pid)


def descendants_of(pid: int) -> set[int]:
    parents = system.processes()
    return system.descendants(pid, {child: parent for child, (parent, _) in parents.items()})


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), ("time limit", 0)], ids=["term", "int", "limit"]
)
def test_a_run_stopped_while_the_child_compiles_exits_as_documented_with_the_child_reaped(how, code, tmp_path):
    program = shutil.which("sb3-snake")
    if program is None:
        pytest.skip("sb3-snake is not installed as a program (pip install -e .)")
    limit = ["--time-limit", "0.3"] if how == "time limit" else ["--episodes", "1000000"]
    arguments = [program, "train", "--algo", "dqn", *limit, "--device", "cpu", "--n-envs", "4", "--board-size", "5"]
    arguments += ["--learning-starts", "16", "--batch-size", "16", "--no-bf16", "--threads", "1"]
    arguments += ["--compile", "--compile-after", "0", "--output", str(tmp_path / "run")]
    environment = {**os.environ, FAULT_ENV: "hang", "SB3_SNAKE_CACHE_DIR": str(tmp_path / "cache")}
    process = subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("compile: compiling in a child process (pid"):
            break
    child = int(lines[-1].split("(pid ")[1].split(")")[0])
    assert alive(child), "".join(lines)
    if how != "time limit":
        process.send_signal(how)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == code, "".join(lines) + output
    assert not alive(child) and descendants_of(process.pid) == {process.pid}  # the run, gone: nothing below it
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    compile_decision = summary["active"]["torch_compile_reason"]
    assert "when training stopped, and was stopped" in compile_decision
    assert not list(Path(tmp_path).glob("run/*.tmp.*"))  # no file left half-written


def test_a_job_left_behind_is_closed_when_it_is_collected(monkeypatch):
    import gc

    monkeypatch.setenv(FAULT_ENV, "hang")
    model = compiling_model(background=True)
    model.train(gradient_steps=2, batch_size=32)
    job = model.compile_state.job
    pid, folder = job.child.pid, job.folder
    model.compile_state.job = None  # dropped without close(), as by a model thrown away mid-compile
    del job, model
    gc.collect()
    assert not alive(pid) and not folder.exists()


def test_the_child_imports_nothing_from_the_working_directory(monkeypatch, tmp_path):
    planted = tmp_path / "work"
    planted.mkdir()
    (planted / "json.py").write_text(f"open({str(planted / 'imported')!r}, 'w').close()\nfrom _json import *\n")
    monkeypatch.chdir(planted)
    monkeypatch.setenv(FAULT_ENV, "fail")  # the child imports json, then fails at once
    model = compiling_model()
    model.train(gradient_steps=2, batch_size=32)
    assert "compile failed on purpose" in model.optimizations_in_effect().compile.reason  # the child ran
    assert not (planted / "imported").exists()


def test_the_folders_of_training_processes_that_are_gone_are_removed_by_the_next_compile(monkeypatch, tmp_path):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    orphan = tmp_path / "sb3-snake-compile-999999999-x1"  # no process has this id
    orphan.mkdir()
    (orphan / "request.pt").write_bytes(b"left by a training killed outright")
    running = tmp_path / f"sb3-snake-compile-{os.getppid()}-x2"  # a process that is alive
    running.mkdir()
    monkeypatch.setenv(FAULT_ENV, "fail")
    compiling_model().train(gradient_steps=2, batch_size=32)
    assert not orphan.exists() and running.exists()
    assert not list(tmp_path.glob(f"sb3-snake-compile-{os.getpid()}-*"))  # its own, removed as ever


def test_a_hook_on_the_network_declines_the_compile_with_its_name_and_training_goes_on():
    model = compiling_model()
    seen = []
    model.q_net.q_net[0].register_forward_hook(lambda module, inputs, output: seen.append(output.shape))
    model.train(gradient_steps=2, batch_size=32)
    assert model._n_updates == 2 and seen  # trained eagerly, the hook called
    decision = model.optimizations_in_effect().compile
    assert not decision.active and decision.reason.startswith("compile declined: the compiled update would not call")
    assert "forward hook <lambda> on q_net.q_net.0" in decision.reason
    assert model.compile_state.job is None


def test_a_compile_that_cannot_start_is_declined_with_its_reason(monkeypatch):
    def unpicklable(*arguments, **keywords):
        raise TypeError("cannot pickle 'generator' object")

    monkeypatch.setattr("sb3_snake.update.child.torch.save", unpicklable)
    model = compiling_model()
    model.train(gradient_steps=2, batch_size=32)
    assert model._n_updates == 2
    reason = model.optimizations_in_effect().compile.reason
    assert reason == "compile could not start: TypeError: cannot pickle 'generator' object"


class _Payload:
    """A pickle that touches ``marker`` when it is loaded: what a planted artifact could run."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_planted_compile_artifact_is_never_loaded_and_the_update_is_compiled_anew(tmp_path):
    import pickle

    compiling_model().train(gradient_steps=2, batch_size=32)  # a first compile fills the cache
    (artifact,) = (tmp_path / "cache" / "compiled").glob("update-*.bin")
    marker = tmp_path / "payload-ran"
    artifact.write_bytes(pickle.dumps(_Payload(marker)))
    os.chmod(artifact, 0o666)  # anyone could have written it
    model = compiling_model()
    model.train(gradient_steps=2, batch_size=32)
    assert not marker.exists()
    assert isinstance(model.step_choice.current, CompiledSteps)  # compiled anew, into our own file
    assert os.stat(artifact).st_mode & 0o077 == 0


@pytest.mark.parametrize("planted", ["writable-file", "writable-folder", "link", "another-users"])
def test_an_artifact_that_is_not_the_users_own_is_refused_before_it_is_read(planted, tmp_path, monkeypatch):
    import pickle

    from sb3_snake.common.paths import UntrustedCacheError
    from sb3_snake.update.child import load

    folder, marker = tmp_path / "compiled", tmp_path / "payload-ran"
    folder.mkdir(mode=0o700)
    artifact, payload = folder / "update-key.bin", tmp_path / "payload.bin"
    payload.write_bytes(pickle.dumps(_Payload(marker)))
    if planted == "link":
        artifact.symlink_to(payload)
    else:
        artifact.write_bytes(payload.read_bytes())
        os.chmod({"writable-file": artifact, "writable-folder": folder}.get(planted, artifact), 0o777)
    if planted == "another-users":
        os.chmod(artifact, 0o600)
        monkeypatch.setattr(os, "getuid", lambda: 12345)
    with pytest.raises(UntrustedCacheError, match=r"not used$"):
        load(artifact, "cpu", False, ["MATH"])
    assert not marker.exists()


def test_a_compile_cache_folder_others_may_write_is_not_used(tmp_path, caplog):
    from sb3_snake.update.child import _artifact_place

    shared = tmp_path / "cache" / "compiled"
    shared.mkdir(parents=True)
    os.chmod(shared, 0o777)
    with caplog.at_level("WARNING"):
        place = _artifact_place("key", tmp_path / "job")
    assert place == tmp_path / "job" / "update-key.bin"
    assert "kept for this run only" in caplog.text and "can be written by others" in caplog.text


def test_the_compile_record_replaces_a_link_in_its_place_rather_than_writing_through_it(tmp_path):
    from sb3_snake.common.compile_record import record_compile, record_path

    target = tmp_path / "precious.txt"
    target.write_text("mine")
    record_path().parent.mkdir(parents=True)
    record_path().symlink_to(target)
    record_compile("compiled", compiled=True)
    assert target.read_text() == "mine" and last_compile()["outcome"] == "compiled"


PLANTED_LIBRARY = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    FILE *marker = fopen(getenv("PLANTED_MARKER"), "a");
    if (marker) { fputs("ran\n", marker); fclose(marker); }
}
"""

PROBE = "from torch._inductor import cpu_vec_isa; cpu_vec_isa.valid_vec_isa_list()"


def run_probe(code, environment):
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the planted library")
def test_a_library_planted_in_a_shared_inductor_cache_never_runs(tmp_path):
    # A folder others may write, holding inductor's CPU probe libraries swapped for one whose
    # constructor leaves a mark: inductor loads such a file without building it again.
    shared, marker = tmp_path / "shared", tmp_path / "marker"
    shared.mkdir()
    os.chmod(shared, 0o777)
    environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(shared), "PLANTED_MARKER": str(marker)}
    environment["SB3_SNAKE_CACHE_DIR"] = str(tmp_path / "own")
    assert run_probe(PROBE, environment).returncode == 0  # the probe's own libraries, at their names
    source = tmp_path / "planted.c"
    source.write_text(PLANTED_LIBRARY)
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(tmp_path / "planted.so")], check=True)
    probes = list(shared.rglob("*.so"))
    assert probes
    for library in probes:
        shutil.copy(tmp_path / "planted.so", library)
    assert run_probe(PROBE, environment).returncode == 0 and marker.exists()  # planted: it runs there
    marker.unlink()
    # What a compile child and training do: the cache folder chosen by private_inductor_cache.
    private = (
        "import os; from sb3_snake.update.child import private_inductor_cache; "
        f"os.environ['TORCHINDUCTOR_CACHE_DIR'] = str(private_inductor_cache()); {PROBE}"
    )
    result = run_probe(private, environment)
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    assert "can be written by others" in result.stderr and str(tmp_path / "own" / "inductor") in result.stderr


def test_the_compile_child_and_training_use_a_private_inductor_cache(tmp_path, monkeypatch):
    from sb3_snake.update.child import private_inductor_cache

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(shared))
    assert private_inductor_cache() == Path(os.environ["SB3_SNAKE_CACHE_DIR"]) / "inductor"
    own = tmp_path / "mine"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(own))
    assert private_inductor_cache() == own and stat.S_IMODE(own.stat().st_mode) == 0o700  # private: used
    link = tmp_path / "link"
    link.symlink_to(own)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(link))
    assert private_inductor_cache() != link
    monkeypatch.setenv(FAULT_ENV, "hang")
    job_model = compiling_model(background=True)
    job_model.train(gradient_steps=2, batch_size=32)  # the child starts, and hangs
    job = job_model.compile_state.job
    try:
        variables = Path(f"/proc/{job.child.pid}/environ").read_bytes().split(b"\0")
        assert job.inductor_cache != link
        assert f"TORCHINDUCTOR_CACHE_DIR={job.inductor_cache}".encode() in variables
    finally:
        job_model.step_choice.close()
