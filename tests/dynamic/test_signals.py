"""SIGTERM (a CI cancel) and SIGINT (Ctrl-C) to `ckptlint dynamic` and `ckptlint profile`
while the command runs: the command's whole process group stops (a helper that ignores both
signals too), the temp folder goes, and ckptlint ends by the same signal. Real processes,
real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

import ckptlint
from dynhelp import PY, SCRIPTS, env_with_root

TARGET = str(SCRIPTS / "signal_target.py")
PACKAGE_DIR = os.path.dirname(ckptlint.__file__)


def running(pid: int) -> bool:
    """Alive and not a zombie (an ended process whose parent has not reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:                       # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def start(tmp_path, mode: str, *target_args: str) -> tuple[subprocess.Popen, dict, str]:
    temp = tmp_path / "tmp"
    temp.mkdir()
    pids = tmp_path / "pids.json"
    findings = tmp_path / "findings.json"
    findings.write_text("[]")
    ours = ["--findings", str(findings)] if mode == "dynamic" else [str(tmp_path)]
    proc = subprocess.Popen(
        [PY, "-m", "ckptlint", mode, "--format", "json", *ours, "--", PY, TARGET, *target_args],
        cwd=tmp_path, env=env_with_root({"TMPDIR": str(temp), "CKPT_TEST_OUT": str(pids)}),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not pids.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    return proc, json.loads(pids.read_text()), str(temp)


def stop(proc: subprocess.Popen, sig: int, started: dict) -> tuple[str, str, float]:
    began = time.monotonic()
    try:
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        for pid in (proc.pid, *started.values()):      # leave nothing behind if it failed
            if running(pid):
                os.kill(pid, signal.SIGKILL)
    return out, err, time.monotonic() - began


@pytest.mark.parametrize("mode", ["dynamic", "profile"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_command_group_and_removes_the_temp_folder(tmp_path, mode, sig):
    proc, started, temp = start(tmp_path, mode)
    assert running(started["pid"]) and running(started["helper"])
    assert os.listdir(temp), "the run's temp folder should exist while it runs"
    out, err, seconds = stop(proc, sig, started)
    assert proc.returncode == -sig, err
    assert not running(started["pid"]), "the command is still running"
    assert not running(started["helper"]), "its helper (ignoring the signal) is still running"
    assert os.listdir(temp) == [], "the temp folder was left behind"
    assert f"ckptlint received {signal.Signals(sig).name}" in err
    assert json.loads(out) == []               # what was seen is still printed
    assert PACKAGE_DIR not in err, "a traceback from ckptlint itself"


@pytest.mark.slow
def test_a_command_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path):
    from ckptlint.dynamic.runner import GRACE_SECONDS

    proc, started, temp = start(tmp_path, "dynamic", "stubborn")
    out, err, seconds = stop(proc, signal.SIGTERM, started)
    assert proc.returncode == -signal.SIGTERM, err
    assert not running(started["pid"]) and not running(started["helper"])
    assert os.listdir(temp) == []
    assert GRACE_SECONDS <= seconds < GRACE_SECONDS + 30
