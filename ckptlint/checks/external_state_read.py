"""CKP202: checkpointed code reads time, environment, process or thread state."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ckptlint.analysis.hazards import EXTERNAL_READS, external_read
from ckptlint.analysis.scopes import Scope
from ckptlint.analysis.segment import Segment
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.findings import Finding


class ExternalStateRead(SegmentRule):
    code = "CKP202"
    message = ("checkpointed code reads `{source}` ({kind:phrase}); the replay in backward "
               "reads it again and may get another value, so the recomputation can differ from "
               "the forward")
    phrases = {"kind": {
        "wall-clock": "the wall clock", "clock": "a clock", "process-clock": "the process clock",
        "thread-clock": "the thread clock", "environment": "the environment",
        "process-id": "the process id", "working-directory": "the working directory",
        "entropy": "the OS entropy pool", "thread": "thread state", "process": "process state",
        "host-name": "the host name", "clock-and-host": "the clock and host",
    }}

    def check(self, segment: Segment) -> Iterator[Finding]:
        for reached, facts in self.functions(segment):
            seen: set[int] = set()
            candidates: list[tuple[cst.BaseExpression, cst.CSTNode, Scope]] = [
                (call.node.func, call.node, call.scope) for call in facts.calls]
            candidates += [(load.node, load.node, load.scope) for load in facts.loads
                           if isinstance(load.node, cst.Attribute)]
            for expr, node, scope in candidates:
                source = external_read(expr, scope)
                if source is None:
                    continue
                row = reached.module.start(node).row
                if row in seen:
                    continue
                seen.add(row)
                yield self.at(segment, reached, node,
                              {"source": source, "kind": EXTERNAL_READS[source]})
