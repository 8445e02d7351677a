"""The built wheel: rule pages ship inside it and `ckptlint rule` works from a fresh venv.

The wheel is built from a snapshot of this working tree with `pip wheel --no-deps` (without
build isolation when the running environment's setuptools can build wheels), installed with
`--no-deps` into a new virtualenv whose dependencies (libcst, click) come from this
environment's site-packages, and which runs its own installed copy of ckptlint.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ckptlint.registry import RULES
from ckptlint.rule_pages import page_filename
from tests.cli_helpers import REPO


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout")
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, check=True, capture_output=True).stdout.decode()
    return [name for name in out.split("\0") if name and (REPO / name).is_file()]


def setuptools_builds_wheels() -> bool:
    from importlib import metadata

    try:
        version = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        return False
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    return parts >= (70, 1)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    snapshot = tmp_path_factory.mktemp("source")
    for name in tracked_files():
        if name.startswith(("tests/", "bench/", "examples/")):
            continue
        target = snapshot / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    out = tmp_path_factory.mktemp("dist")
    # Without build isolation when this environment's setuptools builds wheels by itself
    # (70.1+); else pip fetches the build requirements from the package index.
    isolation = ["--no-build-isolation"] if setuptools_builds_wheels() else []
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation,
         "--wheel-dir", str(out), str(snapshot)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = out.glob("ckptlint-*.whl")
    return built


def test_every_subpackage_is_listed_in_pyproject():
    """pyproject.toml lists packages explicitly (for the rules/ mapping): none may be missed."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    on_disk = {".".join(path.parent.relative_to(REPO).parts)
               for path in (REPO / "ckptlint").rglob("__init__.py")}
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


@pytest.mark.slow
def test_wheel_contains_the_rule_pages_and_every_module(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    pages = {name.rsplit("/", 1)[-1] for name in names
             if name.startswith("ckptlint/rule_pages_data/")}
    in_tree = {path.name for path in (REPO / "rules").glob("*.md")}
    assert in_tree and in_tree <= pages
    for path in (REPO / "ckptlint").rglob("*.py"):
        if "__pycache__" not in path.parts:
            assert path.relative_to(REPO).as_posix() in names
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "ckptlint = ckptlint.cli:main" in text
    assert "CKP = ckptlint.integrations.flake8:CkptlintPlugin" in text


@pytest.mark.slow
def test_rule_command_from_an_installed_wheel(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python), "-c", purelib],
                          check=True, capture_output=True, text=True).stdout.strip()
    # Dependencies (libcst, click) come from this environment's site-packages, added after the
    # new venv's own; a path added by a .pth line does not run that folder's .pth files, so
    # this environment's editable ckptlint stays out of the way.
    import sysconfig

    own = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "_test_deps.pth").write_text("\n".join(sorted(own)) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--target", site,
         str(wheel)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    where = subprocess.run([str(python), "-c", "import ckptlint; print(ckptlint.__file__)"],
                           cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    assert where.startswith(site), where
    code = next((c for c in RULES if (REPO / "rules" / page_filename(c)).is_file()), None)
    assert code is not None
    shown = subprocess.run([str(python), "-m", "ckptlint", "rule", code], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"# {code}: {RULES[code].name}")
    listed = subprocess.run([str(python), "-m", "ckptlint", "rule", "--all"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "CKP101" in listed.stdout
    assert "rule_pages_data" in subprocess.run(
        [str(python), "-c", "from ckptlint.rule_pages import pages_dir; print(pages_dir())"],
        cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    # The contributor tools need a checkout; from the wheel they say so in one line.
    dev = subprocess.run([str(python), "-m", "ckptlint.dev", "rule-table", "--check"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert dev.returncode == 2
    assert dev.stderr.startswith("ckptlint.dev: error: ") and "not a source checkout" in dev.stderr
    assert dev.stderr.count("\n") == 1
