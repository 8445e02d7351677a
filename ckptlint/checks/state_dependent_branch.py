"""CKP204: a branch in checkpointed code whose condition reads mutable state, or
`torch.is_grad_enabled()` in a reentrant segment."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ckptlint.analysis.apis import Mode
from ckptlint.analysis.segment import Segment, import_qualnames
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.checks.state_facts import source_text
from ckptlint.findings import Finding
from ckptlint.syntax.walk import Visitor

GRAD_MODE = "torch.is_grad_enabled()"


class StateDependentBranch(SegmentRule):
    code = "CKP204"
    message = "{condition:phrase}"
    phrases = {"condition": {
        "state": "checkpointed code branches on `{state}`, which is {changes:places}; if it "
                 "changes before the backward, the replay takes another path (a different set "
                 "of saved tensors raises CheckpointError; the same count silently gives wrong "
                 "gradients)",
        "grad-mode": "`{expression:short}` is False in the forward of a reentrant checkpoint (it "
                     "runs under no_grad) and True in the replay, so this branch differs by "
                     "construction",
    }}

    def check(self, segment: Segment) -> Iterator[Finding]:
        for reached, facts in self.functions(segment):
            for load, hazard in self.changed_state_reads(segment, reached, facts,
                                                         in_condition=True):
                yield self.at(segment, reached, load.node,
                              {"condition": "state", **hazard.data()})
            if segment.mode != Mode.REENTRANT:
                continue
            for condition in facts.conditions:
                for call in grad_enabled_calls(condition.test, condition.scope):
                    if isinstance(condition.owner, cst.If) and only_side_effects(condition.owner):
                        continue  # the deliberate run-once guard
                    yield self.at(segment, reached, call, {
                        "condition": "grad-mode", "state": GRAD_MODE, "owner": "torch",
                        "attribute": "is_grad_enabled", "changes": [],
                        "expression": source_text(reached.module, call)})


def grad_enabled_calls(expr: cst.BaseExpression, scope) -> list[cst.Call]:
    finder = GradEnabledCalls(scope)
    finder.walk(expr)
    return finder.found


class GradEnabledCalls(Visitor):
    """`torch.is_grad_enabled()` calls, however imported."""

    def __init__(self, scope) -> None:
        self.scope = scope
        self.found: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        if not node.args and any(n.startswith("torch") and n.endswith(".is_grad_enabled")
                                 for n in import_qualnames(node.func, self.scope)):
            self.found.append(node)


def only_side_effects(node: cst.If) -> bool:
    """The branch only updates attributes/containers, logs or counts: a run-once guard."""
    blocks = [node.body]
    orelse = node.orelse
    while orelse is not None:
        if isinstance(orelse, cst.If):
            return False
        blocks.append(orelse.body)
        orelse = None
    for block in blocks:
        statements: list[cst.CSTNode] = (
            list(block.body) if isinstance(block, cst.IndentedBlock) else [block])
        for statement in statements:
            if not isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
                return False
            for small in statement.body:
                if isinstance(small, cst.Pass):
                    continue
                if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    continue
                if isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                    targets = ([t.target for t in small.targets] if isinstance(small, cst.Assign)
                               else [small.target])
                    if all(isinstance(t, (cst.Attribute, cst.Subscript)) for t in targets):
                        continue
                return False
    return True
