"""CKP402: checkpointed code mutates an object passed into it; the replay does it again.

An argument is an object the segment did not create: a parameter of the checkpointed function
(not `self`, not `*args`/`**kwargs`, which are fresh containers), or a parameter of a function
the segment calls that receives such a parameter unchanged. A mutation is an in-place method
(`append`, `update`, `add_`, a cache's `update(...)`), an item assignment or deletion, an
augmented assignment of a tensor parameter, or an accumulating write of an attribute of it.
A parameter rebound anywhere in its function (`past = list(past)`) is left alone: what is
mutated may be a copy. So is a parameter of the checkpointed function that the checkpoint call
does not pass and whose default is a constant (`checkpoint(attn, x)` with
`def forward(self, x, cache=None)`): it holds no object from outside the segment.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from ckptlint.analysis.apis import CHECKPOINT_KEYWORDS, Mode, SiteKind
from ckptlint.analysis.bindings import root_name
from ckptlint.analysis.scopes import BindingKind, ScopeKind, bool_value, is_staticmethod
from ckptlint.analysis.segment import (
    Reached,
    Segment,
    Write,
    WriteKind,
    compact,
    iter_segment,
    memo_containers,
    reads_target,
)
from ckptlint.analysis.tensors import annotation_may_be_tensor
from ckptlint.checks.context import RuleContext
from ckptlint.checks.reentrant_incompatible_call import is_constant
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.checks.side_effect_in_segment import CHANGE_HOW
from ckptlint.checks.state_facts import segment_change
from ckptlint.findings import Finding

# Parameters transformers' `GradientCheckpointingLayer` sets to None before it checkpoints a
# layer (5.x: `cache`, `layer_past`; 4.x also the `past_key_value(s)` spellings), unless the
# layer class declares `_can_checkpoint_with_cache = True`.
HF_CLEARED_CACHES = frozenset({"cache", "layer_past", "past_key_value", "past_key_values"})
HF_KEEPS_CACHE = "_can_checkpoint_with_cache"
# Container mutators that are out-of-place tensor methods (`x.add(y)`, `x.sort(-1)`): a
# mutation only where the parameter is annotated as something else.
TENSOR_OUT_OF_PLACE = frozenset({"add", "sort", "put"})


@dataclass(frozen=True)
class Passed:
    """A parameter of a segment function that holds an object from outside the segment."""

    parameter: str
    argument: str  # the checkpointed function's parameter it comes from


class ArgumentMutation(SegmentRule):
    """A segment mutates an object passed into it."""

    code = "CKP402"
    message = ("checkpointed code {write:phrase} the argument `{state}`{forwarded:phrase}; the "
               "replay in backward does it again to the already-changed object (a cache grows "
               "twice, a list gets a second entry, an input tensor is changed twice); mutate a "
               "copy, return the new value, or do it outside the checkpoint")
    phrases = {
        "write": {"accumulate": "accumulates into", "augassign": "updates in place",
                  "item": "updates an item of", "del": "deletes from",
                  "method": "mutates (`.{method}()`)"},
        "forwarded": {True: " (passed down from the checkpointed function's `{argument}`)",
                      False: ""},
    }

    def check(self, segment: Segment) -> Iterator[Finding]:
        passed = passed_parameters(self.context, segment, self.cleared_by_library(segment))
        for reached, facts in self.functions(segment):
            held = passed.get(id(reached.node), {})
            if not held:
                continue
            seen: set[int] = set()
            memo = memo_containers(reached.node)
            for write in facts.writes:
                parameter = self.mutated_parameter(reached, write, held, memo, segment.mode)
                if parameter is None:
                    continue
                row = reached.module.start(write.node).row
                if row in seen:
                    continue
                seen.add(row)
                kind = "accumulate" if write.how == WriteKind.ASSIGN else write.how.value
                origin = held[parameter].argument
                data = {"state": parameter, "owner": reached.function.qualname,
                        "attribute": parameter, "write": kind,
                        "changes": [segment_change(reached, write.node, CHANGE_HOW[write.how])],
                        "argument": origin, "forwarded": reached.depth > 0}
                if write.how == WriteKind.METHOD:
                    data["method"] = write.method
                yield self.at(segment, reached, write.node, data)

    # -- which writes ---------------------------------------------------------------------
    def mutated_parameter(self, reached: Reached, write: Write, held: dict[str, Passed],
                          memo: frozenset[str], mode: Mode) -> str | None:
        if write.once_guarded or (write.grad_guarded and mode != Mode.NON_REENTRANT):
            return None
        root = root_name(write.target)
        if root is None or root.value not in held \
                or not holds_parameter(self.context, reached, root.value, write.node):
            return None
        if write.how == WriteKind.ITEM or write.method in ("add", "setdefault", "append"):
            if compact(write.target) in memo:
                return None  # `if key not in cache: cache[key] = ...`: the replay adds nothing
        target = write.target
        if write.method in TENSOR_OUT_OF_PLACE and (
                target is not root or self.may_be_tensor(reached, root.value)):
            return None
        if write.how == WriteKind.AUGASSIGN and target is root:
            # `x += y` mutates a tensor in place but rebinds an int: only tensor parameters.
            return root.value if self.tensor_annotated(reached, root.value) else None
        if target is root and (write.how == WriteKind.ASSIGN
                               or write.how == WriteKind.DEL and not write.is_item):
            return None  # rebinding or deleting the local name
        if write.how == WriteKind.ASSIGN and not write.accumulates:
            return None  # `state.last = x`: the replay writes the same again
        if write.how == WriteKind.ITEM and isinstance(write.node, cst.Assign) \
                and not reads_target(write.node.value, target):
            return None  # `cache[key] = value`: an overwrite, the replay writes the same again
        return root.value

    @staticmethod
    def annotation(reached: Reached, name: str) -> cst.BaseExpression | None:
        for param in all_params(reached.node.params):
            if param.name.value == name and param.annotation is not None:
                return param.annotation.annotation
        return None

    def tensor_annotated(self, reached: Reached, name: str) -> bool:
        annotation = self.annotation(reached, name)
        return annotation is not None and "Tensor" in cst.Module([]).code_for_node(annotation)

    def may_be_tensor(self, reached: Reached, name: str) -> bool:
        annotation = self.annotation(reached, name)
        return annotation is None or annotation_may_be_tensor(annotation)

    @staticmethod
    def cleared_by_library(segment: Segment) -> frozenset[str]:
        """The cache parameters transformers' layer wrapper sets to None under checkpointing."""
        site = segment.site
        if site.kind != SiteKind.HF_LAYER or not isinstance(site.node, cst.ClassDef):
            return frozenset()
        for statement in site.node.body.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if (isinstance(small, cst.Assign) and len(small.targets) == 1
                            and isinstance(small.targets[0].target, cst.Name)
                            and small.targets[0].target.value == HF_KEEPS_CACHE
                            and bool_value(small.value) is True):
                        return frozenset()
        return HF_CLEARED_CACHES


def holds_parameter(context: RuleContext, reached: Reached, name: str,
                    point: cst.CSTNode, depth: int = 0) -> bool:
    """At `point`, the name still holds what was passed for the parameter of that name: every
    binding that can reach the point is the parameter, or an `x += y` (which keeps a tensor's
    identity) reached only by such bindings. A reassignment later in the function (`mask =
    mask & other` after `self.sub(mask)`) does not count."""
    if depth > 8 or not any(b.kind == BindingKind.PARAM
                            for b in reached.scope.bindings.get(name, [])):
        return False
    reaching = context.tensors(reached).reaching_at(reached.scope, name, point)
    return bool(reaching) and all(
        binding.kind == BindingKind.PARAM
        or binding.kind == BindingKind.AUGASSIGN
        and holds_parameter(context, reached, name, binding.node, depth + 1)
        for binding in reaching)


def passed_parameters(context: RuleContext, segment: Segment,
                      cleared: frozenset[str] = frozenset()) -> dict[int, dict[str, Passed]]:
    """For each function of the segment (by node id), its parameters holding objects passed
    into the segment (`cleared`: parameters of the checkpointed function the library sets to
    None first)."""
    passed: dict[int, dict[str, Passed]] = {}
    in_segment = {id(reached.node): reached for reached in segment.functions}
    for reached in segment.functions:
        if reached.depth == 0:
            unpassed = left_at_default(segment, reached)
            names = [name for name in plain_parameters(reached)
                     if name not in cleared and name not in unpassed]
            passed.setdefault(id(reached.node), {}).update(
                {name: Passed(name, name) for name in names})
    for reached, facts in iter_segment(segment):  # breadth first: callers come first
        held = passed.get(id(reached.node))
        if not held:
            continue
        for call in facts.calls:
            given = {index: arg.value.value for index, arg in enumerate(call.node.args)
                     if isinstance(arg.value, cst.Name) and arg.value.value in held
                     and holds_parameter(context, reached, arg.value.value, call.node)}
            if not given:
                continue
            callees = context.segments.resolve_call(call.node, reached.function, call.scope)
            if len(callees) > 1:  # which one runs is not known: positions may mean others
                given = {index: name for index, name in given.items()
                         if call.node.args[index].keyword is not None}
            for callee in callees:
                target = in_segment.get(id(callee.node))
                if target is None or target.depth <= reached.depth:
                    continue
                for parameter, name in bind_arguments(call.node, target, given):
                    passed.setdefault(id(target.node), {}).setdefault(
                        parameter, Passed(parameter, held[name].argument))
    return passed


def all_params(params: cst.Parameters) -> list[cst.Param]:
    return [*params.posonly_params, *params.params, *params.kwonly_params]


def is_method(reached: Reached) -> bool:
    node = reached.node
    parent = reached.scope.parent
    return (isinstance(node, cst.FunctionDef) and parent is not None
            and parent.kind == ScopeKind.CLASS and not is_staticmethod(node))


def plain_parameters(reached: Reached) -> list[str]:
    """The checkpointed function's parameters, without `self`/`cls` (`*args`/`**kwargs` are
    containers built for the call, never an object passed in)."""
    params = reached.node.params
    positional = [*params.posonly_params, *params.params]
    if is_method(reached) and positional:
        positional = positional[1:]
    return [param.name.value for param in [*positional, *params.kwonly_params]]


def left_at_default(segment: Segment, reached: Reached) -> frozenset[str]:
    """Parameters of the checkpointed function that the site call (`checkpoint(fn, *args,
    **kw)`) does not pass and whose default is a constant: nothing outside the segment is in
    them. Empty when what the call passes is not known (`*args`, `**kw`, a target built by a
    call or a lambda, whose own bound arguments are not counted here)."""
    site = segment.site
    arguments = site.arguments
    if (site.kind not in (SiteKind.FUNCTION, SiteKind.HF_FUNC) or arguments is None
            or arguments.star_positional or arguments.opaque_keywords):
        return frozenset()
    target_index = site.api.target_index if site.api else 0
    target = arguments.positional_at(target_index)
    if target is None or not isinstance(target.value, (cst.Name, cst.Attribute, cst.Subscript)):
        return frozenset()
    passed_positionally = len(arguments.positional) - target_index - 1
    own = site.api.own_keywords if site.api else CHECKPOINT_KEYWORDS
    passed_by_keyword = {name for name in arguments.keywords if name not in own}
    params = reached.node.params
    positional = [*params.posonly_params, *params.params]
    if is_method(reached) and positional:
        positional = positional[1:]
    unpassed = [*positional[passed_positionally:], *params.kwonly_params]
    return frozenset(param.name.value for param in unpassed
                     if param.name.value not in passed_by_keyword
                     and param.default is not None and is_constant(param.default))


def bind_arguments(call: cst.Call, callee: Reached,
                   given: dict[int, str]) -> Iterator[tuple[str, str]]:
    """(callee parameter, caller's name) for the arguments in `given` (the caller's name passed
    at each index of the call)."""
    params = callee.node.params
    positional = [*params.posonly_params, *params.params]
    if is_method(callee) and positional:
        positional = positional[1:]  # `self.attn(x)`, `obj.method(x)`: self is bound
    named = {param.name.value for param in [*params.params, *params.kwonly_params]}
    position = 0
    for index, arg in enumerate(call.args):
        if arg.star:
            if index in given:
                continue
            return  # positions after a `*args` are unknown
        if arg.keyword is None:
            if index in given and position < len(positional):
                yield positional[position].name.value, given[index]
            position += 1
        elif index in given and arg.keyword.value in named:
            yield arg.keyword.value, given[index]
