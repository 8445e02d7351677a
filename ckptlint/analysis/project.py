"""The project being linted: where its modules are, parsed lazily and once each."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ckptlint.analysis.classes import (
    ClassSummary,
    ModuleClasses,
    module_classes,
    plain_classes,
    stored_classes,
)
from ckptlint.analysis.dependencies import DependencyRecorder
from ckptlint.analysis.opaque import OpaqueValues, opaque_values, plain_opaque, stored_opaque
from ckptlint.analysis.reexports import (
    Reexports,
    imported_qualnames,
    plain_reexports,
    reexports,
    stored_reexports,
)
from ckptlint.analysis.summary_store import SignedText, SummaryStore
from ckptlint.storage.file_signature import Signature, signature
from ckptlint.storage.plain_data import (
    ShapeError,
    want_dict,
    want_int,
    want_list,
    want_str,
    want_strs,
)
from ckptlint.syntax.ast_nodes import child_nodes, walk_nodes
from ckptlint.syntax.reading import (
    Limits,
    SourceError,
    check_nodes,
    compact_text,
    decode_source,
    full_text,
    read_bytes,
    statement_starts,
)

if TYPE_CHECKING:  # ckptlint.syntax.source imports libcst: only when a module is parsed
    import ast

    from ckptlint.syntax.source import SourceModule

T = TypeVar("T")

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


def scanned_text(path: str | Path) -> tuple[str | bytes | None, Signature | None]:
    """A project file's text as kept for the text searches (`compact_text`; None when
    unreadable or larger than `MAX_SCANNED_TEXT`), and its stat signature taken before it
    was read."""
    try:
        info = os.stat(path)
        if info.st_size > MAX_SCANNED_TEXT:
            return None, None
        with open(path, encoding="utf-8", errors="replace") as file:
            return compact_text(file.read()), signature(info)
    except OSError:
        return None, None


class Project:
    """Maps files to dotted module names and back, and keeps each parsed module once."""

    def __init__(self, roots: list[Path], display_base: Path | None = None,
                 limits: Limits = Limits()) -> None:
        self.roots = [root.resolve() for root in roots]
        self.display_base = display_base
        # The run's linted files (absolute, unresolved) -> how the run reports each.
        self.target_displays: dict[str, str] = {}
        self.limits = limits  # for the modules read to follow calls
        self._by_path: dict[Path, SourceModule | None] = {}
        self.parse_errors: dict[Path, str] = {}
        self._module_names: dict[Path, frozenset[str] | None] = {}
        self._reexports: dict[Path, Reexports | None] = {}
        self._classes: dict[Path, ModuleClasses | None] = {}
        self._opaque: dict[Path, OpaqueValues | None] = {}
        self._last_parse: tuple[Path, str, ast.Module] | None = None  # see `_ast_of`
        # `module_path` answers by (dotted name, number of roots): roots are only added.
        self._module_paths: dict[tuple[str, int], tuple[Path | None, tuple[Path, ...]]] = {}
        self._package_roots: dict[Path, Path] = {}
        self._resolved_folders: dict[Path, Path] = {}
        self._files: list[Path] | None = None
        # For a root that is an environment folder: the names of its entries being linted.
        self._linted_entries: dict[Path, set[str]] = {}
        # Project files' texts for the text searches, as `compact_text` keeps them (a text
        # not all ASCII was most of their memory).
        self._texts: dict[Path, str | bytes | None] = {}
        self._text_signatures: dict[Path, Signature] = {}  # each file's when its text was read
        self._holding: dict[str, frozenset[Path]] = {}  # `files_holding`
        # Every path looked at to resolve names, found or not, is recorded here (the engine
        # keeps a recording per linted file: the cache's dependencies).
        self.dependencies = DependencyRecorder()
        # Facts about project files by content, for the whole-project questions (kept
        # between runs when the run uses the cache: the engine replaces it).
        self.summaries = SummaryStore()
        self._real_paths: dict[Path, Path] = {}  # `real_path`'s answers
        self._within_node_limit: set[tuple[Path, int]] = set()  # see `read_module_text`

    def add_root_for(self, path: Path) -> None:
        folder = path.resolve().parent if path.is_symlink() else self._resolved(path.parent)
        root = package_root(folder / path.name, self._package_roots)
        if root not in self.roots:
            self.roots.append(root)
        if root.name in ENVIRONMENT_FOLDERS:
            entry = (folder / path.name).relative_to(root).parts[0]
            self._linted_entries.setdefault(root, set()).add(entry)

    def real_path(self, path: Path) -> Path:
        """`path.resolve()`, remembered for the run (name resolution asks about the same
        few hundred files thousands of times)."""
        real = self._real_paths.get(path)
        if real is None:
            real = self._real_paths[path] = path.resolve()
        return real

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

    def dotted_name(self, path: Path) -> str:
        return self.module_name(path)[0]

    def module_name(self, path: Path) -> tuple[str, bool]:
        """The file's dotted module name, and whether it is a package's `__init__.py`.

        For a file inside a package, the root from which every folder down to the file is a
        package (has an `__init__.py`) wins, the outermost such root first: linting an
        unpacked wheel from the folder above it (`corpus/transformers/transformers/...`
        with the current folder `corpus/`) names its modules `transformers.models...`, so
        that their relative imports reach the package's own modules. Otherwise (no such
        root, or namespace packages) the first root that holds the file names it.
        """
        path = self.real_path(path)
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

    def name_targets(self, targets: Iterable[tuple[Path, str]]) -> None:
        """Report each of the run's linted files as the run does wherever it comes up: a file
        reached from another (in a finding's data, as a module parsed to follow a call) is
        then named the same whichever process analysed which, and its module, parsed while
        reached, serves its own analysis."""
        self.target_displays = {os.path.abspath(path): display for path, display in targets}

    def display_name(self, path: Path) -> str:
        display = self.target_displays.get(os.path.abspath(path))
        if display is not None:
            return display
        if self.display_base is not None:
            try:
                return str(path.resolve().relative_to(self.display_base))
            except ValueError:
                pass
        return str(path)

    def register(self, module: SourceModule) -> None:
        self._by_path[module.path] = module

    def kept_module(self, path: Path, display: str, name: str, is_package: bool,
                    text: str) -> SourceModule | None:
        """The module parsed and kept at `path` (reached from a file analysed before), when
        it is the one `load_module` would make of these: a file about to be analysed need
        not be parsed again."""
        module = self._by_path.get(path)
        if module is None or (module.display, module.name, module.is_package, module.size) \
                != (display, name, is_package, len(text)) or module.text != text:
            return None
        return module

    def parsed_sizes(self) -> dict[Path, int]:
        """The length of the text of each module parsed and kept."""
        return {path: module.size for path, module in self._by_path.items()
                if module is not None}

    def forget_file_state(self) -> None:
        """After a linted file's analysis: drop what mostly that file needed, the node
        positions of every parsed module and CPython's last tree (made again when asked
        for)."""
        for module in self._by_path.values():
            if module is not None:
                module.forget_positions()
        self._last_parse = None

    def forget_parsed(self, keep: set[Path]) -> None:
        """Drop the parsed modules other than `keep` (their libcst trees are most of a run's
        memory); one asked for again is parsed again. Whoever holds what was derived from
        them must drop it too. (Files that could not be parsed stay known.)"""
        for path, module in self._by_path.items():
            if module is not None and path not in keep:
                module.release()
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
        kept = self._kept_text(path)
        return full_text(kept) if kept is not None else None

    def files_holding(self, word: str) -> frozenset[Path]:
        """The project files whose text (`source_text`) holds `word`, found once per word
        (a project-wide scan asks it of every file, and asks the same words again for other
        names), tested on the texts as kept: one not all ASCII is not decoded for it."""
        if word not in self._holding:
            encoded = word.encode("utf-8", "surrogatepass")
            self._holding[word] = frozenset(
                path for path in self.source_files()
                if (kept := self._kept_text(path)) is not None
                and (encoded in kept if isinstance(kept, bytes) else word in kept))
        return self._holding[word]

    def _kept_text(self, path: Path) -> str | bytes | None:
        """`source_text` as kept (`compact_text`), read on first use."""
        if path not in self._texts:
            self._texts[path], read_as = scanned_text(path)
            if read_as is not None:
                self._text_signatures[path] = read_as
        return self._texts[path]

    def signed_text(self, path: Path) -> SignedText:
        """`source_text`, and the file's stat signature taken before it was read: for facts
        the summary store keeps by path (`SummaryStore.path_fact`)."""
        text = self.source_text(path)
        return text, self._text_signatures.get(path)

    def text_fact(self, path: Path, name: str, compute: Callable[[str], T],
                  to_plain: Callable[[T], Any], from_plain: Callable[[Any], T]) -> T | None:
        """A fact about a project file's text, through the summary store's facts by path."""
        return self.summaries.path_fact(path, name, lambda: self.signed_text(path), compute,
                                        to_plain, from_plain)

    def module_at(self, path: Path) -> SourceModule | None:
        """The parsed module at `path` (None when it cannot be read or parsed)."""
        path = self.real_path(path)
        self.dependencies.record(path)
        if path not in self._by_path:
            from ckptlint.syntax.source import load_module

            name, is_package = self.module_name(path)
            try:
                text = self.read_module_text(path)
                searched = self._texts.get(path)
                if type(searched) is str and searched == text:
                    text = searched  # one copy for the text searches and the module
                self._by_path[path] = load_module(path, self.display_name(path), name,
                                                  is_package, text,
                                                  statement_starts(self._ast_of(path, text)))
            except SourceError as error:
                self.parse_errors[path] = str(error)
                self._by_path[path] = None
            except RecursionError:
                self.parse_errors[path] = "nesting too deep to parse"
                self._by_path[path] = None
        return self._by_path[path]

    def module_path(self, dotted: str) -> Path | None:
        """The file of the project module with this dotted name, found without parsing it.

        Looked for once per name while the roots stay the same; each call records the
        candidate files looked at, found or not (the result cache's dependencies).
        """
        return self.dependencies.cached(self._module_paths, (dotted, len(self.roots)),
                                        lambda: self._find_module_path(dotted))

    def _find_module_path(self, dotted: str) -> Path | None:
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
        tenth of libcst's parse; its bindings kept in the summary store): resolving `torch.fx`
        needs `torch/__init__.py` parsed only when that file may itself define `fx`.
        """
        path = self.real_path(path)
        self.dependencies.record(path)
        module = self._by_path.get(path)
        if module is not None:
            return name in module.scopes.module_scope.bindings
        if path not in self._module_names:
            dotted, is_package = self.module_name(path)
            own = ({name for _, name in self._dotted_names(path, is_package)} if is_package
                   else set())
            try:
                text = self.read_module_text(path)
                found = self.summaries.fact(
                    text, "module_bindings",
                    lambda text: module_bindings(self._ast_of(path, text), text),
                    plain_bindings, stored_bindings)
                self._module_names[path] = module_level_names(found, dotted, is_package, own)
            except (OSError, SourceError, RecursionError):
                self._module_names[path] = None
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
        path = self.real_path(path)
        found = self._summary(path, self._reexports, lambda path: self._read_fact(
            path, "reexports", reexports, plain_reexports, stored_reexports))
        if found is None or name not in found:
            return None
        imported = imported_qualnames(found[name], *self.module_name(path))
        if imported is None:
            return None
        unconditional = [index for index, (_, conditional) in enumerate(imported)
                         if not conditional]
        return [qualname for qualname, _ in imported[unconditional[-1] if unconditional else 0:]]

    def class_summary(self, path: Path, name: str) -> ClassSummary | None:
        """The `ast` summary of the class the module at `path` binds as `name` at module
        level (`ckptlint.analysis.classes`), kept in the summary store; None when the module
        is parsed already (ask its tree) or the class is not summarised."""
        found = self._summary(self.real_path(path), self._classes, lambda path: self._read_fact(
            path, "classes", module_classes, plain_classes, stored_classes))
        return found.get(name) if found is not None else None

    def opaque_value(self, path: Path, name: str) -> str | None:
        """The code of the value the module at `path` binds to `name`, when that is its only
        binding and a value the resolver does not follow (`ckptlint.analysis.opaque`), from
        the summary store; None when the module is parsed already (ask its tree) or the name
        is not summarised."""
        found = self._summary(self.real_path(path), self._opaque, lambda path: self._read_fact(
            path, "opaque", opaque_values, plain_opaque, stored_opaque, with_text=True))
        return found.get(name) if found is not None else None

    def _summary(self, path: Path, kept: dict[Path, T | None],
                 read: Callable[[Path], T | None]) -> T | None:
        """An `ast` summary of the module at `path` (resolved), read once per run; None when
        the module is parsed already (its tree answers) or cannot be read."""
        self.dependencies.record(path)
        if path in self._by_path:
            return None
        if path not in kept:
            kept[path] = read(path)
        return kept[path]

    def _read_fact(self, path: Path, name: str, summarise: Callable[..., T],
                   to_plain: Callable[[T], Any], from_plain: Callable[[Any], T], *,
                   with_text: bool = False) -> T | None:
        """A fact about the module at `path` made from its `ast` (and, `with_text`, its
        text; None when it cannot be read or parsed), through the summary store."""
        try:
            text = self.read_module_text(path)
            return self.summaries.fact(
                text, name,
                lambda text: (summarise(self._ast_of(path, text), text) if with_text
                              else summarise(self._ast_of(path, text))),
                to_plain, from_plain)
        except (OSError, SourceError, RecursionError):
            return None

    def read_module_text(self, path: Path) -> str:
        """The text of a module read to follow a call, or a SourceError: unreadable,
        undecodable, or over a limit (`limits`). A text once found within the node limit is
        not counted again in the run (a module is read for its bindings, re-exports,
        classes, values and tree in turn)."""
        text = decode_source(read_bytes(path, self.limits.file_size))
        key = (path, hash(text))
        if key not in self._within_node_limit:
            check_nodes(text, self.limits.nodes)
            self._within_node_limit.add(key)
        return text

    def _ast_of(self, path: Path, text: str) -> ast.Module:
        """CPython's parse of the module at `path`, whose text is `text` (`SourceError` when
        it cannot be parsed). The last one is kept: one step of resolution asks `may_bind`,
        `imported_names` and `class_summary` of the same module in turn."""
        from ckptlint.syntax.reading import parse_ast

        if self._last_parse is None or self._last_parse[:2] != (path, text):
            self._last_parse = (path, text, parse_ast(text, str(path)))
        return self._last_parse[2]


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


# What a module binds at module level, from its text alone (`module_bindings`): the names
# bound other than by `from ... import`, and each name a `from` import binds, as (dots of a
# relative import, module written, name bound, whether it is the imported name unrenamed).
FromImport = tuple[int, str, str, bool]
ModuleBindings = tuple[frozenset[str], tuple[FromImport, ...]]


def module_bindings(tree: ast.Module, text: str) -> ModuleBindings:
    """Names a module (its `ast` and text) may bind in its own namespace (`global`
    declarations in functions included), star imports left out as `scopes.py` leaves them
    out (what they bind is not known without the imported module)."""
    import ast

    from ckptlint.syntax.reading import bound_name

    names: set[str] = set()
    imported: list[FromImport] = []
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.extend((node.level, node.module or "", alias.asname or alias.name,
                             alias.asname in (None, alias.name))
                            for alias in node.names if alias.name != "*")
        elif (name := bound_name(node)) is not None:
            names.add(name)
        if isinstance(node, nested):
            pending.extend(node.decorator_list if not isinstance(node, ast.Lambda) else ())
            continue  # its body binds in its own scope
        pending.extend(child_nodes(node))
    if "global" in text:
        names.update(name for node in walk_nodes(tree) if isinstance(node, ast.Global)
                     for name in node.names)
    return frozenset(names), tuple(imported)


def module_level_names(found: ModuleBindings, module_name: str, is_package: bool,
                       own_names: set[str]) -> frozenset[str]:
    """The names of `module_bindings`, less those a package binds by importing its own
    submodule under its own name (`from torch import fx as fx` in `torch/__init__.py`),
    which binds what the submodule's path already gives (`own_names`: the package's dotted
    names, one per root that holds it)."""
    from ckptlint.syntax.modnames import resolve_relative

    names, imported = found
    kept = set(names)
    for level, base, bound, unrenamed in imported:
        module = resolve_relative(module_name, is_package, level, base or None) if level else base
        if not (unrenamed and module in own_names):
            kept.add(bound)
    return frozenset(kept)


def plain_bindings(found: ModuleBindings) -> dict[str, Any]:
    names, imported = found
    return {"names": sorted(names), "from_imports": [list(item) for item in imported]}


def stored_bindings(value: Any) -> ModuleBindings:
    fields = want_dict(value, "module bindings")
    imported = []
    for item in want_list(fields.get("from_imports"), "from imports"):
        parts = want_list(item, "from import")
        if len(parts) != 4 or type(parts[3]) is not bool:
            raise ShapeError("from import: expected [level, module, name, unrenamed]")
        imported.append((want_int(parts[0], "from import level", 0, 1000),
                         want_str(parts[1], "from import module"),
                         want_str(parts[2], "from import name"), parts[3]))
    return frozenset(want_strs(fields.get("names"), "module names")), tuple(imported)
