"""What dynamic mode reads from the checkpointed code's source (parent side, `ast` only).

Dynamic mode runs the user's command anyway; here it only parses the files its findings and
sites point into, to interpret what the watched process saw:

- `dependent_rows`: the lines of a function that use what a line computed (so that a replay
  whose first difference is in `h = x + noise` is traced back to `noise = random.random()`);
- `function_span` / `loop_span`: whether a line ran before another in execution order;
- `branch_arms`: where an `if`/`while` goes when it is taken and when it is not, so that the
  line its frame went to next tells which way it went;
- `state_written`: the module and instance state a checkpointed function writes (`COUNT += 1`,
  `self.calls += 1`, `self.cache.append(...)`), which must not change again in a replay.
"""

from __future__ import annotations

import ast
import functools
import os
from dataclasses import dataclass

MAX_SOURCE_BYTES = 2_000_000
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
# Methods that change the object they are called on (containers, tensors in place).
MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "popleft", "appendleft", "remove", "clear",
    "update", "setdefault", "add", "discard", "sort", "reverse", "put",
})


@functools.lru_cache(maxsize=256)
def _tree(filename: str) -> ast.Module | None:
    try:
        if os.path.getsize(filename) > MAX_SOURCE_BYTES:
            return None
        with open(filename, "rb") as handle:
            return ast.parse(handle.read(), filename)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None


def _span(node: ast.stmt | ast.expr) -> tuple[int, int]:
    return node.lineno, getattr(node, "end_lineno", None) or node.lineno


def _innermost(filename: str, row: int, kinds) -> ast.stmt | None:
    tree = _tree(filename)
    found = None
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, kinds):
            start, end = _span(node)
            if start <= row <= end and (found is None or start >= found.lineno):
                found = node
    return found


def function_span(filename: str, row: int) -> tuple[int, int] | None:
    """The rows of the innermost function holding `row` (None: module level or unknown)."""
    node = _innermost(filename, row, FUNCTIONS)
    return _span(node) if node is not None else None


def loop_span(filename: str, row: int) -> tuple[int, int] | None:
    """The rows of the innermost loop holding `row` inside its function."""
    node = _innermost(filename, row, LOOPS)
    function = function_span(filename, row)
    if node is None or (function is not None and not function[0] <= node.lineno <= function[1]):
        return None
    return _span(node)


def _statements(scope: ast.AST):
    """The simple statements of a scope, nested blocks included, not nested functions."""
    for node in ast.iter_child_nodes(scope):
        if isinstance(node, (*FUNCTIONS, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.stmt):
            yield node
        yield from _statements(node)


def _bound(node: ast.AST) -> set[str]:
    names: set[str] = set()
    targets: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in node.items if item.optional_vars]
    for target in targets:
        names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    for sub in ast.walk(node):
        if isinstance(sub, ast.NamedExpr):
            names.add(sub.target.id)
    return names


def _own_part(node: ast.stmt) -> list[ast.stmt | ast.expr]:
    """The parts of a statement that run on its own lines (a compound statement's header)."""
    if isinstance(node, (ast.If, ast.While)):
        return [node.test]
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [node.target, node.iter]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [part for item in node.items for part in (item.context_expr, item.optional_vars)
                if part is not None]
    if isinstance(node, (ast.Try, *FUNCTIONS, ast.ClassDef)):
        return []
    return [node]


def _read(parts: list[ast.stmt | ast.expr]) -> set[str]:
    return {n.id for part in parts for n in ast.walk(part)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _header_rows(node: ast.stmt) -> set[int]:
    parts = _own_part(node)
    rows = set()
    for part in parts:
        start, end = _span(part)
        rows |= set(range(start, end + 1))
    return rows or {node.lineno}


def dependent_rows(filename: str, row: int) -> set[int]:
    """`row`, and the rows of statements in its function that use (directly or through other
    statements) a name the statement at `row` binds. Control flow is not followed: a use
    anywhere in the function counts."""
    scope = _innermost(filename, row, FUNCTIONS) or _tree(filename)
    if scope is None:
        return {row}
    statements = list(_statements(scope))
    holding = [s for s in statements if row in _header_rows(s)]
    rows = {row}
    names: set[str] = set()
    for statement in holding:
        rows |= _header_rows(statement)
        names |= _bound(statement)
    changed = bool(names)
    while changed:
        changed = False
        for statement in statements:
            if _read(_own_part(statement)) & names:
                new_rows = _header_rows(statement) - rows
                new_names = _bound(statement) - names
                if new_rows or new_names:
                    rows |= new_rows
                    names |= new_names
                    changed = True
    return rows


def escapes(filename: str, row: int) -> bool:
    """Whether what the line at `row` computes can leave its function: a statement using it
    (directly or through other statements) returns or yields it, or stores it in an
    attribute, an item or a global."""
    scope = _innermost(filename, row, FUNCTIONS)
    if scope is None:
        return True
    rows = dependent_rows(filename, row)
    declared = {name for node in ast.walk(scope) if isinstance(node, (ast.Global, ast.Nonlocal))
                for name in node.names}
    for statement in _statements(scope):
        if not _header_rows(statement) & rows:
            continue
        if isinstance(statement, ast.Return) or any(
                isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(statement)):
            return True
        targets = statement.targets if isinstance(statement, ast.Assign) else \
            [statement.target] if isinstance(statement, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)) or (
                    isinstance(target, ast.Name) and target.id in declared):
                return True
    return False


@dataclass(frozen=True)
class Arms:
    """Where a branch goes: the rows of the arm taken when its test holds, and of the rest."""

    kind: str                          # "if" | "while"
    taken: tuple[int, int]             # the body
    other: tuple[int, int] | None      # `else`/`elif`, or None (goes on past the statement)

    def way(self, went_to: int) -> str:
        if self.taken[0] <= went_to <= self.taken[1]:
            return "body"
        return "else" if self.other and self.other[0] <= went_to <= self.other[1] else "past"


def branch_arms(filename: str, row: int) -> Arms | None:
    """The arms of an `if`/`while` whose test is on `row` and whose body starts on a later
    row (only then does the next line its frame runs tell the way it went)."""
    tree = _tree(filename)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While)) and node.test.lineno <= row <= \
                (node.test.end_lineno or node.test.lineno) and node.body[0].lineno > row:
            other = (node.orelse[0].lineno, node.orelse[-1].end_lineno or node.orelse[-1].lineno) \
                if node.orelse else None
            return Arms("if" if isinstance(node, ast.If) else "while",
                        (node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno),
                        other)
    return None


def _function_at(filename: str, first_row: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function a code object starting at `first_row` is (decorators shift the line)."""
    tree = _tree(filename)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, FUNCTIONS):
            rows = {node.lineno, *(d.lineno for d in node.decorator_list)}
            if first_row in rows:
                return node
    return None


def _state_expression(node: ast.AST, global_names: set[str]) -> str | None:
    """`X`, `X.a`, `self.a`, `X["k"]` when `node` names module or instance state."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append("." + node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, (str, int)):
            parts.append(f"[{node.slice.value!r}]")
            node = node.value
        elif isinstance(node, ast.Name):
            if node.id == "self" and parts:
                return "self" + "".join(reversed(parts))
            if node.id in global_names:
                return node.id + "".join(reversed(parts))
            return None
        else:
            return None


def state_written(filename: str, first_row: int) -> list[str]:
    """The state a function (its code starting at `first_row`) writes or mutates in place:
    names it declares `global`/`nonlocal` and assigns, module names whose items or
    attributes it sets or calls a mutating method of, and `self.` attributes likewise."""
    function = _function_at(filename, first_row)
    tree = _tree(filename)
    if function is None or tree is None:
        return []
    declared = {name for node in ast.walk(function)
                if isinstance(node, (ast.Global, ast.Nonlocal)) for name in node.names}
    module_names = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign,
                                                                    ast.AugAssign))
                    for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    for t in ast.walk(target) if isinstance(t, ast.Name)}
    local = {name for node in ast.walk(function) if isinstance(node, ast.stmt)
             for name in _bound(node)} - declared
    known = declared | (module_names - local - {a.arg for a in function.args.args})
    out: list[str] = []

    def add(target: ast.AST, rebinds: bool) -> None:
        if isinstance(target, ast.Name):   # rebinding a name changes state only if declared
            expression = target.id if target.id in (declared if rebinds else known) else None
        else:
            expression = _state_expression(target, known)
        if expression and expression not in out:
            out.append(expression)

    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                add(target, True)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            add(node.target, True)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in MUTATING_METHODS
                or (node.func.attr.endswith("_") and not node.func.attr.startswith("_"))):
            base = node.func.value
            if not (isinstance(base, ast.Name) and base.id == "self"):
                add(base, False)
    return out
