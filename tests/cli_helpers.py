"""Running the installed `ckptlint` console script in a subprocess (integration tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CKP102_SOURCE = '''\
from torch.utils.checkpoint import checkpoint


def block(x):
    return x * 2


def forward(x):
    return checkpoint(block, x)
'''


def ckptlint_command() -> list[str]:
    """The console script next to this interpreter, else on PATH, else `python -m ckptlint`."""
    beside = Path(sys.executable).parent / "ckptlint"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("ckptlint")
    return [found] if found else [sys.executable, "-m", "ckptlint"]


def run_cli(*args: str, cwd: Path, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, **(env or {})}
    return subprocess.run([*ckptlint_command(), *args], cwd=cwd, input=input,
                          capture_output=True, text=True, env=environment, timeout=120)


def write_project(root: Path, files: dict[str, str | bytes], config: str | None = None) -> Path:
    """Files under `root`, plus a pyproject.toml with `[tool.ckptlint]` (so no outer config
    leaks in) holding `config`."""
    root.mkdir(parents=True, exist_ok=True)
    table = "[tool.ckptlint]\n" + (config or 'transformers-version = "4.46.0"\n')
    (root / "pyproject.toml").write_text(table, encoding="utf-8")
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root
