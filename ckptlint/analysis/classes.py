"""Module-level classes summarised from `ast`, to resolve through them without a libcst tree.

Resolution reads classes of other modules mostly to ask: what are its bases, does it define a
method by this name, do its methods assign `self.<name>`? A module reached only for such
questions (the bases of a model class, the mixins it derives from) need not be parsed with
libcst: this summary answers them, and the resolver (`ckptlint.analysis.resolve`) parses the
module only when the answer is "maybe" (a method is defined there: its body is needed) or the
summary cannot say.

A class is summarised when the module binds its name only by that one `class` statement, at
the top of the module body, and every base is a dotted name (`Base`, `nn.Module`) whose first
name the module binds in one of three ways, which the resolver can follow without the tree:
- `import`: bound only by imports, every one of them before the class statement (the scope
  model's bindings a base sees are then `live_bindings` of them all, as the re-export summary
  gives them, `ckptlint.analysis.reexports`);
- `class`: another summarised class defined before it in the module;
- `unbound`: not bound in the module at all (a builtin, or undefined).
Any other class is left out, and resolving through it parses the module as before.

`methods` and `assigned` may say more than the class has (every `def` name anywhere in its
body, every `<name>.X = ...` target): a name in them only means "parse to know".

The summary is a pure function of the file's text, stored in the project's summary store under
the text's digest (`ckptlint.analysis.summary_store`): plain JSON, checked field by field when
read back.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ckptlint.analysis.reexports import reexports
from ckptlint.storage.plain_data import ShapeError, want_dict, want_list, want_str, want_strs
from ckptlint.syntax.ast_nodes import child_nodes, walk_nodes
from ckptlint.syntax.reading import bound_name

BASE_KINDS = ("import", "class", "unbound")


@dataclass(frozen=True)
class ClassSummary:
    # Each base as written (a dotted name) with how the module binds its first name.
    bases: tuple[tuple[str, str], ...]
    methods: frozenset[str]  # names a `def` in its body may bind (more, never fewer)
    assigned: frozenset[str]  # attributes an assignment in its body may set (likewise)


ModuleClasses = dict[str, ClassSummary]


def module_classes(tree: ast.Module) -> ModuleClasses:
    """The summarisable module-level classes of a module, by name."""
    imported = reexports(tree)
    imports = import_lines(tree.body, {})
    bound = binding_counts(tree)
    found: ModuleClasses = {}
    for statement in tree.body:
        if not isinstance(statement, ast.ClassDef) or bound[statement.name] != 1 \
                or statement.name in imports:
            continue
        bases = []
        for base in statement.bases:
            written = _dotted(base)
            head = written.split(".", 1)[0] if written is not None else ""
            if written is None:
                break
            if head in imported and all(line < statement.lineno
                                        for line in imports[head]):
                bases.append((written, "import"))
            elif head in found:
                bases.append((written, "class"))
            elif bound[head] == 0 and head not in imported:
                bases.append((written, "unbound"))
            else:
                break
        else:
            found[statement.name] = ClassSummary(tuple(bases), *_members(statement))
    return found


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner is not None else None
    return None


def import_lines(body: list[ast.stmt], lines: dict[str, list[int]]) -> dict[str, list[int]]:
    """For each name a module-level import statement binds: the last lines of those
    statements (in branches too)."""
    for statement in body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            for alias in statement.names:
                name = alias.asname or alias.name.split(".")[0]
                lines.setdefault(name, []).append(statement.end_lineno or statement.lineno)
        elif not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for inner in child_nodes(statement):
                if isinstance(inner, ast.stmt):
                    import_lines([inner], lines)
                elif isinstance(inner, (ast.ExceptHandler, ast.match_case)):
                    import_lines(inner.body, lines)
    return lines


def binding_counts(tree: ast.Module) -> Counter[str]:
    """How often each name is bound other than by an import, in any scope (`global` counts
    too): more than the module level binds, so a count of 0 or 1 is certain there."""
    counts: Counter[str] = Counter()
    for node in walk_nodes(tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            counts.update(node.names)
        elif (name := bound_name(node)) is not None:
            counts[name] += 1
    return counts


def _members(statement: ast.ClassDef) -> tuple[frozenset[str], frozenset[str]]:
    methods: set[str] = set()
    assigned: set[str] = set()
    for node in walk_nodes(statement):
        if node is statement:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            methods.add(node.name)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name)):
            assigned.add(node.attr)
    return frozenset(methods), frozenset(assigned)


def plain_classes(found: ModuleClasses) -> dict[str, Any]:
    return {name: {"bases": [list(base) for base in summary.bases],
                   "methods": sorted(summary.methods), "assigned": sorted(summary.assigned)}
            for name, summary in found.items()}


def stored_classes(value: Any) -> ModuleClasses:
    found: ModuleClasses = {}
    for name, fields in want_dict(value, "classes").items():
        fields = want_dict(fields, "class summary")
        if set(fields) != {"bases", "methods", "assigned"}:
            raise ShapeError("class summary: expected bases, methods and assigned")
        found[want_str(name, "class name")] = ClassSummary(
            tuple(_stored_base(base) for base in want_list(fields["bases"], "class bases")),
            frozenset(want_strs(fields["methods"], "class methods")),
            frozenset(want_strs(fields["assigned"], "class attributes")))
    return found


def _stored_base(value: Any) -> tuple[str, str]:
    items = want_list(value, "class base")
    if len(items) != 2 or items[1] not in BASE_KINDS:
        raise ShapeError("class base: expected [dotted name, how its first name is bound]")
    return want_str(items[0], "class base name"), items[1]
