"""Plain facts about one file, from CPython's `ast`: what the call graph and the phases read.

A `FileSummary` holds, per function (qualified as the scopes name them, `Class.method`,
`outer.inner`; `""` for the module body): the calls it makes by name and receiver form, its
training windows (the rows from a forward call to the `.backward()` that follows it), the
hooks it registers, and the attribute writes it makes on objects other than its own `self`
(`self.blocks[0].gate = ...`, `for layer in model.layers: layer.scale = s`).

Everything here is plain data built from `ast` (about a tenth of libcst's parse), so that it
can be kept between runs; nothing looks at another file.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from ckptlint.analysis.apis import BUILTIN_APIS, SiteKind
from ckptlint.analysis.changes import ChangeHow
from ckptlint.analysis.mutators import CONTAINER_MUTATORS, is_mutator
from ckptlint.analysis.segment import FRAMEWORK_PACKAGES
from ckptlint.syntax.ast_nodes import child_nodes, walk_nodes

FORWARD_HOOKS = frozenset({"register_forward_hook", "register_forward_pre_hook",
                           "register_module_forward_hook", "register_module_forward_pre_hook"})
BACKWARD_HOOKS = frozenset({
    "register_hook", "register_full_backward_hook", "register_backward_hook",
    "register_full_backward_pre_hook", "register_post_accumulate_grad_hook",
    "register_multi_grad_hook", "register_module_full_backward_hook",
    "register_module_backward_hook", "register_module_full_backward_pre_hook",
})
# `loss.backward()`, `accelerator.backward(loss)`, Lightning's `self.manual_backward(loss)`,
# `torch.autograd.backward(loss)`: the calls that end a training step's forward.
BACKWARD_CALLS = frozenset({"backward", "manual_backward"})
# Methods that only move, reshape or look at data: a statement calling only these (and
# builtins and framework functions) is data preparation, not the model's forward.
DATA_METHODS = frozenset({
    "to", "cuda", "cpu", "float", "half", "bfloat16", "double", "long", "int", "bool",
    "contiguous", "pin_memory", "detach", "clone", "items", "keys", "values", "get", "pop",
    "view", "reshape", "squeeze", "unsqueeze", "permute", "transpose", "flatten", "size",
    "numel", "item", "tolist", "format", "join", "split", "zero_grad", "copy", "type",
})
BUILTIN_NAMES = frozenset(dir(builtins))
# Nodes the summary's walk does not enter: nothing it records is under them.
LEAF_TYPES = frozenset({
    ast.Name, ast.Constant, ast.Pass, ast.Break, ast.Continue, ast.Global, ast.Nonlocal,
    *(kind for base in (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
      for kind in base.__subclasses__()),
})
# Framework functions that run the function they are given: a call of one is a forward.
RUNS_A_FUNCTION = frozenset(api.qualname for api in BUILTIN_APIS.values()
                            if api.kind in (SiteKind.FUNCTION, SiteKind.SEQUENTIAL))


@dataclass(frozen=True, slots=True)
class CallSite:
    """A call (or a function passed as an argument) by name: `f(...)`, `self.m(...)`."""

    name: str
    receiver: str  # "bare" (`f(...)`), "self", "super" (`super().m(...)`) or "other"
    row: int
    caller: str  # the qualified name of the function holding it ("" at module level)
    # For "other": the module the receiver names through an import, "." first when the
    # import is relative (`from . import x`: always one of the project's own).
    module: str = ""


@dataclass(frozen=True, slots=True)
class HookRegistration:
    """`x.register_forward_hook(fn)`: `fn` runs in the forward (or the backward) later."""

    name: str
    receiver: str  # how `fn` is named: "bare", "self" or "other"
    kind: str  # "forward" or "backward"
    row: int
    caller: str


@dataclass(frozen=True, slots=True)
class AttributeWrite:
    """`R.attr = ...` (or `+=`, `del`, `R.attr[k] = ...`, `R.attr.append(...)`) on an object
    `R` other than the function's own `self`."""

    attr: str
    row: int
    function: str
    how: ChangeHow
    accumulates: bool
    # What `R` is: "typed" (an instance of one of `classes`), "element" (an element of a
    # collection: of `classes` when known, else of anything) or "unknown".
    receiver: str
    classes: frozenset[str] = frozenset()


@dataclass(slots=True)
class FunctionSummary:
    qualname: str
    name: str
    cls: str | None  # the class's qualified name, for methods
    decorators: tuple[str, ...] = ()
    # Rows [start, end) from a forward call to the `.backward()` after it.
    windows: list[tuple[int, int]] = field(default_factory=list)
    # It runs training steps: rows outside its windows run between steps.
    driver: bool = False
    # What calling it does: "full" (a forward and its backward), "backward" (the backward of
    # a forward its caller ran) or "" (neither).
    step: str = ""

    @property
    def is_property_setter(self) -> bool:
        return any(d.endswith(".setter") for d in self.decorators)


@dataclass(slots=True)
class FileSummary:
    functions: dict[str, FunctionSummary] = field(default_factory=dict)
    classes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # -> base names (last part)
    # -> the sites calling that name (`StoredCalls` when read back from the summary store)
    calls: Mapping[str, list[CallSite]] = field(default_factory=dict)
    hooks: dict[str, list[HookRegistration]] = field(default_factory=dict)
    attribute_writes: dict[str, list[AttributeWrite]] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted name


def summarize(text: str) -> FileSummary | None:
    """The summary of a file's text (None when CPython cannot parse it)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    try:
        return _Summarizer(tree).run()
    except RecursionError:
        return None


def last_part(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def root_id(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


@dataclass
class _Function:
    """A function being summarized, with what its windows and writes need."""

    summary: FunctionSummary
    node: ast.AST  # FunctionDef, AsyncFunctionDef or Module
    self_name: str | None
    params: dict[str, ast.arg]
    backward_rows: list[tuple[int, ast.Call]] = field(default_factory=list)
    # Calls by bare name or on `self` (for calls of this file's step functions).
    local_calls: list[tuple[int, ast.Call]] = field(default_factory=list)
    loops: dict[str, ast.expr] = field(default_factory=dict)  # loop variable -> collection
    assigned: dict[str, ast.expr] = field(default_factory=dict)  # local -> value assigned
    # Attribute writes on other objects: (target, how, accumulates, row, isinstance guards).
    writes: list[tuple[ast.Attribute, ChangeHow, bool, int, dict[str, set[str]]]] = field(
        default_factory=list)


class _Summarizer:
    """One walk over the tree; windows and receivers are worked out at the end."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.calls: dict[str, list[CallSite]] = {}  # the summary's, being built
        self.out = FileSummary(calls=self.calls)
        self.functions: list[_Function] = []
        self.defined: set[str] = set()  # names of the functions defined in the file
        self.relative: set[str] = set()  # local names a relative import binds (so far)
        # References to names passed as arguments, kept until `defined` is complete.
        self.references: list[CallSite] = []
        # Class qualname -> attribute -> class names called in the values `self.attr` is
        # assigned (for `self.blocks[0].gate = ...`).
        self.self_assigned: dict[str, dict[str, set[str]]] = {}

    def run(self) -> FileSummary:
        module = _Function(FunctionSummary("", "", None), self.tree, None, {})
        self.out.functions[""] = module.summary
        self.functions.append(module)
        self.walk_block(self.tree.body, module, [], None, {})
        for site in self.references:
            if site.name in self.defined or site.name in self.out.imports:
                self.calls.setdefault(site.name, []).append(site)
        for function in self.functions:
            for target, how, accumulates, row, guards in function.writes:
                self.add_attribute_write(function, target, how, accumulates, row, guards)
        if any(function.backward_rows for function in self.functions):
            self.find_windows()
        return self.out

    # -- the walk --------------------------------------------------------------------------
    def walk_block(self, statements: list[ast.stmt], function: _Function, names: list[str],
                   cls: str | None, guards: dict[str, set[str]]) -> None:
        for statement in statements:
            self.walk(statement, function, names, cls, guards)

    def walk(self, node: ast.AST, function: _Function, names: list[str], cls: str | None,
             guards: dict[str, set[str]]) -> None:
        """Pre-order, as the facts depend on order (a call sees the imports above it); nodes
        of `LEAF_TYPES` are not entered."""
        visit = self.VISITS.get(type(node))
        if visit is not None and not visit(self, node, function, names, cls, guards):
            return
        for child in child_nodes(node):
            if type(child) not in LEAF_TYPES:
                self.walk(child, function, names, cls, guards)

    # Each `visit_*` records its node and returns whether the walk enters the children.
    def visit_class(self, node: ast.ClassDef, function: _Function, names: list[str],
                    cls: str | None, guards: dict[str, set[str]]) -> bool:
        qualname = ".".join([*names, node.name])
        self.out.classes[qualname] = tuple(last_part(d) for d in map(dotted, node.bases) if d)
        for expr in [*node.decorator_list, *node.bases]:
            self.walk(expr, function, names, cls, guards)
        self.walk_block(node.body, function, [*names, node.name], qualname, guards)
        return False

    def visit_import(self, node: ast.Import, *_: object) -> bool:
        for alias in node.names:
            local = alias.asname or alias.name.split(".", 1)[0]
            self.out.imports[local] = alias.name if alias.asname else local
            self.relative.discard(local)
        return False

    def visit_import_from(self, node: ast.ImportFrom, *_: object) -> bool:
        for alias in node.names:
            local = alias.asname or alias.name
            self.out.imports[local] = (f"{node.module}.{alias.name}"
                                       if node.module and not node.level else alias.name)
            if node.level:
                self.relative.add(local)
            else:
                self.relative.discard(local)
        return False

    def visit_call(self, node: ast.Call, function: _Function, names: list[str],
                   cls: str | None, guards: dict[str, set[str]]) -> bool:
        self.call(node, function, guards)
        return True

    def visit_write(self, node: ast.stmt, function: _Function, names: list[str],
                    cls: str | None, guards: dict[str, set[str]]) -> bool:
        self.statement_writes(node, function, cls, guards)
        return True

    def visit_for(self, node: ast.For | ast.AsyncFor, function: _Function, *_: object) -> bool:
        for name, element in loop_names(node.target, node.iter):
            function.loops.setdefault(name, element)
        return True

    def visit_if(self, node: ast.If, function: _Function, names: list[str], cls: str | None,
                 guards: dict[str, set[str]]) -> bool:
        inner = isinstance_names(node.test)
        if not inner:
            return True
        self.walk(node.test, function, names, cls, guards)
        self.walk_block(node.body, function, names, cls, {**guards, **inner})
        self.walk_block(node.orelse, function, names, cls, guards)
        return False

    def visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, function: _Function,
                       names: list[str], cls: str | None, guards: dict[str, set[str]]) -> bool:
        self.enter_function(node, function, names, cls, guards)
        return False

    VISITS: dict[type[ast.AST], Callable[..., bool]] = {
        ast.FunctionDef: visit_function, ast.AsyncFunctionDef: visit_function,
        ast.ClassDef: visit_class, ast.Import: visit_import, ast.ImportFrom: visit_import_from,
        ast.Call: visit_call, ast.Assign: visit_write, ast.AnnAssign: visit_write,
        ast.AugAssign: visit_write, ast.Delete: visit_write, ast.For: visit_for,
        ast.AsyncFor: visit_for, ast.If: visit_if,
    }

    def enter_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, outer: _Function,
                       names: list[str], cls: str | None,
                       guards: dict[str, set[str]]) -> None:
        for expr in [*node.decorator_list, *node.args.defaults,
                     *(d for d in node.args.kw_defaults if d is not None)]:
            self.walk(expr, outer, names, cls, guards)
        self.defined.add(node.name)
        decorators = tuple(name for name in map(dotted, (
            d.func if isinstance(d, ast.Call) else d for d in node.decorator_list)) if name)
        summary = FunctionSummary(".".join([*names, node.name]), node.name, cls, decorators)
        self.out.functions[summary.qualname] = summary
        positional = [*node.args.posonlyargs, *node.args.args]
        params = {arg.arg: arg for arg in [*positional, *node.args.kwonlyargs]}
        self_name = (positional[0].arg if cls is not None and positional
                     and "staticmethod" not in decorators else None)
        function = _Function(summary, node, self_name, params)
        self.functions.append(function)
        self.walk_block(node.body, function, [*names, node.name], None, {})

    # -- calls -----------------------------------------------------------------------------
    def call(self, node: ast.Call, function: _Function, guards: dict[str, set[str]]) -> None:
        caller = function.summary.qualname
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in BACKWARD_CALLS \
                and not is_super_call(func.value):
            function.backward_rows.append((node.lineno, node))
        if isinstance(func, ast.Attribute) and is_mutator(func.attr) \
                and isinstance(func.value, ast.Attribute):
            function.writes.append((func.value, ChangeHow.MUTATED, True, node.lineno, guards))
        site = self.call_site(function, func, node.lineno)
        if site is not None:
            self.calls.setdefault(site.name, []).append(site)
            if site.receiver in ("bare", "self"):
                function.local_calls.append((node.lineno, node))
        called = (func.attr if isinstance(func, ast.Attribute)
                  else func.id if isinstance(func, ast.Name) else "")
        hook_kind = ("forward" if called in FORWARD_HOOKS
                     else "backward" if called in BACKWARD_HOOKS else None)
        for argument in [*node.args, *(k.value for k in node.keywords)]:
            reference = self.reference(function, argument, node.lineno, hook_kind is not None)
            if reference is None:
                continue
            if hook_kind is not None:
                self.out.hooks.setdefault(reference.name, []).append(HookRegistration(
                    reference.name, reference.receiver, hook_kind, node.lineno, caller))
            elif reference.receiver == "bare":
                self.references.append(reference)  # kept if it names a function
            else:
                self.calls.setdefault(reference.name, []).append(reference)

    def call_site(self, function: _Function, func: ast.expr, row: int) -> CallSite | None:
        caller = function.summary.qualname
        if isinstance(func, ast.Name):
            return CallSite(func.id, "bare", row, caller)
        if not isinstance(func, ast.Attribute):
            return None
        value = func.value
        if isinstance(value, ast.Name) and value.id == function.self_name:
            return CallSite(func.attr, "self", row, caller)
        if is_super_call(value):
            return CallSite(func.attr, "super", row, caller)
        module = ""
        name = dotted(value)
        if name is not None:
            head, _, rest = name.partition(".")
            imported = self.out.imports.get(head)
            if imported is not None:
                module = f"{imported}.{rest}" if rest else imported
                if head in self.relative:
                    module = f".{module}"
        return CallSite(func.attr, "other", row, caller, module)

    def reference(self, function: _Function, argument: ast.expr, row: int,
                  hook: bool) -> CallSite | None:
        """A function passed as an argument: `fn`, `self.method`, `partial(fn, ...)`; for a
        hook, any `obj.method`."""
        if isinstance(argument, ast.Call) and argument.args \
                and last_part(dotted(argument.func) or "") == "partial":
            return self.reference(function, argument.args[0], row, hook)
        if isinstance(argument, ast.Name):
            return (self.call_site(function, argument, row)
                    if argument.id not in BUILTIN_NAMES else None)
        if isinstance(argument, ast.Attribute):
            site = self.call_site(function, argument, row)
            if site is not None and (hook or site.receiver in ("self", "super")):
                return site
        return None

    # -- writes ----------------------------------------------------------------------------
    def statement_writes(self, node: ast.stmt, function: _Function, cls: str | None,
                         guards: dict[str, set[str]]) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    function.assigned.setdefault(target.id, node.value)
                elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                      and target.value.id == function.self_name
                      and function.summary.cls is not None):
                    self.self_assigned.setdefault(function.summary.cls, {}).setdefault(
                        target.attr, set()).update(called_names(node.value))
        for target, how, accumulates in written_targets(node):
            function.writes.append((target, how, accumulates, node.lineno, guards))

    def add_attribute_write(self, function: _Function, target: ast.Attribute, how: ChangeHow,
                            accumulates: bool, row: int, guards: dict[str, set[str]]) -> None:
        receiver = target.value
        if isinstance(receiver, ast.Name) and (receiver.id in (function.self_name, "self",
                                                                "cls")
                                               or receiver.id in self.out.imports):
            return  # the object's own attribute, or a module's global (`settings.X = ...`)
        kind, classes = self.receiver_shape(function, receiver, guards)
        self.out.attribute_writes.setdefault(target.attr, []).append(AttributeWrite(
            target.attr, row, function.summary.qualname, how, accumulates, kind,
            frozenset(classes)))

    def receiver_shape(self, function: _Function, receiver: ast.expr,
                       guards: dict[str, set[str]]) -> tuple[str, set[str]]:
        if isinstance(receiver, ast.Subscript):
            return self.element_shape(function, receiver.value)
        if isinstance(receiver, ast.Attribute):
            if isinstance(receiver.value, ast.Name) and receiver.value.id == function.self_name:
                names = self.self_attribute_classes(function, receiver.attr)
                return ("typed", names) if names else ("unknown", set())
            return "unknown", set()
        if not isinstance(receiver, ast.Name):
            return "unknown", set()
        name = receiver.id
        if name in guards:
            return "typed", guards[name]
        param = function.params.get(name)
        if param is not None:
            if param.annotation is None:
                return "unknown", set()
            dotted_names = (dotted(n) for n in walk_nodes(param.annotation)
                            if isinstance(n, ast.expr))
            return "typed", {last_part(n) for n in dotted_names if n} - {"Optional"}
        if name in function.loops:
            return self.element_shape(function, function.loops[name])
        value = function.assigned.get(name)
        if isinstance(value, ast.Call):
            return "typed", called_names(value)
        return "unknown", set()

    def element_shape(self, function: _Function, container: ast.expr) -> tuple[str, set[str]]:
        """An element of `container`: of the classes its assignment builds, when known."""
        if (isinstance(container, ast.Attribute) and isinstance(container.value, ast.Name)
                and container.value.id == function.self_name):
            return "element", self.self_attribute_classes(function, container.attr)
        return "element", set()

    def self_attribute_classes(self, function: _Function, attr: str) -> set[str]:
        cls = function.summary.cls
        return set(self.self_assigned.get(cls, {}).get(attr, set())) if cls else set()

    # -- windows ---------------------------------------------------------------------------
    def find_windows(self) -> None:
        """Windows at direct `.backward()` calls, then at calls of this file's functions that
        run a step's backward; a function calling one that runs whole steps runs them too.
        Repeated until nothing changes."""
        by_name = {function.summary.name: function for function in self.functions
                   if function.summary.qualname}
        for function in self.functions:
            for row, call in function.backward_rows:
                self.add_window(function, row, backward_names(call))
        done: set[tuple[int, int]] = set()
        changed = True
        while changed:
            changed = False
            for function in self.functions:
                for row, call in function.local_calls:
                    callee = self.local_callee(function, call.func, by_name)
                    if (callee is None or callee is function or not callee.summary.step
                            or (id(function), row) in done):
                        continue
                    done.add((id(function), row))
                    changed = True
                    if callee.summary.step == "full":
                        function.summary.driver = True
                        function.summary.step = "full"
                    else:
                        self.add_window(function, row, call_names(call))

    def local_callee(self, function: _Function, func: ast.expr,
                     by_name: dict[str, _Function]) -> _Function | None:
        if isinstance(func, ast.Name):
            callee = by_name.get(func.id)
            return callee if callee is not None and callee.summary.cls is None else None
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == function.self_name):
            callee = by_name.get(func.attr)
            if callee is not None and callee.summary.cls == function.summary.cls:
                return callee
        return None

    def add_window(self, function: _Function, row: int, needed: set[str]) -> None:
        start, forward_found = window_start(function.node, row, needed, self.out.imports)
        summary = function.summary
        summary.windows.append((start, row))
        summary.driver = True
        if forward_found:
            summary.step = "full"
        elif not summary.step:
            summary.step = "backward"


def is_super_call(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "super")


def called_names(node: ast.AST) -> set[str]:
    """The last parts of the names called anywhere in `node` (`nn.ModuleList`, `Block`)."""
    return {last_part(name) for call in walk_nodes(node) if isinstance(call, ast.Call)
            for name in [dotted(call.func)] if name}


def written_targets(node: ast.AST) -> Iterator[tuple[ast.Attribute, ChangeHow, bool]]:
    """(attribute target, how, accumulates) for each attribute a statement changes: `R.a = v`
    (accumulates when `v` reads `R.a`), `R.a += v`, `del R.a`, and `R.a[k] = v`, `R.a.b = v`
    (mutations of `R.a`)."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        value = node.value
        if value is None:
            return
        targets: list[ast.expr] = (list(node.targets) if isinstance(node, ast.Assign)
                                   else [node.target])
        for target in flat_targets(targets):
            if isinstance(target, ast.Attribute):
                text = ast.unparse(target)
                reads_itself = any(isinstance(sub, ast.Attribute) and ast.unparse(sub) == text
                                   for sub in walk_nodes(value))
                yield target, ChangeHow.REASSIGNED, reads_itself
            inner = mutated_attribute(target)
            if inner is not None:
                yield inner, ChangeHow.MUTATED, True
    elif isinstance(node, ast.AugAssign):
        if isinstance(node.target, ast.Attribute):
            yield node.target, ChangeHow.UPDATED, True
        inner = mutated_attribute(node.target)
        if inner is not None:
            yield inner, ChangeHow.MUTATED, True
    elif isinstance(node, ast.Delete):
        for target in node.targets:
            if isinstance(target, ast.Attribute):
                yield target, ChangeHow.DELETED, False
            inner = mutated_attribute(target)
            if inner is not None:
                yield inner, ChangeHow.MUTATED, True


def mutated_attribute(target: ast.expr) -> ast.Attribute | None:
    """`R.a` for `R.a[k]` and `R.a.b` targets: the attribute whose object changes."""
    if isinstance(target, (ast.Subscript, ast.Attribute)) \
            and isinstance(target.value, ast.Attribute):
        return target.value
    return None


def flat_targets(targets: list[ast.expr]) -> Iterator[ast.expr]:
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            yield from flat_targets(list(target.elts))
        elif isinstance(target, ast.Starred):
            yield from flat_targets([target.value])
        else:
            yield target


def loop_names(target: ast.expr, iterated: ast.expr) -> Iterator[tuple[str, ast.expr]]:
    """(name, the collection whose elements it takes) for each name `for <target> in
    <iterated>` binds (`enumerate`/`zip` see through)."""
    if isinstance(target, ast.Name):
        yield target.id, iterated
        return
    if not isinstance(target, ast.Tuple):
        return
    function = last_part(dotted(iterated.func) or "") if isinstance(iterated, ast.Call) else ""
    args = iterated.args if isinstance(iterated, ast.Call) else []
    for index, element in enumerate(target.elts):
        if function == "enumerate" and index == 1 and args:
            inner: ast.expr = args[0]
        elif function == "zip" and index < len(args):
            inner = args[index]
        else:
            inner = iterated  # `for name, module in model.named_modules()`
        if isinstance(element, ast.Name):
            yield element.id, inner
        elif isinstance(element, ast.Tuple):
            yield from loop_names(element, inner)


def isinstance_names(test: ast.expr) -> dict[str, set[str]]:
    """Names an `if` test checks with `isinstance(name, ...)`, and the class names."""
    found: dict[str, set[str]] = {}
    for call in walk_nodes(test):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "isinstance" and len(call.args) == 2
                and isinstance(call.args[0], ast.Name)):
            kinds = call.args[1]
            elements = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
            found[call.args[0].id] = {last_part(n) for n in map(dotted, elements) if n}
    return found


# -- training windows ------------------------------------------------------------------------
def backward_names(call: ast.Call) -> set[str]:
    """Names the backward's tensor comes from: the receiver of `loss.backward()`, the
    arguments of `accelerator.backward(loss)`, both of `scaler.scale(loss).backward()`."""
    func = call.func
    names = call_names(call)
    if isinstance(func, ast.Attribute) and not call.args:
        names |= {n.id for n in walk_nodes(func.value) if isinstance(n, ast.Name)}
    return names


def call_names(call: ast.Call) -> set[str]:
    return {n.id for argument in call.args for n in walk_nodes(argument) if isinstance(n, ast.Name)}


def window_start(function: ast.AST, row: int, needed: set[str],
                 imports: dict[str, str]) -> tuple[int, bool]:
    """(first row of the window ending at the backward on `row`, whether the forward was
    found): walking back from the backward's statement through the statements it depends
    on, up to the start of the innermost loop body (one training step) or of the function,
    the earliest one that calls something other than data movement, builtins and framework
    functions is the forward call."""
    frames = statement_frames(function, row)
    needed = set(needed)
    start: int | None = None
    boundary = frames[0][0][0].lineno if frames and frames[0][0] else row
    for block, index, loop_body in reversed(frames):
        for statement in reversed(block[:index]):
            if not assigned_names(statement) & needed:
                continue
            needed |= read_names(statement)
            if is_model_like(statement, imports):
                start = statement.lineno
        if loop_body:
            boundary = block[0].lineno
            break
    return (start if start is not None else boundary), start is not None


def statement_frames(function: ast.AST, row: int) -> list[tuple[list[ast.stmt], int, bool]]:
    """The blocks from the function body down to the statement holding `row`: (block, index
    of the statement in it, whether the block is a loop body)."""
    frames: list[tuple[list[ast.stmt], int, bool]] = []
    block: list[ast.stmt] = list(getattr(function, "body", []))
    loop_body = False
    while block:
        for index, statement in enumerate(block):
            end = getattr(statement, "end_lineno", statement.lineno) or statement.lineno
            if statement.lineno <= row <= end:
                frames.append((block, index, loop_body))
                inner = child_block(statement, row)
                if inner is None:
                    return frames
                block, loop_body = inner
                break
        else:
            return frames
    return frames


def child_block(statement: ast.stmt, row: int) -> tuple[list[ast.stmt], bool] | None:
    """The block of a compound statement that holds `row`, and whether it is a loop body."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return None
    loop = isinstance(statement, (ast.For, ast.AsyncFor, ast.While))
    blocks: list[tuple[list[ast.stmt], bool]] = []
    for name in ("body", "orelse", "finalbody"):
        value = getattr(statement, name, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            blocks.append((value, loop and name == "body"))
    for handler in getattr(statement, "handlers", []):
        blocks.append((handler.body, False))
    for case in getattr(statement, "cases", []):
        blocks.append((case.body, False))
    for block, is_loop in blocks:
        first = block[0].lineno
        last = getattr(block[-1], "end_lineno", None) or block[-1].lineno
        if first <= row <= last:
            return block, is_loop
    return None


def assigned_names(statement: ast.stmt) -> set[str]:
    return {n.id for n in walk_nodes(statement)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def read_names(statement: ast.stmt) -> set[str]:
    return {n.id for n in walk_nodes(statement)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def is_model_like(statement: ast.stmt, imports: dict[str, str]) -> bool:
    """The statement calls something that may run a model: not only data movement
    (`.to(device)`), builtins (`next`, `len`) and framework functions (`torch.cat`); a
    checkpoint call (`checkpoint(block, x)`) runs one."""
    for node in walk_nodes(statement):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if imported_name(func, imports) in RUNS_A_FUNCTION:
            return True
        if isinstance(func, ast.Name):
            if func.id in BUILTIN_NAMES or is_framework_name(imports.get(func.id)):
                continue
            return True
        if isinstance(func, ast.Attribute):
            if func.attr in DATA_METHODS or func.attr in CONTAINER_MUTATORS:
                continue
            root = root_id(func)
            if root is not None and is_framework_name(imports.get(root)):
                continue
            return True
        return True
    return False


def imported_name(func: ast.expr, imports: dict[str, str]) -> str | None:
    """The dotted name a callee denotes through the file's imports (`cp.checkpoint` after
    `import torch.utils.checkpoint as cp`)."""
    name = dotted(func)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    imported = imports.get(head)
    if imported is None:
        return None
    return f"{imported}.{rest}" if rest else imported


def is_framework_name(qualname: str | None) -> bool:
    return qualname is not None and qualname.split(".", 1)[0] in FRAMEWORK_PACKAGES


# -- as plain data (the summary store keeps summaries between runs) ----------------------------
# A name's call sites are stored as one string, "receiver row caller module" joined by ";"
# (names and qualified names never hold a space or a ";"): JSON reads one string per name
# about three times as fast as a list of lists per name, and most of a summary is its calls.
SITE_SEPARATOR = ";"


def summary_to_plain(summary: FileSummary) -> dict:
    """The summary as JSON data; `summary_from_plain` reads it back (field order kept)."""
    return {
        "functions": [[f.qualname, f.name, f.cls, list(f.decorators),
                       [list(window) for window in f.windows], f.driver, f.step]
                      for f in summary.functions.values()],
        "classes": {name: list(bases) for name, bases in summary.classes.items()},
        "calls": {name: SITE_SEPARATOR.join(f"{s.receiver} {s.row} {s.caller} {s.module}"
                                            for s in sites)
                  for name, sites in summary.calls.items()},
        "hooks": {name: [[h.receiver, h.kind, h.row, h.caller] for h in hooks]
                  for name, hooks in summary.hooks.items()},
        "writes": {attr: [[w.row, w.function, w.how.value, w.accumulates, w.receiver,
                           sorted(w.classes)] for w in writes]
                   for attr, writes in summary.attribute_writes.items()},
        "imports": dict(summary.imports),
    }


def summary_from_plain(data: object) -> FileSummary:
    """What `summary_to_plain` wrote, every field checked (`ShapeError` otherwise); the calls
    of each name when first asked for (`StoredCalls`)."""
    from ckptlint.storage.plain_data import (
        ShapeError,
        member,
        want_dict,
        want_int,
        want_list,
        want_optional_str,
        want_str,
        want_strs,
    )

    def fields(value: object, count: int, what: str) -> list:
        items = want_list(value, what)
        if len(items) != count:
            raise ShapeError(f"{what}: expected {count} fields")
        return items

    def want_bool(value: object, what: str) -> bool:
        if type(value) is not bool:
            raise ShapeError(f"{what}: expected true or false")
        return value

    out = FileSummary()
    for item in want_list(member(data, "functions"), "functions"):
        qualname, name, cls, decorators, windows, driver, step = fields(item, 7, "function")
        spans = []
        for window in want_list(windows, "windows"):
            start, end = fields(window, 2, "window")
            spans.append((want_int(start, "window"), want_int(end, "window")))
        out.functions[want_str(qualname, "function")] = FunctionSummary(
            qualname, want_str(name, "function name"), want_optional_str(cls, "class"),
            want_strs(decorators, "decorators"), spans, want_bool(driver, "driver"),
            want_str(step, "step"))
    for name, bases in want_dict(member(data, "classes"), "classes").items():
        out.classes[name] = want_strs(bases, "bases")
    out.calls = StoredCalls(want_dict(member(data, "calls"), "calls"))
    for name, hooks in want_dict(member(data, "hooks"), "hooks").items():
        out.hooks[name] = [
            HookRegistration(name, want_str(receiver, "receiver"), want_str(kind, "kind"),
                             want_int(row, "row"), want_str(caller, "caller"))
            for receiver, kind, row, caller in (fields(h, 4, "hook") for h in
                                                want_list(hooks, "hooks"))]
    for attr, writes in want_dict(member(data, "writes"), "writes").items():
        found = []
        for write in want_list(writes, "writes"):
            row, function, how, accumulates, receiver, classes = fields(write, 6, "write")
            try:
                change = ChangeHow(want_str(how, "how"))
            except ValueError:
                raise ShapeError("write: unknown change") from None
            found.append(AttributeWrite(attr, want_int(row, "row"), want_str(function, "function"),
                                        change, want_bool(accumulates, "accumulates"),
                                        want_str(receiver, "receiver"),
                                        frozenset(want_strs(classes, "classes"))))
        out.attribute_writes[attr] = found
    for name, target in want_dict(member(data, "imports"), "imports").items():
        out.imports[name] = want_str(target, "import")
    return out


class StoredCalls(Mapping[str, list[CallSite]]):
    """`FileSummary.calls` read back from plain data. A file's summary lists every name the
    file calls (most of its size) and a question asks about one name: each name's sites are
    checked and built when first asked for, and one of the wrong shape raises `ShapeError`
    then (`PhaseFinder.calls_of` summarises that file again)."""

    __slots__ = ("_plain", "_built")

    def __init__(self, plain: dict) -> None:
        self._plain = plain
        self._built: dict[str, list[CallSite]] = {}

    def __getitem__(self, name: str) -> list[CallSite]:
        built = self._built.get(name)
        if built is None:
            built = self._built[name] = call_sites_from_plain(name, self._plain[name])
        return built

    def __iter__(self) -> Iterator[str]:
        return iter(self._plain)

    def __len__(self) -> int:
        return len(self._plain)


def call_sites_from_plain(name: str, data: object) -> list[CallSite]:
    """The sites `summary_to_plain` wrote as one string (`SITE_SEPARATOR`)."""
    from ckptlint.storage.plain_data import ShapeError, want_int, want_str

    sites: list[CallSite] = []
    text = want_str(data, "calls")
    for site in text.split(SITE_SEPARATOR) if text else ():
        fields = site.split(" ")
        if len(fields) != 4:
            raise ShapeError("call: expected 4 fields")
        receiver, row, caller, module = fields
        # Ten digits at most: `int` of a long run of digits raises ValueError, not ShapeError.
        if not (row.isascii() and row.isdigit() and len(row) <= 10):
            raise ShapeError("call: expected a row")
        sites.append(CallSite(name, receiver, want_int(int(row), "row"), caller, module))
    return sites
