"""The project-wide binding model: which module-level names and instance attributes change.

pyflakes-like and lazy. It answers two questions for the segment rules:

- For a module-level name `NAME` of module `m`: where is it changed *at run time*? A
  change is a rebinding inside a function (`global NAME; NAME = ...`, `NAME += ...`), an
  in-place mutation inside a function (`NAME.append(...)`, `NAME[k] = ...`, `NAME.add_(...)`,
  `NAME.attr = ...`), or a write through the module from any project file
  (`m.NAME = ...`, `m.NAME += ...`, `m.NAME.append(...)`, `m.NAME[k] = ...`). Statements at
  module level of `m` itself run once at import and do not count: a name only assigned there
  is a constant.
- For a class: which `self.<attr>` are assigned or mutated outside setup (`__init__` and the
  methods it calls, `reset_parameters`, ...). Attributes touched only in setup (config flags,
  submodules, hyper-parameters) are constants.

Other files are looked at only when a segment reads a module-level name: their text is
searched for `.NAME` first, and only files that also mention the module are parsed.

Answers are kept for the whole run; each records the files it rests on in the project's
dependency recorder (`ckptlint.analysis.dependencies`), also when it is reused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from ckptlint.analysis.changes import ACCUMULATING, ChangeHow
from ckptlint.analysis.mutators import CONTAINER_MUTATORS, is_mutator
from ckptlint.analysis.phases import SETUP_METHODS, PhaseFinder, When, function_key
from ckptlint.analysis.project import Project
from ckptlint.analysis.resolve import ClassInfo, Resolver
from ckptlint.analysis.scopes import (
    BindingKind,
    Scope,
    ScopeKind,
    ScopeTracker,
    is_staticmethod,
)
from ckptlint.analysis.segment import (
    compact,
    import_qualnames,
    memo_containers,
    reads_target,
)
from ckptlint.syntax.source import SourceModule
from ckptlint.syntax.walk import Visitor


@dataclass(frozen=True, eq=False)
class Change:
    """A place where state changes: its file, row, the function holding it, and how."""

    path: Path
    display: str
    how: ChangeHow
    where: str  # the function holding the change ("" at module level)
    # For `G.attr = ...`, `G.attr.append(...)`: "attr" (only reads of `G.attr` or of `G`
    # itself see this change); None when `G` itself is rebound, indexed or mutated.
    part: str | None = None
    # It adds to the old value (`+=`, an in-place method, `x = x + 1`) rather than
    # replacing it.
    accumulates: bool = False
    line: int = 0  # the row, for changes found without a libcst tree
    # A write on another object (`layer.scale = s`), matched to the class by its receiver's
    # known class or as an element of a collection: counted only where a caller is known.
    foreign: bool = False
    module: SourceModule | None = None  # with `node`: the change in a parsed module
    node: cst.CSTNode | None = None

    @classmethod
    def of(cls, module: SourceModule, node: cst.CSTNode, how: ChangeHow, where: str,
           part: str | None = None, target: cst.BaseExpression | None = None) -> Change:
        """A change at `node` of a parsed module; `target`: what an assignment writes (the
        change accumulates when the value assigned reads it)."""
        accumulates = how in ACCUMULATING or (
            target is not None and isinstance(node, (cst.Assign, cst.AnnAssign))
            and node.value is not None and reads_target(node.value, target))
        return cls(module.path, module.display, how, where, part, accumulates,
                   module=module, node=node)

    @property
    def row(self) -> int:
        if self.module is not None and self.node is not None:
            return self.module.start(self.node).row
        return self.line


def root_name(expr: cst.BaseExpression) -> cst.Name | None:
    """`a` for `a`, `a.b.c`, `a[0].b`; None for anything else (calls, literals)."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return expr if isinstance(expr, cst.Name) else None


def first_attribute(target: cst.BaseExpression) -> str | None:
    """`a` for `G.a`, `G.a.b`, `G.a[0]`; None for `G`, `G[0]`, `G[0].a`."""
    found = None
    while isinstance(target, (cst.Attribute, cst.Subscript)):
        found = target.attr.value if isinstance(target, cst.Attribute) else None
        target = target.value
    return found


def root_is(target: cst.BaseExpression, name: cst.Name) -> bool:
    """True for `name`, `name[k]`, `name.attr` chains (anything rooted at `name`)."""
    return root_name(target) is name


def function_name(scope: Scope) -> str:
    """The qualified name of the function holding `scope` ("" at module level)."""
    return function_key(scope.qualname()) if scope.kind != ScopeKind.MODULE else ""


class ModuleWriteCollector(ScopeTracker):
    """Runtime changes of one module's own globals, and writes through imported modules."""

    def __init__(self, module: SourceModule,
                 training_rows: Callable[[int], bool] | None = None) -> None:
        self.module = module
        # For a training script: whether a module-level row runs between a forward and its
        # `.backward()` (module-level writes there are run-time changes).
        self.training_rows = training_rows
        self.scope_of = module.scopes.scope_of
        self.stack = [module.scopes.module_scope]
        self.own: dict[str, list[Change]] = {}
        self._memo: dict[int, frozenset[str]] = {}
        self._decorators: set[str] | None = None
        # (class name, attribute) -> changes through `ClassName.attr = ...` in functions.
        self.class_writes: dict[tuple[str, str], list[Change]] = {}
        # (imported module qualname, attribute) -> changes written through that import.
        self.through: dict[tuple[str, str], list[Change]] = {}

    def enclosing_functions(self) -> list[Scope]:
        found = []
        scope: Scope | None = self.scope
        while scope is not None:
            if scope.kind in (ScopeKind.FUNCTION, ScopeKind.LAMBDA):
                found.append(scope)
            scope = scope.parent
        return found

    def is_registration(self) -> bool:
        """Changes inside functions used as decorators in this module (`@register("gelu")`,
        and the decorator such a factory returns) happen at import time, when the decorated
        definitions register themselves."""
        if self._decorators is None:
            self._decorators = names_used_as_decorators(self.module)
        return any(scope.name in self._decorators for scope in self.enclosing_functions())

    def is_memo_write(self, target: cst.BaseExpression, how: ChangeHow, direct: bool) -> bool:
        if direct:
            return False
        functions = self.enclosing_functions()
        if not functions:
            return False
        node = functions[0].node
        if id(node) not in self._memo:
            self._memo[id(node)] = memo_containers(node)
        return compact(target) in self._memo[id(node)]

    def in_function(self) -> bool:
        scope: Scope | None = self.scope
        while scope is not None:
            if scope.kind in (ScopeKind.FUNCTION, ScopeKind.LAMBDA):
                return True
            scope = scope.parent
        return False

    def record(self, target: cst.BaseExpression, node: cst.CSTNode, how: ChangeHow,
               direct: bool) -> None:
        """`direct`: the target itself is (re)bound; else the object it names is changed."""
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.record(element.value, node, how, direct)
            return
        if isinstance(target, cst.StarredElement):
            self.record(target.value, node, how, direct)
            return
        where = function_name(self.scope)
        if self.is_registration() or self.is_memo_write(target, how, direct):
            return
        # Writes through a module: `m.NAME = ...`, `m.NAME.append(...)`, `pkg.m.NAME[k] = ...`.
        chain = target
        while isinstance(chain, (cst.Attribute, cst.Subscript)):
            if isinstance(chain, cst.Attribute) and isinstance(chain.value, cst.Name) \
                    and self.in_function():
                # `Layer.scale = ...` on a class of this module: a class attribute change.
                owners = self.scope.lookup(chain.value.value)
                if owners and all(b.kind == BindingKind.CLASS and b.scope.kind == ScopeKind.MODULE
                                  for b in owners):
                    kind = how if (direct and chain is target) else ChangeHow.MUTATED
                    self.class_writes.setdefault((chain.value.value, chain.attr.value), []).append(
                        Change.of(self.module, node, kind, where, target=chain))
            if isinstance(chain, cst.Attribute):
                for qualname in import_qualnames(chain.value, self.scope):
                    kind = how if (direct and chain is target) else ChangeHow.MUTATED
                    self.through.setdefault((qualname, chain.attr.value), []).append(
                        Change.of(self.module, node, kind, where, target=chain))
            chain = chain.value
        name = root_name(target)
        if name is None:
            return
        bindings = self.scope.lookup(name.value)
        if not bindings or bindings[0].scope.kind != ScopeKind.MODULE:
            return
        imports = [b for b in bindings if b.kind == BindingKind.IMPORT]
        if imports:
            # `from settings import HISTORY; HISTORY.append(x)` mutates settings.HISTORY;
            # `sys.path.insert(...)` is about the module `sys`, handled as a write through it.
            if not (direct and isinstance(target, cst.Name)) and self.in_function():
                for binding in imports:
                    qualname = binding.qualname or ""
                    if "." in qualname and root_is(target, name):
                        parent, attr = qualname.rsplit(".", 1)
                        self.through.setdefault((parent, attr), []).append(
                            Change.of(self.module, node, ChangeHow.MUTATED, where,
                                      first_attribute(target)))
            return
        if not self.in_function() and not self.in_training_window(node):
            return  # module-level statements run once, at import (or a script's setup)
        if direct and isinstance(target, cst.Name):
            if self.in_function() and name.value not in self.declared_global():
                return
            kind = how
        elif direct and isinstance(target, cst.Attribute) and target.value is name:
            kind = ChangeHow.REASSIGNED if how == ChangeHow.REBOUND else how
        else:
            kind = ChangeHow.MUTATED
        self.own.setdefault(name.value, []).append(
            Change.of(self.module, node, kind, where, first_attribute(target), target=target))

    def in_training_window(self, node: cst.CSTNode) -> bool:
        """Module-level code of a training script between a forward and its `.backward()`."""
        return self.training_rows is not None and self.training_rows(
            self.module.start(node).row)

    def declared_global(self) -> set[str]:
        names: set[str] = set()
        scope: Scope | None = self.scope
        while scope is not None and scope.kind != ScopeKind.MODULE:
            names |= scope.global_names
            scope = scope.parent
        return names

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self.record_target(target.target, node, ChangeHow.REBOUND)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.record_target(node.target, node, ChangeHow.REBOUND)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.record_target(node.target, node, ChangeHow.AUGMENTED)

    def visit_Del(self, node: cst.Del) -> None:
        self.record_target(node.target, node, ChangeHow.DELETED)

    def record_target(self, target: cst.BaseExpression, node: cst.CSTNode, how: ChangeHow) -> None:
        if isinstance(target, cst.Subscript):
            self.record(target.value, node, ChangeHow.MUTATED, direct=False)
        else:
            self.record(target, node, how, direct=True)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and is_mutator(func.attr.value):
            self.record(func.value, node, ChangeHow.MUTATED, direct=False)
        elif (isinstance(func, cst.Name) and func.value == "setattr" and len(node.args) >= 2
              and not self.scope.lookup("setattr")):
            name = node.args[1].value
            if isinstance(name, cst.SimpleString) and isinstance(name.evaluated_value, str):
                attr = cst.Attribute(value=node.args[0].value, attr=cst.Name(name.evaluated_value))
                for qualname in import_qualnames(node.args[0].value, self.scope):
                    self.through.setdefault((qualname, attr.attr.value), []).append(
                        Change.of(self.module, node, ChangeHow.REBOUND, function_name(self.scope)))


class ClassWriteCollector(Visitor):
    """`self.X` assignments and in-place mutations in one method (closures included)."""

    def __init__(self, module: SourceModule, self_name: str, where: str) -> None:
        self.module = module
        self.self_name = self_name
        self.where = where
        self.found: dict[str, list[Change]] = {}
        self.memo: frozenset[str] = frozenset()

    def attr_of_self(self, expr: cst.BaseExpression) -> str | None:
        """`X` when `expr` is `self.X` or something inside it (`self.X[0]`, `self.X.y`)."""
        while isinstance(expr, (cst.Attribute, cst.Subscript)):
            if (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)
                    and expr.value.value == self.self_name):
                return expr.attr.value
            expr = expr.value
        return None

    def add(self, attr: str | None, node: cst.CSTNode, how: ChangeHow,
            target: cst.BaseExpression | None = None) -> None:
        if attr is not None:
            self.found.setdefault(attr, []).append(
                Change.of(self.module, node, how, self.where, target=target))

    def target(self, target: cst.BaseExpression, node: cst.CSTNode, how: ChangeHow) -> None:
        if isinstance(target, cst.Subscript) and compact(target.value) in self.memo:
            return  # `self.cache[key] = ...` after `if key not in self.cache`: memoization
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.target(element.value, node, how)
            return
        if isinstance(target, cst.StarredElement):
            self.target(target.value, node, how)
            return
        direct = (isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
                  and target.value.value == self.self_name)
        self.add(self.attr_of_self(target), node, how if direct else ChangeHow.MUTATED,
                 target if direct else None)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self.target(target.target, node, ChangeHow.REASSIGNED)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.target(node.target, node, ChangeHow.REASSIGNED)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.target(node.target, node, ChangeHow.UPDATED)

    def visit_Del(self, node: cst.Del) -> None:
        self.target(node.target, node, ChangeHow.DELETED)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and is_mutator(func.attr.value):
            self.add(self.attr_of_self(func.value), node, ChangeHow.MUTATED)
        elif isinstance(func, cst.Name) and func.value == "setattr" and len(node.args) >= 2:
            obj, name = node.args[0].value, node.args[1].value
            if (isinstance(obj, cst.Name) and obj.value == self.self_name
                    and isinstance(name, cst.SimpleString)
                    and isinstance(name.evaluated_value, str)):
                self.add(name.evaluated_value, node, ChangeHow.REASSIGNED)


def lines_holding(text: str, word: str) -> list[str]:
    """The lines of `text` (split at `\\n`) that hold `word`, each once, in order."""
    lines = []
    start = text.find(word)
    while start != -1:
        begin = text.rfind("\n", 0, start) + 1
        end = text.find("\n", start)
        if end == -1:
            end = len(text)
        lines.append(text[begin:end])
        start = text.find(word, end)
    return lines


class BindingModel:
    """Lazily built answers about changes of module globals and instance attributes."""

    def __init__(self, project: Project, resolver: Resolver) -> None:
        self.project = project
        self.resolver = resolver
        self.dependencies = project.dependencies
        self._modules: dict[int, ModuleWriteCollector] = {}
        self._classes: dict[int, tuple[dict[str, list[Change]], tuple[Path, ...]]] = {}
        # Kept answers (`DependencyRecorder.cached`): (answer, files it rests on).
        self._external: dict[tuple[str, str], tuple[list[Change], tuple[Path, ...]]] = {}
        self._setup: dict[int, set[str]] = {}
        self._foreign: dict[tuple[int, str], tuple[list[Change], tuple[Path, ...]]] = {}
        # Handed on to the next model when parsed modules are dropped (`Analysis.renewed`):
        # nothing in it may lead back to this one, which holds libcst trees.
        self.phases = PhaseFinder(project.source_files, project.source_text,
                                  project.dotted_name, project.summaries, project.signed_text)

    def when(self, change: Change) -> When:
        """The phase a change outside the segment runs in (`ckptlint.analysis.phases`)."""
        return self.phases.when(self.project.real_path(change.path), change.where, change.row)

    # -- modules -----------------------------------------------------------------------
    def module_writes(self, module: SourceModule) -> ModuleWriteCollector:
        key = id(module)
        if key not in self._modules:
            collector = ModuleWriteCollector(module, self.training_rows(module.path))
            collector.walk(module.tree)
            self._modules[key] = collector
        return self._modules[key]

    def global_changes(self, module: SourceModule, name: str,
                       rebinding_counts: bool = True) -> list[Change]:
        """Run-time changes of `module.name` anywhere in the project.

        `rebinding_counts=False` for a reader that imported the value (`from m import NAME`):
        rebinding `m.NAME` later does not change the reader's copy; mutating it does.
        """
        changes = self.own_changes(module, name)
        changes += self.external_changes(module, name)
        if not rebinding_counts:
            changes = [c for c in changes if c.how == ChangeHow.MUTATED]
        return self.recorded(changes)

    def own_changes(self, module: SourceModule, name: str) -> list[Change]:
        """Run-time changes of `module.name` inside `module` itself."""
        return self.recorded(list(self.module_writes(module).own.get(name, [])))

    def training_rows(self, path: Path) -> Callable[[int], bool] | None:
        """For a training script (a module whose own body calls `.backward()`): whether a
        module-level row lies between a forward and its `.backward()`."""
        path = self.project.real_path(path)
        if ".backward" not in (self.project.source_text(path) or ""):
            return None
        summary = self.phases.summary(path)
        body = summary.functions.get("") if summary is not None else None
        if body is None or not body.windows:
            return None
        windows = list(body.windows)
        return lambda row: any(start <= row < end for start, end in windows)

    def recorded(self, changes: list[Change]) -> list[Change]:
        """`changes`, with the files they are in recorded as dependencies."""
        self.dependencies.record_all(change.path for change in changes)
        return changes

    def external_changes(self, module: SourceModule, name: str) -> list[Change]:
        """`m.NAME = ...` and the like in any project file (the module's own file included)."""
        if not module.name:
            return []
        return self.dependencies.cached(self._external, (module.name, name),
                                        lambda: self.find_external_changes(module, name))

    def find_external_changes(self, module: SourceModule, name: str) -> list[Change]:
        short = module.name.rsplit(".", 1)[-1]
        quoted_name, quoted_short = re.escape(name), re.escape(short)
        # Matched against the lines holding the module's short name only (`lines_holding`).
        alias = re.compile(rf"[ \t]*(?:from[ \t]+\S+[ \t]+)?import[ \t]+[^\n]*?\b{quoted_short}"
                           rf"[ \t]+as[ \t]+(\w+)")
        from_import = re.compile(rf"[ \t]*from[ \t]+[\w.]*\b{quoted_short}[ \t]+import\b[^\n]*"
                                 rf"\b{quoted_name}\b")
        change = (r"\s*(?:\[[^\]\n]*\]\s*)?"
                  r"(?:(?:[-+*/%&|^@]|//|\*\*|<<|>>)?=(?!=)|\.\s*\w+\s*\()")
        direct = f"{short}.{name}"
        direct_write = re.compile(re.escape(direct) + r"\b" + change)
        imported_change = changes_through_name(name)
        changes: list[Change] = []
        holding = self.project.files_holding(name) & self.project.files_holding(short)
        for path in self.project.source_files():
            if path not in holding:
                continue
            text = self.project.source_text(path) or ""
            lines = lines_holding(text, short)
            candidate = ((direct in text and direct_write.search(text) is not None)
                         or (any(from_import.match(line) for line in lines)
                             and imported_change.search(text) is not None))
            if not candidate and " as " in text:
                aliases = [match.group(1) for line in lines if (match := alias.match(line))]
                candidate = any(
                    f"{other}.{name}" in text
                    and re.search(re.escape(f"{other}.{name}") + r"\b" + change, text)
                    for other in aliases)
            if not candidate:
                continue
            other = self.project.module_at(path)
            if other is None:
                continue
            for (qualname, attr), found in self.module_writes(other).through.items():
                if attr == name and (qualname == module.name
                                     or module.name.endswith(f".{qualname}")):
                    changes.extend(found)
        return changes

    # -- classes -----------------------------------------------------------------------
    def attribute_changes(self, cls: ClassInfo, attr: str) -> list[Change]:
        """Changes of `self.<attr>` outside setup in `cls` and its project base classes, and
        writes of `<attr>` on instances of them from other objects' code
        (`self.blocks[0].gate = ...`)."""
        own = list(self.class_changes(cls).get(attr, []))
        return self.recorded(own + self.foreign_changes(cls, attr))

    def foreign_changes(self, cls: ClassInfo, attr: str) -> list[Change]:
        return self.dependencies.cached(self._foreign, (id(cls.node), attr),
                                        lambda: self.find_foreign_changes(cls, attr))

    def find_foreign_changes(self, cls: ClassInfo, attr: str) -> list[Change]:
        """Writes `R.<attr> = ...` where `R` is known to be an instance of `cls` (or of a
        class it derives from), or an element of a collection whose elements are unknown
        or such instances (`for layer in model.layers: layer.scale = s`)."""
        family = self.lineage(cls)
        changes: list[Change] = []
        for path, write in self.phases.attribute_writes(attr, frozenset(family)):
            if write.receiver == "unknown" or (write.receiver == "typed" and not write.classes):
                continue
            if write.classes and not write.classes & family:
                continue
            changes.append(Change(path, self.project.display_name(path), write.how,
                                  write.function, accumulates=write.accumulates,
                                  line=write.row, foreign=True))
        return changes

    def lineage(self, cls: ClassInfo) -> set[str]:
        """The class's name and the names of its project base classes."""
        names = {cls.node.name.value}
        pending, seen = [cls], {id(cls.node)}
        while pending:
            current = pending.pop()
            for base in self.resolver.base_classes(current):
                if id(base.node) not in seen:
                    seen.add(id(base.node))
                    names.add(base.node.name.value)
                    pending.append(base)
        return names

    def class_changes(self, cls: ClassInfo) -> dict[str, list[Change]]:
        """`self.X` changes outside setup in `cls` and its project base classes."""
        return self.dependencies.cached(self._classes, id(cls.node),
                                        lambda: self.merged_class_changes(cls),
                                        while_computing={})  # cycles in bases

    def merged_class_changes(self, cls: ClassInfo) -> dict[str, list[Change]]:
        merged: dict[str, list[Change]] = {}
        for attr, changes in self.own_class_changes(cls).items():
            merged.setdefault(attr, []).extend(changes)
        for base in self.resolver.base_classes(cls):
            for attr, changes in self.class_changes(base).items():
                merged.setdefault(attr, []).extend(changes)
        return merged

    def setup_names(self, class_node: cst.ClassDef) -> set[str]:
        """`__init__`, the setup methods and the methods `__init__` calls, of one class."""
        key = id(class_node)
        if key not in self._setup:
            methods = {statement.name.value: statement for statement in class_node.body.body
                       if isinstance(statement, cst.FunctionDef)}
            self._setup[key] = self.setup_methods(methods)
        return self._setup[key]

    def own_class_changes(self, cls: ClassInfo) -> dict[str, list[Change]]:
        methods = {statement.name.value: statement for statement in cls.node.body.body
                   if isinstance(statement, cst.FunctionDef)}
        setup = self.setup_names(cls.node)
        found: dict[str, list[Change]] = {}
        for name, method in methods.items():
            if name in setup or is_staticmethod(method):
                continue  # classmethods count: `cls.X = ...` changes a class attribute
            params = [*method.params.posonly_params, *method.params.params]
            if not params:
                continue
            collector = ClassWriteCollector(cls.module, params[0].name.value,
                                            f"{cls.qualname}.{name}")
            collector.memo = memo_containers(method)
            collector.walk(method.body)
            for attr, changes in collector.found.items():
                found.setdefault(attr, []).extend(changes)
        if cls.scope.parent is not None and cls.scope.parent.kind == ScopeKind.MODULE:
            own = cls.node.name.value
            for (class_name, attr), changes in self.module_writes(cls.module).class_writes.items():
                if class_name == own:
                    found.setdefault(attr, []).extend(changes)
        return found

    @staticmethod
    def setup_methods(methods: dict[str, cst.FunctionDef]) -> set[str]:
        """`__init__` and friends, and the methods they call on `self` (transitively)."""
        setup = {name for name in methods if name in SETUP_METHODS}
        pending = list(setup)
        while pending:
            method = methods[pending.pop()]
            params = [*method.params.posonly_params, *method.params.params]
            if not params:
                continue
            self_name = params[0].name.value
            for call in calls_in(method):
                func = call.func
                if (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
                        and func.value.value == self_name and func.attr.value in methods
                        and func.attr.value not in setup):
                    setup.add(func.attr.value)
                    pending.append(func.attr.value)
        return setup


def names_used_as_decorators(module: SourceModule) -> set[str]:
    """Names of the functions this module uses as decorators (`@name`, `@name(...)`,
    `@obj.name`), read from the definitions its scopes hold rather than a walk of the tree."""
    names: set[str] = set()
    for scope in module.scopes.scope_of.values():
        if not isinstance(scope.node, (cst.FunctionDef, cst.ClassDef)):
            continue
        for decorator in scope.node.decorators:
            expr = decorator.decorator
            if isinstance(expr, cst.Call):
                expr = expr.func
            if isinstance(expr, cst.Name):
                names.add(expr.value)
            elif isinstance(expr, cst.Attribute):
                names.add(expr.attr.value)
    return names


class _Calls(Visitor):
    def __init__(self) -> None:
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    collector = _Calls()
    collector.walk(node)
    return collector.calls


MUTATOR_PATTERN = "|".join(sorted(CONTAINER_MUTATORS)) + r"|[A-Za-z]\w*_"


def changes_through_name(name: str) -> re.Pattern[str]:
    """What a file that did `from m import NAME` must contain to change `m.NAME` (the
    collector records nothing else): an item or attribute under it assigned, a mutating
    method called on it or under it (`NAME.append(...)`, `NAME.w.copy_(...)`), or `del`.
    A file without any of them is not parsed to look."""
    root = rf"(?<![\w.]){re.escape(name)}"
    under = r"(?:\s*\.\s*\w+|\s*\[[^\n]*?\])"
    return re.compile(
        rf"{root}{under}+\s*(?:(?:[-+*/%&|^@]|//|\*\*|<<|>>)?=(?!=))"
        rf"|{root}{under}*\s*\.\s*(?:{MUTATOR_PATTERN})\s*\("
        rf"|\bdel\s+{re.escape(name)}\b")

