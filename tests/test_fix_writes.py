"""How `--fix` and `--add-noqa` write files: through symlinks to their target, once per file,
keeping mode and group, and refusing (the finding stays, exit 1) what an atomic rename cannot
replace faithfully: a file the user cannot write, a file with other hard links, a file owned by
someone else."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.cli_helpers import CKP102_SOURCE, run_cli, write_project
from tests.privileges import NOBODY, give_to_nobody, run_cli_as_nobody, shared_tmp_fixture  # noqa: F401

FIXED = CKP102_SOURCE.replace("checkpoint(block, x)", "checkpoint(block, x, use_reentrant=False)")
NOQA = CKP102_SOURCE.replace("checkpoint(block, x)", "checkpoint(block, x)  # noqa: CKP102")
FIX = ("--fix", "--unsafe-fixes")


def linked_project(root: Path) -> Path:
    """real/m.py (mode 0640) and link.py -> real/m.py."""
    write_project(root, {"real/m.py": CKP102_SOURCE})
    os.chmod(root / "real" / "m.py", 0o640)
    (root / "link.py").symlink_to(Path("real") / "m.py")
    return root


@pytest.mark.parametrize("tool, expected", [(FIX, FIXED), (("--add-noqa",), NOQA)],
                         ids=["fix", "add-noqa"])
def test_a_symlink_is_written_through_to_its_target(tmp_path, tool, expected):
    root = linked_project(tmp_path)
    result = run_cli("link.py", *tool, cwd=root)
    assert result.returncode == 0, result.stderr
    assert (root / "link.py").is_symlink()
    assert os.readlink(root / "link.py") == os.path.join("real", "m.py")
    assert (root / "real" / "m.py").read_text() == expected
    assert stat.S_IMODE((root / "real" / "m.py").stat().st_mode) == 0o640


@pytest.mark.parametrize("tool, expected, done", [
    (FIX, FIXED, "Fixed 2 findings (0 remaining)"),
    (("--add-noqa",), NOQA, "Added 1 noqa directive."),
], ids=["fix", "add-noqa"])
def test_a_link_and_its_target_named_together_are_written_once(tmp_path, tool, expected, done):
    root = linked_project(tmp_path)
    result = run_cli("link.py", "real/m.py", *tool, cwd=root)
    assert result.returncode == 0, result.stderr
    assert done in result.stderr
    assert "error" not in result.stderr
    assert (root / "real" / "m.py").read_text() == expected
    assert (root / "link.py").is_symlink()


def test_a_chain_of_links_reaches_the_file(tmp_path):
    root = linked_project(tmp_path)
    (root / "outer.py").symlink_to("link.py")
    assert run_cli("outer.py", *FIX, cwd=root).returncode == 0
    assert (root / "outer.py").is_symlink() and (root / "link.py").is_symlink()
    assert (root / "real" / "m.py").read_text() == FIXED


def test_mode_and_group_are_kept(tmp_path):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE})
    os.chmod(root / "m.py", 0o750)
    os.chown(root / "m.py", os.geteuid(), NOBODY)
    assert run_cli("m.py", *FIX, cwd=root).returncode == 0
    info = (root / "m.py").stat()
    assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o750, NOBODY)
    assert (root / "m.py").read_text() == FIXED


def assert_refused(result, root: Path, name: str, original: str, why: str) -> None:
    """Left as it was, one line on stderr naming the file, exit 1, and (`--fix`) the finding
    still reported."""
    assert result.returncode == 1, result.stderr
    assert (root / name).read_text() == original
    refusals = [line for line in result.stderr.splitlines() if "not rewritten" in line]
    assert len(refusals) == 1 and name in refusals[0] and why in refusals[0], result.stderr
    if "--fix" in result.args:
        assert f"{name}:9:12: CKP102" in result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("tool", [FIX, ("--add-noqa",)], ids=["fix", "add-noqa"])
def test_a_file_with_other_hard_links_is_refused(tmp_path, tool):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE})
    os.link(root / "m.py", root / "other_name.txt")
    result = run_cli("m.py", *tool, cwd=root)
    assert_refused(result, root, "m.py", CKP102_SOURCE, "hard links")
    assert os.stat(root / "m.py").st_ino == os.stat(root / "other_name.txt").st_ino


def test_root_refuses_a_file_owned_by_someone_else(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("runs as root")
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE, "mine.py": CKP102_SOURCE})
    give_to_nobody(root / "m.py")
    result = run_cli("m.py", "mine.py", *FIX, cwd=root)
    assert_refused(result, root, "m.py", CKP102_SOURCE, f"owned by uid {NOBODY}")
    assert (root / "m.py").stat().st_uid == NOBODY
    assert (root / "mine.py").read_text() == FIXED  # the other file is still fixed


@pytest.mark.parametrize("tool", [FIX, ("--add-noqa",)], ids=["fix", "add-noqa"])
def test_a_file_the_user_cannot_write_is_refused(shared_tmp, tool):
    """As uid 65534, in a folder it owns (so a rename would succeed): a read-only file of its
    own stays as it is."""
    root = write_project(shared_tmp / "p", {"m.py": CKP102_SOURCE})
    give_to_nobody(root, root / "m.py", root / "pyproject.toml")
    os.chmod(root / "m.py", 0o444)
    result = run_cli_as_nobody("m.py", "--no-cache", *tool, cwd=root)
    assert_refused(result, root, "m.py", CKP102_SOURCE, "cannot write")
    assert stat.S_IMODE((root / "m.py").stat().st_mode) == 0o444


def test_a_user_refuses_a_writable_file_owned_by_someone_else(shared_tmp):
    """As uid 65534: a file root owns but lets everyone write, in a folder 65534 owns; a
    rename would hand the file to 65534."""
    root = write_project(shared_tmp / "p", {"m.py": CKP102_SOURCE})
    give_to_nobody(root, root / "pyproject.toml")
    os.chmod(root / "m.py", 0o666)
    result = run_cli_as_nobody("m.py", "--no-cache", *FIX, cwd=root)
    assert_refused(result, root, "m.py", CKP102_SOURCE, "owned by uid 0")
    assert (root / "m.py").stat().st_uid == 0


def test_a_folder_the_user_cannot_write_is_refused(shared_tmp):
    """As uid 65534: its own writable file in root's folder (no temporary file can be made)."""
    root = write_project(shared_tmp / "p", {"m.py": CKP102_SOURCE})
    give_to_nobody(root / "m.py")
    result = run_cli_as_nobody("m.py", "--no-cache", *FIX, cwd=root)
    assert_refused(result, root, "m.py", CKP102_SOURCE, "cannot create files in")
