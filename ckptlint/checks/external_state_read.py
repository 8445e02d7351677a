"""CKP202: checkpointed code reads time, environment, process or thread state."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ckptlint.findings import Finding
from ckptlint.analysis.hazards import external_read
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.analysis.segment import Segment


class ExternalStateRead(SegmentRule):
    code = "CKP202"

    def check(self, segment: Segment) -> Iterator[Finding]:
        for reached, facts in self.functions(segment):
            seen: set[int] = set()
            candidates = [(call.node.func, call.node, call.scope) for call in facts.calls]
            candidates += [(load.node, load.node, load.scope) for load in facts.loads
                           if isinstance(load.node, cst.Attribute)]
            for expr, node, scope in candidates:
                what = external_read(expr, scope)
                if what is None:
                    continue
                row = reached.module.start(node).row
                if row in seen:
                    continue
                seen.add(row)
                yield self.at(segment, reached, node,
                              f"checkpointed code reads {what}; the replay in backward reads it "
                              f"again and may get another value, so the recomputation can "
                              f"differ from the forward")
