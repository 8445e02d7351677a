"""What an analysing process keeps between files, and what it hands back.

On diffusers each analysing worker held 15-18 MiB of decoded texts in the summary store's
digest memo, a second copy of every parsed module's text, and 30-40 MiB of free C heap:
these tests pin each fix from the user's side of the objects involved.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ckptlint.analysis.project import Project
from ckptlint.analysis.summary_store import SummaryStore
from ckptlint.engine import memory
from ckptlint.syntax.source import SourceModule, parse_text
from tests.cli_helpers import write_project

NOT_ASCII = 'def f(x):\n    """Scale 🙂 by two."""\n    return x * 2\n'


def project_with_module(root: Path, content: str | bytes) -> tuple[Project, Path]:
    """A project whose package `pkg` holds `mod.py` with `content`."""
    write_project(root, {"pkg/__init__.py": "", "pkg/mod.py": content})
    return Project([root]), root / "pkg" / "mod.py"


def test_a_module_keeps_a_text_not_all_ascii_as_utf8_and_gives_it_back_whole():
    module = SourceModule(Path("m.py"), "m.py", "m", False, NOT_ASCII,
                          parse_text(NOT_ASCII, "m.py"))
    assert module.text == NOT_ASCII
    assert module.size == len(NOT_ASCII)
    # The emoji makes a `str` of 4 bytes a character; the module holds the UTF-8 instead.
    assert sys.getsizeof(module._text) < sys.getsizeof(NOT_ASCII) // 2
    assert module.start(module.tree.body[0]).row == 1  # positions read the decoded text


def test_a_lone_surrogate_comes_back_whole():
    """A notebook's JSON may spell one (`"\\ud800"`); CPython's parser refuses such a text
    today, but keeping it must not be what fails."""
    text = 'NAME = "\ud800"\n'
    module = SourceModule(Path("m.py"), "m.py", "m", False, text, parse_text("NAME = 1\n", "m.py"))
    assert module.text == text


def test_an_ascii_module_text_is_kept_as_given():
    text = "x = 1\n"
    module = SourceModule(Path("m.py"), "m.py", "m", False, text, parse_text(text, "m.py"))
    assert module._text is text


@pytest.mark.parametrize("content", ["x = 'scale'\n", NOT_ASCII])
def test_a_text_search_answers_on_the_kept_text_as_on_the_decoded_one(tmp_path, content):
    project, path = project_with_module(tmp_path, content)
    text = project.source_text(path)
    assert path in project.source_files()
    for word in ["scale", "Scale", "🙂", "absent", "x", "def", "return"]:
        assert (path in project.files_holding(word)) == (word in text), word
    assert project.files_holding("x") is project.files_holding("x")  # found once


def test_the_summary_store_holds_no_text_it_was_asked_about(tmp_path):
    store = SummaryStore(tmp_path / "store")
    first = "".join(["x = 1  # é\n"] * 50)  # a fresh object, as a decoded project text is
    held = sys.getrefcount(first)
    store.fact(first, "size", len, lambda value: value, int)
    store.fact(first, "lines", str.count.__get__(first), lambda value: value, int)
    store.fact("y = 2\n", "size", len, lambda value: value, int)  # the next text asked about
    assert sys.getrefcount(first) == held
    assert store.fact(first, "size", len, lambda value: value, int) == len(first)


def test_a_parsed_module_shares_the_text_the_searches_read(tmp_path):
    project, path = project_with_module(tmp_path, "def f(x):\n    return x\n")
    searched = project.source_text(path)
    module = project.module_at(path)
    assert module is not None and module.text is searched


def test_a_module_whose_text_differs_from_the_searched_one_keeps_its_own(tmp_path):
    """The text searches read with errors replaced; a module is decoded as Python would
    (here, Latin-1 by its coding line): the two differ and the module keeps its own."""
    project, path = project_with_module(tmp_path,
                                        b"# -*- coding: latin-1 -*-\nNAME = '\xe9'\n")
    searched = project.source_text(path)
    module = project.module_at(path)
    assert module is not None and module.text != searched
    assert "NAME = 'é'" in module.text


def test_after_a_file_the_last_cpython_tree_is_not_kept(tmp_path):
    project, path = project_with_module(tmp_path, "def f(x):\n    return x\n")
    project.module_at(path)
    assert project._last_parse is not None
    project.forget_file_state()
    assert project._last_parse is None


def resident_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4  # resident pages of 4 KiB


@pytest.mark.skipif(memory._malloc_trim() is None, reason="no glibc malloc_trim here")
def test_free_heap_pages_go_back_to_the_system():
    # Blocks past CPython's small-object limit come from the C heap; keeping every 64th
    # pins the heap's top, so only malloc_trim can give the free pages between them back.
    blocks = [bytes(4000) + i.to_bytes(4, "little") for i in range(40_000)]
    kept = blocks[::64]
    del blocks
    before = resident_kib()
    memory.release_free_memory()
    after = resident_kib()
    assert len(kept) == 625
    assert before - after > 50_000  # of the ~155 MiB freed, well over 50 MiB returned


def test_releasing_memory_is_harmless_where_the_c_library_cannot(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    memory._malloc_trim.cache_clear()
    try:
        assert memory._malloc_trim() is None
        memory.release_free_memory()
    finally:
        monkeypatch.undo()
        memory._malloc_trim.cache_clear()


def test_forgotten_positions_go_by_reference_counting():
    """A module's positions, once forgotten after a file, are freed at once: nothing of them
    waits for the cyclic collector (the engine freezes instead, and would keep them)."""
    import ast
    import gc
    import weakref

    from ckptlint.syntax.reading import statement_starts

    text = "class Block:\n    def forward(self, x):\n        return x * 2\n\n\nSCALE = 2\n"
    module = SourceModule(Path("m.py"), "m.py", "m", False, text, parse_text(text, "m.py"),
                          statement_starts=statement_starts(ast.parse(text)))
    method = module.tree.body[0].body.body[0]
    collecting = gc.isenabled()
    gc.disable()
    try:
        assert module.start(method).row == 2
        assert module.positions().anchored  # positions from each statement's own pass
        positions = weakref.ref(module.positions())
        anchored = weakref.ref(module.positions()._anchored)
        module.forget_positions()
        assert positions() is None and anchored() is None
    finally:
        if collecting:
            gc.enable()


@pytest.mark.parametrize("project", ["state_phases", "segment_chain", "reach_mixins",
                                     "hf_receivers"])
def test_no_reference_cycle_holds_what_a_file_analysis_dropped(monkeypatch, project):
    """Between files the engine freezes what is alive (`gc.freeze`, so that the cyclic
    collector never walks it again) without collecting first: cyclic garbage would stay for
    the rest of the run. None may hold a parsed tree, its scopes or its positions (positions
    whose generator held them in a cycle kept 160 MiB more on diffusers at `-j 1`): no
    object of ckptlint's or libcst's, nor a class or function of theirs made on the way."""
    import gc

    from ckptlint.config import load_config
    from ckptlint.engine.linter import Linter
    from ckptlint.engine.run import lint

    root = str(Path(__file__).parent / "fixtures" / "projects" / project)
    config = load_config([root])
    lint([root], config, jobs=1)  # the imports and tables made once per process
    left: list[str] = []
    check_candidate = Linter.check_candidate

    def cyclic_garbage_after(self, *args, **kwargs):
        cyclic_garbage()  # what the run made before this file (its discovery, say)
        result = check_candidate(self, *args, **kwargs)
        left.extend(cyclic_garbage())
        return result

    monkeypatch.setattr(Linter, "check_candidate", cyclic_garbage_after)
    monkeypatch.setattr(gc, "freeze", lambda: None)  # what a file left stays collectable
    collecting = gc.isenabled()
    gc.disable()  # nothing collected but by `cyclic_garbage`
    try:
        result = lint([root], config, jobs=1)
    finally:
        if collecting:
            gc.enable()
    assert result.findings and result.stats["confirmed"]
    assert left == []


def cyclic_garbage() -> list[str]:
    """What a collection finds now that is ours (`ours`); then collected for good."""
    import gc

    gc.set_debug(gc.DEBUG_SAVEALL)  # kept in `gc.garbage`, to look at
    try:
        gc.collect()
        found = [described(thing) for thing in gc.garbage if ours(thing)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    gc.collect()
    return found


def ours(thing: object) -> bool:
    """An object of ckptlint's or libcst's, or a class or function they made."""
    kind = thing if isinstance(thing, type) else type(thing)
    module = getattr(thing, "__module__", None) if callable(thing) else kind.__module__
    return isinstance(module, str) and module.split(".")[0] in ("ckptlint", "libcst")


def described(thing: object) -> str:
    return getattr(thing, "__qualname__", None) or type(thing).__qualname__
