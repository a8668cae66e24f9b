"""The env benchmark: real measurements, complete records, JSON on disk."""

import json

import pytest

from sb3_snake.benchmark.env_throughput import format_table, measure_batched, run_env_benchmark
from sb3_snake.benchmark.system import save_results, system_info


def test_report_holds_every_configuration_and_the_system(tmp_path):
    report = run_env_benchmark(num_envs=(1, 8), devices=["cpu"], seconds_per_repeat=0.02, repeats=3)
    configs = [(r["env"], r["api"], r["num_envs"]) for r in report["results"]]
    assert configs == [
        ("python_loop", "gymnasium", 1),
        ("batched", "tensor", 1),
        ("batched", "vecenv", 1),
        ("batched", "tensor", 8),
        ("batched", "vecenv", 8),
    ]
    for r in report["results"]:
        assert 0 < r["min_steps_per_second"] <= r["steps_per_second"] <= r["max_steps_per_second"]
        assert r["repeats"] == 3
    assert report["results"][0]["speedup_vs_python_loop"] == 1.0
    assert {"cpu", "cpu_cores", "python", "torch", "stable_baselines3", "torch_threads"} <= set(report["system"])
    path = save_results("env_throughput", report, tmp_path)
    assert json.loads(path.read_text()) == report
    assert "python_loop" in format_table(report)


def test_unknown_api_is_rejected():
    with pytest.raises(ValueError, match="api must be"):
        measure_batched(2, "cpu", "numpy", 0.01, 1)


def test_system_info_names_the_cpu():
    assert system_info()["cpu"]
