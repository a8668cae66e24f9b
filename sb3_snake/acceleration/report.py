"""The capability report (``python test_optimizations.py``) and the configuration summary.

Both come from :func:`capability_report`: what this machine supports, found by running tiny
real operations, and what will be active with the given settings, with the reason whenever a
requested optimization will not be. The training CLI prints the same summary before it trains.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch

from sb3_snake.acceleration.autotune import cache_dir, resolve_auto
from sb3_snake.acceleration.compile_probe import probe_compile
from sb3_snake.acceleration.optimizations import ActiveOptimizations, probe_bf16, probe_flash
from sb3_snake.acceleration.settings import AUTO, BATCH_SIZE_KEY, OptimizationSettings
from sb3_snake.common import system
from sb3_snake.common.compile_record import last_compile
from sb3_snake.dqn.snake_dqn import DEFAULT_BATCH_SIZE
from sb3_snake.dqn.update.compile import CompileState, decide_compiled_update

#: The batch size's flag (``sb3-snake train``'s, from TrainConfig's field).
BATCH_SIZE_FLAG = "--batch-size"


def capability_report(
    settings: OptimizationSettings,
    device: str = "auto",
    probe_compile_now: bool = False,
    policy: tuple[dict[str, Any], int, bool] | None = None,
    measure_auto: bool = False,
    compile_after: int = 0,
    batch_size: tuple[int | str, str] = (DEFAULT_BATCH_SIZE, "default"),
    compile_in_background: bool = False,
) -> dict[str, Any]:
    """What the machine supports and what will be active with ``settings`` on ``device``.

    :param policy: ``(policy_kwargs, board_size, countdown)`` of the network trained; with it, ``auto``
        settings show what was measured for it on this machine (from the cache), or are
        measured now with ``measure_auto``; without it, or with nothing cached, the unmeasured
        values stand in and the report says so.
    :param compile_after: gradient steps trained eagerly before compiling, as the run will
        (``sb3-snake train``'s ``--compile-after``), so an active compile says when it starts.
    :param compile_in_background: whether the run trains on while a child process compiles
        (``sb3-snake train``'s ``--compile-in-background``), so an active compile says so.
    :param batch_size: the run's batch size (a size, or ``auto``) and where it came from, as
        :func:`sb3_snake.training.options.load_config` reads it; reported beside the settings.
    """
    target = system.resolve_device(device)
    bf16_native = system.native_bf16(target)
    bf16_runs, bf16_error = probe_bf16(target)
    flash_fp32, flash_fp32_error = probe_flash(target, torch.float32)
    flash_bf16, flash_bf16_error = probe_flash(target, torch.bfloat16)
    if probe_compile_now:
        compile_ok, compile_error = probe_compile()
        compile_note = "probed: compiled and ran a tiny function" if compile_ok else compile_error
    else:
        compile_error = system.compile_unavailable_reason()
        compile_ok = not compile_error
        compile_note = compile_error or "torch.compile is present (not probed; --probe-compile runs it)"
    batch, batch_source = batch_size
    resolved, chosen_batch, chosen_source = settings, batch, batch_source
    if policy is not None:
        policy_kwargs, board_size, countdown = policy
        resolved, chosen_batch, auto_source = resolve_auto(
            settings, batch, target, policy_kwargs, board_size, countdown=countdown, allow_measure=measure_auto
        )
        chosen_source = auto_source or batch_source
    elif batch == AUTO:
        chosen_batch, chosen_source = DEFAULT_BATCH_SIZE, "auto, not measured: the value that runs everywhere"
    active = ActiveOptimizations.decide(resolved, target)
    # What a model trained with these settings would compile, and when, in its own words;
    # sb3-snake train's models (Adam, board observations) are ones the whole update compiles for.
    compiles = CompileState(
        active.compile, decide_compiled_update(target.type, ""), compile_after, background=compile_in_background
    )
    active = replace(active, compile=compiles.planned)
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(target),
        "device_name": torch.cuda.get_device_name(target) if target.type == "cuda" else system.cpu_model(),
        "cuda_available": torch.cuda.is_available(),
        "available": {
            "bf16": {"native": bf16_native, "autocast_runs": bf16_runs, "note": bf16_error},
            "flash_attention": {
                "float32": flash_fp32,
                "bfloat16": flash_bf16,
                "note": flash_fp32_error or flash_bf16_error,
            },
            "torch_compile": {"available": compile_ok, "note": compile_note, "last_training_compile": last_compile()},
        },
        "settings": {
            "batch_size": {"value": batch, "source": batch_source, "key": BATCH_SIZE_KEY, "cli": BATCH_SIZE_FLAG},
            **{
                name: {
                    "value": value,
                    "source": settings.source(name),
                    "key": settings.env_key(name),
                    "cli": settings.flag(name),
                }
                for name, value in settings.as_dict().items()
            },
        },
        "auto": {
            "cache_dir": str(cache_dir()),
            "record": dict(resolved.auto_record),
            "settings": {
                **({"batch_size": chosen_source} if batch == AUTO else {}),
                **{name: active.settings.source(name) for name in settings.auto_fields},
            },
        },
        "active": active.as_dict(),
        "summary": setting_lines(active, {"batch size": f"{chosen_batch} (from {chosen_source})"}),
    }


def summary_lines(active: ActiveOptimizations, extra: dict[str, Any] | None = None) -> list[str]:
    """The configuration summary: one line per setting (value, where it came from, why), then,
    when ``auto`` measured anything, :func:`auto_block` once."""
    return setting_lines(active, extra) + auto_block(active.settings.auto_record)


def setting_lines(active: ActiveOptimizations, extra: dict[str, Any] | None = None) -> list[str]:
    """One line per setting: its label, what is active and why, and where the value came from."""
    settings = active.settings
    source = settings.source
    lines = [
        f"torch.compile:    {active.compile.describe()} (from {source('use_torch_compile')})",
        f"FlashAttention:   {active.flash.describe()} (from {source('use_flash_attention')})",
        f"SDPA backend:     {active.sdpa_description} (from {source('sdpa_backend')})",
        f"BF16 autocast:    {active.bf16.describe()} (from {source('use_bf16')})",
        f"compile mode:     {settings.compile_mode} (from {source('compile_mode')})",
        f"CUDA graph:       {active.cuda_graph.describe()} (from {source('use_cuda_graph')})",
        f"device:           {active.device}",
        f"threads:          {active.num_threads} ({active.num_threads_reason}; from {source('num_threads')})",
    ]
    for name, value in (extra or {}).items():
        lines.append(f"{name + ':':<18}{value}")
    return lines


def auto_block(record: Mapping[str, Any]) -> list[str]:
    """What ``auto`` measured, once: when and where it is kept, every rate, each choice, the rule.

    Empty when nothing was measured (no ``auto`` left, or only unmeasured stand-ins).
    """
    if not record:
        return []
    lines = [f"auto, measured on this machine on {record['date']} ({record['where']}):"]
    rates = [
        f"{_candidate_name(m['candidate'])} {m['samples_per_second']:,.0f}"
        for m in record.get("measurements", [])
        if m.get("stage") == 1
    ]
    if rates:
        batch = record["measurements"][0]["candidate"].get("batch_size")
        lines.append(f"  gradient samples/s, eager, batch {batch}: " + "; ".join(rates))
    seen: set[str] = set()
    for name, text in record.get("evidence", {}).items():
        if text not in seen:  # the attention kernel answers USE_FLASH_ATTENTION and SDPA_BACKEND at once
            seen.add(text)
            lines.append(f"  {_AUTO_LABELS.get(name, name)}: {text}")
    if record.get("rule"):
        lines.append(f"  rule: {record['rule']}")
    return lines


_AUTO_LABELS = {
    "use_bf16": "BF16",
    "use_flash_attention": "attention kernel",
    "use_torch_compile": "torch.compile",
    "batch_size": "batch size",
}


def _candidate_name(candidate: Mapping[str, Any]) -> str:
    precision = "bf16" if candidate.get("use_bf16") else "fp32"
    kernel = candidate.get("sdpa_backend")
    kernel = "default kernel" if kernel == "auto" else kernel
    return f"{precision}+{kernel}" + ("+compile" if candidate.get("use_torch_compile") else "")


def format_capability_report(report: dict[str, Any]) -> str:
    """The report as plain text, readable in a few seconds: one line per setting, ``auto``'s
    evidence once."""
    available = report["available"]
    bf16, flash, compiled = available["bf16"], available["flash_attention"], available["torch_compile"]
    yes = {True: "yes", False: "no"}
    lines = [
        "sb3-snake capability report",
        "",
        f"PyTorch {report['torch']}, Python {report['python']}",
        f"device: {report['device']} ({report['device_name']}); CUDA available: {yes[report['cuda_available']]}",
        "",
        "What this machine supports (tiny real operations were run):",
        f"  BF16: native {yes[bf16['native']]}, autocast matmul ran {yes[bf16['autocast_runs']]}"
        + (f" ({bf16['note']})" if bf16["note"] else ""),
        f"  flash SDPA kernel: float32 {yes[flash['float32']]}, bfloat16 {yes[flash['bfloat16']]}"
        + (f" ({flash['note']})" if flash["note"] else ""),
        f"  torch.compile: {yes[compiled['available']]} ({compiled['note']})",
        *last_compile_line(compiled["last_training_compile"]),
        "",
        "Settings (asked for, where from, how to override):",
    ]
    for entry in report["settings"].values():
        lines.append(f"  {entry['key']:<20} {str(entry['value']):<8} from {entry['source']:<12} {entry['cli']}")
    lines += ["", "Active when training with these settings:"]
    lines += [f"  {line}" for line in report["summary"]]
    auto = report["auto"]
    if auto["record"]:
        lines += ["", *auto_block(auto["record"])]
    elif auto["settings"]:
        lines += [
            "",
            f"auto: nothing measured for this policy on this machine yet; it will be cached in {auto['cache_dir']}",
        ]
    return "\n".join(lines)


def last_compile_line(record: dict[str, Any] | None) -> list[str]:
    """The last training compile on this machine, in one line (none when no run compiled yet)."""
    if record is None:
        return []
    return [f"  last training compile ({record.get('at', 'unknown time')}): {record['outcome']}"]
