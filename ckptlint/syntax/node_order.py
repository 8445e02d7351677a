"""Which of two nodes of one function comes first in its code, without positions.

Ordering a use against the statements that bind its name (`resolve.reaching`) asked for both
nodes' positions, and positions cost a libcst codegen pass over each statement holding one.
A preorder walk that numbers the nodes in the order their code is written answers the same
question for a whole function at the cost of one walk.

libcst lists some node classes' fields in another order than their code (a `def`'s
decorators come last, an `IfExp`'s test first): those are walked in code order here.
tests/test_node_order.py checks the numbering against libcst's codegen on real files.
"""

from __future__ import annotations

import libcst as cst

from ckptlint.syntax.walk import child_fields, field_children

# Node classes whose code puts their children in another order than their fields.
_CODE_FIELDS: dict[type, tuple[str, ...]] = {
    cst.FunctionDef: ("decorators", "lines_after_decorators", "name", "type_parameters",
                      "params", "returns", "body"),
    cst.ClassDef: ("decorators", "lines_after_decorators", "name", "type_parameters", "bases",
                   "keywords", "body"),
    cst.IfExp: ("body", "test", "orelse"),
    cst.Arg: ("keyword", "value", "star"),
    cst.ImportFrom: ("relative", "module", "names"),
    cst.Slice: ("lower", "first_colon", "upper", "second_colon", "step"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.ExceptStarHandler: ("type", "name", "body"),
    cst.Parameters: ("posonly_params", "posonly_ind", "params", "star_arg", "kwonly_params",
                     "star_kwarg"),
    cst.TypeAlias: ("name", "type_parameters", "value"),
    cst.MatchCase: ("pattern", "guard", "body"),
}


def code_fields(cls: type) -> tuple[str, ...]:
    """The child fields of a node class (`walk.child_fields`) in the order of its code."""
    return _CODE_FIELDS.get(cls) or child_fields(cls)


class NodeOrder:
    """The nodes under `root`, numbered in code order (preorder)."""

    def __init__(self, root: cst.CSTNode) -> None:
        self.root = root  # keeps the ids below meaningful
        self._start: dict[int, int] = {}
        self._end: dict[int, int] = {}  # the number after the node's last descendant
        pending: list[tuple[cst.CSTNode, bool]] = [(root, False)]
        while pending:
            node, left = pending.pop()
            if left:
                self._end[id(node)] = len(self._start)
                continue
            self._start[id(node)] = len(self._start)
            pending.append((node, True))
            children = [child for name in code_fields(type(node))
                        for child in field_children(getattr(node, name))]
            pending.extend((child, False) for child in reversed(children))

    def holds(self, *nodes: cst.CSTNode) -> bool:
        return all(id(node) in self._start for node in nodes)

    def starts_before(self, node: cst.CSTNode, other: cst.CSTNode) -> bool:
        """`node`'s code starts before `other`'s, or `other` lies inside `node`."""
        return self._start[id(node)] <= self._start[id(other)]

    def ends_before(self, node: cst.CSTNode, other: cst.CSTNode) -> bool:
        """`node`'s code ends before `other`'s starts."""
        return self._end[id(node)] <= self._start[id(other)]
