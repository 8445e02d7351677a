"""Running a test's child command so that nothing it started outlives it.

`run` is `subprocess.run` with the command in a session of its own. When the command runs
past its timeout (or the test is interrupted), every process of its tree is killed: the
processes descended from it and the members of every session one of them leads. Launchers
such as `torchrun` start each rank in a session of its own, so killing the command's process
group alone would leave the ranks running. The tree is frozen (SIGSTOP) until no new process
appears, then killed (SIGKILL), so nothing forks away in between. Only processes this command
started are touched (Linux: read from /proc).
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def _table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every live process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), int(fields[3]))
    return table


def tree(root: int) -> set[int]:
    """The live processes of `root`'s tree: its descendants and the members of sessions that
    it or a descendant leads (a process orphaned to init stays in its session)."""
    table = _table()
    found = {root} if root in table else set()
    leaders = {root}
    grew = True
    while grew:
        grew = False
        for pid, (parent, session) in table.items():
            if pid not in found and (parent in found or session in leaders):
                found.add(pid)
                grew = True
            if pid in found and session == pid and pid not in leaders:
                leaders.add(pid)
                grew = True
    found.discard(os.getpid())
    return found


def kill_tree(root: int) -> None:
    """Freeze `root`'s whole tree, then kill it."""
    stopped: set[int] = set()
    while True:
        new = tree(root) - stopped
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run(command, *, timeout: float, input: Any = None, capture_output: bool = False,
        check: bool = False, **popen: Any) -> subprocess.CompletedProcess:
    """`subprocess.run(command, timeout=..., ...)` whose whole tree dies when it times out."""
    if capture_output:
        popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        popen["stdin"] = subprocess.PIPE
    with subprocess.Popen(command, start_new_session=True, **popen) as proc:
        try:
            stdout, stderr = proc.communicate(input, timeout=timeout)
        except BaseException:
            kill_tree(proc.pid)     # not yet waited for: its pid is still its own
            proc.communicate()
            raise
    done = subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)
    if check:
        done.check_returncode()
    return done
