"""`ast_nodes.walk_nodes` / `child_nodes` are `ast.walk` / `ast.iter_child_nodes` without
expression contexts and operators, node for node and in the same order."""

import ast
import inspect
import json.decoder
import typing

import pytest

from ckptlint.syntax.ast_nodes import child_nodes, walk_nodes

CONTEXTS_AND_OPERATORS = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
SAMPLE = """\
import a.b as c
from .m import (x, y as z)
global G
@deco(1)
async def f(p, /, q=2, *r, s: int = 3, **t) -> None:
    nonlocal_ = [i async for i in g() if not i]
    async with lock as (u, v):
        w: dict[str, int] = {k: -v for k, v in t.items()}
    del w[0], u.attr
    x += 1 if p < q <= r else 2 ** s
    try:
        raise E from None
    except (A, B) as err:
        print(f"{err!r:>{q}}")
    match p:
        case {"k": [1, *rest], **others} | Point(x=0, y=_) as pt if pt:
            pass
    return lambda *a, **k: (yield from a)
"""
TREES = {
    "sample": ast.parse(SAMPLE),
    "typing.py": ast.parse(inspect.getsource(typing)),
    "json/decoder.py": ast.parse(inspect.getsource(json.decoder)),
}


def without_contexts(nodes):
    return [node for node in nodes if not isinstance(node, CONTEXTS_AND_OPERATORS)]


@pytest.mark.parametrize("name", TREES)
def test_walk_nodes_is_ast_walk_without_contexts_and_operators(name):
    tree = TREES[name]
    walked = list(walk_nodes(tree))
    assert walked == without_contexts(ast.walk(tree))
    assert len(walked) < len(list(ast.walk(tree)))  # the sample holds some to leave out


@pytest.mark.parametrize("name", TREES)
def test_child_nodes_is_iter_child_nodes_without_contexts_and_operators(name):
    for node in ast.walk(TREES[name]):
        assert child_nodes(node) == without_contexts(ast.iter_child_nodes(node))
