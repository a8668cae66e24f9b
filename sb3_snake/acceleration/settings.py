"""``OptimizationSettings``: which speed-ups to use, resolved once from every source.

Precedence, highest first: an explicit override (the CLI's flags), a process environment variable, the ``.env``
file, the built-in default; ``settings.source(field)`` says which one won. Nothing is read at import time:
:meth:`OptimizationSettings.load` reads when called. Each setting is declared once, a field made by
:func:`setting` (``.env`` key, flag, values, default, help), and everything else reads that declaration.
``auto`` means measured on this machine (:mod:`sb3_snake.autotune`); ``SDPA_BACKEND`` and
``USE_FLASH_ATTENTION`` must agree. A ``.env`` file holds these keys and the batch size (:data:`BATCH_SIZE_KEY`),
nothing else (:mod:`sb3_snake.acceleration.env_file`).
Design notes: docs/design-notes.md, "sb3_snake/acceleration/settings.py".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from sb3_snake.acceleration.env_file import check_env_file_writable, read_env_file, write_env_lines
from sb3_snake.acceleration.setting_values import (
    AUTO,
    BATCH_SIZE,
    COMPILE_MODES,
    COUNT,
    SDPA_BACKENDS,
    SWITCH,
    SWITCH_OR_AUTO,
    THREADS,
    SettingsError,
    Values,
    choice,
)
from sb3_snake.common.errors import did_you_mean

#: The ``.env`` key of the batch size: a learning value, which
#: :class:`~sb3_snake.training.config.TrainConfig` declares (``option(env=BATCH_SIZE_KEY)``) and
#: reads with :func:`read_environment`; a ``.env`` holds it beside the settings' keys.
BATCH_SIZE_KEY = "OPTIMAL_BATCH_SIZE"

#: The source of every setting of :meth:`OptimizationSettings.unmeasured`.
UNMEASURED_SOURCE = "default, not measured or compiled (a model built in Python)"


# ---------------------------------------------------------------------- one declaration per setting


@dataclass(frozen=True)
class Setting:
    """Everything about one setting but its default: how it is named and what it takes."""

    key: str  #: the environment / ``.env`` key
    flag: str  #: the command-line option that overrides it (``--x/--no-x`` for switches)
    values: Values
    help: str  #: for ``--help`` and the table
    #: What ``auto`` stands for when nothing measured it; ``None``: ``auto`` is not measured.
    unmeasured: Any = None

    @property
    def option(self) -> str:
        """The flag as a user names it in a message: ``--compile`` of ``--compile/--no-compile``."""
        return self.flag.split("/")[0]


def setting(default: Any, key: str, flag: str, values: Values, help: str, unmeasured: Any = None) -> Any:
    """A field of :class:`OptimizationSettings`: its default and its :class:`Setting`."""
    return field(default=default, metadata={"setting": Setting(key, flag, values, help, unmeasured)})


@dataclass(frozen=True)
class OptimizationSettings:
    """The optimization settings of a run, immutable once resolved.

    The built-in defaults are what the measurements behind the repository's ``.env`` support
    on any machine, and the ``.env`` states them (a test holds the two together), so the CLI run
    from anywhere else, with no ``.env`` in reach, trains as it does in the repository: ``auto``
    for bf16 and the attention kernel, whose best value changed from one machine to the next;
    torch.compile on, which
    ``sb3-snake train`` defers past its first minutes. A model built in Python without settings
    takes :meth:`unmeasured`: nothing measured, nothing compiled.

    An ``auto`` nothing measured stands for each field's ``unmeasured`` value: the choice that
    is right on every machine if not the fastest on each (fp32, PyTorch's own pick of attention
    kernel, no compile warm-up).
    """

    use_torch_compile: bool | str = setting(
        True,
        "USE_TORCH_COMPILE",
        "--compile/--no-compile",
        SWITCH_OR_AUTO,
        "torch.compile: on a CPU the whole gradient step as one graph (forward, backward, clipping, Adam; "
        "up to 4 steps to a call), compiled in a child process; off on CUDA, where the CUDA graph runs.",
        unmeasured=False,
    )
    use_flash_attention: bool | str = setting(
        AUTO,
        "USE_FLASH_ATTENTION",
        "--flash-attention/--no-flash-attention",
        SWITCH_OR_AUTO,
        "Restrict scaled-dot-product attention to the FlashAttention kernel where it can run.",
        unmeasured=False,
    )
    use_bf16: bool | str = setting(
        AUTO,
        "USE_BF16",
        "--bf16/--no-bf16",
        SWITCH_OR_AUTO,
        "bfloat16 autocast around the networks' forward passes, where the hardware computes bf16 natively.",
        unmeasured=False,
    )
    sdpa_backend: str = setting(
        AUTO,
        "SDPA_BACKEND",
        "--sdpa-backend",
        choice(SDPA_BACKENDS),
        "Restrict scaled-dot-product attention to one kernel; auto follows USE_FLASH_ATTENTION.",
    )
    compile_mode: str = setting(
        "default", "TORCH_COMPILE_MODE", "--compile-mode", choice(COMPILE_MODES), "torch.compile mode."
    )
    compile_after: int = setting(
        8_000,
        "TORCH_COMPILE_AFTER",
        "--compile-after",
        COUNT,
        "With torch.compile on: gradient steps trained eagerly before the compile starts (0: at the first).",
    )
    compile_in_background: bool = setting(
        True,
        "TORCH_COMPILE_IN_BACKGROUND",
        "--compile-in-background/--no-compile-in-background",
        SWITCH,
        "With torch.compile on, on a CPU: train eagerly while a child process compiles (off: training "
        "waits for the child, and a seeded run repeats).",
    )
    num_threads: int | str = setting(
        AUTO,
        "TORCH_NUM_THREADS",
        "--threads",
        THREADS,
        "torch intra-op threads; auto: every core when a CPU trains (a training run then measures that "
        "against one thread as it trains), one per core beyond the first, at most 4, when a GPU trains.",
    )
    use_cuda_graph: bool = setting(
        True,
        "USE_CUDA_GRAPH",
        "--cuda-graph/--no-cuda-graph",
        SWITCH,
        "On CUDA, capture the whole gradient step once and replay it as one CUDA graph (off on a CPU, "
        "or with a host replay buffer).",
    )
    #: Where each field's value came from: override, environment, .env or default.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: What ``auto`` measured for the fields it resolved, once for all of them (see
    #: :func:`sb3_snake.autotune.resolve.apply_choice`): ``date``, ``where`` (the cache),
    #: ``evidence`` per field, ``rule`` and the ``measurements``; empty when nothing was measured.
    auto_record: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        problems = [
            f"{name}={getattr(self, name)!r}: {problem}"
            for name, declared in SETTINGS.items()
            if (problem := declared.values.check(getattr(self, name)))
        ]
        if problems:
            raise SettingsError("; ".join(problems))
        object.__setattr__(self, "sources", {name: self.sources.get(name, "default") for name in SETTINGS})
        self._reconcile_attention()

    def _reconcile_attention(self) -> None:
        """``USE_FLASH_ATTENTION`` and ``SDPA_BACKEND`` agree, or one follows the other, or error."""
        flash, backend = self.use_flash_attention, self.sdpa_backend
        if backend == AUTO or flash == AUTO or flash == (backend == "flash"):
            return
        flash_origin = self._origin("use_flash_attention")
        backend_origin = self._origin("sdpa_backend")
        raise SettingsError(
            f"USE_FLASH_ATTENTION={str(flash).lower()} ({flash_origin}) and SDPA_BACKEND={backend} "
            f"({backend_origin}) contradict each other; set one of them, or USE_FLASH_ATTENTION=auto"
        )

    def _origin(self, name: str) -> str:
        source = self.sources[name]
        return f"from {SETTINGS[name].option}" if source == "override" else f"from {source}"

    def resolved(
        self, values: Mapping[str, Any], sources: Mapping[str, str], auto_record: Mapping[str, Any] | None = None
    ) -> OptimizationSettings:
        """These settings with ``values`` in place of ``auto``, where each came from and, when
        ``auto`` measured them, the record of what it measured."""
        record = self.auto_record if auto_record is None else auto_record
        return replace(self, **values, sources={**self.sources, **sources}, auto_record=record)

    def without_auto(self, source: str = "auto, not measured: the value that runs everywhere") -> OptimizationSettings:
        """These settings with each ``auto`` replaced by its :data:`UNMEASURED` value (what a
        model gets when nothing resolved ``auto`` for it), ``source`` saying so."""
        values = {name: UNMEASURED[name] for name in self.auto_fields}
        if "use_flash_attention" in values and self.sdpa_backend != AUTO:
            values["use_flash_attention"] = self.sdpa_backend == "flash"
        return self.resolved(values, {name: source for name in values})

    @classmethod
    def unmeasured(cls) -> OptimizationSettings:
        """The built-in defaults as a model built in Python without settings takes them: each
        ``auto`` at its :data:`UNMEASURED` value and no compile, so building a model measures
        nothing and stalls for no cold compile. Ask for compile or ``auto`` explicitly (and
        resolve it with :func:`sb3_snake.autotune.resolve_auto`)."""
        return cls().resolved(UNMEASURED, {name: UNMEASURED_SOURCE for name in UNMEASURED})

    @property
    def auto_fields(self) -> tuple[str, ...]:
        """The fields still ``auto`` (an ``auto`` SDPA backend follows ``use_flash_attention``)."""
        return tuple(name for name in AUTO_FIELDS if getattr(self, name) == AUTO)

    @classmethod
    def load(cls, env_file: str | os.PathLike | None = None, **overrides: Any) -> OptimizationSettings:
        """Resolve every setting from overrides, the environment, ``.env`` and the defaults.

        :param env_file: the ``.env`` to read; ``None`` reads ``.env`` in the working directory
            when there is one. A file given explicitly must exist.
        :param overrides: field values that win over everything (``None`` values are ignored,
            so CLI options left unset fall through).
        :raises SettingsError: naming the key, the value and where it came from, or what is
            wrong with the file (not a regular file, unreadable, not UTF-8, a line that cannot
            be parsed, a key without a value, an unknown key).
        """
        _check_names(overrides)
        values, sources = read_environment(env_file, {name: declared.key for name, declared in SETTINGS.items()})
        for name, value in overrides.items():
            if value is not None:
                values[name], sources[name] = value, "override"
        return cls(**values, sources=sources)

    def source(self, name: str) -> str:
        """Where the value of field ``name`` came from: override, environment, .env or default."""
        if name not in SETTINGS:
            raise KeyError(f"unknown setting {name!r}; {did_you_mean(name, list(SETTINGS))}")
        return self.sources[name]

    def as_dict(self) -> dict[str, Any]:
        """Field values, without the sources."""
        return {name: getattr(self, name) for name in SETTINGS}

    @staticmethod
    def env_key(name: str) -> str:
        """The environment / ``.env`` key of field ``name``."""
        return SETTINGS[name].key

    @staticmethod
    def flag(name: str) -> str:
        """The command-line option that overrides field ``name``, e.g. ``--compile/--no-compile``."""
        return SETTINGS[name].flag

    @staticmethod
    def parse(name: str, text: str) -> Any:
        """Field ``name``'s value from text, as ``.env`` is read; SettingsError naming the flag."""
        try:
            return SETTINGS[name].values.parse(text)
        except ValueError as error:
            raise SettingsError(f"{SETTINGS[name].option} {text!r}: {error}") from None

    @staticmethod
    def help(name: str) -> str:
        """One line describing field ``name``."""
        return SETTINGS[name].help


#: Every setting's declaration, by field name, in the order of the fields.
SETTINGS: Mapping[str, Setting] = {
    declared.name: declared.metadata["setting"]
    for declared in fields(OptimizationSettings)
    if "setting" in declared.metadata
}
#: What an ``auto`` nothing measured stands for, per field that ``auto`` measures.
UNMEASURED: Mapping[str, Any] = {
    name: declared.unmeasured for name, declared in SETTINGS.items() if declared.unmeasured is not None
}
#: Fields whose ``auto`` is measured on the machine (:mod:`sb3_snake.autotune`).
AUTO_FIELDS = tuple(UNMEASURED)
_DEFAULTS = {declared.name: declared.default for declared in fields(OptimizationSettings)}


def as_text(value: Any) -> str:
    """A setting's value as ``.env`` spells it (``true``, not ``True``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def table_row(declared: Setting, default: Any) -> str:
    """One row of the table of ``.env`` keys (Markdown) in docs/configuration.md: key, flag,
    values, default and help."""
    cells = (f"`{declared.key}`", f"`{declared.flag}`", declared.values.words, as_text(default), declared.help)
    return "| " + " | ".join(text.replace("|", "\\|") for text in cells) + " |"


def setting_rows() -> list[str]:
    """The table's rows of the settings, in the order of the fields
    (:func:`sb3_snake.training.options.configuration_table` renders the whole table)."""
    return [table_row(declared, _DEFAULTS[name]) for name, declared in SETTINGS.items()]


#: Every key a ``.env`` may hold, and the values it takes: the batch size's, then the settings'.
ENV_KEYS: Mapping[str, Values] = {
    BATCH_SIZE_KEY: BATCH_SIZE,
    **{declared.key: declared.values for declared in SETTINGS.values()},
}


def read_environment(
    env_file: str | os.PathLike | None, keys: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The values the process environment, else the ``.env`` file, gives the fields of ``keys``
    (field name: its key), and where each came from (``environment`` or ``.env``); fields
    neither sets are left out. Every key of :data:`ENV_KEYS` found is checked, so a malformed
    value is an error for every reader of the file, not only for the one that uses it.

    :param env_file: the ``.env`` to read; ``None`` reads ``.env`` in the working directory when
        there is one. A file given explicitly must exist.
    :raises SettingsError: naming the key, the value and where it came from, or what is wrong
        with the file.
    """
    path = Path(env_file) if env_file is not None else Path(".env")
    file_values = read_env_file(path, list(ENV_KEYS)) if env_file is not None or path.exists() else {}
    found: dict[str, tuple[Any, str]] = {}
    for key, values in ENV_KEYS.items():
        for source, table, origin in (("environment", os.environ, "the environment"), (".env", file_values, str(path))):
            if key in table:
                try:
                    found[key] = values.parse(table[key]), source
                except ValueError as error:
                    raise SettingsError(f"{key}={table[key]!r} in {origin}: {error}") from None
                break
    given = {name: found[key] for name, key in keys.items() if key in found}
    return {name: value for name, (value, _) in given.items()}, {name: source for name, (_, source) in given.items()}


def _check_names(names: Iterable[str]) -> None:
    """SettingsError for the first name that is not a setting, with the nearest one."""
    unknown = sorted(set(names) - set(SETTINGS))
    if unknown:
        raise SettingsError(f"unknown setting {unknown[0]!r}; {did_you_mean(unknown[0], list(SETTINGS))}")


def write_env_file(
    path: str | os.PathLike, note: str | None = None, batch_size: int | None = None, **values: Any
) -> None:
    """Set settings (and the batch size, under :data:`BATCH_SIZE_KEY`) in a ``.env`` file,
    keeping its other lines and comments.

    ``values`` are field names of :class:`OptimizationSettings`; each is checked as
    :meth:`OptimizationSettings.load` would read it back, then written under its key (an
    existing key is replaced in place, a new one appended). The file is created if missing.
    ``note`` (where the values came from) replaces the previous such note, or is appended.
    """
    _check_names(values)
    OptimizationSettings(**values)  # raises a SettingsError naming any bad value
    lines = {SETTINGS[name].key: as_text(value) for name, value in values.items()}
    if batch_size is not None:
        if problem := BATCH_SIZE.check(batch_size):
            raise SettingsError(f"batch_size={batch_size!r}: {problem}")
        lines = {BATCH_SIZE_KEY: as_text(batch_size), **lines}
    check_env_file_writable(path)
    write_env_lines(path, lines, note)
