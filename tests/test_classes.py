"""Module-level classes of modules reached only to resolve names are answered from an `ast`
summary (`ckptlint.analysis.classes`), as the libcst scope model would answer, and their
modules are parsed with libcst only when a question needs the tree."""
from __future__ import annotations

import ast
import json
import os
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from ckptlint.analysis.classes import module_classes, plain_classes, stored_classes
from ckptlint.analysis.resolve import ClassValue, SelfAssignmentCollector
from ckptlint.analysis.scopes import BindingKind, dotted_name
from ckptlint.analysis.summary_store import FORMAT, text_digest
from ckptlint.config import Config
from ckptlint.engine.run import lint
from ckptlint.storage.plain_data import ShapeError
from ckptlint.syntax.source import SourceModule, parse_text
from tests.test_project import lint_alone, parsed_paths, target_names
from tests.test_reexports import ROOT, fixture_packages, write

TRICKY = textwrap.dedent("""\
    import torch.nn as nn
    from .base import Base
    try:
        from fast import Mixin
    except ImportError:
        from slow import Mixin

    class Plain(object):
        def forward(self, x):
            self.seen = x
            if x:
                def inner(): ...

    class Derived(Plain, nn.Module, Base, Mixin, Undefined):
        def setup(self):
            (self.a, other.b) = 1, 2

    class Late(Imported): ...
    from elsewhere import Imported

    class Twice: ...
    class Twice: ...

    class Rebound: ...
    Rebound = None

    class AlsoImported: ...
    from elsewhere import AlsoImported

    class Called(make()): ...
    class Starred(*bases): ...
    class FromLate(Late): ...

    def f():
        global Written

    class Written: ...
    if flag:
        class Conditional: ...
    """)


def assert_same_as_scopes(text: str, filename: str) -> int:
    """Every summarised class is the module's only binding of its name, a top-level class
    statement whose bases are the dotted names summarised, bound as summarised at the point
    of use; its methods and `self` attributes are within what the summary says."""
    # Deep enough for every relative import to stay inside the top package.
    module = SourceModule(path=Path(filename), display=filename, name="a.b.c.d.e.f.mod",
                          is_package=False, text=text, tree=parse_text(text, filename))
    module_scope = module.scopes.module_scope
    summaries = module_classes(ast.parse(text))
    for name, summary in summaries.items():
        [binding] = module_scope.bindings[name]
        node = binding.node
        assert isinstance(node, cst.ClassDef) and node in module.tree.body, name
        assert [(dotted_name(arg.value), arg.star) for arg in node.bases] == [
            (written, "") for written, _ in summary.bases], name
        for arg, (written, kind) in zip(node.bases, summary.bases):
            head = module_scope.bindings.get(written.split(".")[0], [])
            order = module.node_order(module.tree)
            if kind == "unbound":
                assert not head, name
            elif kind == "class":
                assert len(head) == 1 and isinstance(head[0].node, cst.ClassDef), name
                assert order.ends_before(head[0].node, arg.value), name
            else:
                assert head and all(b.kind == BindingKind.IMPORT for b in head), name
                assert all(order.ends_before(b.node, arg.value) for b in head), name
        class_scope = module.scopes.scope_of[id(node)]
        methods = {method for method, bindings in class_scope.bindings.items()
                   if any(isinstance(b.node, cst.FunctionDef) for b in bindings)}
        assert methods <= summary.methods, name
        collector = SelfAssignmentCollector(module)
        for statement in node.body.body:
            if isinstance(statement, cst.FunctionDef):
                collector.collect(statement)
        assert set(collector.found) <= summary.assigned, name
    return len(summaries)


def test_the_summary_agrees_with_the_scope_model_on_tricky_classes() -> None:
    summaries = module_classes(ast.parse(TRICKY))
    assert set(summaries) == {"Plain", "Derived"}  # not `FromLate`: `Late` is not summarised
    assert summaries["Derived"].bases == (
        ("Plain", "class"), ("nn.Module", "import"), ("Base", "import"),
        ("Mixin", "import"), ("Undefined", "unbound"))
    assert summaries["Plain"].methods == {"forward", "inner"}
    assert summaries["Plain"].assigned == {"seen"}
    assert summaries["Derived"].assigned == {"a", "b"}
    assert assert_same_as_scopes(TRICKY, "tricky.py") == 2


def test_the_summary_agrees_with_the_scope_model_on_the_fixture_projects() -> None:
    assert agreed(fixture_packages()) > 10


@pytest.mark.slow
def test_the_summary_agrees_with_the_scope_model_on_real_modules() -> None:
    """Every fixture, ckptlint's own source and (with `CKPTLINT_DIFFUSERS`) diffusers."""
    files = sorted((ROOT / "tests" / "fixtures").rglob("*.py"))
    files += sorted((ROOT / "ckptlint").rglob("*.py"))
    diffusers = os.environ.get("CKPTLINT_DIFFUSERS")
    if diffusers:
        files += sorted(Path(diffusers).rglob("*.py"))
    assert agreed(files) > 100


def agreed(paths: list[Path]) -> int:
    count = 0
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            ast.parse(text)
            parse_text(text, str(path))
        except Exception:  # syntax-error fixtures: never summarised (CPython rejects them)
            continue
        count += assert_same_as_scopes(text, str(path))
    return count


def test_the_summary_survives_the_plain_data_round_trip_and_bad_shapes_are_misses() -> None:
    summaries = module_classes(ast.parse(TRICKY))
    assert stored_classes(json.loads(json.dumps(plain_classes(summaries)))) == summaries
    good = {"bases": [["a.B", "import"]], "methods": ["f"], "assigned": []}
    assert stored_classes({"C": good})["C"].bases == (("a.B", "import"),)
    for wrong in (None, [], {"C": None}, {"C": {**good, "extra": 1}}, {"C": {"bases": []}},
                  {"C": {**good, "bases": [["a.B", "called"]]}},
                  {"C": {**good, "bases": [["a.B"]]}}, {"C": {**good, "bases": [[1, "class"]]}},
                  {"C": {**good, "methods": "f"}}, {"C": {**good, "assigned": [None]}}):
        with pytest.raises(ShapeError):
            stored_classes(wrong)


LAYERED = {
    "pkg/__init__.py": "",
    "pkg/base.py": textwrap.dedent("""\
        import torch.nn as nn


        class Base(nn.Module):
            def describe(self):
                return "base"
        """),
    "pkg/blocks.py": textwrap.dedent("""\
        from pkg.base import Base


        class Block(Base):
            def forward(self, x):
                return x * 2
        """),
    "model.py": textwrap.dedent("""\
        import torch.nn as nn
        from torch.utils.checkpoint import checkpoint
        from pkg.blocks import Block


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()

            def forward(self, x):
                return checkpoint(self.block, x, use_reentrant=False)
        """),
}


def test_a_base_class_reached_only_for_resolution_is_not_parsed(tmp_path: Path) -> None:
    """`Block`'s base, its methods and its library base are known from the summary of
    `pkg/base.py`; only `pkg/blocks.py`, whose `forward` the checkpoint runs, is parsed."""
    write(tmp_path, LAYERED)
    linter, result = lint_alone(tmp_path / "model.py")
    assert target_names(result) == ["blocks.py:Block.forward"]
    assert parsed_paths(linter) == {"model.py", "blocks.py"}
    resolver = linter.analysis.resolver
    [block] = resolver.import_values("pkg.blocks.Block", 0)
    [base] = resolver.import_values("pkg.base.Base", 0)
    assert isinstance(block, ClassValue) and isinstance(base, ClassValue)
    assert [cls.qualname for cls in resolver.base_classes(block.cls)] == ["Base"]
    assert resolver.external_bases(block.cls) == {"torch.nn.Module"}
    assert resolver.find_method(block.cls, "missing") is None
    assert resolver.attribute_assignments(base.cls).get("missing") is None
    assert resolver.derives_from(block.cls, base.cls)
    assert "base.py" not in parsed_paths(linter)
    method = resolver.find_method(block.cls, "describe")  # a body: now the tree is needed
    assert method is not None and method.qualname == "Base.describe"
    assert method.owner is block.cls
    assert "base.py" in parsed_paths(linter)


HELPER_ONLY = {**LAYERED, "pkg/blocks.py": textwrap.dedent("""\
    from pkg.base import Base


    class Block(Base):
        def helper(self, x):
            return x
    """)}


def test_an_edit_to_a_summarised_class_changes_the_findings(tmp_path: Path,
                                                            monkeypatch) -> None:
    """The class summary is stored by the text's digest: `Block` defines no `forward`, and
    whether its base (known only from its summary) runs a library `forward` decides whether
    what the checkpoint runs is unknown. Two files ask: the second gets the kept answer about
    `Block`'s bases, and depends on `pkg/base.py` as well."""
    tree = tmp_path / "tree"
    write(tree, {**HELPER_ONLY, "model2.py": HELPER_ONLY["model.py"]})
    monkeypatch.chdir(tree)
    monkeypatch.setenv("CKPTLINT_CACHE_DIR", str(tmp_path / "cache"))

    def findings(use_cache: bool = True, jobs: int = 1) -> list[dict]:
        result = lint(["model.py", "model2.py"], Config(root=tree, select=("CKP901",)),
                      use_cache=use_cache, jobs=jobs)
        return [finding.to_json() for finding in result.findings]

    assert findings() == [] == findings(use_cache=False)  # `nn.Module` runs its forward
    base = tree / "pkg" / "base.py"
    stored = tmp_path / "cache" / f"summaries-{FORMAT}" / f"{text_digest(base.read_text())}.json"
    assert "classes" in json.loads(stored.read_text())
    base.write_text(base.read_text().replace("class Base(nn.Module):", "class Base:"))
    after = findings()
    assert [(f["code"], f["filename"]) for f in after] == [("CKP901", "model.py"),
                                                           ("CKP901", "model2.py")]
    assert all("`Block` defines no `forward`" in f["message"] for f in after)
    assert after == findings(use_cache=False) == findings(jobs=2)
