"""libcst's parse skips node validation (`source.nodes_unchecked`): the tree is the same,
and validation is back on for every other node the process builds."""

from pathlib import Path

import libcst as cst
import pytest

from ckptlint.syntax.source import SourceError, nodes_unchecked, parse_text

LARGE_FILE = Path(cst.__file__).parent / "_nodes" / "expression.py"  # a large real file
SAMPLES = [
    "x = (a  +\tb) * [c for c in d if c]  # comment\n",
    "@deco(1)\nasync def f(a, /, b=2, *c, d: int = 3, **e) -> None:\n    await g(*c, **e)\n",
    "with open(p) as f, lock:\n    y = {k: v for k, v in f}\n    z = lambda q: q if q else -q\n",
    "match p:\n    case {'a': [1, *rest]} | Point(x=0):\n        pass\n",
    "s = f'{a!r:>{width}}' 'x' \\\n    'tail'\nb = rb'\\x00'\n",
]


def checked_parse(text: str) -> cst.Module:
    return cst.parse_module(text)


@pytest.mark.parametrize("text", [*SAMPLES, LARGE_FILE.read_text()],
                         ids=[*map(str, range(len(SAMPLES))), "libcst-expression-py"])
def test_the_unchecked_parse_gives_the_same_tree(text):
    unchecked = parse_text(text, "sample.py")
    assert unchecked.code == text
    assert unchecked.deep_equals(checked_parse(text))


def test_nodes_built_after_a_parse_are_validated():
    parse_text("x = 1\n", "sample.py")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


def test_nodes_built_after_a_failed_parse_are_validated():
    with pytest.raises(SourceError):
        parse_text("def broken(:\n", "broken.py")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


def test_only_nodes_built_inside_the_block_skip_validation():
    with nodes_unchecked():
        cst.Name("not a name")  # no error: the parser's nodes are checked by CPython first
        with nodes_unchecked():
            pass
        cst.Name("still unchecked")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


def test_the_lean_constructors_build_the_nodes_the_dataclass_constructors_build():
    """Defaults and default factories included; the classes' own constructors are back
    after the block."""
    from ckptlint.syntax.source import lean_constructors

    assert cst.Name in lean_constructors() and cst.Comma in lean_constructors()
    originals = {cls: cls.__init__ for cls in lean_constructors()}

    def build():
        return [cst.Name("x"), cst.Comma(), cst.Arg(cst.Integer("1"), keyword=cst.Name("k")),
                cst.SimpleStatementLine([cst.Pass()]), cst.Module([])]

    with nodes_unchecked():
        assert cst.Name.__init__ is not originals[cst.Name]
        lean = build()
    assert {cls: cls.__init__ for cls in lean_constructors()} == originals
    for built_lean, built in zip(lean, build()):
        assert type(built_lean) is type(built) and built_lean.deep_equals(built)
        assert cst.Module([]).code_for_node(built_lean) == cst.Module([]).code_for_node(built)
