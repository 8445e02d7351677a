"""The project being linted: where its modules are, parsed lazily and once each."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ckptlint.reading import SourceError

if TYPE_CHECKING:  # ckptlint.source imports libcst: only when a module is parsed
    from ckptlint.source import SourceModule


def package_root(path: Path) -> Path:
    """The folder above the outermost package (folders with `__init__.py`) holding `path`."""
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    return folder


class Project:
    """Maps files to dotted module names and back, and keeps each parsed module once."""

    def __init__(self, roots: list[Path], display_base: Path | None = None) -> None:
        self.roots = [root.resolve() for root in roots]
        self.display_base = display_base
        self._by_path: dict[Path, SourceModule | None] = {}
        self.parse_errors: dict[Path, str] = {}
        # While set (by the engine, per linted file): every path looked at to resolve names,
        # found or not, so that the cache can tell when a result depends on another file.
        self.accessed: set[Path] | None = None

    def add_root_for(self, path: Path) -> None:
        root = package_root(path.resolve())
        if root not in self.roots:
            self.roots.append(root)

    def module_name(self, path: Path) -> tuple[str, bool]:
        path = path.resolve()
        is_package = path.name == "__init__.py"
        for root in self.roots:
            try:
                relative = path.relative_to(root)
            except ValueError:
                continue
            parts = list(relative.with_suffix("").parts)
            if is_package:
                parts = parts[:-1]
            if parts and all(part.isidentifier() for part in parts):
                return ".".join(parts), is_package
        return path.stem, is_package

    def display_name(self, path: Path) -> str:
        if self.display_base is not None:
            try:
                return str(path.resolve().relative_to(self.display_base))
            except ValueError:
                pass
        return str(path)

    def register(self, module: SourceModule) -> None:
        self._by_path[module.path] = module

    def module_at(self, path: Path) -> SourceModule | None:
        """The parsed module at `path` (None when it cannot be read or parsed)."""
        path = path.resolve()
        if self.accessed is not None:
            self.accessed.add(path)
        if path not in self._by_path:
            from ckptlint.source import load_module

            name, is_package = self.module_name(path)
            try:
                self._by_path[path] = load_module(path, self.display_name(path), name, is_package)
            except SourceError as error:
                self.parse_errors[path] = str(error)
                self._by_path[path] = None
            except RecursionError:
                self.parse_errors[path] = "nesting too deep to parse"
                self._by_path[path] = None
        return self._by_path[path]

    def find_module(self, dotted: str) -> SourceModule | None:
        """The project module with this dotted name, if it lives under one of the roots."""
        parts = dotted.split(".")
        for root in self.roots:
            base = root.joinpath(*parts)
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if self.accessed is not None:
                    self.accessed.add(candidate)
                if candidate.is_file():
                    return self.module_at(candidate)
        return None
