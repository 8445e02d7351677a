"""Work done once per run, not once per worker; parsed modules kept within a budget.

Forked analysing workers use the parent's `Linter`: its rules, resolver and text index are
built once, in the parent, before they fork. Each analysing process keeps the libcst trees of
the modules it parsed only up to `PARSED_BUDGET` characters of text; past it, it drops the
modules fewest files reached, with every answer derived from libcst trees, and the findings
stay the same. Texts with characters past ASCII are kept as UTF-8.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
from pathlib import Path

import pytest

from ckptlint.analysis.project import Project
from ckptlint.analysis.textindex import TextIndex
from ckptlint.config import Config
from ckptlint.engine import linter as linter_module
from ckptlint.engine.linter import Analysis, Linter
from ckptlint.engine.run import lint
from ckptlint.syntax.source import SourceModule
from tests.cli_helpers import CKP102_SOURCE

FIXTURES = Path(__file__).parent / "fixtures"
HELPER = "import torch\n\n\ndef block(x):\n    return torch.relu(x) * 2\n"
USER = ("from torch.utils.checkpoint import checkpoint\n\nfrom pkg.helper import block\n\n\n"
        "def forward(x):\n    return checkpoint(block, x)\n")


def package(tmp_path: Path, users: int, helper: str = HELPER) -> Path:
    """A package whose `users` modules each checkpoint a function of one helper module."""
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "helper.py").write_text(helper)
    for index in range(users):
        (root / f"user{index}.py").write_text(USER + "\n" * index)
    return root


def linter_within_budget(tmp_path: Path, root: Path, monkeypatch,
                         budget: int) -> tuple[Linter, list[int]]:
    """A linter for the package at `root` keeping parsed modules within `budget` characters,
    and the list that gains an item each time its analysis is renewed (modules dropped)."""
    linter = Linter(Config(root=tmp_path))
    linter.project.add_root_for(root / "helper.py")
    monkeypatch.setattr(linter_module, "PARSED_BUDGET", budget)
    renewals: list[int] = []
    original = linter_module.Analysis.renewed
    monkeypatch.setattr(linter_module.Analysis, "renewed",
                        lambda self: renewals.append(1) or original(self))
    return linter, renewals


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
def test_forked_workers_use_the_rules_resolver_and_text_index_built_in_the_parent(
        tmp_path: Path, monkeypatch) -> None:
    for name in ("a.py", "b.py", "c.py", "d.py"):
        (tmp_path / name).write_text(CKP102_SOURCE)
    log = tmp_path / "built.log"

    def logged(original, what: str):
        def wrapper(self, *args, **kwargs):
            if what == "analysis" or not self._built:
                with open(log, "a") as stream:
                    stream.write(f"{what} {os.getpid()}\n")
            return original(self, *args, **kwargs)
        return wrapper

    monkeypatch.setattr(Analysis, "__init__", logged(Analysis.__init__, "analysis"))
    monkeypatch.setattr(TextIndex, "build", logged(TextIndex.build, "index"))
    result = lint([str(tmp_path)], Config(root=tmp_path), jobs=2)
    assert result.stats["pool"] and [f.code for f in result.findings] == ["CKP102"] * 4
    assert sorted(log.read_text().split("\n")[:-1]) == [f"analysis {os.getpid()}",
                                                         f"index {os.getpid()}"]


def test_parsed_modules_are_kept_within_the_budget_the_most_reached_first(
        tmp_path: Path, monkeypatch) -> None:
    root = package(tmp_path, users=6)
    budget = len(HELPER) + 3 * len(USER)
    linter, parses = linter_within_budget(tmp_path, root, monkeypatch, budget)
    for index in range(6):
        path = root / f"user{index}.py"
        result = linter.lint_file(path, str(path))
        assert [f.code for f in result.findings] == ["CKP102"]
        assert [s.targets for s in result.sites] != [()]  # `block`, in the helper
        kept = linter.project.parsed_sizes()
        assert sum(kept.values()) <= budget
        assert (root / "helper.py").resolve() in kept  # every file reaches it
    assert parses  # the budget was passed, and modules dropped


def test_findings_are_the_same_when_every_parsed_module_is_dropped_after_each_file(
        monkeypatch) -> None:
    def findings(budget: int) -> list[dict]:
        monkeypatch.setattr(linter_module, "PARSED_BUDGET", budget)
        config = Config(root=FIXTURES, extend_select=("CKP901",))
        result = lint([str(FIXTURES)], config, jobs=1)
        return [dataclasses.asdict(finding) for finding in result.findings]

    kept = findings(10 ** 9)
    assert len(kept) > 100
    assert findings(0) == kept


def test_a_text_with_wide_characters_is_kept_as_utf8_and_read_back_the_same(
        tmp_path: Path) -> None:
    text = "# 🤗 " + "x = 1\n" * 2000 + "s = 'é'\n"
    path = tmp_path / "wide.py"
    path.write_text(text, encoding="utf-8")
    project = Project([tmp_path])
    assert project.source_text(path) == text
    assert project.source_text(path) == text  # again, from what the project keeps
    kept = sum(sys.getsizeof(value) for value in project._texts.values())
    assert kept < sys.getsizeof(text) // 3  # a str takes 4 bytes for each character here


def test_dropped_modules_leave_no_cycles_for_the_collector(tmp_path: Path, monkeypatch) -> None:
    """A dropped module's scopes and bindings refer to each other: unlinked, its tree goes by
    reference counting, so freezing what survives each file (`freeze_between_files`) leaks
    nothing."""
    root = package(tmp_path, users=6)
    linter = Linter(Config(root=tmp_path))
    linter.project.add_root_for(root / "helper.py")
    monkeypatch.setattr(linter_module, "PARSED_BUDGET", 0)  # drop every module after each file
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for index in range(6):
            path = root / f"user{index}.py"
            assert [f.code for f in linter.lint_file(path, str(path)).findings] == ["CKP102"]
        assert linter.project.parsed_sizes() == {}
        unreachable = gc.collect()
    finally:
        if collecting:
            gc.enable()
    assert unreachable < 50  # six dropped files' scopes left thousands before


def test_a_run_freezes_what_each_file_leaves_and_unfreezes_it_at_the_end(
        tmp_path: Path, monkeypatch) -> None:
    root = package(tmp_path, users=3)
    frozen = []
    original = Linter._check_candidate
    monkeypatch.setattr(Linter, "_check_candidate", lambda self, *args: (
        frozen.append(self.freeze_between_files), original(self, *args))[1])
    before = gc.get_freeze_count()
    result = lint([str(root)], Config(root=tmp_path), jobs=1)
    assert [f.code for f in result.findings] == ["CKP102"] * 3
    assert frozen and all(frozen)
    assert gc.get_freeze_count() == before == 0


def test_positions_are_dropped_after_each_analysed_file(tmp_path: Path) -> None:
    """Positions are asked for by the file being analysed; kept modules hold none between
    files (they were a quarter of a worker's memory), and come back when asked for."""
    root = package(tmp_path, users=2)
    linter = Linter(Config(root=tmp_path))
    linter.project.add_root_for(root / "helper.py")
    first = linter.lint_file(root / "user0.py", str(root / "user0.py"))
    kept = [module for module in linter.project._by_path.values() if module is not None]
    assert kept and all(module._positions is None for module in kept)
    second = linter.lint_file(root / "user1.py", str(root / "user1.py"))
    assert [f.start for f in first.findings] == [f.start for f in second.findings]


def test_dropped_modules_are_freed_when_the_analysis_is_renewed(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """What a renewed analysis takes over (the phases, the training setup) must not lead back
    to the model it replaces: that one holds the dropped modules' trees (the phases once
    held it through a closure, and every renewal kept every tree dropped before it)."""
    root = package(tmp_path, users=4, helper="import torch\n\nSCALE = 2\n\n\ndef block(x):\n"
                                             "    return torch.relu(x) * SCALE\n")
    # A budget of 0: every module is dropped after each file.
    linter, renewals = linter_within_budget(tmp_path, root, monkeypatch, 0)
    for index in range(4):
        path = root / f"user{index}.py"
        assert [f.code for f in linter.lint_file(path, str(path)).findings] == ["CKP102"]
    assert len(renewals) == 4 and linter.project.parsed_sizes() == {}
    assert linter.analysis.context.bindings._modules == {}
    gc.collect()
    alive = [obj.path for obj in gc.get_objects()
             if isinstance(obj, SourceModule) and obj.path.is_relative_to(root.resolve())]
    assert alive == []



@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
def test_workers_without_the_cache_share_summaries_in_a_run_folder_removed_at_the_end(
        tmp_path: Path, monkeypatch) -> None:
    """`--no-cache` with two analysing workers: they share the summaries through a store in
    a temporary folder of the run's own (outside the tree), gone when the run ends; the
    findings are those of one process."""
    import shutil
    import tempfile

    from ckptlint.analysis.summary_store import SummaryStore

    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "projects" / "state_phases", tree)
    shutil.copy(tree / "model.py", tree / "model2.py")  # a second file to analyse
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    log = tmp_path / "writes.log"
    original = SummaryStore._write_entries

    def logged(self) -> None:
        if self._changed:
            with open(log, "a") as stream:
                stream.write(f"{self.folder}\n")
        original(self)

    monkeypatch.setattr(SummaryStore, "_write_entries", logged)
    alone = lint([str(tree)], Config(root=tree), use_cache=False, jobs=1)
    assert not log.exists()  # one process: nothing written
    shared = lint([str(tree)], Config(root=tree), use_cache=False, jobs=2)
    assert shared.stats["pool"] and shared.stats["confirmed"] == 2
    assert [f.to_json() for f in shared.findings] == [f.to_json() for f in alone.findings]
    folders = set(log.read_text().split())
    assert len(folders) == 1
    [folder] = folders
    assert Path(folder).parent.parent == temporary and Path(folder).name == "summaries"
    assert list(temporary.iterdir()) == []


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
@pytest.mark.parametrize(("phases_at", "workers_read"),
                         [(2, True), (2, False), (3, True)],
                         ids=["phases prepared", "no worker reads", "phases not prepared"])
def test_the_project_text_scans_are_made_once_while_workers_screen(
        tmp_path: Path, monkeypatch, phases_at: int, workers_read: bool) -> None:
    """While workers screen, the parent reads every file's setup words once a file is
    confirmed; once `PHASES_PREPARED_AT` are, the screening workers read most files' facts
    for the phases' project-wide indexes, the parent the rest, and the parent builds the
    indexes. The analysing workers inherit them (none scans the project's text for them
    again) and the findings are those of one process. When no worker can read its part,
    the parent reads it. Below the threshold the analysing workers build the phases'
    indexes they ask for themselves."""
    import shutil

    from ckptlint.analysis import phases as phases_module
    from ckptlint.analysis import setup as setup_module
    from ckptlint.analysis import text_facts
    from ckptlint.analysis.phases import PhaseFinder
    from ckptlint.engine.pool import WorkerPool
    from ckptlint.engine.run import Run

    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "projects" / "state_phases", tree)
    shutil.copy(tree / "model.py", tree / "model2.py")
    for number in range(6):  # enough files for the parent to read a share itself
        (tree / f"helper{number}.py").write_text(f"def helper{number}(x):\n    x.scale = 2\n")
    alone = lint([str(tree)], Config(root=tree), use_cache=False, jobs=1)
    log = tmp_path / "built.log"
    parent = os.getpid()

    def logged(original, what):
        def wrapper(*args, **kwargs):
            with open(log, "a") as stream:
                stream.write(f"{what(*args)} {os.getpid() == parent}\n")
            return original(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(PhaseFinder, "index_of",
                        logged(PhaseFinder.index_of, lambda self, fact, *_: f"index-{fact}"))
    facts = logged(text_facts.index_facts, lambda *_: "facts")
    for module in (text_facts, phases_module):  # read in a worker, and here
        monkeypatch.setattr(module, "index_facts", facts)
    monkeypatch.setattr(setup_module, "setup_words",
                        logged(setup_module.setup_words, lambda *_: "words"))
    if not workers_read:
        monkeypatch.setattr(WorkerPool, "run", lambda self, function, *args: None)
    monkeypatch.setattr(Run, "CHUNKED_MIN_FILES", 1)
    monkeypatch.setattr(Run, "PHASES_PREPARED_AT", phases_at)
    shared = lint([str(tree)], Config(root=tree), use_cache=False, jobs=2)
    assert shared.stats["pool"] and shared.stats["confirmed"] == 2
    assert [f.to_json() for f in shared.findings] == [f.to_json() for f in alone.findings]
    built = log.read_text().split("\n")[:-1]
    files = len(list(tree.glob("*.py")))
    assert built.count("words True") == files
    assert "words False" not in built
    if phases_at == 2:
        assert built.count("facts True") + built.count("facts False") == files
        assert ("facts False" in built) == workers_read and "facts True" in built
        assert sorted(line for line in set(built) if line.startswith("index")) \
            == ["index-calls True", "index-written True"]
    else:
        assert not any(line.startswith("facts") for line in built)
        assert "index-written False" in built  # asked, so made by the workers


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_linted_file_reached_from_another_is_named_as_the_run_names_it(tmp_path, monkeypatch,
                                                                         jobs):
    """Linted by an absolute path from a folder above it, a project reports its files by
    those paths; a file also reached from another's segment (a change there, a module parsed
    to follow a call) is named the same way, whichever process analysed which (it was named
    relative to the current folder by a process that had only reached it)."""
    import shutil

    from ckptlint.config import load_config

    root = tmp_path / "state_phases"
    shutil.copytree(FIXTURES / "projects" / "state_phases", root)
    monkeypatch.chdir(tmp_path)
    result = lint([str(root)], load_config([str(root)]), jobs=jobs)
    linted = {str(path) for path in root.rglob("*.py")}
    named = {finding.filename for finding in result.findings}
    for finding in result.findings:
        for change in finding.data.get("changes", []):
            named.add(change["filename"])
    assert any(name.endswith("layers.py") for name in named)  # a file reached from another
    assert {name for name in named if name.endswith(".py")} <= linted
