from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ckptlint.analysis import apis
from ckptlint.analysis.apis import Mode, SiteKind
from ckptlint.analysis.sites import Site
from ckptlint.checks.base import SiteRule
from ckptlint.findings import Finding


class ReentrantIncompatibleCall(SiteRule):
    """A reentrant checkpoint call that raises or silently loses gradients."""

    code = "CKP103"
    message = "in reentrant mode {problems:each}; {instead:phrase}"
    phrases = {"instead": {
        "use_reentrant": "use `use_reentrant=False`",
        "torch_checkpoint": "checkpoint with `torch.utils.checkpoint.checkpoint(..., "
                            "use_reentrant=False)` instead of the hand-written `{api}`",
    }, "problems": {
        "keywords": "keyword arguments for the function ({keywords:ticks}) raise `ValueError`",
        "option": "`{option}` raises `ValueError`",
        "apply_keywords": "keyword arguments `forward` does not take ({keywords:ticks}) "
                          "raise `TypeError`",
        "containers": "tensors inside a list or dict argument are not tracked and get no "
                      "gradient",
    }}

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.mode != Mode.REENTRANT or site.kind != SiteKind.FUNCTION or site.arguments is None:
            return
        arguments = site.arguments
        problems = self.keyword_problems(site)
        target_index = site.api.target_index if site.api else 0
        if any(self.holds_values(arg.value) for arg in arguments.positional[target_index + 1:]):
            problems.append({"kind": "containers"})
        if problems:
            # A hand-written class has no `use_reentrant` to switch: torch's own checkpoint
            # replaces it.
            instead = "use_reentrant" if site.hand_rolled is None else "torch_checkpoint"
            yield self.site_finding(site, {"problems": problems, "instead": instead})

    @staticmethod
    def keyword_problems(site: Site) -> list[dict]:
        """Keywords meant for the function: torch's checkpoint rejects them; a hand-written
        checkpoint's `.apply(...)` passes them to its `forward`, which may not take them."""
        assert site.arguments is not None
        keywords = site.arguments.keywords
        if site.hand_rolled is not None:
            taken = site.hand_rolled.keywords
            rejected = [] if taken is None else sorted(k for k in keywords if k not in taken)
            return [{"kind": "apply_keywords", "keywords": rejected}] if rejected else []
        if site.api is not None and site.api.passes_keywords:
            return []
        own = site.api.own_keywords if site.api is not None else apis.CHECKPOINT_KEYWORDS
        passed_on = sorted(k for k in keywords if k not in own)
        problems = [{"kind": "keywords", "keywords": passed_on}] if passed_on else []
        problems.extend({"kind": "option", "option": option}
                        for option in ("context_fn", "debug") if option in keywords)
        return problems

    @staticmethod
    def holds_values(expr: cst.BaseExpression) -> bool:
        """A container literal with at least one non-constant element."""
        if isinstance(expr, (cst.ListComp, cst.DictComp, cst.SetComp)):
            return True
        if isinstance(expr, cst.Dict):
            return any(not isinstance(e, cst.DictElement) or not is_constant(e.value)
                       for e in expr.elements)
        if isinstance(expr, (cst.List, cst.Set, cst.Tuple)):
            return any(not is_constant(e.value) for e in expr.elements)
        return False


def is_constant(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString,
                         cst.ConcatenatedString)):
        return True
    return isinstance(expr, cst.Name) and expr.value in ("True", "False", "None")
