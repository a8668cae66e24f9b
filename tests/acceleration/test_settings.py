"""OptimizationSettings: parsing, precedence, sources and clear errors."""

import os
import subprocess
from pathlib import Path

import pytest

from sb3_snake.acceleration.settings import SETTINGS, OptimizationSettings, SettingsError
from sb3_snake.common.errors import UsageError
from sb3_snake.common.options import env_keys, flag_of, max_threads, parse
from sb3_snake.training.config import TrainConfig
from sb3_snake.training.options import configuration_table, load_config

ENV_KEYS = (
    "OPTIMAL_BATCH_SIZE",
    "USE_TORCH_COMPILE",
    "USE_FLASH_ATTENTION",
    "USE_BF16",
    "TORCH_COMPILE_MODE",
    "TORCH_COMPILE_AFTER",
    "TORCH_COMPILE_IN_BACKGROUND",
    "TORCH_NUM_THREADS",
    "SDPA_BACKEND",
    "USE_CUDA_GRAPH",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)


def write_env(tmp_path, text):
    path = tmp_path / "custom.env"
    path.write_text(text)
    return path


def test_defaults_without_any_source():
    settings = OptimizationSettings.load()
    assert settings == OptimizationSettings()
    assert all(settings.source(name) == "default" for name in settings.as_dict())


def test_env_file_values_and_spellings(tmp_path):
    path = write_env(
        tmp_path,
        "# comment\nOPTIMAL_BATCH_SIZE=1024\nUSE_TORCH_COMPILE=Yes\nUSE_FLASH_ATTENTION=off\n"
        "USE_BF16=0\nTORCH_COMPILE_MODE=max-autotune\nTORCH_NUM_THREADS=2\nUSE_CUDA_GRAPH=no\n"
        "TORCH_COMPILE_AFTER= 250\nTORCH_COMPILE_IN_BACKGROUND=off\n",
    )
    settings = OptimizationSettings.load(path)
    assert settings.as_dict() == {
        "use_torch_compile": True,
        "use_flash_attention": False,
        "use_bf16": False,
        "compile_mode": "max-autotune",
        "compile_after": 250,
        "compile_in_background": False,
        "num_threads": 2,
        "sdpa_backend": "auto",
        "use_cuda_graph": False,
    }
    config = load_config(path)  # the batch size is a learning value: TrainConfig reads it from the same file
    assert (config.batch_size, config.source("batch_size")) == (1024, ".env")


def test_dotenv_in_working_directory_is_found(tmp_path):
    (tmp_path / ".env").write_text("USE_BF16=false\n")
    settings = OptimizationSettings.load()
    assert settings.use_bf16 is False and settings.source("use_bf16") == ".env"


def test_precedence_override_then_environment_then_file_then_default(tmp_path, monkeypatch):
    path = write_env(tmp_path, "OPTIMAL_BATCH_SIZE=512\nUSE_BF16=true\nUSE_TORCH_COMPILE=true\n")
    monkeypatch.setenv("OPTIMAL_BATCH_SIZE", "2048")
    monkeypatch.setenv("USE_BF16", "false")
    settings = OptimizationSettings.load(path, use_torch_compile=None)
    assert (settings.use_bf16, settings.source("use_bf16")) == (False, "environment")
    assert (settings.use_torch_compile, settings.source("use_torch_compile")) == (True, ".env")
    assert (settings.compile_mode, settings.source("compile_mode")) == ("default", "default")


def test_the_batch_size_flag_then_environment_then_env_file_then_default(tmp_path, monkeypatch):
    """OPTIMAL_BATCH_SIZE keeps the precedence it had as a setting, now as TrainConfig's field."""
    path = write_env(tmp_path, "OPTIMAL_BATCH_SIZE=512\n")
    monkeypatch.setenv("OPTIMAL_BATCH_SIZE", "2048")
    flag = load_config(path, batch_size=64)
    assert (flag.batch_size, flag.source("batch_size")) == (64, "override")
    environment = load_config(path, batch_size=None)  # a flag left out falls through
    assert (environment.batch_size, environment.source("batch_size")) == (2048, "environment")
    monkeypatch.delenv("OPTIMAL_BATCH_SIZE")
    assert (load_config(path).batch_size, load_config(path).source("batch_size")) == (512, ".env")
    assert (load_config().batch_size, load_config().source("batch_size")) == (128, "default")
    assert load_config(write_env(tmp_path, "OPTIMAL_BATCH_SIZE=AUTO\n")).batch_size == "auto"
    with pytest.raises(SettingsError, match=r"OPTIMAL_BATCH_SIZE='big' in .*custom.env: expected an integer from 1 to"):
        load_config(write_env(tmp_path, "OPTIMAL_BATCH_SIZE=big\n"))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("USE_BF16=maybe", r"USE_BF16='maybe' in .*custom.env: expected true/false"),
        (
            "OPTIMAL_BATCH_SIZE=-4",
            r"OPTIMAL_BATCH_SIZE='-4' in .*custom.env: expected an integer from 1 to",
        ),
        ("OPTIMAL_BATCH_SIZE=big", r"OPTIMAL_BATCH_SIZE='big'"),
        ("TORCH_COMPILE_MODE=fast", r"TORCH_COMPILE_MODE='fast' .*expected one of default, reduce-overhead"),
        ("TORCH_NUM_THREADS=0", r"TORCH_NUM_THREADS='0' .*expected auto or an integer from 1"),
        ("TORCH_NUM_THREADS=100000", r"TORCH_NUM_THREADS='100000' .*: expected auto or an integer from 1 to \d+"),
        # Lines python-dotenv only warned about, or that were skipped: errors now.
        (
            'OPTIMAL_BATCH_SIZE="64',
            r"line 1 of .*custom.env cannot be parsed \(key OPTIMAL_BATCH_SIZE: an unterminated quote\?\); write",
        ),
        ("# fine\nUSE_BF16", r"line 2 of .*custom.env: USE_BF16 has no value; write USE_BF16=value"),
        ("USE_BF61=true", r"line 1 of .*: unknown key USE_BF61; did you mean USE_BF16\?"),
        # a misspelt key of ours would silently do nothing: refused, with the key it resembles
        ("use_bf16=true", r"line 1 of .*: unknown key use_bf16; did you mean USE_BF16\?"),
        ("OPTIMAL_BATCHSIZE=64", r"unknown key OPTIMAL_BATCHSIZE; did you mean OPTIMAL_BATCH_SIZE\?"),
        ("USE_CUDA_GRAPHS=false", r"unknown key USE_CUDA_GRAPHS; did you mean USE_CUDA_GRAPH\?"),
    ],
)
def test_malformed_env_file_lines_name_line_key_value_and_file(tmp_path, line, message):
    with pytest.raises(SettingsError, match=message):
        OptimizationSettings.load(write_env(tmp_path, line + "\n"))


SHARED_ENV = (
    "# a .env shared with other tools, written as they write it\r\n"
    "WANDB_API_KEY=0123456789abcdef\r\n"
    "export HF_TOKEN='hf_abc def'  # Hugging Face\r\n"
    "OMP_NUM_THREADS=1\r\n"
    "TORCH_COMPILE_DEBUG=\r\n"
    'export USE_BF16="false"  # ours, exported and quoted\r\n'
    "WANDB_API_KEY=set-twice-is-theirs-to-judge\r\n"
    "OPTIMAL_BATCH_SIZE = '64'\r\n"
)


def test_a_env_shared_with_other_tools_reads_ours_and_leaves_theirs(tmp_path, caplog):
    path = write_env(tmp_path, SHARED_ENV)
    with caplog.at_level("INFO", logger="sb3_snake"):
        settings = OptimizationSettings.load(path)
        config = load_config(path)
        OptimizationSettings.load(path)
    assert (settings.use_bf16, settings.source("use_bf16")) == (False, ".env")
    assert (config.batch_size, config.source("batch_size")) == (64, ".env")
    listed = [record.getMessage() for record in caplog.records if "left to other tools" in record.getMessage()]
    others = "WANDB_API_KEY, HF_TOKEN, OMP_NUM_THREADS, TORCH_COMPILE_DEBUG"
    assert listed == [f"{path}: left to other tools: {others}"]
    assert "0123456789abcdef" not in caplog.text and "hf_abc" not in caplog.text


def test_a_bare_line_that_may_be_a_secret_is_named_by_its_line_only(tmp_path, caplog):
    path = write_env(tmp_path, "WANDB_API_KEY=x\nghp_0123456789SECRETSECRET\nUSE_BF16=false\n")
    with caplog.at_level("INFO", logger="sb3_snake"):
        OptimizationSettings.load(path)
    assert "ghp_0123456789SECRETSECRET" not in caplog.text and "SECRET" not in caplog.text
    assert "left to other tools: WANDB_API_KEY, line 2 (no '=')" in caplog.text


@pytest.mark.parametrize(
    "text",
    ["K" * 400_000 + "=1\n", "".join(f"OTHER_TOOL_KEY_{i}=1\n" for i in range(30_000))],
    ids=["one-key-of-400k", "30k-keys"],
)
def test_long_or_many_keys_are_read_in_linear_time_and_listed_short(tmp_path, caplog, text):
    from sb3_snake.acceleration import env_file

    compared = []
    real = env_file._edits
    with pytest.MonkeyPatch.context() as patch:  # counts the edit distances computed (each O(len^2))
        patch.setattr(env_file, "_edits", lambda a, b: compared.append(len(a) * len(b)) or real(a, b))
        with caplog.at_level("INFO", logger="sb3_snake"):
            OptimizationSettings.load(write_env(tmp_path, text))
    # no comparison of a key far longer than ours, and a bounded one per key: linear in the file
    assert sum(compared) <= 30 * 30 * len(SETTINGS) * text.count("\n")
    listed = [record.getMessage() for record in caplog.records if "left to other tools" in record.getMessage()]
    assert len(listed) == 1 and len(listed[0]) < 2_000  # at most 20 keys, each cut at 40 characters


def test_a_file_too_large_for_a_env_is_refused_in_one_line(tmp_path):
    path = write_env(tmp_path, "# padding\n" * 200_000)
    with pytest.raises(SettingsError, match=r"has 2,000,000 bytes, more than the 1,048,576 a .env"):
        OptimizationSettings.load(path)


def test_cli_lists_other_tools_keys_at_verbose_only(tmp_path):
    from typer.testing import CliRunner

    from sb3_snake.cli import app

    path = write_env(tmp_path, "WANDB_API_KEY=x\nTORCH_COMPILE_MODE=fast\n")  # stops right after reading
    for flags in (["train"], ["--verbose", "train"]):
        result = CliRunner().invoke(app, [*flags, "--env-file", str(path)])
        assert result.exit_code == 2 and "TORCH_COMPILE_MODE='fast'" in result.output, result.output
        assert ("left to other tools: WANDB_API_KEY" in result.output) == ("--verbose" in flags), result.output


def test_version_comes_from_the_installed_metadata():
    from importlib.metadata import version

    from typer.testing import CliRunner

    import sb3_snake
    from sb3_snake.cli import app

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"sb3-snake {version('sb3-snake')}\n"
    assert sb3_snake.__version__ == version("sb3-snake")


@pytest.mark.parametrize("line", ['HF_TOKEN="hf_TOPSECRET_42', "export HF_TOKEN='hf_TOPSECRET_42", '"hf_TOPSECRET_42'])
def test_a_line_that_cannot_be_parsed_is_named_by_its_line_and_key_never_its_value(tmp_path, line):
    with pytest.raises(SettingsError) as refused:
        OptimizationSettings.load(write_env(tmp_path, "USE_BF16=false\n" + line + "\n"))
    message = str(refused.value)
    assert "line 2 of" in message and "TOPSECRET" not in message
    assert ("key HF_TOKEN" in message) == line.lstrip("export ").startswith("HF_TOKEN")


def test_a_key_set_twice_is_refused_naming_the_file_the_key_and_both_lines(tmp_path):
    """Taking either line would skip the other one silently."""
    from typer.testing import CliRunner

    from sb3_snake.cli import app

    path = write_env(tmp_path, "OPTIMAL_BATCH_SIZE=auto\n# tuned later\nOPTIMAL_BATCH_SIZE=64\n")
    message = r"custom.env: OPTIMAL_BATCH_SIZE is set twice, on lines 1 and 3; keep one of them"
    with pytest.raises(SettingsError, match=message):
        OptimizationSettings.load(path)
    with pytest.raises(SettingsError, match=message):
        load_config(path)
    result = CliRunner().invoke(app, ["train", "--env-file", str(path)])
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    assert "OPTIMAL_BATCH_SIZE is set twice, on lines 1 and 3" in result.output and str(path) in result.output


def test_malformed_environment_variable_names_the_environment(monkeypatch):
    monkeypatch.setenv("USE_FLASH_ATTENTION", "sometimes")
    with pytest.raises(SettingsError, match="USE_FLASH_ATTENTION='sometimes' in the environment"):
        OptimizationSettings.load()


def test_missing_explicit_env_file(tmp_path):
    with pytest.raises(SettingsError, match="does not exist"):
        OptimizationSettings.load(tmp_path / "nope.env")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"batch_size": 512}, "unknown setting 'batch_size'"),  # a learning value now: TrainConfig's
        ({"use_bf16": "yes"}, "use_bf16='yes': expected True, False or 'auto'"),
        ({"compile_mode": "fast"}, "compile_mode='fast'"),
        ({"num_threads": -1}, "num_threads=-1: expected auto or an integer from 1"),
        ({"unknown": 1}, "unknown setting 'unknown'"),
        ({"use_bf61": True}, r"unknown setting 'use_bf61'; did you mean use_bf16\?"),
    ],
)
def test_bad_overrides(overrides, message):
    with pytest.raises(SettingsError, match=message):
        OptimizationSettings.load(**overrides)


def test_env_file_that_is_not_a_text_file(tmp_path):
    binary = tmp_path / "binary.env"
    binary.write_bytes(b"\xff\xfeUSE_BF16=1\x00")
    with pytest.raises(SettingsError, match="is not UTF-8 text"):
        OptimizationSettings.load(binary)
    with pytest.raises(SettingsError, match="is a directory"):
        OptimizationSettings.load(tmp_path)
    with pytest.raises(SettingsError, match="is not a regular file"):
        OptimizationSettings.load("/dev/null")
    fifo = tmp_path / "fifo.env"
    os.mkfifo(fifo)
    with pytest.raises(SettingsError, match="is not a regular file"):  # refused before opening: never blocks
        OptimizationSettings.load(fifo)


def test_unreadable_env_file(tmp_path):
    if not Path("/proc/self/mem").exists():
        pytest.skip("needs Linux /proc")
    with pytest.raises(SettingsError, match="cannot be read"):
        OptimizationSettings.load("/proc/self/mem")


def test_thread_count_is_capped_per_core():
    with pytest.raises(SettingsError, match="num_threads=100000"):
        OptimizationSettings(num_threads=100000)
    assert OptimizationSettings(num_threads=max_threads()).num_threads == max_threads()


def test_parse_names_the_flag():
    assert parse(OptimizationSettings, "num_threads", "auto") == "auto"
    with pytest.raises(SettingsError, match="--threads 'many'"):
        parse(OptimizationSettings, "num_threads", "many")


def test_num_threads_auto_or_integer(tmp_path):
    assert OptimizationSettings.load(write_env(tmp_path, "TORCH_NUM_THREADS=AUTO\n")).num_threads == "auto"


def test_auto_is_accepted_where_a_measurement_can_decide(tmp_path):
    path = write_env(
        tmp_path, "OPTIMAL_BATCH_SIZE=auto\nUSE_TORCH_COMPILE=AUTO\nUSE_FLASH_ATTENTION=auto\nUSE_BF16=auto\n"
    )
    settings = OptimizationSettings.load(path)
    assert settings.auto_fields == ("use_torch_compile", "use_flash_attention", "use_bf16")
    flagged = OptimizationSettings.load(path, use_bf16=False, use_flash_attention=None)  # flags win over auto
    assert flagged.auto_fields == ("use_torch_compile", "use_flash_attention")
    assert load_config(path).batch_size == "auto"
    assert flagged.source("use_bf16") == "override"
    for text, key in (("TORCH_COMPILE_MODE=auto", "TORCH_COMPILE_MODE"), ("USE_BF16=maybe", "USE_BF16")):
        with pytest.raises(SettingsError, match=key):
            OptimizationSettings.load(write_env(tmp_path, text + "\n"))


def test_without_auto_takes_the_unmeasured_values_and_says_so():
    settings = OptimizationSettings(use_flash_attention=True, use_torch_compile="auto")
    fallback = settings.without_auto()
    assert (fallback.use_bf16, fallback.use_torch_compile) == (False, False)
    assert fallback.auto_fields == () and "not measured" in fallback.source("use_bf16")
    assert fallback.use_flash_attention is True and fallback.source("use_flash_attention") == "default"


def committed_env_file(folder: Path) -> Path:
    """The repository's ``.env`` as committed (a user's ``benchmark --write-env`` may have rewritten
    the working copy for their machine), or the file itself outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        text = subprocess.run(
            ["git", "-C", str(root), "show", "HEAD:.env"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return root / ".env"
    (folder / ".env").write_text(text)
    return folder / ".env"


def test_the_committed_env_file_states_the_built_in_defaults(monkeypatch, tmp_path):
    """The CLI run where no .env is in reach (installed elsewhere) trains as in the repository."""
    for name in OptimizationSettings().as_dict():
        monkeypatch.delenv(OptimizationSettings.env_key(name), raising=False)
    committed = OptimizationSettings.load(committed_env_file(tmp_path))
    assert committed.as_dict() == OptimizationSettings().as_dict()
    assert all(committed.source(name) == ".env" for name in committed.as_dict())
    config = load_config(committed_env_file(tmp_path))
    assert (config.batch_size, config.source("batch_size")) == (TrainConfig().batch_size, ".env")


def test_unmeasured_settings_measure_and_compile_nothing():
    settings = OptimizationSettings.unmeasured()
    assert settings.auto_fields == () and settings.use_torch_compile is False
    assert (settings.use_bf16, settings.use_flash_attention) == (False, False)
    assert "not measured" in settings.source("use_bf16") and settings.source("num_threads") == "default"


@pytest.mark.parametrize(
    ("text", "overrides", "message"),
    [
        (
            "USE_FLASH_ATTENTION=true\nSDPA_BACKEND=math\n",
            {},
            "USE_FLASH_ATTENTION=true (from .env) and SDPA_BACKEND=math",
        ),
        ("SDPA_BACKEND=flash\n", {"use_flash_attention": False}, "USE_FLASH_ATTENTION=false (from --flash-attention)"),
        ("USE_FLASH_ATTENTION=false\n", {"sdpa_backend": "flash"}, "SDPA_BACKEND=flash (from --sdpa-backend)"),
    ],
)
def test_flash_and_sdpa_backend_must_not_contradict_each_other(tmp_path, text, overrides, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        OptimizationSettings.load(write_env(tmp_path, text), **overrides)


def test_a_default_flash_switch_follows_the_named_backend(tmp_path):
    from sb3_snake.autotune import resolve_auto

    settings = OptimizationSettings.load(write_env(tmp_path, "SDPA_BACKEND=math\nUSE_BF16=false\n"))
    assert settings.use_flash_attention == "auto"  # the default: no contradiction
    resolved = resolve_auto(settings, 128, "cpu", {}, 6, allow_measure=False).settings
    assert resolved.use_flash_attention is False and resolved.sdpa_backend == "math"
    agree = OptimizationSettings.load(write_env(tmp_path, "USE_FLASH_ATTENTION=true\nSDPA_BACKEND=flash\n"))
    assert agree.use_flash_attention is True and agree.sdpa_backend == "flash"
    with pytest.raises(SettingsError, match="SDPA_BACKEND='fast'"):
        OptimizationSettings.load(write_env(tmp_path, "SDPA_BACKEND=fast\n"))


def test_a_settings_error_is_a_usage_error():
    """The command line turns exactly UsageErrors into one line and exit 2."""
    with pytest.raises(UsageError):
        OptimizationSettings(use_bf16="yes")


def test_every_field_is_declared_once_with_key_flag_values_and_help():
    names = [name for name in OptimizationSettings.__dataclass_fields__ if name not in ("sources", "auto_record")]
    assert list(SETTINGS) == names
    assert sorted(OptimizationSettings.env_key(name) for name in names) == sorted(ENV_KEYS[1:])
    assert sorted(env_keys()) == sorted(ENV_KEYS)  # what a .env may hold: the settings' and the batch size
    for name in names:
        declared = SETTINGS[name]
        assert flag_of(OptimizationSettings, name).startswith("--") and declared.help and declared.values.words
        default = OptimizationSettings.__dataclass_fields__[name].default
        assert declared.values.check(default) == ""  # the default is a value the setting takes
        assert declared.values.parse(str(default).lower()) == default  # and .env spells it so
    assert OptimizationSettings().auto_fields == ("use_flash_attention", "use_bf16")


def test_the_compile_help_says_what_is_compiled_on_each_device():
    help = SETTINGS["use_torch_compile"].help
    assert "on a CPU the whole gradient step" in help and "off on CUDA, where the CUDA graph runs" in help


def test_the_configuration_table_has_a_row_per_key_of_env():
    rows = configuration_table().splitlines()
    assert rows[0] == "| key | flag | values | default | meaning |" and len(rows) == 2 + 1 + len(SETTINGS)
    assert rows[2].startswith("| `OPTIMAL_BATCH_SIZE` | `--batch-size` | integer from 1 to 1048576, or auto | 128 |")
    assert (
        "| `USE_CUDA_GRAPH` | `--cuda-graph/--no-cuda-graph` | true/false (or 1/0, yes/no, on/off) | true |"
        in (rows[-1])
    )


def test_the_documented_configuration_table_is_the_declared_one():
    """The configuration page's table of .env keys is :func:`configuration_table`'s output, pasted:
    regenerate it with ``python -c "from sb3_snake.training.options import configuration_table as t; print(t())"``."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text().splitlines()
    start = next(index for index, line in enumerate(page) if line.startswith("| key |"))
    table = []
    for line in page[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    assert "\n".join(table) == configuration_table()


def test_readme_switches_table_names_every_key_with_its_flag():
    """README's shorter table (what each switch does and when it helps) has a row per declared key."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## The optimization switches") :]
    rows = [line for line in section.splitlines() if line.startswith("| `") and not line.startswith("| `.env`")]
    declared = [line.split(" | ")[:2] for line in configuration_table().splitlines()[2:]]
    assert [row.split(" | ")[:2] for row in rows] == declared


@pytest.mark.parametrize("text", ["-1", "1.5", "soon", "true"])
def test_the_compile_start_is_a_count_of_gradient_steps(text, tmp_path):
    with pytest.raises(SettingsError, match=f"--compile-after '{text}': expected an integer of 0 or more"):
        parse(OptimizationSettings, "compile_after", text)
    with pytest.raises(SettingsError, match="TORCH_COMPILE_AFTER"):
        OptimizationSettings.load(write_env(tmp_path, f"TORCH_COMPILE_AFTER={text}\n"))
    with pytest.raises(SettingsError, match="compile_after=-1: expected an integer of 0 or more"):
        OptimizationSettings(compile_after=-1)
