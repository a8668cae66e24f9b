"""Benchmarks: real measurements, complete records, JSON on disk, out-of-memory halving,
the configuration chosen, .env written back, W&B."""

import json
import subprocess
import sys

import pytest
import torch

from sb3_snake.acceleration.env_file import WRITTEN_BY
from sb3_snake.acceleration.settings import OptimizationSettings, SettingsError, write_env_file
from sb3_snake.benchmark import results
from sb3_snake.benchmark.end_to_end import SB3_REPLAY_RATIO, measure_plain_sb3, measure_sb3_snake
from sb3_snake.benchmark.env_throughput import format_table as format_env_table
from sb3_snake.benchmark.env_throughput import measure_batched, run_env_benchmark
from sb3_snake.benchmark.full import log_to_wandb
from sb3_snake.benchmark.gradient_step import (
    COMBINATIONS,
    GradientStepResult,
    choose_configuration,
    combination_names,
    format_table,
    is_out_of_memory,
    measure_gradient_step,
    parse_combination,
    sweep,
)
from sb3_snake.benchmark.matmul import efficiency
from sb3_snake.benchmark.replay_sampling import run_replay_benchmark
from sb3_snake.benchmark.results import save_results
from sb3_snake.common.errors import UsageError
from sb3_snake.common.system import system_info
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.options import load_config
from sb3_snake.training.tracking import WandbRun


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
    assert "python_loop" in format_env_table(report)


def test_results_saved_in_the_same_second_keep_each_other(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "utc_stamp", lambda: "20261123T202313Z")
    paths = [save_results("learning", {"arm": arm}, tmp_path) for arm in ("defaults", "num_layers 0")]
    assert [path.name for path in paths] == ["learning_20261123T202313Z.json", "learning_20261123T202313Z-2.json"]
    assert [json.loads(path.read_text())["arm"] for path in paths] == ["defaults", "num_layers 0"]


def test_unknown_api_is_rejected():
    with pytest.raises(UsageError, match="api must be 'tensor' .step_tensors. or 'vecenv' .SB3's step., got 'numpy'"):
        measure_batched(2, "cpu", "numpy", 0.01, 1)


def test_replay_sampling_times_both_buffers_for_each_n_step_setting():
    report = run_replay_benchmark(n_steps_values=(1, 3), batch_size=16, transitions=512, n_envs=4, batches=2, repeats=3)
    rows = [(r["buffer"], r["n_steps"]) for r in report["results"]]
    assert rows == [("sb3", 1), ("device", 1), ("sb3", 3), ("device", 3)]
    for r in report["results"]:
        assert 0 < r["min_milliseconds"] <= r["milliseconds_per_batch"] <= r["max_milliseconds"]
    assert report["system"]["cpu"] and report["plan"]["transitions"] == 512


def test_system_info_names_the_cpu():
    assert system_info()["cpu"]


# --- the gradient-step sweep ----------------------------------------------------------------


def fake_measure(fits_up_to: int, error: Exception | None = None):
    """A measure function that runs out of memory above ``fits_up_to`` (or raises ``error``)."""
    calls = []

    def measure(combination, batch_size, device, **kwargs):
        calls.append(batch_size)
        if error is not None:
            raise error
        if batch_size > fits_up_to:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        flash = "flash" in combination
        return GradientStepResult(
            combination,
            batch_size,
            samples_per_second=1000.0 * batch_size * (2 if flash else 1),
            updates_per_second=1000.0,
            min_samples_per_second=900.0 * batch_size,
            max_samples_per_second=1100.0 * batch_size,
            active={"bf16": False, "flash_attention": flash, "torch_compile": False},
            peak_memory_mib=1.0,
        )

    return measure, calls


def test_out_of_memory_halves_the_batch_and_is_recorded():
    measure, calls = fake_measure(fits_up_to=256)
    rows = sweep((128, 1024), ("fp32", "flash"), measure=measure)
    assert [r["batch_size"] for r in rows] == [128, 256, 128, 256]
    assert calls[:4] == [128, 1024, 512, 256]
    halved = rows[1]
    assert halved["requested_batch_size"] == 1024 and halved["out_of_memory_at"] == (1024, 512)
    assert rows[0]["requested_batch_size"] is None and rows[0]["out_of_memory_at"] == ()
    assert rows[3]["speedup_vs_fp32"] == 2.0  # compared at the batch size that really ran
    assert "halved after running out of memory" in format_table({"results": rows})


def test_each_row_carries_its_gflops_and_fraction_of_its_own_precisions_peak():
    measure, _ = fake_measure(fits_up_to=4096)
    peaks = {"fp32": 100.0, "bf16": 400.0}
    rows = sweep((256,), ("fp32", "flash"), measure=measure, flops_per_sample=2e6, peaks=peaks)
    fp32, flash = rows
    assert fp32["gflops"] == pytest.approx(256_000 * 2e6 / 1e9)  # 512 GFLOP/s
    assert fp32["peak_precision"] == "fp32" and fp32["peak_fraction"] == pytest.approx(5.12)
    assert flash["gflops"] == pytest.approx(2 * fp32["gflops"])
    bf16 = efficiency(1000.0, 3e6, active_bf16=True, peaks=peaks)
    assert bf16 == {"flops_per_sample": 3e6, "gflops": 3.0, "peak_precision": "bf16", "peak_fraction": 3.0 / 400}
    table = format_table({"results": rows, "matmul_peak_gflops": peaks, "flops_per_sample": 2e6})
    assert "512% fp32" in table and "2.00 MFLOP per sample" in table and "bf16 400 GFLOP/s" in table
    assert "gflops" not in sweep((256,), ("fp32",), measure=measure)[0]  # nothing made up without a count


def test_each_row_carries_the_matmul_ceiling_of_its_batch_and_precision_measured_once():
    measure, _ = fake_measure(fits_up_to=4096)
    asked = []

    def ceiling(batch_size, bf16):
        asked.append((batch_size, bf16))
        return 60.0 if bf16 else float(batch_size) / 8

    peaks = {"fp32": 100.0, "bf16": 400.0}
    rows = sweep((256, 512), ("fp32", "flash"), measure=measure, flops_per_sample=2e6, peaks=peaks, ceiling=ceiling)
    assert asked == [(256, False), (512, False)]  # once per batch size and precision, not per row
    assert [r["matmul_ceiling_gflops"] for r in rows] == [32.0, 64.0, 32.0, 64.0]
    assert [r["matmul_ceiling_fraction"] for r in rows] == pytest.approx([0.32, 0.64, 0.32, 0.64])
    bf16 = efficiency(1000.0, 3e6, active_bf16=True, peaks=peaks, ceiling_gflops=60.0)
    assert bf16["matmul_ceiling_fraction"] == pytest.approx(0.15)  # of the bf16 peak, as the row's own share
    table = format_table({"results": rows, "matmul_peak_gflops": peaks, "flops_per_sample": 2e6})
    assert "ceiling" in table.splitlines()[0] and " 32% " in table and " 64% " in table
    assert "replayed alone" in table
    without = sweep((256,), ("fp32",), measure=measure, flops_per_sample=2e6, peaks=peaks)[0]
    assert "matmul_ceiling_gflops" not in without  # nothing made up without a measurement


def test_errors_other_than_out_of_memory_are_not_swallowed():
    measure, calls = fake_measure(fits_up_to=4096, error=RuntimeError("shape mismatch"))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        sweep((1024,), ("fp32",), measure=measure)
    assert calls == [1024]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (torch.OutOfMemoryError("CUDA out of memory"), True),
        (RuntimeError("[enforce fail at alloc_cpu.cpp:116] DefaultCPUAllocator: can't allocate memory"), True),
        (MemoryError(), True),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), False),
        (ValueError("out of memory"), False),
    ],
)
def test_out_of_memory_is_recognised(error, expected):
    assert is_out_of_memory(error) is expected


def row(combination, batch_size, samples, active=True):
    use_bf16, use_flash, use_compile, use_graph = parse_combination(combination)
    return {
        "combination": combination,
        "batch_size": batch_size,
        "samples_per_second": samples,
        "active": {
            "bf16": use_bf16 and active,
            "flash_attention": use_flash,
            "torch_compile": use_compile,
            "cuda_graph": use_graph and active,
        },
    }


def test_graph_combinations_are_the_others_with_the_graph_and_only_on_cuda():
    assert combination_names("cpu") == tuple(COMBINATIONS)
    cuda = combination_names("cuda")  # nothing compiles on CUDA: no compiled combination is measured there
    assert cuda == (
        "fp32",
        "bf16",
        "flash",
        "bf16+flash",
        "fp32+graph",
        "bf16+graph",
        "flash+graph",
        "bf16+flash+graph",
    )
    assert combination_names("cuda", ("fp32", "bf16")) == ("fp32", "bf16", "fp32+graph", "bf16+graph")
    assert combination_names("cpu", ("fp32", "bf16")) == ("fp32", "bf16")
    assert parse_combination("bf16+flash+graph") == (True, True, False, True)
    assert parse_combination("compile") == (False, False, True, False)
    with pytest.raises(KeyError):
        parse_combination("turbo+graph")


def test_a_graph_row_whose_graph_was_not_active_is_no_candidate():
    rows = [row("fp32", 512, 80), row("fp32+graph", 512, 120, active=False), row("bf16+graph", 512, 90)]
    best = choose_configuration(rows)
    assert best["combination"] == "bf16+graph" and best["use_cuda_graph"] and best["use_bf16"]


def test_the_chosen_batch_is_the_smallest_within_tolerance_of_the_fastest_combination():
    rows = [row("fp32", 256, 50), row("flash", 256, 80), row("flash", 1024, 95), row("flash", 8192, 100)]
    best = choose_configuration(rows, tolerance=0.9)
    assert (best["combination"], best["batch_size"]) == ("flash", 1024)
    assert best["use_flash_attention"] and not best["use_bf16"] and not best["use_torch_compile"]
    assert best["fastest"] == {"combination": "flash", "batch_size": 8192, "samples_per_second": 100}


def test_a_combination_whose_optimization_was_inactive_is_not_chosen():
    rows = [row("fp32", 256, 50), row("bf16", 256, 60, active=False)]
    assert choose_configuration(rows)["combination"] == "fp32"


def test_a_real_measurement_records_peak_memory_and_what_was_active():
    result = measure_gradient_step("flash", 32, gradient_steps=1, repeats=2, warmup_calls=1, buffer_size=256, seconds=0)
    assert result.samples_per_second > 0 and result.peak_memory_mib > 0
    assert result.active["flash_attention"] is True and result.active["torch_compile"] is False
    assert result.steps_per_repeat == 1  # no calibration asked for: one call of one step a run


def test_gradient_steps_are_timed_in_runs_of_whole_calls():
    result = measure_gradient_step("fp32", 16, gradient_steps=2, repeats=2, buffer_size=64, seconds=0.05)
    assert result.steps_per_repeat >= 2 and result.steps_per_repeat % 2 == 0
    assert result.min_samples_per_second <= result.samples_per_second <= result.max_samples_per_second


PEAK_MEMORY_WINDOW = """
import numpy as np
from sb3_snake.benchmark.results import peak_memory_mib, reset_peak_memory
block = np.ones(200 * 2**20 // 8)  # 200 MiB, touched and freed: a peak the window must forget
del block
reset_peak_memory("cpu")
before = peak_memory_mib("cpu")
block = np.ones(40 * 2**20 // 8)  # 40 MiB, touched
print(before, peak_memory_mib("cpu"))
"""


def test_peak_memory_window_forgets_an_earlier_peak_and_sees_a_large_allocation():
    # In a fresh interpreter: in pytest's process another test's thread could free memory inside
    # the window, leaving the peak at the RSS of its start however much this test then touches.
    completed = subprocess.run([sys.executable, "-c", PEAK_MEMORY_WINDOW], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    before, after = map(float, completed.stdout.split())
    assert after >= before + 30  # had the window kept the earlier 200 MiB peak, after == before


# --- end to end -----------------------------------------------------------------------------


def test_plain_sb3_is_measured_at_its_default_replay_ratio_for_each_thread_count():
    result = measure_plain_sb3(thread_counts=(1,), warmup_steps=150, steps_per_repeat=100, repeats=2, board_size=5)
    best = result["best"]
    assert best["replay_ratio"] == SB3_REPLAY_RATIO and best["threads"] == 1
    assert best["setup"]["batch_size"] == 32 and best["setup"]["train_freq"] == 4
    assert 0 < best["min_env_steps_per_second"] <= best["env_steps_per_second"] <= best["max_env_steps_per_second"]
    assert [run["threads"] for run in result["by_threads"]] == [1]


def test_our_loop_runs_at_the_requested_replay_ratio_and_restores_threads():
    threads = torch.get_num_threads()
    config = TrainConfig(
        algo="dqn", n_envs=4, board_size=5, learning_starts=32, buffer_size=2_000, batch_size=16, device="cpu"
    )
    settings = OptimizationSettings(use_torch_compile=False, use_bf16=False, num_threads=1)
    result = measure_sb3_snake(settings, 8.0, warmup_steps=64, steps_per_repeat=64, repeats=2, config=config)
    setup = result.setup
    assert setup["batch_size"] * setup["gradient_steps"] / (setup["train_freq"] * setup["n_envs"]) == 8.0
    assert setup["early_steps"] == 0  # the ratio holds from the first update, not after an early phase
    assert result.threads == 1 and result.env_steps_per_second > 0
    assert torch.get_num_threads() == threads


# --- the report, .env and W&B ---------------------------------------------------------------


def small_report():
    measure, _ = fake_measure(fits_up_to=1024)
    rows = sweep((256, 2048), ("fp32", "flash"), measure=measure)
    e2e = {
        "replay_ratio": 8.0,
        "sb3_snake": {"env_steps_per_second": 3000.0},
        "plain_sb3": {"best": {"env_steps_per_second": 1500.0}},
        "speedup": 2.0,
    }
    return {"gradient_step": rows, "best": choose_configuration(rows), "end_to_end": e2e}


def test_wandb_gets_every_measurement_and_the_summary(tmp_path, fake_wandb):
    report = small_report()
    log_to_wandb(report, WandbRun("p", "offline", {"plan": {}}, tmp_path))
    assert len(fake_wandb.logged) == 4
    assert fake_wandb.logged[1] == {
        "batch_size": 1024,
        "gradient/fp32/samples_per_second": 1024 * 1000.0,
        "gradient/fp32/peak_memory_mib": 1.0,
    }
    assert fake_wandb.summary["best/combination"] == "flash" and fake_wandb.summary["end_to_end/speedup"] == 2.0
    assert fake_wandb.finished


def test_write_env_file_keeps_comments_and_other_lines(tmp_path):
    path = tmp_path / ".env"
    path.write_text("# measured here\nOPTIMAL_BATCH_SIZE=512\n\n# keep me\nTORCH_NUM_THREADS=1\nUSE_BF16=true\n")
    write_env_file(path, note="run 1", batch_size=2048, use_bf16=False, use_torch_compile=True)
    write_env_file(path, note="run 2", batch_size=4096)
    text = path.read_text()
    kept = "# measured here\nOPTIMAL_BATCH_SIZE=4096\n\n# keep me\nTORCH_NUM_THREADS=1\nUSE_BF16=false\n"
    assert text.startswith(kept)
    assert text.count(WRITTEN_BY) == 1 and text.endswith(WRITTEN_BY + "run 2\n")
    settings = OptimizationSettings.load(path)
    assert (load_config(path).batch_size, settings.use_bf16, settings.use_torch_compile, settings.num_threads) == (
        4096,
        False,
        True,
        1,
    )


def test_write_env_file_refuses_bad_values_and_leaves_the_file(tmp_path):
    path = tmp_path / ".env"
    path.write_text("OPTIMAL_BATCH_SIZE=512\n")
    with pytest.raises(SettingsError, match="batch_size=0"):
        write_env_file(path, batch_size=0)
    with pytest.raises(SettingsError, match="unknown setting"):
        write_env_file(path, learning_rate=1)
    assert path.read_text() == "OPTIMAL_BATCH_SIZE=512\n"
