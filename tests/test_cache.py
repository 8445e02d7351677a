"""The result cache: same findings warm as cold, and never a stale answer."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckptlint import cache as cache_module
from ckptlint.config import Config, parse_table
from ckptlint.engine import Linter, lint
from tests.cli_helpers import CKP102_SOURCE, run_cli

SITE_USING_BLOCKS = ("from torch.utils.checkpoint import checkpoint\n"
                     "from blocks import block\n\n\n"
                     "def forward(x):\n"
                     "    return checkpoint(block, x, use_reentrant=False)\n")
CLEAN_BLOCK = "def block(x):\n    return x * 2\n"
PRINTING_BLOCK = "def block(x):\n    print(x)\n    return x * 2\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("CKPTLINT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    return tmp_path


def touch_later(path: Path, text: str) -> None:
    """Rewrite a file so that its stat signature surely changes."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    if path.stat().st_mtime_ns == before:
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def run(paths: list[str], config: Config | None = None, **kwargs):
    return lint(paths, config or Config(root=Path.cwd()), use_cache=True, jobs=1, **kwargs)


def codes(result) -> list[tuple[str, int, str]]:
    return [(Path(f.filename).name, f.start.row, f.code) for f in result.findings]


def test_a_warm_run_answers_every_file_from_the_cache(project: Path) -> None:
    (project / "a.py").write_text(CKP102_SOURCE)
    (project / "clean.py").write_text("x = 1\n")
    (project / "broken.py").write_bytes(b"x = 1\x00\n")
    cold = run(["."])
    warm = run(["."])
    assert codes(cold) == codes(warm) == [("a.py", 9, "CKP102"), ("broken.py", 1, "CKP999")]
    assert [f.to_json() for f in cold.findings] == [f.to_json() for f in warm.findings]
    assert cold.sites == warm.sites
    assert warm.stats["cached"] == 3 and cold.stats["cached"] == 0
    # Texts of cached files are read only when asked for, and then they are right.
    assert warm.sources["a.py"] == CKP102_SOURCE


def test_noqa_still_applies_to_cached_findings(project: Path) -> None:
    source = CKP102_SOURCE.replace("checkpoint(block, x)", "checkpoint(block, x)  # noqa: CKP102")
    (project / "a.py").write_text(source)
    assert codes(run(["."])) == []
    warm = run(["."])
    assert codes(warm) == [] and warm.stats["cached"] == 1
    assert codes(run(["."], ignore_noqa=True)) == [("a.py", 9, "CKP102")]


def test_a_changed_file_is_linted_again(project: Path) -> None:
    path = project / "a.py"
    path.write_text("x = 1\n")
    assert codes(run(["."])) == []
    touch_later(path, CKP102_SOURCE)
    result = run(["."])
    assert codes(result) == [("a.py", 9, "CKP102")] and result.stats["cached"] == 0


def test_same_bytes_after_a_touch_are_still_cached(project: Path) -> None:
    path = project / "clean.py"
    path.write_text("x = 1\n")
    run(["."])
    touch_later(path, "x = 1\n")
    assert run(["."]).stats["cached"] == 1


def test_a_change_in_a_file_a_segment_reaches_into_invalidates(project: Path) -> None:
    (project / "a.py").write_text(SITE_USING_BLOCKS)
    blocks = project / "blocks.py"
    blocks.write_text(CLEAN_BLOCK)
    assert codes(run(["a.py"])) == []
    assert run(["a.py"]).stats["cached"] == 1
    touch_later(blocks, PRINTING_BLOCK)
    result = run(["a.py"])
    assert codes(result) == [("a.py", 6, "CKP401")] and result.stats["cached"] == 0
    assert run(["a.py"]).stats["cached"] == 1


def test_a_module_created_later_invalidates(project: Path) -> None:
    (project / "a.py").write_text(SITE_USING_BLOCKS)
    assert codes(run(["a.py"])) == []  # `blocks` does not exist: nothing to read
    (project / "blocks.py").write_text(PRINTING_BLOCK)
    assert codes(run(["a.py"])) == [("a.py", 6, "CKP401")]


def test_the_analysis_records_the_files_it_looked_at(project: Path) -> None:
    (project / "a.py").write_text(SITE_USING_BLOCKS)
    (project / "blocks.py").write_text(CLEAN_BLOCK)
    linter = Linter(Config(root=project))
    linter.project.add_root_for(project / "a.py")
    result = linter.lint_file(project / "a.py", "a.py")
    assert str((project / "blocks.py").resolve()) in result.dependencies
    assert str((project / "a.py").resolve()) not in result.dependencies


def test_dependencies_are_checked_by_digest(tmp_path: Path) -> None:
    config = Config(root=tmp_path, cache_dir=tmp_path / "c")
    dependency = tmp_path / "dep.py"
    dependency.write_text("x = 1\n")
    linted = tmp_path / "a.py"
    linted.write_text("y = 2\n")
    store = cache_module.Cache.open(config, [])
    data = linted.read_bytes()
    info = os.stat(linted)
    digest, entry = store.lookup_bytes("a.py", linted, info, data)
    assert entry is None
    store.store("a.py", cache_module.signature(info), digest, ["finding"], [], (str(dependency),
                                                        str(tmp_path / "absent.py")), False)
    store.save()
    again = cache_module.Cache.open(config, [])
    assert again.lookup("a.py", linted, os.stat(linted)).findings == ["finding"]
    touch_later(dependency, "x = 2\n")
    assert cache_module.Cache.open(config, []).lookup("a.py", linted, os.stat(linted)) is None
    touch_later(dependency, "x = 1\n")  # the same bytes again: valid again
    assert cache_module.Cache.open(config, []).lookup("a.py", linted, os.stat(linted))
    (tmp_path / "absent.py").write_text("")
    assert cache_module.Cache.open(config, []).lookup("a.py", linted, os.stat(linted)) is None


def test_any_project_change_invalidates_files_with_sites_only(project: Path) -> None:
    (project / "a.py").write_text(CKP102_SOURCE)
    (project / "clean.py").write_text("x = 1\n")
    run(["a.py", "clean.py"])
    (project / "elsewhere.py").write_text("import a\na.state = 2\n")
    result = run(["a.py", "clean.py"])
    assert result.stats["cached"] == 1  # clean.py; a.py holds a site: analysed again


def test_the_project_scan_matches_the_binding_model() -> None:
    from ckptlint import bindings

    assert cache_module.PROJECT_SKIPPED_DIRS == bindings.SKIPPED_DIRS
    assert cache_module.MAX_PROJECT_FILES == bindings.MAX_PROJECT_FILES


def test_configuration_and_version_are_part_of_the_key(project: Path, monkeypatch) -> None:
    (project / "a.py").write_text(CKP102_SOURCE)
    run(["."])
    assert run(["."]).stats["cached"] == 1
    other = Config(root=project, ignore=("CKP102",))
    result = run(["."], other)
    assert result.stats["cached"] == 0 and codes(result) == []
    assert run(["."]).stats["cached"] == 1  # each configuration keeps its own entries
    monkeypatch.setattr(cache_module, "__version__", "99.0")
    assert run(["."]).stats["cached"] == 0


def test_installed_transformers_version_is_part_of_the_key(project: Path, monkeypatch) -> None:
    site = project / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    first = cache_module.environment_fingerprint(Config())
    (site / "transformers-4.46.0.dist-info").mkdir()
    second = cache_module.environment_fingerprint(Config())
    assert first != second
    assert cache_module.environment_fingerprint(Config(transformers_version="4.46.0")) == \
        cache_module.environment_fingerprint(Config(transformers_version="4.46.0"))


def test_a_corrupt_cache_is_ignored(project: Path) -> None:
    (project / "a.py").write_text(CKP102_SOURCE)
    run(["."])
    for path in (project / "cache").glob("run-*.pickle"):
        path.write_bytes(b"not a pickle")
    assert codes(run(["."])) == [("a.py", 9, "CKP102")]
    for path in (project / "cache").glob("run-*.pickle"):
        path.write_bytes(pickle.dumps({"format": 1, "entries": 3, "digests": None}))
    assert codes(run(["."])) == [("a.py", 9, "CKP102")]


def test_an_unwritable_cache_folder_does_not_fail_the_run(project: Path, monkeypatch) -> None:
    blocker = project / "blocker"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("CKPTLINT_CACHE_DIR", str(blocker / "cache"))
    (project / "a.py").write_text(CKP102_SOURCE)
    assert codes(run(["."])) == [("a.py", 9, "CKP102")]


def test_cache_location(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("CKPTLINT_CACHE_DIR", raising=False)
    config = parse_table({}, tmp_path / "pyproject.toml")
    assert cache_module.cache_dir(config) == tmp_path / ".ckptlint_cache"
    config = parse_table({"cache-dir": "build/lint-cache"}, tmp_path / "pyproject.toml")
    assert cache_module.cache_dir(config) == (tmp_path / "build" / "lint-cache").resolve()
    monkeypatch.setenv("CKPTLINT_CACHE_DIR", str(tmp_path / "env"))
    assert cache_module.cache_dir(config) == tmp_path / "env"


def test_cli_writes_the_cache_and_no_cache_leaves_it_alone(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (tmp_path / "a.py").write_text(CKP102_SOURCE)
    env = {"CKPTLINT_CACHE_DIR": ""}
    result = run_cli("--no-cache", ".", cwd=tmp_path, env=env)
    assert result.returncode == 1 and not (tmp_path / ".ckptlint_cache").exists()
    result = run_cli(".", cwd=tmp_path, env=env)
    assert result.returncode == 1
    folder = tmp_path / ".ckptlint_cache"
    assert (folder / "CACHEDIR.TAG").is_file()
    assert (folder / ".gitignore").read_text().strip().endswith("*")
    assert list(folder.glob("run-*.pickle"))
    again = run_cli(".", cwd=tmp_path, env={**env, "CKPTLINT_STATS": "1"})
    assert again.stdout == result.stdout and '"cached": 1' in again.stderr


def test_a_warm_run_imports_no_libcst(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(CKP102_SOURCE)
    script = ("import sys\nfrom pathlib import Path\nfrom ckptlint.config import Config\n"
              "from ckptlint.engine import lint\n"
              "r = lint(['.'], Config(root=Path.cwd()), use_cache=True)\n"
              "print(len(r.findings), r.stats['cached'], 'libcst' in sys.modules)\n")
    env = {**os.environ, "CKPTLINT_CACHE_DIR": str(tmp_path / "c")}
    first = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    second = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert first.stdout.split()[:2] == ["1", "0"], first.stderr
    assert second.stdout.split() == ["1", "1", "False"], second.stderr


def test_clean_file_run_imports_no_libcst(tmp_path: Path) -> None:
    (tmp_path / "clean.py").write_text("import torch\nx = torch.ones(3)  # a checkpoint later\n")
    script = ("import sys\nfrom ckptlint.cli import main\nimport atexit\n"
              "atexit.register(lambda: print('LIBCST' if 'libcst' in sys.modules else 'NONE'))\n"
              "main(['check', '--no-cache', 'clean.py'])\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.strip().endswith("NONE"), result.stdout + result.stderr
    started = time.perf_counter()
    version = subprocess.run([sys.executable, "-c", "import sys\nfrom ckptlint.cli import main\n"
                              "import atexit\natexit.register(lambda: print('libcst' in "
                              "sys.modules))\nmain(['--version'])"],
                             capture_output=True, text=True, timeout=120)
    assert version.stdout.strip().endswith("False")
    assert time.perf_counter() - started < 30  # (budgets are measured by bench/, not here)
