"""The trust boundary: a linted repository can plant files, but cannot make ckptlint run
its code, write outside it or delete what it did not write (docs/security.md).

Each attack is planted in a real repository (`git init`), then ckptlint runs every way it
runs in CI: without the cache, with it (cold, then warm) and with `--fix --unsafe-fixes`.
Every attack's payload, when it works, creates a marker file next to the repository; and
nothing at all may appear outside the repository.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ckptlint.engine import cache as cache_module
from ckptlint.storage import atomic
from ckptlint.storage.plain_data import write_json
from tests.cli_helpers import CKP102_SOURCE, REPO, run_cli, run_cli_process

FIXED = "checkpoint(block, x, use_reentrant=False)"


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository holding one file with a fixable finding, in its own folder."""
    root = tmp_path / "repo"
    root.mkdir()
    git("init", "-q", cwd=root)
    (root / "pyproject.toml").write_text('[tool.ckptlint]\ntransformers-version = "4.46.0"\n')
    (root / "model.py").write_text(CKP102_SOURCE)
    return root


def outside(repo: Path) -> set[str]:
    """Everything next to the repository (below its parent folder, itself excluded)."""
    found = set()
    for folder, dirs, files in os.walk(repo.parent):
        if Path(folder) == repo.parent:
            dirs[:] = [d for d in dirs if d != repo.name]
        found.update(os.path.join(folder, name) for name in (*dirs, *files))
    return found


def ckptlint(repo: Path, *args: str, env: dict[str, str] | None = None, runner=run_cli):
    # CKPTLINT_CACHE_DIR empty: the cache goes where the project says, as in CI.
    return runner(*args, cwd=repo, env={"CKPTLINT_CACHE_DIR": "", **(env or {})})


def run_every_way(repo: Path, *paths: str, env: dict[str, str] | None = None) -> list:
    """Uncached, cached cold and warm, then fixing model.py (written afresh first)."""
    paths = paths or (".",)
    (repo / "model.py").write_text(CKP102_SOURCE)
    results = [ckptlint(repo, "--no-cache", *paths, env=env),
               ckptlint(repo, *paths, env=env), ckptlint(repo, *paths, env=env),
               ckptlint(repo, "--fix", "--unsafe-fixes", *paths, env=env)]
    for result in results[:3]:
        assert result.returncode == 1 and "model.py:9:12: CKP102" in result.stdout, result
    assert results[3].returncode == 0, results[3]
    assert FIXED in (repo / "model.py").read_text()
    return results


def assert_contained(repo: Path, before: set[str], marker: Path) -> None:
    assert not marker.exists(), "the planted command ran"
    assert outside(repo) == before, "something was created or removed outside the repository"


# -- the cache --------------------------------------------------------------------------------
class RunsWhenUnpickled:
    """A pickle that creates a file when loaded (as any crafted pickle could run anything)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def run_file(repo: Path, folder: str) -> Path:
    """The run file ckptlint writes here (learnt from a run)."""
    ckptlint(repo, ".")
    [path] = (repo / folder).glob("run-*.json")
    return path


def pickle_cache_name(repo: Path, json_name: str, monkeypatch) -> str:
    """The run file's name when the cache was a pickle (format 1, before this boundary):
    what a repository predicting the run key would have committed."""
    from ckptlint.config import load_config
    from ckptlint.engine import cache as cache_module
    from ckptlint.engine.linter import Linter

    monkeypatch.chdir(repo)
    config = load_config(["."])
    roots = Linter(config).project.roots
    assert f"run-{cache_module.run_key(config, roots)}.json" == json_name
    monkeypatch.setattr(cache_module, "FORMAT", 1)
    return f"run-{cache_module.run_key(config, roots)}.pickle"


@pytest.mark.parametrize("cache_dir", [None, "docs/img"])
def test_a_pickle_planted_as_the_cache_never_runs(repo: Path, cache_dir: str | None,
                                                  monkeypatch) -> None:
    marker = repo.parent / "unpickled"
    if cache_dir is not None:
        with open(repo / "pyproject.toml", "a") as stream:
            stream.write(f'cache-dir = "{cache_dir}"\n')
    folder = cache_dir or ".ckptlint_cache"
    name = run_file(repo, folder).name
    for written in (repo / folder).iterdir():
        written.unlink()
    payload = pickle.dumps(RunsWhenUnpickled(marker))
    assert not marker.exists()
    pickle.loads(payload)  # the payload works...
    assert marker.exists()
    marker.unlink()
    for planted in (name, name.replace(".json", ".pickle"),
                    pickle_cache_name(repo, name, monkeypatch)):
        (repo / folder / planted).write_bytes(payload)
    git("add", "-A", cwd=repo)
    before = outside(repo)
    run_every_way(repo)  # ...and ckptlint never loads it
    assert_contained(repo, before, marker)


def test_no_module_outside_dynamic_mode_imports_a_code_running_format() -> None:
    """pickle, marshal and their kin run code from the bytes they load."""
    banned = {"pickle", "_pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle",
              "jsonpickle", "joblib"}
    package = REPO / "ckptlint"
    offenders = []
    checked = 0
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] == "dynamic":
            continue
        checked += 1
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif (isinstance(node, ast.Call) and node.args
                  and isinstance(node.args[0], ast.Constant)
                  and getattr(node.func, "attr", getattr(node.func, "id", None))
                  in ("__import__", "import_module")):
                names = [str(node.args[0].value)]
            else:
                continue
            offenders += [f"{path.name}:{node.lineno}: {name}" for name in names
                          if name.split(".")[0] in banned]
    assert checked > 40 and offenders == []


# -- where the cache may go -------------------------------------------------------------------
@pytest.mark.parametrize("value", ["../elsewhere", "sub/../../elsewhere", "{outside}",
                                   "link", "link/deeper", "loop"])
def test_a_project_cache_dir_leading_out_of_the_project_is_refused(repo: Path,
                                                                    value: str) -> None:
    elsewhere = repo.parent / "elsewhere"
    elsewhere.mkdir()
    (repo / "link").symlink_to(elsewhere)
    (repo / "loop").symlink_to(repo / "loop")
    value = value.format(outside=elsewhere)
    with open(repo / "pyproject.toml", "a") as stream:
        stream.write(f'cache-dir = "{value}"\n')
    before = outside(repo)
    for args in ((".",), ("--fix", "--unsafe-fixes", ".")):
        result = ckptlint(repo, *args)
        assert result.returncode == 2 and result.stdout == ""
        [line] = result.stderr.splitlines()
        assert str(repo / "pyproject.toml") in line and "`cache-dir`" in line, line
        assert "inside" in line and value in line
    assert CKP102_SOURCE == (repo / "model.py").read_text()
    assert outside(repo) == before and list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("value", ["build/lint-cache", "{repo}/cache", "inner-link/cache"])
def test_a_project_cache_dir_inside_the_project_is_used(repo: Path, value: str) -> None:
    (repo / "real").mkdir()
    (repo / "inner-link").symlink_to(repo / "real")
    with open(repo / "pyproject.toml", "a") as stream:
        stream.write(f'cache-dir = "{value.format(repo=repo)}"\n')
    before = outside(repo)
    run_every_way(repo)
    folder = repo / value.format(repo=repo)
    assert list(folder.glob("run-*.json"))
    assert outside(repo) == before


def test_the_user_may_put_the_cache_anywhere(repo: Path) -> None:
    """CKPTLINT_CACHE_DIR and a config file named with --config are the user's own."""
    elsewhere = repo.parent / "elsewhere"
    result = ckptlint(repo, ".", env={"CKPTLINT_CACHE_DIR": str(elsewhere / "env")})
    assert result.returncode == 1 and list((elsewhere / "env").glob("run-*.json"))
    named = repo.parent / "lint.toml"
    named.write_text(f'cache-dir = "{elsewhere / "named"}"\ntransformers-version = "4.46.0"\n')
    result = ckptlint(repo, "--config", str(named), ".")
    assert result.returncode == 1 and list((elsewhere / "named").glob("run-*.json"))
    nested = repo.parent / "configs" / "lint.toml"
    nested.parent.mkdir()
    nested.write_text('cache-dir = "../elsewhere/relative"\n')
    assert ckptlint(repo, "--config", str(nested), ".").returncode == 1
    assert list((elsewhere / "relative").glob("run-*.json"))


@pytest.mark.parametrize("linked", ["folder", "run file", "configured folder"])
def test_a_linked_cache_is_neither_read_nor_written(repo: Path, linked: str) -> None:
    configured = linked == "configured folder"
    if configured:
        with open(repo / "pyproject.toml", "a") as stream:
            stream.write('cache-dir = "lint-cache"\n')
    path = run_file(repo, "lint-cache" if configured else ".ckptlint_cache")
    # A run file that claims model.py has no findings: read, it hides the finding.
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        entry[5:7] = [[], []]
    path.write_text(json.dumps(data))
    assert ckptlint(repo, ".").returncode == 0
    elsewhere = repo.parent / "elsewhere"
    elsewhere.mkdir()
    folder = path.parent
    if linked == "run file":
        os.replace(path, elsewhere / path.name)
        path.symlink_to(elsewhere / path.name)
    else:  # a link to a folder inside the project is refused as well
        moved = repo / "inner-cache" if configured else elsewhere / "cache"
        os.rename(folder, moved)
        folder.symlink_to(moved)
    target = path.resolve()
    stored = target.read_bytes()
    listed = sorted(target.parent.iterdir())
    before = outside(repo)
    results = run_every_way(repo)  # each finds CKP102: the claim is not read
    assert "symbolic link" not in results[0].stderr  # --no-cache
    for result in results[1:]:
        assert result.stderr.count("symbolic link") == 1, result.stderr
        assert "running without the cache" in result.stderr
    assert target.read_bytes() == stored and sorted(target.parent.iterdir()) == listed
    assert (path if linked == "run file" else folder).is_symlink()
    assert outside(repo) == before


def test_a_fifo_as_the_run_file_does_not_hang_the_run(repo: Path) -> None:
    path = run_file(repo, ".ckptlint_cache")
    path.unlink()
    os.mkfifo(path)
    result = ckptlint(repo, ".", runner=run_cli_process)  # (a hang fails at the timeout)
    assert result.returncode == 1 and "CKP102" in result.stdout


# -- git --------------------------------------------------------------------------------------
def write_bare_repository_shape(folder: Path, command: str) -> None:
    """What git takes for a bare repository, with a command to run on every index read."""
    for name in ("objects", "refs"):
        (folder / name).mkdir(parents=True)
    (folder / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n"
        f"\tfsmonitor = \"{command}\"\n")


def test_git_never_runs_a_command_from_a_folder_shaped_like_a_bare_repository(
        repo: Path) -> None:
    marker = repo.parent / "fsmonitor-ran"
    evil = repo / "pkg" / "evil"
    write_bare_repository_shape(evil, f"touch {marker}; false")
    (evil / "layer.py").write_text("x = 1\n")
    git("add", "-A", cwd=repo)
    # Without the explicit --git-dir, git asked from inside that folder runs the command.
    subprocess.run(["git", "check-ignore", "layer.py"], cwd=evil, capture_output=True)
    assert marker.exists()
    marker.unlink()
    before = outside(repo)
    run_every_way(repo, ".")
    run_every_way(repo, "pkg/evil", "model.py")
    assert_contained(repo, before, marker)


def test_a_bare_repository_shape_outside_any_git_work_tree_is_never_handed_to_git(
        tmp_path: Path) -> None:
    """A tarball: no `.git` anywhere above, so git is not asked at all."""
    root = tmp_path / "unpacked"
    marker = tmp_path / "fsmonitor-ran"
    write_bare_repository_shape(root / "evil", f"touch {marker}; false")
    (root / "pyproject.toml").write_text('[tool.ckptlint]\ntransformers-version = "4.46.0"\n')
    (root / "model.py").write_text(CKP102_SOURCE)
    (root / "evil" / "layer.py").write_text("x = 1\n")
    before = outside(root)
    run_every_way(root, ".")
    run_every_way(root, "evil", "model.py")
    assert_contained(root, before, marker)


def test_git_never_runs_commands_from_the_linted_trees_own_git_config(repo: Path) -> None:
    """A tarball or zip can ship `.git/` too: its config and hooks are untrusted."""
    marker = repo.parent / "git-config-ran"
    git("config", "core.fsmonitor", f"touch {marker}; false", cwd=repo)
    git("config", "core.hooksPath", ".git/hooks", cwd=repo)
    hooks = repo / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("post-index-change", "pre-commit", "post-checkout", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / hook).chmod(0o755)
    (repo / "generated").mkdir()
    (repo / "generated" / "model.py").write_text(CKP102_SOURCE)
    (repo / ".gitignore").write_text("generated/\n")
    subprocess.run(["git", "check-ignore", "generated/model.py"], cwd=repo,
                   capture_output=True)
    assert marker.exists()  # git as usually run does run it
    marker.unlink()
    before = outside(repo)
    results = run_every_way(repo, ".")
    assert all("generated/model.py" not in result.stdout for result in results)
    assert_contained(repo, before, marker)


def test_git_answers_for_the_work_tree_found_whatever_git_variables_say(
        repo: Path, tmp_path: Path) -> None:
    """GIT_DIR and friends (set in git hooks) name another repository: they are not used."""
    other = tmp_path / "other"
    other.mkdir()
    git("init", "-q", cwd=other)
    (repo / "generated").mkdir()
    (repo / "generated" / "model.py").write_text(CKP102_SOURCE)
    (repo / ".gitignore").write_text("generated/\n")
    env = {"GIT_DIR": str(other / ".git"), "GIT_WORK_TREE": str(other),
           "GIT_INDEX_FILE": str(other / ".git" / "index")}
    result = ckptlint(repo, ".", env=env)
    assert result.returncode == 1 and "generated" not in result.stdout, result.stdout


# -- temporary files --------------------------------------------------------------------------
KILLED_WRITER = """\
import os, sys, time
from pathlib import Path
from ckptlint.engine import cache as cache_module
from ckptlint.storage import atomic
from ckptlint.storage.plain_data import write_json

def stall(fd):  # the data is written: stop here, as a run killed mid-write would
    print("written", flush=True)
    time.sleep(600)

os.fsync = stall
atomic.write_atomic(Path(sys.argv[1]), b"half of a file")
"""


def kill_while_writing(path: Path) -> tuple[int, Path]:
    """A real process killed (SIGKILL) inside write_atomic: its pid and its leftover."""
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path)],
                             stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert child.stdout.readline().strip() == "written"
    child.send_signal(signal.SIGKILL)
    child.wait()
    [leftover] = [p for p in path.parent.iterdir() if p.name.endswith(".ckptlint-tmp")
                  and f"-{child.pid}." in p.name]
    return child.pid, leftover


def not_ours(folder: Path, dead_pid: int) -> list[Path]:
    """Files the sweep must keep: a live writer's, another machine's, other shapes, a link."""
    host = atomic.host_tag()
    other_host = "0000000" + ("1" if host != "00000001" else "2")
    kept = [folder / f".model.py.{host}-{os.getpid()}.abcd1234.ckptlint-tmp",
            folder / f".model.py.{other_host}-{dead_pid}.abcd1234.ckptlint-tmp",
            folder / ".model.py.abcd1234.ckptlint-tmp",  # no pid: its writer is unknown
            folder / f"model.py.{host}-{dead_pid}.abcd1234.ckptlint-tmp",  # not hidden
            folder / f".model.py.{host}-{dead_pid}.abcd1234.tmp"]
    for path in kept:
        path.write_text("keep me")
    link = folder / f".linked.{host}-{dead_pid}.abcd1234.ckptlint-tmp"
    link.symlink_to(folder / "pyproject.toml")
    return [*kept, link]


def test_a_run_removes_the_temporaries_of_killed_writers_and_nothing_else(repo: Path) -> None:
    dead_pid, leftover = kill_while_writing(repo / "model.py")
    assert leftover.read_bytes() == b"half of a file"
    assert not atomic.process_alive(dead_pid)
    kept = not_ours(repo, dead_pid)
    (repo / ".ckptlint_cache").mkdir()
    _, cache_leftover = kill_while_writing(repo / ".ckptlint_cache" / "run-x.json")
    kept += not_ours(repo / ".ckptlint_cache", dead_pid)
    before = outside(repo)
    ckptlint(repo, ".")  # writes the cache: its folder is swept
    assert not cache_leftover.exists() and leftover.exists()
    ckptlint(repo, "--fix", "--unsafe-fixes", "model.py")  # writes model.py: its folder too
    assert not leftover.exists()
    assert FIXED in (repo / "model.py").read_text()
    assert all(path.is_symlink() or path.read_text() == "keep me" for path in kept)
    assert sum(path.is_symlink() for path in kept) == 2
    assert (repo / "pyproject.toml").read_text().startswith("[tool.ckptlint]")
    assert outside(repo) == before


def test_temporary_names_carry_the_writer_and_fit_any_file_name(tmp_path: Path) -> None:
    long_name = tmp_path / ("é" * 126 + ".py")  # 255 bytes, the longest a name may be
    atomic.write_atomic(long_name, b"x = 1\n")
    assert long_name.read_bytes() == b"x = 1\n"
    dead_pid, leftover = kill_while_writing(long_name)
    assert f".{atomic.host_tag()}-{dead_pid}." in leftover.name
    assert atomic.remove_dead_temporaries(tmp_path) == [leftover.name]
    assert sorted(tmp_path.iterdir()) == [long_name]


def test_a_process_sweeps_each_folder_once_however_many_files_it_writes_there(
        tmp_path: Path) -> None:
    """The summary store writes thousands of entries into one folder: listing the folder
    before each write cost more than the writes. A process sweeps a folder on its first
    write there; a leftover appearing later is removed by the next process writing there."""
    folder = tmp_path / "summaries"
    folder.mkdir()
    write_json(folder / "first.json", {"n": 1}, durable=False)
    dead_pid, leftover = kill_while_writing(folder / "entry.json")
    write_json(folder / "second.json", {"n": 2}, durable=False)
    assert leftover.exists()
    subprocess.run([sys.executable, "-c",
                    "import sys; from pathlib import Path; "
                    "from ckptlint.storage.plain_data import write_json; "
                    "write_json(Path(sys.argv[1]), {'n': 3})", str(folder / "third.json")],
                   check=True, cwd=REPO)
    assert not leftover.exists()
    assert sorted(path.name for path in folder.iterdir()) == ["first.json", "second.json",
                                                              "third.json"]


def test_a_cached_position_of_the_right_shape_but_absurd_size_costs_nothing(
        repo: Path) -> None:
    """Columns far past the line's end, in a run file that is otherwise valid."""
    path = run_file(repo, ".ckptlint_cache")
    data = json.loads(path.read_text())
    [finding] = data["entries"]["model.py"][5]
    finding["location"]["column"] = finding["end_location"]["column"] = 2**31 - 1
    path.write_text(json.dumps(data))
    result = ckptlint(repo, "--format", "full", ".")
    assert result.returncode == 1 and f"model.py:9:{2**31 - 1}: CKP102" in result.stdout
    assert len(result.stdout) < 2000



@pytest.mark.parametrize("planted", ["inside", "outside", "link to outside", "device",
                                     "relative"])
def test_a_planted_dependency_outside_the_tree_is_never_read(repo: Path, planted: str) -> None:
    """A run file of the right shape that hides model.py's finding, valid only if a file
    outside the tree holds given bytes: believing it would let the tree learn those bytes
    (or hang the run on a device). Such an entry is a miss: the finding comes back. The
    same entry naming a file inside the tree is believed (what makes the others a test)."""
    secret = repo.parent / "secret.txt"
    secret.write_text("token\n")
    (repo / "inner-link.py").symlink_to(secret)
    (repo / "inside.txt").write_text("token\n")
    dependency = {"inside": str(repo / "inside.txt"), "outside": str(secret),
                  "link to outside": str(repo / "inner-link.py"), "device": "/dev/zero",
                  "relative": "../secret.txt"}[planted]
    path = run_file(repo, ".ckptlint_cache")
    data = json.loads(path.read_text())
    entry = data["entries"]["model.py"]
    entry[5] = []  # no findings
    entry[7] = [[dependency, cache_module.digest(b"token\n")]]
    data["digests"] = {}
    path.write_text(json.dumps(data))
    result = ckptlint(repo, ".", runner=run_cli_process)  # (a hang fails at the timeout)
    if planted == "inside":
        assert result.returncode == 0 and "CKP102" not in result.stdout, result
    else:
        assert result.returncode == 1 and "model.py:9:12: CKP102" in result.stdout, result

# -- symbolic links out of the tree -------------------------------------------------------------
def test_links_leading_out_of_the_tree_are_not_followed(repo: Path) -> None:
    """A committed link to a folder or a file outside the tree is neither linted nor fixed;
    a link that stays inside the tree is followed."""
    elsewhere = repo.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "victim.py").write_text(CKP102_SOURCE)
    (repo / "folder_out").symlink_to(elsewhere)
    (repo / "file_out.py").symlink_to(elsewhere / "victim.py")
    (repo / "inner").mkdir()
    (repo / "inner" / "real.py").write_text(CKP102_SOURCE)
    (repo / "inner_link.py").symlink_to(repo / "inner" / "real.py")
    before = outside(repo)
    results = run_every_way(repo)
    for result in results[:3]:
        assert "victim" not in result.stdout and "_out" not in result.stdout, result.stdout
        assert "inner/real.py:9:12: CKP102" in result.stdout
        assert "inner_link.py:9:12: CKP102" in result.stdout
    assert (elsewhere / "victim.py").read_text() == CKP102_SOURCE
    assert outside(repo) == before


def test_a_link_named_on_the_command_line_is_the_users_choice(repo: Path) -> None:
    elsewhere = repo.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "victim.py").write_text(CKP102_SOURCE)
    (repo / "file_out.py").symlink_to(elsewhere / "victim.py")
    result = ckptlint(repo, "--no-cache", "file_out.py")
    assert result.returncode == 1 and "file_out.py:9:12: CKP102" in result.stdout
