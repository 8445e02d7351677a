"""Names a module binds only by importing them: answered from `ast` or a stored summary.

Resolving `package.Name` where `package/__init__.py` only re-exports `Name` (`from .models
import Name`) needs no libcst tree of that file: the answer is wherever the import leads.
This summary says, for each name a module binds at module level only through `import`
statements, which imports bind it and whether each is conditional (inside an `if`, `try`,
loop, `with` or `match` at module level), in the order the scope model
(`ckptlint.analysis.scopes`) records them, so that its rule for the bindings a use may see
(`live_bindings`) gives the same answer. A name bound any other way at module level (an
assignment, a definition, a `global` in a function, ...) is left out: resolving it still
parses the module.

The summary is a pure function of the file's text (relative imports are kept relative and
resolved by the reader), so it is stored in the project's summary store under the text's
digest (`ckptlint.analysis.summary_store`): plain JSON, checked field by field when read.
"""

from __future__ import annotations

import ast
from typing import Any

from ckptlint.storage.plain_data import ShapeError, want_dict, want_int, want_list, want_str
from ckptlint.syntax.ast_nodes import child_nodes
from ckptlint.syntax.modnames import resolve_relative
from ckptlint.syntax.reading import bound_name

# One import binding a name: (dots of a relative import, module or dotted name written,
# name imported from it ("" for `import a.b`), inside a conditional region).
ImportBinding = tuple[int, str, str, bool]
Reexports = dict[str, list[ImportBinding]]

_TRY_STAR = getattr(ast, "TryStar", ast.Try)  # `try: ... except* E:` (Python 3.11+)
_BRANCHES = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
             _TRY_STAR, ast.Match)


def reexports(tree: ast.Module) -> Reexports:
    """For each name bound at module level by imports only: those imports, in source order."""
    found: Reexports = {}
    _collect_imports(tree.body, False, found)
    for name in _other_bound_names(tree):
        found.pop(name, None)
    return found


def _collect_imports(body: list[ast.stmt], conditional: bool, found: Reexports) -> None:
    for statement in body:
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname is not None:
                    found.setdefault(alias.asname, []).append((0, alias.name, "", conditional))
                else:
                    head = alias.name.split(".")[0]
                    found.setdefault(head, []).append((0, head, "", conditional))
        elif isinstance(statement, ast.ImportFrom):
            for alias in statement.names:
                if alias.name != "*":
                    found.setdefault(alias.asname or alias.name, []).append(
                        (statement.level, statement.module or "", alias.name, conditional))
        elif isinstance(statement, _BRANCHES):
            for inner in _statement_lists(statement):
                _collect_imports(inner, True, found)


def _statement_lists(statement: Any) -> list[list[ast.stmt]]:
    """The statement lists of a compound statement, in source order."""
    if isinstance(statement, ast.Match):
        return [case.body for case in statement.cases]
    lists = [statement.body, *(handler.body for handler in getattr(statement, "handlers", []))]
    return lists + [getattr(statement, part, None) or [] for part in ("orelse", "finalbody")]


def _other_bound_names(tree: ast.Module) -> set[str]:
    """Every name the module may bind at module level other than by an import statement
    (more than it binds: comprehension variables count too; `global` anywhere counts)."""
    names: set[str] = set()
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif (name := bound_name(node)) is not None:
            names.add(name)
        pending.extend(child_nodes(node))  # nested bodies too: for `global`
    return names


def imported_qualnames(bindings: list[ImportBinding], module_name: str,
                       is_package: bool) -> list[tuple[str, bool]] | None:
    """The dotted name each import binds, with its conditional flag, as the scope model
    records it; None when a relative import reaches above the top package (the scope
    model binds nothing there)."""
    resolved = []
    for level, base, imported, conditional in bindings:
        if level:
            base = resolve_relative(module_name, is_package, level, base or None)
            if not base:
                return None
        resolved.append((f"{base}.{imported}" if imported else base, conditional))
    return resolved


def plain_reexports(found: Reexports) -> dict[str, Any]:
    return {name: [list(binding) for binding in bindings] for name, bindings in found.items()}


def stored_reexports(value: Any) -> Reexports:
    found: Reexports = {}
    for name, bindings in want_dict(value, "reexports").items():
        found[want_str(name, "reexports name")] = [
            _stored_binding(binding) for binding in want_list(bindings, "reexports bindings")]
    return found


def _stored_binding(value: Any) -> ImportBinding:
    items = want_list(value, "reexports binding")
    if len(items) != 4 or type(items[3]) is not bool:
        raise ShapeError("reexports binding: expected [level, module, name, conditional]")
    level, base, imported, conditional = items
    return (want_int(level, "reexports level", 0, 1000), want_str(base, "reexports module"),
            want_str(imported, "reexports name"), conditional)
