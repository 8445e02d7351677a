"""Reading and parsing one Python file, with lazily computed positions."""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ckptlint.findings import Position
from ckptlint.scopes import ScopeBuilder, build_scopes


class SourceError(Exception):
    """The file cannot be read or parsed; the message is the reason shown in CKP999."""


def decode_source(data: bytes) -> str:
    """Decode bytes as Python does: BOM, coding cookie, else UTF-8."""
    if b"\x00" in data:
        raise SourceError("file contains a NUL byte")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        raise SourceError(f"cannot decode: {error}") from None
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as error:
        raise SourceError(f"cannot decode as {encoding}: {error.__class__.__name__}: {error}") from None
    return text[1:] if text.startswith("\ufeff") else text


def check_syntax(text: str, filename: str) -> None:
    """Reject what CPython rejects before libcst sees it (its native parser can crash)."""
    try:
        ast.parse(text, filename=filename)
    except SyntaxError as error:
        raise SourceError(f"syntax error: {error.msg} (line {error.lineno})") from None
    except (RecursionError, MemoryError):
        raise SourceError("nesting too deep to parse") from None
    except ValueError as error:
        raise SourceError(str(error)) from None


def parse_text(text: str, filename: str) -> cst.Module:
    check_syntax(text, filename)
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as error:
        raise SourceError(f"syntax error: {error.message} (line {error.raw_line})") from None
    except RecursionError:
        raise SourceError("nesting too deep to parse") from None


@dataclass(eq=False)
class SourceModule:
    """One parsed file of the project: its text, tree, scopes and positions."""

    path: Path  # absolute
    display: str  # the filename as findings report it
    name: str  # dotted module name ("" when unknown)
    is_package: bool
    text: str
    tree: cst.Module
    _positions: dict | None = field(default=None, repr=False)

    @cached_property
    def scopes(self) -> ScopeBuilder:
        return build_scopes(self.tree, self.name, self.is_package)

    @cached_property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def span(self, node: cst.CSTNode) -> tuple[Position, Position]:
        """1-based start and end of a node (positions are computed once per file, on demand)."""
        if self._positions is None:
            wrapper = MetadataWrapper(self.tree, unsafe_skip_copy=True)
            self._positions = dict(wrapper.resolve(PositionProvider))
        code_range = self._positions[node]
        return (Position(code_range.start.line, code_range.start.column + 1),
                Position(code_range.end.line, code_range.end.column + 1))

    def start(self, node: cst.CSTNode) -> Position:
        return self.span(node)[0]

    def code(self, node: cst.CSTNode) -> str:
        return self.tree.code_for_node(node)


def load_module(path: Path, display: str, name: str, is_package: bool,
                text: str | None = None) -> SourceModule:
    if text is None:
        try:
            data = path.read_bytes()
        except OSError as error:
            raise SourceError(f"cannot read: {error.strerror or error}") from None
        text = decode_source(data)
    return SourceModule(path=path, display=display, name=name, is_package=is_package,
                        text=text, tree=parse_text(text, display))
