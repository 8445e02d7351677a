"""A cheap confirmation that a file can hold a checkpoint site, before libcst parses it.

The text prefilter passes every file where a trigger word such as `checkpoint` appears; in the
torch tree that is about 110 files, of which a handful hold a site. libcst costs about ten times
CPython's `ast` to parse, so each candidate is parsed with `ast` first (which the engine does
anyway, to keep what CPython rejects away from libcst) and checked here against the same API
table and aliasing rules `sites.py` uses. The check may pass files that hold no site; it must
never reject one that `sites.py` would find a site in (the tests run both on the fixtures and
on the torch tree).

How `sites.py` finds a site, and what that requires of the file:

- A call of `<expr>._gradient_checkpointing_func(...)`: that attribute name appears.
- `<expr>.gradient_checkpointing_enable(...)` (or another library object's enable method:
  `activation_checkpointing_enable`, diffusers' `enable_gradient_checkpointing`): that
  attribute name appears. What the receiver is may be known only through other files (a
  project helper returning a transformers model), so the name alone passes the file.
- A hand-written checkpoint (`analysis/hand_rolled.py`): the word `Function` (its base, or
  the import binding an alias of it), and a `class` with bases, a `forward` and a `backward`
  holding `with <...>.enable_grad()` or `with <...>.set_grad_enabled(...)`.
- `Cls.apply(...)` of a hand-written checkpoint class another project file defines (or a
  subclass of one): one of the names of the project's classes that may be such a class
  (`textindex.TextIndex.hand_rolled_classes`, a whole-project fact asked only once some file
  has a name before `.apply`) is written right before `.apply` (`applied_names`: spaces,
  newlines and line continuations between). `sites.py` follows `.apply` into another file
  only when the class is one of these and named so at the call (`Cls.apply`,
  `module.Cls.apply`), by the same `applied_names`.
- A call (or class base) whose local qualified name is a checkpoint API, a segment base class,
  a training-arguments class or a library entry point (`apis.called_names`). Local qualified
  names start at an import binding and extend through aliases (`a = b`, walrus, `x if c else
  y`, a parameter's default, `partial(...)`, `self.x = ...` in the class, what a function of
  the file returns, an instance of a class: `Cls()`) and attribute access (`head.attr`). So
  some import must bind a name whose qualified name Q is that API's name T or a dotted prefix
  of it; the bound name must be used outside import statements; and every component of T
  after Q must appear as an attribute name (`.utils`, `.checkpoint`).
- A name spelled like an API (`apis.trigger_names`) imported from another project module
  (`from .attention import checkpoint`), or any name a file with a star import (`from
  .attention import *`) reads (the API itself, a helper returning it): what it denotes is in
  the other file, so it counts as a possible API here (a "wildcard"). The prefilter passes
  every file with a star import for the same reason.

Imports are read from the `ast` (at any depth: functions, classes, `try`, `if`), relative ones
resolved with the module's dotted name exactly as `scopes.py` does; names and attributes are
looked for in the text, which can only over-approximate (comments and strings count).
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable, Iterable, Iterator
from typing import cast

from ckptlint.analysis import apis
from ckptlint.screen.prefilter import has_star_import
from ckptlint.syntax.ast_nodes import node_fields, walk_nodes
from ckptlint.syntax.modnames import resolve_relative

# Attribute names whose call may be a site whatever the file imports (see above).
SITE_METHODS = (apis.HF_CHECKPOINT_METHOD, *apis.HF_ENABLE_METHODS, *apis.ENTRY_BY_METHOD)
# A name that may denote any checkpoint API (defined in another project module).
WILDCARD = "*"
# Is a dotted name a module of the project being linted?
ProjectModules = Callable[[str], bool]
# The names of the project's classes that may be hand-written checkpoints.
ProjectClasses = Callable[[], frozenset[str]]


def no_project_modules(dotted: str) -> bool:
    return False


def no_project_classes() -> frozenset[str]:
    return frozenset()



class SiteConfirmer:
    """Built once per configuration; `may_hold_site(tree, text, ...)` per file."""

    def __init__(self, table: Iterable[str], segment_bases: Iterable[str],
                 project_modules: ProjectModules = no_project_modules,
                 project_classes: ProjectClasses = no_project_classes) -> None:
        table = list(table)
        segment_bases = tuple(segment_bases)
        targets = apis.called_names(table, segment_bases)
        # For each dotted prefix Q of a target T: the components of T after Q (any one suffices).
        self.by_prefix: dict[str, list[tuple[str, ...]]] = {}
        for target in targets:
            parts = target.split(".")
            for cut in range(1, len(parts) + 1):
                self.by_prefix.setdefault(".".join(parts[:cut]), []).append(
                    tuple(part for part in parts[cut:] if part != apis.INSTANCE))
        self.complete = frozenset(targets)
        self.target_parts = sorted(tuple(part for part in target.split(".")
                                         if part != apis.INSTANCE) for target in targets)
        self.triggers = frozenset(apis.trigger_names(table, segment_bases))
        self.project_modules = project_modules
        self.project_classes = project_classes

    def applies_project_class(self, text: str) -> bool:
        """`Cls.apply` with `Cls` the name of a project class that may be a hand-written
        checkpoint (see above): whatever the trigger words, such a file may hold a site."""
        applied = applied_names(text)
        return bool(applied) and not applied.isdisjoint(self.project_classes())

    def may_hold_site_text(self, text: str, module_name: str = "") -> bool:
        """A necessary condition read from the text alone (no parse): cheaper, weaker.

        For a site through target T = c1.c2...cn, an import binds a prefix of T: in an absolute
        import c1 is a word of the file (a relative one may stand for the c1...ck that T shares
        with the file's own package path), and every later component is written either after
        a dot (module path, attribute access) or as a name an import binds (after `import`, a
        comma or a parenthesis).
        """
        if any(has_attribute(text, method) for method in SITE_METHODS) \
                or may_hand_roll(text):
            return True
        if module_name and any(target.startswith(f"{module_name}.") for target in self.complete):
            return True  # the API's own module (linting torch itself): its defs are APIs
        if has_star_import(text) or any(name in self.triggers for name in from_imported(text)):
            return True  # an API's name may come from another project module
        relative = has_relative_import(text)
        seen: dict[tuple[str, bool], bool] = {}

        def check(name: str, first: bool) -> bool:
            key = (name, first)
            if key not in seen:
                seen[key] = has_word(text, name) if first else has_reference(text, name)
            return seen[key]

        module_parts = module_name.split(".")

        def implied(parts: tuple[str, ...]) -> int:
            """How many leading components a relative import may stand for: those the API
            shares with this file's own package path (all but the last when unknown)."""
            if not relative:
                return 0
            if len(module_parts) < 2:
                return len(parts) - 1
            shared = 0
            while (shared < len(parts) - 1 and shared < len(module_parts)
                   and parts[shared] == module_parts[shared]):
                shared += 1
            return shared

        return any(all(check(part, index == 0) for index, part in enumerate(parts)
                       if index >= implied(parts))
                   for parts in self.target_parts)

    def may_hold_site(self, tree: ast.Module, text: str, module_name: str,
                      is_package: bool) -> bool:
        if any(has_attribute(text, method) for method in SITE_METHODS):
            return True
        if may_hand_roll(text) and any(type(node) is ast.ClassDef
                                       and reruns_in_backward(cast(ast.ClassDef, node))
                                       for node in iter_statements(tree)):
            return True
        if self.applies_project_class(text):
            return True
        bindings: list[tuple[str, str]] = []
        star = False
        # `type(node) is` rather than isinstance, for speed; `cast` says what it proved.
        for node in iter_statements(tree):
            kind = type(node)
            if kind is ast.Import or kind is ast.ImportFrom:
                imported = cast("ast.Import | ast.ImportFrom", node)
                star = star or (kind is ast.ImportFrom and any(
                    alias.name == "*" for alias in imported.names))
                bindings.extend(import_bindings(imported, module_name, is_package))
            elif (kind is ast.FunctionDef or kind is ast.AsyncFunctionDef) and module_name:
                # sites.py: a module-level def in the API's own module is that API (any depth
                # here, which can only add candidates).
                name = cast("ast.FunctionDef | ast.AsyncFunctionDef", node).name
                bindings.append((name, f"{module_name}.{name}"))
        seen: dict[str, bool] = {}

        def attribute(name: str) -> bool:
            if name not in seen:
                seen[name] = has_attribute(text, name)
            return seen[name]

        relevant = [(local, qualname) for local, qualname in bindings
                    if any(all(attribute(name) for name in rest)
                           for rest in self.by_prefix.get(qualname, ()))]
        relevant.extend((local, WILDCARD) for local, qualname in bindings
                        if self.from_project(qualname))
        if star:  # `from M import *` may bind any name the file does not: an API, a helper
            relevant.extend((name, WILDCARD) for name in unbound_names(tree))
        if not relevant:
            return False
        try:
            return AliasClosure(self, relevant).holds_site(tree)
        except RecursionError:
            return True  # too deep to follow here: let the full analysis decide

    def from_project(self, qualname: str) -> bool:
        """Is `qualname` a name spelled like an API inside another project module?"""
        parent, _, last = qualname.rpartition(".")
        return (bool(parent) and last in self.triggers and qualname not in self.by_prefix
                and self.project_modules(parent))


class AliasClosure:
    """Which names and attributes may denote (a prefix of) an API, over the whole file.

    Scope-blind on purpose: every binding of a name counts everywhere, which can only add
    candidates. Follows what `sites.py` follows: import bindings, `name = value`, `name: T =
    value`, walrus, `x if c else y`, parameter defaults, `obj.attr = value` (sites.py:
    `self.attr` in methods), attribute access, what the file's functions return, instances
    (`Cls()`), and calls (sites.py: `functools.partial(api, ...)`; here any call passing an API
    first). A name spelled like an API that another project module binds may be anything:
    `WILDCARD`.
    """

    def __init__(self, confirmer: SiteConfirmer, relevant: list[tuple[str, str]]) -> None:
        self.by_prefix = confirmer.by_prefix
        self.complete = confirmer.complete
        self.names: dict[str, set[str]] = {}
        self.attributes: dict[str, set[str]] = {}
        self.returns: dict[str, set[str]] = {}
        for local, qualname in relevant:
            self.names.setdefault(local, set()).add(qualname)

    def holds_site(self, tree: ast.Module) -> bool:
        assignments: list[tuple[dict[str, set[str]], str, ast.expr]] = []
        callees: list[ast.expr] = []
        bases: list[ast.expr] = []
        followed = (ast.Name, ast.Attribute, ast.Call, ast.IfExp)
        for node in walk(tree):
            kind = type(node)
            if kind is ast.Call:
                callees.append(cast(ast.Call, node).func)
            elif kind is ast.Assign or kind is ast.AnnAssign or kind is ast.NamedExpr:
                assignment = cast("ast.Assign | ast.AnnAssign | ast.NamedExpr", node)
                value = assignment.value
                if value is None or not isinstance(value, followed):
                    continue
                targets = (assignment.targets if isinstance(assignment, ast.Assign)
                           else [assignment.target])
                for target in targets:
                    if isinstance(target, ast.Name):
                        assignments.append((self.names, target.id, value))
                    elif isinstance(target, ast.Attribute):
                        assignments.append((self.attributes, target.attr, value))
            elif kind is ast.ClassDef:
                bases.extend(cast(ast.ClassDef, node).bases)
            elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                function = cast("ast.FunctionDef | ast.AsyncFunctionDef", node)
                arguments = function.args
                positional = [*arguments.posonlyargs, *arguments.args]
                defaults = list(zip(positional[len(positional) - len(arguments.defaults):],
                                    arguments.defaults))
                defaults += [(arg, default) for arg, default
                             in zip(arguments.kwonlyargs, arguments.kw_defaults) if default]
                for arg, default in defaults:
                    if isinstance(default, followed):
                        assignments.append((self.names, arg.arg, default))
                for returned in function_returns(function):
                    if isinstance(returned, followed):
                        assignments.append((self.returns, function.name, returned))
        changed = True
        while changed:
            changed = False
            for table, key, value in assignments:
                found = self.qualnames(value)
                if found and not found <= table.get(key, set()):
                    table.setdefault(key, set()).update(found)
                    changed = True
        return (any(self.is_site(self.qualnames(callee)) for callee in callees)
                or any(self.is_site(self.qualnames(base)) for base in bases))

    def is_site(self, names: set[str]) -> bool:
        return WILDCARD in names or bool(names & self.complete)

    def qualnames(self, expr: ast.expr) -> set[str]:
        if isinstance(expr, ast.Name):
            return self.names.get(expr.id, set())
        if isinstance(expr, ast.Attribute):
            heads = self.qualnames(expr.value)
            found = {f"{head}.{expr.attr}" for head in heads if head != WILDCARD}
            found = {name for name in found if name in self.by_prefix}
            if WILDCARD in heads:
                found.add(WILDCARD)
            return found | self.attributes.get(expr.attr, set())
        if isinstance(expr, ast.Call):
            callee = self.qualnames(expr.func)
            found = {f"{name}.{apis.INSTANCE}" for name in callee if name != WILDCARD}
            found = {name for name in found if name in self.by_prefix}
            if WILDCARD in callee:
                found.add(WILDCARD)  # a helper in another module may return the API
            if isinstance(expr.func, ast.Name):
                found |= self.returns.get(expr.func.id, set())
            elif isinstance(expr.func, ast.Attribute):
                found |= self.returns.get(expr.func.attr, set())
            if expr.args and not isinstance(expr.args[0], ast.Starred):
                found |= self.qualnames(expr.args[0])
            return found
        if isinstance(expr, ast.IfExp):
            return self.qualnames(expr.body) | self.qualnames(expr.orelse)
        return set()


_BUILTINS = frozenset(dir(builtins))


def unbound_names(tree: ast.Module) -> set[str]:
    """Names the module reads but binds nowhere (scope-blind) and that are not builtins:
    those a star import may provide."""
    loaded: set[str] = set()
    bound: set[str] = set()
    for node in walk_nodes(tree):
        kind = type(node)
        if kind is ast.Name:
            name = cast(ast.Name, node)
            (loaded if type(name.ctx) is ast.Load else bound).add(name.id)
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            bound.add(cast("ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef", node).name)
        elif kind is ast.arg:
            bound.add(cast(ast.arg, node).arg)
        elif kind is ast.alias:
            alias = cast(ast.alias, node)
            bound.add(alias.asname or alias.name.split(".")[0])
        elif kind is ast.ExceptHandler and cast(ast.ExceptHandler, node).name:
            bound.add(cast(str, cast(ast.ExceptHandler, node).name))
    return loaded - bound - _BUILTINS


def function_returns(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.expr]:
    """The values of the function's `return` statements (nested functions' too: the closure
    is scope-blind)."""
    for node in iter_statements(function):
        if type(node) is ast.Return and cast(ast.Return, node).value is not None:
            yield cast(ast.expr, cast(ast.Return, node).value)


_LEAVES = (ast.Name, ast.Constant, ast.alias, ast.arg)


def walk(tree: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `tree` (as `walk_nodes`, in another order), names, constants, aliases and
    arguments left out: they never hold a call, an assignment or a class."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for name in node_fields(type(node)):
            value = getattr(node, name, None)
            if isinstance(value, list):
                stack.extend(item for item in value
                             if isinstance(item, ast.AST) and not isinstance(item, _LEAVES))
            elif isinstance(value, ast.AST) and not isinstance(value, _LEAVES):
                stack.append(value)


_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def iter_statements(tree: ast.AST) -> Iterator[ast.AST]:
    """Every statement at any depth, in and out of functions and classes (expressions are
    not walked: no statement can stand inside one)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        for name in _BODIES:
            value = getattr(node, name, None)
            if value and isinstance(value, list):
                stack.extend(value)


_BETWEEN = frozenset(" \t\r\n\\\f")
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def applied_names(text: str) -> set[str]:
    """The names written right before `.apply` (`Cls.apply`, `module.Cls.apply`), with spaces,
    newlines and line continuations allowed around the dot (a comment there hides it)."""
    found: set[str] = set()
    method = apis.APPLY_METHOD
    position = text.find(method)
    while position >= 0:
        end = position + len(method)
        if (end == len(text) or text[end] not in _NAME_CHARS) and position \
                and text[position - 1] not in _NAME_CHARS:
            index = skip_back(text, position - 1)
            if index >= 0 and text[index] == ".":
                last = skip_back(text, index - 1)
                first = last
                while first >= 0 and text[first] in _NAME_CHARS:
                    first -= 1
                if first < last:
                    found.add(text[first + 1:last + 1])
        position = text.find(method, end)
    return found


def skip_back(text: str, index: int) -> int:
    while index >= 0 and text[index] in _BETWEEN:
        index -= 1
    return index

_DEF_BACKWARD = re.compile(r"(?<!\w)def\s+backward\s*\(")


def may_hand_roll(text: str) -> bool:
    """The words a hand-written checkpoint class cannot do without."""
    return (has_word(text, apis.AUTOGRAD_FUNCTION_WORD)
            and any(has_word(text, word) for word in apis.GRAD_ON_WORDS)
            and _DEF_BACKWARD.search(text) is not None)


def reruns_in_backward(node: ast.ClassDef) -> bool:
    """A class with bases, a `forward` and a `backward` that enters `enable_grad()` or
    `set_grad_enabled(...)` in a `with` (any spelling: the analysis checks the names)."""
    methods = {statement.name: statement for statement in node.body
               if isinstance(statement, ast.FunctionDef)}
    backward = methods.get("backward")
    if not node.bases or "forward" not in methods or backward is None:
        return False
    return any(isinstance(inner, ast.With) and any(
        isinstance(item.context_expr, ast.Call)
        and called_name(item.context_expr.func) in apis.GRAD_ON_WORDS
        for item in inner.items) for inner in walk_nodes(backward))


def called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def import_bindings(node: ast.Import | ast.ImportFrom, module_name: str,
                    is_package: bool) -> Iterator[tuple[str, str]]:
    """(local name, qualified name) for each name the import binds (as scopes.py binds)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                yield alias.asname, alias.name
            else:
                head = alias.name.split(".")[0]
                yield head, head
        return
    base = node.module
    if node.level:
        base = resolve_relative(module_name, is_package, node.level, base)
    if not base:
        return
    for alias in node.names:
        if alias.name == "*":
            continue
        yield alias.asname or alias.name, f"{base}.{alias.name}"


_WORD = re.compile(r"\w")
_SPACE = " \t\f\r\n\\"


# `from` must not follow a word character or a dot: checked in `_from_imports`, not by a
# look-behind, so the regex engine can skip ahead to each literal `from` (much faster).
_FROM_IMPORT = re.compile(r"from[ \t\\\r\n]+[\w. \t\\\r\n]*?(?<!\w)import(?!\w)")
_IMPORTED = re.compile(r"#[^\r\n]*|\w+|[(),\\]|\r?\n|[ \t\f]+|.")


def _from_imports(text: str) -> Iterator[re.Match[str]]:
    """The matches of `_FROM_IMPORT` whose `from` does not follow a word character or a dot,
    scanned as a look-behind would (a rejected start is retried one character on)."""
    position = 0
    while (match := _FROM_IMPORT.search(text, position)) is not None:
        start = match.start()
        before = text[start - 1] if start else " "
        if before == "." or before.isalnum() or before == "_":
            position = start + 1
            continue
        yield match
        position = match.end()


def from_imported(text: str) -> Iterator[str]:
    """The names `from M import a, b as c, (d, ...)` statements may import (`a`, `b`, `d`):
    a superset, read from the text."""
    for match in _from_imports(text):
        depth = 0
        after_as = False
        for token in _IMPORTED.finditer(text, match.end()):
            word = token.group()
            if word == "(":
                depth += 1
            elif word == ")" or word == ";" or (word.endswith("\n") and depth == 0
                                                and not text.endswith("\\", 0, token.start())):
                break
            elif word == "as":
                after_as = True
            elif word == ",":
                after_as = False
            elif word[0].isalpha() or word[0] == "_":
                if not after_as:
                    yield word
            elif word in ("\\",) or word.isspace() or word.startswith("#"):
                continue
            elif not word.isspace():
                break


def has_relative_import(text: str) -> bool:
    """May the file hold `from .` (a relative import)? `from`, then spaces, line
    continuations or line breaks, then a dot (the word before `from` is not checked)."""
    position = text.find("from")
    while position >= 0:
        after = position + 4
        while after < len(text) and text[after] in _SPACE:
            after += 1
        if text.startswith(".", after):
            return True
        position = text.find("from", after)
    return False


def whole_words(text: str, name: str) -> Iterator[int]:
    """Positions where `name` stands as a whole word."""
    size = len(name)
    position = text.find(name)
    while position >= 0:
        after = position + size
        if not (after < len(text) and _WORD.match(text, after)) and not (
                position > 0 and _WORD.match(text, position - 1)):
            yield position
        position = text.find(name, position + 1)


def has_word(text: str, name: str) -> bool:
    return next(whole_words(text, name), None) is not None


def has_attribute(text: str, name: str) -> bool:
    """True when `.name` (an attribute access, possibly spread over lines) may appear.

    Between the dot and the name Python allows spaces, line continuations and, inside
    brackets, newlines and comments; a comment on a line crossed is taken as a yes.
    """
    return any(_after_dot(text, position) for position in whole_words(text, name))


def has_reference(text: str, name: str) -> bool:
    """`name` after a dot (module path, attribute), or in the names an import statement binds."""
    return any(_after_dot(text, position) or _in_import_list(text, position)
               for position in whole_words(text, name))


def _after_dot(text: str, position: int) -> bool:
    """Is the token before `position` a dot? Spaces, continuations and line breaks are
    skipped, and so are comments on the lines crossed. A line's comment starts at its first
    `#` when no quote comes before it; when one does, the `#` may be in a string and what
    precedes the comment cannot be told cheaply: that counts as a yes."""
    before = position - 1
    while True:
        crossed_line = False
        while before >= 0 and text[before] in _SPACE:
            crossed_line = crossed_line or text[before] in "\r\n"
            before -= 1
        if before >= 0 and text[before] == ".":
            return True
        if not crossed_line:
            return False
        line_start, comment = _first_hash(text, before)
        if comment < 0:
            return False
        if "'" in text[line_start:comment] or '"' in text[line_start:comment]:
            return True
        before = comment - 1


def _first_hash(text: str, index: int) -> tuple[int, int]:
    """Where the line holding `index` starts, and its first `#` up to `index` (-1: none)."""
    line_start = max(text.rfind("\n", 0, index + 1), text.rfind("\r", 0, index + 1)) + 1
    return line_start, text.find("#", line_start, index + 1)


_IMPORT_LIST = frozenset(" \t\f\\,()")


def _in_import_list(text: str, position: int) -> bool:
    """Could `position` be in the names of `import a, b` / `from m import (a as b, c)`?

    Between `import` and a name it binds stand only names, `as`, commas, parentheses,
    spaces, continuations, line breaks and comments. Walk back over those: the name may be
    bound by an import only if the word `import` is among them. A line crossed on the way is
    read up to its first `#`: if the name is in an import list, so is that line, and such a
    line holds no string, so its first `#` starts its comment.
    """
    start = position
    index = position - 1
    while index >= 0:
        char = text[index]
        if char in _IMPORT_LIST or char.isalnum() or char == "_":
            index -= 1
        elif char in "\r\n":
            index -= 1
            comment = _first_hash(text, index)[1]
            if comment >= 0:
                index = comment - 1
        else:
            break
    region = text[index + 1:start]
    return "import" in region and re.search(r"(?<!\w)import(?!\w)", region) is not None
