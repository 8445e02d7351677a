"""The result cache: same findings warm as cold, and never a stale answer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckptlint.config import Config, parse_table
from ckptlint.engine import cache as cache_module
from ckptlint.engine.linter import Linter
from ckptlint.engine.run import lint
from ckptlint.findings import Finding, Position
from ckptlint.storage import plain_data
from tests.cli_helpers import CKP102_SOURCE, run_cli, run_cli_process

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
    finding = Finding("CKP102", "message", "a.py", Position(1, 1), Position(1, 5),
                      data={"api": "torch.utils.checkpoint.checkpoint", "mode": "reentrant"})
    store.store("a.py", cache_module.signature(info), digest, [finding], [], (str(dependency),
                                                        str(tmp_path / "absent.py")), False)
    store.save()
    again = cache_module.Cache.open(config, [])
    assert again.lookup("a.py", linted, os.stat(linted)).findings == [finding]
    touch_later(dependency, "x = 2\n")
    assert cache_module.Cache.open(config, []).lookup("a.py", linted, os.stat(linted)) is None
    touch_later(dependency, "x = 1\n")  # the same bytes again: valid again
    assert cache_module.Cache.open(config, []).lookup("a.py", linted, os.stat(linted))
    (tmp_path / "absent.py").write_text("")
    assert cache_module.Cache.open(config, []).lookup("a.py", linted, os.stat(linted)) is None


def test_absent_dependencies_are_stored_as_the_folder_above_them(tmp_path: Path) -> None:
    """Name lookups probe many paths that do not exist: each is stored as the nearest
    folder that does, by the names in it, so a warm run lists a few folders instead of
    checking every probed path. Creating a probed path, however deep, adds a name to that
    folder; an atomic save of another file there (a copy renamed over it) does not."""
    config = Config(root=tmp_path, cache_dir=tmp_path / "c")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "present.py").write_text("x = 1\n")
    linted = tmp_path / "a.py"
    linted.write_text("y = 2\n")
    absent = [package / "one.py", package / "one" / "__init__.py",
              package / "two" / "deep" / "__init__.py", package / "three.py"]
    store = cache_module.Cache.open(config, [])
    info = os.stat(linted)
    digest, _ = store.lookup_bytes("a.py", linted, info, linted.read_bytes())
    store.store("a.py", cache_module.signature(info), digest, [], [],
                tuple(str(path) for path in absent), False)
    stored = store.entries["a.py"].dependencies
    assert [path for path, _ in stored] == [str(package)]
    assert stored[0][1].startswith(cache_module.FOLDER_STAMP)
    store.save()

    def valid() -> bool:
        return cache_module.Cache.open(config, []).lookup("a.py", linted,
                                                          os.stat(linted)) is not None

    assert valid()
    copy = package / "present.py.tmp"
    copy.write_text("x = 2\n")
    os.replace(copy, package / "present.py")
    assert valid()
    (package / "two" / "deep").mkdir(parents=True)
    assert not valid()
    shutil.rmtree(package / "two")
    assert valid()
    (package / "three.py").write_text("")
    assert not valid()


def test_any_project_change_invalidates_files_with_sites_only(project: Path) -> None:
    (project / "a.py").write_text(CKP102_SOURCE)
    (project / "clean.py").write_text("x = 1\n")
    run(["a.py", "clean.py"])
    (project / "elsewhere.py").write_text("import a\na.state = 2\n")
    result = run(["a.py", "clean.py"])
    assert result.stats["cached"] == 1  # clean.py; a.py holds a site: analysed again


def test_a_class_becoming_a_hand_written_checkpoint_elsewhere_invalidates(
        project: Path) -> None:
    """A file calling `.apply` was screened against the project's classes: when another
    file's class turns into a hand-written checkpoint, the file is screened again and its
    call becomes a site (its dropout CKP302)."""
    (project / "ckpt.py").write_text(
        "import torch\n\n\nclass Recompute(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(ctx, fn, x):\n        ctx.fn = fn\n"
        "        return fn(x)\n\n    @staticmethod\n    def backward(ctx, grad):\n"
        "        return None, grad\n")
    (project / "user.py").write_text(
        "import torch.nn.functional as F\nfrom ckpt import Recompute\n\n\n"
        "def noisy(x):\n    return F.dropout(x, 0.1, training=True)\n\n\n"
        "def forward(x):\n    return Recompute.apply(noisy, x)\n")
    assert codes(run(["user.py"])) == []
    touch_later(project / "ckpt.py", (project / "ckpt.py").read_text().replace(
        "        return None, grad\n",
        "        with torch.enable_grad():\n            out = ctx.fn(ctx.x)\n"
        "        return None, torch.autograd.grad(out, ctx.x, grad)[0]\n"))
    result = run(["user.py"])
    assert result.stats["cached"] == 0
    assert codes(result) == [("user.py", 6, "CKP302")]


def test_the_project_signature_covers_the_project_scan(project: Path) -> None:
    """Every file the whole-project questions read (`Project.source_files`) is part of the
    signature that invalidates analysed files: changing any of them changes it."""
    from ckptlint.analysis.project import Project

    for name in ("top.py", "pkg/__init__.py", "pkg/inner/deep.py", "pkg/build/skipped.py"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("x = 1\n")
    scanned = Project([project]).source_files()
    assert {path.relative_to(project).as_posix() for path in scanned} == {
        "top.py", "pkg/__init__.py", "pkg/inner/deep.py"}
    for path in scanned:
        before = cache_module.project_signature([project], project)
        path.write_text("x = 22\n")
        assert cache_module.project_signature([project], project) != before, path


def test_in_an_environment_folder_the_signature_covers_the_linted_packages_only(
        tmp_path: Path) -> None:
    """In `site-packages` the project scan reads only the packages being linted; so does the
    signature: a warm run over torch does not list the 10,000 files of every other installed
    distribution, and an edit to one of them invalidates nothing."""
    from ckptlint.analysis.project import Project

    site = tmp_path / "site-packages"
    for name in ("mine/__init__.py", "mine/model.py", "other/__init__.py", "loose.py"):
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text("x = 1\n")
    project = Project([])
    project.add_root_for(site / "mine" / "model.py")
    scanned = project.source_files()
    assert {path.relative_to(site).as_posix() for path in scanned} == {
        "mine/__init__.py", "mine/model.py"}
    entries = project.environment_entries

    def signature() -> str:
        return cache_module.project_signature(project.roots, tmp_path, entries)

    for path in scanned:
        before = signature()
        path.write_text("x = 22\n")
        assert signature() != before, path
    before = signature()
    (site / "other" / "__init__.py").write_text("x = 22\n")
    (site / "loose.py").write_text("x = 22\n")
    (site / "third.py").write_text("")
    assert signature() == before
    (site / "mine" / "new.py").write_text("")
    assert signature() != before


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
    [path] = (project / "cache").glob("run-*.json")
    path.write_bytes(b"not json")
    assert codes(run(["."])) == [("a.py", 9, "CKP102")]
    path.write_text(json.dumps({"format": cache_module.FORMAT, "entries": 3, "digests": None}))
    assert codes(run(["."])) == [("a.py", 9, "CKP102")]


def test_an_unwritable_cache_folder_does_not_fail_the_run(project: Path, monkeypatch) -> None:
    blocker = project / "blocker"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("CKPTLINT_CACHE_DIR", str(blocker / "cache"))
    (project / "a.py").write_text(CKP102_SOURCE)
    assert codes(run(["."])) == [("a.py", 9, "CKP102")]


def test_cache_location(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("CKPTLINT_CACHE_DIR", raising=False)
    root = tmp_path.resolve()
    config = parse_table({}, root / "pyproject.toml")
    assert cache_module.cache_location(config) == (root / ".ckptlint_cache", False)
    config = parse_table({"cache-dir": "build/lint-cache"}, root / "pyproject.toml")
    assert cache_module.cache_location(config) == (root / "build" / "lint-cache", False)
    named = parse_table({"cache-dir": "/var/tmp/x"}, root / "lint.toml", named_on_command_line=True)
    assert cache_module.cache_location(named) == (Path("/var/tmp/x"), True)
    monkeypatch.setenv("CKPTLINT_CACHE_DIR", str(tmp_path / "env"))
    assert cache_module.cache_location(config) == (tmp_path / "env", True)


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
    assert list(folder.glob("run-*.json"))
    again = run_cli(".", cwd=tmp_path, env={**env, "CKPTLINT_STATS": "1"})
    assert again.stdout == result.stdout and '"cached": 1' in again.stderr


def test_a_warm_run_imports_no_libcst(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(CKP102_SOURCE)
    script = ("import sys\nfrom pathlib import Path\nfrom ckptlint.config import Config\n"
              "from ckptlint.engine.run import lint\n"
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


# -- plain data: what a cached run gives back -------------------------------------------------
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixture_tree(project: Path) -> Path:
    """Every annotated fixture in one project (fixes, chains, cross-file findings, targets),
    plus a file that cannot be decoded and an unused noqa."""
    shutil.copytree(FIXTURES, project / "fixtures")
    (project / "pyproject.toml").write_text(
        '[tool.ckptlint]\nextend-select = ["CKP901", "CKP902"]\n'
        'transformers-version = "4.46.0"\n')
    (project / "broken.py").write_bytes(b"x = '\xff'\n")
    (project / "unused.py").write_text("x = 1  # noqa: CKP102\n")
    return project


def warm_and_uncached(root: Path):
    from ckptlint.config import load_config

    config = load_config(["."])
    uncached = lint(["."], config, jobs=1)
    run(["."], config)
    warm = run(["."], config)
    assert warm.stats["cached"] == warm.stats["files"] == uncached.stats["files"]
    return config, uncached, warm


def test_a_cached_run_prints_the_same_bytes_in_every_format(fixture_tree: Path, capsys) -> None:
    from ckptlint.commands.check import CheckOptions, run_check
    from ckptlint.output import FORMATS

    config, uncached, warm = warm_and_uncached(fixture_tree)
    assert len(uncached.findings) > 50 and any(f.fix for f in uncached.findings)
    assert {f.code for f in uncached.findings} >= {"CKP102", "CKP201", "CKP401", "CKP902",
                                                   "CKP999"}
    for options in ([dict(output_format=name) for name in FORMATS]
                    + [dict(show_statistics=True), dict(diff=True, unsafe_fixes=True)]):
        outputs = []
        for result in (uncached, warm):
            status = run_check(result, CheckOptions(["."], config, **options))
            captured = capsys.readouterr()
            outputs.append((status, captured.out, captured.err))
        assert outputs[0] == outputs[1], options
        assert outputs[0][1], options


def test_findings_and_sites_survive_the_plain_data_round_trip(fixture_tree: Path) -> None:
    from ckptlint.findings import Finding, SiteRecord

    _, uncached, warm = warm_and_uncached(fixture_tree)
    assert warm.findings == uncached.findings and warm.sites == uncached.sites
    assert uncached.sites and any(record.targets for record in uncached.sites)
    for finding in uncached.findings:
        assert finding.data  # the facts travel with the finding through the cache
        assert Finding.from_json(json.loads(json.dumps(finding.to_json()))) == finding
    for record in uncached.sites:
        assert SiteRecord.from_json(json.loads(json.dumps(record.to_json()))) == record


def stored_entries(cache_folder: Path) -> tuple[Path, dict]:
    [path] = cache_folder.glob("run-*.json")
    return path, json.loads(path.read_text())


WRONG_VALUES = (None, True, -1, 0, 2**70, 1.5, "x", [], {}, [[[]]], {"row": 1})


def places(value, where=()):
    """Every path to a value inside plain data (list indexes and object keys)."""
    yield where
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    for key, item in items:
        yield from places(item, (*where, key))


def replaced(value, where, new):
    copy = json.loads(json.dumps(value))
    if not where:
        return new
    parent = copy
    for step in where[:-1]:
        parent = parent[step]
    parent[where[-1]] = new
    return copy


def test_an_entry_of_the_wrong_shape_is_a_miss_never_an_error(project: Path) -> None:
    """Every field of every stored entry, replaced in turn by values of other types: the
    entry is refused, and the run reports what an uncached run does."""
    (project / "a.py").write_text(CKP102_SOURCE)
    (project / "b.py").write_text(SITE_USING_BLOCKS)
    (project / "blocks.py").write_text(PRINTING_BLOCK)
    expected = [f.to_json() for f in run(["."]).findings]
    assert {f["code"] for f in expected} == {"CKP102", "CKP401"}
    path, data = stored_entries(project / "cache")
    good = data["entries"]
    refused = 0
    for display, entry in good.items():
        for where in places(entry):
            if where and where[-1] in ("name", "severity"):
                continue  # written for readers; the code decides them when read back
            original = entry
            for step in where:
                original = original[step]
            first = True
            for wrong in WRONG_VALUES:
                broken = replaced(entry, where, wrong)
                try:
                    cache_module.Entry.from_json(broken)
                except plain_data.ShapeError:
                    refused += 1
                else:  # of the right shape: the same type, an optional string's two types,
                    # or no site, fix or target
                    assert (type(wrong) is type(original)
                            or {type(wrong), type(original)} <= {str, type(None)}
                            or (wrong is None and where[-1] in ("site", "fix", "target"))
                            ), (where, wrong)
                    continue
                if first:  # one run per field (each costs an analysis)
                    first = False
                    path.write_text(json.dumps({**data, "entries": {**good, display: broken}}))
                    result = run(["."])
                    assert [f.to_json() for f in result.findings] == expected, (where, wrong)
    assert refused > 300
    for where in places(data):
        if len(where) <= 1:
            for wrong in WRONG_VALUES:
                path.write_text(json.dumps(replaced(data, where, wrong)))
                assert [f.to_json() for f in run(["."]).findings] == expected, (where, wrong)


def test_a_run_file_that_is_not_usable_json_is_ignored(project: Path) -> None:
    (project / "a.py").write_text(CKP102_SOURCE)
    run(["."])
    path, data = stored_entries(project / "cache")
    for content in (b"[" * 100_000, b"\xff\xfe\x00garbage", json.dumps(data).encode()[:-3],
                    b'{"format": %d, "entries": {"a.py": NaN}, "digests": {}}'
                    % cache_module.FORMAT, b"1" * 5000):
        path.write_bytes(content)
        assert codes(run(["."])) == [("a.py", 9, "CKP102")]
    path.unlink()
    os.mkfifo(path)  # a reader that opened it blocking would wait for a writer forever
    # (a subprocess: a run that hangs on the FIFO fails at the timeout instead of hanging)
    result = run_cli_process(".", cwd=project, env={"CKPTLINT_CACHE_DIR": str(project / "cache")})
    assert result.returncode == 1 and "CKP102" in result.stdout


def test_a_too_large_run_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"format": 2}))
    assert plain_data.read_json(path) == {"format": 2}
    assert plain_data.read_json(path, max_bytes=5) is None
    link = tmp_path / "link.json"
    link.symlink_to(path)
    assert plain_data.read_json(link) is None


def test_old_pickle_caches_are_left_alone_and_never_read(project: Path) -> None:
    (project / "a.py").write_text(CKP102_SOURCE)
    old = project / "cache" / "run-0123456789abcdef01234567.pickle"
    old.parent.mkdir()
    old.write_bytes(b"\x80\x04K\x01.")
    assert codes(run(["."])) == [("a.py", 9, "CKP102")]
    assert old.read_bytes() == b"\x80\x04K\x01."
    assert len(list((project / "cache").glob("run-*.json"))) == 1
