"""Bad input reported cleanly: one line naming the file (and key), never a traceback.

A path that cannot be read (missing, a folder or file the user may not read) is a CKP999
finding for that path, exit 1, and everything else is still linted; a bad configuration is
exit 2, found when the configuration is loaded (so every command that loads it stops).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckptlint.config import ConfigError, load_config
from ckptlint.output import FORMATS
from tests.cli_helpers import CKP102_SOURCE, run_cli, run_cli_process, write_project
from tests.privileges import NOBODY, run_cli_as_nobody, shared_tmp_fixture  # noqa: F401

pytest.importorskip("flake8")


def codes_by_file(result) -> list[tuple[str, str]]:
    assert "Traceback" not in result.stderr, result.stderr
    return [(item["filename"], item["code"]) for item in json.loads(result.stdout)]


# -- globs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("table, key", [
    ('exclude = ["[z-a]"]\n', "exclude"),
    ('extend-exclude = ["ok/", "gen/[z-a]*.py"]\n', "extend-exclude"),
    ('per-file-ignores = {"tests/[]" = ["CKP1"]}\n', "per-file-ignores"),
])
def test_a_bad_glob_exits_2_naming_the_file_and_key(tmp_path, table, key):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE}, table)
    result = run_cli(".", cwd=root)
    assert result.returncode == 2
    assert f"{root / 'pyproject.toml'}: key `{key}`: invalid glob" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "internal error" not in result.stderr
    with pytest.raises(ConfigError, match=f"key `{key}`"):  # at load time, for every command
        load_config([str(root)])


def test_a_bad_glob_on_the_command_line_exits_2(tmp_path):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE})
    result = run_cli(".", "--extend-exclude", "a[z-a]", cwd=root)
    assert result.returncode == 2
    assert "--extend-exclude: invalid glob 'a[z-a]'" in result.stderr


# -- pyproject.toml that is not UTF-8 ----------------------------------------------------------
def test_a_non_utf8_pyproject_with_a_ckptlint_table_exits_2(tmp_path):
    (tmp_path / "pyproject.toml").write_bytes(
        b"# caf\xe9\n[tool.ckptlint]\nselect = [\"CKP9\"]\n")
    (tmp_path / "m.py").write_text(CKP102_SOURCE)
    result = run_cli(".", cwd=tmp_path)
    assert result.returncode == 2
    assert f"{tmp_path / 'pyproject.toml'}: cannot read" in result.stderr
    assert "not UTF-8" in result.stderr


def test_a_non_utf8_pyproject_without_a_ckptlint_table_is_passed_over(tmp_path):
    write_project(tmp_path, {}, 'ignore = ["CKP102"]\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pyproject.toml").write_bytes(b"# caf\xe9\n[project]\nname = \"x\"\n")
    (tmp_path / "sub" / "m.py").write_text(CKP102_SOURCE)
    result = run_cli("sub", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "")  # the outer table's ignore applies


# -- file names that are not UTF-8 ---------------------------------------------------------------
NAME = b"caf\xe9.py"


def run_bytes(*args: str, cwd: Path, process: bool = False) -> subprocess.CompletedProcess:
    """Output as bytes, under a strict stdout encoding (as in a UTF-8 locale other than C; in
    this process, click's test runner's stdout is strict UTF-8 too)."""
    if process:
        return run_cli_process(*args, cwd=cwd, text=False,
                               env={"PYTHONIOENCODING": "utf-8:strict"})
    return run_cli(*args, cwd=cwd, text=False)


@pytest.mark.parametrize("output_format", sorted(FORMATS))
@pytest.mark.parametrize("to_file", [False, True], ids=["stdout", "output-file"])
def test_a_non_utf8_file_name_in_every_format(tmp_path, output_format, to_file):
    root = write_project(tmp_path, {"ok.py": CKP102_SOURCE})
    with open(os.path.join(os.fsencode(root), NAME), "w", encoding="utf-8") as stream:
        stream.write(CKP102_SOURCE)
    options = ["-o", "report.out"] if to_file else []
    result = run_bytes(".", "--format", output_format, "--no-cache", *options, cwd=root,
                       process=(output_format, to_file) == ("text", False))
    assert result.returncode == 1, result.stderr
    assert b"Traceback" not in result.stderr and b"error" not in result.stderr
    report = (root / "report.out").read_bytes() if to_file else result.stdout
    if output_format in ("json", "json-lines", "sarif"):
        text = report.decode("utf-8")  # valid UTF-8, as these formats must be
        if output_format == "sarif":
            results = json.loads(text)["runs"][0]["results"]
            uris = sorted(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                          for r in results)
            assert uris == ["caf%E9.py", "ok.py"]
        else:
            items = (json.loads(text) if output_format == "json"
                     else [json.loads(line) for line in text.splitlines()])
            # The escaped name gives back the file's own bytes.
            assert sorted(os.fsencode(item["filename"]) for item in items) == [NAME, b"ok.py"]
    else:
        assert NAME in report and b"ok.py" in report  # the name as the file system has it


# -- paths that cannot be read -------------------------------------------------------------------
def test_a_missing_path_is_a_ckp999_and_the_rest_is_reported(tmp_path):
    root = write_project(tmp_path, {"good.py": CKP102_SOURCE})
    result = run_cli("good.py", "missing.py", "--format", "json", cwd=root)
    assert result.returncode == 1
    assert codes_by_file(result) == [("good.py", "CKP102"), ("missing.py", "CKP999")]
    assert json.loads(result.stdout)[1]["message"] == "cannot read: No such file or directory"
    text = run_cli("good.py", "missing.py", cwd=root)
    assert text.returncode == 1
    assert text.stdout.splitlines()[1] == (
        "missing.py:1:1: CKP999 cannot read: No such file or directory")


USES_LOCKED = """\
from torch.utils.checkpoint import checkpoint

from locked.hidden import block


def forward(x):
    return checkpoint(block, x, use_reentrant=False)
"""


def test_a_folder_the_user_cannot_read_is_a_ckp999(shared_tmp):
    """As uid 65534: a chmod 000 folder (named, inside one, and found by the walk), a chmod 000
    file, and a module importing from the unreadable folder (its callee stays unknown)."""
    root = write_project(shared_tmp / "p", {"good.py": CKP102_SOURCE,
                                            "locked/hidden.py": CKP102_SOURCE,
                                            "pkg/locked/hidden.py": CKP102_SOURCE,
                                            "pkg/secret.py": CKP102_SOURCE,
                                            "uses_locked.py": USES_LOCKED})
    for path in (root / "locked", root / "pkg" / "locked", root / "pkg" / "secret.py"):
        os.chmod(path, 0)
    result = run_cli_as_nobody(".", "--format", "json", "--no-cache", cwd=root)
    assert result.returncode == 1, result.stderr
    assert codes_by_file(result) == [
        ("good.py", "CKP102"), ("locked", "CKP999"), ("pkg/locked", "CKP999"),
        ("pkg/secret.py", "CKP999")]
    assert {item["message"] for item in json.loads(result.stdout)[1:]} == {
        "cannot read: Permission denied"}
    named = run_cli_as_nobody("locked", "good.py", "--no-cache", cwd=root)
    assert named.returncode == 1
    lines = named.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("good.py:9:12: CKP102 ")
    assert lines[1] == "locked:1:1: CKP999 cannot read: Permission denied"
    inside = run_cli_as_nobody("locked/hidden.py", "--no-cache", cwd=root)
    assert (inside.returncode, inside.stdout) == (
        1, "locked/hidden.py:1:1: CKP999 cannot read: Permission denied\n"), inside.stderr


def test_a_folder_git_ignores_is_not_reported_even_unreadable(shared_tmp):
    root = write_project(shared_tmp / "p", {"good.py": CKP102_SOURCE,
                                            "cache/hidden.py": CKP102_SOURCE,
                                            ".gitignore": "cache/\n"})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for inside, folders, names in os.walk(root):
        for name in [*folders, *names, "."]:
            os.chown(os.path.join(inside, name), NOBODY, NOBODY)  # git wants its owner
    os.chmod(root / "cache", 0)
    result = run_cli_as_nobody(".", "--format", "json", "--no-cache", cwd=root)
    assert codes_by_file(result) == [("good.py", "CKP102")]


# -- the flake8 plugin ---------------------------------------------------------------------------
def test_flake8_with_an_invalid_config_reports_ckp999_at_each_file(tmp_path):
    root = write_project(tmp_path, {"a.py": CKP102_SOURCE, "b.py": "x = 1\n"},
                         "max-depth = \"deep\"\n")
    result = subprocess.run([sys.executable, "-m", "flake8", "--select", "CKP", "a.py", "b.py"],
                            cwd=root, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    expected = (f"CKP999 {root / 'pyproject.toml'}: key `max-depth`: expected a non-negative "
                "integer, got 'deep'")
    assert result.stdout.splitlines() == [f"a.py:1:1: {expected}", f"b.py:1:1: {expected}"]


@pytest.mark.parametrize(("pattern", "path", "matches"), [
    ("[!a]b.py", "cb.py", True),
    ("[!a]b.py", "ab.py", False),
    ("[ab]c.py", "bc.py", True),
    ("x[/]y", "x/y", False),
    ("x[!a]y", "x/y", False),
])
def test_bracket_classes_follow_gitignore(pattern, path, matches):
    from ckptlint.globs import glob_matches

    assert glob_matches(pattern, path) is matches
