"""Which project files may hold a subclass of a class, or apply a decorator, found by name.

A text scan of every project file (`Project.source_files`), once per run, when the resolver
first asks: `class Sub(pkg.Base, Mixin):` lists the file under `Base` and `Mixin`, a line
`@ckpt` (or `@utils.ckpt`) under `ckpt`. It only narrows down which files to parse: a name
here is not yet the class or the function asked about, the resolver checks that on the
parsed file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ckptlint.analysis.project import Project

# `class Name(bases):` (the bases may span lines); the names in the bases, keywords left out.
CLASS_STATEMENT = re.compile(r"^[ \t]*class[ \t]+(\w+)[ \t]*\(([^)]*)\)", re.M)
BASE_NAME = re.compile(r"(\w+)[ \t]*(?:\[[^\]]*\])?[ \t]*(?:,|$)")
# A decorator without arguments on its own line: `@name` or `@module.name`.
DECORATOR_LINE = re.compile(r"^[ \t]*@[ \t]*(?:\w+[ \t]*\.[ \t]*)*(\w+)[ \t]*(?:#.*)?$", re.M)
MAX_SUBCLASS_NAMES = 2000  # class names followed down from one base


@dataclass
class TextIndex:
    project: Project
    _subclasses: dict[str, set[tuple[Path, str]]] = field(default_factory=dict)
    _decorated: dict[str, set[Path]] = field(default_factory=dict)
    _built: bool = False

    def build(self) -> None:
        if self._built:
            return
        self._built = True
        for path in self.project.source_files():
            text = self.project.source_text(path)
            if not text:
                continue
            if "class" in text:
                for match in CLASS_STATEMENT.finditer(text):
                    bases = " ".join(match.group(2).split())
                    for base in BASE_NAME.findall(bases):
                        self._subclasses.setdefault(base, set()).add((path, match.group(1)))
            if "@" in text:
                for name in DECORATOR_LINE.findall(text):
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

    def decorated_files(self, name: str) -> list[Path]:
        """Files with a line `@name` (or `@something.name`)."""
        self.build()
        return sorted(self._decorated.get(name, ()))
