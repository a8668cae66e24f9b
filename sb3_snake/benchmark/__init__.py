"""Honest benchmarks: warm-up excluded, medians over repeats, hardware and versions recorded."""

from sb3_snake.benchmark.env_throughput import EnvThroughputResult, run_env_benchmark
from sb3_snake.benchmark.results import save_results

__all__ = ["EnvThroughputResult", "run_env_benchmark", "save_results"]
