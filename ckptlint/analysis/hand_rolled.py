"""Hand-written checkpoints: `torch.autograd.Function` subclasses that recompute in backward.

The shape (guided-diffusion's `CheckpointFunction` and its many copies, DeepSpeed's and
Megatron's, tiled-compute functions): `forward` runs a function it is passed (directly, or
stored on `ctx` first) and keeps no graph, because autograd runs `forward` with gradients off
(an explicit `torch.no_grad()` changes nothing); `backward` runs the same function again under
`torch.enable_grad()` and differentiates that rerun. That rerun is a checkpoint replay, and it
inherits nothing torch's own checkpoint restores unless the class does it itself:

- the RNG state (`torch.get_rng_state`/`set_rng_state`, `torch.random.fork_rng`, a generator's
  or an RNG tracker's `set_state(s)`): without it dropout draws other masks in the rerun;
- autocast (`torch.autocast(...)` entered in `backward`, or `backward` decorated with
  `torch.amp.custom_bwd`): `backward` runs outside the caller's autocast block, so without it
  the rerun computes at another precision;
- gradients for what it is not passed: `torch.autograd.grad(outputs, inputs)` differentiates
  only the tensors passed in; parameters the function uses without being passed get none
  (`torch.autograd.backward` accumulates into every leaf and has no such gap).

Everything is read from the class's own `forward` and `backward` and the file's imports;
nothing is imported or run.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

import libcst as cst

from ckptlint.analysis.scopes import BindingKind, Scope, ScopeKind, bool_value
from ckptlint.syntax.source import SourceModule
from ckptlint.syntax.walk import Visitor

# How findings and site records name what a hand-written checkpoint site uses.
HAND_ROLLED_API = "torch.autograd.Function"
AUTOGRAD_FUNCTION = frozenset({"torch.autograd.Function", "torch.autograd.function.Function"})
GRAD_ON = frozenset({"torch.enable_grad", "torch.autograd.enable_grad",
                     "torch.autograd.grad_mode.enable_grad"})
GRAD_OFF = frozenset({"torch.no_grad", "torch.autograd.no_grad",
                      "torch.autograd.grad_mode.no_grad", "torch.inference_mode"})
GRAD_SWITCH = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled",
                         "torch.autograd.grad_mode.set_grad_enabled"})
GRAD_OF_INPUTS = frozenset({"torch.autograd.grad"})
# Final names that restore RNG state by themselves; otherwise a `set*`/`restore*` call whose
# callee mentions an RNG or a generator (`torch.set_rng_state`, `tracker.set_states`).
RNG_RESTORERS = frozenset({"fork_rng"})
RNG_WORDS = ("rng", "generator")
RNG_VERBS = ("set", "restore")
AUTOCAST = "autocast"
CUSTOM_BACKWARD = "custom_bwd"

# The qualified names an expression denotes through the file's imports and aliases
# (`SiteFinder.qualnames`).
Qualnames = Callable[[cst.BaseExpression, Scope], set[str]]

# What a hand-written checkpoint may lack (`data.lacks` of CKP106), in report order.
LACKS_RNG, LACKS_AUTOCAST, LACKS_UNPASSED = "rng", "autocast", "unpassed-inputs"
LACKS = (LACKS_RNG, LACKS_AUTOCAST, LACKS_UNPASSED)


@dataclass(frozen=True)
class HandRolled:
    """A class found to recompute a function in `backward`, and what it handles itself."""

    qualname: str
    restores_rng: bool
    captures_autocast: bool
    grads_only_for_inputs: bool
    # Where `.apply(...)` passes the function `forward` runs (its parameter's position after
    # `ctx`); None when `forward` runs it from `*args` or a keyword-only parameter.
    function_index: int | None = None
    function_parameter: str = ""  # its name, for `.apply(..., fn=...)`
    # The keywords `.apply(...)` may pass (`forward`'s parameters after `ctx`); None when
    # `forward` takes `**kwargs`.
    keywords: frozenset[str] | None = frozenset()

    @property
    def lacks(self) -> list[str]:
        missing = {LACKS_RNG: not self.restores_rng, LACKS_AUTOCAST: not self.captures_autocast,
                   LACKS_UNPASSED: self.grads_only_for_inputs}
        return [name for name in LACKS if missing[name]]


def hand_rolled_checkpoint(module: SourceModule, node: cst.ClassDef, outer: Scope,
                           qualnames: Qualnames) -> HandRolled | None:
    """What `node` handles, if it is a hand-written checkpoint (see the module's docstring)."""
    if not any(qualnames(base.value, outer) & AUTOGRAD_FUNCTION for base in node.bases):
        return None
    methods = {statement.name.value: statement for statement in node.body.body
               if isinstance(statement, cst.FunctionDef)}
    forward, backward = methods.get("forward"), methods.get("backward")
    if forward is None or backward is None:
        return None
    scopes = module.scopes.scope_of
    forward_scope, backward_scope = scopes[id(forward)], scopes[id(backward)]
    stored = stored_functions(forward)
    ran_forward = GradWalk(forward_scope, function_names(forward, stored, forward_scope),
                           qualnames)
    ran_forward.walk(forward.body)
    if not any(grad is not True for grad in ran_forward.calls):
        return None
    ran_backward = GradWalk(backward_scope, function_names(backward, stored, backward_scope),
                            qualnames)
    ran_backward.walk(backward.body)
    if True not in ran_backward.calls:
        return None
    class_scope = scopes[id(node)]
    index = function_index(forward, stored, ran_forward.called)
    return HandRolled(
        qualname=class_scope.qualname(),
        restores_rng=ran_backward.restores_rng,
        captures_autocast=ran_backward.enters_autocast or runs_in_forward_autocast(backward),
        grads_only_for_inputs=ran_backward.grad_of_inputs and not ran_backward.backward_call,
        function_index=index,
        function_parameter="" if index is None else parameter_names(forward)[index + 1],
        keywords=None if isinstance(forward.params.star_kwarg, cst.Param) else frozenset(
            param.name.value for param in (*forward.params.params[1:],
                                           *forward.params.kwonly_params)),
    )


def function_index(forward: cst.FunctionDef, stored: dict[str, str],
                   called: list[cst.BaseExpression]) -> int | None:
    """The `.apply(...)` position of the parameter whose function `forward` runs: called
    directly (`fn(...)`) or stored first (`ctx.fn = fn; ctx.fn(...)`)."""
    names = parameter_names(forward)
    passed = names[1:]
    for func in called:
        if isinstance(func, cst.Name) and func.value in passed:
            return passed.index(func.value)
        if isinstance(func, cst.Attribute) and func.attr.value in stored:
            return passed.index(stored[func.attr.value])
    return None


def runs_in_forward_autocast(backward: cst.FunctionDef) -> bool:
    """`@torch.amp.custom_bwd(...)` (or `torch.cuda.amp.custom_bwd`): torch runs `backward`
    in the autocast state `forward` ran in."""
    for decorator in backward.decorators:
        expr = decorator.decorator
        if isinstance(expr, cst.Call):
            expr = expr.func
        if final_name(expr) == CUSTOM_BACKWARD:
            return True
    return False


def parameter_names(function: cst.FunctionDef) -> list[str]:
    params = function.params
    return [param.name.value for param in (*params.posonly_params, *params.params)]


def stored_functions(forward: cst.FunctionDef) -> dict[str, str]:
    """`ctx` attributes that `forward` sets from one of its own parameters (`ctx.fn = fn`),
    each with that parameter."""
    names = parameter_names(forward)
    if not names:
        return {}
    ctx, passed = names[0], set(names[1:])
    stored: dict[str, str] = {}
    for statement in iter_assignments(forward.body):
        for target in statement.targets:
            attribute = target.target
            if (isinstance(attribute, cst.Attribute) and isinstance(attribute.value, cst.Name)
                    and attribute.value.value == ctx and isinstance(statement.value, cst.Name)
                    and statement.value.value in passed):
                stored[attribute.attr.value] = statement.value.value
    return stored


def function_names(method: cst.FunctionDef, stored: dict[str, str],
                   scope: Scope) -> FunctionRefs:
    """How `method` may name the checkpointed function: a parameter it is passed (in
    `forward`), `ctx.<stored>`, a local bound to `ctx.<stored>`, or a parameter of a function
    the class is defined in (a closure)."""
    names = parameter_names(method)
    ctx = names[0] if names else ""
    locals_: set[str] = set(names[1:]) if method.name.value == "forward" else set()
    for name, bindings in scope.bindings.items():
        if any(binding.kind == BindingKind.ASSIGN and is_stored(binding.value, ctx, stored)
               for binding in bindings):
            locals_.add(name)
    return FunctionRefs(ctx, frozenset(stored), frozenset(locals_))


@dataclass(frozen=True)
class FunctionRefs:
    ctx: str
    stored: frozenset[str]
    locals: frozenset[str]

    def names_function(self, func: cst.BaseExpression, scope: Scope) -> bool:
        if is_stored(func, self.ctx, self.stored):
            return True
        if not isinstance(func, cst.Name):
            return False
        if func.value in self.locals:
            return True
        bindings = scope.lookup(func.value)
        return bool(bindings) and all(
            binding.kind == BindingKind.PARAM and binding.scope.kind == ScopeKind.FUNCTION
            and binding.scope is not scope for binding in bindings)


def is_stored(expr: cst.BaseExpression | None, ctx: str, stored: Collection[str]) -> bool:
    return (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)
            and expr.value.value == ctx and expr.attr.value in stored)


def iter_assignments(body: cst.CSTNode) -> list[cst.Assign]:
    collector = AssignCollector()
    collector.walk(body)
    return collector.assignments


class AssignCollector(Visitor):
    def __init__(self) -> None:
        self.assignments: list[cst.Assign] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        self.assignments.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False


class GradWalk(Visitor):
    """One method's body: each call of the function with the grad mode it runs in (True:
    inside `enable_grad`/`set_grad_enabled(True)`, False: inside `no_grad`, None: as
    entered), and the RNG, autocast and gradient calls it makes. Nested definitions are not
    entered."""

    def __init__(self, scope: Scope, refs: FunctionRefs, qualnames: Qualnames) -> None:
        self.scope = scope
        self.refs = refs
        self.qualnames = qualnames
        self.grad: list[bool | None] = [None]
        self.pushed: list[int] = []
        self.calls: list[bool | None] = []
        self.called: list[cst.BaseExpression] = []  # how each call of the function names it
        self.restores_rng = False
        self.enters_autocast = False
        self.grad_of_inputs = False
        self.backward_call = False

    def visit_With(self, node: cst.With) -> None:
        count = 0
        for item in node.items:
            mode = self.grad_mode(item.item)
            if mode is not None:
                self.grad.append(mode)
                count += 1
        self.pushed.append(count)

    def leave_With(self, node: cst.With) -> None:
        for _ in range(self.pushed.pop()):
            self.grad.pop()

    def grad_mode(self, expr: cst.BaseExpression) -> bool | None:
        if not isinstance(expr, cst.Call):
            return None
        names = self.qualnames(expr.func, self.scope)
        if names & GRAD_ON:
            return True
        if names & GRAD_OFF:
            return False
        if names & GRAD_SWITCH and expr.args:
            return bool_value(expr.args[0].value)
        return None

    def visit_Call(self, node: cst.Call) -> None:
        if self.refs.names_function(node.func, self.scope):
            self.calls.append(self.grad[-1])
            self.called.append(node.func)
            return
        final = final_name(node.func)
        if final is None:
            return
        plain = final.lstrip("_").lower()
        callee = cst.Module([]).code_for_node(node.func).lower()
        if plain in RNG_RESTORERS or (plain.startswith(RNG_VERBS)
                                      and any(word in callee for word in RNG_WORDS)):
            self.restores_rng = True
        elif plain == AUTOCAST:
            self.enters_autocast = True
        elif plain == "backward":
            self.backward_call = True
        elif self.qualnames(node.func, self.scope) & GRAD_OF_INPUTS:
            self.grad_of_inputs = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def final_name(func: cst.BaseExpression) -> str | None:
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return None
