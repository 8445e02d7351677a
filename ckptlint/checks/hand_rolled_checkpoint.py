"""CKP106: a hand-written `autograd.Function` checkpoint (reruns a function under `enable_grad` in backward) without RNG restore, autocast capture or gradients for unpassed inputs"""

from __future__ import annotations

from collections.abc import Iterable

from ckptlint.analysis.sites import Site, bool_value
from ckptlint.checks.base import SiteRule
from ckptlint.findings import Finding

# (scaffold placeholder: what the rule flags until its real test is written)
EXAMPLE_KEYWORD = "ckptlint_scaffold_example"


class HandRolledCheckpoint(SiteRule):
    """a hand-written `autograd.Function` checkpoint (reruns a function under `enable_grad` in backward) without RNG restore, autocast capture or gradients for unpassed inputs"""

    code = "CKP106"
    message = ("checkpoint called with `{keyword}=True` "
               "(scaffold placeholder: what goes wrong, and what to do instead)")

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.arguments is None:
            return
        given = site.arguments.keywords.get(EXAMPLE_KEYWORD)
        if given is not None and bool_value(given.value) is True:
            yield self.site_finding(site, {"keyword": EXAMPLE_KEYWORD})
