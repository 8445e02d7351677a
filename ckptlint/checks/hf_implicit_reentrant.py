from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import libcst as cst

from ckptlint.analysis.apis import Mode, SiteKind
from ckptlint.analysis.sites import Site, bool_value, string_value
from ckptlint.checks.base import SiteRule
from ckptlint.config import parse_version
from ckptlint.findings import Finding, Fix
from ckptlint.fix.edits import add_dict_entry, add_keyword

FIX_MESSAGE = "Pass `use_reentrant=False` in `gradient_checkpointing_kwargs`"


@lru_cache(maxsize=1)
def installed_transformers() -> str | None:
    """The transformers version installed here, read without importing transformers."""
    from importlib import metadata  # (only here: it costs most runs 15 ms for nothing)

    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


class HfImplicitReentrant(SiteRule):
    """transformers gradient checkpointing without `use_reentrant`, before transformers 5.0."""

    code = "CKP104"
    message = ("{enabled_by:phrase} without `use_reentrant`: transformers {version} checkpoints "
               "in reentrant mode (no gradients with frozen embeddings or adapters); pass "
               "`gradient_checkpointing_kwargs={{\"use_reentrant\": False}}`")
    # Enabled by the model method or by the training arguments' keyword.
    phrases = {"enabled_by": {"gradient_checkpointing_enable": "`gradient_checkpointing_enable()`",
                              "gradient_checkpointing": "`gradient_checkpointing=True`"}}

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.kind not in (SiteKind.HF_ENABLE, SiteKind.HF_ARGS) or site.arguments is None:
            return
        configured = self.context.config.transformers_version
        version = configured or installed_transformers()
        parsed = parse_version(version) if version else None
        if parsed is None or parsed >= (5,):
            return
        arguments = site.arguments
        if site.kind == SiteKind.HF_ARGS:
            enabled = arguments.keywords.get("gradient_checkpointing")
            if enabled is None or bool_value(enabled.value) is not True:
                return
        passed = arguments.keywords.get("gradient_checkpointing_kwargs")
        fix: Fix | None = None
        assert site.call is not None
        if passed is None:
            if arguments.opaque_keywords:
                return
            fix = add_keyword(site.module, site.call,
                              'gradient_checkpointing_kwargs={"use_reentrant": False}', FIX_MESSAGE)
        elif isinstance(passed.value, cst.Dict):
            keys = {string_value(e.key) for e in passed.value.elements
                    if isinstance(e, cst.DictElement)}
            if "use_reentrant" in keys or any(not isinstance(e, cst.DictElement)
                                              for e in passed.value.elements):
                return
            fix = add_dict_entry(site.module, passed.value, '"use_reentrant": False', FIX_MESSAGE)
        else:
            return  # a dict built elsewhere: it may carry the key
        yield self.site_finding(site, {
            "mode": Mode.REENTRANT.value, "versions": f"=={version}", "version": version,
            "version_source": "config" if configured else "installed",
            "enabled_by": ("gradient_checkpointing_enable" if site.kind == SiteKind.HF_ENABLE
                           else "gradient_checkpointing")}, fix=fix)
