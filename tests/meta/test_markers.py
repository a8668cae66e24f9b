"""The suite's markers do what docs/gpu.md says: ``pytest -m cuda`` selects the GPU tests, anywhere."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_cuda_marker_selects_the_gpu_tests_and_only_them():
    command = [sys.executable, "-m", "pytest", "-n0", "-m", "cuda", "--collect-only", "-q", "-p", "no:cacheprovider"]
    files = ["tests/acceleration/test_cuda.py", "tests/dqn/test_replay.py"]
    result = subprocess.run([*command, *files], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr  # 5 would mean: nothing selected
    assert "tests/acceleration/test_cuda.py::test_update_on_the_gpu_matches_sb3_dqn_train[1]" in result.stdout
    assert "tests/dqn/test_replay.py::test_a_cuda_model_samples_on_the_gpu[1]" in result.stdout
    assert "test_a_cpu_model_keeps_sb3s_buffer" not in result.stdout
