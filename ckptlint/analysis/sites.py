"""Finding checkpoint sites in a module: every call of a checkpoint API under any spelling.

A site is the checkpointing expression: a call (through aliases, `functools.partial`, instance
attributes bound in `__init__`, helpers that return the API, instances of a class whose method
checkpoints), a `checkpoint_wrapper`/`apply_activation_checkpointing` application,
transformers' `_gradient_checkpointing_func` call, the `class` statement of a
`GradientCheckpointingLayer` subclass or of a hand-written checkpoint (an `autograd.Function`
that reruns a function in backward, `analysis/hand_rolled.py`), or a library entry point that
checkpoints the model's layers itself (`apis.ENTRY_POINTS`).

Names are resolved through imports, never by spelling. A name imported from another project
module (`from .m import checkpoint`, or by `from .m import *`) is followed into that module
when it is spelled like a checkpoint API (`checkpoint`, `checkpoint_wrapper`, ...:
`apis.trigger_names`): the screens that keep runs fast (`ckptlint.screen`) look for those
words in the file, so a site found here is never a file they rejected. Constants that decide
a mode (`use_reentrant=FLAG`) are followed into any project module.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import libcst as cst

from ckptlint.analysis import apis
from ckptlint.analysis.apis import (
    INSTANCE,
    CheckpointApi,
    EntryMode,
    EntryPoint,
    Mode,
    Parameter,
    SiteKind,
)
from ckptlint.analysis.hand_rolled import HAND_ROLLED_API, HandRolled, hand_rolled_checkpoint
from ckptlint.analysis.resolve import (
    ClassInfo,
    ClassValue,
    ExternalValue,
    FunctionValue,
    InstanceValue,
    Resolver,
    ReturnCollector,
)
from ckptlint.analysis.scopes import (
    ASSIGNED,
    Binding,
    BindingKind,
    Scope,
    ScopeKind,
    ScopeTracker,
    bool_value,
    dotted_name,
)
from ckptlint.enums import TextEnum
from ckptlint.findings import SiteRef, TargetRef
from ckptlint.screen.confirm import applied_names
from ckptlint.syntax.modnames import resolve_relative
from ckptlint.syntax.source import SourceModule
from ckptlint.syntax.walk import Visitor


class ModeSource(TextEnum):
    """How a site's mode is known."""

    EXPLICIT = "explicit"  # `use_reentrant` or `checkpoint_impl` given
    IMPLICIT = "implicit"  # torch's default applies
    API = "api"  # the API has one mode
    # The library version in force decides (transformers' and trl's defaults: CKP104).
    VERSION = "version"
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

    def parameter(self, parameter: Parameter) -> Argument | None:
        """The argument passed for a parameter, by keyword or at its position."""
        given = self.keywords.get(parameter.name)
        if given is None and parameter.index is not None and not self.star_positional:
            given = self.positional_at(parameter.index)
        return given


class HfCall(TextEnum):
    """What enables transformers' gradient checkpointing (CKP104 decides its mode)."""

    ENABLE = "enable"  # model.gradient_checkpointing_enable(...) / activation_checkpointing_enable
    ARGUMENTS = "arguments"  # TrainingArguments(gradient_checkpointing=True, ...)
    TRL = "trl"  # a trl trainer configuration (SFTConfig, ...)
    PEFT = "peft"  # peft's prepare_model_for_kbit_training(...)


class Keywords(TextEnum):
    """What is known of the checkpoint keywords a transformers call passes on."""

    ABSENT = "absent"  # none given: the library's default
    KNOWN = "known"  # a dict whose keys are all known
    OPAQUE = "opaque"  # something whose keys cannot be known


@dataclass(frozen=True)
class HfRequest:
    """A call that enables transformers' gradient checkpointing, as CKP104 reads it."""

    call: HfCall
    enabled_by: str  # the method, switch or function named in messages
    kwargs_keyword: str  # the keyword that carries the checkpoint's keywords
    keywords: Keywords
    keys: frozenset[str] = frozenset()
    # The switch, when passed: True, False or None (an expression the linter cannot read).
    switch: bool | None = None
    switch_passed: bool = False
    # The dict literal passed (a fix adds the key to it), and where the keywords come from
    # when they are assigned after construction (`args.gradient_checkpointing_kwargs = ...`).
    dict_node: cst.Dict | None = None
    assigned_later: bool = False
    # Something (`None` included) is passed for the keywords' parameter.
    kwargs_passed: bool = False


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
    # The library name a site without a table API stands for (its layer base class,
    # `gradient_checkpointing_enable`, the training arguments class, the entry point).
    library_api: str = ""
    # A hand-written checkpoint class (SiteKind.HAND_ROLLED), or the class whose `.apply(...)`
    # call this site is: what it restores itself.
    hand_rolled: HandRolled | None = None
    # transformers' enabling calls (HF_ENABLE, HF_ARGS, and peft's entry point).
    hf: HfRequest | None = None
    entry: EntryPoint | None = None
    # The API passed to this one that decides its mode (`checkpoint_wrapper_fn=...`, diffusers'
    # `gradient_checkpointing_func`), when that API has a single mode.
    passed_api: str = ""
    # A call of a project function that checkpoints one of its parameters (`wrapper_site`):
    # that function's name. The call-level rules are the inner call's (reported there).
    wrapper: str = ""
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
            row = (target.module.definition_row(node) if isinstance(node, cst.FunctionDef)
                   else target.module.start(node).row)
            refs.append(TargetRef(target.module.display, row, target.qualname))
        return tuple(refs)

    @property
    def api_name(self) -> str:
        """The qualified name of the checkpointing API this site uses."""
        return self.api.qualname if self.api is not None else self.library_api

    @property
    def is_segment(self) -> bool:
        return self.kind not in (SiteKind.HF_ENABLE, SiteKind.HF_ARGS, SiteKind.HAND_ROLLED,
                                 SiteKind.ENTRY)

    @property
    def call(self) -> cst.Call | None:
        return self.node if isinstance(self.node, cst.Call) else None


@dataclass(frozen=True)
class ApiRef:
    api: CheckpointApi
    partials: tuple[tuple[cst.Call, Scope], ...] = ()
    # False when the name may also hold something else (a parameter whose default is the API).
    certain: bool = True


class SiteFinder(ScopeTracker):
    """Walks one module with its scopes and collects the sites."""

    def __init__(self, module: SourceModule, resolver: Resolver,
                 table: dict[str, CheckpointApi], segment_bases: tuple[str, ...]) -> None:
        self.module = module
        self.resolver = resolver
        self.table = table
        self.layer_bases = frozenset((*apis.HF_LAYER_BASES, *segment_bases))
        # Dotted prefixes of the names that matter: an import of one is kept as it is.
        self.prefixes = frozenset(
            ".".join(parts[:cut])
            for name in (*table, *apis.called_names(table, segment_bases))
            for parts in [name.split(".")] for cut in range(1, len(parts)))
        self.triggers = frozenset(apis.trigger_names(table, segment_bases))
        # The last parts of the names a call is a site by (`named_site`, `api_site`): a call
        # of `obj.attr` whose `obj` is not the instance itself denotes only names ending in
        # `.attr`, so when `attr` is none of these its callee need not be resolved.
        self.called_last_parts = frozenset(
            name.rsplit(".", 1)[-1]
            for name in (*table, *apis.ENTRY_BY_NAME, *apis.TRAINING_ARGUMENT_CLASSES))
        self.segment_bases = segment_bases
        self.scopes = module.scopes
        self.scope_of = self.scopes.scope_of
        self.stack = [self.scopes.module_scope]
        self.sites: list[Site] = []
        self.imported_heads = {
            (binding.qualname or "").split(".")[0]
            for scope in self.scopes.scope_of.values()
            for bindings in scope.bindings.values() for binding in bindings
            if binding.kind == BindingKind.IMPORT}
        self._star_imports: dict[int, list[str]] = {}
        self._hand_rolled: dict[int, HandRolled | None] = {}
        self._forwarded: dict[int, tuple[Site, int] | None] = {}
        # Memos by node id (each entry holds its nodes, so an id is never reused meanwhile):
        # every call's callee is named twice (`named_site`, `api_site`) and aliases are
        # followed again from each name reaching them.
        self._qualnames: dict[tuple[int, int, int, int], tuple[tuple, set[str]]] = {}
        self._lineage: dict[int, tuple[cst.ClassDef, tuple[ClassInfo, ...]]] = {}
        self._returns: dict[int, tuple[cst.FunctionDef, list[cst.BaseExpression]]] = {}
        self._methods: dict[tuple[int, str], tuple[cst.ClassDef, FunctionValue | None]] = {}

    # -- sites -------------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.enter_scope(node)
        outer = self.stack[-2] if len(self.stack) > 1 else self.stack[-1]
        base = self.layer_base(node, outer, 0)
        class_scope = self.scopes.scope_of[id(node)]
        if base is not None:
            self.sites.append(Site(self.module, node, SiteKind.HF_LAYER, class_scope,
                                   library_api=base))
            return
        hand_rolled = self.hand_rolled(node, outer)
        if hand_rolled is not None:
            self.sites.append(Site(self.module, node, SiteKind.HAND_ROLLED, class_scope,
                                   mode=Mode.REENTRANT, mode_source=ModeSource.API,
                                   preserve_rng_state=hand_rolled.restores_rng,
                                   library_api=HAND_ROLLED_API, hand_rolled=hand_rolled))

    def hand_rolled(self, node: cst.ClassDef, outer: Scope) -> HandRolled | None:
        """What a class of this module handles, if it is a hand-written checkpoint (read
        once: its `class` statement and its `.apply(...)` calls both ask)."""
        key = id(node)
        if key not in self._hand_rolled:
            self._hand_rolled[key] = hand_rolled_checkpoint(
                self.module, node, outer,
                lambda expr, scope: self.qualnames(expr, self.module, scope, 0))
        return self._hand_rolled[key]

    def layer_base(self, node: cst.ClassDef, scope: Scope, depth: int) -> str | None:
        """The layer base class (qualified name) `node` derives from, if any."""
        if depth > MAX_ALIAS_DEPTH:
            return None
        for base in node.bases:
            for qualname in sorted(self.qualnames(base.value, self.module, scope, 0)):
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
        named = self.may_name_site(node.func, scope)
        site = (self.hf_checkpoint_site(node, scope) or self.method_site(node, scope)
                or (named and self.named_site(node, scope))
                or (named and self.api_site(node, scope))
                or self.hand_rolled_apply_site(node, scope) or self.wrapper_site(node, scope))
        if site is not None:
            self.sites.append(site)

    def wrapper_site(self, node: cst.Call, scope: Scope) -> Site | None:
        """`checkpoint(self._forward, (x,), params, flag)`: a call of a module-level project
        function that passes one of its parameters to a checkpoint call of its own (torch's
        API, a hand-written class's `.apply`: guided-diffusion's wrapper and its copies). The
        argument given here for that parameter is what is checkpointed, with the inner
        call's mode and RNG handling. Only a callee named like a checkpoint API
        (`apis.trigger_names`), which the screens pass as a possible API when another project
        module binds it; the parameter passed by position."""
        func = node.func
        if not (isinstance(func, cst.Name) and func.value in self.triggers):
            return None
        values = self.resolver.values(func, self.module, scope)
        if len(values) != 1 or not isinstance(values[0], FunctionValue):
            return None
        forwarded = self.forwarded_site(values[0])
        if forwarded is None:
            return None
        inner, index = forwarded
        wrapper = values[0].qualname
        arguments = self.arguments(node, scope, ())
        # The wrapper passes its other arguments on in its own way (`*inputs`, `params`):
        # what the checkpointed function receives is not known position by position.
        arguments.star_positional = True
        return Site(self.module, node, SiteKind.FUNCTION, scope,
                    api=CheckpointApi(wrapper, SiteKind.FUNCTION, inner.mode, target_index=index),
                    arguments=arguments, mode=inner.mode, mode_source=inner.mode_source,
                    preserve_rng_state=inner.preserve_rng_state, hand_rolled=inner.hand_rolled,
                    wrapper=wrapper)

    def forwarded_site(self, wrapper: FunctionValue) -> tuple[Site, int] | None:
        """The checkpoint call in a module-level function that runs one of its parameters,
        with that parameter's position (read once per function)."""
        node, outer = wrapper.node, wrapper.scope.parent
        if not isinstance(node, cst.FunctionDef) or outer is None \
                or outer.kind != ScopeKind.MODULE:
            return None
        key = id(node)
        if key not in self._forwarded:
            self._forwarded[key] = None
            finder = (self if wrapper.module is self.module else
                      SiteFinder(wrapper.module, self.resolver, self.table, self.segment_bases))
            params = [param.name.value
                      for param in (*node.params.posonly_params, *node.params.params)]
            for call in iter_calls(node.body):
                inner = (finder.api_site(call, wrapper.scope)
                         or finder.hand_rolled_apply_site(call, wrapper.scope))
                argument = target_expression(inner) if inner is not None else None
                if inner is None or argument is None or not isinstance(argument.value, cst.Name):
                    continue
                name = argument.value.value
                bindings = wrapper.scope.bindings.get(name, [])
                if name in params and bindings and all(binding.kind == BindingKind.PARAM
                                                       for binding in bindings):
                    self._forwarded[key] = (inner, params.index(name))
                    break
        return self._forwarded[key]

    def hand_rolled_apply_site(self, node: cst.Call, scope: Scope) -> Site | None:
        """`Cls.apply(fn, *args)` of a hand-written checkpoint class (of this file, another
        project file, or a subclass of one that overrides neither `forward` nor
        `backward`): a reentrant checkpoint of the function passed where the class's
        `forward` takes the function it runs, with RNG preserved only when the class
        restores it."""
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == apis.APPLY_METHOD):
            return None
        values = self.resolver.values(func.value, self.module, scope)
        if len(values) != 1 or not isinstance(values[0], ClassValue):
            return None
        cls = values[0].cls
        if self.scopes.scope_of.get(id(cls.node)) is not cls.scope \
                and not self.screened_class(cls, func.value):
            return None
        hand_rolled = self.class_hand_rolled(cls, 0)
        if hand_rolled is None or hand_rolled.function_index is None:
            return None
        api = CheckpointApi(f"{hand_rolled.qualname}.{apis.APPLY_METHOD}", SiteKind.FUNCTION,
                            Mode.REENTRANT, target_index=hand_rolled.function_index)
        return Site(self.module, node, SiteKind.FUNCTION, scope, api=api,
                    arguments=self.arguments(node, scope, ()), mode=Mode.REENTRANT,
                    mode_source=ModeSource.API, preserve_rng_state=hand_rolled.restores_rng,
                    hand_rolled=hand_rolled)

    def screened_class(self, cls: ClassInfo, named: cst.BaseExpression) -> bool:
        """A class of another file is followed only when the screens pass this file for it:
        it is one of the project's possible hand-written checkpoint classes
        (`TextIndex.hand_rolled_classes`), named so right before `.apply` (`named`:
        `Cls` or `module.Cls`)."""
        name = cls.node.name.value
        written = (named.value if isinstance(named, cst.Name)
                   else named.attr.value if isinstance(named, cst.Attribute) else None)
        return (written == name and name in applied_names(self.module.text)
                and name in self.resolver.index.hand_rolled_classes())

    def class_hand_rolled(self, cls: ClassInfo, depth: int) -> HandRolled | None:
        """What `cls` handles, if it is a hand-written checkpoint or inherits `forward` and
        `backward` from one (then named as `cls`)."""
        if depth > MAX_ALIAS_DEPTH or cls.scope.parent is None:
            return None
        key = id(cls.node)
        if key not in self._hand_rolled:
            module = cls.module
            self._hand_rolled[key] = hand_rolled_checkpoint(
                module, cls.node, cls.scope.parent,
                lambda expr, scope: self.qualnames(expr, module, scope, 0))
        found = self._hand_rolled[key]
        if found is not None or any(
                isinstance(statement, cst.FunctionDef)
                and statement.name.value in ("forward", "backward")
                for statement in cls.node.body.body):
            return found
        for base in self.resolver.base_classes(cls):
            inherited = self.class_hand_rolled(base, depth + 1)
            if inherited is not None:
                return replace(inherited, qualname=cls.qualname)
        return None

    def hf_checkpoint_site(self, node: cst.Call, scope: Scope) -> Site | None:
        """`self._gradient_checkpointing_func(layer.__call__, ...)`, also through a name
        bound to it (`ckpt = self._gradient_checkpointing_func`)."""
        func = node.func
        if isinstance(func, cst.Name):
            values = [binding.value for binding in scope.lookup(func.value)
                      if binding.kind in ASSIGNED and binding.value is not None]
            func = values[0] if len(values) == 1 else func
        if not (isinstance(func, cst.Attribute) and func.attr.value == apis.HF_CHECKPOINT_METHOD):
            return None
        site = Site(self.module, node, SiteKind.HF_FUNC, scope,
                    arguments=self.arguments(node, scope, ()), preserve_rng_state=True,
                    library_api=apis.HF_CHECKPOINT_API)
        # diffusers' models set it to a non-reentrant function (docs/torch-facts.md).
        if self.model_libraries(func.value, scope) == {"diffusers"}:
            site.mode, site.mode_source = Mode.NON_REENTRANT, ModeSource.API
        return site

    def method_site(self, node: cst.Call, scope: Scope) -> Site | None:
        """A library object's method that turns checkpointing on: transformers'
        `gradient_checkpointing_enable` / `activation_checkpointing_enable`, diffusers'
        `enable_gradient_checkpointing`."""
        func = node.func
        if not isinstance(func, cst.Attribute):
            return None
        method = func.attr.value
        if method in apis.HF_ENABLE_METHODS:
            if not self.is_library_object(func.value, scope, apis.HF_LIBRARIES):
                return None
            site = Site(self.module, node, SiteKind.HF_ENABLE, scope,
                        arguments=self.arguments(node, scope, ()),
                        library_api=f"transformers.PreTrainedModel.{method}")
            kwargs = Parameter(apis.HF_ENABLE_METHODS[method], 0)
            self.decide_hf(site, HfCall.ENABLE, method, kwargs, None)
            return site
        entry = apis.ENTRY_BY_METHOD.get(method)
        if entry is None or not self.is_library_object(func.value, scope, entry.libraries):
            return None
        return self.entry_site(node, scope, entry)

    def may_name_site(self, func: cst.BaseExpression, scope: Scope) -> bool:
        """False when the callee cannot denote a name `named_site` or `api_site` looks for:
        `obj.attr` with `attr` the last part of none of them, `obj` not the instance."""
        return not (isinstance(func, cst.Attribute)
                    and func.attr.value not in self.called_last_parts
                    and self.resolver.self_class(func.value, self.module, scope) is None)

    def named_site(self, node: cst.Call, scope: Scope) -> Site | None:
        """Training arguments and library entry points, called by their qualified names."""
        names = self.qualnames(node.func, self.module, scope, 0)
        arguments_classes = names & set(apis.TRAINING_ARGUMENT_CLASSES)
        if arguments_classes:
            return self.arguments_site(node, scope, min(arguments_classes))
        entries = sorted(name for name in names if name in apis.ENTRY_BY_NAME)
        if entries:
            return self.entry_site(node, scope, apis.ENTRY_BY_NAME[entries[0]])
        return None

    def api_site(self, node: cst.Call, scope: Scope) -> Site | None:
        refs = self.api_refs(node.func, self.module, scope, 0)
        if not refs:
            return None
        # Several bindings (try/except imports): take the first in table order, every run.
        order = list(self.table)
        ref = min(refs, key=lambda r: order.index(r.api.key))
        arguments = self.arguments(node, scope, ref.partials)
        site = Site(self.module, node, ref.api.kind, scope, api=ref.api, arguments=arguments)
        self.decide_mode(site)
        if not all(other.certain for other in refs):
            site.mode, site.mode_source = Mode.UNKNOWN, ModeSource.UNKNOWN
        return site

    # -- what names denote ------------------------------------------------------------------
    def qualnames(self, expr: cst.BaseExpression, module: SourceModule, scope: Scope,
                  depth: int) -> set[str]:
        """Qualified names `expr` denotes: through imports, aliases, instance attributes,
        helpers' returns, and (for names spelled like an API) other project modules. Worked
        out once per expression, scope and depth: the set is shared, callers never change it."""
        if depth > MAX_ALIAS_DEPTH:
            return set()
        key = (id(expr), id(module), id(scope), depth)
        known = self._qualnames.get(key)
        if known is None:
            known = ((expr, module, scope), self.denoted(expr, module, scope, depth))
            self._qualnames[key] = known
        return known[1]

    def denoted(self, expr: cst.BaseExpression, module: SourceModule, scope: Scope,
                depth: int) -> set[str]:
        """`qualnames`, worked out."""
        if isinstance(expr, cst.Name):
            return self.name_qualnames(expr.value, module, scope, depth)
        if isinstance(expr, cst.Attribute):
            attr = expr.attr.value
            owner = self.resolver.self_class(expr.value, module, scope)
            if owner is not None:
                return {name for value, value_module, value_scope in self.assignments(owner, attr)
                        for name in self.qualnames(value, value_module, value_scope, depth + 1)}
            return {f"{head}.{attr}" for head in self.qualnames(expr.value, module, scope,
                                                                depth + 1)}
        if isinstance(expr, cst.Call):
            # `CheckpointWithoutOutput()`: an instance of a class whose method checkpoints.
            instances = {f"{name}.{INSTANCE}"
                         for name in self.qualnames(expr.func, module, scope, depth + 1)}
            returned = {name for value, value_module, value_scope
                        in self.returned(expr, module, scope, depth)
                        for name in self.qualnames(value, value_module, value_scope, depth + 1)}
            return (instances & self.prefixes) | returned
        if isinstance(expr, cst.IfExp):
            return (self.qualnames(expr.body, module, scope, depth + 1)
                    | self.qualnames(expr.orelse, module, scope, depth + 1))
        return set()

    def name_qualnames(self, name: str, module: SourceModule, scope: Scope,
                       depth: int) -> set[str]:
        bindings = scope.lookup(name)
        if not bindings:
            return self.star_qualnames(name, module, depth)
        names: set[str] = set()
        for binding in bindings:
            if binding.kind == BindingKind.IMPORT and binding.qualname:
                names |= self.through_project(binding.qualname, depth)
            elif binding.kind == BindingKind.DEF and binding.scope.kind == ScopeKind.MODULE \
                    and module.name:
                # Inside the API's own module (linting torch itself): its calls are sites.
                names.add(f"{module.name}.{name}")
            elif binding.kind in ASSIGNED and binding.value is not None:
                names |= self.qualnames(binding.value, module, binding.scope, depth + 1)
        return names

    def through_project(self, qualname: str, depth: int) -> set[str]:
        """`qualname`, and when it is a name spelled like an API inside another project
        module (`pkg.attention.checkpoint`), what that module binds it to."""
        names = {qualname}
        parent, _, last = qualname.rpartition(".")
        if (qualname in self.table or qualname in self.prefixes or not parent
                or last not in self.triggers or depth > MAX_ALIAS_DEPTH):
            return names
        project = self.resolver.project
        path = project.module_path(parent)
        imported = project.imported_names(path, last) if path is not None else None
        if imported is not None:  # a re-export: followed without parsing the module
            for name in imported:
                names |= self.through_project(name, depth + 1)
            return names
        other = project.module_at(path) if path is not None else None
        if other is None:
            return names
        return names | self.name_qualnames(last, other, other.scopes.module_scope, depth + 1)

    def star_qualnames(self, name: str, module: SourceModule, depth: int) -> set[str]:
        """A name no statement binds: what a `from M import *` of the module binds it to."""
        names: set[str] = set()
        for imported in self.star_imports(module):
            candidate = f"{imported}.{name}"
            other = self.project_module(imported)
            if other is not None and other is not module:
                if exported(other, name) and depth < MAX_ALIAS_DEPTH:
                    names |= self.name_qualnames(name, other, other.scopes.module_scope,
                                                 depth + 1)
            elif candidate in self.table or candidate in self.prefixes:
                names.add(candidate)
        return names

    def star_source(self, name: str, module: SourceModule,
                    depth: int) -> tuple[SourceModule, list[Binding]] | None:
        """A name no statement of `module` binds: the project module a `from M import *`
        takes it from, with that module's bindings of it (through its own star imports)."""
        if depth > MAX_ALIAS_DEPTH:
            return None
        for imported in self.star_imports(module):
            other = self.project_module(imported)
            if other is None or other is module or not exported(other, name):
                continue
            bindings = other.scopes.module_scope.bindings.get(name, [])
            if bindings:
                return other, bindings
            found = self.star_source(name, other, depth + 1)
            if found is not None:
                return found
        return None

    def star_imports(self, module: SourceModule) -> list[str]:
        key = id(module.tree)
        if key not in self._star_imports:
            self._star_imports[key] = star_import_modules(module)
        return self._star_imports[key]

    def project_module(self, dotted: str) -> SourceModule | None:
        project = self.resolver.project
        path = project.module_path(dotted)
        return project.module_at(path) if path is not None else None

    def assignments(self, owner: ClassInfo,
                    attr: str) -> list[tuple[cst.BaseExpression, SourceModule, Scope]]:
        """(value, module, scope) of `self.attr = value` in the class or, when it assigns
        none, in the first of its project bases that does (possibly another module)."""
        for cls in self.lineage(owner):
            found = self.resolver.attribute_assignments(cls).get(attr)
            if found:
                return [(value, cls.module, scope) for value, scope in found]
        return []

    def lineage(self, owner: ClassInfo) -> tuple[ClassInfo, ...]:
        """The class and its project bases (resolved once per class)."""
        known = self._lineage.get(id(owner.node))
        if known is None:
            known = (owner.node, (owner, *self.resolver.base_classes(owner)))
            self._lineage[id(owner.node)] = known
        return known[1]

    def method(self, owner: ClassInfo, name: str) -> FunctionValue | None:
        """The method `name` of the class or its project bases (resolved once per class)."""
        key = (id(owner.node), name)
        known = self._methods.get(key)
        if known is None:
            known = (owner.node, self.resolver.find_method(owner, name))
            self._methods[key] = known
        return known[1]

    def returns(self, function: cst.FunctionDef) -> list[cst.BaseExpression]:
        """The values a function's `return` statements give (read once per function)."""
        known = self._returns.get(id(function))
        if known is None:
            collector = ReturnCollector()
            collector.walk(function.body)
            known = (function, collector.returns)
            self._returns[id(function)] = known
        return known[1]

    def returned(self, call: cst.Call, module: SourceModule, scope: Scope, depth: int):
        """(value, module, scope) of each `return` of the project function or method called:
        `get_checkpoint_fn()` returning the API."""
        func = call.func
        functions: list[tuple[cst.FunctionDef, SourceModule]] = []
        if isinstance(func, cst.Name):
            bindings = scope.lookup(func.value)
            if not bindings:
                source = self.star_source(func.value, module, depth + 1)
                if source is not None:
                    module, bindings = source
            for binding in bindings:
                if isinstance(binding.node, cst.FunctionDef):
                    functions.append((binding.node, module))
                elif binding.kind == BindingKind.IMPORT and binding.qualname \
                        and func.value in self.triggers:
                    parent, _, last = binding.qualname.rpartition(".")
                    other = self.project_module(parent) if parent else None
                    if other is not None:
                        functions.extend(
                            (b.node, other) for b in other.scopes.module_scope.bindings.get(
                                last, []) if isinstance(b.node, cst.FunctionDef))
        elif isinstance(func, cst.Attribute):
            owner = self.resolver.self_class(func.value, module, scope)
            if owner is not None:
                method = self.method(owner, func.attr.value)
                if method is not None and isinstance(method.node, cst.FunctionDef):
                    functions.append((method.node, method.module))
        results: list[tuple[cst.BaseExpression, SourceModule, Scope]] = []
        for function, function_module in functions:
            function_scope = function_module.scopes.scope_of[id(function)]
            results.extend((value, function_module, function_scope)
                           for value in self.returns(function))
        return results

    def api_refs(self, expr: cst.BaseExpression, module: SourceModule, scope: Scope,
                 depth: int) -> list[ApiRef]:
        if depth > MAX_ALIAS_DEPTH:
            return []
        names = sorted(self.qualnames(expr, module, scope, depth))
        refs = [ApiRef(self.table[name]) for name in names if name in self.table]
        if refs:
            return refs
        if isinstance(expr, cst.Name):
            for binding in scope.lookup(expr.value):
                if binding.kind in ASSIGNED and binding.value is not None:
                    refs.extend(self.api_refs(binding.value, module, binding.scope, depth + 1))
                elif binding.kind == BindingKind.PARAM and isinstance(binding.node, cst.Param) \
                        and binding.node.default is not None:
                    # `def __init__(self, fn=checkpointing.checkpoint)`: the default, unless
                    # a caller passes something else.
                    outer = binding.scope.parent or binding.scope
                    refs.extend(ApiRef(ref.api, ref.partials, certain=False) for ref in
                                self.api_refs(binding.node.default, module, outer, depth + 1))
        elif isinstance(expr, cst.Attribute):
            owner = self.resolver.self_class(expr.value, module, scope)
            if owner is not None:
                for value, value_module, value_scope in self.assignments(owner,
                                                                         expr.attr.value):
                    refs.extend(self.api_refs(value, value_module, value_scope, depth + 1))
        elif isinstance(expr, cst.Call):
            if expr.args and not expr.args[0].star and \
                    self.qualnames(expr.func, module, scope, depth + 1) & {"functools.partial"}:
                for inner in self.api_refs(expr.args[0].value, module, scope, depth + 1):
                    refs.append(ApiRef(inner.api, ((expr, scope), *inner.partials),
                                       inner.certain))
            for value, value_module, value_scope in self.returned(expr, module, scope, depth):
                refs.extend(self.api_refs(value, value_module, value_scope, depth + 1))
        elif isinstance(expr, cst.IfExp):
            refs.extend(self.api_refs(expr.body, module, scope, depth + 1))
            refs.extend(self.api_refs(expr.orelse, module, scope, depth + 1))
        return refs

    # -- library objects ---------------------------------------------------------------
    def model_libraries(self, receiver: cst.BaseExpression, scope: Scope) -> set[str] | None:
        """Top-level packages of the library classes the receiver is an instance of
        (through project classes deriving from them, and helpers returning them); None
        when it cannot be told."""
        owner = self.resolver.self_class(receiver, self.module, scope)
        values = ([InstanceValue(owner)] if owner is not None
                  else self.resolver.values(receiver, self.module, scope))
        libraries: set[str] = set()
        known = True
        for value in values:
            if isinstance(value, ExternalValue):
                libraries.add(value.qualname.split(".")[0])
            elif isinstance(value, (InstanceValue, ClassValue)):
                bases = self.resolver.external_bases(value.cls)
                libraries.update(base.split(".")[0] for base in bases)
                known = known and bool(bases)
            else:
                known = False
        return libraries if known or libraries else None

    def is_library_object(self, receiver: cst.BaseExpression, scope: Scope,
                          libraries: tuple[str, ...]) -> bool:
        """Is the receiver an object of one of `libraries`? When the linter cannot tell,
        a file importing one of them is taken to use it."""
        found = self.model_libraries(receiver, scope)
        if found is None:
            return any(library in self.imported_heads for library in libraries)
        return bool(found & set(libraries))

    # -- transformers and library entry points -------------------------------------------
    def arguments_site(self, node: cst.Call, scope: Scope, qualname: str) -> Site | None:
        """`TrainingArguments(gradient_checkpointing=True)` and trl's configurations."""
        arguments = self.arguments(node, scope, ())
        trl = qualname in apis.TRL_CONFIGS
        switch = next((name for name in apis.HF_ARGUMENT_SWITCHES if name in arguments.keywords),
                      None)
        later = self.later_assignments(node, scope)
        if switch is None:
            switch = next((name for name in apis.HF_ARGUMENT_SWITCHES if name in later), None)
        if switch is None and not trl:
            return None  # off by default in transformers
        switch = switch or "gradient_checkpointing"
        site = Site(self.module, node, SiteKind.HF_ARGS, scope, arguments=arguments,
                    library_api=qualname)
        call = HfCall.TRL if trl else HfCall.ARGUMENTS
        self.decide_hf(site, call, switch, Parameter(apis.HF_ARGUMENT_SWITCHES[switch]),
                       Parameter(switch), later)
        if site.hf is not None and site.hf.switch is False:
            return None
        return site

    def entry_site(self, node: cst.Call, scope: Scope, entry: EntryPoint) -> Site | None:
        arguments = self.arguments(node, scope, ())
        site = Site(self.module, node, SiteKind.ENTRY, scope, arguments=arguments,
                    library_api=entry.api, entry=entry)
        on = [bool_value(given.value) for switch in entry.switches
              if (given := arguments.parameter(switch)) is not None
              and not is_none(given.value)]
        if (not on and not entry.on_by_default) or (on and all(flag is False for flag in on)):
            return None
        if entry.mode == EntryMode.HF_KWARGS:
            assert entry.argument is not None
            self.decide_hf(site, HfCall.PEFT, entry.api.rsplit(".", 1)[-1], entry.argument,
                           entry.switches[0] if entry.switches else None)
        elif entry.mode == EntryMode.CHECKPOINT_FUNCTION:
            assert entry.argument is not None
            self.decide_function_argument(site, arguments.parameter(entry.argument))
        elif entry.mode == EntryMode.WRAPPER_FN:
            assert entry.argument is not None
            self.decide_wrapper_fn(site, arguments.parameter(entry.argument), arguments)
        else:
            site.mode, site.mode_source = Mode.NON_REENTRANT, ModeSource.API
        return site

    def decide_hf(self, site: Site, call: HfCall, enabled_by: str, kwargs: Parameter,
                  switch: Parameter | None, later: dict[str, list[cst.BaseExpression]] | None
                  = None) -> None:
        """The keywords a transformers call passes on; the mode when they decide it."""
        arguments = site.arguments
        assert arguments is not None
        later = later or {}
        switch_value: bool | None = None
        switch_passed = False
        if switch is not None:
            given = arguments.parameter(switch)
            values = [given.value] if given is not None else later.get(switch.name, [])
            if values:
                switch_passed = True
                read = {bool_value(value) for value in values}
                switch_value = read.pop() if len(read) == 1 else None
        given = arguments.parameter(kwargs)
        assigned = later.get(kwargs.name, [])
        dict_node: cst.Dict | None = None
        keys: dict[str, cst.BaseExpression] | None = None
        if assigned:
            value = assigned[-1] if len(assigned) == 1 else None
            keys = self.dict_keys(value, site.scope) if value is not None else None
            state = Keywords.KNOWN if keys is not None else Keywords.OPAQUE
        elif given is not None:
            if is_none(given.value):
                state = Keywords.ABSENT
            else:
                keys = self.dict_keys(given.value, given.scope)
                state = Keywords.KNOWN if keys is not None else Keywords.OPAQUE
                dict_node = given.value if isinstance(given.value, cst.Dict) else None
        elif arguments.opaque_keywords or arguments.star_positional:
            state = Keywords.OPAQUE
        else:
            state = Keywords.ABSENT
        site.hf = HfRequest(call, enabled_by, kwargs.name, state,
                            frozenset(keys or ()), switch_value, switch_passed, dict_node,
                            bool(assigned), given is not None)
        if keys is not None and "use_reentrant" in keys:
            flag = self.constant(keys["use_reentrant"], self.module, site.scope, 0)
            site.mode = (Mode.UNKNOWN if flag is None
                         else Mode.REENTRANT if flag else Mode.NON_REENTRANT)
            site.mode_source = ModeSource.UNKNOWN if flag is None else ModeSource.EXPLICIT
        elif state == Keywords.OPAQUE:
            site.mode, site.mode_source = Mode.UNKNOWN, ModeSource.UNKNOWN
        else:
            site.mode, site.mode_source = Mode.UNKNOWN, ModeSource.VERSION

    def later_assignments(self, node: cst.Call,
                          scope: Scope) -> dict[str, list[cst.BaseExpression]]:
        """`args = TrainingArguments(...)` then `args.gradient_checkpointing_kwargs = {...}`
        in the same function (or module): the attributes assigned, by name."""
        names = [binding.name for bindings in scope.bindings.values() for binding in bindings
                 if binding.kind == BindingKind.ASSIGN and binding.value is node]
        if not names:
            return {}
        collector = AttributeAssignments(set(names), set(apis.HF_ARGUMENT_SWITCHES)
                                         | set(apis.HF_ARGUMENT_SWITCHES.values()))
        if isinstance(scope.node, cst.FunctionDef):
            collector.walk(scope.node.body)
        elif isinstance(scope.node, cst.Module):
            for statement in scope.node.body:
                collector.walk(statement)
        return collector.found

    def decide_function_argument(self, site: Site, given: Argument | None) -> None:
        """diffusers' `enable_gradient_checkpointing(gradient_checkpointing_func=...)`: its own
        non-reentrant function, else the mode of the function passed (called as
        `func(module, *args)`)."""
        if given is None or is_none(given.value):
            site.mode, site.mode_source = Mode.NON_REENTRANT, ModeSource.API
            return
        ref = self.certain_api(given, SiteKind.FUNCTION)
        if ref is None:
            site.mode, site.mode_source = Mode.UNKNOWN, ModeSource.UNKNOWN
            return
        inner = self.arguments(cst.Call(func=cst.Name("_")), given.scope, ref.partials)
        self.decide_keyword_mode(site, ref.api, inner)
        if site.mode_source == ModeSource.IMPLICIT:
            # The library calls it without `use_reentrant`: torch's default, with no keyword
            # the user could add at this call.
            site.mode_source = ModeSource.API
        if site.mode_source == ModeSource.API:
            site.passed_api = ref.api.qualname

    def decide_wrapper_fn(self, site: Site, given: Argument | None,
                          arguments: CallArguments) -> None:
        """torchtune's `set_activation_checkpointing(model, policy, **kwargs)`: the
        `checkpoint_wrapper_fn` keyword it passes on, else torch's non-reentrant wrapper."""
        if given is None:
            if arguments.opaque_keywords:
                site.mode, site.mode_source = Mode.UNKNOWN, ModeSource.UNKNOWN
            else:
                site.mode, site.mode_source = Mode.NON_REENTRANT, ModeSource.API
            return
        self.decide_wrapper_function(site, given)

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

    def constant(self, expr: cst.BaseExpression, module: SourceModule, scope: Scope,
                 depth: int) -> bool | None:
        """The value of a boolean flag: a literal, `not` one, or a name bound once to one
        (in this module or, imported, in another project module)."""
        if depth > MAX_ALIAS_DEPTH:
            return None
        literal = bool_value(expr)
        if literal is not None:
            return literal
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
            inner = self.constant(expr.expression, module, scope, depth + 1)
            return None if inner is None else not inner
        if not isinstance(expr, cst.Name):
            return None
        found = scope.lookup(expr.value)
        if not found:
            source = self.star_source(expr.value, module, depth + 1)
            if source is None:
                return None
            module, found = source
        if len(found) != 1:
            return None
        binding = found[0]
        if len(binding.scope.bindings.get(expr.value, [])) != 1:
            return None  # rebound somewhere in its scope (`global` writes included)
        if binding.kind == BindingKind.ASSIGN and binding.value is not None:
            return self.constant(binding.value, module, binding.scope, depth + 1)
        if binding.kind == BindingKind.IMPORT and binding.qualname:
            parent, _, last = binding.qualname.rpartition(".")
            other = self.project_module(parent) if parent else None
            if other is not None:
                return self.constant(cst.Name(last), other, other.scopes.module_scope,
                                     depth + 1)
        return None

    # -- mode --------------------------------------------------------------------------
    def decide_mode(self, site: Site) -> None:
        api, arguments = site.api, site.arguments
        assert api is not None and arguments is not None
        if api.kind in (SiteKind.FUNCTION, SiteKind.SEQUENTIAL):
            site.preserve_rng_state = self.preserve_rng_state(api, arguments, site.scope)
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
            flag = self.constant(given.value, self.module, given.scope, 0)
            site.mode = (Mode.UNKNOWN if flag is None
                         else Mode.REENTRANT if flag else Mode.NON_REENTRANT)
            site.mode_source = ModeSource.UNKNOWN if flag is None else ModeSource.EXPLICIT
        elif arguments.opaque_keywords:
            site.mode, site.mode_source = Mode.UNKNOWN, ModeSource.UNKNOWN
        elif api.mode == Mode.TORCH:
            site.mode, site.mode_source = Mode.REENTRANT, ModeSource.IMPLICIT
        elif api.mode == Mode.REENTRANT_DEFAULT:
            site.mode, site.mode_source = Mode.REENTRANT, ModeSource.API
        else:
            site.mode, site.mode_source = Mode.NON_REENTRANT, ModeSource.API

    def decide_wrapper_mode(self, site: Site, api: CheckpointApi, impl: Argument | None,
                            arguments: CallArguments | None) -> None:
        if api.mode == Mode.REENTRANT:
            site.mode, site.mode_source = Mode.REENTRANT, ModeSource.API
        elif impl is not None:
            names = self.qualnames(impl.value, self.module, impl.scope, 0)
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
        self.decide_wrapper_function(site, wrapper_fn)

    def certain_api(self, argument: Argument, kind: SiteKind) -> ApiRef | None:
        """The checkpoint API of `kind` that `argument` names, when every reading of it is
        certain; else None."""
        refs = [ref for ref in self.api_refs(argument.value, self.module, argument.scope, 0)
                if ref.api.kind == kind]
        return refs[0] if refs and all(ref.certain for ref in refs) else None

    def decide_wrapper_function(self, site: Site, wrapper_fn: Argument) -> None:
        """The mode of a `checkpoint_wrapper_fn` (a wrapper, or a `partial` of one)."""
        ref = self.certain_api(wrapper_fn, SiteKind.WRAPPER)
        if ref is None:
            site.mode, site.mode_source = Mode.UNKNOWN, ModeSource.UNKNOWN
            return
        inner = self.arguments(cst.Call(func=cst.Name("_")), wrapper_fn.scope, ref.partials)
        self.decide_wrapper_mode(site, ref.api, inner.keywords.get("checkpoint_impl"), inner)
        if site.mode_source == ModeSource.API:
            site.passed_api = ref.api.qualname

    def preserve_rng_state(self, api: CheckpointApi, arguments: CallArguments,
                           scope: Scope) -> bool | None:
        given = arguments.keywords.get("preserve_rng_state")
        if given is None and api.preserve_rng_index is not None:
            given = arguments.positional_at(api.preserve_rng_index)
        if given is None:
            return None if arguments.opaque_keywords else True
        return self.constant(given.value, self.module, given.scope, 0)


class AttributeAssignments(Visitor):
    """`name.attr = value` statements for some names and attributes (nested functions and
    classes excluded)."""

    def __init__(self, names: set[str], attributes: set[str]) -> None:
        self.names = names
        self.attributes = attributes
        self.found: dict[str, list[cst.BaseExpression]] = {}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            name = target.target
            if (isinstance(name, cst.Attribute) and isinstance(name.value, cst.Name)
                    and name.value.value in self.names and name.attr.value in self.attributes):
                self.found.setdefault(name.attr.value, []).append(node.value)


def star_import_modules(module: SourceModule) -> list[str]:
    """Modules a module imports with `from M import *` at module level (in `if`/`try` too)."""
    collector = StarImports(module)
    collector.walk(module.tree)
    return collector.found


class StarImports(Visitor):
    def __init__(self, module: SourceModule) -> None:
        self.module = module
        self.found: list[str] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not isinstance(node.names, cst.ImportStar):
            return
        base = dotted_name(node.module) if node.module is not None else None
        if node.relative:
            base = resolve_relative(self.module.name, self.module.is_package,
                                    len(node.relative), base)
        if base:
            self.found.append(base)


def exported(module: SourceModule, name: str) -> bool:
    """Does `from module import *` bind `name`? Its `__all__` says, else any public name."""
    for binding in module.scopes.module_scope.bindings.get("__all__", []):
        value = binding.value
        if binding.kind == BindingKind.ASSIGN and isinstance(value, (cst.List, cst.Tuple)):
            return name in {string_value(element.value) for element in value.elements}
        return True  # built some other way: it may hold the name
    return not name.startswith("_")


def string_value(expr: cst.BaseExpression | None) -> str | None:
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def find_sites(module: SourceModule, resolver: Resolver, table: dict[str, CheckpointApi],
               segment_bases: tuple[str, ...]) -> list[Site]:
    finder = SiteFinder(module, resolver, table, segment_bases)
    finder.walk(module.tree)
    return finder.sites


def target_expression(site: Site) -> Argument | None:
    """The argument naming what the site checkpoints (None for classes and
    `apply_activation_checkpointing`)."""
    arguments = site.arguments
    if arguments is None or site.kind in (SiteKind.HF_LAYER, SiteKind.APPLY):
        return None
    index = site.api.target_index if site.api is not None else 0
    argument = arguments.positional_at(index)
    if argument is None and site.hand_rolled is not None:  # `Cls.apply(x, fn=f)`
        argument = arguments.keywords.get(site.hand_rolled.function_parameter)
    return argument


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
