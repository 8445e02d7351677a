from __future__ import annotations

from collections.abc import Iterable

from ckptlint.analysis.apis import Mode
from ckptlint.analysis.sites import ModeSource, Site
from ckptlint.checks.base import SiteRule
from ckptlint.checks.mode_conflicts_with_setup import KEEPS_REENTRANT_BECAUSE, requires_reentrant
from ckptlint.findings import Finding, Fix
from ckptlint.fix.edits import add_keyword

FIX_MESSAGE = "Pass `use_reentrant=False` (switches to non-reentrant checkpointing)"
KEEP_REENTRANT_MESSAGE = f"Pass `use_reentrant=True` ({KEEPS_REENTRANT_BECAUSE})"


class ImplicitUseReentrant(SiteRule):
    """`checkpoint`/`checkpoint_sequential` without `use_reentrant`: torch warns, runs reentrant."""

    code = "CKP102"
    message = ("`{api:last}` called without `use_reentrant`: torch warns and runs it in "
               "reentrant mode; pass `use_reentrant=False` (or `True` to keep the current "
               "behaviour)")

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.mode != Mode.REENTRANT or site.mode_source != ModeSource.IMPLICIT:
            return
        yield self.site_finding(site, {}, fix=self.fix(site))

    def fix(self, site: Site) -> Fix | None:
        """Add the keyword to the innermost `partial(checkpoint, ...)` if any, else the call."""
        arguments = site.arguments
        assert arguments is not None and site.call is not None
        if arguments.double_star_calls:
            return None
        origins = [arg.origin for arg in (*arguments.positional, *arguments.keywords.values())]
        partial = next((origin for origin in origins if origin is not site.call), None)
        call = partial if partial is not None else site.call
        if requires_reentrant(self, site):
            return add_keyword(site.module, call, "use_reentrant=True", KEEP_REENTRANT_MESSAGE)
        return add_keyword(site.module, call, "use_reentrant=False", FIX_MESSAGE)
