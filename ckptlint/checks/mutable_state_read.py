"""CKP201: checkpointed code reads state that is changed elsewhere (the replay may see another
value)."""

from __future__ import annotations

from collections.abc import Iterator

from ckptlint.analysis.segment import Segment
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.findings import Finding


class MutableStateRead(SegmentRule):
    code = "CKP201"
    message = ("checkpointed code reads `{state}`, which is {changes:places}; if it changes "
               "between the forward and the backward, the replay computes with another value "
               "and the gradients are silently wrong")

    def check(self, segment: Segment) -> Iterator[Finding]:
        for reached, facts in self.functions(segment):
            for load, hazard in self.changed_state_reads(segment, reached, facts,
                                                         in_condition=False):
                yield self.at(segment, reached, load.node, hazard.data())
