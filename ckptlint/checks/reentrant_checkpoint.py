from __future__ import annotations

from collections.abc import Iterable

from ckptlint.analysis.apis import Mode, SiteKind
from ckptlint.analysis.sites import ModeSource, Site
from ckptlint.checks.base import SiteRule
from ckptlint.checks.mode_conflicts_with_setup import requires_reentrant
from ckptlint.findings import Finding


class ReentrantCheckpoint(SiteRule):
    """Checkpoint explicitly or inherently in reentrant mode."""

    code = "CKP101"
    # Whether keyword arguments are rejected depends on the API (TransformerEngine passes them
    # on): CKP103 reports the calls that pass them.
    message = ("{decided_by:phrase}, which drops gradients when no input requires grad; prefer "
               "non-reentrant checkpointing")
    phrases = {"decided_by": {
        "api": "`{api}` always checkpoints in reentrant mode",
        "api_default": "`{api}` checkpoints in reentrant mode unless given `use_reentrant=False`",
        "passed_api": "`{passed_api}`, passed to `{api}`, checkpoints in reentrant mode",
        "checkpoint_impl": "`CheckpointImpl.REENTRANT` checkpoints in reentrant mode",
        "use_reentrant": "`use_reentrant=True` checkpoints in reentrant mode",
        "checkpoint_kwargs": "`\"use_reentrant\": True` in `{kwargs_keyword}` checkpoints in "
                             "reentrant mode",
    }}

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.mode != Mode.REENTRANT \
                or site.mode_source not in (ModeSource.EXPLICIT, ModeSource.API) \
                or site.hand_rolled is not None:  # CKP106 reports hand-written ones
            return
        if requires_reentrant(self, site):  # the mode the setup needs is no finding (CKP601)
            return
        if site.hf is not None:  # transformers' keywords (a library entry point's too)
            yield self.site_finding(site, {"decided_by": "checkpoint_kwargs",
                                           "kwargs_keyword": site.hf.kwargs_keyword})
            return
        if site.mode_source == ModeSource.API and site.passed_api:
            yield self.site_finding(site, {"decided_by": "passed_api",
                                           "passed_api": site.passed_api})
            return
        if site.mode_source == ModeSource.API:
            default = site.api is not None and site.api.mode == Mode.REENTRANT_DEFAULT
            decided_by = "api_default" if default else "api"
        elif site.kind in (SiteKind.WRAPPER, SiteKind.APPLY, SiteKind.ENTRY):
            decided_by = "checkpoint_impl"
        else:
            decided_by = "use_reentrant"
        yield self.site_finding(site, {"decided_by": decided_by})
