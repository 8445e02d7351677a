"""The project being linted: where its modules are, parsed lazily and once each."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ckptlint.analysis.dependencies import DependencyRecorder
from ckptlint.analysis.reexports import (
    Reexports,
    imported_qualnames,
    plain_reexports,
    reexports,
    stored_reexports,
)
from ckptlint.analysis.summary_store import SummaryStore
from ckptlint.syntax.reading import Limits, SourceError

if TYPE_CHECKING:  # ckptlint.syntax.source imports libcst: only when a module is parsed
    from ckptlint.syntax.source import SourceModule

# The project scan (`Project.source_files`): folders it skips, its cap. The result cache
# walks the same files to notice any change in the project (a test keeps them in step).
SKIPPED_DIRS = frozenset({".git", ".venv", "venv", "build", "dist", "__pycache__", ".tox",
                          "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
MAX_PROJECT_FILES = 10000
MAX_SCANNED_TEXT = 5 * 1024 * 1024  # larger files are not searched
# Folders where installed distributions lie side by side: each is a project of its own, so
# the project scan there covers only the top-level packages (or modules) being linted.
ENVIRONMENT_FOLDERS = frozenset({"site-packages", "dist-packages"})


def package_root(path: Path, known: dict[Path, Path] | None = None) -> Path:
    """The folder above the outermost package (folders with `__init__.py`) holding `path`.

    `known`: answers by folder, read and extended (a run asks once per folder, and folders
    share their way up).
    """
    known = {} if known is None else known
    folder = path.parent
    climbed = []
    while (folder not in known and os.path.isfile(folder / "__init__.py")
           and folder.parent != folder):
        climbed.append(folder)
        folder = folder.parent
    root = known.setdefault(folder, folder)
    for below in climbed:
        known[below] = root
    return root


class Project:
    """Maps files to dotted module names and back, and keeps each parsed module once."""

    def __init__(self, roots: list[Path], display_base: Path | None = None,
                 limits: Limits = Limits()) -> None:
        self.roots = [root.resolve() for root in roots]
        self.display_base = display_base
        self.limits = limits  # for the modules read to follow calls
        self._by_path: dict[Path, SourceModule | None] = {}
        self.parse_errors: dict[Path, str] = {}
        self._module_names: dict[Path, frozenset[str] | None] = {}
        self._reexports: dict[Path, Reexports | None] = {}
        self._package_roots: dict[Path, Path] = {}
        self._resolved_folders: dict[Path, Path] = {}
        self._files: list[Path] | None = None
        # For a root that is an environment folder: the names of its entries being linted.
        self._linted_entries: dict[Path, set[str]] = {}
        # Project files' texts for the text searches; one not all ASCII is kept as UTF-8
        # (a `str` holding one character past Latin-1 takes 2 or 4 bytes for each: most of
        # the texts' memory) and decoded when asked for.
        self._texts: dict[Path, str | bytes | None] = {}
        # Every path looked at to resolve names, found or not, is recorded here (the engine
        # keeps a recording per linted file: the cache's dependencies).
        self.dependencies = DependencyRecorder()
        # Facts about project files by content, for the whole-project questions (kept
        # between runs when the run uses the cache: the engine replaces it).
        self.summaries = SummaryStore()

    def add_root_for(self, path: Path) -> None:
        folder = path.resolve().parent if path.is_symlink() else self._resolved(path.parent)
        root = package_root(folder / path.name, self._package_roots)
        if root not in self.roots:
            self.roots.append(root)
        if root.name in ENVIRONMENT_FOLDERS:
            entry = (folder / path.name).relative_to(root).parts[0]
            self._linted_entries.setdefault(root, set()).add(entry)

    def _resolved(self, folder: Path) -> Path:
        """`folder.resolve()`, remembered for each folder on the way up (one `lstat` each
        instead of one per component)."""
        known = self._resolved_folders.get(folder)
        if known is None:
            parent = folder.parent
            if parent == folder or folder.is_symlink() or folder.name in ("", ".", ".."):
                known = folder.resolve()
            else:
                known = self._resolved(parent) / folder.name
            self._resolved_folders[folder] = known
        return known

    def module_name(self, path: Path) -> tuple[str, bool]:
        """The file's dotted module name, and whether it is a package's `__init__.py`.

        For a file inside a package, the root from which every folder down to the file is a
        package (has an `__init__.py`) wins, the outermost such root first: linting an
        unpacked wheel from the folder above it (`corpus/transformers/transformers/...`
        with the current folder `corpus/`) names its modules `transformers.models...`, so
        that their relative imports reach the package's own modules. Otherwise (no such
        root, or namespace packages) the first root that holds the file names it.
        """
        path = path.resolve()
        is_package = path.name == "__init__.py"
        top = package_root(path, self._package_roots)
        names = list(self._dotted_names(path, is_package))
        in_packages = [(root, name) for root, name in names
                       if top != path.parent and (root == top or top in root.parents)]
        if in_packages:
            return min(in_packages, key=lambda pair: len(pair[0].parts))[1], is_package
        return (names[0][1] if names else path.stem), is_package

    def _dotted_names(self, path: Path, is_package: bool) -> Iterator[tuple[Path, str]]:
        """The file's dotted module name under each root that holds it, with the root."""
        for root in self.roots:
            try:
                relative = path.relative_to(root)
            except ValueError:
                continue
            parts = list(relative.with_suffix("").parts)
            if is_package:
                parts = parts[:-1]
            if parts and all(part.isidentifier() for part in parts):
                yield root, ".".join(parts)

    @property
    def environment_entries(self) -> dict[Path, set[str]]:
        """For each root that is an environment folder, the entries being linted there."""
        return {root: set(names) for root, names in self._linted_entries.items()}

    def display_name(self, path: Path) -> str:
        if self.display_base is not None:
            try:
                return str(path.resolve().relative_to(self.display_base))
            except ValueError:
                pass
        return str(path)

    def register(self, module: SourceModule) -> None:
        self._by_path[module.path] = module

    def parsed_sizes(self) -> dict[Path, int]:
        """The length of the text of each module parsed and kept."""
        return {path: len(module.text) for path, module in self._by_path.items()
                if module is not None}

    def forget_parsed(self, keep: set[Path]) -> None:
        """Drop the parsed modules other than `keep` (their libcst trees are most of a run's
        memory); one asked for again is parsed again. Whoever holds what was derived from
        them must drop it too. (Files that could not be parsed stay known.)"""
        self._by_path = {path: module for path, module in self._by_path.items()
                         if module is None or path in keep}

    def source_files(self) -> list[Path]:
        """Every project file a whole-project question looks at (who writes a global, who
        derives from a class, who applies a decorator): the `.py` files directly in each
        import root, and everything inside the packages found there (a root such as the
        current folder is not searched through folders that are not packages; in an
        environment folder, only the packages and modules being linted). Listed once per
        run."""
        if self._files is None:
            files: list[Path] = []
            for root in self.roots:
                try:
                    entries = sorted(os.scandir(root), key=lambda e: e.name)
                except OSError:
                    continue
                linted = self._linted_entries.get(root)
                if linted is not None:
                    entries = [entry for entry in entries if entry.name in linted]
                for entry in entries:
                    if len(files) > MAX_PROJECT_FILES:
                        break
                    kind = followed_kind(entry)
                    if entry.name.endswith(".py") and kind == "file":
                        files.append(Path(entry.path))
                    elif (kind == "dir" and entry.name not in SKIPPED_DIRS
                          and not entry.name.startswith(".")
                          and os.path.isfile(os.path.join(entry.path, "__init__.py"))):
                        files.extend(walk_package(Path(entry.path)))
            self._files = list(dict.fromkeys(
                resolved for path in files if (resolved := resolved_or_none(path)) is not None
            ))[:MAX_PROJECT_FILES]
        return self._files

    def source_text(self, path: Path) -> str | None:
        """A project file's text for a text search (None when unreadable or too large),
        read once per run."""
        if path not in self._texts:
            try:
                if path.stat().st_size > MAX_SCANNED_TEXT:
                    self._texts[path] = None
                else:
                    text = path.read_text(encoding="utf-8", errors="replace")
                    self._texts[path] = text if text.isascii() else text.encode("utf-8")
            except OSError:
                self._texts[path] = None
        kept = self._texts[path]
        return kept.decode("utf-8") if isinstance(kept, bytes) else kept

    def module_at(self, path: Path) -> SourceModule | None:
        """The parsed module at `path` (None when it cannot be read or parsed)."""
        path = path.resolve()
        self.dependencies.record(path)
        if path not in self._by_path:
            from ckptlint.syntax.source import load_module

            name, is_package = self.module_name(path)
            try:
                self._by_path[path] = load_module(path, self.display_name(path), name,
                                                  is_package, self.limits.read_text(path))
            except SourceError as error:
                self.parse_errors[path] = str(error)
                self._by_path[path] = None
            except RecursionError:
                self.parse_errors[path] = "nesting too deep to parse"
                self._by_path[path] = None
        return self._by_path[path]

    def module_path(self, dotted: str) -> Path | None:
        """The file of the project module with this dotted name, found without parsing it."""
        parts = dotted.split(".")
        for root in self.roots:
            base = root.joinpath(*parts)
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                self.dependencies.record(candidate)
                if os.path.isfile(candidate):  # (False in a folder we may not read)
                    return candidate
        return None

    def find_module(self, dotted: str) -> SourceModule | None:
        """The parsed project module with this dotted name, if it lives under one of the roots."""
        path = self.module_path(dotted)
        return self.module_at(path) if path is not None else None

    def may_bind(self, path: Path, name: str) -> bool:
        """Can the module at `path` bind `name` at module level? False only when certain.

        Answered from a module already parsed, else from the text and CPython's `ast` (about a
        tenth of libcst's parse): resolving `torch.fx` needs `torch/__init__.py` parsed only
        when that file may itself define `fx`.
        """
        path = path.resolve()
        self.dependencies.record(path)
        module = self._by_path.get(path)
        if module is not None:
            return name in module.scopes.module_scope.bindings
        if path not in self._module_names:
            dotted, is_package = self.module_name(path)
            own = ({name for _, name in self._dotted_names(path, is_package)} if is_package
                   else set())
            self._module_names[path] = module_level_names(path, dotted, is_package, own,
                                                          self.limits)
        names = self._module_names[path]
        return names is None or name in names

    def imported_names(self, path: Path, name: str) -> list[str] | None:
        """When the module at `path` binds `name` at module level only by importing it: the
        dotted names bound by the imports a use sees (`scopes.live_bindings`: the last
        unconditional one and any conditional after it), in source order; else None (parse
        the module to know).

        Answered without libcst, from the `ast` summary of its re-exports kept in the
        summary store (`ckptlint.analysis.reexports`), unless the module is parsed already.
        """
        path = path.resolve()
        self.dependencies.record(path)
        if path in self._by_path:
            return None
        if path not in self._reexports:
            self._reexports[path] = self._read_reexports(path)
        found = self._reexports[path]
        if found is None or name not in found:
            return None
        imported = imported_qualnames(found[name], *self.module_name(path))
        if imported is None:
            return None
        unconditional = [index for index, (_, conditional) in enumerate(imported)
                         if not conditional]
        return [qualname for qualname, _ in imported[unconditional[-1] if unconditional else 0:]]

    def _read_reexports(self, path: Path) -> Reexports | None:
        from ckptlint.syntax.reading import parse_ast

        try:
            text = self.limits.read_text(path)
            return self.summaries.fact(text, "reexports",
                                       lambda text: reexports(parse_ast(text, str(path))),
                                       plain_reexports, stored_reexports)
        except (OSError, SourceError, RecursionError):
            return None


def followed_kind(entry: os.DirEntry) -> str | None:
    """"file" or "dir", links followed; None for anything else, and for a link that cannot
    be followed (a loop of links)."""
    try:
        return "file" if entry.is_file() else "dir" if entry.is_dir() else None
    except OSError:
        return None


def resolved_or_none(path: Path) -> Path | None:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a loop of links
        return None


def walk_package(folder: Path) -> list[Path]:
    found: list[Path] = []
    for current, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        found.extend(Path(current) / n for n in sorted(names) if n.endswith(".py"))
        if len(found) > MAX_PROJECT_FILES:
            break
    return found


def module_level_names(path: Path, module_name: str, is_package: bool,
                       own_names: set[str], limits: Limits) -> frozenset[str] | None:
    """Names a module may bind in its own namespace (`global` declarations in functions
    included); None when the file cannot be read or parsed, or is over `limits`.

    Left out: star imports, as `scopes.py` leaves them out (what they bind is not known
    without the imported module), and a package importing its own submodule under its own
    name (`from torch import fx as fx` in `torch/__init__.py`), which binds what the
    submodule's path already gives (`own_names`: the package's dotted names, one per root
    that holds it).
    """
    import ast

    from ckptlint.syntax.modnames import resolve_relative
    from ckptlint.syntax.reading import bound_name, parse_ast

    try:
        text = limits.read_text(path)
        tree = parse_ast(text, str(path))
    except (OSError, SourceError, RecursionError):
        return None
    names: set[str] = set()
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module
            if node.level:
                base = resolve_relative(module_name, is_package, node.level, base)
            own = base in own_names
            names.update(alias.asname or alias.name for alias in node.names if alias.name != "*"
                         and not (own and alias.asname in (None, alias.name)))
        elif (name := bound_name(node)) is not None:
            names.add(name)
        if isinstance(node, nested):
            pending.extend(node.decorator_list if not isinstance(node, ast.Lambda) else ())
            continue  # its body binds in its own scope
        pending.extend(ast.iter_child_nodes(node))
    if "global" in text:
        names.update(name for node in ast.walk(tree) if isinstance(node, ast.Global)
                     for name in node.names)
    return frozenset(names)
