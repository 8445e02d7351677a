from __future__ import annotations

from typing import Iterable

from ckptlint.analysis import apis
from ckptlint.findings import Finding
from ckptlint.checks.base import SiteRule
from ckptlint.analysis.sites import REENTRANT, Site


class ReentrantCheckpoint(SiteRule):
    """Checkpoint explicitly or inherently in reentrant mode."""

    code = "CKP101"
    message = ("{decided_by:phrase}, which drops gradients when no input requires grad and "
               "rejects keyword arguments; prefer non-reentrant checkpointing")
    phrases = {"decided_by": {
        "api": "`{api}` always checkpoints in reentrant mode",
        "checkpoint_impl": "`CheckpointImpl.REENTRANT` checkpoints in reentrant mode",
        "use_reentrant": "`use_reentrant=True` checkpoints in reentrant mode",
    }}

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.mode != REENTRANT or site.mode_source not in ("explicit", "api"):
            return
        api = site.api
        assert api is not None
        if site.mode_source == "api":
            decided_by = "api"
        elif api.kind in (apis.WRAPPER, apis.APPLY):
            decided_by = "checkpoint_impl"
        else:
            decided_by = "use_reentrant"
        yield self.site_finding(site, {"decided_by": decided_by})
