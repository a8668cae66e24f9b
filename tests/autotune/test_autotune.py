"""``auto`` settings: the staged search with an injected measurement, the per-machine cache (hit,
miss, corrupt, another machine, unwritable), flags over auto, and the words the summary shows."""

import json
from typing import NamedTuple

import pytest
import torch

from sb3_snake.acceleration.description import summary_lines
from sb3_snake.acceleration.optimizations import COMPILE_ON_CPU_ONLY, ActiveOptimizations
from sb3_snake.acceleration.settings import OptimizationSettings
from sb3_snake.autotune import (
    BATCH_CANDIDATES,
    ROUNDS,
    Candidate,
    GradientStepMeter,
    Machine,
    batch_candidates,
    cache_key,
    cache_path,
    resolve_auto,
    search,
    smallest_fast_enough,
)
from sb3_snake.training.options import load_config
from tests.conftest import SMALL_POLICY

CPU_WITH_BF16 = Machine("cpu", hardware_bf16=True, compile_unavailable="", kernels=("flash", "auto"))
CPU_WITHOUT_BF16 = Machine("cpu", hardware_bf16=False, compile_unavailable="", kernels=("flash", "auto"))
ALL_AUTO = {"use_bf16": "auto", "use_flash_attention": "auto", "use_torch_compile": "auto", "batch_size": "auto"}


class Table:
    """A measurement from a formula: bf16, flash and compile each multiply the rate."""

    def __init__(self, bf16=1.3, flash=1.1, compiled=1.2, batch=None):
        self.factors = {"bf16": bf16, "flash": flash, "compile": compiled}
        self.batch = batch or {256: 8000.0, 512: 9500.0, 1024: 10000.0, 2048: 10200.0}
        self.calls: list[Candidate] = []

    def __call__(self, candidate: Candidate) -> float:
        self.calls.append(candidate)
        rate = self.batch[candidate.batch_size]
        rate *= self.factors["bf16"] if candidate.use_bf16 else 1
        rate *= self.factors["flash"] if candidate.sdpa_backend == "flash" else 1
        return rate * (self.factors["compile"] if candidate.use_torch_compile else 1)


#: Every setting given, so that what a test names is all that is ``auto``.
EXPLICIT = {
    "num_threads": 1,
    "use_torch_compile": False,
    "use_flash_attention": True,
    "use_bf16": True,
}


class Asked(NamedTuple):
    """What a run asks ``auto`` to resolve: its settings, and its batch size (a learning value)."""

    settings: OptimizationSettings
    batch_size: int | str


def settings(batch_size=1024, **values):
    return Asked(OptimizationSettings(**{**EXPLICIT, **values}), batch_size)


def run_search(asked, machine, measure, candidates=BATCH_CANDIDATES):
    """The search as resolve_auto runs it: the batch size asked for given as a value of its own."""
    return search(asked.settings, machine, measure, candidates, batch_size=asked.batch_size)


def test_every_stage_picks_the_fastest_and_says_what_it_measured():
    table = Table()
    result = run_search(settings(**ALL_AUTO), CPU_WITH_BF16, table)
    assert result["chosen"] == {"use_bf16": True, "sdpa_backend": "flash", "use_torch_compile": True, "batch_size": 512}
    evidence = result["evidence"]
    assert evidence["use_bf16"] == "chose true (bf16): 13,585 samples/s against 10,450 for fp32"
    assert result["rule"] == (
        "a change from fp32 with PyTorch's default kernel (flash excluded) (9,500 samples/s) is kept only when "
        "it is at least 1.05x as fast"
    )
    assert evidence["use_flash_attention"].startswith("chose flash: 13,585 samples/s against 12,350 for")
    assert evidence["use_torch_compile"].startswith("chose true (compiled): 16,302 samples/s against 13,585 for eager")
    assert (
        "1024: 14,300" in evidence["batch_size"]
        and "the smallest batch within 90% of the fastest" in evidence["batch_size"]
    )
    stage1 = table.calls[: 4 * ROUNDS]
    assert len(set(stage1)) == 4 and not any(c.use_torch_compile for c in stage1)  # bf16 x {flash, PyTorch's}
    assert {c for c in table.calls if c.use_torch_compile} == {Candidate(True, "flash", True, 512)}  # the winner's
    stages = [m["stage"] for m in result["measurements"]]
    assert stages == [1] * 4 + [2] * 2 + [3] * 4  # stage 2 times the eager winner again beside its compile


def test_candidates_are_timed_in_turn_forwards_then_backwards():
    table = Table()
    run_search(settings(use_bf16="auto", use_flash_attention="auto"), CPU_WITH_BF16, table)
    first = table.calls[:4]
    assert len(set(first)) == 4 and len(table.calls) == 4 * ROUNDS
    assert table.calls[4:8] == first[::-1] and table.calls[8:12] == first


class Drifting:
    """A machine that slows steadily while it is measured: every slice is 2 samples/s slower
    than the one before, whatever it times."""

    def __init__(self, base):
        self.base, self.calls = base, 0

    def __call__(self, candidate):
        self.calls += 1
        return self.base[(candidate.use_bf16, candidate.sdpa_backend)] - 2.0 * self.calls


def test_a_steady_drift_does_not_decide_and_a_close_race_keeps_the_plain_candidate():
    asked = settings(use_bf16="auto", use_flash_attention="auto")
    level = {(False, "flash"): 100.0, (False, "auto"): 100.0, (True, "flash"): 100.0, (True, "auto"): 100.0}
    # Timed one after the other, the first candidate (fp32, flash) would win by the drift alone.
    result = run_search(asked, CPU_WITH_BF16, Drifting(level))
    assert result["chosen"]["use_bf16"] is False and result["chosen"]["sdpa_backend"] == "auto"
    rates = {m["samples_per_second"] for m in result["measurements"]}
    assert len(rates) == 1  # the drift weighed on every candidate alike
    faster = run_search(asked, CPU_WITH_BF16, Drifting({**level, (True, "auto"): 112.0}))  # the last in turn
    assert faster["chosen"]["use_bf16"] is True and faster["chosen"]["sdpa_backend"] == "auto"
    assert (
        faster["evidence"]["use_bf16"].startswith("chose true (bf16): ")
        and "for fp32" in faster["evidence"]["use_bf16"]
    )
    close = run_search(asked, CPU_WITH_BF16, Drifting({**level, (True, "flash"): 103.0}))
    assert close["chosen"]["use_bf16"] is False and close["chosen"]["sdpa_backend"] == "auto"
    assert close["evidence"]["use_bf16"] == "chose false (fp32): 83 samples/s against 86 for bf16 with the flash kernel"
    assert "(83 samples/s) is kept only when it is at least 1.05x as fast" in close["rule"]


def test_a_rival_that_differs_in_the_other_setting_too_is_named_whole():
    """fp32 on flash wins; the fastest bf16 candidate and the fastest without flash are one and the
    same (bf16 without flash): each line must say so, or "PyTorch's choice without flash" would
    stand for 110 samples/s on one line and for the plain candidate's 100 in the margin beside it."""
    base = {(False, "flash"): 120.0, (False, "auto"): 100.0, (True, "auto"): 110.0, (True, "flash"): 90.0}
    result = run_search(
        settings(use_bf16="auto", use_flash_attention="auto"),
        CPU_WITH_BF16,
        lambda candidate: base[(candidate.use_bf16, candidate.sdpa_backend)],
    )
    assert result["chosen"]["use_bf16"] is False and result["chosen"]["sdpa_backend"] == "flash"
    assert result["evidence"]["use_bf16"] == (
        "chose false (fp32): 120 samples/s against 110 for bf16 with PyTorch's default kernel (flash excluded)"
    )
    assert result["evidence"]["use_flash_attention"] == (
        "chose flash: 120 samples/s against 110 for PyTorch's default kernel (flash excluded) in bf16"
    )
    assert "with PyTorch's default kernel (flash excluded) (100 samples/s)" in result["rule"]


def test_the_margin_is_stated_against_the_plain_candidate_it_is_measured_against():
    """bf16 wins by 1% over its fp32 twin (both on flash) but by 9% over plain fp32: the evidence
    must name the plain rate, or "1.05x needed" reads as broken beside a 1% lead."""
    result = run_search(
        settings(use_bf16="auto", use_flash_attention="auto"), CPU_WITH_BF16, Table(bf16=1.01, flash=1.08)
    )
    assert result["chosen"]["use_bf16"] is True and result["chosen"]["sdpa_backend"] == "flash"
    assert result["evidence"]["use_bf16"] == "chose true (bf16): 10,908 samples/s against 10,800 for fp32"
    assert "(10,000 samples/s) is kept only when it is at least 1.05x as fast" in result["rule"]


def test_bf16_is_not_measured_without_native_hardware():
    table = Table(bf16=5.0)
    result = run_search(settings(**ALL_AUTO), CPU_WITHOUT_BF16, table)
    assert result["chosen"]["use_bf16"] is False
    assert not any(c.use_bf16 for c in table.calls)
    assert result["evidence"]["use_bf16"] == "chose false: this CPU has no native bf16 (not measured)"


def test_compile_needs_its_margin_and_is_not_tried_where_it_cannot_run():
    assert run_search(settings(**ALL_AUTO), CPU_WITH_BF16, Table(compiled=1.03))["chosen"]["use_torch_compile"] is False
    no_compiler = Machine("cpu", True, "no C++ compiler found", ("flash", "auto"))
    table = Table(compiled=3.0)
    result = run_search(settings(**ALL_AUTO), no_compiler, table)
    assert result["chosen"]["use_torch_compile"] is False and not any(c.use_torch_compile for c in table.calls)
    assert "no C++ compiler found (not measured)" in result["evidence"]["use_torch_compile"]


def test_values_given_are_not_measured_and_are_kept():
    table = Table()
    given = settings(use_bf16=False, use_flash_attention="auto", use_torch_compile=True, batch_size=256)
    result = run_search(given, CPU_WITH_BF16, table)
    assert {(c.use_bf16, c.batch_size, c.use_torch_compile) for c in table.calls} == {(False, 256, False)}
    assert result["chosen"] == {
        "use_bf16": False,
        "sdpa_backend": "flash",
        "use_torch_compile": True,
        "batch_size": 256,
    }
    assert set(result["evidence"]) == {"use_flash_attention"}
    named = run_search(settings(use_flash_attention="auto", sdpa_backend="math"), CPU_WITH_BF16, Table())
    assert named["chosen"]["sdpa_backend"] == "math"


def test_kernels_that_need_bf16_are_only_candidates_with_bf16():
    """As on an H100: flash and cudnn attention run on bf16 inputs only. Timed without bf16 they
    would time PyTorch's fallback and could be chosen under a name that then does not run."""
    gpu = Machine(
        "cuda", True, COMPILE_ON_CPU_ONLY, ("flash", "efficient", "cudnn", "auto"), bf16_only=("flash", "cudnn")
    )
    table = Table(bf16=0.5)
    result = run_search(settings(use_bf16="auto", use_flash_attention="auto"), gpu, table)
    assert not any(c.sdpa_backend in ("flash", "cudnn") and not c.use_bf16 for c in table.calls)
    assert {c.sdpa_backend for c in table.calls} == {"flash", "efficient", "cudnn", "auto"}
    assert result["chosen"]["use_bf16"] is False and result["chosen"]["sdpa_backend"] in ("efficient", "auto")


def test_batch_sizes_tried_fit_the_replay_buffer():
    table = Table(batch={256: 1.0, 512: 2.0, 1000: 3.0})
    result = run_search(settings(batch_size="auto"), CPU_WITHOUT_BF16, table, batch_candidates(1000))
    assert batch_candidates(1000) == (256, 512) and batch_candidates(100) == (100,)
    assert max(c.batch_size for c in table.calls) == 512 and result["chosen"]["batch_size"] == 512
    tiny = Table(batch={100: 1.0})
    assert run_search(settings(batch_size="auto"), CPU_WITHOUT_BF16, tiny, (100,))["chosen"]["batch_size"] == 100


def test_flash_asked_for_on_a_gpu_without_bf16_is_still_a_choice():
    gpu_without_bf16 = Machine("cuda", False, COMPILE_ON_CPU_ONLY, ("efficient", "auto"), bf16_only=("flash",))
    result = run_search(settings(use_bf16="auto", use_flash_attention=True), gpu_without_bf16, Table())
    assert result["chosen"]["use_bf16"] is False and result["chosen"]["sdpa_backend"] == "flash"


def test_smallest_batch_within_the_tolerance():
    assert smallest_fast_enough({256: 80.0, 512: 95.0, 1024: 100.0}) == 512
    assert smallest_fast_enough({256: 95.0, 512: 100.0}, tolerance=0.9) == 256
    assert smallest_fast_enough({256: 50.0, 512: 100.0}, tolerance=0.9) == 512


# --- resolution and the cache ---------------------------------------------------------------------


def resolve(asked, measure, **kwargs):
    options = {"measure": measure, "machine": CPU_WITH_BF16, "today": lambda: "2026-11-22"}
    return resolve_auto(asked.settings, asked.batch_size, "cpu", SMALL_POLICY, 6, **{**options, **kwargs})


def path_for(asked):
    return cache_path(cache_key(asked.settings, torch.device("cpu"), SMALL_POLICY, 6, batch_size=asked.batch_size))


def fails(candidate):
    raise AssertionError("measured although cached")


def test_a_miss_measures_and_caches_then_a_hit_does_not_measure(tmp_path, monkeypatch):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    asked = settings(**ALL_AUTO)
    resolved, batch_size, batch_source = resolve(asked, Table())
    assert (resolved.use_bf16, resolved.use_flash_attention, resolved.sdpa_backend) == (True, True, "flash")
    assert (resolved.use_torch_compile, batch_size) == (True, 512)
    assert resolved.auto_fields == ()
    path = path_for(asked)
    assert path.parent == tmp_path and json.loads(path.read_text())["result"]["chosen"]["batch_size"] == 512
    assert resolved.source("use_bf16") == "auto: chose true (bf16)" and batch_source == "auto: chose 512"
    record = resolved.auto_record
    assert (record["date"], record["where"]) == ("2026-11-22", f"cache {path}")
    assert record["evidence"]["use_bf16"].startswith("chose true (bf16): 13,585 samples/s against 10,450")
    assert record["evidence"]["batch_size"].startswith("chose 512: the smallest batch within 90% of the fastest")
    assert len(record["measurements"]) == 10 and "1.05x" in record["rule"]
    again = resolve(asked, fails, today=lambda: "2027-01-01")
    assert again == (resolved, batch_size, batch_source)  # the cached date, not today's
    assert again.settings.sources == resolved.sources and again.settings.auto_record == resolved.auto_record


@pytest.mark.parametrize("content", ["{not json", "[]", '{"key": {}}', '{"key": "x", "date": 1}'])
def test_a_corrupt_cache_is_measured_again_and_rewritten(tmp_path, monkeypatch, caplog, content):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    asked = settings(use_flash_attention="auto")
    path_for(asked).write_text(content)
    table = Table()
    with caplog.at_level("WARNING"):
        resolved = resolve(asked, table).settings
    assert table.calls and resolved.use_flash_attention is True
    assert "cannot be used" in caplog.text
    assert json.loads(path_for(asked).read_text())["result"]["chosen"]["sdpa_backend"] == "flash"


def test_a_cache_entry_of_another_machine_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    asked = settings(use_flash_attention="auto")
    resolve(asked, Table(flash=2.0))
    entry = json.loads(path_for(asked).read_text())
    entry["key"]["device_name"] = "another CPU"
    path_for(asked).write_text(json.dumps(entry))
    table = Table(flash=0.5)
    assert resolve(asked, table).settings.use_flash_attention is False and table.calls


def test_a_cpu_of_the_same_name_and_another_generation_measures_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    zen2 = {"vendor": "AuthenticAMD", "family": 23, "model": 49, "vector_flags": ["avx2"]}
    zen5 = {"vendor": "AuthenticAMD", "family": 26, "model": 2, "vector_flags": ["avx2", "avx512_bf16", "avx512f"]}
    monkeypatch.setattr("sb3_snake.common.system.cpu_model", lambda: "AMD EPYC")
    monkeypatch.setattr("sb3_snake.common.system.cpu_identity", lambda: zen5)
    asked = settings(use_flash_attention="auto")
    resolve(asked, Table(flash=2.0))
    assert resolve(asked, fails).settings.use_flash_attention is True  # the same machine: cached
    monkeypatch.setattr("sb3_snake.common.system.cpu_identity", lambda: zen2)
    table = Table(flash=0.5)
    assert resolve(asked, table).settings.use_flash_attention is False and table.calls


def test_an_unwritable_cache_is_a_warning_not_an_error(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(blocker / "cache"))
    with caplog.at_level("WARNING"):
        resolved = resolve(settings(use_flash_attention="auto"), Table()).settings
    assert resolved.use_flash_attention is True and "cannot be written" in caplog.text


def test_without_measuring_the_defaults_stand_in_and_say_why(tmp_path, monkeypatch):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    resolved = resolve(settings(use_torch_compile="auto", batch_size="auto"), fails, allow_measure=False)
    assert (resolved.settings.use_torch_compile, resolved.batch_size) == (False, 128)
    assert "not measured on this machine yet" in resolved.batch_source
    given = resolve(settings(use_torch_compile="auto", batch_size=64), fails, allow_measure=False)
    assert (given.batch_size, given.batch_source) == (64, None)  # a size given stays, its source the caller's


def test_flags_win_over_auto_and_the_summary_tells_the_story(tmp_path, monkeypatch):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    env_file = tmp_path / ".env"
    env_file.write_text("USE_BF16=auto\nUSE_FLASH_ATTENTION=auto\nOPTIMAL_BATCH_SIZE=auto\n")
    asked = Asked(OptimizationSettings.load(env_file, use_bf16=False, num_threads=1), load_config(env_file).batch_size)
    table = Table()
    resolved, batch_size, batch_source = resolve(asked, table)
    assert resolved.use_bf16 is False and resolved.source("use_bf16") == "override"
    assert not any(c.use_bf16 for c in table.calls)
    lines = summary_lines(
        ActiveOptimizations.decide(resolved, "cpu"), {"batch size": f"{batch_size} (from {batch_source})"}
    )
    flash_line = next(line for line in lines if line.startswith("FlashAttention"))
    assert flash_line == "FlashAttention:   enabled (from auto: chose flash)"
    assert "batch size:       512 (from auto: chose 512)" in lines
    # The evidence once, in one block after the settings: when, where, every rate, each choice.
    block = lines[lines.index(f"auto, measured on this machine on 2026-11-22 (cache {path_for(asked)}):") :]
    assert sum("2026-11-22" in line for line in lines) == 1 and sum("cache " in line for line in lines) == 1
    assert block[1] == "  gradient samples/s, eager, batch 512: fp32+flash 10,450; fp32+default kernel 9,500"
    assert any(line.startswith("  attention kernel: chose flash: ") for line in block)
    assert any(line.startswith("  batch size: chose 512: ") for line in block)


def test_settings_without_auto_are_returned_as_they_are():
    given = settings(use_bf16=False)
    resolved = resolve(given, fails)
    assert resolved.settings is given.settings and resolved == (given.settings, 1024, None)


# --- the real measurement ---------------------------------------------------------------------------


def test_the_real_measurement_times_the_gradient_step_of_the_given_policy():
    meter = GradientStepMeter(torch.device("cpu"), SMALL_POLICY, 5, seconds=0.05)
    candidate = Candidate(False, "auto", False, 32)
    assert meter(candidate) > 0 and meter(candidate) > 0
    assert list(meter.models) == [candidate]  # built once, timed again
    extractor = meter.models[candidate].q_net.features_extractor
    assert extractor.embed.out_features == SMALL_POLICY["features_extractor_kwargs"]["embed_dim"]
    assert BATCH_CANDIDATES == tuple(sorted(BATCH_CANDIDATES))


def test_resolving_for_real_writes_a_cache_a_second_run_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    asked = settings(use_flash_attention="auto", use_bf16=False, batch_size=32).settings
    first = resolve_auto(asked, 32, "cpu", SMALL_POLICY, 5).settings
    assert first.auto_fields == () and first.source("use_flash_attention").startswith("auto: chose ")
    assert resolve_auto(asked, 32, "cpu", SMALL_POLICY, 5, measure=fails).settings == first


def test_a_measurement_beside_other_load_decides_the_run_but_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    asked = settings(**ALL_AUTO)
    lines = []
    busy = resolve(asked, Table(), load_meter=lambda: lambda: 1.2, progress=lines.append)
    assert (busy.settings.use_bf16, busy.batch_size) == (True, 512) and not path_for(asked).exists()
    assert lines[0].startswith("measuring auto settings (OPTIMAL_BATCH_SIZE, USE_TORCH_COMPILE, USE_FLASH_ATTENTION,")
    assert busy.batch_source == "auto: chose 512" and busy.settings.source("use_bf16") == "auto: chose true (bf16)"
    assert busy.settings.auto_record["where"] == "not cached: other processes took 1.2 cores while it was measured"
    assert lines[-1] == (
        "auto settings: not cached: other processes took 1.2 cores while it was measured; the next run measures again"
    )
    measured = []

    def counting(candidate):
        measured.append(candidate)
        return Table()(candidate)

    quiet = resolve(asked, counting, load_meter=lambda: lambda: 0.3)
    assert measured and path_for(asked).exists()
    assert quiet.settings.auto_record["where"] == f"cache {path_for(asked)}"
    assert json.loads(path_for(asked).read_text())["result"]["cores_taken_by_others"] == 0.3
    unknown = settings(**{**ALL_AUTO, "batch_size": 256})
    resolve(unknown, Table(), load_meter=lambda: lambda: None)  # not Linux: nothing to judge by
    assert path_for(unknown).exists()


# --- the cache is input too -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit",
    [
        {"sdpa_backend": "bogus"},
        {"use_bf16": "yes"},
        {"use_torch_compile": 1},
        {"batch_size": 1_000_000_000},
        {"batch_size": "512"},
    ],
    ids=["kernel", "bf16-text", "compile-int", "huge-batch", "batch-text"],
)
def test_an_invalid_cached_choice_is_measured_again_with_a_warning_naming_the_file(tmp_path, monkeypatch, caplog, edit):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    asked = settings(batch_size="auto", use_bf16="auto", use_flash_attention="auto")
    resolve(asked, Table())
    path = path_for(asked)
    entry = json.loads(path.read_text())
    entry["result"]["chosen"].update(edit)
    path.write_text(json.dumps(entry))
    table = Table()
    with caplog.at_level("WARNING"):
        resolved = resolve(asked, table)
    assert table.calls, "the invalid entry was used instead of measuring again"
    assert resolved.batch_size == 512 and resolved.settings.sdpa_backend == "flash"
    assert str(path) in caplog.text and "measuring again" in caplog.text


def test_a_deeply_nested_cache_file_is_measured_again(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    asked = settings(use_flash_attention="auto")
    path_for(asked).write_text("[" * 200_000 + "]" * 200_000)
    table = Table()
    with caplog.at_level("WARNING"):
        assert resolve(asked, table).settings.use_flash_attention is True
    assert table.calls and str(path_for(asked)) in caplog.text


def test_a_fifo_in_the_caches_place_is_measured_again_without_blocking(tmp_path, monkeypatch, caplog):
    import os
    import signal

    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    asked = settings(use_flash_attention="auto")
    os.mkfifo(path_for(asked))
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("reading the cache blocked on a FIFO"))
    signal.alarm(20)
    try:
        with caplog.at_level("WARNING"):
            resolved = resolve(asked, Table()).settings
    finally:
        signal.alarm(0)
    assert resolved.use_flash_attention is True and "FIFO" in caplog.text


@pytest.mark.parametrize(
    "edit",
    [
        {"measurements": "corrupt"},
        {"measurements": [{"stage": 1, "candidate": {"use_bf16": False}, "samples_per_second": 1.0}]},
        {"measurements": [{"stage": 1, "candidate": None, "samples_per_second": "fast"}]},
        {"rule": ["not", "text"]},
    ],
    ids=["measurements-text", "candidate-fields", "rate-text", "rule-list"],
)
def test_every_field_of_a_cache_entry_is_checked_on_read(tmp_path, monkeypatch, caplog, edit):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    asked = settings(use_flash_attention="auto")
    resolve(asked, Table())
    entry = json.loads(path_for(asked).read_text())
    entry["result"].update(edit)
    path_for(asked).write_text(json.dumps(entry))
    table = Table()
    with caplog.at_level("WARNING"):
        resolved = resolve(asked, table)
    assert table.calls and str(path_for(asked)) in caplog.text and "measuring again" in caplog.text
    assert summary_lines(ActiveOptimizations.decide(resolved.settings, "cpu"), {})  # and it can be shown


def test_evidence_with_rich_markup_is_shown_as_written(tmp_path, monkeypatch):
    from sb3_snake.common.console import plain_console

    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path))
    asked = settings(use_flash_attention="auto")
    resolve(asked, Table())
    entry = json.loads(path_for(asked).read_text())
    entry["result"]["evidence"]["use_flash_attention"] = "chose flash: [/] and [red]x"
    path_for(asked).write_text(json.dumps(entry))
    resolved = resolve(asked, fails).settings
    console = plain_console(record=True, width=300)
    for line in summary_lines(ActiveOptimizations.decide(resolved, "cpu"), {}):
        console.print(line)
    assert "chose flash: [/] and [red]x" in console.export_text()


@pytest.mark.parametrize("where", ["file", "folder"])
def test_a_cache_that_others_may_write_is_neither_read_nor_written(tmp_path, monkeypatch, caplog, where):
    import os

    shared = tmp_path / "shared"
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(shared))
    asked = settings(use_flash_attention="auto")
    resolve(asked, Table(flash=2.0))
    planted = path_for(asked)
    os.chmod(planted if where == "file" else shared, 0o777)
    table = Table(flash=0.5)
    with caplog.at_level("WARNING"):
        assert resolve(asked, table).settings.use_flash_attention is False and table.calls
    assert "can be written by others" in caplog.text
    if where == "folder":
        assert json.loads(planted.read_text())["result"]["chosen"]["sdpa_backend"] == "flash"  # not rewritten there


def test_a_link_in_the_caches_place_is_not_followed_when_reading_or_writing(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SB3_SNAKE_CACHE_DIR", str(tmp_path / "cache"))
    asked = settings(use_flash_attention="auto")
    resolve(asked, Table())
    target = tmp_path / "precious.txt"
    target.write_text("mine")
    path_for(asked).unlink()
    path_for(asked).symlink_to(target)
    with caplog.at_level("WARNING"):
        resolve(asked, Table())
    assert "is a symbolic link" in caplog.text
    assert target.read_text() == "mine" and not path_for(asked).is_symlink()  # the link replaced, not followed
