"""tests/process_tree.py: a timed-out test command leaves no process behind (real processes)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.process_tree import run

# A launcher like torchrun: a child in a session of its own (as torchrun starts each rank),
# which starts a sleeping grandchild; every pid goes to the file named by argv[1].
LAUNCHER = """
import subprocess, sys, time
out = sys.argv[1]
grandchild = ("import subprocess, sys, time; "
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
              "open(sys.argv[1], 'a').write(f'{p.pid}\\\\n'); time.sleep(600)")
rank = subprocess.Popen([sys.executable, "-c", grandchild, out], start_new_session=True)
with open(out, "a") as handle:
    handle.write(f"{rank.pid}\\n")
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_timed_out_command_leaves_no_process_behind(tmp_path):
    pids = tmp_path / "pids"
    with pytest.raises(subprocess.TimeoutExpired):
        run([sys.executable, "-c", LAUNCHER, str(pids)], timeout=5, capture_output=True)
    started = [int(line) for line in pids.read_text().split()]
    assert len(started) == 2, "the rank and its grandchild must have started before the timeout"
    deadline = time.monotonic() + 5
    while any(map(alive, started)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in started if alive(pid)]


def test_a_command_that_ends_in_time_is_like_subprocess_run(tmp_path):
    done = run([sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"],
               timeout=30, input="hi", capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "HI\n")
    with pytest.raises(subprocess.CalledProcessError):
        run([sys.executable, "-c", "raise SystemExit(3)"], timeout=30, check=True)
