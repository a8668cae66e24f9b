"""``OptimizationSettings``: which speed-ups to use, resolved once from every source.

Precedence, highest first: an explicit override (the CLI's flags), a process environment variable, the ``.env``
file, the built-in default; ``settings.source(field)`` says which one won. Nothing is read at import time:
:meth:`OptimizationSettings.load` reads when called. Each setting is one :func:`~sb3_snake.common.options.option`
(``.env`` key, flag, values, default, help), and everything else reads that declaration.
``auto`` means measured on this machine (:mod:`sb3_snake.autotune`); ``SDPA_BACKEND`` and
``USE_FLASH_ATTENTION`` must agree. A ``.env`` file holds the keys of declared options, nothing else
(:mod:`sb3_snake.acceleration.env_file`).
Design notes: docs/design-notes.md, "sb3_snake/acceleration/settings.py".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sb3_snake.acceleration.env_file import check_env_file_writable, read_env_file, write_env_lines
from sb3_snake.common.errors import SettingsError, did_you_mean
from sb3_snake.common.options import (
    AUTO,
    COMPILE_MODES,
    COUNT,
    KEYED,
    SDPA_BACKENDS,
    SWITCH,
    SWITCH_OR_AUTO,
    THREADS,
    Option,
    as_text,
    choice,
    declared,
    env_keys,
    flag_of,
    option,
    options_of,
    resolve,
    short_flag,
)

__all__ = [
    "AUTO",
    "AUTO_FIELDS",
    "COMPILE_MODES",
    "SDPA_BACKENDS",
    "SETTINGS",
    "UNMEASURED",
    "OptimizationSettings",
    "SettingsError",
    "environment_layers",
    "write_env_file",
]

#: The source of every setting of :meth:`OptimizationSettings.unmeasured`.
UNMEASURED_SOURCE = "default, not measured or compiled (a model built in Python)"


@declared
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

    use_torch_compile: bool | str = option(
        True,
        "torch.compile: on a CPU the whole gradient step as one graph (forward, backward, clipping, Adam; "
        "up to 4 steps to a call), compiled in a child process; off on CUDA, where the CUDA graph runs.",
        key="USE_TORCH_COMPILE",
        flag="--compile",
        values=SWITCH_OR_AUTO,
        unmeasured=False,
    )
    use_flash_attention: bool | str = option(
        AUTO,
        "Restrict scaled-dot-product attention to the FlashAttention kernel where it can run.",
        key="USE_FLASH_ATTENTION",
        flag="--flash-attention",
        values=SWITCH_OR_AUTO,
        unmeasured=False,
    )
    use_bf16: bool | str = option(
        AUTO,
        "bfloat16 autocast around the networks' forward passes, where the hardware computes bf16 natively.",
        key="USE_BF16",
        flag="--bf16",
        values=SWITCH_OR_AUTO,
        unmeasured=False,
    )
    sdpa_backend: str = option(
        AUTO,
        "Restrict scaled-dot-product attention to one kernel; auto follows USE_FLASH_ATTENTION.",
        key="SDPA_BACKEND",
        values=choice(SDPA_BACKENDS),
    )
    compile_mode: str = option("default", "torch.compile mode.", key="TORCH_COMPILE_MODE", values=choice(COMPILE_MODES))
    compile_after: int = option(
        8_000,
        "With torch.compile on: gradient steps trained eagerly before the compile starts (0: at the first).",
        key="TORCH_COMPILE_AFTER",
        values=COUNT,
    )
    compile_in_background: bool = option(
        True,
        "With torch.compile on, on a CPU: train eagerly while a child process compiles (off: training "
        "waits for the child, and a seeded run repeats).",
        key="TORCH_COMPILE_IN_BACKGROUND",
        values=SWITCH,
    )
    num_threads: int | str = option(
        AUTO,
        "torch intra-op threads; auto: every core when a CPU trains (a training run then measures that "
        "against one thread as it trains), one per core beyond the first, at most 4, when a GPU trains.",
        key="TORCH_NUM_THREADS",
        flag="--threads",
        values=THREADS,
    )
    use_cuda_graph: bool = option(
        True,
        "On CUDA, capture the whole gradient step once and replay it as one CUDA graph (off on a CPU, "
        "or with a host replay buffer).",
        key="USE_CUDA_GRAPH",
        flag="--cuda-graph",
        values=SWITCH,
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
        return f"from {short_flag(flag_of(OptimizationSettings, name))}" if source == "override" else f"from {source}"

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
        values, sources = resolve([("override", overrides), *environment_layers(env_file, SETTINGS)])
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


#: Every setting's declaration, by field name, in the order of the fields.
SETTINGS: Mapping[str, Option] = options_of(OptimizationSettings)
#: What an ``auto`` nothing measured stands for, per field that ``auto`` measures.
UNMEASURED: Mapping[str, Any] = {
    name: declared.unmeasured for name, declared in SETTINGS.items() if declared.unmeasured is not None
}
#: Fields whose ``auto`` is measured on the machine (:mod:`sb3_snake.autotune`).
AUTO_FIELDS = tuple(UNMEASURED)


def environment_layers(
    env_file: str | os.PathLike | None, options: Mapping[str, Option]
) -> list[tuple[str, dict[str, Any]]]:
    """What the process environment, then the ``.env`` file, give the ``options`` (by field name):
    the two lowest layers for :func:`~sb3_snake.common.options.resolve`, each with its source's
    name (``environment``, ``.env``). Every key of ours found is checked,
    so a malformed value is an error for every reader of the file, not only for the one that uses it.

    :param env_file: the ``.env`` to read; ``None`` reads ``.env`` in the working directory when
        there is one. A file given explicitly must exist.
    :raises SettingsError: naming the key, the value and where it came from, or what is wrong
        with the file.
    """
    path = Path(env_file) if env_file is not None else Path(".env")
    keys = env_keys()
    file_values = read_env_file(path, list(keys)) if env_file is not None or path.exists() else {}
    found: dict[str, dict[str, Any]] = {"environment": {}, ".env": {}}
    for source, table, origin in (("environment", os.environ, "the environment"), (".env", file_values, str(path))):
        for key, values in keys.items():
            if key in table:
                try:
                    found[source][key] = values.parse(table[key])
                except ValueError as error:
                    raise SettingsError(f"{key}={table[key]!r} in {origin}: {error}") from None
    return [(source, {name: table.get(o.key) for name, o in options.items()}) for source, table in found.items()]


def _check_names(names: Iterable[str], known: Mapping[str, Option] = SETTINGS) -> None:
    """SettingsError for the first name that is not one of ``known``, with the nearest one."""
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise SettingsError(f"unknown setting {unknown[0]!r}; {did_you_mean(unknown[0], list(known))}")


def write_env_file(path: str | os.PathLike, note: str | None = None, **values: Any) -> None:
    """Set options that a ``.env`` may hold (by field name: the settings, the batch size) in a
    ``.env`` file, keeping its other lines and comments.

    Each value is checked as :meth:`OptimizationSettings.load` would read it back, then written
    under its key (an existing key is replaced in place, a new one appended). The file is created
    if missing. ``note`` (where the values came from) replaces the previous such note, or is appended.
    """
    _check_names(values, KEYED)
    for name, value in values.items():
        if problem := (KEYED[name].values or SWITCH).check(value):
            raise SettingsError(f"{name}={value!r}: {problem}")
    OptimizationSettings(**{name: value for name, value in values.items() if name in SETTINGS})  # agree
    check_env_file_writable(path)
    write_env_lines(path, {KEYED[name].key: as_text(value) for name, value in values.items()}, note)
