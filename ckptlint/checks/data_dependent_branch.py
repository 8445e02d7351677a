"""CKP203: a branch in checkpointed code whose condition depends on tensor values."""

from __future__ import annotations

from typing import Iterator

from ckptlint.findings import Finding
from ckptlint.checks.segment_base import SegmentRule, snippet
from ckptlint.analysis.segment import Segment
from ckptlint.analysis.tensors import STRONG


class DataDependentBranch(SegmentRule):
    code = "CKP203"

    def check(self, segment: Segment) -> Iterator[Finding]:
        for reached, facts in self.functions(segment):
            inference = self.tensors(reached)
            seen: set[int] = set()
            for condition in facts.conditions:
                if inference.level(condition.test, condition.scope) != STRONG:
                    continue
                row = reached.module.start(condition.test).row
                if row in seen:
                    continue
                seen.add(row)
                kind = type(condition.owner).__name__
                what = {"If": "`if`", "While": "`while`", "IfExp": "conditional expression",
                        "Assert": "`assert`", "BooleanOperation": "`and`/`or`",
                        "CompIf": "comprehension filter"}.get(kind, "branch")
                yield self.at(segment, reached, condition.test,
                              f"{what} on tensor values (`{snippet(reached.module, condition.test)}`)"
                              f": the replay takes the same path only if these values come out "
                              f"bit-identical (nondeterministic kernels, unrestored randomness "
                              f"or changed state flip it); `ckptlint dynamic` can confirm or "
                              f"clear this")
