"""The full benchmark's write-back: the settings a report chooses, and how they reach a ``.env`` file."""

import pytest

from sb3_snake.acceleration.settings import OptimizationSettings, SettingsError
from sb3_snake.benchmark.full import CHOSEN_SETTINGS, env_values_from, write_benchmark_choice
from sb3_snake.training.options import load_config

BEST = {
    "combination": "bf16+flash",
    "batch_size": 1024,
    "samples_per_second": 1.0,
    "use_bf16": True,
    "use_flash_attention": True,
    "use_torch_compile": False,
    "use_cuda_graph": False,
    "fastest": {"combination": "bf16+flash", "batch_size": 2048, "samples_per_second": 1.1},
    "rule": "fastest combination, smallest batch within 5% of its peak",
}


def test_the_chosen_settings_are_the_batch_size_and_the_combinations_switches():
    values = env_values_from({"best": BEST})
    assert list(values) == list(CHOSEN_SETTINGS)
    assert values == {
        "batch_size": 1024,
        "use_bf16": True,
        "use_flash_attention": True,
        "use_torch_compile": False,
        "use_cuda_graph": False,
    }


def test_the_choice_is_written_into_the_env_file_keeping_its_other_lines(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("# mine\nOPTIMAL_BATCH_SIZE=512\nUSE_TORCH_COMPILE=true\nTORCH_NUM_THREADS=1\n")
    line = write_benchmark_choice({"best": BEST}, env_file, "benchmark_results_full_X.json")
    assert line == (
        "Wrote OPTIMAL_BATCH_SIZE=1024, USE_BF16, USE_FLASH_ATTENTION, USE_TORCH_COMPILE and USE_CUDA_GRAPH "
        f"(bf16+flash) into {env_file}"
    )
    settings = OptimizationSettings.load(env_file)
    assert load_config(env_file).batch_size == 1024
    assert (settings.use_bf16, settings.use_flash_attention) == (True, True)
    assert (settings.use_torch_compile, settings.use_cuda_graph, settings.num_threads) == (False, False, 1)
    text = env_file.read_text()
    assert text.startswith("# mine\n") and "benchmark_results_full_X.json: bf16+flash at batch 1024" in text
    write_benchmark_choice({"best": {**BEST, "batch_size": 256}}, env_file, "benchmark_results_full_Y.json")
    text = env_file.read_text()
    assert "benchmark_results_full_X.json" not in text and "full_Y.json: bf16+flash at batch 256" in text


def test_an_env_file_that_cannot_be_written_is_refused(tmp_path):
    with pytest.raises(SettingsError, match="is a folder; pass a file name"):
        write_benchmark_choice({"best": BEST}, tmp_path, "benchmark_results_full_X.json")
