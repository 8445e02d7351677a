"""The pre-commit hooks, run by the real `pre-commit try-repo` in a temporary git repository.

The hook repository is a snapshot of this working tree (tracked and untracked, not ignored
files) committed in a temporary repo, so the test checks the code as it is now. pre-commit
installs it into its own virtualenv, fetching libcst and click from the package index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import CKP102_SOURCE, REPO
from tests.notebooks import notebook_json

pytest.importorskip("pre_commit")

GIT_IDENTITY = {"GIT_AUTHOR_NAME": "ckptlint tests", "GIT_AUTHOR_EMAIL": "tests@example.invalid",
                "GIT_COMMITTER_NAME": "ckptlint tests",
                "GIT_COMMITTER_EMAIL": "tests@example.invalid"}


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_IDENTITY}).stdout


def init_repo(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    git("init", "-q", cwd=path)
    git("config", "user.name", GIT_IDENTITY["GIT_AUTHOR_NAME"], cwd=path)
    git("config", "user.email", GIT_IDENTITY["GIT_AUTHOR_EMAIL"], cwd=path)
    git("config", "commit.gpgsign", "false", cwd=path)


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory) -> Path:
    """This working tree, snapshotted into a fresh git repo with one commit."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    snapshot = tmp_path_factory.mktemp("hook-repo")
    init_repo(snapshot)
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, check=True, capture_output=True).stdout.decode().split("\0")
    for name in files:
        source = REPO / name
        if not name or not source.is_file() or name.startswith(("tests/", "bench/", "examples/")):
            continue
        target = snapshot / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    git("add", "-A", cwd=snapshot)
    git("commit", "-q", "-m", "snapshot", cwd=snapshot)
    return snapshot


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pre-commit-home")


def user_repo(root: Path) -> Path:
    init_repo(root)
    (root / "pyproject.toml").write_text(
        '[tool.ckptlint]\nextend-exclude = ["generated"]\n', encoding="utf-8")
    (root / "model.py").write_text(CKP102_SOURCE, encoding="utf-8")
    (root / "clean.py").write_text("x = 1\n", encoding="utf-8")
    (root / "notebook.ipynb").write_text(notebook_json(CKP102_SOURCE), encoding="utf-8")
    (root / "generated").mkdir()
    (root / "generated" / "layers.py").write_text(CKP102_SOURCE, encoding="utf-8")
    git("add", "-A", cwd=root)
    return root


def try_repo(hook_repo: Path, hook: str, cwd: Path, home: Path, *files: str):
    env = {**os.environ, **GIT_IDENTITY, "PRE_COMMIT_HOME": str(home), "NO_COLOR": "1",
           "PRE_COMMIT_COLOR": "never"}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo), hook, "--verbose",
         "--files", *files],
        cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def test_hook_manifest():
    import yaml  # pre-commit depends on PyYAML

    hooks = {hook["id"]: hook for hook in
             yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))}
    assert set(hooks) == {"ckptlint", "ckptlint-fix"}
    for hook in hooks.values():
        assert hook["language"] == "python"
        assert hook["types_or"] == ["python", "pyi", "jupyter"]
        assert hook["require_serial"] is True
        assert "--force-exclude" in hook["entry"]
    assert "--fix --unsafe-fixes" in hooks["ckptlint-fix"]["entry"]


@pytest.mark.slow
def test_check_hook(hook_repo, pre_commit_home, tmp_path):
    root = user_repo(tmp_path / "user")
    result = try_repo(hook_repo, "ckptlint", root, pre_commit_home,
                      "model.py", "clean.py", "generated/layers.py", "notebook.ipynb")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "model.py:9:12: CKP102 " in output
    assert "notebook.ipynb:cell 2:9:12: CKP102 " in output  # `types_or` has jupyter
    assert "generated/layers.py:" not in output  # excluded by config: --force-exclude
    assert (root / "model.py").read_text() == CKP102_SOURCE


@pytest.mark.slow
def test_check_hook_passes_on_clean_files(hook_repo, pre_commit_home, tmp_path):
    root = user_repo(tmp_path / "user")
    result = try_repo(hook_repo, "ckptlint", root, pre_commit_home,
                      "clean.py", "generated/layers.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Passed" in result.stdout


@pytest.mark.slow
def test_fix_hook(hook_repo, pre_commit_home, tmp_path):
    root = user_repo(tmp_path / "user")
    result = try_repo(hook_repo, "ckptlint-fix", root, pre_commit_home, "model.py",
                      "generated/layers.py")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output  # pre-commit fails a hook that changed files
    assert "files were modified by this hook" in output
    assert "checkpoint(block, x, use_reentrant=False)" in (root / "model.py").read_text()
    assert (root / "generated" / "layers.py").read_text() == CKP102_SOURCE
