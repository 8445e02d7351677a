"""The text scans run on every file of a project (the prefilter's star-import test, the
`from ... import` names, the class-base and decorator index): what they find, including
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
