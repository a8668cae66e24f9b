"""The optimizations in words: the configuration summary and what ``auto`` measured.

:func:`summary_lines` is what ``sb3-snake train`` prints before it trains and what the capability
report (:mod:`sb3_snake.capabilities`) shows under "Active when training with these settings": one
line per setting (what is active and why, where the value came from), then ``auto``'s evidence once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sb3_snake.acceleration.optimizations import ActiveOptimizations


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
