"""CKP206: a checkpoint call (or a call reaching one) inside a `with` of a context that torch
does not restore on replay, while the `.backward()` of what the block computed runs after it.

The block is found around the site in its own function, or around a call of that function
from another function of the same file ("the call reaching it"), or of a function calling
that one, up to `MAX_REACH` calls away, all in the same file. The backward is looked for
in the statements after the block, following the names the block assigned, in the same
function; when the block's value is returned, in the callers of that function in the same
file. No backward found: no finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import libcst as cst

from ckptlint.analysis.resolve import FunctionValue
from ckptlint.analysis.scopes import Scope, ScopeKind
from ckptlint.analysis.segment import import_qualnames, iter_segment
from ckptlint.analysis.sites import Site
from ckptlint.checks.base import SiteRule
from ckptlint.findings import Finding
from ckptlint.syntax.source import SourceModule
from ckptlint.syntax.walk import iter_children

# Contexts that change kernel or precision state which torch's checkpoint does not capture.
NOT_REPLAYED = frozenset({
    "torch.nn.attention.sdpa_kernel", "torch.backends.cuda.sdp_kernel",
})
FLAG_CONTEXT_PREFIX, FLAG_CONTEXT_SUFFIX = "torch.backends.", ".flags"
FP8_PACKAGE, FP8_CONTEXT = "transformer_engine.", "fp8_autocast"
SET_DEFAULT_DTYPE = "torch.set_default_dtype"
CONTEXT_MANAGER = "contextlib.contextmanager"
BACKWARD_METHODS = frozenset({"backward", "manual_backward"})
NESTED = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
# How many calls away (in the same file) a block around a call reaching the site is looked for.
MAX_REACH = 3

# A statement and where it stands: its block and its index there.
Frame = tuple[list[cst.BaseStatement], int]


@dataclass(frozen=True)
class Region:
    """Statements that run under a context: a `with` body, or the statements between two
    `torch.set_default_dtype(...)` calls. `frames` leads from the function body down to the
    statement that closes the region (the `with`, or the second setter call)."""

    context: str
    frames: tuple[Frame, ...]
    body: tuple[cst.CSTNode, ...]
    state: str | None = None  # the global a project context manager sets


def is_not_replayed(qualname: str) -> bool:
    return (qualname in NOT_REPLAYED
            or qualname.startswith(FLAG_CONTEXT_PREFIX) and qualname.endswith(FLAG_CONTEXT_SUFFIX)
            or qualname.startswith(FP8_PACKAGE) and qualname.endswith(f".{FP8_CONTEXT}"))


def contains(node: cst.CSTNode, target: cst.CSTNode) -> bool:
    """`target` is `node` or inside it (nested functions and classes excluded)."""
    if node is target:
        return True
    return any(not isinstance(child, NESTED) and contains(child, target)
               for child in iter_children(node))


def statement_frames(body: list[cst.BaseStatement], target: cst.CSTNode) -> list[Frame]:
    """The blocks from `body` down to the statement holding `target`."""
    for index, statement in enumerate(body):
        if not contains(statement, target):
            continue
        frames: list[Frame] = [(body, index)]
        for block in inner_blocks(statement):
            deeper = statement_frames(block, target)
            if deeper:
                return frames + deeper
        return frames
    return []


def inner_blocks(statement: cst.CSTNode) -> Iterator[list[cst.BaseStatement]]:
    if isinstance(statement, NESTED):
        return
    for child in iter_children(statement):
        if isinstance(child, cst.IndentedBlock):
            yield list(child.body)
        elif isinstance(child, (cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler,
                                cst.If, cst.MatchCase)):
            yield from inner_blocks(child)


def body_of(scope: Scope) -> list[cst.BaseStatement]:
    node = scope.node
    if isinstance(node, cst.Module):
        return list(node.body)
    if isinstance(node, cst.FunctionDef) and isinstance(node.body, cst.IndentedBlock):
        return list(node.body.body)
    return []


def target_nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The assignment targets in a statement (nested functions and classes excluded)."""
    if isinstance(node, NESTED):
        return
    if isinstance(node, cst.Assign):
        yield from (target.target for target in node.targets)
    elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For, cst.NamedExpr)):
        yield node.target
    elif isinstance(node, cst.AsName):
        yield node.name
    for child in iter_children(node):
        yield from target_nodes(child)


def all_names(node: cst.CSTNode) -> set[str]:
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, NESTED):
        return set()
    if isinstance(node, cst.Attribute):
        return all_names(node.value)
    return set().union(*(all_names(child) for child in iter_children(node)))


def assigned_names(node: cst.CSTNode) -> set[str]:
    return set().union(*(all_names(target) for target in target_nodes(node)))


def calls_in(node: cst.CSTNode) -> Iterator[cst.Call]:
    if isinstance(node, NESTED):
        return
    if isinstance(node, cst.Call):
        yield node
    for child in iter_children(node):
        yield from calls_in(child)


def backward_names(call: cst.Call) -> set[str] | None:
    """The names a backward call differentiates: the receiver of `loss.backward()`, the
    arguments of `accelerator.backward(loss)`; None for any other call."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value not in BACKWARD_METHODS:
        return None
    names = set().union(set(), *(all_names(argument.value) for argument in call.args))
    if not call.args:
        names |= all_names(func.value)
    return names


def backward_after(frames: tuple[Frame, ...], computed: set[str]) -> cst.Call | None:
    """The first backward call, after the statement `frames` ends at, of a value computed
    from `computed` (names followed through the assignments in between)."""
    computed = set(computed)
    for block, index in reversed(frames):
        for statement in block[index + 1:]:
            for call in calls_in(statement):
                names = backward_names(call)
                if names and names & computed:
                    return call
            if all_names(statement) & computed:
                computed |= assigned_names(statement)
    return None


def returns_from(nodes: Iterable[cst.CSTNode]) -> bool:
    return any(isinstance(node, cst.Return) and node.value is not None
               or not isinstance(node, NESTED) and returns_from(iter_children(node))
               for node in nodes)


def is_setter_statement(statement: cst.CSTNode, scope: Scope) -> bool:
    """`torch.set_default_dtype(...)` as a statement of its own."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    expr = statement.body[0]
    return (isinstance(expr, cst.Expr) and isinstance(expr.value, cst.Call)
            and SET_DEFAULT_DTYPE in import_qualnames(expr.value.func, scope))


def function_calls(module: SourceModule) -> list[tuple[Scope, cst.Call]]:
    """Every call of the module with the scope of the function (or module) making it."""
    found: list[tuple[Scope, cst.Call]] = []
    scope_of = module.scopes.scope_of
    # A loop, not a recursive closure: that would be a cycle holding the module's scopes
    # until the cyclic collector ran.
    pending: list[tuple[cst.CSTNode, Scope]] = [(module.tree, scope_of[id(module.tree)])]
    while pending:
        node, scope = pending.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            scope = scope_of.get(id(node), scope)
        if isinstance(node, cst.Call):
            found.append((scope, node))
        pending.extend((child, scope) for child in reversed(list(iter_children(node))))
    return found


def calls_function(call: cst.Call, function: Scope) -> bool:
    """`call` names `function` as its file calls it: `f(...)` for a module-level function,
    `self.f(...)` for a method."""
    parent = function.parent
    func = call.func
    if parent is not None and parent.kind == ScopeKind.MODULE:
        return isinstance(func, cst.Name) and func.value == function.name
    return (parent is not None and parent.kind == ScopeKind.CLASS
            and isinstance(func, cst.Attribute) and func.attr.value == function.name
            and isinstance(func.value, cst.Name) and func.value.value in ("self", "cls"))


class ContextNotReplayed(SiteRule):
    """A checkpoint inside a kernel or precision context whose backward runs after it."""

    code = "CKP206"
    message = ("`{call:short}` runs inside `{context}`, but the backward at "
               "{backward:at} runs after the block: the checkpoint's replay then runs without "
               "that context (another kernel or precision: a metadata CheckpointError or "
               "silently different gradients); run the backward inside the block, or enter the "
               "context inside the checkpointed function")

    def check_site(self, site: Site) -> Iterable[Finding]:
        call = site.call
        if call is None or not site.is_segment:
            return
        module, scope = site.module, site.scope
        text = module.text
        if not any(name in text for name in BACKWARD_METHODS):
            return  # no backward call in the file: nothing runs after the block
        for region in self.regions(module, scope, call):
            backward = self.backward_of(module, scope, region)
            if backward is not None and self.applies(site, region):
                yield self.report(site, call, region, backward)
                return
        if scope.kind != ScopeKind.FUNCTION:
            return
        calls = self.context.memo.get(("function-calls", id(module.tree)),
                                      lambda: function_calls(module))
        seen, frontier = {id(scope)}, [scope]
        for _ in range(MAX_REACH):
            callers: list[Scope] = []
            for caller, reaching in calls:
                if id(caller) in seen or not any(calls_function(reaching, called)
                                                 for called in frontier):
                    continue
                for region in self.regions(module, caller, reaching):
                    backward = self.backward_of(module, caller, region)
                    if backward is None or not self.applies(site, region):
                        continue
                    first = self.context.memo.get(("context-not-replayed", id(reaching)),
                                                  lambda: id(site))
                    if first == id(site):
                        yield self.report(site, reaching, region, backward)
                    return
                if caller.kind == ScopeKind.FUNCTION and all(c is not caller for c in callers):
                    callers.append(caller)
            seen.update(id(caller) for caller in callers)
            frontier = callers
            if not frontier:
                return

    def report(self, site: Site, node: cst.Call, region: Region, backward: cst.Call) -> Finding:
        data = {"api": site.api_name, "mode": site.mode.value, "context": region.context,
                "backward": {"filename": site.module.display,
                             "row": site.module.start(backward).row},
                "call": site.module.code(node.func)}
        if region.state is not None:
            data["state"] = region.state
        return self.finding(site.module, node, data, site=site)

    # -- the regions around a call ---------------------------------------------------------
    def regions(self, module: SourceModule, scope: Scope, target: cst.CSTNode) -> Iterator[Region]:
        frames = statement_frames(body_of(scope), target)
        for depth, (block, index) in enumerate(frames):
            statement = block[index]
            if isinstance(statement, cst.With) and contains(statement.body, target):
                for item in statement.items:
                    found = self.context_of(item.item, module, scope)
                    if found is not None:
                        yield Region(found[0], tuple(frames[:depth + 1]), (statement.body,),
                                     found[1])
            if not is_setter_statement(statement, scope):
                yield from self.setter_pair(frames[:depth], block, index, scope)

    @staticmethod
    def setter_pair(outer: list[Frame], block: list[cst.BaseStatement], index: int,
                    scope: Scope) -> Iterator[Region]:
        """`torch.set_default_dtype(a)` before the statement and another one after it."""
        before = [i for i in range(index) if is_setter_statement(block[i], scope)]
        after = [i for i in range(index + 1, len(block)) if is_setter_statement(block[i], scope)]
        if before and after:
            yield Region(SET_DEFAULT_DTYPE, (*outer, (block, after[0])),
                         tuple(block[before[-1] + 1:after[0]]))

    def context_of(self, expr: cst.BaseExpression, module: SourceModule,
                   scope: Scope) -> tuple[str, str | None] | None:
        """(the context's name, the global it sets) for a context torch does not replay."""
        if not isinstance(expr, cst.Call):
            return None
        named = sorted(name for name in import_qualnames(expr.func, scope)
                       if is_not_replayed(name))
        if named:
            return named[0], None
        values = self.context.resolver.values(expr.func, module, scope)
        for function in self.context.resolver.functions(values)[0]:
            found = self.project_context(function)
            if found is not None:
                return found
        return None

    def project_context(self, function: FunctionValue) -> tuple[str, str | None] | None:
        """A project `@contextmanager` that enters a context torch does not replay, calls
        `torch.set_default_dtype`, or assigns a global (the name is returned)."""
        node = function.node
        if not isinstance(node, cst.FunctionDef) or not any(
                CONTEXT_MANAGER in import_qualnames(d.decorator, function.scope.parent
                                                    or function.scope)
                for d in node.decorators):
            return None
        name = ".".join(part for part in (function.module.name, function.qualname) if part)
        scope = function.scope
        for call in calls_in(node.body):
            if any(is_not_replayed(q) or q == SET_DEFAULT_DTYPE
                   for q in import_qualnames(call.func, scope)):
                return name, None
        written = sorted(scope.global_names & assigned_names(node.body))
        return (name, written[0]) if written else None

    def applies(self, site: Site, region: Region) -> bool:
        """A project context that sets a global counts when the segment reads it."""
        if region.state is None:
            return True
        segment = self.context.memo.get(("segment", id(site.node)),
                                        lambda: self.context.segments.build(site))
        return any(isinstance(load.node, cst.Name) and load.node.value == region.state
                   for _, facts in iter_segment(segment) for load in facts.loads)

    # -- the backward --------------------------------------------------------------------------
    def backward_of(self, module: SourceModule, scope: Scope, region: Region) -> cst.Call | None:
        """The backward of what the region computed: after it in the same function, or, when
        the function returns it, after the calls of the function in the same file."""
        computed = set().union(*(assigned_names(node) for node in region.body))
        found = backward_after(region.frames, computed)
        if found is not None or scope.kind != ScopeKind.FUNCTION:
            return found
        if not returns_from(region.body):
            return None
        for caller, call in self.context.memo.get(("function-calls", id(module.tree)),
                                                  lambda: function_calls(module)):
            if caller is scope or not calls_function(call, scope):
                continue
            frames = statement_frames(body_of(caller), call)
            if not frames:
                continue
            block, index = frames[-1]
            statement = block[index]
            for candidate in calls_in(statement):
                if backward_names(candidate) is not None and contains(candidate.func, call):
                    return candidate
            found = backward_after(tuple(frames), assigned_names(statement))
            if found is not None:
                return found
        return None
