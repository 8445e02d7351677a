"""Reading one file and checking its syntax with CPython, without importing libcst.

Everything here is cheap and libcst-free, so a run whose files all fail the prefilter never
pays for `import libcst`. Each failure is a `SourceError` whose message is the reason shown in
the file's CKP999 finding.
"""

from __future__ import annotations

import ast
import codecs
import io
import os
import re
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path


class SourceError(Exception):
    """The file cannot be read or parsed; the message is the reason shown in CKP999, `line`
    the row of a syntax error (None when there is none)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


# CPython messages that mean "this is Python 2 code".
_PYTHON2_HINTS = (
    "Missing parentheses in call to 'print'",
    "Missing parentheses in call to 'exec'",
    "leading zeros in decimal integer literals",
    "multiple exception types must be parenthesized",
)


def read_bytes(path: Path, max_size: int) -> bytes:
    """The file's bytes, or a SourceError saying why they cannot be had."""
    try:
        info = os.stat(path)
    except OSError as error:
        raise SourceError(f"cannot read: {error.strerror or error}") from None
    if stat.S_ISDIR(info.st_mode):
        raise SourceError("cannot read: is a directory")
    if not stat.S_ISREG(info.st_mode):
        # A FIFO, socket or device: reading it could block or never end.
        raise SourceError("cannot read: not a regular file")
    if max_size and info.st_size > max_size:
        raise SourceError(too_large(info.st_size, max_size))
    try:
        with open(path, "rb") as stream:
            data = stream.read(max_size + 1) if max_size else stream.read()
    except OSError as error:
        raise SourceError(f"cannot read: {error.strerror or error}") from None
    if max_size and len(data) > max_size:
        raise SourceError(too_large(len(data), max_size))
    return data


def too_large(size: int, limit: int) -> str:
    return (f"file is larger than max-file-size ({size} > {limit} bytes); not analysed "
            "(raise `max-file-size` in [tool.ckptlint] to lint it)")


# Python's tokens, closely enough to count them in one regular-expression scan (within a few
# per cent of `tokenize`, which is ten times slower).
_TOKEN = re.compile(r"""
    [A-Za-z]{0,2}                                      # a string literal: its prefix,
    (?: '''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*'''       # then the string itself
      | \"\"\"[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*\"\"\"
      | '[^'\\\n]*(?:\\.[^'\\\n]*)*'
      | "[^"\\\n]*(?:\\.[^"\\\n]*)*" )
    | \#[^\n]*                                         # a comment
    | \d[\d_]*\.\d*(?:[eE][-+]?\d+)?[jJ]?              # a number with a point: `1.0`, `1.e-5`
    | \w+                                              # a name or a number
    | [^\w\s]                                          # an operator or a bracket
""", re.VERBOSE | re.DOTALL)


def count_tokens(text: str) -> int:
    """The syntax nodes `max-analysis-nodes` limits: the leaves of the tree libcst would build
    (names, numbers, strings, comments, operators and brackets)."""
    return _TOKEN.subn("", text)[1]


def check_nodes(text: str, limit: int) -> None:
    """SourceError when `text` has more syntax nodes than `limit` (0: no limit). A token takes
    one character at least, so a text no longer than the limit is not even counted."""
    if limit and len(text) > limit:
        count = count_tokens(text)
        if count > limit:
            raise SourceError(
                f"file is larger than max-analysis-nodes ({count} > {limit} syntax nodes); "
                "not analysed (raise `max-analysis-nodes` in [tool.ckptlint] to lint it)")


@dataclass(frozen=True)
class Limits:
    """How much of a file ckptlint reads and parses (`max-file-size` in bytes,
    `max-analysis-nodes`; 0: no limit): a linted file and a module read to follow a call
    alike."""

    file_size: int = 0
    nodes: int = 0


def decode_source(data: bytes) -> str:
    """Decode bytes as Python does: BOM, coding cookie, else UTF-8."""
    if b"\x00" in data:
        raise SourceError("file contains a NUL byte")
    if not declares_encoding(data):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise SourceError(f"cannot decode as utf-8 ({error}), and no `# coding:` line "
                              "names another encoding") from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        if "invalid or missing encoding declaration" in str(error):
            raise SourceError(f"cannot decode as utf-8 ({error}), and no `# coding:` line "
                              "names another encoding") from None
        raise SourceError(f"cannot decode: {error}") from None
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as error:
        hint = ", and no `# coding:` line names another encoding" if encoding == "utf-8" else ""
        raise SourceError(f"cannot decode as {encoding} ({error}){hint}") from None
    return text[1:] if text.startswith("\ufeff") else text


def declares_encoding(data: bytes) -> bool:
    """A BOM, or `coding` in the first two lines (where a coding cookie must be): then
    `tokenize.detect_encoding` decides; otherwise the file is UTF-8, as it would say."""
    if data.startswith(codecs.BOM_UTF8):
        return True
    first = data.find(b"\n")
    second = data.find(b"\n", first + 1) if first >= 0 else -1
    return b"coding" in (data[:second] if second >= 0 else data)


def compact_text(text: str) -> str | bytes:
    """A text kept for a run (the project's text searches, a parsed module): one not all
    ASCII as UTF-8, since a `str` holding one character past Latin-1 takes 2 or 4 bytes for
    each. `surrogatepass`: a notebook's JSON may spell a lone surrogate; it comes back whole."""
    return text if text.isascii() else text.encode("utf-8", "surrogatepass")


def full_text(kept: str | bytes) -> str:
    """The text `compact_text` kept."""
    return kept.decode("utf-8", "surrogatepass") if isinstance(kept, bytes) else kept


# Per top-level statement of CPython's tree: its first row (its first decorator's, if any)
# and, for a class, the first rows of its body's statements.
# Each statement's first row, with its body's statements for a `class` or `def`.
StatementStarts = list[tuple[int, "StatementStarts | None"]]
DEFINITIONS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def statement_starts(tree: ast.Module) -> StatementStarts:
    """Where each statement starts, in the bodies of classes and functions too
    (`ckptlint.syntax.positions` anchors its passes there)."""
    return _starts(tree.body)


def _starts(statements: list[ast.stmt]) -> StatementStarts:
    return [(first_row(statement),
             _starts(statement.body) if isinstance(statement, DEFINITIONS) else None)
            for statement in statements]


def first_row(statement: ast.stmt) -> int:
    decorators = getattr(statement, "decorator_list", None)
    return decorators[0].lineno if decorators else statement.lineno


def parse_ast(text: str, filename: str) -> ast.Module:
    """CPython's own parse; what it rejects must never reach libcst (its parser can crash)."""
    try:
        return ast.parse(text, filename=filename)
    except SyntaxError as error:
        raise SourceError(syntax_reason(error), error.lineno or None) from None
    except (RecursionError, MemoryError):
        raise SourceError("nesting too deep to parse (Python's parser gave up)") from None
    except ValueError as error:  # e.g. source code string cannot contain null bytes
        raise SourceError(str(error)) from None


def syntax_reason(error: SyntaxError) -> str:
    message = error.msg or "invalid syntax"
    where = f" (line {error.lineno})" if error.lineno else ""
    if "too many nested parentheses" in message or "too many statically nested" in message:
        return f"nesting too deep: {message}{where}"
    if any(hint in message for hint in _PYTHON2_HINTS):
        return f"syntax error, Python 2 code? {message}{where}"
    return f"syntax error: {message}{where}"


def check_syntax(text: str, filename: str) -> None:
    """Reject what CPython rejects before libcst sees it."""
    parse_ast(text, filename)


def bound_name(node: ast.AST) -> str | None:
    """The name an `ast` node binds in the scope around it other than by an import or a
    `global`/`nonlocal` statement: an assignment target, a match capture, an `except ... as`
    name, a function or class name."""
    if isinstance(node, ast.Name):
        return None if isinstance(node.ctx, ast.Load) else node.id
    if isinstance(node, (ast.MatchAs, ast.MatchStar, ast.ExceptHandler)):
        return node.name
    if isinstance(node, ast.MatchMapping):
        return node.rest
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    return None
