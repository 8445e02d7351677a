"""The segment of a checkpoint site: the target's body plus every project callee it reaches.

A segment is what runs twice (forward, then replay in backward). It is built once per site:
starting from each resolved target, every call in a reached function is resolved with the
`Resolver`; callees that are project functions (module functions, `self.method(...)`,
submodules `self.attn(x)` -> `Attention.forward`, helpers imported from other project files)
join the segment with their call chain, breadth first, up to `max-depth` calls below the
target. Each function is reached once (the shortest chain wins), so recursion ends.

Library code is not followed: a callee named through an import of a framework package
(`torch`, `numpy`, the standard library) is recognised by its qualified name and never parsed,
even when that package is itself being linted (then `F.dropout` is still `torch.nn.functional
.dropout`, not the body of that function).

`FunctionFacts` walks one reached function once and records what the rules ask about: calls,
reads, writes and in-place mutations, and branch conditions, each with its scope.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

import libcst as cst

from ckptlint.analysis.mutators import is_mutator
from ckptlint.analysis.resolve import ClassInfo, FunctionValue, Resolver
from ckptlint.analysis.scopes import ASSIGNED, BindingKind, Scope, ScopeKind
from ckptlint.enums import TextEnum
from ckptlint.syntax.walk import Visitor

if TYPE_CHECKING:  # sites.py builds on this module; only the types come from there
    from ckptlint.analysis.apis import Mode
    from ckptlint.analysis.sites import Site

# Top-level packages whose code is library code: never followed, never parsed for a segment.
FRAMEWORK_PACKAGES = frozenset({
    "torch", "numpy", "jax", "triton", "einops", "scipy", "math", "cmath", "os", "sys", "time",
    "datetime", "random", "logging", "warnings", "functools", "itertools", "operator",
    "typing", "typing_extensions", "collections", "contextlib", "dataclasses", "abc", "re",
    "json", "inspect", "threading", "multiprocessing", "copy", "enum", "builtins", "numbers",
    "weakref", "types", "traceback", "socket", "uuid", "pickle", "io", "pathlib", "string",
})

_NO_CODE = cst.Module([])  # for `code_for_node`, which reads only its formatting defaults


def compact(node: cst.CSTNode) -> str:
    """The node's code without whitespace."""
    chain = chain_code(node)
    return chain if chain is not None else "".join(_NO_CODE.code_for_node(node).split())


def chain_code(node: cst.CSTNode) -> str | None:
    """`compact` of a name or attribute chain without parentheses (`a.b.c`), told without
    generating its code; None for anything else."""
    if isinstance(node, cst.Name):
        return None if node.lpar or node.rpar else node.value
    if isinstance(node, cst.Attribute) and not (node.lpar or node.rpar):
        head = chain_code(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


class _MemoFinder(Visitor):
    def __init__(self) -> None:
        self.found: set[str] = set()

    def visit_Comparison(self, node: cst.Comparison) -> None:
        for target in node.comparisons:
            if isinstance(target.operator, (cst.In, cst.NotIn)):
                self.found.add(compact(target.comparator))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("get", "setdefault"):
            self.found.add(compact(func.value))


def memo_containers(function_node: cst.CSTNode) -> frozenset[str]:
    """Containers a function looks keys up in (`if key not in CACHE`, `CACHE.get(key)`).

    Item writes to them are memoization: the replay finds the entry the forward stored and
    computes the same value, so they are neither a change of state nor a side effect.
    """
    finder = _MemoFinder()
    finder.walk(function_node)
    return frozenset(finder.found)


def import_qualnames(expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> set[str]:
    """Dotted names `expr` denotes through imports and simple aliases of its own file.

    `F.dropout` -> {"torch.nn.functional.dropout"}; `print` -> {"builtins.print"}. Nothing
    is parsed: this reads only the file's own bindings.
    """
    if depth > 8:
        return set()
    if isinstance(expr, cst.Name):
        bindings = scope.lookup(expr.value)
        if not bindings:
            from ckptlint.analysis.resolve import BUILTIN_NAMES

            return {f"builtins.{expr.value}"} if expr.value in BUILTIN_NAMES else set()
        names: set[str] = set()
        for binding in bindings:
            if binding.kind == BindingKind.IMPORT and binding.qualname:
                names.add(binding.qualname)
            elif binding.kind in ASSIGNED and isinstance(binding.value, (cst.Name, cst.Attribute)):
                names |= import_qualnames(binding.value, binding.scope, depth + 1)
        return names
    if isinstance(expr, cst.Attribute):
        return {f"{head}.{expr.attr.value}"
                for head in import_qualnames(expr.value, scope, depth + 1)}
    return set()


def assigned_constructors(resolver: Resolver, cls: ClassInfo,
                          attr: str) -> list[set[str]] | None:
    """What each `self.<attr> = X(...)` in `cls` calls, as the qualified names of `X`; None
    when `self.<attr>` is never assigned or some assignment is not a call."""
    assigned = resolver.attribute_assignments(cls).get(attr) or []
    calls = [(value, scope) for value, scope in assigned if isinstance(value, cst.Call)]
    if not assigned or len(calls) != len(assigned):
        return None
    return [import_qualnames(call.func, scope) for call, scope in calls]


def is_framework(qualname: str) -> bool:
    return qualname.split(".", 1)[0] in FRAMEWORK_PACKAGES


def top_package(module) -> str:
    """The outermost package holding a module's file (by `__init__.py` files, not by roots)."""
    cached = getattr(module, "_ckptlint_top_package", None)
    if cached is not None:
        return cached
    from ckptlint.analysis.project import package_root

    try:
        relative = module.path.resolve().relative_to(package_root(module.path.resolve()))
        top = relative.parts[0].removesuffix(".py") if relative.parts else ""
    except ValueError:
        top = module.name.split(".", 1)[0]
    try:
        module._ckptlint_top_package = top
    except AttributeError:
        pass
    return top


def chain_name(function: FunctionValue) -> str:
    """`Class.method` for methods, `module.func` for functions (as chains show them)."""
    qualname = function.qualname
    scope = function.scope.parent
    while scope is not None and scope.kind not in (ScopeKind.CLASS, ScopeKind.MODULE):
        scope = scope.parent
    if scope is not None and scope.kind == ScopeKind.CLASS:
        return qualname
    short = function.module.name.rsplit(".", 1)[-1] if function.module.name else ""
    return f"{short}.{qualname}" if short else qualname


@dataclass(eq=False)
class Reached:
    """A function of the segment with the chain of calls from the target down to it."""

    function: FunctionValue
    chain: tuple[str, ...]
    depth: int
    # `self` is an object created inside the segment (`Interpreter(gm).run`): its attributes
    # are the segment's own scratch state, not outer state.
    fresh_self: bool = False
    _facts: FunctionFacts | None = None

    @property
    def module(self):
        return self.function.module

    @property
    def node(self):
        return self.function.node

    @property
    def scope(self) -> Scope:
        return self.function.scope


@dataclass(eq=False)
class Segment:
    site: Site
    functions: list[Reached] = field(default_factory=list)

    @property
    def mode(self) -> Mode:
        return self.site.mode

    @functools.cached_property
    def places(self) -> frozenset[tuple[str, Path]]:
        """(qualified name, resolved module path) of each of its functions (asked once the
        segment is built)."""
        return frozenset((reached.function.qualname, reached.module.path)
                         for reached in self.functions)


class SegmentBuilder:
    """Builds segments; each function's callees are resolved once per run.

    A built segment records the files it rests on (its functions', and those looked at to
    resolve their calls, also when kept from an earlier file) in the project's dependency
    recorder.
    """

    def __init__(self, resolver: Resolver, max_depth: int) -> None:
        self.resolver = resolver
        self.max_depth = max_depth
        self.dependencies = resolver.project.dependencies
        # Kept answers (`DependencyRecorder.cached`): (callees, files they rest on).
        self._callees: dict[tuple[int, ...], tuple[list[tuple[FunctionValue, str]], tuple]] = {}
        self._facts: dict[int, FunctionFacts] = {}
        # (call, function, scope) -> the call's callees: asked by `find_callees`, then by the
        # rules that follow arguments into them (`passed_parameters`).
        self._resolved: dict[tuple[int, ...], tuple[list[FunctionValue], tuple]] = {}

    def facts(self, function: FunctionValue) -> FunctionFacts:
        key = id(function.node)
        if key not in self._facts:
            self._facts[key] = FunctionFacts.collect(function)
        return self._facts[key]

    def build(self, site: Site) -> Segment:
        segment = Segment(site)
        seen: set[tuple[int, ...]] = set()
        queue: list[Reached] = []
        fresh = site_builds_instance(site, self.resolver)
        for target in site.targets:
            if target.key not in seen:
                seen.add(target.key)
                queue.append(Reached(target, (chain_name(target),), 0, fresh_self=fresh))
        while queue:
            reached = queue.pop(0)
            reached._facts = self.facts(reached.function)
            segment.functions.append(reached)
            if reached.depth >= self.max_depth:
                continue
            for callee, how in self.callees(reached.function):
                if callee.key in seen:
                    continue
                seen.add(callee.key)
                callee_fresh = how == "fresh" or (how == "self" and reached.fresh_self)
                queue.append(Reached(callee, (*reached.chain, chain_name(callee)),
                                     reached.depth + 1, fresh_self=callee_fresh))
        self.dependencies.record_all(reached.module.path for reached in segment.functions)
        return segment

    def callees(self, function: FunctionValue) -> list[tuple[FunctionValue, str]]:
        """Project functions the body calls, each with how: "fresh" (a method of an object
        built right there), "self" (`self.method(...)`) or "other"."""
        return self.dependencies.cached(self._callees, function.key,
                                        lambda: self.find_callees(function))

    def find_callees(self, function: FunctionValue) -> list[tuple[FunctionValue, str]]:
        found: dict[tuple[int, ...], tuple[FunctionValue, str]] = {}
        for call in self.facts(function).calls:
            func = call.node.func
            how = "other"
            if isinstance(func, cst.Attribute):
                if isinstance(func.value, cst.Call):
                    how = "fresh"
                elif self.resolver.self_class(func.value, function.module, call.scope) is not None:
                    how = "self"
            for callee in self.resolve_call(call.node, function, call.scope):
                found.setdefault(callee.key, (callee, how))
        return list(found.values())

    def resolve_call(self, call: cst.Call, function: FunctionValue,
                     scope: Scope) -> list[FunctionValue]:
        """The project functions `call` (in `function`'s body, in `scope`) may run."""
        return self.dependencies.cached(self._resolved, (id(call), id(scope), *function.key),
                                        lambda: self.find_called(call, function, scope))

    def find_called(self, call: cst.Call, function: FunctionValue,
                    scope: Scope) -> list[FunctionValue]:
        func = call.func
        names = import_qualnames(func, scope)
        if names and all(is_framework(name) for name in names):
            return []
        if isinstance(func, cst.Call):  # `super().forward(x)`, factories
            return []
        if isinstance(func, cst.Attribute) and self.external_attribute(func, function, scope):
            return []
        # In framework code only the function's own module is followed: resolving through
        # its imports (parsing them) could only find other framework modules.
        in_framework = is_framework(top_package(function.module))
        try:
            with (self.resolver.confined_to(function.module) if in_framework else nullcontext(),
                  self.resolver.within(function.context)):
                values = self.resolver.values(func, function.module, scope)
                if isinstance(func, cst.Attribute):
                    values = values + self.conditional_attribute(func, function, scope)
                functions, _ = self.resolver.functions(values)
        except RecursionError:
            return []
        if function.context:  # closures defined next to this one see the same arguments
            functions = [self.resolver.closed_over(f, function.context) for f in functions]
        return [f for f in functions if isinstance(f.node, (cst.FunctionDef, cst.Lambda))
                and (f.module is function.module or not is_framework(top_package(f.module)))]

    def conditional_attribute(self, func: cst.Attribute, function: FunctionValue,
                              scope: Scope) -> list:
        """`self.drop_path = DropPath(p) if p > 0 else nn.Identity()`: both branches."""
        cls = self.owner(function, func.value, scope)
        if cls is None:
            return []
        assigned = self.resolver.attribute_assignments(cls).get(func.attr.value)
        if not assigned:
            for base in self.resolver.base_classes(cls):
                assigned = self.resolver.attribute_assignments(base).get(func.attr.value)
                if assigned:
                    cls = base
                    break
        values: list = []
        for value, value_scope in assigned or []:
            if not isinstance(value, cst.IfExp):
                continue
            pending: list[cst.BaseExpression] = [value]
            while pending:
                expr = pending.pop()
                if isinstance(expr, cst.IfExp):
                    pending += [expr.body, expr.orelse]
                    continue
                names = (import_qualnames(expr.func, value_scope) if isinstance(expr, cst.Call)
                         else set())
                if names and all(is_framework(name) for name in names):
                    continue
                values += self.resolver.values(expr, cls.module, value_scope)
        return values

    def external_attribute(self, func: cst.Attribute, function: FunctionValue,
                           scope: Scope) -> bool:
        """`self.proj(x)` where every assignment of `self.proj` builds a framework object."""
        cls = self.owner(function, func.value, scope)
        if cls is None:
            return False
        attr = func.attr.value
        if self.resolver.find_method(cls, attr) is not None:
            return False
        built = assigned_constructors(self.resolver, cls, attr)
        return built is not None and all(
            names and all(is_framework(name) for name in names) for names in built)

    def owner(self, function: FunctionValue, expr: cst.BaseExpression,
              scope: Scope) -> ClassInfo | None:
        """The class of `self` when `expr` is the method's `self` (the reached owner wins)."""
        cls = self.resolver.self_class(expr, function.module, scope)
        if cls is None:
            return None
        if function.owner is not None:
            return function.owner
        return cls


def site_builds_instance(site: Site, resolver: Resolver) -> bool:
    """`checkpoint(Interpreter(gm).run, ...)`, `checkpoint(Block(dim), x)`: the target's
    `self` is built at the site, for this call only."""
    from ckptlint.analysis.sites import target_expression

    try:
        argument = target_expression(site)
    except Exception:  # sites without a target expression
        return False
    if argument is None:
        return False
    expr = argument.value
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Call):
        return True
    if isinstance(expr, cst.Call):
        from ckptlint.analysis.resolve import ClassValue

        try:
            values = resolver.values(expr.func, site.module, argument.scope)
        except RecursionError:
            return False
        return bool(values) and all(isinstance(value, ClassValue) for value in values)
    return False


# -- facts about one function ------------------------------------------------------------------
N = TypeVar("N", bound=cst.CSTNode)


# Where a node is among the statements of its function: for each block from the function body
# down, (the block's id, the index of the statement holding the node in it).
StatementPath = tuple[tuple[int, int], ...]


def dominates(earlier: StatementPath, later: StatementPath) -> bool:
    """Whether the statement at `earlier` always runs before the code at `later`: it stands
    in a block that holds `later` too, above the statement holding `later` (not inside an
    `if` or a loop of its own that `later` is outside of)."""
    depth = len(earlier)
    if not depth or len(later) < depth or earlier[:-1] != later[:depth - 1]:
        return False
    (block, index), (later_block, later_index) = earlier[-1], later[depth - 1]
    return block == later_block and index < later_index


@dataclass(eq=False, slots=True)
class Occurrence(Generic[N]):
    node: N
    scope: Scope
    in_condition: bool = False
    grad_guarded: bool = False  # inside `if torch.is_grad_enabled():`
    once_guarded: bool = False  # inside `if key not in SEEN: SEEN.add(key); ...` (run once)
    attr: str | None = None  # for a name read as `name.attr`: the attribute
    path: StatementPath = ()


class WriteKind(TextEnum):
    """How a segment changes something (CKP401's `write`)."""

    ASSIGN = "assign"  # `target = ...`
    AUGASSIGN = "augassign"  # `target += ...`
    ITEM = "item"  # `target[k] = ...`
    DEL = "del"  # `del target`, `del target[k]`
    METHOD = "method"  # `target.append(...)`, `target.add_(...)`


@dataclass(eq=False, slots=True)
class Write:
    """A change of something: `target = ...`, `target += ...`, `target[k] = ...`, `target.m_()`."""

    target: cst.BaseExpression  # the thing changed (Name/Attribute; for items, the container)
    node: cst.CSTNode  # the statement or call that changes it
    how: WriteKind
    scope: Scope
    method: str = ""
    grad_guarded: bool = False
    once_guarded: bool = False
    path: StatementPath = ()

    @property
    def is_item(self) -> bool:
        """`del target[k]` (an item deleted: the container changes), not `del target`."""
        node = self.node
        return (self.how == WriteKind.ITEM or isinstance(node, cst.Del)
                and isinstance(node.target, cst.Subscript))

    def reads_itself(self) -> bool:
        """`x = x + 1`, `self.cache = torch.cat([self.cache, k])`: the value assigned is
        built from the target's own value (an accumulation, not a plain overwrite)."""
        node = self.node
        value = node.value if isinstance(node, (cst.Assign, cst.AnnAssign)) else None
        return value is not None and reads_target(value, self.target)

    @property
    def accumulates(self) -> bool:
        """It adds to what was there (augmented assignment, an item, an in-place method, a
        value built from the old one), rather than replacing it."""
        if self.how in (WriteKind.AUGASSIGN, WriteKind.ITEM, WriteKind.METHOD):
            return True
        if self.how == WriteKind.DEL:
            return self.is_item
        return self.reads_itself()


def reads_target(value: cst.BaseExpression, target: cst.BaseExpression) -> bool:
    """Whether `value` reads `target` itself (the same name or attribute chain)."""
    text = compact(target)
    # An expression's last name is in its code: those without it in `text` are not compacted.
    return any((expr.value if isinstance(expr, cst.Name) else expr.attr.value) in text
               and compact(expr) == text for expr in expressions_in(value))


class _ExpressionFinder(Visitor):
    def __init__(self) -> None:
        self.found: list[cst.Name | cst.Attribute] = []

    def visit_Name(self, name: cst.Name) -> None:
        self.found.append(name)

    def visit_Attribute(self, attribute: cst.Attribute) -> None:
        self.found.append(attribute)


def expressions_in(node: cst.CSTNode) -> Iterator[cst.Name | cst.Attribute]:
    """The names and attribute chains in an expression."""
    finder = _ExpressionFinder()
    finder.walk(node)
    return iter(finder.found)


@dataclass(eq=False, slots=True)
class Condition:
    test: cst.BaseExpression
    owner: cst.CSTNode  # If / While / IfExp / Assert / BooleanOperation / CompIf
    scope: Scope


@dataclass(eq=False)
class FunctionFacts:
    calls: list[Occurrence[cst.Call]] = field(default_factory=list)
    loads: list[Occurrence[cst.Name | cst.Attribute]] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    conditions: list[Condition] = field(default_factory=list)
    grad_guards: list[tuple[cst.If, Scope]] = field(default_factory=list)

    @classmethod
    def collect(cls, function: FunctionValue) -> FunctionFacts:
        collector = FactCollector(function)
        collector.run()
        return collector.facts


def is_grad_enabled_test(expr: cst.BaseExpression, scope: Scope) -> bool:
    """`torch.is_grad_enabled()` (possibly `and`-ed with other tests)."""
    if isinstance(expr, cst.BooleanOperation) and isinstance(expr.operator, cst.And):
        return is_grad_enabled_test(expr.left, scope) or is_grad_enabled_test(expr.right, scope)
    if isinstance(expr, cst.Call) and not expr.args:
        return any(name.endswith("is_grad_enabled") and name.startswith("torch")
                   for name in import_qualnames(expr.func, scope))
    return False


def is_run_once_guard(node: cst.If) -> bool:
    """`if key not in SEEN:` whose body records the key in SEEN: the replay skips the body."""
    test = node.test
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.NotIn)):
        return False
    container = compact(test.comparisons[0].comparator)

    records = KeyRecords(container)
    records.walk(node.body)
    return records.found


class KeyRecords(Visitor):
    """Whether a block records a key in `container` (`.add(`, `.append(`, `[k] = `...)."""

    def __init__(self, container: str) -> None:
        self.container = container
        self.found = False

    def visit_Call(self, call: cst.Call) -> None:
        func = call.func
        if (isinstance(func, cst.Attribute) and func.attr.value in ("add", "append",
                                                                   "setdefault", "update")
                and compact(func.value) == self.container):
            self.found = True

    def visit_AssignTarget(self, target: cst.AssignTarget) -> None:
        if isinstance(target.target, cst.Subscript) \
                and compact(target.target.value) == self.container:
            self.found = True


class FactCollector(Visitor):
    """One pass over a function body (nested defs and classes excluded, lambdas included)."""

    def __init__(self, function: FunctionValue) -> None:
        self.function = function
        self.scopes = function.module.scopes.scope_of
        self.stack: list[Scope] = [function.scope]
        self.facts = FunctionFacts()
        self.skip_load: set[int] = set()  # stores, mutated receivers, call functions
        self.condition_depth = 0
        self.guard_depth = 0
        self._guard_bodies: set[int] = set()
        self.once_depth = 0
        self._once_bodies: set[int] = set()
        self._attribute_of: dict[int, str] = {}
        # The blocks being walked, as [block id, index of the current statement].
        self._blocks: list[list[int]] = []
        self._statement_index: dict[int, int] = {}

    @property
    def path(self) -> StatementPath:
        return tuple((block, index) for block, index in self._blocks)

    def run(self) -> None:
        node = self.function.node
        self.walk(node.body)

    @property
    def scope(self) -> Scope:
        return self.stack[-1]

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return False
        scope = self.scopes.get(id(node))
        if scope is not None:
            self.stack.append(scope)
        if id(node) in self._guard_bodies:
            self.guard_depth += 1
        if id(node) in self._once_bodies:
            self.once_depth += 1
        index = self._statement_index.get(id(node))
        if index is not None and self._blocks:
            self._blocks[-1][1] = index
        if isinstance(node, (cst.IndentedBlock, cst.SimpleStatementSuite)):
            self._blocks.append([id(node), -1])
            for position, statement in enumerate(node.body):
                self._statement_index[id(statement)] = position
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        if isinstance(original_node, (cst.FunctionDef, cst.ClassDef)):
            return  # skipped in on_visit: nothing was pushed
        if id(original_node) in self._guard_bodies:
            self.guard_depth -= 1
        if id(original_node) in self._once_bodies:
            self.once_depth -= 1
        if isinstance(original_node, (cst.IndentedBlock, cst.SimpleStatementSuite)):
            self._blocks.pop()
        if self.scopes.get(id(original_node)) is not None:
            self.stack.pop()

    # -- conditions ----------------------------------------------------------------------
    def enter_condition(self, test: cst.BaseExpression, owner: cst.CSTNode) -> None:
        if not self.condition_depth:
            self.facts.conditions.append(Condition(test, owner, self.scope))
        self.condition_depth += 1

    def leave_condition(self) -> None:
        self.condition_depth -= 1

    def visit_If(self, node: cst.If) -> None:
        if is_grad_enabled_test(node.test, self.scope):
            self.facts.grad_guards.append((node, self.scope))
            self._guard_bodies.add(id(node.body))
        if is_run_once_guard(node):
            self._once_bodies.add(id(node.body))

    def visit_If_test(self, node: cst.If) -> None:
        self.enter_condition(node.test, node)

    def leave_If_test(self, node: cst.If) -> None:
        self.leave_condition()

    def visit_While_test(self, node: cst.While) -> None:
        self.enter_condition(node.test, node)

    def leave_While_test(self, node: cst.While) -> None:
        self.leave_condition()

    def visit_IfExp_test(self, node: cst.IfExp) -> None:
        self.enter_condition(node.test, node)

    def leave_IfExp_test(self, node: cst.IfExp) -> None:
        self.leave_condition()

    def visit_Assert_test(self, node: cst.Assert) -> None:
        self.enter_condition(node.test, node)

    def leave_Assert_test(self, node: cst.Assert) -> None:
        self.leave_condition()

    def visit_CompIf_test(self, node: cst.CompIf) -> None:
        self.enter_condition(node.test, node)

    def leave_CompIf_test(self, node: cst.CompIf) -> None:
        self.leave_condition()

    def visit_BooleanOperation_left(self, node: cst.BooleanOperation) -> None:
        self.enter_condition(node.left, node)

    def leave_BooleanOperation_left(self, node: cst.BooleanOperation) -> None:
        self.leave_condition()

    # -- writes ------------------------------------------------------------------------
    def record_target(self, target: cst.BaseExpression, node: cst.CSTNode, how: WriteKind) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.record_target(element.value, node, how)
            return
        if isinstance(target, cst.StarredElement):
            self.record_target(target.value, node, how)
            return
        guarded = self.guard_depth > 0
        if isinstance(target, (cst.Name, cst.Attribute)):
            self.skip_load.add(id(target))
            self.facts.writes.append(Write(target, node, how, self.scope, grad_guarded=guarded,
                                           once_guarded=self.once_depth > 0, path=self.path))
        elif isinstance(target, cst.Subscript):
            container = target.value
            self.skip_load.add(id(container))
            item_how = WriteKind.DEL if how == WriteKind.DEL else WriteKind.ITEM
            self.facts.writes.append(Write(container, node, item_how,
                                           self.scope, grad_guarded=guarded,
                                           once_guarded=self.once_depth > 0, path=self.path))

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self.record_target(target.target, node, WriteKind.ASSIGN)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.record_target(node.target, node, WriteKind.ASSIGN)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.record_target(node.target, node, WriteKind.AUGASSIGN)

    def visit_Del(self, node: cst.Del) -> None:
        self.record_target(node.target, node, WriteKind.DEL)

    def visit_For(self, node: cst.For) -> None:
        self.mark_bound(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self.mark_bound(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.mark_bound(node.asname.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.mark_bound(node.target)

    def mark_bound(self, target: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.mark_bound(element.value)
        elif isinstance(target, cst.Name):
            self.skip_load.add(id(target))
        elif isinstance(target, (cst.Attribute, cst.Subscript)):
            self.record_target(target, target, WriteKind.ASSIGN)

    # -- calls and reads ---------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        occurrence = Occurrence(node, self.scope, self.condition_depth > 0, self.guard_depth > 0,
                                self.once_depth > 0)
        self.facts.calls.append(occurrence)
        func = node.func
        self.skip_load.add(id(func))
        if isinstance(func, cst.Attribute) and is_mutator(func.attr.value):
            receiver = func.value
            if isinstance(receiver, (cst.Name, cst.Attribute)):
                self.skip_load.add(id(receiver))
                self.facts.writes.append(Write(receiver, node, WriteKind.METHOD, self.scope,
                                               method=func.attr.value,
                                               grad_guarded=self.guard_depth > 0,
                                               once_guarded=self.once_depth > 0,
                                               path=self.path))

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self.skip_load:
            self.facts.loads.append(Occurrence(node, self.scope, self.condition_depth > 0,
                                               attr=self._attribute_of.get(id(node)),
                                               path=self.path))

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if id(node) not in self.skip_load:
            self.facts.loads.append(Occurrence(node, self.scope, self.condition_depth > 0,
                                               path=self.path))
        if isinstance(node.value, cst.Name):
            self._attribute_of[id(node.value)] = node.attr.value
        # The attribute name itself is not a read of a variable.
        self.walk(node.value)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        self.walk(node.value)  # keyword names are not reads
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        if node.default is not None:
            self.walk(node.default)
        return False

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        return False

    def visit_Global(self, node: cst.Global) -> bool:
        return False

    def visit_Nonlocal(self, node: cst.Nonlocal) -> bool:
        return False


def iter_segment(segment: Segment) -> Iterator[tuple[Reached, FunctionFacts]]:
    for reached in segment.functions:
        assert reached._facts is not None
        yield reached, reached._facts
