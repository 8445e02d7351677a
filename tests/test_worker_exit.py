"""Worker processes of a static run exit on their own when the run's main process dies
(SIGKILL: nothing of it runs; SIGTERM), whether they were busy or waiting for work.

Real processes: a run over a tree that keeps two workers busy for many seconds, its workers
found through /proc before the kill, then watched until they are gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ckptlint.engine import pool
from tests.cli_helpers import ckptlint_command, write_project

if not Path("/proc/self/stat").exists():
    pytest.skip("finds processes through /proc", allow_module_level=True)

FUNCTION = '''

def step_{n}(x, scale={n}):
    y = x * scale + {n}
    if y > {n}:
        y = y - 1
    return [y, y + 1, {{"n": {n}}}]
'''
SITE = ("from torch.utils.checkpoint import checkpoint\n\n\ndef forward(x):\n"
        "    return checkpoint(step_0, x, use_reentrant=False)\n")


def busy_tree(root: Path, files: int = 40, functions: int = 400) -> Path:
    """Files that each hold a checkpoint call and take libcst a while to analyse."""
    body = SITE + "".join(FUNCTION.format(n=n) for n in range(functions))
    return write_project(root, {f"m{index}.py": body for index in range(files)})


def state(pid: int) -> str | None:
    """The process's state letter, None once it is gone (a zombie counts as gone: it runs
    nothing, and whoever adopted it may be slow to reap it)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    letter = text.rsplit(")", 1)[1].split()[0]
    return None if letter in ("Z", "X") else letter


def children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent:
                found.append(int(entry))
    return found


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_workers_exit_when_the_run_is_killed(tmp_path, how):
    root = busy_tree(tmp_path)
    run = subprocess.Popen([*ckptlint_command(), ".", "--no-cache", "--jobs", "2"], cwd=root,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: len(children(run.pid)) >= 2, 60), "no workers started"
        time.sleep(1.0)  # busy now, one file or another
        workers = children(run.pid)
        assert run.poll() is None, "the run ended before it could be killed: make it longer"
        os.kill(run.pid, how)
        run.wait(timeout=30)
        assert wait_for(lambda: not [w for w in workers if state(w)], 10), [
            (w, state(w)) for w in workers]
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_a_waiting_worker_exits_too():
    """The watch itself, in a forked process whose parent is killed while it blocks."""
    parent_read, parent_write = os.pipe()
    middle = os.fork()
    if middle == 0:  # the stand-in for ckptlint's main process
        watch_read, watch_write = os.pipe()
        worker = os.fork()
        if worker == 0:
            pool.watch_parent(watch_read, watch_write)
            time.sleep(60)  # waiting for work that never comes
            os._exit(0)
        os.write(parent_write, str(worker).encode())
        time.sleep(60)
        os._exit(0)
    os.close(parent_write)
    worker = int(os.read(parent_read, 32))
    os.close(parent_read)
    assert state(worker) is not None
    os.kill(middle, signal.SIGKILL)
    os.waitpid(middle, 0)
    assert wait_for(lambda: state(worker) is None, 5)

