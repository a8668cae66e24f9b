"""``OptimizationSettings``: which speed-ups to use, resolved once from every source.

Precedence, highest first: an explicit override (the CLI's flags), a process environment
variable, the ``.env`` file, the built-in default. ``settings.source(field)`` says which one
won. Nothing is read at import time; :meth:`OptimizationSettings.load` reads when called.

Keys (environment variables and ``.env``):

=====================  =====================  ===================================================
key                    field                  values
=====================  =====================  ===================================================
OPTIMAL_BATCH_SIZE     batch_size             integer > 0
USE_TORCH_COMPILE      use_torch_compile      true/false, 1/0, yes/no, on/off (any case)
USE_FLASH_ATTENTION    use_flash_attention    same
USE_BF16               use_bf16               same
TORCH_COMPILE_MODE     compile_mode           default, reduce-overhead, max-autotune,
                                              max-autotune-no-cudagraphs
TORCH_NUM_THREADS      num_threads            integer > 0, or auto
=====================  =====================  ===================================================
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dotenv import dotenv_values, set_key

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

#: Where each field's value may come from, highest precedence first.
SOURCES = ("override", "environment", ".env", "default")


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names key, value and origin."""


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected true/false, 1/0, yes/no or on/off")


def _parse_positive_int(text: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ValueError("expected a positive integer") from None
    if value < 1:
        raise ValueError("expected a positive integer")
    return value


def _parse_threads(text: str) -> int | str:
    if str(text).strip().lower() == "auto":
        return "auto"
    try:
        return _parse_positive_int(text)
    except ValueError:
        raise ValueError("expected a positive integer or auto") from None


def _parse_compile_mode(text: str) -> str:
    mode = str(text).strip().lower()
    if mode not in COMPILE_MODES:
        raise ValueError(f"expected one of {', '.join(COMPILE_MODES)}")
    return mode


@dataclass(frozen=True)
class _Key:
    name: str
    parse: Callable[[str], Any]


_KEYS: dict[str, _Key] = {
    "batch_size": _Key("OPTIMAL_BATCH_SIZE", _parse_positive_int),
    "use_torch_compile": _Key("USE_TORCH_COMPILE", _parse_bool),
    "use_flash_attention": _Key("USE_FLASH_ATTENTION", _parse_bool),
    "use_bf16": _Key("USE_BF16", _parse_bool),
    "compile_mode": _Key("TORCH_COMPILE_MODE", _parse_compile_mode),
    "num_threads": _Key("TORCH_NUM_THREADS", _parse_threads),
}


@dataclass(frozen=True)
class OptimizationSettings:
    """The optimization settings of a run, immutable once resolved.

    The built-in defaults are the portable choice for any machine: bf16 and FlashAttention on
    (the large win on GPUs with bf16), torch.compile off (it costs a warm-up of tens of
    seconds and a C++ compiler on CPU). The repository's ``.env`` holds the values measured
    fastest on its own 2-core CPU, with the measurements in a comment.
    """

    #: Replay samples per gradient step.
    batch_size: int = 1024
    #: Compile the Q-networks with ``torch.compile``.
    use_torch_compile: bool = False
    #: Restrict scaled-dot-product attention to the FlashAttention kernel where it can run.
    use_flash_attention: bool = True
    #: Run the networks' forward passes under bfloat16 autocast where the hardware has bf16.
    use_bf16: bool = True
    #: ``torch.compile`` mode.
    compile_mode: str = "default"
    #: torch intra-op threads; ``auto`` chooses by the rule in ``optimizations.choose_num_threads``.
    num_threads: int | str = "auto"
    #: Where each field's value came from (one of SOURCES).
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        problems = []
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            problems.append(f"batch_size={self.batch_size!r}: expected a positive integer")
        for name in ("use_torch_compile", "use_flash_attention", "use_bf16"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name}={getattr(self, name)!r}: expected True or False")
        if self.compile_mode not in COMPILE_MODES:
            problems.append(f"compile_mode={self.compile_mode!r}: expected one of {', '.join(COMPILE_MODES)}")
        threads = self.num_threads
        if threads != "auto" and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            problems.append(f"num_threads={threads!r}: expected a positive integer or 'auto'")
        if problems:
            raise SettingsError("; ".join(problems))
        object.__setattr__(self, "sources", {name: self.sources.get(name, "default") for name in _KEYS})

    @classmethod
    def load(cls, env_file: str | os.PathLike | None = None, **overrides: Any) -> OptimizationSettings:
        """Resolve every setting from overrides, the environment, ``.env`` and the defaults.

        :param env_file: the ``.env`` to read; ``None`` reads ``.env`` in the working directory
            when there is one. A file given explicitly must exist.
        :param overrides: field values that win over everything (``None`` values are ignored,
            so CLI options left unset fall through).
        :raises SettingsError: naming the key, the value and where it came from.
        """
        unknown = set(overrides) - set(_KEYS)
        if unknown:
            raise SettingsError(f"unknown setting(s) {', '.join(sorted(unknown))}; known: {', '.join(_KEYS)}")
        path = Path(env_file) if env_file is not None else Path(".env")
        if env_file is not None and not path.is_file():
            raise SettingsError(f"env file {str(path)!r} does not exist; pass an existing file or leave it out")
        file_values = {k: v for k, v in dotenv_values(path).items() if v is not None} if path.is_file() else {}

        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for name, key in _KEYS.items():
            if overrides.get(name) is not None:
                values[name], sources[name] = overrides[name], "override"
                continue
            for source, table, origin in (
                ("environment", os.environ, "the environment"),
                (".env", file_values, str(path)),
            ):
                if key.name in table:
                    raw = table[key.name]
                    try:
                        values[name] = key.parse(raw)
                    except ValueError as error:
                        raise SettingsError(f"{key.name}={raw!r} in {origin}: {error}") from None
                    sources[name] = source
                    break
        return cls(**values, sources=sources)

    def source(self, name: str) -> str:
        """Where the value of field ``name`` came from: override, environment, .env or default."""
        if name not in _KEYS:
            raise KeyError(f"unknown setting {name!r}; known: {', '.join(_KEYS)}")
        return self.sources[name]

    def with_overrides(self, **overrides: Any) -> OptimizationSettings:
        """A copy with some fields overridden (their source becomes ``override``)."""
        changes = {k: v for k, v in overrides.items() if v is not None}
        return replace(self, **changes, sources={**self.sources, **dict.fromkeys(changes, "override")})

    def as_dict(self) -> dict[str, Any]:
        """Field values, without the sources."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sources"}

    @staticmethod
    def env_key(name: str) -> str:
        """The environment / ``.env`` key of field ``name``."""
        return _KEYS[name].name


#: The comment line :func:`write_env_file` keeps up to date with its ``note``.
WRITTEN_BY = "# Written by sb3-snake benchmark --write-env: "


def write_env_file(path: str | os.PathLike, note: str | None = None, **values: Any) -> None:
    """Set settings in a ``.env`` file, keeping its other lines and comments.

    ``values`` are field names of :class:`OptimizationSettings`; each is checked as
    :meth:`OptimizationSettings.load` would read it back, then written under its key (an
    existing key is replaced in place, a new one appended). The file is created if missing.
    ``note`` (where the values came from) replaces the previous such note, or is appended.
    """
    unknown = set(values) - set(_KEYS)
    if unknown:
        raise SettingsError(f"unknown setting(s) {', '.join(sorted(unknown))}; known: {', '.join(_KEYS)}")
    OptimizationSettings(**values)  # raises a SettingsError naming any bad value
    path = Path(path)
    path.touch(exist_ok=True)
    for name, value in values.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        set_key(path, _KEYS[name].name, text, quote_mode="never")
    if note is not None:
        lines = [line for line in path.read_text().splitlines() if not line.startswith(WRITTEN_BY)]
        path.write_text("\n".join([*lines, WRITTEN_BY + note]) + "\n")
