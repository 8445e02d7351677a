"""The code passes ruff and mypy with the settings in pyproject.toml, as CI runs them.

ruff: `ckptlint`, `tests`, `scripts` and `bench` (tests/fixtures, deliberately odd, is
excluded in the settings). mypy: the packages `[tool.mypy]` names (everything but the torch
side of dynamic mode). Neither writes a cache into the checkout.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.cli_helpers import REPO


def run_tool(module: str, *args: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (it comes with the test extra: "
                    f"pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_ruff_finds_nothing() -> None:
    result = run_tool("ruff", "check", "--no-cache", "ckptlint", "tests", "scripts", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing() -> None:
    result = run_tool("mypy", "--cache-dir", "/dev/null")
    assert result.returncode == 0, result.stdout + result.stderr
