"""The capability report script and the configuration summary it shares with the CLI."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sb3_snake.acceleration.description import summary_lines
from sb3_snake.acceleration.optimizations import ActiveOptimizations
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.capabilities import capability_report, format_capability_report
from sb3_snake.common.system import cpu_description, cpu_identity, cpu_model
from sb3_snake.update.compile import WHOLE_UPDATE

SCRIPT = Path(__file__).resolve().parent.parent / "test_optimizations.py"


def run_script(*args, cwd):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.slow
def test_script_prints_json_with_settings_sources_and_active_state(tmp_path):
    (tmp_path / ".env").write_text("USE_BF16=false\nOPTIMAL_BATCH_SIZE=512\n")
    completed = run_script("--json", "--device", "cpu", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["settings"]["batch_size"] == {
        "value": 512,
        "source": ".env",
        "key": "OPTIMAL_BATCH_SIZE",
        "cli": "--batch-size",
    }
    assert report["settings"]["use_bf16"]["cli"] == "--bf16/--no-bf16"
    assert report["settings"]["num_threads"]["cli"] == "--threads"
    assert report["active"]["bf16_requested"] is False and report["active"]["bf16_active"] is False
    assert report["available"]["flash_attention"]["float32"] is True
    assert report["device"] == "cpu" and report["torch"]
    # The CPU by name and, where /proc/cpuinfo says it, generation: "AMD EPYC" alone is many machines.
    assert report["device_name"] == cpu_description(cpu_model(), cpu_identity())


@pytest.mark.slow
def test_script_text_report_names_flags(tmp_path):
    completed = run_script("--device", "cpu", cwd=tmp_path)
    assert completed.returncode == 0
    for text in ("--no-compile", "--no-flash-attention", "--no-bf16", "--batch-size", "Active when training PQN"):
        assert text in completed.stdout


@pytest.mark.slow
def test_malformed_env_exits_2_naming_the_key(tmp_path):
    (tmp_path / ".env").write_text("USE_BF16=maybe\n")
    completed = run_script(cwd=tmp_path)
    assert completed.returncode == 2
    assert "USE_BF16='maybe'" in completed.stderr and ".env" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_requested_but_unavailable_shows_its_reason(monkeypatch):
    monkeypatch.setattr("sb3_snake.common.system.cpu_has_native_bf16", lambda: False)
    report = capability_report(OptimizationSettings(use_bf16=True, num_threads=1), "cpu")
    text = format_capability_report(report)
    assert "BF16 autocast:    disabled (this CPU has neither AVX512-BF16 nor AMX)" in text


def test_the_report_says_when_a_deferred_compile_starts(monkeypatch):
    monkeypatch.setattr("sb3_snake.common.system.compile_unavailable_reason", lambda: "")
    settings = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=True, num_threads=1)
    deferred = capability_report(replace(settings, compile_after=50_000, compile_in_background=False), "cpu")
    when = f"after the first 50,000 gradient steps, in a child process: {WHOLE_UPDATE}"
    assert f"torch.compile:    enabled ({when}) (from" in "\n".join(deferred["summary"])
    defaults = capability_report(settings, "cpu")["active"]["torch_compile_reason"]  # sb3-snake train's
    assert (
        defaults == f"after the first 8,000 gradient steps, in a child process while training goes on: {WHOLE_UPDATE}"
    )
    at_once = capability_report(replace(settings, compile_after=0, compile_in_background=False), "cpu")
    assert at_once["active"]["torch_compile_reason"] == f"in a child process: {WHOLE_UPDATE}"
    unavailable = "torch.compile is not supported on this Python or platform"
    monkeypatch.setattr("sb3_snake.common.system.compile_unavailable_reason", lambda: unavailable)
    off = capability_report(replace(settings, compile_after=50_000), "cpu")["active"]
    assert not off["torch_compile_active"] and off["torch_compile_reason"] == unavailable


def test_every_flag_in_the_report_is_an_option_of_train():
    """The report's flags are derived from the settings, and train's options from the same place."""
    from typer.main import get_command

    from sb3_snake.cli import app

    train = get_command(app).commands["train"]
    options = {opt for param in train.params for opt in (*param.opts, *param.secondary_opts)}
    report = capability_report(OptimizationSettings(num_threads=1), "cpu")
    for entry in report["settings"].values():
        assert set(entry["cli"].split("/")) <= options, entry


def test_summary_lines_cover_every_setting():
    active = ActiveOptimizations.decide(OptimizationSettings(num_threads=1), "cpu")
    lines = summary_lines(active, {"envs": 64})
    assert [line.split(":")[0] for line in lines] == [  # the batch size is a learning value: the run's extra line
        "torch.compile",
        "FlashAttention",
        "SDPA backend",
        "BF16 autocast",
        "compile mode",
        "CUDA graph",
        "device",
        "threads",
        "envs",
    ]


def test_auto_settings_show_the_cached_measurement_or_say_they_were_not_measured(tmp_path, monkeypatch):
    from sb3_snake.autotune import Machine, resolve_auto
    from sb3_snake.training.config import TrainConfig

    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    settings = OptimizationSettings(use_flash_attention="auto", use_bf16=False, num_threads=1)
    config = TrainConfig(algo="dqn", board_size=5, device="cpu")
    before = capability_report(settings, "cpu", configs={"dqn": config})
    assert "not measured on this machine yet" in before["auto"]["settings"]["use_flash_attention"]
    assert before["auto"]["cache_dir"] == str(tmp_path)
    machine = Machine("cpu", False, "", ("flash", "auto"))
    rates = {"flash": 100.0, "auto": 200.0}
    measure = lambda candidate: rates[candidate.sdpa_backend]  # noqa: E731
    resolve_auto(
        settings, 128, "cpu", config.policy_kwargs(), 5, measure=measure, machine=machine, max_batch_size=100_000
    )
    after = capability_report(settings, "cpu", configs={"dqn": config})
    text = format_capability_report(after)
    assert "FlashAttention:   disabled (from auto: chose PyTorch's default kernel)" in text
    assert text.count("auto, measured on this machine on ") == 1 and text.count(str(tmp_path)) == 1
    assert "  gradient samples/s, eager, batch 128: fp32+flash 100; fp32+default kernel 200" in text
    assert "  attention kernel: chose PyTorch's default kernel: 200 samples/s against 100 for the flash kernel" in text
    assert after["active"]["flash_attention_active"] is False


def test_the_report_shows_the_batch_size_with_its_source_and_what_auto_would_choose(tmp_path, monkeypatch):
    from sb3_snake.training.config import TrainConfig

    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    settings = OptimizationSettings(use_bf16=False, use_flash_attention=False, num_threads=1)
    given = {"dqn": TrainConfig(algo="dqn", batch_size=512, sources={"batch_size": ".env"})}
    report = capability_report(settings, "cpu", configs=given)
    assert report["settings"]["batch_size"] == {
        "value": 512,
        "source": ".env",
        "key": "OPTIMAL_BATCH_SIZE",
        "cli": "--batch-size",
    }
    assert "batch size:       512 (from .env)" in report["summary"]
    text = format_capability_report(report)
    assert "  OPTIMAL_BATCH_SIZE   512      from .env" in text
    automatic = {"dqn": TrainConfig(algo="dqn", board_size=5, batch_size="auto", sources={"batch_size": ".env"})}
    auto = capability_report(settings, "cpu", configs=automatic)
    assert "not measured on this machine yet" in auto["auto"]["settings"]["batch_size"]
    assert any(line.startswith("batch size:       128 (from auto, not measured") for line in auto["summary"])
    text = format_capability_report(auto)
    assert "batch size:       128 (from auto, not measured" in text
    assert text.count("auto: nothing measured for this network on this machine yet; it will be cached in") == 1


def test_the_report_says_what_each_learner_would_run(tmp_path, monkeypatch):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    settings = OptimizationSettings(use_bf16=False, use_flash_attention=False, use_torch_compile=True, num_threads=1)
    report = capability_report(settings, "cpu")
    assert list(report["learners"]) == ["pqn", "dqn"] and report["active"] == report["learners"]["pqn"]["active"]
    pqn, dqn = report["learners"]["pqn"], report["learners"]["dqn"]
    assert pqn["learner"] == "PQN (MlpPolicy; the default learner)" and dqn["learner"].startswith("SnakeDQN")
    assert "batch size:       128 (from default; 32 moves x 128 games in 32 minibatches)" in pqn["summary"]
    assert pqn["active"]["torch_compile_requested"] and dqn["active"]["torch_compile_requested"]
    text = format_capability_report(report)
    assert "Active when training PQN (MlpPolicy; the default learner) with these settings:" in text
    assert "Active when training SnakeDQN (AttentionPolicy; --algo dqn) with these settings:" in text
