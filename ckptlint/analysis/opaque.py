"""Module-level names bound to a value the resolver does not follow, from `ast`.

The resolver follows names, attributes, subscripts, calls, lists, tuples, comprehensions and
lambdas; any other value (`AttentionProcessor = AttnProcessor | SlicedAttnProcessor`, a
number, a string, a dict) becomes an `Unknown` that quotes its code. Reaching such a name in
another module (`from .attention_processor import AttentionProcessor` in an annotation) used
to cost that module's libcst parse, only to quote the code: a 240 kB module, for one alias.

Here a name is summarised when the module binds it exactly once, by one assignment with that
single target at the top of the module body (`X = ...` or `X: T = ...`), and nowhere else
(any other binding of the name anywhere, `global` included, or an import of it, leaves it
out). Its code is the text from the first token after the statement's `=` to the statement's
end, which holds any parentheses around the value, as libcst's node does; it is checked by
parsing it back to the same tree.

The summary is a pure function of the file's text, kept in the summary store like the class
summaries (`ckptlint.analysis.classes`): plain JSON, checked when read back.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from typing import Any

from ckptlint.analysis.classes import binding_counts, import_lines
from ckptlint.storage.plain_data import want_dict, want_str

# `ast` forms whose libcst nodes `Resolver.values` turns straight into an `Unknown`.
OPAQUE_FORMS = (ast.BinOp, ast.BoolOp, ast.UnaryOp, ast.Compare, ast.Dict, ast.Set,
                ast.DictComp, ast.SetComp, ast.IfExp, ast.JoinedStr)
_LINE = re.compile(r"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+$")  # lines as CPython numbers them
OPENING, CLOSING = frozenset("([{"), frozenset(")]}")

OpaqueValues = dict[str, str]  # name -> the value's code on one line


def opaque_values(tree: ast.Module, text: str) -> OpaqueValues:
    """The module-level names bound only to a value the resolver does not follow, with the
    value's code (whitespace runs made one space)."""
    counts = binding_counts(tree)
    imported = import_lines(tree.body, {})  # names any module-level import binds
    lines: list[str] | None = None
    found: OpaqueValues = {}
    for statement in tree.body:
        name, value = assigned(statement)
        if name is None or value is None or counts[name] != 1 or name in imported \
                or not is_opaque(value):
            continue
        if lines is None:
            lines = _LINE.findall(text)
        code = value_code(lines, statement, value)
        if code is not None:
            found[name] = " ".join(code.split())
    return found


def assigned(statement: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
            and isinstance(statement.targets[0], ast.Name):
        return statement.targets[0].id, statement.value
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) \
            and statement.simple:
        return statement.target.id, statement.value
    return None, None


def is_opaque(value: ast.expr) -> bool:
    if isinstance(value, ast.Constant):  # `None`, `True` and `False` are names to libcst
        return value.value is not None and not isinstance(value.value, bool)
    return isinstance(value, OPAQUE_FORMS)


def value_code(lines: list[str], statement: ast.stmt, value: ast.expr) -> str | None:
    """The source of the value with its parentheses: from the first token after the
    statement's `=` (outside any bracket) to the statement's end. None when the tokens do
    not say it plainly, or the code does not parse back to `value`."""
    assert statement.end_lineno is not None and statement.end_col_offset is not None
    first, last = statement.lineno - 1, statement.end_lineno - 1
    if last >= len(lines):
        return None
    segment = lines[first:last + 1]
    start_column = column(segment[0], statement.col_offset)
    end_column = column(segment[-1], statement.end_col_offset)
    depth, after_equal = 0, False
    begin: tuple[int, int] | None = None
    try:
        for token in tokenize.generate_tokens(io.StringIO("".join(segment)).readline):
            row, col = token.start
            if (row, col) < (1, start_column):
                continue
            if after_equal:
                if token.type not in (tokenize.NL, tokenize.COMMENT):
                    begin = (row, col)
                    break
                continue
            if token.type == tokenize.OP:
                if token.string in OPENING:
                    depth += 1
                elif token.string in CLOSING:
                    depth -= 1
                elif token.string == "=" and depth == 0:
                    after_equal = True
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    if begin is None:
        return None
    code = "".join(segment[begin[0] - 1:])
    code = code[begin[1]:len(code) - len(segment[-1]) + end_column]
    try:
        parsed = ast.parse(f"(\n{code}\n)", mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    return code if ast.dump(parsed) == ast.dump(value) else None


def column(line: str, offset: int) -> int:
    """A character column from `ast`'s UTF-8 byte offset."""
    return len(line.encode("utf-8")[:offset].decode("utf-8", errors="replace"))


def plain_opaque(found: OpaqueValues) -> dict[str, str]:
    return dict(found)


def stored_opaque(value: Any) -> OpaqueValues:
    return {want_str(name, "opaque name"): want_str(code, "opaque code")
            for name, code in want_dict(value, "opaque values").items()}
