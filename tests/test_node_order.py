"""`node_order.NodeOrder` numbers nodes in the order libcst's codegen writes them: every
node's children come in code order, so comparing two numbers is comparing positions."""

import argparse
import dataclasses
import inspect
import itertools
import typing

import libcst as cst
import libcst._nodes.statement
import pytest

from ckptlint.syntax.node_order import NodeOrder, code_fields
from ckptlint.syntax.positions import Positions
from ckptlint.syntax.walk import field_children, iter_children

SAMPLE = """\
from ..pkg import (a as b, c)
@deco(key=1)

@other
async def f(p, /, q: int = 2, *r, s=3, **t) -> dict[str, int]:
    x = y if cond(p) else z[1:n:2]
    try:
        g(*r, key=lambda u=q: u, **t)
    except E as err:
        raise
    try:
        pass
    except* F as group:
        pass
    with open(p) as h, lock:
        return {k: v for k, v in h if k}
@dataclass(frozen=True)
class C(Base, metaclass=M):
    field: int = 0
    def method(self, *, only=None): ...
match p:
    case {"k": [1, *rest], **others} | Point(x=0, y=_) as pt if pt:
        pass
"""
TEXTS = {
    "sample": SAMPLE,
    "typing.py": inspect.getsource(typing),
    "argparse.py": inspect.getsource(argparse),
    "dataclasses.py": inspect.getsource(dataclasses),
    "libcst statement.py": inspect.getsource(libcst._nodes.statement),
}


@pytest.mark.parametrize("name", TEXTS)
def test_children_come_in_code_order(name):
    module = cst.parse_module(TEXTS[name])
    positions = Positions(module)
    for node in itertools.chain([module], _every_node(module)):
        children = [child for field in code_fields(type(node))
                    for child in field_children(getattr(node, field))]
        assert sorted(children, key=id) == sorted(iter_children(node), key=id)  # none lost
        spans = [positions.range(child) for child in children]
        assert spans == sorted(spans), (type(node).__name__, [type(c).__name__ for c in children])


@pytest.mark.parametrize("name", TEXTS)
def test_comparisons_agree_with_positions(name):
    """For two nodes neither of which holds the other, as positions order them; a node
    holding another starts before it and does not end before it."""
    module = cst.parse_module(TEXTS[name])
    positions = Positions(module)
    functions = [node for node in _every_node(module) if isinstance(node, cst.FunctionDef)]
    compared = 0
    for function in functions[:30]:
        order = NodeOrder(function)
        nodes = [function, *_every_node(function)][::5]
        inside = {id(node): {id(inner) for inner in _every_node(node)} for node in nodes}
        for node, other in itertools.islice(itertools.permutations(nodes, 2), 3000):
            if id(other) in inside[id(node)]:
                assert order.starts_before(node, other)
                assert not order.ends_before(node, other)
            elif id(node) not in inside[id(other)]:
                (start, end), (other_start, _) = positions.range(node), positions.range(other)
                assert order.starts_before(node, other) == (start <= other_start)
                assert order.ends_before(node, other) == (end <= other_start)
                compared += 1
    assert compared > 50  # the comparisons ran


def test_a_node_outside_the_root_is_not_held():
    module = cst.parse_module("def f():\n    return 1\nx = 2\n")
    order = NodeOrder(module.body[0])
    assert order.holds(module.body[0], module.body[0].body)
    assert not order.holds(module.body[1])


def _every_node(root):
    pending = list(iter_children(root))
    while pending:
        node = pending.pop()
        yield node
        pending.extend(iter_children(node))
