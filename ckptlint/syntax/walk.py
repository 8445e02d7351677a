"""A fast read-only walk over libcst trees.

libcst's own visitor machinery rebuilds every node as it goes and costs several times the
parse; ckptlint only reads, so it walks the dataclass fields directly, skipping whitespace
and punctuation. Visitors define `visit_<NodeClass>(node)` (return False to skip the
children) and `leave_<NodeClass>(node)`, as with libcst's CSTVisitor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import libcst as cst

_SKIPPED_FIELDS = frozenset({
    "lpar", "rpar", "comma", "semicolon", "colon", "equal", "dot", "operator", "star_tok",
    "lbracket", "rbracket", "lbrace", "rbrace", "header", "footer", "leading_lines",
    "trailing_whitespace", "newline", "asynchronous", "whitespace_after_param",
})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def child_fields(cls: type) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(cls)
    if fields is None:
        fields = tuple(
            field.name for field in dataclasses.fields(cls)
            if field.name not in _SKIPPED_FIELDS and "whitespace" not in field.name
        )
        _CHILD_FIELDS[cls] = fields
    return fields


def iter_children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    for name in child_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            yield value
        elif isinstance(value, (tuple, list)):
            for item in value:
                if isinstance(item, cst.CSTNode):
                    yield item


class Visitor:
    """Read-only visitor with libcst's method naming, several times faster than CSTVisitor.

    Attribute hooks work as in libcst: `visit_If_test(node)` / `leave_If_test(node)` run
    around the walk of that field.
    """

    _dispatch: dict[type, tuple[Callable | None, Callable | None, tuple | None]]

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls._dispatch = {}

    def handlers(self, node_type: type) -> tuple[Callable | None, Callable | None, tuple | None]:
        """(visit, leave, field hooks or None) for a node class, looked up once."""
        found = self._dispatch.get(node_type)
        if found is None:
            cls = type(self)
            name = node_type.__name__
            field_hooks = tuple(
                (field, getattr(cls, f"visit_{name}_{field}", None),
                 getattr(cls, f"leave_{name}_{field}", None))
                for field in child_fields(node_type))
            hooked = any(before or after for _, before, after in field_hooks)
            found = (getattr(cls, f"visit_{name}", None), getattr(cls, f"leave_{name}", None),
                     field_hooks if hooked else None)
            self._dispatch[node_type] = found
        return found

    def on_visit(self, node: cst.CSTNode) -> bool:
        visit = self.handlers(type(node))[0]
        return visit is None or visit(self, node) is not False

    def on_leave(self, node: cst.CSTNode) -> None:
        leave = self.handlers(type(node))[1]
        if leave is not None:
            leave(self, node)

    def walk(self, node: cst.CSTNode) -> None:
        if self.on_visit(node):
            hooks = self.handlers(type(node))[2]
            if hooks is None:
                for child in iter_children(node):
                    self.walk(child)
            else:
                for field, before, after in hooks:
                    if before is not None:
                        before(self, node)
                    value = getattr(node, field)
                    if isinstance(value, cst.CSTNode):
                        self.walk(value)
                    elif isinstance(value, (tuple, list)):
                        for item in value:
                            if isinstance(item, cst.CSTNode):
                                self.walk(item)
                    if after is not None:
                        after(self, node)
        self.on_leave(node)
