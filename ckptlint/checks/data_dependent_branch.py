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


# How each kind of branch is named in the message.
SYNTAX = {"if": "`if`", "while": "`while`", "conditional": "conditional expression",
          "assert": "`assert`", "boolean": "`and`/`or`", "comprehension": "comprehension filter",
          "other": "branch"}
ANOTHER_PATH = ("the replay takes the same path only if these values come out bit-identical "
                "(nondeterministic kernels, unrestored randomness or changed state flip it)")
# An assert has no other path: a replay whose values differ fails it during backward.
ASSERT_FAILS = ("the replay checks it again during backward, where values that come out "
                "different (nondeterministic kernels, unrestored randomness or changed state) "
                "raise AssertionError far from the forward that passed it")


class DataDependentBranch(SegmentRule):
    code = "CKP203"
    message = "{branch:phrase}; `ckptlint dynamic` can confirm or clear this"
    phrases = {"branch": {
        kind: f"{syntax} on tensor values (`{{expression:short}}`): "
              f"{ASSERT_FAILS if kind == 'assert' else ANOTHER_PATH}"
        for kind, syntax in SYNTAX.items()}}

    def check(self, segment: Segment) -> Iterator[Finding]:
        for reached, facts in self.functions(segment):
            inference = self.context.tensors(reached)
            seen: set[int] = set()
            for condition in facts.conditions:
                level = inference.level_at(condition.test, condition.scope, condition.test)
                if level != STRONG:
                    continue
                row = reached.module.start(condition.test).row
                if row in seen:
                    continue
                seen.add(row)
                yield self.at(segment, reached, condition.test, {
                    "expression": source_text(reached.module, condition.test),
                    "branch": BRANCHES.get(type(condition.owner).__name__, "other")})
