from __future__ import annotations

from collections.abc import Iterable

from ckptlint.analysis.apis import SiteKind
from ckptlint.analysis.sites import Site
from ckptlint.checks.base import SiteRule
from ckptlint.findings import Finding


class HandRolledCheckpoint(SiteRule):
    """An `autograd.Function` that reimplements checkpointing without what torch's restores."""

    code = "CKP106"
    message = ("`{class}` is a hand-written checkpoint (its `backward` reruns the function under "
               "`enable_grad`) that {lacks:words}; handle them as `torch.utils.checkpoint` "
               "does, or use `checkpoint(..., use_reentrant=False)` instead")
    phrases = {"lacks": {
        "rng": "does not restore the RNG state (dropout differs in the rerun)",
        "autocast": "does not capture autocast (the rerun runs at another precision)",
        "unpassed-inputs": "differentiates only what it is passed (`torch.autograd.grad`): "
                           "parameters the function uses without being passed get no gradient",
    }}

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.kind != SiteKind.HAND_ROLLED or site.hand_rolled is None:
            return
        lacks = site.hand_rolled.lacks
        if lacks:
            yield self.finding(site.module, site.node,
                               {"class": site.hand_rolled.qualname, "lacks": lacks}, site=site)
