"""``OptimizationSettings``: which speed-ups to use, resolved once from every source.

Precedence, highest first: an explicit override (the CLI's flags), a process environment
variable, the ``.env`` file, the built-in default. ``settings.source(field)`` says which one
won. Nothing is read at import time; :meth:`OptimizationSettings.load` reads when called.

Keys (environment variables and ``.env``):

=====================  =====================  ========================  ==================================
key                    field                  flag                      values
=====================  =====================  ========================  ==================================
OPTIMAL_BATCH_SIZE     batch_size             --batch-size              integer > 0, or auto
USE_TORCH_COMPILE      use_torch_compile      --compile/--no-compile    true/false, 1/0, yes/no, on/off,
                                                                        or auto
USE_FLASH_ATTENTION    use_flash_attention    --flash-attention/...     same
USE_BF16               use_bf16               --bf16/--no-bf16          same
SDPA_BACKEND           sdpa_backend           --sdpa-backend            auto, flash, efficient, math, cudnn
TORCH_COMPILE_MODE     compile_mode           --compile-mode            default, reduce-overhead,
                                                                        max-autotune,
                                                                        max-autotune-no-cudagraphs
TORCH_NUM_THREADS      num_threads            --threads                 auto, or 1 to 4x the CPU cores
USE_CUDA_GRAPH         use_cuda_graph         --cuda-graph/...          true/false (and the other spellings)
=====================  =====================  ========================  ==================================

``auto`` for the batch size and the three switches means "measured on this machine": see
:mod:`sb3_snake.acceleration.autotune`, which resolves it into a plain value before a model is built and
records how in the field's source. ``SDPA_BACKEND`` restricts scaled-dot-product attention to
one kernel; ``auto`` leaves the choice to ``USE_FLASH_ATTENTION`` (flash, or PyTorch's pick of
the others), or to the measurement when that is ``auto`` too. The two must agree: a backend
other than flash with ``USE_FLASH_ATTENTION=true``, or flash with ``false``, is an error naming
both; ``USE_FLASH_ATTENTION=auto`` (the default) follows the backend.

A ``.env`` file holds these keys and nothing else: a line that cannot be parsed, a key without
a value and an unknown key (named with the nearest known one) are errors, never skipped.
"""

from __future__ import annotations

import difflib
import io
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dotenv import set_key
from dotenv.parser import parse_stream

from sb3_snake.common.paths import check_writable_file

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: ``SDPA_BACKEND`` values: ``auto`` or one ``torch.nn.attention.SDPBackend`` kernel.
SDPA_BACKENDS = ("auto", "flash", "efficient", "math", "cudnn")
#: The value of a setting that is measured on the machine that runs it (:mod:`sb3_snake.acceleration.autotune`).
AUTO = "auto"
#: Fields that accept ``auto``.
AUTO_FIELDS = ("batch_size", "use_torch_compile", "use_flash_attention", "use_bf16")
#: What an ``auto`` nothing measured stands for: the choice that is right on every machine if
#: not the fastest on each (fp32, PyTorch's own pick of attention kernel, no compile warm-up) and
#: the batch size chosen on score-against-minutes curves.
UNMEASURED: Mapping[str, int | bool] = {
    "batch_size": 128,
    "use_torch_compile": False,
    "use_flash_attention": False,
    "use_bf16": False,
}
#: The source of every setting of :meth:`OptimizationSettings.unmeasured`.
UNMEASURED_SOURCE = "default, not measured or compiled (a model built in Python)"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
#: Threads per core beyond which ``TORCH_NUM_THREADS`` is refused (huge counts crash OpenMP).
MAX_THREADS_PER_CORE = 4


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names key, value and origin."""


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected true/false, 1/0, yes/no or on/off")


def _parse_switch(text: str) -> bool | str:
    if str(text).strip().lower() == AUTO:
        return AUTO
    try:
        return _parse_bool(text)
    except ValueError:
        raise ValueError("expected true/false, 1/0, yes/no, on/off or auto") from None


def _parse_batch_size(text: str) -> int | str:
    if str(text).strip().lower() == AUTO:
        return AUTO
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ValueError("expected a positive integer or auto") from None
    if value < 1:
        raise ValueError("expected a positive integer or auto")
    return value


def _parse_sdpa_backend(text: str) -> str:
    backend = str(text).strip().lower()
    if backend not in SDPA_BACKENDS:
        raise ValueError(f"expected one of {', '.join(SDPA_BACKENDS)}")
    return backend


def max_threads() -> int:
    return MAX_THREADS_PER_CORE * (os.cpu_count() or 1)


def _threads_problem(value: Any) -> str:
    if value == "auto":
        return ""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= max_threads():
        return f"expected auto or an integer from 1 to {max_threads()} ({MAX_THREADS_PER_CORE}x this machine's cores)"
    return ""


def _parse_threads(text: str) -> int | str:
    text = str(text).strip().lower()
    try:
        value: int | str = "auto" if text == "auto" else int(text)
    except ValueError:
        value = text
    problem = _threads_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _parse_compile_mode(text: str) -> str:
    mode = str(text).strip().lower()
    if mode not in COMPILE_MODES:
        raise ValueError(f"expected one of {', '.join(COMPILE_MODES)}")
    return mode


@dataclass(frozen=True)
class _Key:
    name: str  #: the environment / .env key
    parse: Callable[[str], Any]
    flag: str  #: the command-line option that overrides it (``--x/--no-x`` for switches)
    help: str  #: one line for --help


_KEYS: dict[str, _Key] = {
    "batch_size": _Key(
        "OPTIMAL_BATCH_SIZE", _parse_batch_size, "--batch-size", "Replay samples per gradient step, or auto."
    ),
    "use_torch_compile": _Key(
        "USE_TORCH_COMPILE", _parse_switch, "--compile/--no-compile", "torch.compile the Q-networks."
    ),
    "use_flash_attention": _Key(
        "USE_FLASH_ATTENTION",
        _parse_switch,
        "--flash-attention/--no-flash-attention",
        "Restrict SDPA to the FlashAttention kernel.",
    ),
    "use_bf16": _Key("USE_BF16", _parse_switch, "--bf16/--no-bf16", "bfloat16 autocast in forward passes."),
    "sdpa_backend": _Key(
        "SDPA_BACKEND",
        _parse_sdpa_backend,
        "--sdpa-backend",
        f"Scaled-dot-product attention kernel: {', '.join(SDPA_BACKENDS)}.",
    ),
    "compile_mode": _Key(
        "TORCH_COMPILE_MODE", _parse_compile_mode, "--compile-mode", f"torch.compile mode: {', '.join(COMPILE_MODES)}."
    ),
    "num_threads": _Key("TORCH_NUM_THREADS", _parse_threads, "--threads", "torch intra-op threads, or auto."),
    "use_cuda_graph": _Key(
        "USE_CUDA_GRAPH",
        _parse_bool,
        "--cuda-graph/--no-cuda-graph",
        "On CUDA, replay each gradient step as one captured CUDA graph.",
    ),
}


@dataclass(frozen=True)
class OptimizationSettings:
    """The optimization settings of a run, immutable once resolved.

    The built-in defaults are what the measurements behind the repository's ``.env`` support
    on any machine, and the ``.env`` states them (a test holds the two together), so the CLI run
    from anywhere else, with no ``.env`` in reach, trains as it does in the repository: ``auto``
    for bf16 and the attention kernel, whose best value changed from one machine to the next;
    batch 128, chosen on score-against-minutes curves; torch.compile on, which
    ``sb3-snake train`` defers past its first minutes. A model built in Python without settings
    takes :meth:`unmeasured`: nothing measured, nothing compiled.
    """

    #: Replay samples per gradient step, or ``auto``.
    batch_size: int | str = 128
    #: Compile the Q-networks with ``torch.compile`` (or ``auto``).
    use_torch_compile: bool | str = True
    #: Restrict scaled-dot-product attention to the FlashAttention kernel where it can run (or ``auto``).
    use_flash_attention: bool | str = AUTO
    #: Run the networks' forward passes under bfloat16 autocast where the hardware has bf16 (or ``auto``).
    use_bf16: bool | str = AUTO
    #: Restrict scaled-dot-product attention to one kernel, or ``auto``.
    sdpa_backend: str = AUTO
    #: ``torch.compile`` mode.
    compile_mode: str = "default"
    #: torch intra-op threads; ``auto`` chooses by the rule in ``optimizations.choose_num_threads``.
    num_threads: int | str = "auto"
    #: On CUDA, capture the whole gradient step in one CUDA graph and replay it
    #: (:mod:`sb3_snake.dqn.update.captured`); nothing to capture on a CPU.
    use_cuda_graph: bool = True
    #: Where each field's value came from: override, environment, .env or default (a resumed
    #: run's batch size: resumed model).
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        problems = []
        batch = self.batch_size
        if batch != AUTO and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
            problems.append(f"batch_size={batch!r}: expected a positive integer or 'auto'")
        for name in ("use_torch_compile", "use_flash_attention", "use_bf16"):
            if not isinstance(getattr(self, name), bool) and getattr(self, name) != AUTO:
                problems.append(f"{name}={getattr(self, name)!r}: expected True, False or 'auto'")
        if not isinstance(self.use_cuda_graph, bool):
            problems.append(f"use_cuda_graph={self.use_cuda_graph!r}: expected True or False")
        if self.sdpa_backend not in SDPA_BACKENDS:
            problems.append(f"sdpa_backend={self.sdpa_backend!r}: expected one of {', '.join(SDPA_BACKENDS)}")
        if self.compile_mode not in COMPILE_MODES:
            problems.append(f"compile_mode={self.compile_mode!r}: expected one of {', '.join(COMPILE_MODES)}")
        if _threads_problem(self.num_threads):
            problems.append(f"num_threads={self.num_threads!r}: {_threads_problem(self.num_threads)}")
        if problems:
            raise SettingsError("; ".join(problems))
        object.__setattr__(self, "sources", {name: self.sources.get(name, "default") for name in _KEYS})
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
        return f"from {_KEYS[name].flag.split('/')[0]}" if source == "override" else f"from {source}"

    def resolved(self, values: Mapping[str, Any], sources: Mapping[str, str]) -> OptimizationSettings:
        """These settings with ``values`` in place of ``auto`` and where each came from."""
        return replace(self, **values, sources={**self.sources, **sources})

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
        nothing and stalls for no cold compile (a minute or more on a CPU). Ask for compile
        or ``auto`` explicitly (and resolve it with :func:`sb3_snake.acceleration.autotune.resolve_auto`)."""
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
        unknown = set(overrides) - set(_KEYS)
        if unknown:
            raise SettingsError(f"unknown setting(s) {', '.join(sorted(unknown))}; known: {', '.join(_KEYS)}")
        path = Path(env_file) if env_file is not None else Path(".env")
        file_values = read_env_file(path) if env_file is not None or path.exists() else {}

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

    def as_dict(self) -> dict[str, Any]:
        """Field values, without the sources."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sources"}

    @staticmethod
    def env_key(name: str) -> str:
        """The environment / ``.env`` key of field ``name``."""
        return _KEYS[name].name

    @staticmethod
    def flag(name: str) -> str:
        """The command-line option that overrides field ``name``, e.g. ``--compile/--no-compile``."""
        return _KEYS[name].flag

    @staticmethod
    def parse(name: str, text: str) -> Any:
        """Field ``name``'s value from text, as ``.env`` is read; SettingsError naming the flag."""
        try:
            return _KEYS[name].parse(text)
        except ValueError as error:
            raise SettingsError(f"{_KEYS[name].flag.split('/')[0]} {text!r}: {error}") from None

    @staticmethod
    def help(name: str) -> str:
        """One line describing field ``name``."""
        return _KEYS[name].help


def read_env_file(path: Path) -> dict[str, str]:
    """The keys and values of a ``.env`` file, checked line by line; every problem is a SettingsError.

    The file must be a regular UTF-8 text file (a directory, a device or a FIFO is refused before
    it is opened, so nothing blocks). Each line is parsed with python-dotenv's own parser.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise SettingsError(f"env file {str(path)!r} does not exist; pass an existing file or leave it out") from None
    except OSError as error:
        raise SettingsError(f"env file {str(path)!r} cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise SettingsError(f"env file {str(path)!r} is {kind}; pass a text file of KEY=value lines")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise SettingsError(f"env file {str(path)!r} cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise SettingsError(f"env file {str(path)!r} is not UTF-8 text; it must hold KEY=value lines") from None
    known = [key.name for key in _KEYS.values()]
    values: dict[str, str] = {}
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        first_line = binding.original.string.splitlines()[0].strip() if binding.original.string.strip() else ""
        where = f"line {line} of {path}"
        if binding.error:
            raise SettingsError(f"{where} cannot be parsed: {first_line!r} (an unterminated quote?); write KEY=value")
        if binding.key is None:
            continue  # a comment or a blank line
        if binding.key not in known:
            nearest = difflib.get_close_matches(binding.key, known, n=1, cutoff=0.5)
            hint = f"did you mean {nearest[0]}? " if nearest else ""
            raise SettingsError(f"{where}: unknown key {binding.key}; {hint}known keys: {', '.join(known)}")
        if binding.value is None:
            raise SettingsError(f"{where}: {binding.key} has no value; write {binding.key}=value")
        values[binding.key] = binding.value
    return values


#: The comment line :func:`write_env_file` keeps up to date with its ``note``.
WRITTEN_BY = "# Written by sb3-snake benchmark --write-env: "


def check_env_file_writable(path: str | os.PathLike) -> None:
    """Raise SettingsError unless :func:`write_env_file` can write ``path`` (checked before any work)."""
    try:
        check_writable_file(Path(path), what="env file")
    except ValueError as error:
        raise SettingsError(str(error)) from None


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
    check_env_file_writable(path)
    path.touch(exist_ok=True)
    for name, value in values.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        set_key(path, _KEYS[name].name, text, quote_mode="never")
    if note is not None:
        lines = [line for line in path.read_text().splitlines() if not line.startswith(WRITTEN_BY)]
        path.write_text("\n".join([*lines, WRITTEN_BY + note]) + "\n")
