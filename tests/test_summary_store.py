"""The summary store: project facts kept between runs by content, never a stale answer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckptlint.analysis.callgraph import summarize, summary_from_plain, summary_to_plain
from ckptlint.analysis.summary_store import FORMAT, SummaryStore, text_digest
from ckptlint.config import Config
from ckptlint.engine.run import lint
from ckptlint.storage.plain_data import ShapeError

FIXTURES = Path(__file__).parent / "fixtures"
STATE_PHASES = FIXTURES / "projects" / "state_phases"
STORE = f"summaries-{FORMAT}"


def findings(paths: list[str], *, use_cache: bool = True, jobs: int = 1) -> list[dict]:
    result = lint(paths, Config(root=Path.cwd()), use_cache=use_cache, jobs=jobs)
    return [finding.to_json() for finding in result.findings]


@pytest.fixture
def phases_project(tmp_path: Path, monkeypatch) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(STATE_PHASES, tree)
    monkeypatch.chdir(tree)
    monkeypatch.setenv("CKPTLINT_CACHE_DIR", str(tmp_path / "cache"))
    return tree


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.py")), ids=lambda p: p.name)
def test_summaries_survive_the_plain_data_round_trip(path: Path) -> None:
    summary = summarize(path.read_text())
    if summary is None:
        pytest.skip("CPython does not parse it (a syntax-error fixture)")
    plain = json.loads(json.dumps(summary_to_plain(summary)))
    assert summary_from_plain(plain) == summary


def test_an_edit_to_a_file_reached_only_through_summaries_changes_the_findings(
        phases_project: Path) -> None:
    """train.py is never imported by model.py: the phases read it from its summary. Calling a
    setter between the forward and `.backward()` there makes a configuration read a run-time
    one; the store must not answer from the old text."""
    before = findings(["model.py"])
    assert findings(["model.py"]) == before
    store = phases_project.parent / "cache" / STORE
    assert (store / f"{text_digest((phases_project / 'train.py').read_text())}.json").is_file()
    train = phases_project / "train.py"
    train.write_text(train.read_text().replace(
        "        loss = model(x).sum()\n",
        "        loss = model(x).sum()\n        set_shift(model, 0.3)\n", 1))
    after = findings(["model.py"])
    assert after != before
    assert any("Shift" in f["message"] or "shift" in f["message"] for f in after
               if f not in before)
    assert after == findings(["model.py"], use_cache=False)
    assert (store / f"{text_digest(train.read_text())}.json").is_file()


def test_output_is_the_same_with_and_without_the_store_and_across_jobs(
        phases_project: Path) -> None:
    uncached = findings(["."], use_cache=False)
    assert findings(["."]) == uncached  # cold store
    assert findings(["."]) == uncached  # warm
    assert findings(["."], jobs=2) == uncached
    assert findings(["."], use_cache=False, jobs=2) == uncached


def test_a_stored_fact_of_the_wrong_shape_is_a_miss(phases_project: Path) -> None:
    expected = findings(["."], use_cache=False)
    findings(["."])
    store = phases_project.parent / "cache" / STORE
    entries = sorted(store.glob("*.json"))
    assert "files.json" in {entry.name for entry in entries}
    # Of the wrong shape for every fact (None, [] or {} may be a fact: a file CPython does
    # not parse, one that calls nothing); `files.json`, the facts by path, among the entries.
    wrong_values = [1, "x", [[1]], {"f": [1, 2]}, True, [1, 2, 3, 4, 5]]
    for index, entry in enumerate(entries):
        data = json.loads(entry.read_text())
        name = sorted(data)[index % len(data)]
        data[name] = wrong_values[index % len(wrong_values)]
        entry.write_text(json.dumps(data))
    (phases_project / "run-cache-bust.py").write_text("x = 1\n")  # the results are re-analysed
    assert findings(["."]) == expected


def test_summary_fields_are_checked_one_by_one() -> None:
    summary = summarize((STATE_PHASES / "model.py").read_text())
    assert summary is not None
    plain = summary_to_plain(summary)
    for key in plain:
        for wrong in (None, 3, "x", [["x"]]):
            with pytest.raises(ShapeError):
                summary_from_plain({**plain, key: wrong})
    broken = json.loads(json.dumps(plain))
    broken["functions"][0][5] = "yes"  # driver: a boolean
    with pytest.raises(ShapeError):
        summary_from_plain(broken)



def test_a_stored_call_entry_of_the_wrong_shape_is_found_when_asked_for() -> None:
    """Each name's call sites are checked when first asked for: a wrong one raises then, and
    the others stay usable."""
    summary = summarize((STATE_PHASES / "model.py").read_text())
    assert summary is not None and len(summary.calls) > 1
    plain = json.loads(json.dumps(summary_to_plain(summary)))
    broken_name, kept_name = list(plain["calls"])[:2]
    for wrong in (None, 3, [["self", 1, "f", ""]], "self 1 f", "self row f ", "self -1 f ",
                  "self 1 f ;x", f"self {2**31} f ", "self \u0661 f "):
        stored = summary_from_plain({**plain, "calls": {**plain["calls"], broken_name: wrong}})
        assert stored.calls[kept_name] == summary.calls[kept_name]
        with pytest.raises(ShapeError):
            stored.calls.get(broken_name)


def test_callers_are_the_same_when_a_stored_call_entry_has_the_wrong_shape(
        tmp_path: Path) -> None:
    """`PhaseFinder.callers` through a store whose summaries have every call entry replaced
    by one of the wrong shape answers as it does with no store: those files are summarised
    again."""
    from ckptlint.analysis.phases import PhaseFinder

    files = sorted(STATE_PHASES.rglob("*.py"))
    texts = {path: path.read_text() for path in files}

    def callers(store: SummaryStore | None) -> dict:
        finder = PhaseFinder(lambda: files, texts.get, lambda path: path.stem, store)
        answers = {}
        for path in files:
            summary = finder.summary(path)
            assert summary is not None
            for qualname, function in summary.functions.items():
                answers[path, qualname] = finder.callers(path, qualname, function)
        return answers

    planted = SummaryStore.in_cache(tmp_path, chosen=True)
    for text in texts.values():
        def wrong_calls(text: str) -> dict:
            plain = summary_to_plain(summarize(text))
            return {**plain, "calls": {name: "self row f " for name in plain["calls"]}}

        planted.fact(text, "summary", wrong_calls, lambda value: value, lambda value: value)
    expected = callers(None)
    assert any(expected.values())
    assert callers(planted) == expected
    stored = planted.fact(texts[files[0]], "summary", summarize, summary_to_plain,
                          summary_from_plain)
    with pytest.raises(ShapeError):  # (what makes this a test)
        [stored.calls[name] for name in stored.calls]


def test_shared_stores_write_each_fact_at_once_and_read_what_another_made(
        tmp_path: Path) -> None:
    """Two processes analysing with one store folder (`SummaryStore.share`): a fact one
    makes is on disk at once, and the other, though it read that text's entry before the
    fact was there, finds it instead of making it again. Unshared, it is made twice."""
    text = "def f():\n    return 1\n"

    def times_made(folder: Path, shared: bool) -> int:
        first, second = SummaryStore(folder), SummaryStore(folder)
        if shared:
            first.share()
            second.share()
        made: list[str] = []

        def length(source: str) -> int:
            made.append(source)
            return len(source)

        second.fact(text, "lines", lambda source: source.count("\n"), int, int)
        assert first.fact(text, "length", length, int, int) == len(text)
        assert second.fact(text, "length", length, int, int) == len(text)
        return len(made)

    assert times_made(tmp_path / "unshared", shared=False) == 2
    assert times_made(tmp_path / "shared", shared=True) == 1
    [entry] = (tmp_path / "shared").glob("*.json")  # both facts on disk before any flush
    assert json.loads(entry.read_text()) == {"lines": 2, "length": len(text)}


def test_callers_through_a_shared_store_are_the_same_and_summaries_are_written_at_once(
        tmp_path: Path) -> None:
    """While workers share the store, `PhaseFinder.callers` makes the summaries first in an
    order of the process's own: the answers are those made without a store, and each
    summary is on disk when the call returns."""
    from ckptlint.analysis.phases import PhaseFinder

    files = sorted(STATE_PHASES.rglob("*.py"))
    texts = {path: path.read_text() for path in files}

    def callers(store: SummaryStore | None) -> dict:
        finder = PhaseFinder(lambda: files, texts.get, lambda path: path.stem, store)
        return {(path, qualname): finder.callers(path, qualname, function)
                for path in files for qualname, function in finder.summary(path).functions.items()}

    shared = SummaryStore(tmp_path / "store")
    shared.share()
    expected = callers(None)
    assert any(expected.values())
    assert callers(shared) == expected
    stored = {json.loads(path.read_text()).get("summary") is not None
              for path in (tmp_path / "store").glob("*.json")}
    assert len(list((tmp_path / "store").glob("*.json"))) == len(files) and stored == {True}

def test_a_store_folder_that_is_a_link_in_the_tree_is_not_used(tmp_path: Path) -> None:
    cache = tmp_path / ".ckptlint_cache"
    cache.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (cache / STORE).symlink_to(outside)
    store = SummaryStore.in_cache(cache, chosen=False)
    assert store.fact("x = 1\n", "calls", lambda text: ["x"], list, list) == ["x"]
    store.flush()
    assert list(outside.iterdir()) == []
    assert SummaryStore.in_cache(cache, chosen=True).folder == cache / STORE


def test_who_calls_a_name_is_the_same_looked_up_directly_or_from_the_index() -> None:
    """The first names are looked up one by one, later ones in an index of every file's
    called names: both must list the same files, for every name the project's texts hold."""
    import re

    from ckptlint.analysis.phases import DIRECT_LOOKUPS, PhaseFinder

    files = sorted(FIXTURES.rglob("*.py"))
    texts = {path: path.read_text() for path in files}
    names = sorted({word for text in texts.values() for word in re.findall(r"\w+", text)})

    def finder() -> PhaseFinder:
        return PhaseFinder(lambda: files, texts.get, lambda path: path.stem)

    indexed = finder()
    for name in [f"unused_{n}" for n in range(DIRECT_LOOKUPS)]:
        indexed.files_calling(name)  # past the direct lookups: the index answers from here
    direct_answers = {}
    for start in range(0, len(names), DIRECT_LOOKUPS):
        direct = finder()
        for name in names[start:start + DIRECT_LOOKUPS]:
            direct_answers[name] = direct.files_calling(name)
    assert any(direct_answers.values())
    assert {name: indexed.files_calling(name) for name in names} == direct_answers


def test_the_names_hook_registrations_take_are_those_a_search_per_name_finds() -> None:
    """`hook_argument_words` answers, per file, what one search per name answered: whether
    the name stands among a hook registration's arguments (up to the first `)`)."""
    import re

    import ckptlint
    from ckptlint.analysis.phases import hook_argument_words

    sources = sorted([*FIXTURES.rglob("*.py"), *Path(ckptlint.__file__).parent.rglob("*.py")])
    texts = [path.read_text() for path in sources]
    registering = [text for text in texts if "register_" in text]  # no match elsewhere
    assert len(registering) > 5
    for text in registering:
        words = hook_argument_words(text)
        for name in set(re.findall(r"\w+", text)):
            search = re.compile(rf"register_\w*hook\w*\s*\([^)]*\b{re.escape(name)}\b")
            assert (name in words) == (search.search(text) is not None), name


def test_facts_by_path_are_answered_without_reading_an_unchanged_file(tmp_path: Path) -> None:
    """The facts asked of every project file are kept with the file's stat signature: an
    unchanged file is not read again, an edited one is, and a text read before the file
    changed is not stored under the new signature."""
    from ckptlint.analysis.text_facts import called_names, name_set, sorted_names
    from ckptlint.storage.file_signature import signature

    path = tmp_path / "m.py"
    path.write_text("def f():\n    g()\n")
    reads: list[Path] = []

    def read(text_path: Path = path) -> tuple[str, tuple[int, int, int, int]]:
        reads.append(text_path)
        info = text_path.stat()
        return text_path.read_text(), signature(info)

    def calls(store: SummaryStore, reader=read) -> set[str] | None:
        return store.path_fact(path, "calls", reader, called_names, sorted_names, name_set)

    first = SummaryStore(tmp_path / "store")
    assert calls(first) == {"g"}
    first.flush()
    assert (tmp_path / "store" / "files.json").is_file()
    assert calls(SummaryStore(tmp_path / "store")) == {"g"}
    assert reads == [path]  # answered from `files.json`
    path.write_text("def f():\n    h()\n")
    assert calls(SummaryStore(tmp_path / "store")) == {"h"}
    assert len(reads) == 2

    stale = ("def f():\n    old()\n", (1, 2, 3, 4))  # read when the file was another
    late = SummaryStore(tmp_path / "store")
    assert late.path_fact(path, "calls", lambda: stale, called_names, sorted_names,
                          name_set) == {"old"}
    late.flush()
    assert calls(SummaryStore(tmp_path / "store")) == {"h"}  # not kept: computed again
    assert len(reads) == 3


def test_who_calls_a_name_comes_from_the_stored_index_and_sees_an_edit(tmp_path: Path) -> None:
    """Once a run has stored every file's called names, the next one answers who calls a
    name from them (reading no unchanged file), and an edited file's calls are its new ones."""
    from ckptlint.analysis.phases import DIRECT_LOOKUPS, PhaseFinder

    files = []
    for number in range(12):
        path = tmp_path / f"m{number}.py"
        path.write_text(f"def f{number}():\n    helper_{number % 3}()\n")
        files.append(path)
    reads: list[Path] = []

    def finder() -> PhaseFinder:
        def text(path: Path) -> str:
            reads.append(path)
            return path.read_text()

        def signed(path: Path):
            from ckptlint.storage.file_signature import signature

            info = path.stat()
            return text(path), signature(info)
        return PhaseFinder(lambda: files, text, lambda path: path.stem,
                           SummaryStore(tmp_path / "store"), signed)

    first = finder()
    for name in [f"unused_{n}" for n in range(DIRECT_LOOKUPS)]:
        first.files_calling(name)
    assert first.files_calling("helper_1") == [files[1], files[4], files[7], files[10]]
    first.store.flush()
    reads.clear()
    files[2].write_text("def f2():\n    helper_1()\n")
    second = finder()
    assert second.files_calling("helper_1") == [files[1], files[2], files[4], files[7],
                                                files[10]]
    assert reads == [files[2]]  # the edited file only


def test_facts_by_path_from_two_processes_are_merged_and_gone_files_dropped(
        tmp_path: Path) -> None:
    """Workers write `files.json` in turn: each write keeps what another wrote since it
    read the file, and drops the records of files deleted or changed since."""
    from ckptlint.analysis.text_facts import called_names, name_set, sorted_names
    from ckptlint.storage.file_signature import signature

    paths = [tmp_path / f"m{number}.py" for number in range(3)]
    for number, path in enumerate(paths):
        path.write_text(f"f{number}()\n")

    def calls(store: SummaryStore, path: Path) -> set[str] | None:
        def read() -> tuple[str, tuple[int, int, int, int]]:
            info = path.stat()
            return path.read_text(), signature(info)
        return store.path_fact(path, "calls", read, called_names, sorted_names, name_set)

    one, two = SummaryStore(tmp_path / "store"), SummaryStore(tmp_path / "store")
    calls(one, paths[0])
    calls(two, paths[1])  # read before `one` writes
    one.flush()
    two.flush()
    stored = json.loads((tmp_path / "store" / "files.json").read_text())
    assert sorted(stored) == [str(paths[0]), str(paths[1])]
    paths[0].unlink()
    paths[1].write_text("g()\n")
    three = SummaryStore(tmp_path / "store")
    calls(three, paths[2])
    three.flush()
    stored = json.loads((tmp_path / "store" / "files.json").read_text())
    assert sorted(stored) == [str(paths[2])]


def test_facts_read_by_another_process_are_kept_while_the_file_keeps_its_signature(
        tmp_path: Path) -> None:
    """`keep_path_facts`: the facts a screening worker read for the phases' indexes are
    stored by path as `path_fact` stores its own, and answered without reading the file;
    facts read before the file changed, or of a file without text, are not kept."""
    from ckptlint.analysis.project import scanned_text
    from ckptlint.analysis.text_facts import (
        called_names,
        index_facts,
        index_facts_of_files,
        joined_names,
        name_set,
        sorted_names,
    )

    path = tmp_path / "m.py"
    path.write_text("def f(x):\n    g(x)\n    x.attr.append(1)\n")
    [(read_as, facts)] = index_facts_of_files([str(path)])
    kept, signature_read = scanned_text(path)
    assert read_as == list(signature_read) and facts == index_facts(kept, read_as)[1]
    assert facts == {"calls": "1\nappend\ng\nx", "written": "attr"}
    plain = {name: joined_names(joined) for name, joined in facts.items()}
    assert plain == {"calls": ["1", "append", "g", "x"], "written": ["attr"]}

    def unread() -> tuple[str, None]:
        raise AssertionError("the file was read")

    store = SummaryStore(tmp_path / "store")
    store.keep_path_facts(path, read_as, plain)
    store.flush()
    again = SummaryStore(tmp_path / "store")
    assert again.path_fact(path, "calls", unread, called_names, sorted_names,
                           name_set) == {"1", "append", "g", "x"}
    assert again.holds_path_facts("written", [path])

    path.write_text("def f():\n    h()\n")
    changed = SummaryStore(tmp_path / "store2")
    changed.keep_path_facts(path, read_as, plain)  # read before the edit
    changed.keep_path_facts(tmp_path / "empty.py", read_as, {})
    changed.flush()
    assert not (tmp_path / "store2" / "files.json").exists()
    assert index_facts_of_files([str(tmp_path / "missing.py")]) == [(None, {})]
