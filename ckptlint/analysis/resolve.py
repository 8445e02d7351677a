"""What an expression refers to: functions, classes, module instances, containers of modules.

Used to resolve what a checkpoint call checkpoints and, later, what a segment calls. It never
guesses: when a value cannot be known, the answer is `Unknown` with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from ckptlint.analysis.project import Project
from ckptlint.analysis.scopes import ASSIGNED, Binding, BindingKind, Scope, ScopeKind, dotted_name
from ckptlint.syntax.source import SourceModule
from ckptlint.syntax.walk import Visitor

MAX_DEPTH = 12

CONTAINER_TYPES = frozenset({
    "torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.ModuleDict",
    "torch.nn.modules.container.ModuleList", "torch.nn.modules.container.Sequential",
    "torch.nn.modules.container.ModuleDict",
})
PARTIAL = frozenset({"functools.partial"})


@dataclass(frozen=True, eq=False)
class ClassInfo:
    module: SourceModule
    node: cst.ClassDef
    scope: Scope  # the class body's scope

    @property
    def qualname(self) -> str:
        return self.scope.qualname()


@dataclass(frozen=True, eq=False)
class FunctionValue:
    module: SourceModule
    node: cst.FunctionDef | cst.Lambda
    scope: Scope  # the function's own scope
    owner: ClassInfo | None = None  # set for methods reached through an instance or `self`

    @property
    def qualname(self) -> str:
        return self.scope.qualname()


@dataclass(frozen=True, eq=False)
class InstanceValue:
    cls: ClassInfo


@dataclass(frozen=True, eq=False)
class ClassValue:
    cls: ClassInfo


@dataclass(frozen=True, eq=False)
class ContainerValue:
    elements: tuple = ()


@dataclass(frozen=True, eq=False)
class ModuleValue:
    """A project module, known by its file; parsed only when a name in it is needed."""

    path: Path
    name: str


@dataclass(frozen=True, eq=False)
class PartialValue:
    """`functools.partial(func, *args, **keywords)`: the call node keeps the bound arguments."""

    func: tuple
    call: cst.Call
    scope: Scope
    module: SourceModule


@dataclass(frozen=True, eq=False)
class ExternalValue:
    """Something outside the project, known by its qualified name (`torch.nn.Linear`, ...)."""

    qualname: str
    instance: bool = False  # an instance of `qualname` rather than the thing itself


@dataclass(frozen=True, eq=False)
class Unknown:
    reason: str  # a clause that reads as a sentence: "`fn` is a parameter" (CKP901's `reason`)


Value = (FunctionValue | InstanceValue | ClassValue | ContainerValue | ModuleValue
         | PartialValue | ExternalValue | Unknown)


@dataclass
class Resolver:
    project: Project
    _class_attrs: dict[int, dict[str, list[tuple[cst.BaseExpression, Scope]]]] = field(
        default_factory=dict)
    # While set (`confined_to`): imports of other modules are external, never parsed.
    _confinement: str | None = None

    @contextmanager
    def confined_to(self, module: SourceModule) -> Iterator[None]:
        """Resolve without following imports out of `module` (for callers that keep only
        what `module` itself defines)."""
        outer, self._confinement = self._confinement, module.name
        try:
            yield
        finally:
            self._confinement = outer

    # -- entry points ------------------------------------------------------------------
    def values(self, expr: cst.BaseExpression, module: SourceModule, scope: Scope,
               depth: int = 0) -> list[Value]:
        """Everything `expr` may evaluate to (several for try/except imports and branches)."""
        if depth > MAX_DEPTH:
            return [Unknown("it is reached through too many names to follow")]
        if isinstance(expr, cst.Lambda):
            return [FunctionValue(module, expr, module.scopes.scope_of[id(expr)])]
        if isinstance(expr, cst.Name):
            return self.name_values(expr.value, module, scope, depth)
        if isinstance(expr, cst.Attribute):
            return self.attribute_values(expr, module, scope, depth)
        if isinstance(expr, cst.Subscript):
            return self.element_values(self.values(expr.value, module, scope, depth + 1),
                                       sliced=self.is_slice(expr))
        if isinstance(expr, cst.Call):
            return self.call_values(expr, module, scope, depth)
        if isinstance(expr, (cst.List, cst.Tuple)):
            return [ContainerValue(tuple(
                value for element in expr.elements
                for value in self.values(element.value, module, scope, depth + 1)))]
        if isinstance(expr, (cst.ListComp, cst.GeneratorExp)):
            inner = module.scopes.scope_of.get(id(expr), scope)
            return [ContainerValue(tuple(self.values(expr.elt, module, inner, depth + 1)))]
        return [Unknown(f"`{module.code(expr)}` is not a name the linter can follow")]

    def qualnames(self, expr: cst.BaseExpression, module: SourceModule, scope: Scope) -> set[str]:
        """Qualified names of external things `expr` refers to (`torch.utils.checkpoint...`)."""
        return {value.qualname for value in self.values(expr, module, scope)
                if isinstance(value, ExternalValue) and not value.instance}

    # -- names -------------------------------------------------------------------------
    def name_values(self, name: str, module: SourceModule, scope: Scope, depth: int) -> list[Value]:
        bindings = scope.lookup(name)
        if not bindings:
            if name in BUILTIN_NAMES:
                return [ExternalValue(f"builtins.{name}")]
            return [Unknown(f"`{name}` is not defined in this file")]
        results: list[Value] = []
        for binding in bindings:
            results.extend(self.binding_values(binding, module, depth))
        return results

    def binding_values(self, binding: Binding, module: SourceModule, depth: int) -> list[Value]:
        kind, node = binding.kind, binding.node
        if isinstance(node, cst.FunctionDef):  # BindingKind.DEF
            return [FunctionValue(module, node, module.scopes.scope_of[id(node)])]
        if isinstance(node, cst.ClassDef):  # BindingKind.CLASS
            return [ClassValue(ClassInfo(module, node, module.scopes.scope_of[id(node)]))]
        if kind == BindingKind.IMPORT:
            return self.import_values(binding.qualname or "", depth)
        if kind in (*ASSIGNED, BindingKind.WITH) and binding.value is not None:
            return self.values(binding.value, module, binding.scope, depth + 1)
        if kind == BindingKind.FOR and binding.value is not None:
            return self.element_values(self.iterated_values(binding.value, module, binding.scope,
                                                            depth + 1))
        if kind == BindingKind.PARAM:
            return self.parameter_values(binding, module, depth)
        return [Unknown(f"`{binding.name}` is bound by {kind}")]

    def parameter_values(self, binding: Binding, module: SourceModule, depth: int) -> list[Value]:
        """An annotated parameter (`model: Model`) holds an instance of a project class."""
        param = binding.node
        annotation = param.annotation if isinstance(param, cst.Param) else None
        if annotation is not None:
            classes = [value for value in self.values(annotation.annotation, module,
                                                      binding.scope, depth + 1)
                       if isinstance(value, ClassValue)]
            if classes:
                return [InstanceValue(value.cls) for value in classes]
        return [Unknown(f"`{binding.name}` is a parameter")]

    def iterated_values(self, expr: cst.BaseExpression, module: SourceModule, scope: Scope,
                        depth: int) -> list[Value]:
        # `for i, layer in enumerate(self.layers)`: the modules are those of `self.layers`.
        if isinstance(expr, cst.Call) and expr.args:
            called = self.qualnames(expr.func, module, scope)
            if called & {"builtins.enumerate", "builtins.reversed"}:
                inner = self.values(expr.args[0].value, module, scope, depth)
                if any(isinstance(value, ContainerValue) for value in inner):
                    return inner
        return self.values(expr, module, scope, depth)

    def import_values(self, qualname: str, depth: int) -> list[Value]:
        """A project module or a name inside one, else an external qualified name."""
        if qualname in CONTAINER_TYPES or qualname in PARTIAL:
            return [ExternalValue(qualname)]  # known by name even when linting torch itself
        inside = self._confinement
        if inside is not None and qualname != inside and not qualname.startswith(f"{inside}."):
            return [ExternalValue(qualname)]
        path = self.project.module_path(qualname)
        if path is not None:
            return [ModuleValue(path, qualname)]
        if "." in qualname:
            parent_name, attr = qualname.rsplit(".", 1)
            parent = self.project.module_path(parent_name)
            if parent is not None:
                return self.module_member(ModuleValue(parent, parent_name), attr, depth)
        return [ExternalValue(qualname)]

    def module_member(self, value: ModuleValue, attr: str, depth: int) -> list[Value]:
        """`module.attr`: a name the module binds, else (a package) its submodule `attr`.

        A package's `__init__.py` is parsed only when it may bind `attr` itself.
        """
        dotted = f"{value.name}.{attr}"
        if dotted in CONTAINER_TYPES or dotted in PARTIAL:
            return [ExternalValue(dotted)]
        if self.project.may_bind(value.path, attr):
            module = self.project.module_at(value.path)
            if module is None:
                return [Unknown(f"{self.project.display_name(value.path)} cannot be parsed")]
            scope = module.scopes.module_scope
            if attr in scope.bindings:
                return self.name_values(attr, module, scope, depth + 1)
        if value.path.name == "__init__.py":
            submodule = self.project.module_path(dotted)
            if submodule is not None:
                return [ModuleValue(submodule, dotted)]
        return [Unknown(f"`{attr}` is not defined in {self.project.display_name(value.path)}")]

    # -- attributes --------------------------------------------------------------------
    def attribute_values(self, expr: cst.Attribute, module: SourceModule, scope: Scope,
                         depth: int) -> list[Value]:
        attr = expr.attr.value
        owner = self.self_class(expr.value, module, scope)
        if owner is not None:
            return self.instance_attribute(owner, attr, depth)
        results: list[Value] = []
        for value in self.values(expr.value, module, scope, depth + 1):
            results.extend(self.member_values(value, attr, depth))
        return results

    def member_values(self, value: Value, attr: str, depth: int) -> list[Value]:
        if isinstance(value, ExternalValue):
            if value.instance:
                return [Unknown(f"it is the attribute `{attr}` of a `{value.qualname}` object")]
            return [ExternalValue(f"{value.qualname}.{attr}")]
        if isinstance(value, ModuleValue):
            return self.module_member(value, attr, depth)
        if isinstance(value, InstanceValue):
            if attr == "__call__" and self.find_method(value.cls, "__call__") is None:
                return [value]  # `module.__call__` runs the module, i.e. its forward
            return self.instance_attribute(value.cls, attr, depth)
        if isinstance(value, ClassValue):
            method = self.find_method(value.cls, attr)
            if method is None:
                return [Unknown(f"`{value.cls.qualname}.{attr}` is not defined")]
            return [method]
        if isinstance(value, Unknown):
            return [value]
        return [Unknown(f"it is the attribute `{attr}` of a value the linter cannot "
                        "follow")]

    def self_class(self, expr: cst.BaseExpression, module: SourceModule,
                   scope: Scope) -> ClassInfo | None:
        """The class when `expr` is the first parameter of a method (usually `self`)."""
        if not isinstance(expr, cst.Name):
            return None
        function_scope = scope
        # Closures and lambdas inside a method see the method's `self`.
        while (function_scope.kind != ScopeKind.CLASS and expr.value not in function_scope.bindings
               and function_scope.parent is not None):
            function_scope = function_scope.parent
        node = function_scope.node
        if function_scope.kind != ScopeKind.FUNCTION or function_scope.parent is None:
            return None
        class_scope = function_scope.parent
        if not isinstance(class_scope.node, cst.ClassDef) or not isinstance(node, cst.FunctionDef):
            return None  # not a method (ScopeKind.CLASS holds a ClassDef)
        params = [*node.params.posonly_params, *node.params.params]
        if not params or params[0].name.value != expr.value:
            return None
        if any(dotted_name(d.decorator) in ("staticmethod", "classmethod")
               for d in node.decorators):
            return None
        if expr.value in function_scope.bindings and len(function_scope.bindings[expr.value]) > 1:
            return None  # `self` rebound
        return ClassInfo(module, class_scope.node, class_scope)

    def instance_attribute(self, cls: ClassInfo, attr: str, depth: int) -> list[Value]:
        method = self.find_method(cls, attr)
        if method is not None:
            return [method]
        assignments = self.attribute_assignments(cls).get(attr)
        if not assignments:
            for base in self.base_classes(cls, depth):
                found = self.attribute_assignments(base).get(attr)
                if found:
                    assignments = found
                    cls = base
                    break
        if not assignments:
            return [Unknown(f"`self.{attr}` is never assigned in {cls.qualname}")]
        results: list[Value] = []
        for value, scope in assignments:
            results.extend(self.values(value, cls.module, scope, depth + 1))
        return results

    def attribute_assignments(
            self, cls: ClassInfo) -> dict[str, list[tuple[cst.BaseExpression, Scope]]]:
        """`self.X = value` statements in the methods of `cls`, by attribute name."""
        key = id(cls.node)
        if key not in self._class_attrs:
            collector = SelfAssignmentCollector(cls.module)
            for statement in cls.node.body.body:
                if isinstance(statement, cst.FunctionDef):
                    collector.collect(statement)
            self._class_attrs[key] = collector.found
        return self._class_attrs[key]

    # -- classes -----------------------------------------------------------------------
    def find_method(self, cls: ClassInfo, name: str, depth: int = 0) -> FunctionValue | None:
        for binding in cls.scope.bindings.get(name, []):
            if isinstance(binding.node, cst.FunctionDef):  # BindingKind.DEF
                return FunctionValue(cls.module, binding.node,
                                     cls.module.scopes.scope_of[id(binding.node)], owner=cls)
        for base in self.base_classes(cls, depth):
            method = self.find_method(base, name, depth + 1)
            if method is not None:
                return FunctionValue(method.module, method.node, method.scope, owner=cls)
        return None

    def base_classes(self, cls: ClassInfo, depth: int = 0) -> list[ClassInfo]:
        if depth > MAX_DEPTH:
            return []
        outer = cls.scope.parent or cls.scope
        bases = []
        for arg in cls.node.bases:
            for value in self.values(arg.value, cls.module, outer, depth + 1):
                if isinstance(value, ClassValue):
                    bases.append(value.cls)
        return bases

    def external_bases(self, cls: ClassInfo, depth: int = 0) -> set[str]:
        """Qualified names of external classes `cls` derives from, through project bases."""
        if depth > MAX_DEPTH:
            return set()
        outer = cls.scope.parent or cls.scope
        names: set[str] = set()
        for arg in cls.node.bases:
            for value in self.values(arg.value, cls.module, outer, depth + 1):
                if isinstance(value, ExternalValue):
                    names.add(value.qualname)
                elif isinstance(value, ClassValue):
                    names |= self.external_bases(value.cls, depth + 1)
        return names

    # -- calls and containers ------------------------------------------------------------
    def call_values(self, call: cst.Call, module: SourceModule, scope: Scope,
                    depth: int) -> list[Value]:
        results: list[Value] = []
        for callee in self.values(call.func, module, scope, depth + 1):
            if isinstance(callee, ClassValue):
                results.append(InstanceValue(callee.cls))
            elif isinstance(callee, ExternalValue) and not callee.instance:
                results.extend(self.external_call(callee.qualname, call, module, scope, depth))
            elif isinstance(callee, FunctionValue) and isinstance(callee.node, cst.FunctionDef):
                results.extend(self.returned_values(callee, depth))
            elif isinstance(callee, Unknown):
                results.append(callee)
            else:
                results.append(Unknown(f"it is the result of `{module.code(call.func)}(...)`"))
        return results

    def external_call(self, qualname: str, call: cst.Call, module: SourceModule, scope: Scope,
                      depth: int) -> list[Value]:
        if qualname in PARTIAL and call.args and not call.args[0].star:
            inner = tuple(self.values(call.args[0].value, module, scope, depth + 1))
            return [PartialValue(inner, call, scope, module)]
        if qualname in CONTAINER_TYPES:
            elements: list[Value] = []
            for arg in call.args:
                if arg.keyword is not None:
                    continue
                found = self.values(arg.value, module, scope, depth + 1)
                if arg.star == "*" or qualname.endswith(("ModuleList", "ModuleDict")):
                    found = self.element_values(found)
                elements.extend(found)
            return [ContainerValue(tuple(elements))]
        return [ExternalValue(qualname, instance=True)]

    def returned_values(self, function: FunctionValue, depth: int) -> list[Value]:
        """What a project function returns, when it returns names of nested defs (factories)."""
        collector = ReturnCollector()
        collector.walk(function.node.body)
        if not collector.returns:
            return [Unknown(f"`{function.qualname}` returns nothing the linter can follow")]
        results: list[Value] = []
        for returned in collector.returns:
            results.extend(self.values(returned, function.module, function.scope, depth + 1))
        return results

    def element_values(self, values: list[Value], sliced: bool = False) -> list[Value]:
        results: list[Value] = []
        for value in values:
            if isinstance(value, ContainerValue):
                if sliced:
                    results.append(value)
                else:
                    results.extend(value.elements)
            elif isinstance(value, Unknown):
                results.append(value)
            else:
                results.append(Unknown("it is an element of something that is not a known "
                                       "container"))
        return results

    @staticmethod
    def is_slice(expr: cst.Subscript) -> bool:
        return any(isinstance(element.slice, cst.Slice) for element in expr.slice)

    # -- from values to function bodies -------------------------------------------------------
    def functions(self, values: list[Value]) -> tuple[list[FunctionValue], list[str]]:
        """The function bodies that calling these values runs, and reasons for what is unknown.

        Module instances run their class's `forward` (or `__call__`); containers run each
        element; partials run their function. External things run library code: no body,
        no reason (they are not unresolved, just not the project's).
        """
        found: list[FunctionValue] = []
        reasons: list[str] = []
        for value in values:
            if isinstance(value, FunctionValue):
                found.append(value)
            elif isinstance(value, InstanceValue):
                method = self.find_method(value.cls, "forward") or self.find_method(
                    value.cls, "__call__")
                if method is not None:
                    found.append(method)
                elif not self.external_bases(value.cls):
                    reasons.append(f"`{value.cls.qualname}` has no forward")
            elif isinstance(value, ContainerValue):
                inner, inner_reasons = self.functions(list(value.elements))
                found.extend(inner)
                reasons.extend(inner_reasons)
            elif isinstance(value, PartialValue):
                inner, inner_reasons = self.functions(list(value.func))
                found.extend(inner)
                reasons.extend(inner_reasons)
            elif isinstance(value, Unknown):
                reasons.append(value.reason)
            elif isinstance(value, ClassValue):
                reasons.append(f"`{value.cls.qualname}` is a class, not a module instance")
        unique: dict[int, FunctionValue] = {}
        for function in found:
            unique.setdefault(id(function.node), function)
        return list(unique.values()), reasons


class SelfAssignmentCollector(Visitor):
    """Collects `self.X = value` in one method (nested functions and classes excluded)."""

    def __init__(self, module: SourceModule) -> None:
        self.module = module
        self.found: dict[str, list[tuple[cst.BaseExpression, Scope]]] = {}
        self.self_name = ""
        self.scope: Scope | None = None

    def collect(self, method: cst.FunctionDef) -> None:
        params = [*method.params.posonly_params, *method.params.params]
        if not params:
            return
        self.self_name = params[0].name.value
        self.scope = self.module.scopes.scope_of[id(method)]
        self.walk(method.body)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self.record(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.record(node.target, node.value)

    def record(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if (isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
                and target.value.value == self.self_name and self.scope is not None):
            self.found.setdefault(target.attr.value, []).append((value, self.scope))


class ReturnCollector(Visitor):
    """`return` values of one function body (nested functions excluded)."""

    def __init__(self) -> None:
        self.returns: list[cst.BaseExpression] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self.returns.append(node.value)


BUILTIN_NAMES = frozenset(__builtins__.keys() if isinstance(__builtins__, dict)
                          else dir(__builtins__))
