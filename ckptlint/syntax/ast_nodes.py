"""Walking CPython `ast` trees at a fraction of `ast.walk`'s cost.

`ast.walk` and `ast.iter_child_nodes` go through `ast.iter_fields` for every node and yield
expression contexts and operators (`Load`, `Store`, `Add`, `Eq`): a third of the nodes of
typical code, and no reader here walks to one (they read `name.ctx`). The fields of each node
class that can hold a node are listed once, the contexts and operators left out.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator

# Fields that hold only contexts, operators or type-ignore comments.
_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops", "type_ignores"})
# Fields that never hold a node, in any node class (names, levels, flags).
_PLAIN_FIELDS = frozenset({"id", "name", "attr", "arg", "asname", "module", "level",
                           "type_comment", "conversion", "is_async", "kind", "rest"})
_FIELDS: dict[type, tuple[str, ...]] = {}


def node_fields(kind: type) -> tuple[str, ...]:
    """The fields of a node class that can hold nodes, in `_fields` order."""
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = tuple(
            name for name in getattr(kind, "_fields", ())
            if name not in _SKIPPED_FIELDS and name not in _PLAIN_FIELDS)
    return fields


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """`ast.iter_child_nodes(node)` without contexts and operators, in the same order."""
    children: list[ast.AST] = []
    for name in _FIELDS.get(type(node)) or node_fields(type(node)):
        value = getattr(node, name, None)
        if isinstance(value, list):
            children.extend(item for item in value if isinstance(item, ast.AST))
        elif isinstance(value, ast.AST):
            children.append(value)
    return children


def walk_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk(tree)` without contexts and operators, in the same (breadth-first) order."""
    pending = deque([tree])
    while pending:
        node = pending.popleft()
        pending.extend(child_nodes(node))
        yield node
