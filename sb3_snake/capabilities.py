"""The capability report (``python test_optimizations.py``): what this machine supports and what will be active.

:func:`capability_report` runs tiny real operations to find what the machine supports, and says
what will be active with the given settings for each learner ``sb3-snake train`` trains, with the
reason whenever a requested optimization will not be (:func:`~sb3_snake.acceleration.description.summary_lines`,
as the training CLI prints before it trains). It sits above the DQN: reading ``auto``'s choice
for a policy measures a model (:mod:`sb3_snake.autotune`), and the compile is described by the
model's own :class:`~sb3_snake.update.compile.Compile`.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch

from sb3_snake.acceleration.compile_probe import probe_compile
from sb3_snake.acceleration.description import auto_block, setting_lines
from sb3_snake.acceleration.optimizations import ActiveOptimizations, compile_unavailable, probe_bf16, probe_flash
from sb3_snake.acceleration.settings import AUTO, OptimizationSettings
from sb3_snake.autotune import cache_dir
from sb3_snake.common import system
from sb3_snake.common.compile_record import last_compile
from sb3_snake.common.options import flag_of
from sb3_snake.training.config import OPTIONS, TrainConfig
from sb3_snake.training.roles import ALGORITHMS, DEFAULT_LEARNER, POLICY_ALIASES_BY_OPTION
from sb3_snake.training.run import learner_line, resolve_settings
from sb3_snake.training.summary import batch_size_source
from sb3_snake.update.compile import Compile, decide_compiled_update


def capability_report(
    settings: OptimizationSettings,
    device: str = "auto",
    probe_compile_now: bool = False,
    configs: Mapping[str, TrainConfig] | None = None,
    measure_auto: bool = False,
) -> dict[str, Any]:
    """What the machine supports and what will be active with ``settings`` on ``device``, for
    each learner ``sb3-snake train`` trains.

    :param configs: the run of each learner the report speaks of, by ``--algo`` (default: each
        learner's defaults); its network and batch size (the batch size's source as the config
        says) are what ``auto`` is read for, from the cache of an earlier measurement, or
        measured now with ``measure_auto``; with nothing cached, the unmeasured values stand in
        and the report says so. ``active``, ``summary`` and ``auto`` at the top are the default
        learner's; ``learners`` holds each one's.
    """
    target = system.resolve_device(device)
    available = _probe_available(target, probe_compile_now)
    configs = configs or {algo: TrainConfig(algo=algo) for algo in (DEFAULT_LEARNER, *ALGORITHMS)}
    learners = {algo: _learner_report(settings, target, config, measure_auto) for algo, config in configs.items()}
    # Read after auto's measurement, which trains models and so may record a compile of its own.
    available["torch_compile"]["last_training_compile"] = last_compile()
    first = DEFAULT_LEARNER if DEFAULT_LEARNER in configs else next(iter(configs))
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(target),
        "device_name": (
            torch.cuda.get_device_name(target)
            if target.type == "cuda"
            else system.cpu_description(system.cpu_model(), system.cpu_identity())
        ),
        "cuda_available": torch.cuda.is_available(),
        "available": available,
        "settings": _settings_table(settings, configs[first].batch_size, configs[first].source("batch_size")),
        **{key: learners[first][key] for key in ("auto", "active", "summary")},
        "learners": learners,
    }


def _learner_report(
    settings: OptimizationSettings, target: torch.device, config: TrainConfig, measure_auto: bool
) -> dict[str, Any]:
    """What ``config``'s learner would run with ``settings``: ``auto`` resolved for its network
    (cached, or measured with ``measure_auto``), the decisions, and the summary a run prints."""
    config = replace(config, device=target.type)
    resolved_config, resolved = resolve_settings(config, settings, allow_measure=measure_auto)
    active = _active_when_training(resolved, target)
    if config.policy != "attention":  # as the learner decides for its network (SnakeDQN's is attention)
        active = active.without_attention(POLICY_ALIASES_BY_OPTION[config.policy])
    batch_size = f"{resolved_config.batch_size} (from {batch_size_source(resolved_config)})"
    return {
        "learner": learner_line(config),
        "auto": {
            "cache_dir": str(cache_dir()),
            "record": dict(resolved.auto_record),
            "settings": {
                **({"batch_size": resolved_config.source("batch_size")} if config.batch_size == AUTO else {}),
                **{name: active.settings.source(name) for name in settings.auto_fields},
            },
        },
        "active": active.as_dict(),
        "summary": setting_lines(active, {"learner": learner_line(config), "batch size": batch_size}),
    }


def _probe_available(target: torch.device, probe_compile_now: bool) -> dict[str, Any]:
    """What ``target`` supports, found by tiny real operations: bf16, the flash kernel, and
    torch.compile (run only with ``probe_compile_now``; otherwise whether it is present; on a
    GPU, off with the reason, :func:`~sb3_snake.acceleration.optimizations.compile_unavailable`)."""
    bf16_native = system.native_bf16(target)
    bf16_runs, bf16_error = probe_bf16(target)
    flash_fp32, flash_fp32_error = probe_flash(target, torch.float32)
    flash_bf16, flash_bf16_error = probe_flash(target, torch.bfloat16)
    unavailable = compile_unavailable(target.type)
    if probe_compile_now and not unavailable:
        compile_ok, compile_error = probe_compile()
        compile_note = "probed: compiled and ran a tiny function" if compile_ok else compile_error
    else:
        compile_error = unavailable
        compile_ok = not compile_error
        compile_note = compile_error or "torch.compile is present (not probed; --probe-compile runs it)"
    return {
        "bf16": {"native": bf16_native, "autocast_runs": bf16_runs, "note": bf16_error},
        "flash_attention": {
            "float32": flash_fp32,
            "bfloat16": flash_bf16,
            "note": flash_fp32_error or flash_bf16_error,
        },
        "torch_compile": {"available": compile_ok, "note": compile_note},
    }


def _active_when_training(resolved: OptimizationSettings, target: torch.device) -> ActiveOptimizations:
    """What a model trained with ``resolved`` would have active, its compile as the model plans it."""
    active = ActiveOptimizations.decide(resolved, target)
    # What a model trained with these settings would compile, and when, in its own words;
    # sb3-snake train's models (Adam, board observations) are ones the whole update compiles for.
    compiles = Compile(
        active.compile,
        decide_compiled_update(""),
        resolved.compile_after,
        background=resolved.compile_in_background,
    )
    return replace(active, compile=compiles.planned)


def _settings_table(settings: OptimizationSettings, batch: int | str, batch_source: str) -> dict[str, Any]:
    """Each setting asked for: its value, where it came from, its ``.env`` key and its flag."""
    return {
        "batch_size": {
            "value": batch,
            "source": batch_source,
            "key": OPTIONS["batch_size"].key,
            "cli": flag_of(TrainConfig, "batch_size"),
        },
        **{
            name: {
                "value": value,
                "source": settings.source(name),
                "key": settings.env_key(name),
                "cli": flag_of(OptimizationSettings, name),
            }
            for name, value in settings.as_dict().items()
        },
    }


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
        f"device: {report['device']}, {report['device_name']}; CUDA available: {yes[report['cuda_available']]}",
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
    for learner in report["learners"].values():
        lines += ["", f"Active when training {learner['learner']} with these settings:"]
        lines += [f"  {line}" for line in learner["summary"]]
        auto = learner["auto"]
        if auto["record"]:
            lines += ["", *auto_block(auto["record"])]
        elif auto["settings"]:
            folder = auto["cache_dir"]
            lines += ["", f"auto: nothing measured for this network on this machine yet; it will be cached in {folder}"]
    return "\n".join(lines)


def last_compile_line(record: dict[str, Any] | None) -> list[str]:
    """The last training compile on this machine, in one line (none when no run compiled yet)."""
    if record is None:
        return []
    return [f"  last training compile ({record.get('at', 'unknown time')}): {record['outcome']}"]
