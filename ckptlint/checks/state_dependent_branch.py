"""CKP204: a branch in checkpointed code whose condition reads mutable state, or
`torch.is_grad_enabled()` in a reentrant segment."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ckptlint.syntax.walk import Visitor

from ckptlint.analysis.bindings import describe_changes
from ckptlint.findings import Finding
from ckptlint.checks.segment_base import SegmentRule, snippet
from ckptlint.analysis.segment import Segment, import_qualnames
from ckptlint.analysis.sites import REENTRANT


class StateDependentBranch(SegmentRule):
    code = "CKP204"

    def check(self, segment: Segment) -> Iterator[Finding]:
        for reached, facts in self.functions(segment):
            for load, name, changes in self.changed_state_reads(reached, facts,
                                                                in_condition=True):
                yield self.at(segment, reached, load.node,
                              f"checkpointed code branches on `{name}`, which is "
                              f"{describe_changes(changes)}; if it changes before the backward, "
                              f"the replay takes another path (a different set of saved tensors "
                              f"raises CheckpointError; the same count silently gives wrong "
                              f"gradients)")
            if segment.mode != REENTRANT:
                continue
            for condition in facts.conditions:
                for call in grad_enabled_calls(condition.test, condition.scope):
                    if isinstance(condition.owner, cst.If) and only_side_effects(condition.owner):
                        continue  # the deliberate run-once guard
                    yield self.at(segment, reached, call,
                                  f"`{snippet(reached.module, call)}` is False in the forward of "
                                  f"a reentrant checkpoint (it runs under no_grad) and True in "
                                  f"the replay, so this branch differs by construction")


def grad_enabled_calls(expr: cst.BaseExpression, scope) -> list[cst.Call]:
    found: list[cst.Call] = []

    class Finder(Visitor):
        def visit_Call(self, node: cst.Call) -> None:
            if not node.args and any(n.startswith("torch") and n.endswith(".is_grad_enabled")
                                     for n in import_qualnames(node.func, scope)):
                found.append(node)

    Finder().walk(expr)
    return found


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
        if not isinstance(block, cst.IndentedBlock):
            statements = [block]
        else:
            statements = list(block.body)
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
