"""Every output format, through the installed CLI: columns 1-based, severities, markers."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli_helpers import CKP102_SOURCE, run_cli, write_project

MIXED = '''\
import random

from torch.utils.checkpoint import checkpoint


def block(x):
    return x * 2


def forward(x):
    a = checkpoint(block, x)
    b = checkpoint(block, x, use_reentrant=False, determinism_check="none")
    return a, b
'''


@pytest.fixture
def project(tmp_path):
    return write_project(tmp_path, {"pkg/model.py": MIXED, "clean.py": "x = 1\n"})


def lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line]


def test_text_is_flake8_style(project):
    result = run_cli("pkg/model.py", cwd=project)
    assert result.returncode == 1
    assert lines(result.stdout)[0].startswith("pkg/model.py:11:9: CKP102 ")
    assert re.search(r"^pkg/model\.py:12:\d+: CKP105 ", result.stdout, re.M)


def test_concise_marks_fixable_only_when_the_fix_applies(project):
    plain = run_cli("pkg/model.py", "--format", "concise", cwd=project)
    assert plain.returncode == 1
    assert "CKP102 [*]" not in plain.stdout  # CKP102's fix is unsafe: hidden by default
    assert "--unsafe-fixes" in plain.stderr
    unsafe = run_cli("pkg/model.py", "--format", "concise", "--unsafe-fixes", cwd=project)
    assert "pkg/model.py:11:9: CKP102 [*] " in unsafe.stdout
    assert re.search(r"CKP105 (?!\[\*\])", unsafe.stdout)  # no fix, no marker


def test_json_lines_one_object_per_line(project):
    result = run_cli("pkg/model.py", "--format", "json-lines", cwd=project)
    objects = [json.loads(line) for line in lines(result.stdout)]
    full = json.loads(run_cli("pkg/model.py", "--format", "json", cwd=project).stdout)
    assert objects == full
    assert objects[0]["location"] == {"row": 11, "column": 9}
    assert objects[0]["fix"]["applicability"] == "unsafe"


def test_github_annotations(project):
    result = run_cli("pkg/model.py", "--format", "github", cwd=project)
    first, second = lines(result.stdout)
    assert first.startswith(
        "::warning title=ckptlint (CKP102),file=pkg/model.py,line=11,col=9,endLine=11,"
        "endColumn=")
    assert "::CKP102 `checkpoint` called without `use_reentrant`" in first
    assert second.startswith("::notice title=ckptlint (CKP105),")  # info -> notice


def test_github_error_level_and_escaping(tmp_path):
    root = write_project(
        tmp_path, {"bad,name.py": "from torch.utils.checkpoint import checkpoint\ndef f(:\n"})
    result = run_cli("bad,name.py", "--format", "github", cwd=root)
    assert result.stdout.startswith(
        "::error title=ckptlint (CKP999),file=bad%2Cname.py,line=1,col=1,")


def test_pylint(project):
    result = run_cli("pkg/model.py", "--format", "pylint", cwd=project)
    assert lines(result.stdout)[0].startswith(
        "pkg/model.py:11: [CKP102(implicit-use-reentrant)] ")


def test_grouped(project):
    result = run_cli("pkg/model.py", "--format", "grouped", "--unsafe-fixes", cwd=project)
    out = lines(result.stdout)
    assert out[0] == "pkg/model.py:"
    assert out[1].startswith("  11:9 CKP102 [*] ")
    assert out[2].startswith("  12:")


def test_full_shows_source_caret_and_fix_title(project):
    result = run_cli("pkg/model.py", "--format", "full", cwd=project)
    assert "\x1b[" not in result.stdout  # not a terminal: no colour
    assert "11 |     a = checkpoint(block, x)" in result.stdout
    assert "   |         ^^^^^^^^^^^^^^^^^^^^ CKP102" in result.stdout
    assert "= help: Pass `use_reentrant=False`" in result.stdout


def test_full_colour_only_on_a_terminal_and_never_with_no_color(project):
    pty = pytest.importorskip("pty")
    import os
    import subprocess

    from tests.cli_helpers import ckptlint_command

    def run_on_tty(env):
        controller, terminal = pty.openpty()
        process = subprocess.Popen([*ckptlint_command(), "pkg/model.py", "--format", "full"],
                                   cwd=project, stdout=terminal, stderr=subprocess.DEVNULL,
                                   env=env)
        os.close(terminal)
        chunks = []
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        process.wait(timeout=60)
        os.close(controller)
        return b"".join(chunks).decode()

    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    assert "\x1b[" in run_on_tty(env)
    assert "\x1b[" not in run_on_tty({**env, "NO_COLOR": "1"})


def test_statistics(project):
    result = run_cli("pkg/model.py", "--statistics", "--unsafe-fixes", cwd=project)
    assert result.returncode == 1
    assert lines(result.stdout) == ["1\tCKP102\t[*] implicit-use-reentrant",
                                    "1\tCKP105\tdeterminism-check-disabled"]
    as_json = run_cli("pkg/model.py", "--statistics", "--format", "json", cwd=project)
    assert json.loads(as_json.stdout) == [
        {"code": "CKP102", "name": "implicit-use-reentrant", "count": 1, "fixable": 0},
        {"code": "CKP105", "name": "determinism-check-disabled", "count": 1, "fixable": 0}]


def test_output_file(project):
    result = run_cli("pkg/model.py", "--format", "json", "--output-file", "out/report.json",
                     cwd=project)
    assert result.returncode == 1
    assert result.stdout == ""
    report = json.loads((project / "out" / "report.json").read_text(encoding="utf-8"))
    assert [f["code"] for f in report] == ["CKP102", "CKP105"]


@pytest.mark.parametrize("fmt", ["text", "concise", "full", "grouped", "json-lines", "github",
                                 "pylint"])
def test_no_findings_prints_nothing_and_exits_0(project, fmt):
    result = run_cli("clean.py", "--format", fmt, cwd=project)
    assert result.returncode == 0
    assert result.stdout == ""


def test_exit_zero(tmp_path):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE})
    assert run_cli("m.py", "--exit-zero", cwd=root).returncode == 0
