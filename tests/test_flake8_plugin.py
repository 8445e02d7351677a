"""The flake8 plugin, run through the real `flake8` in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import CKP102_SOURCE, write_project

pytest.importorskip("flake8")

SOURCE = CKP102_SOURCE + '''

def quiet(x):
    return checkpoint(block, x)  # noqa: CKP102


def reentrant(x):
    return checkpoint(block, x, use_reentrant=True)
'''


def flake8(*args: str, cwd: Path, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flake8", *args], cwd=cwd, input=input,
                          capture_output=True, text=True, timeout=120)


def test_plugin_is_registered(tmp_path):
    result = flake8("--version", cwd=tmp_path)
    assert "ckptlint" in result.stdout


def test_flake8_reports_ckptlint_findings_and_applies_noqa(tmp_path):
    root = write_project(tmp_path, {"m.py": SOURCE})
    result = flake8("--select", "CKP", "m.py", cwd=root)
    assert result.returncode == 1, result.stderr
    reported = [line.split(" ", 2)[:2] for line in result.stdout.splitlines()]
    # Line 13's CKP102 carries `# noqa: CKP102`: flake8 drops it.
    assert reported == [["m.py:9:12:", "CKP102"], ["m.py:17:12:", "CKP101"]]


def test_flake8_disable_noqa_shows_suppressed(tmp_path):
    root = write_project(tmp_path, {"m.py": SOURCE})
    result = flake8("--select", "CKP", "--disable-noqa", "m.py", cwd=root)
    assert "m.py:13:12: CKP102 " in result.stdout


def test_flake8_selection_and_ignore(tmp_path):
    root = write_project(tmp_path, {"m.py": SOURCE})
    only_101 = flake8("--select", "CKP101", "m.py", cwd=root)
    assert [line.split(": ")[1].split()[0] for line in only_101.stdout.splitlines()] == ["CKP101"]
    ignored = flake8("--select", "CKP", "--extend-ignore", "CKP1", "m.py", cwd=root)
    assert (ignored.returncode, ignored.stdout) == (0, "")


def test_flake8_default_selection_includes_ckp(tmp_path):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE})
    result = flake8("m.py", cwd=root)
    assert "m.py:9:12: CKP102 " in result.stdout


def test_flake8_uses_the_ckptlint_config(tmp_path):
    root = write_project(tmp_path, {"m.py": SOURCE}, config='ignore = ["CKP101"]\n')
    result = flake8("--select", "CKP", "m.py", cwd=root)
    assert "CKP101" not in result.stdout and "CKP102" in result.stdout


def test_flake8_stdin_display_name(tmp_path):
    root = write_project(tmp_path, {})
    result = flake8("--select", "CKP", "--stdin-display-name", "pkg/m.py", "-", cwd=root,
                    input=CKP102_SOURCE)
    assert result.stdout.startswith("pkg/m.py:9:12: CKP102 ")


def test_flake8_parse_error_is_reported_by_flake8_not_a_crash(tmp_path):
    root = write_project(tmp_path,
                         {"m.py": "from torch.utils.checkpoint import checkpoint\ndef f(:\n"})
    result = flake8("--select", "CKP,E999", "m.py", cwd=root)
    assert "Traceback" not in result.stderr
    assert "E999" in result.stdout or "CKP999" in result.stdout
