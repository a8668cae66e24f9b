"""The front door and the manual: README's size, every relative link, the strict site build and
the index of ``benchmark_results/``."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sb3_snake.benchmark.index import INDEX_NAME, index_markdown

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmark_results"

#: Markdown links and images (``[text](target)``, ``![alt](target "title")``) and HTML ``src``/``href``.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|(?:src|href)=\"([^\"]+)\"")


def markdown_files() -> list[Path]:
    """README, every page of the site and every Markdown file among the results."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted(RESULTS.rglob("*.md"))]


def relative_links(text: str) -> list[str]:
    """The relative link targets of a Markdown text (no scheme, not a bare ``#anchor``), anchors cut off."""
    targets = []
    for match in _LINK.finditer(re.sub(r"```.*?```", "", text, flags=re.S)):
        target = match.group(1) or match.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def test_relative_links_finds_links_and_skips_urls_and_code():
    text = '[a](docs/a.md#x) ![b](img.png "t") [c](https://x.org) [d](#top) <img src="e.gif">\n```\n[f](g.md)\n```'
    assert relative_links(text) == ["docs/a.md", "img.png", "e.gif"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file(path):
    missing = [t for t in relative_links(path.read_text()) if not (path.parent / t).exists()]
    assert not missing, f"{path.relative_to(ROOT)} links to missing files: {missing}"


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    first_image = re.search(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert first_image and first_image.group(1).endswith(".gif"), "README opens with the GIF of an agent playing"
    assert text.index(first_image.group(0)) < text.index("## ")


def test_readmes_cpu_install_is_true_on_pypi_too():
    """PyPI's Linux torch is the CUDA build whatever its version: the pin alone keeps the CPU build
    only on an index that serves it under that version, so README names PyTorch's CPU index."""
    install = (ROOT / "README.md").read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in install


def test_the_package_ships_its_type_hints():
    """PEP 561: ``py.typed`` in the package, and in the package data that a wheel carries."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    assert (ROOT / "sb3_snake" / "py.typed").is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["sb3_snake"]


def test_benchmark_results_index_is_current_and_lists_every_file():
    committed = (RESULTS / INDEX_NAME).read_text()
    assert committed == index_markdown(RESULTS), "regenerate it: python -m sb3_snake.benchmark.index"
    listed = set(relative_links(committed))
    files = {p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("*") if p.is_file() and p.name != INDEX_NAME}
    files |= {p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob(INDEX_NAME) if p.parent != RESULTS}
    assert files == listed


def test_index_names_the_machine_a_result_recorded(tmp_path):
    (tmp_path / "gradient_step_20261124T131930Z.json").write_text(
        '{"benchmark": "gradient_step", "system": {"cpu": "AMD EPYC", "cpu_cores": 2, "gpu": null}}'
    )
    (tmp_path / "zen3_20261127.json").write_text(
        '{"system": {"cpu": "AMD EPYC", "cpu_cores": 2, "cpu_id": {"family": 25, "model": 1}, "gpu": null}}'
    )
    (tmp_path / "zen3_20261127" / "variants").mkdir(parents=True)
    (tmp_path / "zen3_20261127" / "variants" / "default_1.json").write_text('{"system": {"cpu": "AMD EPYC"}}')
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "env_20261122.json").write_text('{"system": {"cpu": "x", "gpu": {"name": "NVIDIA H100"}}}')
    index = index_markdown(tmp_path)
    assert "| 2026-11-24 | [gradient_step_20261124T131930Z.json](gradient_step_20261124T131930Z.json) |" in index
    assert "AMD EPYC, 2 cores" in index and "NVIDIA H100" in index and "(gpu/env_20261122.json)" in index
    assert "| AMD EPYC (family 25, model 1), 2 cores |" in index
    # A file named without a date takes the nearest dated folder's.
    assert "| 2026-11-27 | [default_1.json](zen3_20261127/variants/default_1.json) |" in index


@pytest.mark.slow
def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    pytest.importorskip("mkdocstrings")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,  # a bound on a hang on a loaded 2-core machine, not a speed check
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "index.html").read_text().count("SnakeDQN") > 3


#: Every Python block of README and the docs runs as printed but for these sizes, lowered so that
#: it runs in seconds (each must occur in its file's blocks, so a change of the figures printed
#: fails here, not silently). A file with Python blocks and no entry runs them exactly as printed.
SMALLER_SIZES = {
    "README.md": {
        "4096": "64",
        ".learn(10_000)": ".learn(512)",
        ".learn(20_000)": ".learn(512)",
        "episodes=100": "episodes=8",
        ".learn(1_000_000)": ".learn(4096)",
    },
    "docs/environments.md": {
        "4096": "64",
        ".learn(10_000)": ".learn(512)",
        "n_steps=128": "n_steps=8",
        ".learn(20_000)": ".learn(512)",
        ".learn(100_000)": ".learn(512)",
    },
    "docs/training.md": {
        ".learn(50_000)": ".learn(1_500)",
        ".learn(2_000_000,": ".learn(4096,",
        "episodes=100": "episodes=4",
        "BatchedSnakeVecEnv(128, board_size=10, seed=1)": "BatchedSnakeVecEnv(8, board_size=6, seed=1)",
        "population_interval=100_000": "population_interval=256",
        ".learn(4_000_000)": ".learn(4 * 512)",
    },
}


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def documented_python() -> list[str]:
    """README and the site's pages that hold Python blocks, relative to the repository."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [str(page.relative_to(ROOT)) for page in pages if python_blocks(page)]


def test_every_lowered_size_names_a_page_with_python():
    assert set(SMALLER_SIZES) <= set(documented_python()), "a page in SMALLER_SIZES holds no Python block"


#: Seconds a block may take: a block that takes a minute alone took over 600 s on a fresh clone
#: while CI's 2-core machine was busy (issue 76), so this is a bound on a hang, not a speed check.
BLOCK_TIMEOUT = 1800


@pytest.mark.slow
@pytest.mark.parametrize("page", documented_python())
def test_every_python_block_of_the_docs_runs_as_printed_with_smaller_sizes(page, tmp_path_factory):
    """Each block runs on its own, in a fresh folder, as a new user would paste it."""
    blocks = python_blocks(ROOT / page)
    for printed in SMALLER_SIZES.get(page, {}):
        assert any(printed in block for block in blocks), (
            f"{page}'s Python no longer holds {printed!r}: update SMALLER_SIZES"
        )
    cache = tmp_path_factory.mktemp("cache")  # one auto measurement for the page's blocks
    for number, block in enumerate(blocks, 1):
        for printed, smaller in SMALLER_SIZES.get(page, {}).items():
            block = block.replace(printed, smaller)
        folder = tmp_path_factory.mktemp(f"block{number}")
        (folder / "block.py").write_text(block)
        environment = {**os.environ, "SB3_SNAKE_CACHE_DIR": str(cache), "WANDB_MODE": "disabled", "MPLBACKEND": "Agg"}
        result = subprocess.run(
            [sys.executable, "block.py"],
            cwd=folder,
            env=environment,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
        )
        assert result.returncode == 0, f"{page}, Python block {number}:\n{result.stderr[-3000:]}"
        if page == "README.md":
            assert (folder / "snake.zip").is_file() and list((folder / "runs").glob("*/summary.json"))
