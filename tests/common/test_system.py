"""Machine facts and the one device check."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from sb3_snake.common.system import (
    available_memory_bytes,
    capabilities,
    check_device,
    compile_cache_problem,
    compile_unavailable_reason,
    cpu_cores,
    cpu_description,
    cpu_identity,
    cpu_model,
    descendants,
    first_processor,
    native_bf16,
    processes,
    resolve_device,
    system_info,
)


def test_device_check_has_one_wording():
    assert check_device("cpu") == "cpu" and resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"^--device must be auto, cpu or cuda, got 'tpu'$"):
        check_device("tpu")
    with pytest.raises(ValueError, match="--device must be cpu or cuda, got 'auto'"):
        check_device("auto", allow_auto=False)


def test_an_unusable_compile_cache_is_why_compile_is_unavailable(tmp_path, monkeypatch):
    """A file where the cache folder must be: the compiler's import would fail making it, so the
    reason is found without importing it, and says how to fix it."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "file" / "inductor"))
    problem = compile_cache_problem()
    assert problem.startswith(f"the compile cache TORCHINDUCTOR_CACHE_DIR={tmp_path}/file/inductor cannot be made")
    assert "point it at a folder you can write, or unset it" in problem and compile_unavailable_reason() == problem
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "new" / "inductor"))
    assert compile_cache_problem() == "" and (tmp_path / "new" / "inductor").is_dir()
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    assert compile_cache_problem() == ""  # torch's own folder


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_cuda_without_a_gpu():
    with pytest.raises(ValueError, match="--device cuda was requested but no CUDA GPU is available; use --device cpu"):
        check_device("cuda")
    assert resolve_device("auto") == torch.device("cpu")


def test_facts():
    assert cpu_cores() >= 1 and cpu_model()
    available = available_memory_bytes()
    assert available is None or available > 2**20
    info = system_info()
    assert info["torch"] == torch.__version__ and info["cpu_cores"] >= 1
    assert {"cpu_native_bf16", "cuda_bf16"} <= set(capabilities())


CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 amx_tile sha_ni smep sme

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 9
flags\t\t: avx2
"""


ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd aes sve svebf16 i8mm bf16 rng
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
"""


def test_cpu_identity_names_the_generation_and_vector_units_of_the_first_processor():
    assert first_processor(CPUINFO)["model name"] == "AMD EPYC"  # cpu_model's source: the same parse
    assert first_processor(CPUINFO)["cpu family"] == "25"  # the first processor's, not the second's
    # x86's smep and sme (memory protection, encryption) are not vector units, whatever Arm's SME is.
    assert cpu_identity(CPUINFO) == {
        "vendor": "AuthenticAMD",
        "family": "25",
        "model": "1",
        "vector_flags": ["amx_tile", "avx2", "avx512_bf16", "avx512f"],
    }
    assert cpu_identity(ARM_CPUINFO) == {
        "vendor": "0x41",
        "family": "8",
        "model": "0xd40",
        "vector_flags": ["bf16", "i8mm", "sve", "svebf16"],
    }
    # Neither architecture's fields, or a value no parser expects: nothing, or the text as written.
    assert cpu_identity("processor\t: 0\nmodel name\t: a core\n") is None
    assert cpu_identity("cpu family\t: unknown\nmodel\t: ?\n")["family"] == "unknown"
    assert system_info()["cpu_id"] == cpu_identity()
    assert cpu_description("AMD EPYC", cpu_identity(CPUINFO)) == "AMD EPYC (family 25, model 1)"
    assert cpu_description("AMD EPYC", None) == "AMD EPYC"


def test_descendants_follow_the_parents_down():
    parents = {10: 1, 11: 10, 12: 11, 13: 10, 20: 1, 21: 20}
    assert descendants(10, parents) == {10, 11, 12, 13}
    assert descendants(21, parents) == {21}


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc (Linux)")
def test_the_load_meter_counts_other_processes_and_not_our_own(no_other_load):
    # Busy until killed (a minute at most, should the test die before it kills it).
    busy = [sys.executable, "-c", "import time\nend = time.time() + 60\nwhile time.time() < end: pass"]
    child = subprocess.Popen(busy)  # ours: a descendant, as torch.compile's workers are
    try:
        table = processes()
        assert child.pid in descendants(os.getpid(), {pid: parent for pid, (parent, _) in table.items()})
    finally:
        child.kill()
        child.wait()
    # The shell exits at once, so the busy process it started is no descendant of ours.
    shell = ["sh", "-c", '"$0" -c "$1" >/dev/null 2>&1 & echo $!', busy[0], busy[2]]
    other = int(subprocess.run(shell, check=True, capture_output=True, text=True).stdout)
    try:
        taken, started = no_other_load(), time.monotonic()
        # The meter reads an average since it started: over half a second at least, so that a
        # clock tick of some other process cannot make the figure alone.
        while ((cores := taken()) < 0.5 or time.monotonic() - started < 0.5) and time.monotonic() < started + 30:
            time.sleep(0.05)
        assert cores >= 0.5
    finally:
        os.kill(other, signal.SIGKILL)


def test_native_bf16_is_asked_per_device():
    assert native_bf16("cpu") == bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    assert native_bf16("cuda") == (torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    assert capabilities()["cpu_native_bf16"] == native_bf16("cpu")


def test_every_caller_asks_native_bf16(monkeypatch):
    """The optimization layer's decision, auto's search and the capability report take one answer."""
    from sb3_snake.acceleration.optimizations import ActiveOptimizations
    from sb3_snake.acceleration.settings import OptimizationSettings
    from sb3_snake.autotune import Machine
    from sb3_snake.capabilities import capability_report

    asked = OptimizationSettings(use_bf16=True, num_threads=1)
    for answer in (False, True):
        monkeypatch.setattr("sb3_snake.common.system.native_bf16", lambda device, answer=answer: answer)
        assert ActiveOptimizations.decide(asked, "cpu").bf16.active is answer
        assert Machine.probe(torch.device("cpu")).hardware_bf16 is answer
        assert capability_report(asked, "cpu")["available"]["bf16"]["native"] is answer


def test_process_gone_asks_this_machine_and_takes_no_live_process_for_gone():
    from sb3_snake.common.system import process_gone

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: no process has its id now (ids are not reused this soon)
    assert process_gone(child.pid) and process_gone(2**80)  # an id too large for the system has none
    assert not process_gone(os.getpid())
    if os.getuid() != 0:
        assert not process_gone(1)  # another user's process: alive
