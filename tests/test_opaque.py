"""A module-level name bound to a value the resolver does not follow (`X = A | B`) is
answered from an `ast` summary (`ckptlint.analysis.opaque`) with the code libcst would quote,
and its module is not parsed with libcst for it."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ckptlint.analysis.opaque import opaque_values, plain_opaque, stored_opaque
from ckptlint.analysis.project import Project
from ckptlint.analysis.resolve import Unknown
from ckptlint.storage.plain_data import ShapeError
from ckptlint.syntax.reading import parse_ast
from ckptlint.syntax.source import SourceModule, parse_text
from tests.test_project import lint_alone, parsed_paths
from tests.test_reexports import ROOT, real_modules, write

SHAPES = textwrap.dedent("""\
    from typing import Union
    import torch

    Processor = (
        AttnProcessor  # the default
        | SlicedAttnProcessor
    )
    SCALE: float = 2 ** -0.5
    a = 1; NEGATIVE = -1
    GREETING = f"{a} é"
    TABLE = {"x": 1,
             "y": 2}
    EITHER = a or \\
        torch
    PICKED = a if a else torch
    NONE = None
    FLAG = True
    NAME = torch
    CALLED = make()
    PAIR = a, torch
    Twice = 1 | 2
    Twice = 3 | 4
    Globalled = 1 | 2
    Imported = 1 | 2
    from elsewhere import Imported
    Deleted = 1 | 2
    del Deleted
    if a:
        Conditional = 1 | 2
    First = Second = 1 | 2
    Sliced = Union[a, torch]

    def f():
        global Globalled
    """)


def test_the_shapes_summarised_and_those_left_to_the_tree() -> None:
    found = opaque_values(parse_ast(SHAPES, "shapes.py"), SHAPES)
    assert found == {
        "Processor": "( AttnProcessor # the default | SlicedAttnProcessor )",
        "SCALE": "2 ** -0.5",
        "a": "1",
        "NEGATIVE": "-1",
        "GREETING": 'f"{a} é"',
        "TABLE": '{"x": 1, "y": 2}',
        "EITHER": "a or \\ torch",
        "PICKED": "a if a else torch",
    }


def libcst_codes(text: str, filename: str) -> dict[str, str]:
    """What the scope model's only binding of each summarised name holds, as libcst writes it."""
    module = SourceModule(Path(filename), filename, "", False, text, parse_text(text, filename))
    bindings = module.scopes.module_scope.bindings
    return {name: " ".join(module.code(bindings[name][0].value).split())
            for name in opaque_values(parse_ast(text, filename), text)
            if len(bindings.get(name, [])) == 1}


def test_the_code_is_libcsts_on_the_shapes() -> None:
    found = opaque_values(parse_ast(SHAPES, "shapes.py"), SHAPES)
    assert libcst_codes(SHAPES, "shapes.py") == found


@pytest.mark.parametrize("name", ["real"])
def test_the_code_is_libcsts_on_real_modules(name: str) -> None:
    """Every name summarised in the fixtures, ckptlint's own modules (and diffusers' with
    `CKPTLINT_DIFFUSERS`) has one binding in the scope model, holding that code."""
    checked = 0
    paths = [*real_modules(), *sorted((ROOT / "examples").rglob("*.py"))]
    for path in paths:
        text = path.read_text(encoding="utf-8")
        try:
            tree = parse_ast(text, str(path))
        except Exception:  # noqa: BLE001 - fixtures with syntax errors on purpose
            continue
        found = opaque_values(tree, text)
        if found:
            assert libcst_codes(text, str(path)) == found, path
            checked += len(found)
    assert checked >= 20


def test_the_summary_survives_the_plain_data_round_trip_and_bad_shapes_are_misses() -> None:
    found = opaque_values(parse_ast(SHAPES, "shapes.py"), SHAPES)
    assert stored_opaque(plain_opaque(found)) == found
    for bad in ([], {"X": 1}, {1: "x"}):
        with pytest.raises(ShapeError):
            stored_opaque(bad)


ALIASED = {
    "pkg/__init__.py": "",
    "pkg/processors.py": textwrap.dedent("""\
        import torch.nn as nn


        class AttnProcessor(nn.Module):
            def forward(self, x):
                return x


        class SlicedAttnProcessor(nn.Module):
            def forward(self, x):
                return x


        Processor = (
            AttnProcessor
            | SlicedAttnProcessor
        )
        """),
    "model.py": textwrap.dedent("""\
        import torch.nn as nn
        from torch.utils.checkpoint import checkpoint

        from pkg.processors import Processor


        class Block(nn.Module):
            def forward(self, x, processor: Processor):
                return processor(x)


        def run(block, x, processor):
            return checkpoint(block, x, processor, use_reentrant=False)
        """),
}


def test_an_opaque_alias_is_answered_without_parsing_its_module(tmp_path: Path,
                                                                 monkeypatch) -> None:
    write(tmp_path, ALIASED)
    linter, _ = lint_alone(tmp_path / "model.py")
    resolver = linter.analysis.resolver
    summarised = resolver.import_values("pkg.processors.Processor", 0)
    assert "processors.py" not in parsed_paths(linter)
    monkeypatch.setattr(Project, "opaque_value", lambda self, path, name: None)
    parsed = resolver.import_values("pkg.processors.Processor", 0)
    assert "processors.py" in parsed_paths(linter)
    assert all(isinstance(value, Unknown) for value in summarised + parsed)
    assert [value.reason for value in summarised] == [value.reason for value in parsed] == [
        "`( AttnProcessor | SlicedAttnProcessor )` is not a name the linter can follow"]
