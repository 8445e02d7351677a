"""CKP201: checkpointed code reads state that is changed elsewhere (the replay may see another value)."""

from __future__ import annotations

from typing import Iterator

from ckptlint.bindings import describe_changes
from ckptlint.findings import Finding
from ckptlint.rules.segment_base import SegmentRule
from ckptlint.segment import Segment


class MutableStateRead(SegmentRule):
    code = "CKP201"

    def check(self, segment: Segment) -> Iterator[Finding]:
        for reached, facts in self.functions(segment):
            seen: set[tuple[int, str]] = set()
            for load in facts.loads:
                if load.in_condition:
                    continue  # CKP204 reports reads in branch conditions
                state = self.state_changes(reached, load.node, load.scope, load.attr)
                if state is None:
                    continue
                name, changes = state
                row = reached.module.start(load.node).row
                if (row, name) in seen:
                    continue
                seen.add((row, name))
                yield self.at(segment, reached, load.node,
                              f"checkpointed code reads `{name}`, which is "
                              f"{describe_changes(changes)}; if it changes between the forward "
                              f"and the backward, the replay computes with another value and "
                              f"the gradients are silently wrong")
