from __future__ import annotations

from typing import Iterable

from ckptlint.analysis import apis
from ckptlint.findings import Finding
from ckptlint.checks.base import SiteRule
from ckptlint.analysis.sites import REENTRANT, Site


class ReentrantCheckpoint(SiteRule):
    """Checkpoint explicitly or inherently in reentrant mode."""

    code = "CKP101"

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.mode != REENTRANT or site.mode_source not in ("explicit", "api"):
            return
        api = site.api
        assert api is not None
        if site.mode_source == "api":
            reason = f"`{api.qualname}` always checkpoints in reentrant mode"
        elif api.kind in (apis.WRAPPER, apis.APPLY):
            reason = "`CheckpointImpl.REENTRANT` checkpoints in reentrant mode"
        else:
            reason = "`use_reentrant=True` checkpoints in reentrant mode"
        yield self.site_finding(
            site, f"{reason}, which drops gradients when no input requires grad and rejects "
                  "keyword arguments; prefer non-reentrant checkpointing")
