"""CI runs the README's test command, exactly (`.ci/run`), and what that command needs is in
the `[test]` extra it installs: the two cannot drift apart unnoticed."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _readme_command() -> str:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("Install and run the tests:")[1].split("```sh\n")[1].split("```")[0]
    [line] = block.strip().splitlines()
    return line


def test_ci_runs_the_readme_test_command():
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1] == _readme_command()


def test_the_test_extra_holds_the_plugins_the_command_uses():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    test_deps = {re.match(r"[A-Za-z0-9_.\-]+", d).group(0) for d in pyproject["project"]["optional-dependencies"]["test"]}
    args = shlex.split(_readme_command().split("&&")[1])
    assert args[:3] == ["python", "-m", "pytest"]
    assert "pytest" in test_deps
    # `-n` and the `--dist` the pyproject passes to every run are pytest-xdist's
    addopts = shlex.split(pyproject["tool"]["pytest"]["ini_options"]["addopts"])
    if {"-n", "--dist"} & {a.split("=")[0] for a in args + addopts}:
        assert "pytest-xdist" in test_deps


def test_the_slowest_first_list_names_test_modules():
    """conftest's SLOWEST_FIRST orders modules by file name: a renamed module would drop out."""
    from conftest import SLOWEST_FIRST

    assert len(set(SLOWEST_FIRST)) == len(SLOWEST_FIRST)
    assert [n for n in SLOWEST_FIRST if not (ROOT / "tests" / n).is_file()] == []
