"""The text scans run on every file of a project (the prefilter's star-import test, the
`from ... import` names, the class-base and decorator index, writes on elements): what they
find, including
the word-boundary and start-of-line rules they check by hand rather than with a regex
look-behind or `^` anchor (those made the engine try every position, 25 times slower)."""
from __future__ import annotations

from ckptlint.analysis.textindex import class_bases, decorator_names
from ckptlint.screen.confirm import from_imported
from ckptlint.screen.prefilter import has_star_import


def test_star_import_is_a_whole_word_import_then_star() -> None:
    assert has_star_import("from m import *\n")
    assert has_star_import("import *")  # at the very start
    assert has_star_import("from m import\t *\n")
    assert has_star_import("reimport = 1\nfrom m import  *\n")  # a later one counts
    assert not has_star_import("reimport *\n")
    assert not has_star_import("_import *\nx = a * b\n")
    assert not has_star_import("from m import a\n")


def test_from_import_names_skip_a_from_inside_a_word_or_after_a_dot() -> None:
    assert list(from_imported("from a import b, c as d\n")) == ["b", "c"]
    # `xfrom` is no statement, the `from` after it is (scanned as a look-behind would).
    assert list(from_imported("xfrom a from b import c\n")) == ["c"]
    assert list(from_imported("a.from x import y\n")) == []
    assert list(from_imported("_from x import y\nfrom z import w\n")) == ["w"]


def test_class_statements_and_decorators_count_only_at_the_start_of_a_line() -> None:
    text = ("class A(B, mod.C):\n"
            "    class Inner(D[int]):\n"
            "        pass\n"
            "x = 1; class E(F): pass\n"
            "    @ckpt\n"
            "    @utils . wrap  # note\n"
            "y = 2 @ z\n"
            "\t@last\n")
    assert class_bases(text) == [["A", "B"], ["A", "C"], ["Inner", "D"]]
    assert decorator_names(text) == ["ckpt", "wrap", "last"]


def written_on_an_element(text: str, attr: str) -> bool:
    """`element_write`'s definition as one expression per step (what it answered before it
    read the receiver backwards): a write of `.attr` after `]`, or after a name that a
    `for` on the same line, before its `:`, names before an `in`."""
    import re

    from ckptlint.analysis.text_facts import ASSIGN_OPERATOR

    pattern = re.compile(rf"(?:\]|\b(\w+))[ \t]*\.{re.escape(attr)}(?:[ \t]*"
                         rf"(?:\[[^\]\n]*\][ \t]*)?{ASSIGN_OPERATOR}|\.\w+)")
    for match in pattern.finditer(text):
        receiver = match.group(1)
        if receiver is None or re.search(
                rf"\bfor\b[^\n:]*\b{re.escape(receiver)}\b[^\n:]*\bin\b", text):
            return True
    return False


ELEMENT_WRITES = [
    "blocks[0].gate = 1\n",
    "blocks[i] .gate += 1\n",
    "for b in blocks:\n    b.gate = 2\n",
    "for i, b in enumerate(blocks): b.gate.add_(1)\n",
    "[b.gate.zero_() for b in blocks]\n",
    "for x in xs:\n    pass\nb.gate = 1\n",  # `b` bound by no `for`
    "get().gate = 1\n",  # no receiver before the dot
    "'s'.gate = 1\n",
    "b.gate == 1\n",  # a comparison
    "b.gate\nfor y in b: pass\n",  # read, not written
    "b.gate[0] = 1\nfor q in range(3): b\n",  # `b` after the `in`, not before it
    "ab.gate = 1\nfor b in blocks: pass\n",  # `ab` is not `b`
    "a.gate.gate = 1\nfor a in s: pass\n",
    ").gate.gate = 1\nfor gate in s: pass\n",  # the receiver is the first `gate`
    "x = 1\n",
    "über.gate = 1\nfor über in s: pass\n",
]


def test_a_write_on_an_element_is_found_as_its_one_expression_definition_finds_it() -> None:
    from pathlib import Path

    from ckptlint.analysis.phases import (
        element_write,
        element_write_pattern,
        for_clauses,
        written_attribute_names,
    )

    for text in ELEMENT_WRITES:
        assert element_write(text, element_write_pattern("gate"), for_clauses(text)) \
            == written_on_an_element(text, "gate"), text
    assert sum(written_on_an_element(text, "gate") for text in ELEMENT_WRITES) == 8
    root = Path(__file__).parent
    for path in sorted([*root.rglob("*.py"), *(root.parent / "ckptlint").rglob("*.py")]):
        text = path.read_text(encoding="utf-8")
        clauses = for_clauses(text)
        for attr in sorted(written_attribute_names(text)):
            assert element_write(text, element_write_pattern(attr), clauses) \
                == written_on_an_element(text, attr), (path, attr)


CALLS = [
    "f(x)\n", "f (x)\n", "f\n(x)\n", "def f(x): pass\n", "async def f(x): pass\n",
    "undef f(x)\n",  # `def ` just before the word, as the one expression saw it
    "def  f(x): pass\n",  # two spaces: not `def ` before the word
    "obj.method(x)\n", "x = y[0](z)\n", "über(1)\n", "a(b(c(d)))\n", "print('f(')\n",
    "_private_(1)\n", "f2(1) + 3g(2)\n",
]


def test_called_names_are_the_names_the_one_expression_definition_finds() -> None:
    """`called_names` searches the reversed text (a pattern starting with `(`): the same
    names as `\\b(?<!def )(\\w++)\\s*+\\(` over the text, on shapes and on every fixture."""
    import re
    from pathlib import Path

    from ckptlint.analysis.text_facts import PASSED_NAME, called_names

    called = re.compile(r"\b(?<!def )(\w++)\s*+\(")
    root = Path(__file__).parent
    texts = [*CALLS, *(path.read_text(encoding="utf-8") for path in sorted(
        [*root.rglob("*.py"), *(root.parent / "ckptlint").rglob("*.py")]))]
    for text in texts:
        assert called_names(text) == {*called.findall(text), *PASSED_NAME.findall(text)}, text
    assert called_names("def  f(x): pass\nundef g(y)\n") >= {"f"}
    assert "g" not in called_names("undef g(y)\n")
