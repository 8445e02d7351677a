"""A fast read-only walk over libcst trees.

libcst's own visitor machinery rebuilds every node as it goes and costs several times the
parse; ckptlint only reads, so it walks the dataclass fields directly, skipping whitespace
and punctuation. Visitors define `visit_<NodeClass>(node)` (return False to skip the
children) and `leave_<NodeClass>(node)`, as with libcst's CSTVisitor.

The walk runs over every node of every tree the linter reads, so it is kept lean: each node
class's child fields and each visitor's hooks for it are looked up once, and what a field
holds (a node, a sequence, anything else) is told by its value's class through a table,
since `isinstance` against `cst.CSTNode`, an abstract class, is slow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import libcst as cst

_SKIPPED_FIELDS = frozenset({
    "lpar", "rpar", "comma", "semicolon", "colon", "equal", "dot", "operator", "star_tok",
    "lbracket", "rbracket", "lbrace", "rbrace", "header", "footer", "leading_lines",
    "trailing_whitespace", "newline", "asynchronous", "whitespace_after_param",
})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}

OTHER, NODE, SEQUENCE = 0, 1, 2


class _Kinds(dict):
    """What a field value of each class is: NODE, SEQUENCE (tuple or list) or OTHER."""

    def __missing__(self, value_type: type) -> int:
        kind = (NODE if issubclass(value_type, cst.CSTNode)
                else SEQUENCE if issubclass(value_type, (tuple, list)) else OTHER)
        self[value_type] = kind
        return kind


KIND_OF = _Kinds()

# Node classes with no child node (their fields other than whitespace and punctuation hold
# strings): a visitor with no hook for one need not be called for it. Names alone are
# two nodes in five.
LEAF_NODES = frozenset({
    cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis,
    cst.FormattedStringText, cst.Pass, cst.Break, cst.Continue, cst.Dot, cst.Colon,
})


class _VisitedKinds(dict):
    """`KIND_OF` for one visitor class, with OTHER for the leaf nodes it has no hook for
    (so that the walk does not enter them)."""

    def __init__(self, visitor: type[Visitor]) -> None:
        super().__init__()
        self.visitor = visitor

    def __missing__(self, value_type: type) -> int:
        kind = KIND_OF[value_type]
        if kind == NODE and value_type in LEAF_NODES and not self.visitor._every_node:
            name = value_type.__name__
            if not any(hasattr(self.visitor, f"{hook}_{name}") for hook in ("visit", "leave")):
                kind = OTHER
        self[value_type] = kind
        return kind


def child_fields(cls: type) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(cls)
    if fields is None:
        fields = tuple(
            field.name for field in dataclasses.fields(cls)
            if field.name not in _SKIPPED_FIELDS and "whitespace" not in field.name
        )
        _CHILD_FIELDS[cls] = fields
    return fields


def field_children(value: Any) -> list[cst.CSTNode]:
    """The nodes a field holds: itself when it is one, a sequence's nodes, else none."""
    kind = KIND_OF[type(value)]
    if kind == NODE:
        return [value]
    if kind == SEQUENCE:
        return [item for item in value if KIND_OF[type(item)] == NODE]
    return []


def iter_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The child nodes of `node`, in field order (whitespace and punctuation skipped)."""
    children: list[cst.CSTNode] = []
    for name in _CHILD_FIELDS.get(type(node)) or child_fields(type(node)):
        value = getattr(node, name)
        kind = KIND_OF[type(value)]
        if kind == NODE:
            children.append(value)
        elif kind == SEQUENCE:
            children.extend(item for item in value if KIND_OF[type(item)] == NODE)
    return children


def subtree_nodes(root: cst.CSTNode) -> list[cst.CSTNode]:
    """`root` and every node under it that `iter_children` reaches, in no set order: one
    loop, without a list and a call per node (a whole file's nodes pass here when its
    positions are anchored)."""
    found: list[cst.CSTNode] = []
    pending = [root]
    pop, push, keep = pending.pop, pending.append, found.append
    while pending:
        node = pop()
        keep(node)
        node_type = type(node)
        for name in _CHILD_FIELDS.get(node_type) or child_fields(node_type):
            value = getattr(node, name)
            kind = KIND_OF[type(value)]
            if kind == NODE:
                push(value)
            elif kind == SEQUENCE:
                for item in value:
                    if KIND_OF[type(item)] == NODE:
                        push(item)
    return found


class Visitor:
    """Read-only visitor with libcst's method naming, several times faster than CSTVisitor.

    Attribute hooks work as in libcst: `visit_If_test(node)` / `leave_If_test(node)` run
    around the walk of that field. A subclass may override `on_visit` / `on_leave`, which
    run for every node (calling super() runs the class's hooks).
    """

    # node class -> (visit, leave, child fields, field hooks or None)
    _dispatch: dict[type, tuple[Callable | None, Callable | None, tuple[str, ...], tuple | None]]
    _every_node: bool  # on_visit / on_leave overridden: called for every node
    _field_hooked: frozenset[str]  # node class names with `visit_X_field`-like methods
    _kinds: _VisitedKinds  # what the walk enters, by a field value's class

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls._dispatch = {}
        cls._every_node = (cls.on_visit is not Visitor.on_visit
                           or cls.on_leave is not Visitor.on_leave)
        cls._field_hooked = frozenset(
            node_name for attribute in dir(cls) if attribute.startswith(("visit_", "leave_"))
            for node_name, _, field in [attribute[6:].partition("_")] if field)
        cls._kinds = _VisitedKinds(cls)

    def handlers(self, node_type: type) -> tuple[Callable | None, Callable | None,
                                                 tuple[str, ...], tuple | None]:
        """(visit, leave, child fields, field hooks or None) for a node class, looked up once."""
        found = self._dispatch.get(node_type)
        if found is None:
            cls = type(self)
            name = node_type.__name__
            fields = child_fields(node_type)
            field_hooks = tuple(
                (field, getattr(cls, f"visit_{name}_{field}", None),
                 getattr(cls, f"leave_{name}_{field}", None))
                for field in fields) if name in cls._field_hooked else ()
            hooked = any(before or after for _, before, after in field_hooks)
            found = (getattr(cls, f"visit_{name}", None), getattr(cls, f"leave_{name}", None),
                     fields, field_hooks if hooked else None)
            self._dispatch[node_type] = found
        return found

    def on_visit(self, node: cst.CSTNode) -> bool:
        visit = (self._dispatch.get(type(node)) or self.handlers(type(node)))[0]
        return visit is None or visit(self, node) is not False

    def on_leave(self, node: cst.CSTNode) -> None:
        leave = (self._dispatch.get(type(node)) or self.handlers(type(node)))[1]
        if leave is not None:
            leave(self, node)

    def walk(self, node: cst.CSTNode) -> None:
        visit, leave, fields, hooks = (self._dispatch.get(type(node))
                                       or self.handlers(type(node)))
        every_node = self._every_node
        if (self.on_visit(node) if every_node
                else visit is None or visit(self, node) is not False):
            walk = self.walk
            if hooks is None:
                kind_of = self._kinds
                for name in fields:
                    value = getattr(node, name)
                    kind = kind_of[type(value)]
                    if kind == NODE:
                        walk(value)
                    elif kind == SEQUENCE:
                        for item in value:
                            if kind_of[type(item)] == NODE:
                                walk(item)
            else:
                for name, before, after in hooks:
                    if before is not None:
                        before(self, node)
                    for child in field_children(getattr(node, name)):
                        walk(child)
                    if after is not None:
                        after(self, node)
        if every_node:
            self.on_leave(node)
        elif leave is not None:
            leave(self, node)
