from __future__ import annotations

from typing import Iterable

from ckptlint.findings import Finding
from ckptlint.checks.base import SiteRule
from ckptlint.analysis.sites import Site


class UnresolvedTarget(SiteRule):
    """The checkpointed function could not be resolved, so its body was not analysed."""

    code = "CKP901"

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.is_segment and not site.targets and site.unresolved:
            yield self.site_finding(
                site, f"cannot tell what this checkpoint runs ({site.unresolved[0]}); "
                      "its body was not analysed")
