"""Node positions, the same as libcst's PositionProvider gives, at a fraction of its cost.

PositionProvider tracks line and column on every token and builds two `CodePosition`s and a
`CodeRange` per node through a generator-based context manager. Here one codegen pass records
only token indices per node (a tuple of two ints), and a node's line and column are worked out
from the token lengths only when someone asks for them (the nodes a finding reports). Measured
on torch/testing/_internal/common_fsdp.py: 0.27 s for PositionProvider, 0.03 s here.

The recording mirrors `PositionProvidingCodegenState` exactly (syntactic positions win over
whitespace-inclusive ones; `start_node`/`end_node` hoisting), and tests compare the two on
every node of real files.

Given where CPython's `ast` puts each statement (`reading.statement_starts`), the pass runs
only over the innermost statement that holds the node asked for: a statement of the module,
or of the body of a class or function at any depth (a method's statements one by one). That
statement's code must sit at its row in the text, or the positions come from the sequential
pass after all.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from itertools import accumulate, islice
from typing import Literal

import libcst as cst
from libcst._nodes.internal import CodegenState

from ckptlint.syntax.reading import StatementStarts
from ckptlint.syntax.walk import child_fields, field_children, subtree_nodes

_NEWLINE = re.compile(r"\r\n?|\n")
# libcst drops a line holding only a `\` continuation (`module.code` lacks it), so the lines
# it numbers shift from the file's (and CPython's) after one.
LONE_CONTINUATION = re.compile(r"^[ \t\f]*\\\r?$", re.MULTILINE)


class _Syntactic:
    """`with state.record_syntactic_position(node, ...)` without a generator per node."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: _IndexState, node, start_node, end_node) -> None:
        self.state = state
        self.node = node
        self.start_node = start_node
        self.end_node = end_node

    def __enter__(self) -> None:
        self.start = len(self.state.tokens)

    def __exit__(self, *exc_info) -> Literal[False]:
        if exc_info[0] is not None:
            return False  # interrupted (say, by a RecursionError): the end was never reached
        computed = self.state.computed
        start = computed[self.start_node][0] if self.start_node is not None else self.start
        end = (computed[self.end_node][1] if self.end_node is not None
               else len(self.state.tokens))
        computed[self.node] = (start, end)
        return False


class _IndexState(CodegenState):
    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent,
                         default_newline=module.default_newline)
        self.computed: dict[cst.CSTNode, tuple[int, int]] = {}
        self._stack: list[int] = []

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append(len(self.tokens))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._stack.pop()
        if node not in self.computed:  # a syntactic position was recorded already
            self.computed[node] = (start, len(self.tokens))

    def pop_trailing_newline(self) -> None:
        # PositionProvider's line and column stay past the popped newline; keeping the token
        # keeps every recorded index valid and gives the same positions.
        pass

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        return _Syntactic(self, node, start_node, end_node)


def token_lines(tokens: list[str], code: str) -> tuple[list[int], list[int]]:
    """Where each token starts in `code` (the tokens joined), and where each line starts."""
    offsets = list(accumulate(map(len, tokens), initial=0))
    return offsets, [0, *(match.end() for match in _NEWLINE.finditer(code))]


def line_column(offsets: list[int], line_starts: list[int], index: int) -> tuple[int, int]:
    """(0-based line, column) of token `index`."""
    offset = offsets[index]
    line = bisect.bisect_right(line_starts, offset) - 1
    return line, offset - line_starts[line]


class _Mismatch(Exception):
    """The statements or their code do not sit where CPython's rows say."""


class _Anchor:
    """A statement whose code starts a line: its positions come from a pass over it alone."""

    __slots__ = ("statement", "row", "indent", "ranges", "offsets", "line_starts")

    def __init__(self, statement: cst.CSTNode, row: int, indent: list[str]) -> None:
        self.statement = statement
        self.row = row  # the 1-based row where its code (its leading lines) starts
        self.indent = indent
        self.ranges: dict[cst.CSTNode, tuple[int, int]] | None = None
        self.offsets: list[int] = []
        self.line_starts: list[int] = []


class _Anchored:
    """Positions from one statement's pass: every statement of the module and of the bodies
    of its classes and functions, however nested, is anchored at the row CPython gives."""

    def __init__(self, module: cst.Module, text: str, starts: StatementStarts) -> None:
        self.module = module
        self.text = text
        self.owner: dict[int, _Anchor] = {}  # id(node) -> its innermost anchor, marked so far
        # A generator of the module's, not a method's: one holding `self` would make a
        # cycle, and forgotten positions would then wait for the cyclic collector.
        self._marks = anchors_in(module, self.owner, module.body, starts, [])
        self.text_lines = [0, *(match.end() for match in _NEWLINE.finditer(text))]

    def range(self, node: cst.CSTNode) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """The node's range, or None when no anchor holds it; `_Mismatch` when the rows are
        not the code's."""
        anchor = self._anchor_of(node)
        if anchor is None:
            return None
        ranges = anchor.ranges if anchor.ranges is not None else self._run(anchor)
        found = ranges.get(node)
        if found is None:
            return None
        start = line_column(anchor.offsets, anchor.line_starts, found[0])
        end = line_column(anchor.offsets, anchor.line_starts, found[1])
        return ((anchor.row + start[0], start[1]),
                (anchor.row + end[0], end[1]))

    def definition_row(self, node: cst.FunctionDef) -> int | None:
        """The row of a `def` anchored as a statement of its own (its first decorator's),
        from CPython's rows without a pass over it; None when it is not one, or when the
        line there does not start the statement."""
        anchor = self._anchor_of(node)
        if anchor is None or anchor.statement is not node:
            return None
        row = anchor.row + len(node.leading_lines)
        if not 1 <= row < len(self.text_lines):
            return None
        line = self.text[self.text_lines[row - 1]:self.text_lines[row]].lstrip()
        return row if line.startswith("@" if node.decorators else ("def", "async")) else None

    def _anchor_of(self, node: cst.CSTNode) -> _Anchor | None:
        """Statements are marked in order until one holds the node (most questions are
        about a few methods: the rest of the file is never walked)."""
        key = id(node)
        owner = self.owner
        anchor = owner.get(key)
        while anchor is None:
            marked = next(self._marks, None)
            if marked is None:
                return None
            mark(*marked, owner)
            anchor = owner.get(key)
        return anchor

    def _run(self, anchor: _Anchor) -> dict[cst.CSTNode, tuple[int, int]]:
        if not 1 <= anchor.row <= len(self.text_lines):
            raise _Mismatch
        state = _IndexState(self.module)
        state.indent_tokens = list(anchor.indent)
        anchor.statement._codegen(state)
        start = self.text_lines[anchor.row - 1]
        tokens = state.tokens
        code = "".join(tokens)
        if not self.text.startswith(code, start) and not (
                # the last line of a file without a final newline: the sequential pass keeps
                # that newline token too (`pop_trailing_newline`)
                not self.module.has_trailing_newline and tokens
                and self.text[start:] == code[:len(code) - len(tokens[-1])]):
            raise _Mismatch
        anchor.ranges = state.computed
        anchor.offsets, anchor.line_starts = token_lines(tokens, code)
        return state.computed


def anchors_in(module: cst.Module, owner: dict[int, _Anchor], statements,
               starts: StatementStarts,
               indent: list[str]) -> Iterator[tuple[cst.CSTNode, _Anchor]]:
    """(subtree, its anchor) in the file's order; a class or function anchored statement by
    statement owns its header in `owner` (its own range needs the pass over all of it)."""
    for statement, (row, inner_starts) in matched(statements, starts):
        anchor = _Anchor(statement, start_row(statement, row), indent)
        block = (statement.body if isinstance(statement, (cst.ClassDef, cst.FunctionDef))
                 else None)
        if inner_starts is None or not isinstance(block, cst.IndentedBlock):
            yield statement, anchor
            continue
        owner[id(statement)] = owner[id(block)] = anchor
        for name in child_fields(type(statement)):
            if name != "body":
                for child in field_children(getattr(statement, name)):
                    yield child, anchor
        inner_indent = [*indent, module.default_indent if block.indent is None
                        else block.indent]
        yield from anchors_in(module, owner, block.body, inner_starts, inner_indent)


def matched(statements, starts: StatementStarts) -> list:
    """libcst's statements with CPython's rows (a line of `a; b` is two statements there)."""
    found, index = [], 0
    for statement in statements:
        if index >= len(starts):
            raise _Mismatch
        found.append((statement, starts[index]))
        index += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
    if index != len(starts):
        raise _Mismatch
    return found


def start_row(statement: cst.CSTNode, first: int) -> int:
    """The row where a statement's code starts: its leading lines are one row each."""
    leading = getattr(statement, "leading_lines", None)
    if leading is None:
        raise _Mismatch
    return first - len(leading)


def mark(root: cst.CSTNode, anchor: _Anchor, owner: dict[int, _Anchor]) -> None:
    """`anchor` for `root` and every node the walker visits under it."""
    for node in subtree_nodes(root):
        owner[id(node)] = anchor


class Positions:
    """Line (1-based) and column (0-based) of any node of one module, as PositionProvider.

    With `text` and its statements' `starts` (`reading.statement_starts`), a node's position
    comes from a pass over the statement holding it (`_Anchored`). Otherwise, and for nodes
    outside those statements, the codegen pass runs one top-level statement at a time and
    stops once the node asked for is recorded: a site in the first half of a file costs half
    a pass.
    """

    def __init__(self, module: cst.Module, text: str | None = None,
                 starts: StatementStarts | None = None) -> None:
        self._anchored = (_Anchored(module, text, starts)
                          if text is not None and starts is not None
                          and not LONE_CONTINUATION.search(text) else None)
        self._module = module
        self._state = _IndexState(module)
        self._statements = iter((*module.header, *module.body, *module.footer))
        self._ranges = self._state.computed
        self._tokens = self._state.tokens
        self._measured = 0  # how many tokens `_offsets` and `_line_starts` cover
        self._offsets = [0]  # where each token starts in the code
        self._line_starts = [0]
        self._last_char = ""

    @property
    def anchored(self) -> bool:
        """Passes run statement by statement (no row has disagreed with the code)."""
        return self._anchored is not None

    def _record_through(self, node: cst.CSTNode) -> None:
        """Run the codegen pass until `node` is recorded (or the module is done)."""
        state = self._state
        while node not in self._ranges:
            statement = next(self._statements, None)
            if statement is None:  # the end: what Module._codegen_impl does after the body
                module = self._module
                if module.has_trailing_newline and not state.tokens:
                    state.add_token(state.default_newline)
                self._ranges.setdefault(module, (0, len(state.tokens)))
                return
            statement._codegen(state)

    def _measure(self) -> None:
        """Extend the token offsets and line starts over the tokens added since last time."""
        tokens = self._tokens
        if self._measured == len(tokens):
            return
        new = tokens[self._measured:]
        self._measured = len(tokens)
        base = self._offsets[-1]
        self._offsets.extend(islice(accumulate(map(len, new), initial=base), 1, None))
        code = "".join(new)
        if code.startswith("\n") and self._last_char == "\r":  # one "\r\n" across tokens
            self._line_starts[-1] += 1
            code, base = code[1:], base + 1
        self._line_starts.extend(base + match.end() for match in _NEWLINE.finditer(code))
        if code:
            self._last_char = code[-1]

    def _line_column(self, index: int) -> tuple[int, int]:
        self._measure()
        offset = self._offsets[index]
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line + 1, offset - self._line_starts[line]

    def definition_row(self, node: cst.FunctionDef) -> int | None:
        """The 1-based row of a `def`'s first decorator, or of the `def` itself, when it is
        known without a pass (`_Anchored.definition_row`)."""
        if self._anchored is None:
            return None
        try:
            return self._anchored.definition_row(node)
        except _Mismatch:
            self._anchored = None
            return None

    def range(self, node: cst.CSTNode) -> tuple[tuple[int, int], tuple[int, int]]:
        """((start line, start column), (end line, end column)); KeyError if not in the tree."""
        if self._anchored is not None:
            try:
                found = self._anchored.range(node)
            except _Mismatch:
                self._anchored = None
            else:
                if found is not None:
                    return found
        self._record_through(node)
        start, end = self._ranges[node]
        return self._line_column(start), self._line_column(end)
