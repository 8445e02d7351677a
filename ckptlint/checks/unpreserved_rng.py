"""CKP302: randomness inside a checkpoint called with `preserve_rng_state=False`."""

from __future__ import annotations

from collections.abc import Iterator

from ckptlint.analysis.hazards import random_call, random_module_call
from ckptlint.analysis.segment import Segment
from ckptlint.checks.phrases import TORCH_DRAW_PHRASES
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.findings import Finding


class UnpreservedRng(SegmentRule):
    code = "CKP302"
    message = ("checkpointed code draws random numbers ({draw:phrase}) but the checkpoint at "
               "{checkpoint:at} {lost_by:phrase}")
    phrases = {
        "draw": TORCH_DRAW_PHRASES,
        "lost_by": {
            "argument": "passes `preserve_rng_state=False`: the replay draws different numbers "
                        "(another dropout mask) and the gradients are wrong; drop "
                        "`preserve_rng_state=False`",
            "class": "is the `.apply` of a hand-written checkpoint class that does not restore "
                     "the RNG state: the replay draws different numbers (another dropout mask) "
                     "and the gradients are wrong; save and restore it in the class as "
                     "`torch.utils.checkpoint` does, or use `checkpoint(..., "
                     "use_reentrant=False)`",
        },
    }

    def check(self, segment: Segment) -> Iterator[Finding]:
        if segment.site.preserve_rng_state is not False:
            return
        resolver = self.context.resolver
        site = segment.site.ref
        # A hand-written checkpoint's `.apply(...)`: the class, not an argument, loses it.
        lost_by = "argument" if segment.site.hand_rolled is None else "class"
        for reached, facts in self.functions(segment):
            for call in facts.calls:
                found = random_call(call.node, call.scope) or random_module_call(
                    resolver, call.node, reached.module, call.scope, reached.function.owner)
                if not found:
                    continue
                yield self.at(segment, reached, call.node, {
                    **found.data(), "checkpoint": {"filename": site.filename, "row": site.row},
                    "lost_by": lost_by})
