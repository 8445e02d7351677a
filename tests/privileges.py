"""Running the CLI as an unprivileged user, for permission tests (the suite runs as root).

`run_cli_as_nobody` forks a child that drops to uid/gid 65534 (setgroups, setgid, setuid) and
runs ckptlint's command line in that process, so a missing permission check makes the test
fail instead of passing because root may do anything. The child cannot execute a fresh
interpreter: the interpreter's own folders may be private to root (a pyenv under /root), so
it runs the same command once as root first, on a copy of the project, which imports every
module the run needs, and only then drops its privileges and runs it for real.

The project must lie where that user can reach it: the `shared_tmp` fixture gives a folder
under the system temporary folder that everyone may enter (pytest's `tmp_path` is private).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import pytest

NOBODY = 65534


@pytest.fixture(name="shared_tmp")
def shared_tmp_fixture():
    if os.geteuid() != 0:
        pytest.skip("dropping to another user needs root")
    folder = Path(tempfile.mkdtemp(prefix="ckptlint-test-"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        restore_access(folder)
        shutil.rmtree(folder)


def restore_access(folder: Path) -> None:
    """Folders a test made unreadable, readable again (rmtree must list them)."""
    for inside, folders, _ in os.walk(folder):
        for name in folders:
            os.chmod(os.path.join(inside, name), 0o755)


def give_to_nobody(*paths: Path) -> None:
    for path in paths:
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


def run_cli_as_nobody(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`ckptlint ARGS` in `cwd` as uid 65534: exit status, stdout and stderr."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            status = 99
            try:
                status = _child(list(args), cwd, out.fileno(), err.fileno())
            except BaseException:  # noqa: BLE001 - reported through stderr
                traceback.print_exc()
            finally:
                os._exit(status)
        _, wait_status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            ["ckptlint", *args], os.waitstatus_to_exitcode(wait_status),
            out.read().decode("utf-8", "surrogateescape"),
            err.read().decode("utf-8", "surrogateescape"))


def _child(args: list[str], cwd: Path, out_fd: int, err_fd: int) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="ckptlint-warmup-"))
    try:
        shutil.copytree(cwd, scratch / cwd.name, symlinks=True)
        with open(os.devnull, "wb") as null:
            _in_process(args, scratch / cwd.name, null.fileno(), null.fileno())
    finally:
        restore_access(scratch)
        shutil.rmtree(scratch)
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    os.environ["HOME"] = str(cwd)
    return _in_process(args, cwd, out_fd, err_fd)


def _in_process(args: list[str], cwd: Path, out_fd: int, err_fd: int) -> int:
    from ckptlint.cli import main

    os.chdir(cwd)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                  errors="surrogateescape", write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", write_through=True)
    sys.stdin = io.TextIOWrapper(io.BytesIO())
    try:
        main(args, prog_name="ckptlint")
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return 0
