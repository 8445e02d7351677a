"""The read-only walker: every node in source order, with libcst's hook names and order."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

import ckptlint
from ckptlint.syntax.walk import Visitor, child_fields, iter_children

FIXTURES = Path(__file__).parent / "fixtures"
SOURCES = sorted((Path(ckptlint.__file__).parent / "analysis").glob("*.py")) + sorted(
    FIXTURES.glob("*.py"))
HOOKED = ("Call", "Name", "Attribute", "FunctionDef", "ClassDef", "If", "IndentedBlock", "Arg",
          "Lambda")
FIELD_HOOKS = (("If", "test"), ("Call", "func"), ("FunctionDef", "body"), ("Assign", "value"))


def reference_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The children a walk reaches, spelled out with isinstance over the dataclass fields."""
    children = []
    for name in child_fields(type(node)):
        value = getattr(node, name)
        values = value if isinstance(value, (tuple, list)) else (value,)
        children.extend(item for item in values if isinstance(item, cst.CSTNode))
    return children


def reference_walk(node: cst.CSTNode, events: list, every_node: bool) -> None:
    """The walk's contract: visit (False skips the children), the children field by field
    with the field hooks around each, leave (also after a skipped visit)."""
    kind = type(node).__name__
    if every_node:
        events.append(("on_visit", id(node)))
    skip = kind == "Lambda"  # the recording visitor's visit_Lambda returns False
    if kind in HOOKED:
        events.append((f"visit_{kind}", id(node)))
    if not skip:
        for name in child_fields(type(node)):
            if (kind, name) in FIELD_HOOKS:
                events.append((f"visit_{kind}_{name}", id(node)))
            value = getattr(node, name)
            for child in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(child, cst.CSTNode):
                    reference_walk(child, events, every_node)
            if (kind, name) in FIELD_HOOKS:
                events.append((f"leave_{kind}_{name}", id(node)))
    if kind in HOOKED:
        events.append((f"leave_{kind}", id(node)))
    if every_node:
        events.append(("on_leave", id(node)))


def recording_visitor(every_node: bool) -> Visitor:
    def hook(name: str, result: bool | None = None):
        def record(self, node):
            self.events.append((name, id(node)))
            return result
        return record

    namespace: dict = {"events": None}
    for kind in HOOKED:
        namespace[f"visit_{kind}"] = hook(f"visit_{kind}", False if kind == "Lambda" else None)
        namespace[f"leave_{kind}"] = hook(f"leave_{kind}")
    for kind, name in FIELD_HOOKS:
        namespace[f"visit_{kind}_{name}"] = hook(f"visit_{kind}_{name}")
        namespace[f"leave_{kind}_{name}"] = hook(f"leave_{kind}_{name}")
    if every_node:
        def on_visit(self, node):
            self.events.append(("on_visit", id(node)))
            return Visitor.on_visit(self, node)

        def on_leave(self, node):
            Visitor.on_leave(self, node)
            self.events.append(("on_leave", id(node)))
        namespace.update(on_visit=on_visit, on_leave=on_leave)
    visitor = type("Recorder", (Visitor,), namespace)()
    visitor.events = []
    return visitor


@pytest.fixture(scope="module")
def trees() -> list[tuple[Path, cst.Module]]:
    return [(path, cst.parse_module(path.read_text(encoding="utf-8"))) for path in SOURCES]


@pytest.mark.parametrize("every_node", [False, True], ids=["hooks", "on_visit"])
def test_walk_matches_the_reference_on_real_files(trees, every_node):
    assert len(trees) > 40
    for path, tree in trees:
        expected: list = []
        reference_walk(tree, expected, every_node)
        visitor = recording_visitor(every_node)
        visitor.walk(tree)
        assert visitor.events == expected, path


def test_children_match_the_reference_on_real_files(trees):
    for path, tree in trees:
        stack = [tree]
        while stack:
            node = stack.pop()
            children = iter_children(node)
            assert children == reference_children(node), (path, type(node).__name__)
            stack.extend(children)


def test_whitespace_and_punctuation_are_not_walked():
    tree = cst.parse_module("f(a, b=1)  # note\n")
    seen = []
    stack = [tree]
    while stack:
        node = stack.pop()
        seen.append(type(node).__name__)
        stack.extend(iter_children(node))
    assert sorted(seen) == sorted(["Module", "SimpleStatementLine", "Expr", "Call", "Name",
                                   "Arg", "Name", "Arg", "Name", "Integer"])


@pytest.mark.parametrize("path", SOURCES[:12], ids=lambda p: p.name)
def test_a_visitor_is_called_for_leaf_nodes_only_when_it_has_a_hook_for_them(path: Path) -> None:
    """`LEAF_NODES` hold no child node; a visitor with no hook for one is not walked into
    it, and its other hooks see the same nodes as a visitor walked into every leaf."""
    from ckptlint.syntax.walk import LEAF_NODES

    tree = cst.parse_module(path.read_text())
    every: list[cst.CSTNode] = []
    pending: list[cst.CSTNode] = [tree]
    while pending:
        node = pending.pop()
        every.append(node)
        pending.extend(iter_children(node))
    assert all(not reference_children(node) for node in every if type(node) in LEAF_NODES)

    class Calls(Visitor):
        def __init__(self) -> None:
            self.walked: list[str] = []

        def visit_Call(self, node: cst.Call) -> None:
            self.walked.append(cst.Module([]).code_for_node(node))

    class CallsAndNames(Calls):
        def visit_Name(self, node: cst.Name) -> None:
            self.walked.append(node.value)

    calls, names = Calls(), CallsAndNames()
    calls.walk(tree)
    names.walk(tree)
    expected_names = [node.value for node in every if type(node) is cst.Name]
    assert sorted(names.walked) == sorted(calls.walked + expected_names)
    assert calls._kinds[cst.Name] == 0 and names._kinds[cst.Name] == 1  # OTHER, NODE
