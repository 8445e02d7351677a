"""What every rule has: its code (the registry gives name and severity), its wording and
finding helpers.

A rule words its findings with class attributes: `message`, a template over the finding's
data, and `phrases`, the wording of a data field's values (see `ckptlint.messages`). It
creates findings with `data` only; `finding` renders the message from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import libcst as cst

from ckptlint.analysis.sites import Site
from ckptlint.checks.context import RuleContext
from ckptlint.findings import Finding, Fix
from ckptlint.messages import Phrases, render
from ckptlint.registry import rule_info
from ckptlint.syntax.source import SourceModule


class Rule:
    code: ClassVar[str]
    message: ClassVar[str]
    phrases: ClassVar[Phrases] = {}

    def __init__(self, context: RuleContext) -> None:
        self.context = context

    @property
    def name(self) -> str:
        return rule_info(self.code).name

    def finding(self, module: SourceModule, node: cst.CSTNode, data: Mapping[str, Any], *,
                site: Site | None = None, chain: tuple[str, ...] = (),
                fix: Fix | None = None) -> Finding:
        start, end = module.span(node)
        return Finding(
            code=self.code, message=render(self.message, data, self.phrases),
            filename=module.display, start=start, end=end,
            site=site.ref if site is not None else None, chain=chain, fix=fix,
            target=site.target_refs[0] if site is not None and site.targets else None,
            data=dict(data),
        )


class SiteRule(Rule):
    """A rule about the checkpoint call itself (reported at the site)."""

    # Whether it applies to a call of a project wrapper (`Site.wrapper`): the rules about
    # the call itself (its mode, its arguments) are the inner checkpoint call's, reported
    # there; what the call checkpoints is the wrapper call's own.
    at_wrapper_calls = False

    def check_site(self, site: Site) -> Iterable[Finding]:
        raise NotImplementedError

    def site_finding(self, site: Site, data: Mapping[str, Any], fix: Fix | None = None) -> Finding:
        """A finding at the site; `data` gains the contract's `api` and `mode`."""
        return self.finding(site.module, site.node, {"api": site.api_name, "mode": site.mode.value,
                                                     **data}, site=site, fix=fix)
