"""The `ast` summary's walk: its type dispatch and the nodes it skips change no fact."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ckptlint
from ckptlint.analysis.callgraph import (
    LEAF_TYPES,
    FileSummary,
    _Summarizer,
    dotted,
    isinstance_names,
    last_part,
    loop_names,
    summarize,
    summary_to_plain,
)

FIXTURES = Path(__file__).parent / "fixtures"
OWN_SOURCE = Path(ckptlint.__file__).parent


class EveryNodeSummarizer(_Summarizer):
    """The reference: the walk as first written, a chain of `isinstance` tests entering
    every node."""

    def walk(self, node, function, names, cls, guards) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.enter_function(node, function, names, cls, guards)
            return
        if isinstance(node, ast.ClassDef):
            qualname = ".".join([*names, node.name])
            self.out.classes[qualname] = tuple(last_part(d) for d in map(dotted, node.bases)
                                               if d)
            for expr in [*node.decorator_list, *node.bases]:
                self.walk(expr, function, names, cls, guards)
            self.walk_block(node.body, function, [*names, node.name], qualname, guards)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".", 1)[0]
                self.out.imports[local] = alias.name if alias.asname else local
            return
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                local = alias.asname or alias.name
                self.out.imports[local] = (f"{node.module}.{alias.name}"
                                           if node.module and not node.level else alias.name)
            return
        if isinstance(node, ast.Call):
            self.call(node, function, guards)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Delete)):
            self.statement_writes(node, function, cls, guards)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            for name, element in loop_names(node.target, node.iter):
                function.loops.setdefault(name, element)
        elif isinstance(node, ast.If):
            inner = isinstance_names(node.test)
            if inner:
                self.walk(node.test, function, names, cls, guards)
                self.walk_block(node.body, function, names, cls, {**guards, **inner})
                self.walk_block(node.orelse, function, names, cls, guards)
                return
        for child in ast.iter_child_nodes(node):
            self.walk(child, function, names, cls, guards)


def reference_summary(text: str) -> FileSummary | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    return EveryNodeSummarizer(tree).run()


SOURCES = sorted([*FIXTURES.rglob("*.py"), *OWN_SOURCE.rglob("*.py")])


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_the_summary_is_the_one_a_walk_of_every_node_makes(path: Path) -> None:
    text = path.read_text()
    expected = reference_summary(text)
    found = summarize(text)
    if expected is None:
        assert found is None
        return
    assert summary_to_plain(found) == summary_to_plain(expected)


def test_the_skipped_nodes_hold_nothing_the_summary_records() -> None:
    """A leaf is a node with no children but contexts and operators (`Name`, `Constant`),
    or a statement with none at all: nothing under it can be a call, a write or a def."""
    for kind in LEAF_TYPES:
        fields = [name for name in kind._fields if name not in ("ctx", "kind")]
        assert kind in (ast.Name, ast.Constant, ast.Global, ast.Nonlocal) or not fields, kind


def test_a_call_on_a_relatively_imported_name_is_marked_as_the_projects_own() -> None:
    summary = summarize(
        "from PIL import ImageOps\nfrom . import helpers\nfrom .. import tools as t\n"
        "import numpy as np\n\n\ndef f(x):\n    ImageOps.invert(x)\n    helpers.obj.m(x)\n"
        "    t.run_all(x)\n    np.linalg.norm(x)\n")
    assert summary is not None
    modules = {site.name: site.module for sites in summary.calls.values() for site in sites}
    assert modules == {"invert": "PIL.ImageOps", "m": ".helpers.obj", "run_all": ".tools",
                       "norm": "numpy.linalg"}


def test_a_later_absolute_import_of_the_same_name_is_not_marked() -> None:
    summary = summarize("from . import helpers\nimport helpers\n\n\ndef f():\n    helpers.g()\n")
    assert summary is not None
    assert [site.module for site in summary.calls["g"]] == ["helpers"]
