"""Hostile inputs: never a traceback, never a dead run.

Each file that cannot be read or parsed becomes one CKP999 finding saying why, and every other
finding of the run is still reported. The command line runs in this process (`run_cli`), except
for the hostile files (a FIFO, symbolic-link loops, nesting deep enough for a native parser),
which go through the installed console script in a subprocess: a hang or a crash there fails
the test, where in this process it would stop the test run.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import sysconfig
from pathlib import Path

import pytest

from ckptlint.config import Config
from ckptlint.engine.linter import Analysis, Linter
from ckptlint.engine.run import Run, lint
from tests.cli_helpers import CKP102_SOURCE, run_cli, run_cli_process

SITE = "from torch.utils.checkpoint import checkpoint\n"


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None, runner=run_cli):
    return runner(*args, cwd=tmp_path, env=env)


def findings(result) -> list[dict]:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 1), (result.returncode, result.stderr)
    return json.loads(result.stdout)


def by_file(items: list[dict]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for item in items:
        found.setdefault(Path(item["filename"]).name, []).append(item["code"])
    return found


def messages(items: list[dict], name: str) -> list[str]:
    return [i["message"] for i in items if Path(i["filename"]).name == name]


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


@pytest.mark.parametrize("fillers", [0, 40], ids=["main screens", "workers screen"])
def test_unreadable_and_unparsable_files_each_get_one_ckp999_and_the_rest_is_reported(
        tmp_path: Path, fillers: int) -> None:
    """With 40 clean files more (and two CPUs or more), workers screen the files in chunks
    rather than this process: every hostile file must be reported the same either way."""
    for number in range(fillers):
        write(tmp_path / f"clean_{number}.py", "x = 1\n")
    write(tmp_path / "good.py", CKP102_SOURCE)
    write(tmp_path / "latin1.py", "x = 'caf\xe9'\n".encode("latin-1") + SITE.encode())
    write(tmp_path / "nul.py", SITE.encode() + b"x = 1\x00\n")
    write(tmp_path / "py2.py", SITE + 'print "hello"\n')
    write(tmp_path / "deep.py", SITE + "x = " + "+".join(["1"] * 3000) + "\n")
    write(tmp_path / "parens.py", SITE + "x = " + "(" * 1500 + "1" + ")" * 1500 + "\n")
    os.mkfifo(tmp_path / "fifo.py")
    (tmp_path / "dangling.py").symlink_to(tmp_path / "missing.py")
    (tmp_path / "loop_a.py").symlink_to(tmp_path / "loop_b.py")
    (tmp_path / "loop_b.py").symlink_to(tmp_path / "loop_a.py")
    result = run(tmp_path, ".", "--format", "json", "--no-cache", "--jobs", "2",
                 env={"CKPTLINT_STATS": "1"}, runner=run_cli_process)
    items = findings(result)
    stats = json.loads(result.stderr.strip().splitlines()[-1])
    assert stats["screened_by_workers"] == (fillers > 0)
    codes = by_file(items)
    assert codes["good.py"] == ["CKP102"]
    for name in ("latin1.py", "nul.py", "py2.py", "deep.py", "parens.py", "fifo.py",
                 "dangling.py", "loop_a.py", "loop_b.py"):
        assert codes.get(name) == ["CKP999"], (name, codes)
    assert "cannot decode as utf-8" in messages(items, "latin1.py")[0]
    assert "NUL byte" in messages(items, "nul.py")[0]
    assert "Python 2" in messages(items, "py2.py")[0]
    assert "nesting too deep" in messages(items, "deep.py")[0]
    assert "nesting too deep" in messages(items, "parens.py")[0]
    assert "not a regular file" in messages(items, "fifo.py")[0]
    assert "cannot read" in messages(items, "dangling.py")[0]
    assert "symbolic links" in messages(items, "loop_a.py")[0]
    assert sorted(codes) == sorted(["good.py", "latin1.py", "nul.py", "py2.py", "deep.py",
                                    "parens.py", "fifo.py", "dangling.py", "loop_a.py",
                                    "loop_b.py"])
    assert result.returncode == 1


def test_bom_and_crlf_files_report_exact_positions(tmp_path: Path) -> None:
    write(tmp_path / "bom.py", b"\xef\xbb\xbf" + CKP102_SOURCE.encode())
    write(tmp_path / "crlf.py", CKP102_SOURCE.replace("\n", "\r\n").encode())
    write(tmp_path / "latin1_declared.py",
          b"# -*- coding: latin-1 -*-\n" + CKP102_SOURCE.encode() + "s = 'caf\xe9'\n".encode(
              "latin-1"))
    items = findings(run(tmp_path, ".", "--format", "json", "--no-cache"))
    rows = {(Path(i["filename"]).name, i["code"], i["location"]["row"], i["location"]["column"])
            for i in items}
    assert rows == {("bom.py", "CKP102", 9, 12), ("crlf.py", "CKP102", 9, 12),
                    ("latin1_declared.py", "CKP102", 10, 12)}


def test_a_400000_line_file(tmp_path: Path) -> None:
    """Without a site it is never parsed; with one, its 1.2 million syntax nodes are over
    the default `max-analysis-nodes` (analysing it took libcst 66 s and 3.7 GB)."""
    write(tmp_path / "big.py", "x = 1\n" * 400_000)
    write(tmp_path / "big_site.py", SITE + "x = 1\n" * 400_000 + "y = checkpoint(f, x)\n")
    items = findings(run(tmp_path, ".", "--format", "json", "--no-cache"))
    assert by_file(items) == {"big_site.py": ["CKP999"]}
    assert "(1200016 > 100000 syntax nodes)" in messages(items, "big_site.py")[0]


def test_a_file_over_max_file_size_is_reported_not_read(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.ckptlint]\nmax-file-size = 1000\n")
    write(tmp_path / "large.py", "x = 1\n" * 1000)
    write(tmp_path / "small.py", CKP102_SOURCE)
    items = findings(run(tmp_path, ".", "--format", "json", "--no-cache"))
    assert by_file(items) == {"large.py": ["CKP999"], "small.py": ["CKP102"]}
    assert "larger than max-file-size (6000 > 1000 bytes)" in messages(items, "large.py")[0]


def test_default_max_file_size_is_5_mb() -> None:
    assert Config().max_file_size == 5 * 1024 * 1024


def test_a_directory_named_like_a_python_file(tmp_path: Path) -> None:
    (tmp_path / "x.py").mkdir()
    write(tmp_path / "x.py" / "inner.py", CKP102_SOURCE)
    items = findings(run(tmp_path, "x.py", "--format", "json", "--no-cache"))
    assert by_file(items) == {"inner.py": ["CKP102"]}
    items = findings(run(tmp_path, ".", "--format", "json", "--no-cache"))
    assert by_file(items) == {"inner.py": ["CKP102"]}


def test_a_symlinked_folder_loop_is_walked_once(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    write(package / "mod.py", CKP102_SOURCE)
    (package / "again").symlink_to(package, target_is_directory=True)
    items = findings(run(tmp_path, ".", "--format", "json", "--no-cache"))
    assert [i["code"] for i in items] == ["CKP102"]


def test_a_path_that_does_not_exist_is_a_ckp999(tmp_path: Path) -> None:
    result = run(tmp_path, "missing.py")
    assert result.returncode == 1
    assert result.stdout == "missing.py:1:1: CKP999 cannot read: No such file or directory\n"
    assert "Traceback" not in result.stderr


def test_linting_never_executes_the_file(tmp_path: Path) -> None:
    marker = tmp_path / "executed.txt"
    source = (SITE + f"open({str(marker)!r}, 'w').write('ran')\n"
              "import os\nos.system('touch ' + " + repr(str(marker)) + ")\n"
              "def f(x):\n    return x\n\ny = checkpoint(f, 1)\n")
    write(tmp_path / "dangerous.py", source)
    items = findings(run(tmp_path, ".", "--format", "json", "--no-cache"))
    assert by_file(items) == {"dangerous.py": ["CKP102"]}
    assert not marker.exists()


@pytest.mark.parametrize("table, expected", [
    ("[tool.ckptlint]\nselect = [\"CKP1\"\n", "invalid TOML"),
    ("[tool.ckptlint]\nunknown-key = 1\n", "unknown key `unknown-key`"),
    ("[tool.ckptlint]\nmax-file-size = -1\n", "key `max-file-size`: expected a non-negative"),
    ("[tool.ckptlint]\nselect = [\"XYZ9\"]\n", "key `select`"),
])
def test_config_errors_exit_2_with_a_clear_message(tmp_path: Path, table: str,
                                                   expected: str) -> None:
    write(tmp_path / "pyproject.toml", table)
    write(tmp_path / "mod.py", CKP102_SOURCE)
    result = run(tmp_path, ".")
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_codes_in_select_exit_2(tmp_path: Path) -> None:
    write(tmp_path / "mod.py", CKP102_SOURCE)
    for option in ("--select", "--ignore", "--extend-select"):
        result = run(tmp_path, ".", option, "CKP777")
        assert result.returncode == 2, option
        assert "unknown rule selector `CKP777`" in result.stderr
        assert "Traceback" not in result.stderr


def test_malformed_noqa_is_ignored_as_flake8_does(tmp_path: Path) -> None:
    source = CKP102_SOURCE.replace("return checkpoint(block, x)",
                                   "return checkpoint(block, x)  # noqa:::,,")
    write(tmp_path / "mod.py", source + "z = 1  # noqa: \n# noqa:CKP\n")
    items = findings(run(tmp_path, ".", "--format", "json", "--no-cache"))
    assert all(i["code"] in ("CKP102",) for i in items)


# -- dead workers -----------------------------------------------------------------------------
def die() -> None:
    import faulthandler

    faulthandler.disable()  # (pytest's would print the dying worker's stack)
    os.kill(os.getpid(), signal.SIGSEGV)


@pytest.fixture(params=["main screens", "workers screen"])
def screening(request, monkeypatch) -> str:
    """Both ways a run hands files to workers: only the candidates (few files), or chunks of
    every file (many files; forced here by lowering the threshold)."""
    if request.param == "workers screen":
        monkeypatch.setattr(Run, "CHUNKED_MIN_FILES", 1)
    return request.param


@pytest.mark.skipif(sys.platform != "linux", reason="workers inherit the patch through fork")
def test_a_worker_that_dies_costs_one_file(tmp_path: Path, monkeypatch, screening) -> None:
    """A crash in libcst's native parser (here a SIGSEGV in the analysis) costs one file."""
    for name in ("a.py", "b_crash.py", "c.py", "d.py"):
        write(tmp_path / name, CKP102_SOURCE)
    original = Analysis.lint_module

    def crash_on_one(self, path, display, *args, **kwargs):
        if "crash" in display:
            die()
        return original(self, path, display, *args, **kwargs)

    monkeypatch.setattr(Analysis, "lint_module", crash_on_one)
    result = lint([str(tmp_path)], Config(root=tmp_path), jobs=2)
    codes = {Path(f.filename).name: f.code for f in result.findings}
    assert codes == {"a.py": "CKP102", "b_crash.py": "CKP999", "c.py": "CKP102",
                     "d.py": "CKP102"}
    crashed = [f for f in result.findings if f.code == "CKP999"][0]
    assert "process died" in crashed.message
    assert result.stats["worker_deaths"] == 1


@pytest.mark.skipif(sys.platform != "linux", reason="workers inherit the patch through fork")
def test_a_worker_that_dies_while_screening_costs_one_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(Run, "CHUNKED_MIN_FILES", 1)
    for name in ("a.py", "b_crash.py", "c.py", *(f"clean{i}.py" for i in range(40))):
        write(tmp_path / name, CKP102_SOURCE if not name.startswith("clean") else "x = 1\n")
    original = Linter.may_hold_site

    def crash_on_one(self, path, text):
        if "crash" in str(path):
            die()
        return original(self, path, text)

    monkeypatch.setattr(Linter, "may_hold_site", crash_on_one)
    result = lint([str(tmp_path)], Config(root=tmp_path), jobs=2)
    codes = {Path(f.filename).name: f.code for f in result.findings}
    assert codes == {"a.py": "CKP102", "b_crash.py": "CKP999", "c.py": "CKP102"}
    assert result.files == 43
    assert result.stats["worker_deaths"] == 1


def test_a_run_with_workers_leaves_the_collector_as_it_found_it(tmp_path: Path,
                                                                 screening) -> None:
    """The objects frozen for the fork are unfrozen: a long-lived caller (an editor, a test
    runner) still has its garbage collected."""
    import gc

    for name in ("a.py", "b.py"):
        write(tmp_path / name, CKP102_SOURCE)
    before = gc.get_freeze_count()
    result = lint([str(tmp_path)], Config(root=tmp_path), jobs=2)
    assert result.stats["pool"] and [f.code for f in result.findings] == ["CKP102"] * 2
    assert gc.get_freeze_count() == before and gc.isenabled()


@pytest.mark.skipif(sys.platform != "linux", reason="workers inherit the patch through fork")
def test_every_worker_dying_still_ends_the_run(tmp_path: Path, monkeypatch, screening) -> None:
    for name in ("a.py", "b.py", "c.py"):
        write(tmp_path / name, CKP102_SOURCE)
    monkeypatch.setattr(Analysis, "lint_module",
                        lambda self, *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL))
    result = lint([str(tmp_path)], Config(root=tmp_path), jobs=2)
    assert sorted(f.code for f in result.findings) == ["CKP999"] * 3


def test_an_internal_error_in_one_file_is_that_file_s_ckp999(tmp_path: Path, monkeypatch) -> None:
    write(tmp_path / "a.py", CKP102_SOURCE)
    write(tmp_path / "b_bug.py", CKP102_SOURCE)
    original = Analysis.lint_module

    def buggy(self, path, display, *args, **kwargs):
        if "bug" in display:
            raise ValueError("a bug")
        return original(self, path, display, *args, **kwargs)

    monkeypatch.setattr(Analysis, "lint_module", buggy)
    result = lint([str(tmp_path)], Config(root=tmp_path), jobs=1)
    codes = {Path(f.filename).name: f.code for f in result.findings}
    assert codes == {"a.py": "CKP102", "b_bug.py": "CKP999"}
    assert "internal error" in [f for f in result.findings if f.code == "CKP999"][0].message


# -- real trees (CI runs these) -----------------------------------------------------------------
def stdlib_folder() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


@pytest.mark.slow
@pytest.mark.parametrize("which", ["stdlib", "torch"])
def test_real_trees_lint_without_a_traceback(which: str, tmp_path: Path) -> None:
    if which == "torch":
        torch_spec = __import__("importlib.util").util.find_spec("torch")
        if torch_spec is None or torch_spec.origin is None:
            pytest.skip("torch is not installed")
        folder = Path(torch_spec.origin).parent
    else:
        folder = stdlib_folder()
    extra = ["--extend-exclude", "site-packages"] if which == "stdlib" else []
    result = run(tmp_path, str(folder), "--no-cache", *extra, "--format", "json",
                 env={"CKPTLINT_STATS": "1"})
    assert result.returncode in (0, 1), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    json.loads(result.stdout)
    stats = json.loads(result.stderr.strip().splitlines()[-1])
    assert stats["files"] > 1000, stats


def test_undecodable_stdin_is_a_ckp999_not_a_traceback(tmp_path: Path) -> None:
    import subprocess

    from tests.cli_helpers import ckptlint_command

    completed = subprocess.run([*ckptlint_command(), "-", "--stdin-filename", "bad.py",
                                "--format", "json", "--no-cache"], cwd=tmp_path,
                               input=b"x = 'caf\xe9'\n" + SITE.encode(), capture_output=True,
                               timeout=120)
    assert completed.returncode == 1
    assert b"Traceback" not in completed.stderr
    items = json.loads(completed.stdout)
    assert [(i["filename"], i["code"]) for i in items] == [("bad.py", "CKP999")]
