from __future__ import annotations

from collections.abc import Iterable

from ckptlint.analysis.sites import Site, string_value
from ckptlint.checks.base import SiteRule
from ckptlint.findings import Finding


class DeterminismCheckDisabled(SiteRule):
    """`determinism_check="none"` turns off torch's replay metadata check."""

    code = "CKP105"
    message = ('`determinism_check="none"` disables the check that the replay saved tensors of '
               "the same shapes, dtypes and devices")

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.arguments is None:
            return
        given = site.arguments.keywords.get("determinism_check")
        if given is not None and string_value(given.value) == "none":
            yield self.site_finding(site, {})
