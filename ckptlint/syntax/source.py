"""Reading and parsing one Python file, with lazily computed positions."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from types import MemberDescriptorType
from typing import Any

import libcst as cst

from ckptlint.analysis.scopes import ScopeBuilder, build_scopes
from ckptlint.findings import Position
from ckptlint.syntax.node_order import NodeOrder
from ckptlint.syntax.positions import LONE_CONTINUATION, Positions

# Reading and CPython syntax checks live in the libcst-free `reading` module (re-exported).
from ckptlint.syntax.reading import (  # noqa: F401
    SourceError,
    StatementStarts,
    check_syntax,
    compact_text,
    decode_source,
    full_text,
)


def parse_text(text: str, filename: str, *, syntax_checked: bool = False) -> cst.Module:
    """libcst's tree of `text`; `syntax_checked` when CPython has accepted it already."""
    if not syntax_checked:
        check_syntax(text, filename)
    try:
        with nodes_unchecked():
            return cst.parse_module(text)
    except cst.ParserSyntaxError as error:
        raise SourceError(f"syntax error: {error.message} (line {error.raw_line})") from None
    except RecursionError:
        raise SourceError("nesting too deep to parse") from None


def _unchecked(self: cst.CSTNode) -> None:
    """`CSTNode.__post_init__` while parsing: no validation."""


@contextmanager
def nodes_unchecked() -> Iterator[None]:
    """libcst nodes built meanwhile skip their validation (`CSTNode._validate`), through
    lean constructors (`lean_constructors`).

    The native parser builds every node through its dataclass constructor, whose
    `__post_init__` validates it (whitespace, parentheses, operators): a sixth of the parse,
    and pointless for text CPython accepted, which `parse_text` checks first (libcst's own
    comment in `CSTNode.__post_init__` says as much). Only the parse runs unchecked: nodes
    the fixes build are validated as usual.
    """
    checked = cst.CSTNode.__dict__["__post_init__"]
    lean = lean_constructors()
    constructors = {cls: cls.__dict__["__init__"] for cls in lean}
    cst.CSTNode.__post_init__ = _unchecked  # type: ignore[method-assign]
    for cls, constructor in lean.items():
        cls.__init__ = constructor  # type: ignore[misc]
    try:
        yield
    finally:
        for cls, constructor in constructors.items():
            cls.__init__ = constructor  # type: ignore[misc]
        cst.CSTNode.__post_init__ = checked  # type: ignore[method-assign]


_LEAN: dict[type, Callable[..., None]] = {}


def lean_constructors() -> dict[type, Callable[..., None]]:
    """For each node class libcst exports (those its parser builds), a constructor taking
    the same arguments as the dataclass's and setting the same fields, but through each
    slot's own setter, without `__post_init__`. A frozen dataclass's constructor sets each
    field through `object.__setattr__`, then validates: 8% of a parse. (Made once: each is
    generated from the class's dataclass fields.)"""
    if not _LEAN:
        for cls in vars(cst).values():
            if isinstance(cls, type) and issubclass(cls, cst.CSTNode) \
                    and dataclasses.is_dataclass(cls) and "__init__" in cls.__dict__:
                constructor = lean_constructor(cls)
                if constructor is not None:
                    _LEAN[cls] = constructor
    return _LEAN


def lean_constructor(cls: type) -> Callable[..., None] | None:
    """None for a class whose fields are not all plain slots (left as it is)."""
    namespace: dict[str, Any] = {"_NO_VALUE": object()}
    parameters: list[str] = []
    lines: list[str] = []
    for number, field in enumerate(dataclasses.fields(cls)):
        slot = next((owner.__dict__[field.name] for owner in cls.__mro__
                     if isinstance(owner.__dict__.get(field.name), MemberDescriptorType)),
                    None)
        if slot is None or not field.init or field.kw_only:
            return None
        namespace[f"_set{number}"] = slot.__set__
        if field.default is not dataclasses.MISSING:
            namespace[f"_default{number}"] = field.default
            parameters.append(f"{field.name}=_default{number}")
        elif field.default_factory is not dataclasses.MISSING:
            namespace[f"_factory{number}"] = field.default_factory
            parameters.append(f"{field.name}=_NO_VALUE")
            lines.append(f"if {field.name} is _NO_VALUE: {field.name} = _factory{number}()")
        else:
            parameters.append(field.name)
        lines.append(f"_set{number}(self, {field.name})")
    body = "".join(f"\n    {line}" for line in lines) or "\n    pass"
    exec(f"def __init__(self, {', '.join(parameters)}):{body}", namespace)  # noqa: S102
    return namespace["__init__"]


_LINE = re.compile(r"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+$")  # lines as Python counts them


def line_map(text: str, module: cst.Module) -> list[int] | None:
    """The file's line (1-based) of each line of libcst's code, index 0 unused; None when they
    are the same. libcst's lines are the file's with whole lines left out, in order."""
    if not LONE_CONTINUATION.search(text):
        return None
    code = module.code
    if code == text:
        return None
    file_lines = _LINE.findall(text)
    rows, row = [0], 0
    for line in _LINE.findall(code):
        while row < len(file_lines) and file_lines[row] != line:
            row += 1
        rows.append(min(row, len(file_lines) - 1) + 1)
        row += 1
    rows.append(rows[-1] + 1)  # the end of the last line
    return rows


class SourceModule:
    """One parsed file of the project: its text, tree, scopes and positions.

    Its text is kept as `compact_text` keeps it: the modules kept from one analysed file to
    the next are most of a worker's memory.
    """

    def __init__(self, path: Path, display: str, name: str, is_package: bool, text: str,
                 tree: cst.Module, statement_starts: StatementStarts | None = None) -> None:
        self.path = path  # absolute
        self.display = display  # the filename as findings report it
        self.name = name  # dotted module name ("" when unknown)
        self.is_package = is_package
        self.size = len(text)  # in characters
        self._text = compact_text(text)
        self.tree = tree
        # Where CPython puts each statement (`reading.statement_starts`), when known:
        # positions then cost a pass over the statement asked about, not over the file.
        self.statement_starts = statement_starts
        self._positions: Positions | None = None
        self._orders: dict[int, NodeOrder] = {}  # by id of the root

    def __repr__(self) -> str:
        return f"SourceModule({self.display!r})"

    @property
    def text(self) -> str:
        return full_text(self._text)

    @cached_property
    def scopes(self) -> ScopeBuilder:
        return build_scopes(self.tree, self.name, self.is_package)

    def span(self, node: cst.CSTNode) -> tuple[Position, Position]:
        """1-based start and end of a node (positions are computed once per file, on demand)."""
        (start_line, start_column), (end_line, end_column) = self.positions().range(node)
        rows = self._rows
        if rows is not None:
            start_line, end_line = (rows[min(line, len(rows) - 1)]
                                    for line in (start_line, end_line))
        return Position(start_line, start_column + 1), Position(end_line, end_column + 1)

    def positions(self) -> Positions:
        if self._positions is None:
            self._positions = Positions(self.tree, self.text, self.statement_starts)
        return self._positions

    def node_order(self, root: cst.CSTNode) -> NodeOrder:
        """The nodes under `root` (a function, say) in code order, numbered once."""
        order = self._orders.get(id(root))
        if order is None:
            order = self._orders[id(root)] = NodeOrder(root)
        return order

    def forget_positions(self) -> None:
        self._positions = None
        self._orders = {}

    def release(self) -> None:
        """Unlink what was derived from the tree (a module dropped is not used again): its
        scopes and bindings refer to each other, which would keep the tree alive until the
        next full garbage collection."""
        self.forget_positions()
        scopes = self.__dict__.pop("scopes", None)
        if scopes is not None:
            scopes.release()

    @cached_property
    def _rows(self) -> list[int] | None:
        return line_map(self.text, self.tree)

    def start(self, node: cst.CSTNode) -> Position:
        return self.span(node)[0]

    def definition_row(self, node: cst.FunctionDef) -> int:
        """The row of a `def`'s first decorator, or of the `def` when it has none: read from
        CPython's rows where the statement is anchored (a method's or function's position
        would otherwise cost a pass over its whole body)."""
        row = self.positions().definition_row(node)
        if row is None or self._rows is not None:
            return self.start(node.decorators[0] if node.decorators else node).row
        return row

    def code(self, node: cst.CSTNode) -> str:
        return self.tree.code_for_node(node)


def load_module(path: Path, display: str, name: str, is_package: bool, text: str,
                starts: StatementStarts) -> SourceModule:
    """`starts`: `statement_starts` of CPython's tree of `text`, which CPython therefore
    accepted (libcst may parse it)."""
    return SourceModule(path=path, display=display, name=name, is_package=is_package,
                        text=text, tree=parse_text(text, display, syntax_checked=True),
                        statement_starts=starts)
