"""Finding checkpoint sites in a module: every call of a checkpoint API under any spelling.

A site is the checkpointing expression: a call (through aliases, `functools.partial`, instance
attributes bound in `__init__`), a `checkpoint_wrapper`/`apply_activation_checkpointing`
application, transformers' `_gradient_checkpointing_func` call, or the `class` statement of a
`GradientCheckpointingLayer` subclass or of a hand-written checkpoint (an `autograd.Function`
that reruns a function in backward, `analysis/hand_rolled.py`). Names are resolved through
imports, never by spelling; resolving the API stays inside the file (no other file is parsed
to find a site).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from ckptlint.analysis import apis
from ckptlint.analysis.apis import CheckpointApi, Mode, SiteKind
from ckptlint.analysis.hand_rolled import HAND_ROLLED_API, HandRolled, hand_rolled_checkpoint
from ckptlint.analysis.resolve import ClassInfo, ClassValue, FunctionValue, InstanceValue, Resolver
from ckptlint.analysis.scopes import (
    ASSIGNED,
    BindingKind,
    Scope,
    ScopeKind,
    bool_value,
    dotted_name,
)
from ckptlint.enums import TextEnum
from ckptlint.findings import SiteRef, TargetRef
from ckptlint.syntax.source import SourceModule
from ckptlint.syntax.walk import Visitor


class ModeSource(TextEnum):
    """How a site's mode is known."""

    EXPLICIT = "explicit"  # `use_reentrant` or `checkpoint_impl` given
    IMPLICIT = "implicit"  # torch's default applies
    API = "api"  # the API has one mode
    UNKNOWN = "unknown"


MAX_ALIAS_DEPTH = 8


@dataclass(frozen=True)
class Argument:
    value: cst.BaseExpression
    origin: cst.Call  # the call that passes it: the site call or a `partial(...)`
    scope: Scope


@dataclass
class CallArguments:
    """The arguments a site passes, with those bound by `partial` first."""

    positional: list[Argument] = field(default_factory=list)
    keywords: dict[str, Argument] = field(default_factory=dict)
    # A `**expr` whose keys cannot be known: any keyword may be passed.
    opaque_keywords: bool = False
    # A `*expr`: positions after it are unknown.
    star_positional: bool = False
    # Calls holding a `**` argument (known or not): fixes never add keywords next to them.
    double_star_calls: list[cst.Call] = field(default_factory=list)

    def positional_at(self, index: int) -> Argument | None:
        if index < len(self.positional):
            return self.positional[index]
        return None


@dataclass(eq=False)
class Site:
    module: SourceModule
    node: cst.Call | cst.ClassDef
    kind: SiteKind
    scope: Scope
    api: CheckpointApi | None = None
    arguments: CallArguments | None = None
    mode: Mode = Mode.UNKNOWN
    mode_source: ModeSource = ModeSource.UNKNOWN
    preserve_rng_state: bool | None = True
    # The transformers name a site without a table API stands for (its layer base class,
    # `gradient_checkpointing_enable`, the training arguments class).
    library_api: str = ""
    # A hand-written checkpoint class (SiteKind.HAND_ROLLED): what it restores itself.
    hand_rolled: HandRolled | None = None
    # Filled by `resolve_targets`.
    targets: list[FunctionValue] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)

    @property
    def ref(self) -> SiteRef:
        start = self.module.start(self.node)
        return SiteRef(self.module.display, start.row, start.column)

    @property
    def target_refs(self) -> tuple[TargetRef, ...]:
        refs = []
        for target in self.targets:
            node = target.node
            first: cst.CSTNode = node
            if isinstance(node, cst.FunctionDef) and node.decorators:
                first = node.decorators[0]
            row = target.module.start(first).row
            refs.append(TargetRef(target.module.display, row, target.qualname))
        return tuple(refs)

    @property
    def api_name(self) -> str:
        """The qualified name of the checkpointing API this site uses."""
        return self.api.qualname if self.api is not None else self.library_api

    @property
    def is_segment(self) -> bool:
        return self.kind not in (SiteKind.HF_ENABLE, SiteKind.HF_ARGS, SiteKind.HAND_ROLLED)

    @property
    def call(self) -> cst.Call | None:
        return self.node if isinstance(self.node, cst.Call) else None


@dataclass(frozen=True)
class ApiRef:
    api: CheckpointApi
    partials: tuple[tuple[cst.Call, Scope], ...] = ()


class SiteFinder(Visitor):
    """Walks one module with its scopes and collects the sites."""

    def __init__(self, module: SourceModule, resolver: Resolver,
                 table: dict[str, CheckpointApi], segment_bases: tuple[str, ...]) -> None:
        self.module = module
        self.resolver = resolver
        self.table = table
        self.layer_bases = frozenset((*apis.HF_LAYER_BASES, *segment_bases))
        self.scopes = module.scopes
        self.stack: list[Scope] = [self.scopes.module_scope]
        self.sites: list[Site] = []
        self.imports_transformers = any(
            binding.kind == BindingKind.IMPORT and (binding.qualname or "").split(".")[0]
            in ("transformers", "peft", "trl")
            for scope in self.scopes.scope_of.values()
            for bindings in scope.bindings.values() for binding in bindings
        )

    # -- scope tracking ----------------------------------------------------------------
    def on_visit(self, node: cst.CSTNode) -> bool:
        scope = self.scopes.scope_of.get(id(node))
        if scope is not None and scope.kind != ScopeKind.MODULE:
            self.stack.append(scope)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        scope = self.scopes.scope_of.get(id(original_node))
        if scope is not None and scope.kind != ScopeKind.MODULE:
            self.stack.pop()

    @property
    def scope(self) -> Scope:
        return self.stack[-1]

    # -- sites -------------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        outer = self.stack[-2] if len(self.stack) > 1 else self.stack[-1]
        base = self.layer_base(node, outer, 0)
        class_scope = self.scopes.scope_of[id(node)]
        if base is not None:
            self.sites.append(Site(self.module, node, SiteKind.HF_LAYER, class_scope,
                                   library_api=base))
            return
        hand_rolled = hand_rolled_checkpoint(
            self.module, node, outer, lambda expr, scope: self.local_qualnames(expr, scope, 0))
        if hand_rolled is not None:
            self.sites.append(Site(self.module, node, SiteKind.HAND_ROLLED, class_scope,
                                   mode=Mode.REENTRANT, mode_source=ModeSource.API,
                                   preserve_rng_state=hand_rolled.restores_rng,
                                   library_api=HAND_ROLLED_API, hand_rolled=hand_rolled))

    def layer_base(self, node: cst.ClassDef, scope: Scope, depth: int) -> str | None:
        """The layer base class (qualified name) `node` derives from, if any."""
        if depth > MAX_ALIAS_DEPTH:
            return None
        for base in node.bases:
            for qualname in sorted(self.local_qualnames(base.value, scope, 0)):
                if qualname in self.layer_bases:
                    return qualname
            if isinstance(base.value, cst.Name):
                for binding in scope.lookup(base.value.value):
                    if isinstance(binding.node, cst.ClassDef):  # BindingKind.CLASS
                        found = self.layer_base(binding.node, binding.scope, depth + 1)
                        if found is not None:
                            return found
        return None

    def visit_Call(self, node: cst.Call) -> None:
        scope = self.scope
        func = node.func
        if isinstance(func, cst.Attribute):
            attr = func.attr.value
            if attr == apis.HF_CHECKPOINT_METHOD:
                self.sites.append(Site(self.module, node, SiteKind.HF_FUNC, scope,
                                       arguments=self.arguments(node, scope, ()),
                                       preserve_rng_state=True,
                                       library_api=apis.HF_CHECKPOINT_API))
                return
            if attr == apis.HF_ENABLE_METHOD and self.imports_transformers:
                self.sites.append(Site(self.module, node, SiteKind.HF_ENABLE, scope,
                                       arguments=self.arguments(node, scope, ()),
                                       library_api=apis.HF_ENABLE_API))
                return
        arguments_classes = self.local_qualnames(func, scope, 0) & set(apis.HF_TRAINING_ARGUMENTS)
        if arguments_classes:
            self.sites.append(Site(self.module, node, SiteKind.HF_ARGS, scope,
                                   arguments=self.arguments(node, scope, ()),
                                   library_api=min(arguments_classes)))
            return
        refs = self.api_refs(func, scope, 0)
        if not refs:
            return
        # Several bindings (try/except imports): take the first in table order, every run.
        order = list(self.table)
        ref = min(refs, key=lambda r: order.index(r.api.qualname))
        arguments = self.arguments(node, scope, ref.partials)
        site = Site(self.module, node, ref.api.kind, scope, api=ref.api, arguments=arguments)
        self.decide_mode(site)
        self.sites.append(site)

    # -- resolving the callee within this file -------------------------------------------
    def local_qualnames(self, expr: cst.BaseExpression, scope: Scope, depth: int) -> set[str]:
        """Qualified names `expr` denotes through imports and aliases of this file."""
        if depth > MAX_ALIAS_DEPTH:
            return set()
        if isinstance(expr, cst.Name):
            names: set[str] = set()
            for binding in scope.lookup(expr.value):
                if binding.kind == BindingKind.IMPORT and binding.qualname:
                    names.add(binding.qualname)
                elif binding.kind == BindingKind.DEF and binding.scope.kind == ScopeKind.MODULE \
                        and self.module.name:
                    # Inside the API's own module (linting torch itself): its calls are sites.
                    names.add(f"{self.module.name}.{expr.value}")
                elif binding.kind in ASSIGNED and binding.value is not None:
                    names |= self.local_qualnames(binding.value, binding.scope, depth + 1)
            return names
        if isinstance(expr, cst.Attribute):
            return {f"{head}.{expr.attr.value}"
                    for head in self.local_qualnames(expr.value, scope, depth + 1)}
        return set()

    def api_refs(self, expr: cst.BaseExpression, scope: Scope, depth: int) -> list[ApiRef]:
        if depth > MAX_ALIAS_DEPTH:
            return []
        names = sorted(self.local_qualnames(expr, scope, depth))
        refs = [ApiRef(self.table[name]) for name in names if name in self.table]
        if refs:
            return refs
        if isinstance(expr, cst.Name):
            for binding in scope.lookup(expr.value):
                if binding.kind in ASSIGNED and binding.value is not None:
                    refs.extend(self.api_refs(binding.value, binding.scope, depth + 1))
        elif isinstance(expr, cst.Attribute):
            owner = self.resolver.self_class(expr.value, self.module, scope)
            if owner is not None and owner.module is self.module:
                assigned = self.resolver.attribute_assignments(owner).get(expr.attr.value, [])
                for value, value_scope in assigned:
                    refs.extend(self.api_refs(value, value_scope, depth + 1))
        elif isinstance(expr, cst.Call) and expr.args and not expr.args[0].star:
            if self.local_qualnames(expr.func, scope, depth + 1) & {"functools.partial"}:
                for inner in self.api_refs(expr.args[0].value, scope, depth + 1):
                    refs.append(ApiRef(inner.api, ((expr, scope), *inner.partials)))
        return refs

    # -- arguments -----------------------------------------------------------------------
    def arguments(self, call: cst.Call, scope: Scope,
                  partials: tuple[tuple[cst.Call, Scope], ...]) -> CallArguments:
        result = CallArguments()
        # Outermost partial binds first; the partial's own first argument is the API itself.
        layers = [(partial, partial_scope, 1) for partial, partial_scope in partials]
        layers.append((call, scope, 0))
        for layer_call, layer_scope, skip in layers:
            positional = [arg for arg in layer_call.args
                          if arg.keyword is None and arg.star != "**"]
            for arg in positional[skip:]:
                if arg.star == "*":
                    result.star_positional = True
                elif not result.star_positional:
                    result.positional.append(Argument(arg.value, layer_call, layer_scope))
            for arg in layer_call.args:
                if arg.keyword is not None:
                    result.keywords[arg.keyword.value] = Argument(arg.value, layer_call,
                                                                  layer_scope)
                elif arg.star == "**":
                    result.double_star_calls.append(layer_call)
                    known = self.dict_keys(arg.value, layer_scope)
                    if known is None:
                        result.opaque_keywords = True
                    else:
                        for key, value in known.items():
                            result.keywords[key] = Argument(value, layer_call, layer_scope)
        return result

    def dict_keys(self, expr: cst.BaseExpression, scope: Scope,
                  depth: int = 0) -> dict[str, cst.BaseExpression] | None:
        """The keys and values a `**expr` passes, or None when they cannot be known."""
        if depth > MAX_ALIAS_DEPTH:
            return None
        if isinstance(expr, cst.Dict):
            keys: dict[str, cst.BaseExpression] = {}
            for element in expr.elements:
                if not isinstance(element, cst.DictElement):
                    return None  # `**other` inside the literal
                key = string_value(element.key)
                if key is None:
                    return None
                keys[key] = element.value
            return keys
        if isinstance(expr, cst.Call) and dotted_name(expr.func) == "dict" \
                and not scope.lookup("dict"):
            keys = {}
            for arg in expr.args:
                if arg.keyword is None:
                    return None
                keys[arg.keyword.value] = arg.value
            return keys
        if isinstance(expr, cst.Name):
            bindings = scope.lookup(expr.value)
            if len(bindings) != 1:
                return None
            binding = bindings[0]
            if binding.kind != BindingKind.ASSIGN or binding.value is None \
                    or expr.value in binding.scope.dict_updates:
                return None
            assigned = self.dict_keys(binding.value, binding.scope, depth + 1)
            if assigned is None:
                return None
            for key_expr, value in binding.scope.item_assignments.get(expr.value, []):
                key = string_value(key_expr)
                if key is None:
                    return None
                assigned[key] = value
            return assigned
        return None

    # -- mode --------------------------------------------------------------------------
    def decide_mode(self, site: Site) -> None:
        api, arguments = site.api, site.arguments
        assert api is not None and arguments is not None
        if api.kind in (SiteKind.FUNCTION, SiteKind.SEQUENTIAL):
            site.preserve_rng_state = self.preserve_rng_state(arguments)
            self.decide_keyword_mode(site, api, arguments)
        elif api.kind == SiteKind.WRAPPER:
            self.decide_wrapper_mode(site, api, arguments.keywords.get("checkpoint_impl")
                                     or arguments.positional_at(1), arguments)
        elif api.kind == SiteKind.APPLY:
            self.decide_apply_mode(site, arguments)
        else:
            site.mode, site.mode_source = Mode.NON_REENTRANT, ModeSource.API

    def decide_keyword_mode(self, site: Site, api: CheckpointApi, arguments: CallArguments) -> None:
        if api.mode == Mode.REENTRANT:
            site.mode, site.mode_source = Mode.REENTRANT, ModeSource.API
            return
        given = arguments.keywords.get("use_reentrant")
        if given is None and api.use_reentrant_index is not None:
            given = arguments.positional_at(api.use_reentrant_index)
        if given is not None:
            flag = bool_value(given.value)
            site.mode = (Mode.UNKNOWN if flag is None
                         else Mode.REENTRANT if flag else Mode.NON_REENTRANT)
            site.mode_source = ModeSource.UNKNOWN if flag is None else ModeSource.EXPLICIT
        elif arguments.opaque_keywords:
            site.mode, site.mode_source = Mode.UNKNOWN, ModeSource.UNKNOWN
        elif api.mode == Mode.TORCH:
            site.mode, site.mode_source = Mode.REENTRANT, ModeSource.IMPLICIT
        else:
            site.mode, site.mode_source = Mode.NON_REENTRANT, ModeSource.API

    def decide_wrapper_mode(self, site: Site, api: CheckpointApi, impl: Argument | None,
                            arguments: CallArguments | None) -> None:
        if api.mode == Mode.REENTRANT:
            site.mode, site.mode_source = Mode.REENTRANT, ModeSource.API
        elif impl is not None:
            names = self.local_qualnames(impl.value, impl.scope, 0)
            if apis.REENTRANT_IMPL in names:
                site.mode, site.mode_source = Mode.REENTRANT, ModeSource.EXPLICIT
            elif any(name.endswith("CheckpointImpl.NO_REENTRANT") for name in names):
                site.mode, site.mode_source = Mode.NON_REENTRANT, ModeSource.EXPLICIT
            else:
                site.mode, site.mode_source = Mode.UNKNOWN, ModeSource.UNKNOWN
        elif arguments is not None and arguments.opaque_keywords:
            site.mode, site.mode_source = Mode.UNKNOWN, ModeSource.UNKNOWN
        else:
            site.mode, site.mode_source = Mode.NON_REENTRANT, ModeSource.API

    def decide_apply_mode(self, site: Site, arguments: CallArguments) -> None:
        wrapper_fn = arguments.keywords.get("checkpoint_wrapper_fn") or arguments.positional_at(1)
        if wrapper_fn is None:
            if arguments.opaque_keywords:
                site.mode, site.mode_source = Mode.UNKNOWN, ModeSource.UNKNOWN
            else:
                site.mode, site.mode_source = Mode.NON_REENTRANT, ModeSource.API
            return
        refs = [ref for ref in self.api_refs(wrapper_fn.value, wrapper_fn.scope, 0)
                if ref.api.kind == SiteKind.WRAPPER]
        if not refs:
            site.mode, site.mode_source = Mode.UNKNOWN, ModeSource.UNKNOWN
            return
        ref = refs[0]
        inner = self.arguments(cst.Call(func=cst.Name("_")), wrapper_fn.scope, ref.partials)
        self.decide_wrapper_mode(site, ref.api, inner.keywords.get("checkpoint_impl"), inner)

    @staticmethod
    def preserve_rng_state(arguments: CallArguments) -> bool | None:
        given = arguments.keywords.get("preserve_rng_state")
        if given is None:
            return None if arguments.opaque_keywords else True
        return bool_value(given.value)


def string_value(expr: cst.BaseExpression | None) -> str | None:
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def find_sites(module: SourceModule, resolver: Resolver, table: dict[str, CheckpointApi],
               segment_bases: tuple[str, ...]) -> list[Site]:
    finder = SiteFinder(module, resolver, table, segment_bases)
    finder.walk(module.tree)
    return finder.sites


def target_expression(site: Site) -> Argument | None:
    """The argument naming what the site checkpoints (None for classes and `apply`)."""
    arguments = site.arguments
    if arguments is None or site.kind in (SiteKind.HF_LAYER, SiteKind.APPLY):
        return None
    index = site.api.target_index if site.api is not None else 0
    return arguments.positional_at(index)


def resolve_targets(site: Site, resolver: Resolver) -> None:
    """Fill `site.targets` with the function bodies the site checkpoints (or say why not)."""
    if not site.is_segment:
        return
    module = site.module
    if site.kind == SiteKind.HF_LAYER:
        assert isinstance(site.node, cst.ClassDef)
        cls = ClassInfo(module, site.node, site.scope)
        method = resolver.find_method(cls, "forward")
        if method is None:
            site.unresolved.append(f"`{cls.qualname}` defines no `forward`")
        else:
            site.targets.append(method)
        return
    if site.kind == SiteKind.APPLY:
        resolve_apply_targets(site, resolver)
        return
    argument = target_expression(site)
    if argument is None:
        site.unresolved.append("the checkpointed function is not passed by position")
        return
    values = resolver.values(argument.value, module, argument.scope)
    site.targets, site.unresolved = resolver.segment_functions(values)


def resolve_apply_targets(site: Site, resolver: Resolver) -> None:
    """`apply_activation_checkpointing(check_fn=lambda m: isinstance(m, Block))`: the
    `forward` of Block."""
    assert site.arguments is not None
    check_fn = site.arguments.keywords.get("check_fn")
    if check_fn is None:
        site.unresolved.append("no `check_fn` is given, so any submodule may be wrapped")
        return
    for value in resolver.values(check_fn.value, site.module, check_fn.scope):
        if not isinstance(value, FunctionValue):
            site.unresolved.append("`check_fn` is not a function the linter can read")
            continue
        classes = isinstance_classes(value, resolver)
        if not classes:
            site.unresolved.append("`check_fn` does not test `isinstance(module, Class)`")
        targets, reasons = resolver.functions([InstanceValue(cls) for cls in classes])
        site.targets.extend(targets)
        site.unresolved.extend(reasons)


def isinstance_classes(function: FunctionValue, resolver: Resolver) -> list[ClassInfo]:
    """Project classes named in `isinstance(param, X)` / `isinstance(param, (X, Y))` calls."""
    classes: list[ClassInfo] = []
    for call in iter_calls(function.node):
        if dotted_name(call.func) != "isinstance" or len(call.args) != 2:
            continue
        spec = call.args[1].value
        names = ([element.value for element in spec.elements] if isinstance(spec, cst.Tuple)
                 else [spec])
        for name in names:
            for value in resolver.values(name, function.module, function.scope):
                if isinstance(value, ClassValue):
                    classes.append(value.cls)
    return classes


def iter_calls(node: cst.CSTNode):
    collector = CallCollector()
    collector.walk(node)
    return collector.calls


class CallCollector(Visitor):
    def __init__(self) -> None:
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)
