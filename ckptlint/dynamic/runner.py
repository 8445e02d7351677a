"""Run the user's command as a watched child process (parent side; no torch here)."""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ckptlint.dynamic.bootstrap import write_bootstrap
from ckptlint.dynamic.observations import Observations, RunInfo

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class WatchedRun:
    info: RunInfo
    observations: Observations
    seconds: float


def _pump(stream, sink, tail: collections.deque | None):
    try:
        for chunk in iter(lambda: stream.readline(), b""):
            try:
                sink.write(chunk.decode("utf-8", "replace"))
                sink.flush()
            except (ValueError, OSError):
                pass
            if tail is not None:
                tail.append(chunk)
    finally:
        stream.close()


class EventCounter:
    """Calls and sites in a growing events file, for progress lines: each look reads on from
    where the last one stopped (whole lines only), so a long run costs no re-reading."""

    CHUNK = 1 << 20

    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.calls = 0
        self.sites: set = set()

    def update(self) -> tuple[int, int]:
        """(calls, sites) so far."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                while True:
                    chunk = handle.read(self.CHUNK)
                    end = chunk.rfind(b"\n") + 1
                    if not end:
                        if len(chunk) < self.CHUNK:
                            break           # the last line is still being written
                        end = len(chunk)    # one huge line: not an event we count
                    for line in chunk[:end].splitlines():
                        self._count(line)
                    self.offset += end
                    handle.seek(self.offset)
        except OSError:
            pass
        return self.calls, len(self.sites)

    def _count(self, line: bytes) -> None:
        if b'"ev": "call"' not in line and b'"ev": "summary"' not in line:
            return
        try:
            event = json.loads(line)
        except ValueError:
            return
        if event.get("ev") == "summary":
            self.calls += int(event.get("calls") or 0)
        elif not event.get("sample"):
            self.calls += 1
        site = event.get("site")
        self.sites.add(tuple(site[:2]) if site else None)


# Signals that stop a watched run: passed on to the command's process group, which has a
# session of its own (so that --timeout can stop all of it, and a terminal's Ctrl-C or a CI
# cancel reaches only ckptlint, which must pass it on).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
GRACE_SECONDS = 5.0


class StopSignals:
    """While active, SIGTERM and SIGINT to this process are noted instead of ending it, so
    that the run can stop the command and remove its temp folder first. Only the main thread
    can set handlers; elsewhere this does nothing (the caller's handlers stay)."""

    def __init__(self):
        self.received: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self.previous[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, signum: int, _frame) -> None:
        if self.received is None:
            self.received = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def end_by_signal(signum: int) -> None:
    """End this process as `signum` would have (a shell shows 128 + signum), after the caller
    has printed what it could."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    time.sleep(1.0)              # the signal is on its way; exit the same way if it is not
    os._exit(128 + signum)


def run_watched(command: Sequence[str], *, plan: dict[str, Any] | None = None,
                replay_now: bool = False, timeout: float | None = None,
                progress: Callable[[str], None] | None = None, progress_every: float = 10.0,
                output=None, env: dict[str, str] | None = None,
                observers: Sequence[str] = (), record: bool = True) -> WatchedRun:
    """Run `command` with the watcher installed; its stdout and stderr go to `output`
    (default: our stderr, so that our stdout holds only the verdicts).

    `observers` ("module:factory") are registered in the child besides (or, with
    record=False, instead of) the dynamic-mode recorder; see observer.py.

    SIGTERM or SIGINT to this process while the command runs is passed on to the command's
    process group; after GRACE_SECONDS what is left of the group is killed, the temp folder is
    removed and the run returns with `info.signal` set: the caller prints what it has, then
    calls `end_by_signal(info.signal)`."""
    output = output if output is not None else sys.stderr
    with StopSignals() as stops:
        workdir = tempfile.mkdtemp(prefix="ckptlint-dynamic-")
        try:
            return _run_in(workdir, list(command), stops, plan=plan, replay_now=replay_now,
                           timeout=timeout, progress=progress, progress_every=progress_every,
                           output=output, env=env, observers=observers, record=record)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def _run_in(workdir: str, command: list[str], stops: StopSignals, *, plan, replay_now, timeout,
            progress, progress_every, output, env, observers, record) -> WatchedRun:
    out_path = os.path.join(workdir, "observations.jsonl")
    plan_path = os.path.join(workdir, "plan.json")
    boot = os.path.join(workdir, "boot")
    os.mkdir(boot)
    write_bootstrap(boot)
    with open(plan_path, "w", encoding="utf-8") as handle:
        json.dump(plan or {}, handle)
    child_env = dict(os.environ if env is None else env)
    existing = child_env.get("PYTHONPATH")
    child_env["PYTHONPATH"] = boot + (os.pathsep + existing if existing else "")
    child_env["CKPTLINT_DYNAMIC_OUT"] = out_path
    child_env["CKPTLINT_DYNAMIC_PLAN"] = plan_path
    child_env["CKPTLINT_DYNAMIC_ROOT"] = PACKAGE_ROOT
    child_env["CKPTLINT_DYNAMIC_REPLAY_NOW"] = "1" if replay_now else "0"
    child_env["CKPTLINT_DYNAMIC_RECORD"] = "1" if record else "0"
    if observers:
        child_env["CKPTLINT_DYNAMIC_OBSERVERS"] = ",".join(observers)
    else:
        child_env.pop("CKPTLINT_DYNAMIC_OBSERVERS", None)
    info = RunInfo()
    tail: collections.deque = collections.deque(maxlen=200)
    start = time.monotonic()
    if stops.received is not None:
        info.signal = stops.received
        return WatchedRun(info, Observations(), 0.0)
    try:
        proc = subprocess.Popen(command, env=child_env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as error:
        info.start_error = f"{command[0]}: {error.strerror or error}"
        return WatchedRun(info, Observations.load(out_path), 0.0)
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, output, None), daemon=True),
             threading.Thread(target=_pump, args=(proc.stderr, output, tail), daemon=True)]
    for pump in pumps:
        pump.start()
    counter = EventCounter(out_path)
    next_progress = start + progress_every
    while True:
        try:
            proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        if stops.received is not None:
            info.signal = stops.received
            _stop(proc, stops.received)
            break
        now = time.monotonic()
        if timeout is not None and now - start > timeout:
            info.timed_out = True
            _stop(proc, signal.SIGTERM)
            break
        if progress is not None and now >= next_progress:
            calls, sites = counter.update()
            progress(f"ckptlint: {now - start:.0f} s, {sites} checkpoint sites seen, "
                     f"{calls} calls watched")
            next_progress = now + progress_every
    for pump in pumps:
        pump.join(timeout=5)
    info.returncode = proc.returncode
    text = b"".join(tail).decode("utf-8", "replace").rstrip().splitlines()
    info.stderr_tail = "\n".join(text[-15:])
    info.stderr_lines = text[-200:]
    return WatchedRun(info, Observations.load(out_path), time.monotonic() - start)


def _stop(proc: subprocess.Popen, sig: int) -> None:
    """Send `sig` to the command's process group, give its leader GRACE_SECONDS to end, then
    SIGKILL whatever is left of the group (stragglers had the signal as long as the leader)."""
    for sig_now, wait in ((sig, GRACE_SECONDS), (signal.SIGKILL, GRACE_SECONDS)):
        try:
            os.killpg(proc.pid, sig_now)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if sig_now != signal.SIGKILL:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return
