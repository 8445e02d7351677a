"""A light scope and binding model over a libcst module (pyflakes-like, no metadata providers).

libcst's ScopeProvider and QualifiedNameProvider cost several times a parse; this pass records
only what ckptlint asks: which names each scope binds, to what, and the qualified names of
imports. Names are looked up with Python's rules (class scopes are invisible to nested
functions; `global`/`nonlocal` redirect).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from ckptlint.enums import TextEnum
from ckptlint.syntax.modnames import resolve_relative
from ckptlint.syntax.walk import Visitor


class ScopeKind(TextEnum):
    MODULE = "module"
    CLASS = "class"
    FUNCTION = "function"
    LAMBDA = "lambda"
    COMPREHENSION = "comprehension"


class BindingKind(TextEnum):
    """The statement that binds a name."""

    IMPORT = "import"
    DEF = "def"
    CLASS = "class"
    ASSIGN = "assign"  # `=`, and an annotated assignment with a value
    AUGASSIGN = "augassign"
    PARAM = "param"
    FOR = "for"  # a `for` loop or a comprehension's `for`
    WITH = "with"
    EXCEPT = "except"
    WALRUS = "walrus"


# Bindings whose `value` is the expression the name was assigned (`=`, `:=`).
ASSIGNED = (BindingKind.ASSIGN, BindingKind.WALRUS)


@dataclass(eq=False, slots=True)
class Binding:
    """One place where a name is bound."""

    name: str
    kind: BindingKind
    scope: Scope
    node: cst.CSTNode  # the binding statement or definition
    value: cst.BaseExpression | None = None  # assigned value or iterated expression
    qualname: str | None = None  # for imports: the dotted name bound
    # Inside an if/try/loop/with of its scope: it may or may not have run.
    conditional: bool = False
    # A name inside a tuple or list target: the indices leading to it (`for name, layer in
    # pairs` binds `layer` at (1,)); None after a starred name, where indices are unknown.
    position: tuple[int, ...] | None = ()
    # `a, b = value`: the value unpacked (`value` stays None: it is not what `a` holds).
    unpacked: cst.BaseExpression | None = None


@dataclass(eq=False, slots=True)
class Scope:
    kind: ScopeKind
    node: cst.CSTNode
    parent: Scope | None
    name: str = ""
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    global_names: set[str] = field(default_factory=set)
    nonlocal_names: set[str] = field(default_factory=set)
    # `name[key] = value` statements in this scope, for dicts built up before `**name`.
    item_assignments: dict[str, list[tuple[cst.BaseExpression, cst.BaseExpression]]] = field(
        default_factory=dict
    )
    # Names on which `.update()`/`.setdefault()`/`.pop()`/`del name[...]` is called.
    dict_updates: set[str] = field(default_factory=set)
    # What `name.append(x)`, `name.insert(i, x)` (one element: x) and `name.extend(xs)`,
    # `name += xs` (the elements of xs) add to a list, by name: (one element?, expression).
    list_additions: dict[str, list[tuple[bool, cst.BaseExpression]]] = field(
        default_factory=dict
    )

    def bind(self, binding: Binding) -> None:
        target = self
        if binding.name in self.global_names:
            target = self.module_scope()
        elif binding.name in self.nonlocal_names:
            target = self.enclosing_function_binding(binding.name) or self
        binding.scope = target
        target.bindings.setdefault(binding.name, []).append(binding)

    def module_scope(self) -> Scope:
        scope = self
        while scope.parent is not None:
            scope = scope.parent
        return scope

    def enclosing_function_binding(self, name: str) -> Scope | None:
        scope = self.parent
        while scope is not None and scope.kind != ScopeKind.MODULE:
            if scope.kind != ScopeKind.CLASS and name in scope.bindings:
                return scope
            scope = scope.parent
        return None

    def lookup(self, name: str, live: bool = True) -> list[Binding]:
        """Bindings that `name` may refer to from this scope (innermost scope that binds it):
        those live at the end of that scope, or all of them (`live=False`)."""
        found = self.every_binding(name)
        return live_bindings(found) if live else found

    def every_binding(self, name: str) -> list[Binding]:
        """Every binding of `name` in the innermost scope (seen from this one) that binds it,
        in source order."""
        if name in self.global_names:
            return self.module_scope().bindings.get(name, [])
        scope: Scope | None = self
        first = True
        while scope is not None:
            if (first or scope.kind != ScopeKind.CLASS) and name in scope.bindings:
                return scope.bindings[name]
            first = False
            scope = scope.parent
        return []

    def qualname(self) -> str:
        parts = []
        scope: Scope | None = self
        while scope is not None and scope.kind != ScopeKind.MODULE:
            parts.append(scope.name or f"<{scope.kind}>")
            scope = scope.parent
        return ".".join(reversed(parts))


def live_bindings(bindings: list[Binding]) -> list[Binding]:
    """The bindings a use may see: the last unconditional one and any conditional after it.

    `try: from a import f / except ImportError: from b import f` keeps both; a plain
    rebinding (`f = other`) replaces what came before.
    """
    for index in range(len(bindings) - 1, -1, -1):
        if not bindings[index].conditional:
            return bindings[index:]
    return bindings


def dotted_name(node: cst.BaseExpression | cst.CSTNode) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted_name(node.value)
        return f"{head}.{node.attr.value}" if head else None
    return None


def bool_value(expr: cst.BaseExpression) -> bool | None:
    """`True`/`False` written literally, else None."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    return None


def is_staticmethod(function: cst.FunctionDef) -> bool:
    return any(isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod"
               for d in function.decorators)


DICT_MUTATORS = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__"})


@dataclass(frozen=True)
class ListAdder:
    arity: int  # positional arguments of the call
    one_element: bool  # the last argument is one element (else: an iterable of them)


LIST_ADDERS = {"append": ListAdder(1, True), "insert": ListAdder(2, True),
               "extend": ListAdder(1, False)}


class ScopeTracker(Visitor):
    """A visitor that knows the scope of the node it walks (`scope`): each node that has a
    scope of its own (`ScopeBuilder.scope_of`) pushes it while its subtree is walked. Only
    those nodes' hooks run: a lookup on every node costs more than the rest of the walk.
    A subclass sets `scope_of` and the outermost scope in `stack`."""

    scope_of: dict[int, Scope]
    stack: list[Scope]

    @property
    def scope(self) -> Scope:
        return self.stack[-1]

    def enter_scope(self, node: cst.CSTNode) -> None:
        scope = self.scope_of.get(id(node))
        if scope is not None:
            self.stack.append(scope)

    def leave_scope(self, node: cst.CSTNode) -> None:
        if id(node) in self.scope_of:
            self.stack.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:  # a subclass may do more
        self.enter_scope(node)

    visit_FunctionDef = visit_Lambda = enter_scope
    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = enter_scope
    leave_FunctionDef = leave_Lambda = leave_ClassDef = leave_scope
    leave_ListComp = leave_SetComp = leave_GeneratorExp = leave_DictComp = leave_scope


class ScopeBuilder(Visitor):
    """Builds the scope tree of one module and remembers the scope of every scoped node."""

    def __init__(self, module: cst.Module, module_name: str, is_package: bool) -> None:
        self.module_name = module_name
        self.is_package = is_package
        self.scope_of: dict[int, Scope] = {}  # id(scoped node) -> its own scope
        self.stack: list[Scope] = []
        # How many if/try/loop/with statements enclose the current point, per scope.
        self.branch_depth: dict[int, int] = {}
        self.module_scope = self.push(ScopeKind.MODULE, module)

    def release(self) -> None:
        """Break the scope <-> binding cycles (for a module no longer used)."""
        for scope in self.scope_of.values():
            scope.bindings.clear()
        self.scope_of.clear()

    # -- scope management --------------------------------------------------------------
    @property
    def current(self) -> Scope:
        return self.stack[-1]

    def push(self, kind: ScopeKind, node: cst.CSTNode, name: str = "") -> Scope:
        parent = self.stack[-1] if self.stack else None
        scope = Scope(kind=kind, node=node, parent=parent, name=name)
        self.scope_of[id(node)] = scope
        self.stack.append(scope)
        return scope

    def bind(self, name: str, kind: BindingKind, node: cst.CSTNode, value=None, qualname=None,
             scope: Scope | None = None, position: tuple[int, ...] | None = (),
             unpacked: cst.BaseExpression | None = None) -> None:
        scope = scope or self.current
        conditional = self.branch_depth.get(id(self.current), 0) > 0
        scope.bind(Binding(name, kind, scope, node, value, qualname, conditional, position,
                           unpacked))

    def leave_Module(self, node: cst.Module) -> None:
        self.stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for decorator in node.decorators:
            self.walk(decorator)
        self.visit_parameter_defaults(node.params)
        self.bind(node.name.value, BindingKind.DEF, node)
        scope = self.push(ScopeKind.FUNCTION, node, node.name.value)
        self.bind_parameters(node.params, node, scope)
        self.walk(node.body)
        self.stack.pop()
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        self.visit_parameter_defaults(node.params)
        scope = self.push(ScopeKind.LAMBDA, node, "<lambda>")
        self.bind_parameters(node.params, node, scope)
        self.walk(node.body)
        self.stack.pop()
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        for decorator in node.decorators:
            self.walk(decorator)
        for arg in (*node.bases, *node.keywords):
            self.walk(arg)
        self.bind(node.name.value, BindingKind.CLASS, node)
        self.push(ScopeKind.CLASS, node, node.name.value)
        self.walk(node.body)
        self.stack.pop()
        return False

    def visit_parameter_defaults(self, params: cst.Parameters) -> None:
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            if param.default is not None:
                self.walk(param.default)

    def bind_parameters(self, params: cst.Parameters, owner: cst.CSTNode, scope: Scope) -> None:
        every = [*params.posonly_params, *params.params, *params.kwonly_params]
        for extra in (params.star_arg, params.star_kwarg):
            if isinstance(extra, cst.Param):
                every.append(extra)
        for param in every:
            self.bind(param.name.value, BindingKind.PARAM, param, scope=scope)

    def visit_comprehension(self, node, elements: list[cst.CSTNode]) -> bool:
        for_in = node.for_in
        self.walk(for_in.iter)  # the first iterable is evaluated in the enclosing scope
        self.push(ScopeKind.COMPREHENSION, node, "<comprehension>")
        clause: cst.CompFor | None = for_in
        first = True
        while clause is not None:
            if not first:
                self.walk(clause.iter)
            first = False
            self.bind_target(clause.target, BindingKind.FOR, clause, clause.iter)
            for condition in clause.ifs:
                self.walk(condition)
            clause = clause.inner_for_in
        for element in elements:
            self.walk(element)
        self.stack.pop()
        return False

    def visit_ListComp(self, node: cst.ListComp) -> bool:
        return self.visit_comprehension(node, [node.elt])

    def visit_SetComp(self, node: cst.SetComp) -> bool:
        return self.visit_comprehension(node, [node.elt])

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> bool:
        return self.visit_comprehension(node, [node.elt])

    def visit_DictComp(self, node: cst.DictComp) -> bool:
        return self.visit_comprehension(node, [node.key, node.value])

    # -- conditional regions --------------------------------------------------------------
    def enter_branch(self, node: cst.CSTNode) -> None:
        key = id(self.current)
        self.branch_depth[key] = self.branch_depth.get(key, 0) + 1

    def leave_branch(self, node: cst.CSTNode) -> None:
        self.branch_depth[id(self.current)] -= 1

    visit_If = visit_Try = visit_TryStar = visit_While = visit_With = visit_Match = enter_branch
    leave_If = leave_Try = leave_TryStar = leave_While = leave_With = leave_Match = leave_branch


    # -- bindings ----------------------------------------------------------------------
    def bind_target(self, target: cst.BaseExpression, kind: BindingKind, node: cst.CSTNode,
                    value: cst.BaseExpression | None, position: tuple[int, ...] | None = (),
                    unpacked: cst.BaseExpression | None = None) -> None:
        if isinstance(target, cst.Name):
            self.bind(target.value, kind, node, value, position=position, unpacked=unpacked)
        elif isinstance(target, (cst.Tuple, cst.List)):
            # Unpacked targets get no single value (for loops keep the iterable); their
            # position says which part of the value each name gets.
            if kind != BindingKind.FOR:
                unpacked, value = (value if position == () else unpacked), None
            for index, element in enumerate(target.elements):
                if isinstance(element, cst.StarredElement):
                    position = None
                inner = None if position is None else (*position, index)
                self.bind_target(element.value, kind, node, value, inner, unpacked)

    def visit_Global(self, node: cst.Global) -> None:
        self.current.global_names.update(item.name.value for item in node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.current.nonlocal_names.update(item.name.value for item in node.names)

    def visit_Assign(self, node: cst.Assign) -> None:
        single = len(node.targets) == 1
        for target in node.targets:
            self.bind_target(target.target, BindingKind.ASSIGN, node, node.value)
            if single and isinstance(target.target, cst.Subscript):
                self.record_item_assignment(target.target, node.value)

    def record_item_assignment(self, target: cst.Subscript, value: cst.BaseExpression) -> None:
        if not isinstance(target.value, cst.Name) or len(target.slice) != 1:
            return
        index = target.slice[0].slice
        if isinstance(index, cst.Index):
            self.current.item_assignments.setdefault(target.value.value, []).append(
                (index.value, value)
            )

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)):
            return
        name, method = func.value.value, func.attr.value
        if method in DICT_MUTATORS:
            self.current.dict_updates.add(name)
        added = LIST_ADDERS.get(method)
        if added is not None and len(node.args) == added.arity and not any(
                arg.star or arg.keyword for arg in node.args):
            self.current.list_additions.setdefault(name, []).append(
                (added.one_element, node.args[-1].value))

    def visit_Del(self, node: cst.Del) -> None:
        target = node.target
        if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
            self.current.dict_updates.add(target.value.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.bind_target(node.target, BindingKind.ASSIGN, node, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.bind_target(node.target, BindingKind.AUGASSIGN, node, None)
        if isinstance(node.target, cst.Name) and isinstance(node.operator, cst.AddAssign):
            self.current.list_additions.setdefault(node.target.value, []).append(
                (False, node.value))

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        scope = self.current
        while scope.kind == ScopeKind.COMPREHENSION and scope.parent is not None:
            scope = scope.parent
        if isinstance(node.target, cst.Name):
            self.bind(node.target.value, BindingKind.WALRUS, node, node.value, scope=scope)

    def visit_For(self, node: cst.For) -> bool:
        self.walk(node.iter)
        self.bind_target(node.target, BindingKind.FOR, node, node.iter)
        self.enter_branch(node)
        self.walk(node.body)
        if node.orelse is not None:
            self.walk(node.orelse)
        self.leave_branch(node)
        return False

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.bind_target(node.asname.name, BindingKind.WITH, node, node.item)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None and isinstance(node.name.name, cst.Name):
            self.bind(node.name.name.value, BindingKind.EXCEPT, node)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted_name(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.bind(alias.asname.name.value, BindingKind.IMPORT, node, qualname=full)
            else:
                head = full.split(".")[0]
                self.bind(head, BindingKind.IMPORT, node, qualname=head)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        base = dotted_name(node.module) if node.module is not None else None
        level = len(node.relative)
        if level:
            base = resolve_relative(self.module_name, self.is_package, level, base)
        if not base:
            return
        for alias in node.names:
            imported = dotted_name(alias.name)
            if imported is None:
                continue
            local = imported
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.bind(local, BindingKind.IMPORT, node, qualname=f"{base}.{imported}")


def build_scopes(module: cst.Module, module_name: str, is_package: bool) -> ScopeBuilder:
    builder = ScopeBuilder(module, module_name, is_package)
    builder.walk(module)
    return builder
