from __future__ import annotations

from collections.abc import Iterable

from ckptlint.analysis.sites import Site, target_expression
from ckptlint.checks.base import SiteRule
from ckptlint.findings import Finding
from ckptlint.messages import short


class UnresolvedTarget(SiteRule):
    """The checkpointed function could not be resolved, so its body was not analysed."""

    code = "CKP901"
    at_wrapper_calls = True
    message = "cannot tell what this checkpoint runs, so its body was not analysed: {reason}"

    def check_site(self, site: Site) -> Iterable[Finding]:
        if not site.is_segment or site.targets:
            return
        reason = site.unresolved[0] if site.unresolved else self.nothing_found(site)
        if reason is not None:
            yield self.site_finding(site, {"reason": reason})

    def nothing_found(self, site: Site) -> str | None:
        """A function that leads to no value at all (the elements of a list an opaque factory
        fills) is unresolved too; one that leads to library code only (`nn.Linear`) is not."""
        argument = target_expression(site)
        if argument is None or self.context.resolver.values(argument.value, site.module,
                                                            argument.scope):
            return None
        return (f"`{short(site.module.code(argument.value))}` leads to no function or class "
                "the linter can find")
