"""Site finding reads what each name denotes once: the answers a whole-module walk keeps are
the ones a fresh finder gives for each callee on its own, in any order."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from ckptlint.analysis.apis import api_table
from ckptlint.analysis.project import Project
from ckptlint.analysis.resolve import Resolver
from ckptlint.analysis.scopes import Scope
from ckptlint.analysis.sites import SiteFinder
from ckptlint.syntax.source import SourceModule

FIXTURES = Path(__file__).parent / "fixtures"
PROJECTS = sorted(path for path in (FIXTURES / "projects").iterdir() if path.is_dir())
SEGMENT_BASES = ("GradientCheckpointingLayer",)


class CallRecorder(SiteFinder):
    """A site finder that also keeps each call with the scope it was walked in."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.calls: list[tuple[cst.Call, Scope]] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append((node, self.scope))
        super().visit_Call(node)


def modules(project: Project, paths: list[Path]) -> list[SourceModule]:
    found = [project.module_at(path) for path in paths]
    return [module for module in found if module is not None]


# The site-finding fixtures (CKP1xx) and every fixture project.
@pytest.mark.parametrize("root,pattern", [(FIXTURES, "ckp1*.py"),
                                          *((project, "**/*.py") for project in PROJECTS)],
                         ids=lambda value: value.name if isinstance(value, Path) else None)
def test_walked_answers_equal_fresh_ones(root, pattern):
    assert_walk_keeps_fresh_answers(root, pattern)


def test_alias_chain_past_the_depth_limit(tmp_path):
    """`a12 = a11 = ... = checkpoint`: names far down the chain denote nothing (the depth
    limit), whatever the walk asked first."""
    chain = "".join(f"a{index} = a{index - 1}\n" for index in range(2, 13))
    calls = "".join(f"    a{index}(f, x)\n" for index in range(1, 13))
    (tmp_path / "chain.py").write_text(
        "from torch.utils.checkpoint import checkpoint\na1 = checkpoint\n" + chain
        + "def f(x):\n" + calls, encoding="utf-8")
    assert_walk_keeps_fresh_answers(tmp_path, "chain.py")


def assert_walk_keeps_fresh_answers(root: Path, pattern: str) -> None:
    project = Project([root])
    found = modules(project, sorted(root.glob(pattern)))
    assert found
    resolver = Resolver(project)
    table = api_table({})
    checked = 0
    for module in found:
        walked = CallRecorder(module, resolver, table, SEGMENT_BASES)
        walked.walk(module.tree)
        for call, scope in reversed(walked.calls):
            fresh = SiteFinder(module, resolver, table, SEGMENT_BASES)
            assert fresh.qualnames(call.func, module, scope, 0) == \
                walked.qualnames(call.func, module, scope, 0), (module.display, call)
            fresh = SiteFinder(module, resolver, table, SEGMENT_BASES)
            assert fresh.api_refs(call.func, module, scope, 0) == \
                walked.api_refs(call.func, module, scope, 0), (module.display, call)
            checked += 1
    assert checked


@pytest.mark.parametrize("root,pattern", [(FIXTURES, "ckp1*.py"), (FIXTURES, "ckp2*.py"),
                                          *((project, "**/*.py") for project in PROJECTS)],
                         ids=lambda value: value.name if isinstance(value, Path) else None)
def test_a_callee_left_unresolved_could_not_have_been_a_named_or_api_site(root, pattern):
    """`may_name_site` is False only where resolving the callee finds no site: for every
    call it passes over, `named_site` and `api_site` give none."""
    project = Project([root])
    resolver = Resolver(project)
    table = api_table({})
    skipped = 0
    for module in modules(project, sorted(root.glob(pattern))):
        walked = CallRecorder(module, resolver, table, SEGMENT_BASES)
        walked.walk(module.tree)
        for call, scope in walked.calls:
            fresh = SiteFinder(module, resolver, table, SEGMENT_BASES)
            if not fresh.may_name_site(call.func, scope):
                skipped += 1
                assert fresh.named_site(call, scope) is None, (module.display, call)
                assert fresh.api_site(call, scope) is None, (module.display, call)
    assert skipped or "projects" in str(root)


def test_a_method_call_on_another_object_is_resolved_only_when_named_like_a_site(tmp_path):
    (tmp_path / "mod.py").write_text(
        "import torch\nimport torch.utils.checkpoint as cp\n\n\n"
        "def block(x):\n    return x.view(2).relu()\n\n\n"
        "def forward(x):\n    y = x.view(2)\n"
        "    return cp.checkpoint(block, y, use_reentrant=False)\n")
    project = Project([tmp_path])
    [module] = modules(project, [tmp_path / "mod.py"])
    finder = CallRecorder(module, Resolver(project), api_table({}), SEGMENT_BASES)
    finder.walk(module.tree)
    asked = {cst.Module([]).code_for_node(expr)
             for (expr, _, _), _ in finder._qualnames.values()}
    assert "cp.checkpoint" in asked and "cp" in asked
    assert not asked & {"x.view", "x.view(2).relu", "x", "x.view(2)"}
    assert [site.kind.value for site in finder.sites] == ["function"]
