"""What an expression refers to: functions, classes, module instances, containers of modules.

Used to resolve what a checkpoint call checkpoints and, later, what a segment calls. It never
guesses: when a value cannot be known, the answer is `Unknown` with the reason.

Beyond names, attributes and imports it follows:
- factories: a call of a project function is what it returns; a closure it returns sees the
  call's arguments in its free variables (`create_custom_forward(layer)` returns
  `custom_forward`, whose `module(*inputs)` runs `layer`), kept as the closure's `context`;
- lists and generators a helper builds (`out.append(("", m)); return out`, `yield name, m`),
  taken apart again where a loop or an assignment unpacks them (`for name, layer in ...`);
- `self.<name>` in a class whose project subclasses define `<name>` (mixins): those methods
  too, since `self` may be any of them;
- a decorator's first parameter (`def ckpt(fn)` applied as `@ckpt`): the decorated functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import libcst as cst

from ckptlint.analysis.classes import ClassSummary
from ckptlint.analysis.project import Project
from ckptlint.analysis.scopes import (
    ASSIGNED,
    Binding,
    BindingKind,
    Scope,
    ScopeKind,
    dotted_name,
    is_staticmethod,
    live_bindings,
)
from ckptlint.analysis.textindex import TextIndex, text_index
from ckptlint.syntax.reading import SourceError
from ckptlint.syntax.source import SourceModule
from ckptlint.syntax.walk import Visitor

MAX_DEPTH = 12

CONTAINER_TYPES = frozenset({
    "torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.ModuleDict",
    "torch.nn.modules.container.ModuleList", "torch.nn.modules.container.Sequential",
    "torch.nn.modules.container.ModuleDict",
})
PARTIAL = frozenset({"functools.partial"})


class ClassInfo:
    """A project class: its module, `ClassDef` and body scope; or, for a module-level class
    reached in a module not parsed yet, its `ast` summary (`ckptlint.analysis.classes`), the
    module parsed only when a question needs the tree (`module`, `node`, `scope`)."""

    def __init__(self, module: SourceModule, node: cst.ClassDef, scope: Scope) -> None:
        self._module: SourceModule | None = module
        self._node: cst.ClassDef | None = node
        self._scope: Scope | None = scope
        self._summarised: tuple[Project, Path, str, ClassSummary] | None = None

    @classmethod
    def summarised(cls, project: Project, path: Path, name: str,
                   summary: ClassSummary) -> ClassInfo:
        """The class `name` bound at the top of the module at `path` (resolved), known by
        its summary (`Project.class_summary`)."""
        info = cls.__new__(cls)
        info._module = info._node = info._scope = None
        info._summarised = (project, path, name, summary)
        return info

    @property
    def file(self) -> Path:
        return self._summarised[1] if self._summarised is not None else self.module.path

    @property
    def key(self) -> tuple[Path, str] | int:
        """Stands for this class in kept answers, without parsing its module."""
        if self._node is None and self._summarised is not None:
            return self._summarised[1], self._summarised[2]
        return id(self.node)

    @property
    def summary(self) -> ClassSummary | None:
        """The summary while the class is not parsed (its file recorded as a dependency)."""
        if self._node is not None or self._summarised is None:
            return None
        project, path, _, summary = self._summarised
        project.dependencies.record(path)
        return summary

    def parse(self) -> ClassInfo:
        """This class with its tree (its module parsed, if it was not)."""
        if self._node is not None:
            return self
        assert self._summarised is not None
        project, path, name, _ = self._summarised
        module = project.module_at(path)
        if module is None:  # CPython parsed it for the summary, libcst could not
            raise SourceError(project.parse_errors.get(path, "cannot be parsed"))
        [binding] = module.scopes.module_scope.bindings[name]
        assert isinstance(binding.node, cst.ClassDef)
        self._module, self._node = module, binding.node
        self._scope = module.scopes.scope_of[id(binding.node)]
        return self

    @property
    def module(self) -> SourceModule:
        if self._module is None:
            self.parse()
        assert self._module is not None
        return self._module

    @property
    def node(self) -> cst.ClassDef:
        if self._node is None:
            self.parse()
        assert self._node is not None
        return self._node

    @property
    def scope(self) -> Scope:  # the class body's scope
        if self._scope is None:
            self.parse()
        assert self._scope is not None
        return self._scope

    @property
    def qualname(self) -> str:
        if self._scope is None and self._summarised is not None:
            return self._summarised[2]  # a module-level class
        return self.scope.qualname()

    def is_same(self, other: ClassInfo) -> bool:
        """The same class statement (without parsing either one's module if not needed)."""
        if self._node is not None and other._node is not None:
            return self._node is other._node
        return self._top_level() == other._top_level() is not None

    def _top_level(self) -> tuple[Path, str] | None:
        """(file, name) of a module-level class; a summarised one is the only binding of
        its name there, so (file, name) is that one class statement."""
        if self._summarised is not None:
            return self._summarised[1], self._summarised[2]
        scope = self.scope
        if scope.parent is None or scope.parent.kind != ScopeKind.MODULE:
            return None
        return self.module.path, scope.name


@dataclass(frozen=True, eq=False)
class PassedArgument:
    """What a call passed for one parameter, resolved where the call was made."""

    expr: cst.BaseExpression
    module: SourceModule
    scope: Scope
    context: tuple[Bound, ...]  # the calls bound at that point


@dataclass(frozen=True, eq=False)
class Bound:
    """One call of a project function: its arguments by parameter (`id` of the `Param`), for
    the closures it returns (their free variables are those parameters)."""

    call: cst.Call
    function: Scope  # the called function's scope
    arguments: dict[int, PassedArgument]


@dataclass(frozen=True, eq=False)
class FunctionValue:
    module: SourceModule
    node: cst.FunctionDef | cst.Lambda
    scope: Scope  # the function's own scope
    owner: ClassInfo | None = None  # set for methods reached through an instance or `self`
    # For a closure a factory returned: the calls that bound its free variables, outermost
    # first (`create_custom_forward(layer)`); empty for a plain function.
    context: tuple[Bound, ...] = ()

    @property
    def qualname(self) -> str:
        return self.scope.qualname()

    @property
    def key(self) -> tuple[int, ...]:
        """The function together with what its free variables are bound to: one closure
        returned by two calls is two functions to analyse."""
        return (id(self.node), *(id(bound.call) for bound in self.context))


@dataclass(frozen=True, eq=False)
class InstanceValue:
    cls: ClassInfo


@dataclass(frozen=True, eq=False)
class ClassValue:
    cls: ClassInfo


@dataclass(frozen=True, eq=False)
class ContainerValue:
    elements: tuple = ()
    # What each position holds, where a tuple or list is written out (`("", module)`) or is
    # what `enumerate`/`zip` yield: unpacking (`for name, layer in ...`) takes it apart.
    # None when positions are unknown (a list built by `append`).
    items: tuple[tuple[Value, ...], ...] | None = None

    @classmethod
    def of_items(cls, items: tuple[tuple[Value, ...], ...]) -> ContainerValue:
        return cls(tuple(value for item in items for value in item), items)


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
    # A sentence, without the final full stop, saying why (CKP901's `reason`): "`fn` is a
    # parameter of `run`, so its value depends on each caller". Or what makes it, when it
    # costs a pass over code: most reasons are never read.
    explained: str | Callable[[], str]

    @property
    def reason(self) -> str:
        return self.explained if isinstance(self.explained, str) else self.explained()


Value = (FunctionValue | InstanceValue | ClassValue | ContainerValue | ModuleValue
         | PartialValue | ExternalValue | Unknown)
V = TypeVar("V", bound=Value)


@dataclass
class Resolver:
    project: Project
    _class_attrs: dict[int, dict[str, list[tuple[cst.BaseExpression, Scope]]]] = field(
        default_factory=dict)
    # While set (`confined_to`): imports of other modules are external, never parsed.
    _confinement: str | None = None
    # The calls whose arguments parameters stand for (`within`): a factory's closure.
    _context: tuple[Bound, ...] = ()
    # Kept answers (`DependencyRecorder.cached`): subclass overrides, decorated functions,
    # what the bases of a class are.
    _overrides: dict[tuple[int, str, bool], tuple[list[Value], tuple[Path, ...]]] = field(
        default_factory=dict)
    _decorated: dict[int, tuple[list[Value], tuple[Path, ...]]] = field(default_factory=dict)
    _bases: dict[tuple, tuple[list[list[Value]], tuple[Path, ...]]] = field(default_factory=dict)
    _index: TextIndex | None = None

    @property
    def index(self) -> TextIndex:
        if self._index is None:
            self._index = text_index(self.project)
        return self._index

    @contextmanager
    def confined_to(self, module: SourceModule) -> Iterator[None]:
        """Resolve without following imports out of `module` (for callers that keep only
        what `module` itself defines)."""
        outer, self._confinement = self._confinement, module.name
        try:
            yield
        finally:
            self._confinement = outer

    @contextmanager
    def within(self, context: tuple[Bound, ...]) -> Iterator[None]:
        """Resolve with the parameters of these calls bound to their arguments (inside a
        closure a factory returned: `FunctionValue.context`)."""
        outer, self._context = self._context, context
        try:
            yield
        finally:
            self._context = outer

    # -- entry points ------------------------------------------------------------------
    def values(self, expr: cst.BaseExpression, module: SourceModule, scope: Scope,
               depth: int = 0) -> list[Value]:
        """Everything `expr` may evaluate to (several for try/except imports and branches)."""
        if depth > MAX_DEPTH:
            return [Unknown("it is reached through too many names for the linter to follow")]
        if isinstance(expr, cst.Lambda):
            return [FunctionValue(module, expr, module.scopes.scope_of[id(expr)])]
        if isinstance(expr, cst.Name):
            return self.name_values(expr.value, module, scope, depth, use=expr)
        if isinstance(expr, cst.Attribute):
            return self.attribute_values(expr, module, scope, depth)
        if isinstance(expr, cst.Subscript):
            return self.element_values(self.values(expr.value, module, scope, depth + 1),
                                       sliced=self.is_slice(expr))
        if isinstance(expr, cst.Call):
            return self.call_values(expr, module, scope, depth)
        if isinstance(expr, (cst.List, cst.Tuple)):
            return [self.literal_values(expr, module, scope, depth)]
        if isinstance(expr, (cst.ListComp, cst.GeneratorExp)):
            inner = module.scopes.scope_of.get(id(expr), scope)
            return [ContainerValue(tuple(self.values(expr.elt, module, inner, depth + 1)))]
        return [Unknown(lambda: not_followed_reason(compact_code(module, expr)))]

    def literal_values(self, expr: cst.List | cst.Tuple, module: SourceModule, scope: Scope,
                       depth: int) -> ContainerValue:
        items: list[tuple[Value, ...]] = []
        starred: list[Value] = []
        for element in expr.elements:
            found = self.values(element.value, module, scope, depth + 1)
            if isinstance(element, cst.StarredElement):
                starred.extend(self.element_values(found))
            else:
                items.append(tuple(found))
        if starred:
            return ContainerValue(tuple(value for item in items for value in item) + tuple(starred))
        return ContainerValue.of_items(tuple(items))

    def qualnames(self, expr: cst.BaseExpression, module: SourceModule, scope: Scope) -> set[str]:
        """Qualified names of external things `expr` refers to (`torch.utils.checkpoint...`)."""
        return {value.qualname for value in self.values(expr, module, scope)
                if isinstance(value, ExternalValue) and not value.instance}

    # -- names -------------------------------------------------------------------------
    def name_values(self, name: str, module: SourceModule, scope: Scope, depth: int,
                    use: cst.Name | None = None) -> list[Value]:
        """What `name` may hold; with its `use` in `module`, only the bindings that reach it."""
        if depth > MAX_DEPTH:  # imports that re-export each other in a cycle end here
            return [Unknown("it is reached through too many names for the linter to follow")]
        bindings = reaching(scope.every_binding(name), use, module, scope) if use is not None \
            else scope.lookup(name)
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
            found = self.values(binding.value, module, binding.scope, depth + 1)
            return self.with_additions(found, binding, module, depth)
        if kind == BindingKind.FOR and binding.value is not None:
            yielded = self.iteration_values(binding.value, module, binding.scope, depth + 1)
            return self.unpacked_values(yielded, binding)
        if binding.unpacked is not None:
            found = self.values(binding.unpacked, module, binding.scope, depth + 1)
            return self.unpacked_values(found, binding)
        if kind == BindingKind.PARAM:
            return self.parameter_values(binding, module, depth)
        if kind == BindingKind.AUGASSIGN:
            return self.augmented_values(binding, module, depth)
        return [Unknown(f"`{binding.name}` is bound by {BOUND_BY.get(kind, kind.value)}")]

    def with_additions(self, found: list[Value], binding: Binding, module: SourceModule,
                       depth: int) -> list[Value]:
        """A list the scope builds up (`out = []`, then `out.append(x)`, `out += xs`)."""
        additions = binding.scope.list_additions.get(binding.name)
        if not additions or not any(isinstance(value, ContainerValue) for value in found):
            return found
        added: list[Value] = []
        for one_element, expr in additions:
            values = self.values(expr, module, binding.scope, depth + 1)
            added.extend(values if one_element else self.element_values(values))
        return [ContainerValue(value.elements + tuple(added))
                if isinstance(value, ContainerValue) else value for value in found]

    def augmented_values(self, binding: Binding, module: SourceModule,
                         depth: int) -> list[Value]:
        """`out += xs`: what `out` held before (its additions include `xs`)."""
        earlier: list[Binding] = []
        for other in binding.scope.bindings.get(binding.name, []):
            if other is binding:
                break
            if other.kind != BindingKind.AUGASSIGN:
                earlier.append(other)
        if not earlier:
            return [Unknown(f"`{binding.name}` is changed by an augmented assignment "
                            "whose starting value the linter cannot see")]
        results: list[Value] = []
        for other in live_bindings(earlier):
            results.extend(self.binding_values(other, module, depth + 1))
        return results

    def unpacked_values(self, values: list[Value], binding: Binding) -> list[Value]:
        """The part of `values` that an unpacking target gives `binding` (its position)."""
        if binding.position is None:
            return [Unknown(f"`{binding.name}` is unpacked next to a starred name, so which "
                            "part of the value it gets is unknown")]
        for index in binding.position:
            parts: list[Value] = []
            for value in values:
                if isinstance(value, ContainerValue) and value.items is not None:
                    if index < len(value.items):
                        parts.extend(value.items[index])
                    else:
                        parts.append(Unknown(f"`{binding.name}` is unpacked from a value with "
                                             "fewer parts than the target"))
                elif isinstance(value, Unknown):
                    parts.append(value)
                else:
                    parts.append(Unknown(f"`{binding.name}` is unpacked from a value whose "
                                         "parts the linter cannot tell apart"))
            values = parts
        return values

    def parameter_values(self, binding: Binding, module: SourceModule, depth: int) -> list[Value]:
        """What a parameter holds: the argument of the call a closure came from
        (`Bound`), an annotated project class (`model: Model`), or, for a decorator's first
        parameter, the functions it decorates."""
        param = binding.node
        for bound in reversed(self._context):
            passed = bound.arguments.get(id(param))
            if passed is not None:
                with self.within(passed.context):
                    return self.values(passed.expr, passed.module, passed.scope, depth + 1)
        annotation = param.annotation if isinstance(param, cst.Param) else None
        if annotation is not None:
            classes = [value for value in self.values(annotation.annotation, module,
                                                      binding.scope, depth + 1)
                       if isinstance(value, ClassValue)]
            if classes:
                return [InstanceValue(value.cls) for value in classes]
        decorated = self.decorated_functions(binding, module)
        if decorated:
            return decorated
        return [Unknown(f"`{binding.name}` is a parameter of `{binding.scope.qualname()}`, so "
                        "its value depends on each caller")]

    def iteration_values(self, expr: cst.BaseExpression, module: SourceModule, scope: Scope,
                         depth: int) -> list[Value]:
        """What each pass of `for ... in expr` gets: the elements, and for `enumerate`/`zip`
        the tuples they make of them."""
        if (isinstance(expr, cst.Call) and expr.args
                and not any(arg.star or arg.keyword for arg in expr.args)):
            called = self.qualnames(expr.func, module, scope)
            if called & {"builtins.enumerate", "builtins.zip", *SAME_ELEMENTS}:
                parts = tuple(tuple(self.element_values(self.values(arg.value, module, scope,
                                                                    depth + 1)))
                              for arg in expr.args)
                if "builtins.zip" in called:
                    return [ContainerValue.of_items(parts)]
                if len(parts) == 1 and "builtins.enumerate" in called:
                    counter = Unknown("it is the counter `enumerate` yields")
                    return [ContainerValue.of_items(((counter,), parts[0]))]
                if len(parts) == 1:
                    return list(parts[0])
        return self.element_values(self.values(expr, module, scope, depth))

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
            imported = self.project.imported_names(value.path, attr)
            if imported is not None:  # a re-export: no need to parse the module
                return self.imported_values(imported, depth + 1)
            summary = self.project.class_summary(value.path, attr)
            if summary is not None:  # a class: parsed only when a question needs its tree
                return [ClassValue(ClassInfo.summarised(self.project, value.path.resolve(), attr,
                                                        summary))]
            # A value not followed (`X = A | B`): what `name_values` would say of it, two
            # steps deeper, without the tree.
            opaque = (self.project.opaque_value(value.path, attr) if depth + 2 <= MAX_DEPTH
                      else None)
            if opaque is not None:
                return [not_followed(shortened(opaque))]
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

    def imported_values(self, imported: list[str], depth: int) -> list[Value]:
        """What a name bound only by imports holds (`name_values` over those bindings)."""
        if depth > MAX_DEPTH:
            return [Unknown("it is reached through too many names for the linter to follow")]
        return [value for qualname in imported for value in self.import_values(qualname, depth)]

    def decorated_functions(self, binding: Binding, module: SourceModule) -> list[Value]:
        """For the first parameter of a module-level function `f`: the functions in the
        project decorated with `@f` (it receives each of them)."""
        function = binding.scope.node
        if not (isinstance(function, cst.FunctionDef) and binding.scope.parent is not None
                and binding.scope.parent.kind == ScopeKind.MODULE):
            return []
        params = [*function.params.posonly_params, *function.params.params]
        if not params or params[0] is not binding.node:
            return []
        decorator = FunctionValue(module, function, binding.scope)
        return self.project.dependencies.cached(self._decorated, id(function),
                                                lambda: self.find_decorated(decorator))

    def find_decorated(self, decorator: FunctionValue) -> list[Value]:
        assert isinstance(decorator.node, cst.FunctionDef)
        name = decorator.node.name.value
        found: list[Value] = []
        for path in self.index.decorated_files(name):
            module = self.project.module_at(path)
            if module is None:
                continue
            for scope in list(module.scopes.scope_of.values()):
                node = scope.node
                if not isinstance(node, cst.FunctionDef) or scope.parent is None:
                    continue
                for position, applied in enumerate(node.decorators):
                    written = dotted_name(applied.decorator)
                    if written is None or written.rsplit(".", 1)[-1] != name or not any(
                            isinstance(value, FunctionValue) and value.node is decorator.node
                            for value in self.values(applied.decorator, module, scope.parent)):
                        continue
                    if position < len(node.decorators) - 1:
                        found.append(Unknown(f"`@{written}` is applied to what the decorators "
                                             "below it return, not to the function itself"))
                    else:
                        found.append(FunctionValue(module, node, scope,
                                                   owner=enclosing_class(module, scope)))
        return found

    # -- attributes --------------------------------------------------------------------
    def attribute_values(self, expr: cst.Attribute, module: SourceModule, scope: Scope,
                         depth: int) -> list[Value]:
        attr = expr.attr.value
        owner = self.self_class(expr.value, module, scope)
        if owner is not None:
            return self.self_attribute(owner, attr, depth)
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
        found = self.own_attribute(cls, attr, depth)
        if found is not None:
            return found
        library = sorted(self.external_bases(cls))
        if library:
            return [Unknown(f"`{cls.qualname}.{attr}` comes from the library class "
                            f"`{library[0]}`, whose code the linter does not follow")]
        return [Unknown(f"`{attr}` is neither defined nor assigned in `{cls.qualname}`")]

    def own_attribute(self, cls: ClassInfo, attr: str, depth: int) -> list[Value] | None:
        """A method of `cls` (or its bases) or what `self.<attr>` is assigned in their
        methods; None when neither exists."""
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
            return None
        results: list[Value] = []
        for value, scope in assignments:
            results.extend(self.values(value, cls.module, scope, depth + 1))
        return results

    def self_attribute(self, cls: ClassInfo, attr: str, depth: int) -> list[Value]:
        """`self.<attr>` inside `cls`: `self` may be an instance of any project subclass, so
        the methods they define under that name count too (a mixin calling
        `self._forward`); where `cls` has nothing by that name, also what they assign."""
        found = self.own_attribute(cls, attr, depth)
        key = (id(cls.node), attr, found is None)
        overrides = self.project.dependencies.cached(
            self._overrides, key, lambda: self.find_overrides(cls, attr, found is None, depth),
            while_computing=[])
        if found is None and not overrides:
            return [Unknown(f"`self.{attr}` is neither defined nor assigned in "
                            f"`{cls.qualname}` or any project subclass")]
        return [*(found or []), *overrides]

    def find_overrides(self, cls: ClassInfo, attr: str, assigned_too: bool,
                       depth: int) -> list[Value]:
        found: list[Value] = []
        for path in self.index.subclass_files(cls.node.name.value,
                                              definition_pattern(attr, assigned_too)):
            if self.imports_nothing_inside_confinement(path):
                continue  # no class there can resolve to a base inside (`import_values`)
            module = self.project.module_at(path)
            if module is None:
                continue
            for scope in list(module.scopes.scope_of.values()):
                if scope.kind != ScopeKind.CLASS or scope.node is cls.node:
                    continue
                assert isinstance(scope.node, cst.ClassDef)
                sub = ClassInfo(module, scope.node, scope)
                methods = [b.node for b in scope.bindings.get(attr, [])
                           if isinstance(b.node, cst.FunctionDef)]
                assigned = self.attribute_assignments(sub).get(attr) if assigned_too else None
                if not (methods or assigned) or not self.derives_from(sub, cls):
                    continue
                if methods:
                    method = methods[-1]
                    found.append(FunctionValue(module, method, module.scopes.scope_of[id(method)],
                                               owner=sub))
                else:
                    for value, value_scope in assigned or []:
                        found.extend(self.values(value, module, value_scope, depth + 1))
        return found

    def imports_nothing_inside_confinement(self, path: Path) -> bool:
        """While resolution is confined to a module (`confined_to`), a class of another
        module can derive from a class there only through an import of a name inside it:
        a file none of whose imports binds one is skipped without a libcst parse."""
        inside = self._confinement
        if inside is None or self._context:
            return False
        self.project.dependencies.record(path)
        module, is_package = self.project.module_name(path)
        if module == inside or module.startswith(f"{inside}."):
            return False
        text = self.project.source_text(path)
        if text is not None and inside.rsplit(".", 1)[-1] not in text:
            return True  # no import can name it (a relative one spells its last part too)
        bound = self.index.import_bindings(path, module, is_package)
        return bound is not None and not any(
            name == inside or name.startswith(f"{inside}.") for name in bound)

    def derives_from(self, cls: ClassInfo, base: ClassInfo, depth: int = 0) -> bool:
        if depth > MAX_DEPTH:
            return False
        return any(parent.is_same(base) or self.derives_from(parent, base, depth + 1)
                   for parent in self.base_classes(cls, depth))

    def attribute_assignments(
            self, cls: ClassInfo) -> Mapping[str, list[tuple[cst.BaseExpression, Scope]]]:
        """`self.X = value` statements in the methods of `cls`, by attribute name."""
        summary = cls.summary
        if summary is not None:
            return SummarisedAssignments(summary.assigned,
                                         lambda: self.attribute_assignments(cls.parse()))
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
        summary = cls.summary
        for binding in cls.scope.bindings.get(name, []) if summary is None \
                or name in summary.methods else ():
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
        return [value.cls for values in self.base_values(cls, depth) for value in values
                if isinstance(value, ClassValue)]

    def external_bases(self, cls: ClassInfo, depth: int = 0) -> set[str]:
        """Qualified names of external classes `cls` derives from, through project bases."""
        if depth > MAX_DEPTH:
            return set()
        names: set[str] = set()
        for values in self.base_values(cls, depth):
            for value in values:
                if isinstance(value, ExternalValue):
                    names.add(value.qualname)
                elif isinstance(value, ClassValue):
                    names |= self.external_bases(value.cls, depth + 1)
        return names

    def base_values(self, cls: ClassInfo, depth: int) -> list[list[Value]]:
        """What each base of `cls` may be (kept for the run: asked again and again while
        classes are followed); from its summary while it is not parsed."""
        key = (cls.key, depth, self._confinement, self._context)
        return self.project.dependencies.cached(self._bases, key,
                                                lambda: self.find_base_values(cls, depth))

    def find_base_values(self, cls: ClassInfo, depth: int) -> list[list[Value]]:
        summary = cls.summary
        if summary is not None:
            found = [self.written_values(cls.file, written, kind, depth + 1)
                     for written, kind in summary.bases]
            known = [values for values in found if values is not None]
            if len(known) == len(found):
                return known
        outer = cls.scope.parent or cls.scope
        return [self.values(arg.value, cls.module, outer, depth + 1) for arg in cls.node.bases]

    def written_values(self, path: Path, written: str, kind: str,
                       depth: int) -> list[Value] | None:
        """`values` of a base written `written` (a dotted name) in a summarised class of the
        module at `path`, whose first name the module binds as `kind` says
        (`ckptlint.analysis.classes`); None when the summaries cannot say."""
        if depth > MAX_DEPTH:
            return [Unknown("it is reached through too many names for the linter to follow")]
        head, _, attr = written.rpartition(".")
        if head:
            inner = self.written_values(path, head, kind, depth + 1)
            return None if inner is None else [
                found for value in inner for found in self.member_values(value, attr, depth)]
        if kind == "unbound":
            return ([ExternalValue(f"builtins.{written}")] if written in BUILTIN_NAMES
                    else [Unknown(f"`{written}` is not defined in this file")])
        if kind == "class":
            summary = self.project.class_summary(path, written)
            return None if summary is None else [
                ClassValue(ClassInfo.summarised(self.project, path, written, summary))]
        imported = self.project.imported_names(path, written)
        return None if imported is None else [
            value for qualname in imported for value in self.import_values(qualname, depth)]

    # -- calls and containers ------------------------------------------------------------
    def call_values(self, call: cst.Call, module: SourceModule, scope: Scope,
                    depth: int) -> list[Value]:
        results: list[Value] = []
        for callee in self.values(call.func, module, scope, depth + 1):
            if isinstance(callee, ClassValue):
                results.append(InstanceValue(callee.cls))
            elif isinstance(callee, ExternalValue) and not callee.instance:
                results.extend(self.external_call(callee.qualname, call, module, scope, depth))
            elif isinstance(callee, FunctionValue):
                results.extend(self.returned_values(callee, call, module, scope, depth))
            elif isinstance(callee, Unknown):
                results.append(callee)
            else:
                results.append(Unknown(f"it is the result of `{compact_code(module, call.func)}"
                                       "(...)`, which the linter cannot follow"))
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

    def returned_values(self, function: FunctionValue, call: cst.Call, module: SourceModule,
                        scope: Scope, depth: int) -> list[Value]:
        """What calling a project function gives: what it returns (a generator: a container
        of what it yields), with its parameters bound to the call's arguments, so that a
        closure it returns sees them."""
        node = function.node
        bound = Bound(call, function.scope, self.passed_arguments(function, call, module, scope))
        context = (*function.context, bound)
        collector = ReturnCollector()
        if isinstance(node, cst.Lambda):
            collector.returns.append(node.body)
        else:
            collector.walk(node.body)
        results: list[Value] = []
        with self.within(context):
            if collector.yields or collector.yields_from:
                elements: list[Value] = []
                for expr in collector.yields:
                    elements.extend(self.values(expr, function.module, function.scope,
                                                depth + 1))
                for expr in collector.yields_from:
                    elements.extend(self.element_values(self.values(
                        expr, function.module, function.scope, depth + 1)))
                results.append(ContainerValue(tuple(elements)))
            for returned in [] if results else collector.returns:
                results.extend(self.values(returned, function.module, function.scope,
                                           depth + 1))
        if not results:
            return [Unknown(f"`{function.qualname}` returns no value the linter can follow")]
        return [self.closed_over(value, context) for value in results]

    def passed_arguments(self, function: FunctionValue, call: cst.Call, module: SourceModule,
                         scope: Scope) -> dict[int, PassedArgument]:
        """The call's arguments by the parameter (`id` of its `Param`) each one fills."""
        params = function.node.params
        positional = [*params.posonly_params, *params.params]
        if is_method(function) and positional:
            positional = positional[1:]  # `self`/`cls`, passed by the call through the object
        by_name = {param.name.value: param for param in (*params.params, *params.kwonly_params)}
        passed: dict[int, PassedArgument] = {}
        index: int | None = 0
        for arg in call.args:
            param = None
            if arg.star == "*":
                index = None  # the positions after it are unknown
            elif arg.keyword is not None:
                param = by_name.get(arg.keyword.value)
            elif not arg.star and index is not None:
                param = positional[index] if index < len(positional) else None
                index += 1
            if param is not None:
                passed[id(param)] = PassedArgument(arg.value, module, scope, self._context)
        return passed

    @staticmethod
    def closed_over(value: V, context: tuple[Bound, ...]) -> V:
        """A function defined inside the called function (a closure it returned), with the
        call's arguments bound for its free variables."""
        if not isinstance(value, FunctionValue) or value.context:
            return value
        scope: Scope | None = value.scope.parent
        while scope is not None and scope is not context[-1].function:
            scope = scope.parent
        return replace(value, context=context) if scope is not None else value

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
                results.append(Unknown("it is an element of something that is not a "
                                       "container the linter knows"))
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
                    reasons.append(f"`{value.cls.qualname}` defines no `forward`")
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
        unique: dict[tuple[int, ...], FunctionValue] = {}
        for function in found:
            unique.setdefault(function.key, function)
        return list(unique.values()), reasons

    def segment_functions(self, values: list[Value]) -> tuple[list[FunctionValue], list[str]]:
        """What a checkpoint call runs (`functions`), less the forwarders whose callee is
        unknown: for those, the reason."""
        found, reasons = self.functions(values)
        targets: list[FunctionValue] = []
        for function in found:
            unknown = self.unknown_forwarding(function)
            if unknown is None:
                targets.append(function)
            else:
                reasons.append(unknown)
        return targets, reasons

    def unknown_forwarding(self, function: FunctionValue) -> str | None:
        """Why what `function` forwards to is unknown, when it only forwards to one call of a
        value from outside it (`lambda *a: fn(*a)`, a factory's `custom_forward` calling
        `module`) whose callee cannot be resolved: the segment is that callee, and analysing
        the forwarder alone would read as a clean segment."""
        call = forwarded_call(function.node)
        root = call.func if call is not None else None
        while isinstance(root, cst.Attribute):
            root = root.value
        if not isinstance(root, cst.Name) or root.value in function.scope.bindings:
            return None  # `x.cuda()` on its own parameter: the body itself is the work
        assert call is not None
        with self.within(function.context):
            callees, reasons = self.functions(self.values(call.func, function.module,
                                                          function.scope))
        return reasons[0] if reasons and not callees else None


class SummarisedAssignments(Mapping[str, list[tuple[cst.BaseExpression, Scope]]]):
    """`Resolver.attribute_assignments` of a class not parsed: an attribute that no
    assignment in it can set (its summary says) is answered without the tree; anything else
    parses the class (`everything`)."""

    def __init__(self, assigned: frozenset[str], everything: Callable[
            [], Mapping[str, list[tuple[cst.BaseExpression, Scope]]]]) -> None:
        self.assigned = assigned
        self.everything = everything

    def __getitem__(self, attr: str) -> list[tuple[cst.BaseExpression, Scope]]:
        if attr not in self.assigned:
            raise KeyError(attr)
        return self.everything()[attr]

    def __iter__(self) -> Iterator[str]:
        return iter(self.everything())

    def __len__(self) -> int:
        return len(self.everything())


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
    """`return` and `yield` values of one function body (nested functions excluded)."""

    def __init__(self) -> None:
        self.returns: list[cst.BaseExpression] = []
        self.yields: list[cst.BaseExpression] = []  # `yield x`: one element
        self.yields_from: list[cst.BaseExpression] = []  # `yield from xs`: the elements

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self.returns.append(node.value)

    def visit_Yield(self, node: cst.Yield) -> None:
        if isinstance(node.value, cst.From):
            self.yields_from.append(node.value.item)
        elif node.value is not None:
            self.yields.append(node.value)


def reaching(bindings: list[Binding], use: cst.Name, module: SourceModule,
             scope: Scope) -> list[Binding]:
    """The bindings a use sees: where the use runs in the scope that binds the name, or in
    a comprehension or lambda written there (`checkpoint(lambda *a: layer(*a), x)`), those
    before it in the file, from the last one that surely ran (`for name, layer in a: ...`
    then `for name, layer in b: ...`: each loop's body sees its own `layer`). Otherwise (a
    function reading a global or a `def` closure: they run later), or when none is before
    it (a loop's back edge), every live one, as without positions."""
    if len(bindings) < 2:
        return bindings
    while scope.kind in (ScopeKind.LAMBDA, ScopeKind.COMPREHENSION) and scope.parent is not None \
            and scope is not bindings[0].scope:
        scope = scope.parent
    if bindings[0].scope is not scope:
        return live_bindings(bindings)
    order = module.node_order(scope.node)
    if not order.holds(use, *(binding.node for binding in bindings)):
        return live_bindings(bindings)
    # A loop's target is bound before its body runs.
    before = [binding for binding in bindings
              if (order.starts_before(binding.node, use) if binding.kind == BindingKind.FOR
                  else order.ends_before(binding.node, use))]
    return live_bindings(before or bindings)


def forwarded_call(node: cst.FunctionDef | cst.Lambda) -> cst.Call | None:
    """The call a function's whole body returns (`lambda *a: f(*a)`, `def g(*a): return
    f(*a)`), if that is all it does."""
    if isinstance(node, cst.Lambda):
        body: cst.BaseExpression | None = node.body
    else:
        statements = node.body.body
        if len(statements) != 1 or not isinstance(statements[0], cst.SimpleStatementLine):
            return None
        [statement] = statements[0].body if len(statements[0].body) == 1 else [None]
        body = statement.value if isinstance(statement, cst.Return) else None
    return body if isinstance(body, cst.Call) else None


def definition_pattern(attr: str, assigned_too: bool) -> re.Pattern[str]:
    """Text a file must hold to define method `attr` (or, `assigned_too`, to assign
    `self.attr`): only such files are parsed to look for overrides."""
    name = re.escape(attr)
    assigned = rf"|\bself\s*\.\s*{name}\s*(?::|=(?!=))" if assigned_too else ""
    return re.compile(rf"\bdef\s+{name}\b{assigned}")


def is_method(function: FunctionValue) -> bool:
    """A `def` in a class body, called through an object or class (`self` or `cls` is not
    passed by the caller's argument list)."""
    parent = function.scope.parent
    return (parent is not None and parent.kind == ScopeKind.CLASS
            and isinstance(function.node, cst.FunctionDef)
            and not is_staticmethod(function.node))


def enclosing_class(module: SourceModule, scope: Scope) -> ClassInfo | None:
    """The class whose body defines the function of `scope`, if any."""
    parent = scope.parent
    if parent is not None and isinstance(parent.node, cst.ClassDef):
        return ClassInfo(module, parent.node, parent)
    return None


def compact_code(module: SourceModule, expr: cst.CSTNode, limit: int = 60) -> str:
    """An expression's source on one line, shortened for a message."""
    return shortened(" ".join(module.code(expr).split()), limit)


def shortened(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def not_followed(code: str) -> Unknown:
    return Unknown(not_followed_reason(code))


def not_followed_reason(code: str) -> str:
    return f"`{code}` is not a name the linter can follow"


# How a name is bound, worded for a reason (`Unknown`).
BOUND_BY = {
    BindingKind.WITH: "a `with` statement",
    BindingKind.EXCEPT: "an `except` clause",
    BindingKind.FOR: "a loop the linter cannot follow",
    BindingKind.ASSIGN: "an assignment the linter cannot follow",
    BindingKind.WALRUS: "an assignment the linter cannot follow",
}
# Builtins whose iteration gives the elements of their one argument.
SAME_ELEMENTS = frozenset({"builtins.reversed", "builtins.list", "builtins.tuple",
                           "builtins.sorted", "builtins.iter"})


BUILTIN_NAMES = frozenset(__builtins__.keys() if isinstance(__builtins__, dict)
                          else dir(__builtins__))
