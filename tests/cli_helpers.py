"""Running `ckptlint`'s command line in tests: in this process (most tests) or as the installed
console script in a subprocess (what only a fresh process shows).

`run_cli` calls the click command in this process with click's `CliRunner`: stdin, stdout and
stderr captured as bytes, the exit status from `sys.exit`. It gives what the console script
would: the same `subprocess.CompletedProcess` (text decoded as UTF-8 with universal newlines,
as `text=True` does), after isolating what a fresh process would not share:
- the working folder (changed for the run, restored after it);
- the environment (`env` is applied for the run and undone after it; variables that only
  take effect when an interpreter starts, `PYTHON*`, are refused: use `run_cli_process`);
- the little state ckptlint keeps per process (`forget_process_state`).

An exception escaping the command is raised here (a subprocess would print a traceback and
exit 1), so the test shows it. Worker processes are forked from this process, as from the
console script's.

`run_cli_process` runs the console script: for exit codes end to end, the entry points,
stdout/stdin as the operating system hands them over, signals, anything that imports or
checks `sys.modules`, and environment variables read at interpreter start.
"""

from __future__ import annotations

import io
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


def run_cli_process(*args: str, cwd: Path, input: str | bytes | None = None,
                    env: dict[str, str] | None = None,
                    text: bool = True) -> subprocess.CompletedProcess:
    """The installed console script in a subprocess (`text=False`: stdout and stderr as bytes,
    `input` as bytes)."""
    environment = {**os.environ, **(env or {})}
    return subprocess.run([*ckptlint_command(), *args], cwd=cwd, input=input,
                          capture_output=True, text=text, env=environment, timeout=120)


def run_cli(*args: str, cwd: Path, input: str | bytes | None = None,
            env: dict[str, str] | None = None, text: bool = True) -> subprocess.CompletedProcess:
    """`ckptlint ARGS` in this process, in `cwd`, with `env` added to the environment; what
    `run_cli_process` gives for the same arguments."""
    from click.testing import CliRunner

    from ckptlint.cli import main

    starting = sorted(name for name in env or {} if name.startswith("PYTHON"))
    if starting:
        raise ValueError(f"{', '.join(starting)} take effect when an interpreter starts: "
                         "use run_cli_process")
    forget_process_state()
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, list(args), input=input, env=env,
                                    catch_exceptions=False, prog_name="ckptlint")
    finally:
        os.chdir(previous)
    stdout, stderr = result.stdout_bytes, result.stderr_bytes
    if text:
        return subprocess.CompletedProcess(["ckptlint", *args], result.exit_code,
                                           as_text(stdout), as_text(stderr))
    return subprocess.CompletedProcess(["ckptlint", *args], result.exit_code, stdout, stderr)


def as_text(data: bytes) -> str:
    """Bytes as `subprocess.run(text=True)` decodes them: UTF-8, universal newlines."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline=None).read()


def forget_process_state() -> None:
    """What ckptlint remembers within one process, forgotten as a fresh process would:
    the notes given once per process, and the installed transformers version."""
    from ckptlint.engine import cache
    from ckptlint.versions import installed_version

    cache._notes_given.clear()
    installed_version.cache_clear()


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
