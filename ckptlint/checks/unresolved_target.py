from __future__ import annotations

from collections.abc import Iterable

from ckptlint.analysis.sites import Site
from ckptlint.checks.base import SiteRule
from ckptlint.findings import Finding


class UnresolvedTarget(SiteRule):
    """The checkpointed function could not be resolved, so its body was not analysed."""

    code = "CKP901"
    message = "cannot tell what this checkpoint runs, so its body was not analysed: {reason}"

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.is_segment and not site.targets and site.unresolved:
            yield self.site_finding(site, {"reason": site.unresolved[0]})
