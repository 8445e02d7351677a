"""Bad input to `ckptlint dynamic` and `ckptlint profile`: one line naming the file and what
was expected, exit 2 (never a traceback, never the 1 that means "confirmed"), and the command
is never started."""

from __future__ import annotations

import subprocess

import pytest

from dynhelp import PY, env_with_root

pytest.importorskip("torch")

DATA = '{"state": "SCALE", "owner": "a", "attribute": "SCALE", "changes": []}'
FINDING = ('{"code": "CKP201", "message": "m", "filename": "a.py", '
           f'"data": {DATA}, '
           '"location": {"row": 1, "column": 1}, "end_location": {"row": 1, "column": 2}')


def ckptlint(tmp_path, *args: str) -> subprocess.CompletedProcess:
    marker = tmp_path / "command-ran"
    command = [PY, "-c", f"open({str(marker)!r}, 'w')"]
    proc = subprocess.run([PY, "-m", "ckptlint", *args, "--", *command], cwd=tmp_path,
                          env=env_with_root(), capture_output=True, text=True, timeout=120)
    assert not marker.exists(), "the command ran despite the bad input"
    return proc


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    return lines[0]


@pytest.mark.parametrize("content, problem", [
    ('{"findings": []}', "got an object"),
    ("[1]", "finding 1 is a number, not an object"),
    ('[{"code": "CKP201"}]', 'finding 1 has no "message"'),
    (f'[{FINDING}}}, {FINDING[:-1]}, "column": "2"}}}}]',
     "finding 2.end_location.column is a string, not an integer"),
    (f'[{FINDING}, "site": {{"filename": "a.py", "row": true, "column": 1}}}}]',
     "finding 1.site.row is true/false, not an integer"),
    (f'[{FINDING}, "chain": "Block.forward"}}]', "finding 1.chain is a string, not an array"),
    (f'[{FINDING.replace(chr(34) + "state" + chr(34), chr(34) + "name" + chr(34))}}}]',
     "finding 1: data.state: missing"),
    ("[", "not JSON"),
    (b"\xff\xfe[]", "not UTF-8 text"),
], ids=["object", "number", "missing-key", "wrong-type", "bool-row", "chain", "data-field",
        "not-json", "not-utf8"])
def test_findings_file_of_the_wrong_shape(tmp_path, content, problem):
    path = tmp_path / "findings.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    line = one_line(ckptlint(tmp_path, "dynamic", "--findings", str(path)))
    assert line.startswith(f"ckptlint: error: {path}: "), line
    assert problem in line, line
    if "finding" in problem or "object" in problem:
        assert "expected a JSON array of findings as `ckptlint --format json` writes it" in line


@pytest.mark.parametrize("mode", ["dynamic", "profile"])
def test_invalid_configuration_is_exit_2_with_one_line(tmp_path, mode):
    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.ckptlint]\nno-such-key = 1\n')
    (tmp_path / "train.py").write_text("import torch\n")
    line = one_line(ckptlint(tmp_path, mode, str(tmp_path)))
    assert str(config) in line and "no-such-key" in line, line


def test_a_failure_inside_the_static_pass_is_exit_2_with_one_line(tmp_path):
    """An exclude glob that the static pass cannot use (a ConfigError once config loading
    checks globs; an internal error before): either way exit 2 and one line, never the 1
    that means "confirmed"."""
    (tmp_path / "pyproject.toml").write_text('[tool.ckptlint]\nexclude = ["[z-a]"]\n')
    (tmp_path / "train.py").write_text("import torch\n")
    line = one_line(ckptlint(tmp_path, "dynamic", str(tmp_path)))
    assert line.startswith("ckptlint: "), line
