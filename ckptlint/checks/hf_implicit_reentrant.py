from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from ckptlint.analysis.apis import Mode
from ckptlint.analysis.sites import HfCall, Keywords, ModeSource, Site
from ckptlint.checks.base import SiteRule
from ckptlint.config import parse_version
from ckptlint.findings import Finding, Fix
from ckptlint.fix.edits import add_dict_entry, add_keyword

FIX_MESSAGE = "Pass `use_reentrant=False` in `gradient_checkpointing_kwargs`"
# The names whose default was reentrant before transformers 5.0; the `activation_checkpointing`
# names came with 5.24, whose default is non-reentrant.
REENTRANT_BEFORE_5 = ("gradient_checkpointing_enable", "gradient_checkpointing",
                      "prepare_model_for_kbit_training")


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
    # Enabled by the model method, the training arguments' keyword, or peft's helper.
    phrases = {"enabled_by": {
        "gradient_checkpointing_enable": "`gradient_checkpointing_enable()`",
        "gradient_checkpointing": "`gradient_checkpointing=True`",
        "prepare_model_for_kbit_training": "`prepare_model_for_kbit_training()`"}}

    def check_site(self, site: Site) -> Iterable[Finding]:
        request = site.hf
        # trl's trainers choose their own default (`setdefault("use_reentrant", False)` in
        # trl 1.x): only the keywords they are given decide, through CKP101.
        if (request is None or request.call == HfCall.TRL
                or request.enabled_by not in REENTRANT_BEFORE_5
                or site.mode_source != ModeSource.VERSION):
            return
        if request.switch_passed and request.switch is not True:
            return  # off, or a value the linter cannot read
        configured = self.context.config.transformers_version
        version = configured or installed_transformers()
        parsed = parse_version(version) if version else None
        if parsed is None or parsed >= (5,):
            return
        yield self.site_finding(site, {
            "mode": Mode.REENTRANT.value, "versions": f"=={version}", "version": version,
            "version_source": "config" if configured else "installed",
            "enabled_by": request.enabled_by}, fix=self.fix(site))

    @staticmethod
    def fix(site: Site) -> Fix | None:
        """Add the key to the dict literal passed, or the keyword when nothing is passed for
        it (by keyword or position): never a second value for one parameter."""
        request = site.hf
        assert request is not None and site.call is not None and site.arguments is not None
        if request.assigned_later:
            return None
        if request.keywords == Keywords.KNOWN:
            if request.dict_node is None:
                return None  # a dict built elsewhere
            return add_dict_entry(site.module, request.dict_node, '"use_reentrant": False',
                                  FIX_MESSAGE)
        if request.kwargs_passed or site.arguments.star_positional:
            return None  # `None` passed for it
        return add_keyword(site.module, site.call,
                           f'{request.kwargs_keyword}={{"use_reentrant": False}}', FIX_MESSAGE)
