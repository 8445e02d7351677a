"""Which project files may hold a subclass of a class, or apply a decorator, found by name;
which project classes may be hand-written checkpoints.

A text scan of every project file (`Project.source_files`), once per run, when the resolver
first asks: `class Sub(pkg.Base, Mixin):` lists the file under `Base` and `Mixin`, a line
`@ckpt` (or `@utils.ckpt`) under `ckpt`. It only narrows down which files to parse: a name
here is not yet the class or the function asked about, the resolver checks that on the
parsed file. Each file's scan results are kept by path in the summary store
(`SummaryStore.path_fact`): an unchanged file is not read again on the next run.

`hand_rolled_classes` is asked by the screens too (a file calling `.apply` on a class another
file defines), so the index is one per project (`text_index`), shared by them and the
resolver.
"""

from __future__ import annotations

import ast
import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ckptlint.analysis.project import Project
from ckptlint.screen.confirm import may_hand_roll
from ckptlint.storage.plain_data import ShapeError, want_list, want_str, want_strs
from ckptlint.syntax.ast_nodes import walk_nodes
from ckptlint.syntax.modnames import resolve_relative

# `class Name(bases):` (the bases may span lines); the names in the bases, keywords left out.
# Both statement patterns must start a line after indentation: `line_starts` checks that
# (an anchored pattern cannot skip ahead to its first literal, and was the run's main cost).
CLASS_STATEMENT = re.compile(r"class[ \t]+(\w+)[ \t]*\(([^)]*)\)")
BASE_NAME = re.compile(r"(\w+)[ \t]*(?:\[[^\]]*\])?[ \t]*(?:,|$)")
# A decorator without arguments on its own line: `@name` or `@module.name`.
DECORATOR_LINE = re.compile(r"@[ \t]*(?:\w+[ \t]*\.[ \t]*)*(\w+)[ \t]*(?:#.*)?$", re.M)
MAX_SUBCLASS_NAMES = 2000  # class names followed down from one base


@dataclass
class TextIndex:
    project: Project
    _subclasses: dict[str, set[tuple[Path, str]]] = field(default_factory=dict)
    _decorated: dict[str, set[Path]] = field(default_factory=dict)
    _built: bool = False
    _hand_rolled: frozenset[str] | None = None

    def build(self) -> None:
        if self._built:
            return
        self._built = True
        fact = self.project.text_fact
        for path in self.project.source_files():
            for subclass, base in fact(path, "bases", class_bases, list, stored_pairs) or ():
                self._subclasses.setdefault(base, set()).add((path, subclass))
            for name in fact(path, "decorators", decorator_names, list, stored_names) or ():
                self._decorated.setdefault(name, set()).add(path)

    def subclass_files(self, name: str, defining: re.Pattern[str]) -> list[Path]:
        """Files that may define a class deriving (directly or through other project
        classes) from a class called `name`, and whose text matches `defining` (how the
        attribute asked about would be defined there)."""
        self.build()
        seen = {name}
        pending = [name]
        files: set[Path] = set()
        while pending and len(seen) < MAX_SUBCLASS_NAMES:
            for path, subclass in self._subclasses.get(pending.pop(), ()):
                files.add(path)
                if subclass not in seen:
                    seen.add(subclass)
                    pending.append(subclass)
        return sorted(path for path in files
                      if defining.search(self.project.source_text(path) or ""))

    def import_bindings(self, path: Path, module: str, is_package: bool) -> set[str] | None:
        """The qualified names the file's import statements bind, at any depth, as the scope
        builder binds them (`import a.b`: `a`; `import a.b as c`: `a.b`; `from .m import x`:
        `pkg.m.x`), from CPython's `ast`; None when it cannot tell (a star import, not parsed).
        (`ast` normalises identifiers (NFKC): a name written in ASCII reads the same.)"""
        text = self.project.source_text(path)
        if text is None:
            return None
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        bound: set[str] = set()
        for node in walk_nodes(tree):
            if isinstance(node, ast.Import):
                bound.update(alias.name if alias.asname else alias.name.split(".")[0]
                             for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if any(alias.name == "*" for alias in node.names):
                    return None
                base = resolve_relative(module, is_package, node.level, node.module) \
                    if node.level else node.module or ""
                if base:
                    bound.update(f"{base}.{alias.name}" for alias in node.names)
        return bound

    def hand_rolled_classes(self) -> frozenset[str]:
        """Names of the project classes that may be hand-written checkpoints
        (`analysis/hand_rolled.py`): each class statement of a file holding the words one
        cannot do without (`may_hand_roll`), and the classes deriving from those by name.
        A whole-project fact: the screens pass a file that calls `.apply` on one of these
        names, and `sites.py` follows `.apply` into another file only for these names."""
        if self._hand_rolled is None:
            names: set[str] = set()
            for path in self.project.source_files():
                names.update(self.project.text_fact(path, "hand_rolled", hand_rolled_names,
                                                    list, stored_class_names) or ())
            pending = list(names)
            if pending:
                self.build()
            while pending and len(names) < MAX_SUBCLASS_NAMES:
                for _, subclass in self._subclasses.get(pending.pop(), ()):
                    if subclass not in names:
                        names.add(subclass)
                        pending.append(subclass)
            self._hand_rolled = frozenset(names)
        return self._hand_rolled

    def decorated_files(self, name: str) -> list[Path]:
        """Files with a line `@name` (or `@something.name`)."""
        self.build()
        return sorted(self._decorated.get(name, ()))


def class_bases(text: str) -> list[list[str]]:
    """[class name, base name] for each base named in the text's class statements."""
    if "class" not in text:
        return []
    return [[match.group(1), base] for match in line_starts(CLASS_STATEMENT, text)
            for base in BASE_NAME.findall(" ".join(match.group(2).split()))]


def hand_rolled_names(text: str) -> list[str]:
    """The classes a text defines, when it may define a hand-written checkpoint."""
    if not may_hand_roll(text):
        return []
    return sorted({match.group(1) for match in line_starts(CLASS_STATEMENT, text)})


def decorator_names(text: str) -> list[str]:
    return [match.group(1) for match in line_starts(DECORATOR_LINE, text)] if "@" in text else []


def line_starts(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """The matches of `pattern` with only spaces or tabs before them on their line, found
    as `^[ \\t]*pattern` (multi-line) would find them: a rejected start is retried one
    character on."""
    position = 0
    while (match := pattern.search(text, position)) is not None:
        start = match.start()
        line_start = text.rfind("\n", 0, start) + 1
        if text[line_start:start].strip(" \t"):
            position = start + 1
            continue
        yield match
        position = match.end()


def stored_pairs(data: object) -> list[list[str]]:
    pairs = []
    for pair in want_list(data, "bases"):
        if type(pair) is not list or len(pair) != 2:
            raise ShapeError("bases: expected [class, base] pairs")
        pairs.append([want_str(pair[0], "class"), want_str(pair[1], "base")])
    return pairs


def stored_names(data: object) -> list[str]:
    return list(want_strs(data, "decorators"))


def stored_class_names(data: object) -> list[str]:
    return list(want_strs(data, "hand_rolled"))


_INDEXES: weakref.WeakKeyDictionary[Project, TextIndex] = weakref.WeakKeyDictionary()


def text_index(project: Project) -> TextIndex:
    """The project's index (one per `Project`: the screens and the resolver share it)."""
    index = _INDEXES.get(project)
    if index is None:
        index = _INDEXES[project] = TextIndex(project)
    return index
