"""`--add-noqa`, `--ignore-noqa` and CKP902 unused-noqa, through the CLI."""

from __future__ import annotations

import json

from tests.cli_helpers import CKP102_SOURCE, run_cli, write_project

TWO = '''\
from torch.utils.checkpoint import checkpoint


def block(x):
    return x * 2


def forward(x):
    a = checkpoint(block, x)  # keep this comment
    b = checkpoint(
        block, a, use_reentrant=True,
    )
    c = checkpoint(block, b)  # noqa: E501
    return checkpoint(block, c, determinism_check="none", use_reentrant=False)
'''


def codes(result) -> list[tuple[int, str]]:
    return [(f["location"]["row"], f["code"]) for f in json.loads(result.stdout)]


def test_add_noqa_silences_every_finding_and_keeps_the_file_valid(tmp_path):
    root = write_project(tmp_path, {"m.py": TWO.replace("\n", "\r\n")})
    before = run_cli("m.py", "--format", "json", cwd=root)
    assert codes(before) == [(9, "CKP102"), (10, "CKP101"), (13, "CKP102"), (14, "CKP105")]
    added = run_cli("m.py", "--add-noqa", cwd=root)
    assert added.returncode == 0
    assert "Added 4 noqa directives" in added.stderr
    text = (root / "m.py").read_bytes().decode()
    assert "\r\n" in text and "\n" not in text.replace("\r\n", "")
    lines = text.split("\r\n")
    assert lines[8] == "    a = checkpoint(block, x)  # keep this comment  # noqa: CKP102"
    assert lines[11] == "    )  # noqa: CKP101"  # the statement's last line
    assert lines[12] == "    c = checkpoint(block, b)  # noqa: E501, CKP102"
    assert lines[13].endswith("use_reentrant=False)  # noqa: CKP105")
    after = run_cli("m.py", "--extend-select", "CKP902", cwd=root)
    assert (after.returncode, after.stdout) == (0, "")
    again = run_cli("m.py", "--add-noqa", cwd=root)
    assert "Added 0 noqa directives" in again.stderr
    assert (root / "m.py").read_bytes().decode() == text


def test_add_noqa_on_stdin_prints_the_text(tmp_path):
    root = write_project(tmp_path, {})
    result = run_cli("-", "--stdin-filename", "m.py", "--add-noqa", cwd=root,
                     input=CKP102_SOURCE)
    assert result.stdout == CKP102_SOURCE.replace("checkpoint(block, x)",
                                                  "checkpoint(block, x)  # noqa: CKP102")


def test_add_noqa_refuses_fix(tmp_path):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE})
    assert run_cli("m.py", "--add-noqa", "--fix", cwd=root).returncode == 2


def test_ignore_noqa_reports_suppressed_findings(tmp_path):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE.replace(
        "checkpoint(block, x)", "checkpoint(block, x)  # noqa: CKP102")})
    assert run_cli("m.py", cwd=root).returncode == 0
    result = run_cli("m.py", "--ignore-noqa", "--format", "json", cwd=root)
    assert result.returncode == 1
    assert codes(result) == [(9, "CKP102")]


UNUSED = '''\
from torch.utils.checkpoint import checkpoint


def block(x):
    return x * 2


def forward(x):
    a = checkpoint(block, x, use_reentrant=False)  # noqa: CKP102
    b = checkpoint(block, a)  # noqa: CKP102
    c = checkpoint(block, b)  # noqa: CKP1
    d = checkpoint(block, c, use_reentrant=False)  # noqa
    e = checkpoint(block, d, use_reentrant=False)  # noqa: E501
    f = checkpoint(block, e)  # noqa: CKP102, CKP301
    return f
'''


def test_unused_noqa_is_off_unless_selected(tmp_path):
    root = write_project(tmp_path, {"m.py": UNUSED})
    assert run_cli("m.py", cwd=root).returncode == 0


def test_unused_noqa_reports_only_our_unused_codes(tmp_path):
    root = write_project(tmp_path, {"m.py": UNUSED})
    result = run_cli("m.py", "--extend-select", "CKP902", "--format", "json", cwd=root)
    assert result.returncode == 1
    findings = json.loads(result.stdout)
    assert [(f["location"]["row"], f["code"]) for f in findings] == [(9, "CKP902"), (14, "CKP902")]
    assert "CKP102" in findings[0]["message"]
    assert "CKP301" in findings[1]["message"] and "CKP102" not in findings[1]["message"]
    assert findings[0]["location"]["column"] == UNUSED.splitlines()[8].index("# noqa") + 1
    assert findings[0]["severity"] == "info"


def test_unused_noqa_not_reported_with_ignore_noqa(tmp_path):
    root = write_project(tmp_path, {"m.py": UNUSED})
    result = run_cli("m.py", "--extend-select", "CKP902", "--ignore-noqa", "--format", "json",
                     cwd=root)
    assert {f["code"] for f in json.loads(result.stdout)} == {"CKP102"}


def test_unused_noqa_from_config(tmp_path):
    root = write_project(tmp_path, {"m.py": UNUSED},
                         config='extend-select = ["CKP902"]\n')
    result = run_cli("m.py", cwd=root)
    assert result.returncode == 1
    assert result.stdout.count("CKP902") == 2
