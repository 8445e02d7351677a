"""CKP203: a branch in checkpointed code whose condition depends on tensor values."""

from __future__ import annotations

from collections.abc import Iterator

from ckptlint.analysis.segment import Segment
from ckptlint.analysis.tensors import STRONG
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.checks.state_facts import source_text
from ckptlint.findings import Finding

# The syntax that branches, by the libcst node holding the condition.
BRANCHES = {"If": "if", "While": "while", "IfExp": "conditional", "Assert": "assert",
            "BooleanOperation": "boolean", "CompIf": "comprehension"}


class DataDependentBranch(SegmentRule):
    code = "CKP203"
    message = ("{branch:phrase} on tensor values (`{expression:short}`): the replay takes the "
               "same path only if these values come out bit-identical (nondeterministic "
               "kernels, unrestored randomness or changed state flip it); `ckptlint dynamic` "
               "can confirm or clear this")
    phrases = {"branch": {
        "if": "`if`", "while": "`while`", "conditional": "conditional expression",
        "assert": "`assert`", "boolean": "`and`/`or`", "comprehension": "comprehension filter",
        "other": "branch",
    }}

    def check(self, segment: Segment) -> Iterator[Finding]:
        for reached, facts in self.functions(segment):
            inference = self.context.tensors(reached)
            seen: set[int] = set()
            for condition in facts.conditions:
                if inference.level(condition.test, condition.scope) != STRONG:
                    continue
                row = reached.module.start(condition.test).row
                if row in seen:
                    continue
                seen.add(row)
                yield self.at(segment, reached, condition.test, {
                    "expression": source_text(reached.module, condition.test),
                    "branch": BRANCHES.get(type(condition.owner).__name__, "other")})
