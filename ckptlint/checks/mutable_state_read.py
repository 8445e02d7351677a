"""CKP201: checkpointed code reads state that is changed elsewhere (the replay may see another value)."""

from __future__ import annotations

from typing import Iterator

from ckptlint.analysis.bindings import describe_changes
from ckptlint.findings import Finding
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.analysis.segment import Segment


class MutableStateRead(SegmentRule):
    code = "CKP201"

    def check(self, segment: Segment) -> Iterator[Finding]:
        for reached, facts in self.functions(segment):
            for load, name, changes in self.changed_state_reads(reached, facts,
                                                                in_condition=False):
                yield self.at(segment, reached, load.node,
                              f"checkpointed code reads `{name}`, which is "
                              f"{describe_changes(changes)}; if it changes between the forward "
                              f"and the backward, the replay computes with another value and "
                              f"the gradients are silently wrong")
