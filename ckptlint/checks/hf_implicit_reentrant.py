from __future__ import annotations

from collections.abc import Iterable

from ckptlint.analysis.apis import Mode
from ckptlint.analysis.sites import HfCall, Keywords, ModeSource, Site
from ckptlint.checks.base import SiteRule
from ckptlint.checks.mode_conflicts_with_setup import KEEPS_REENTRANT_BECAUSE, requires_reentrant
from ckptlint.findings import Finding, Fix
from ckptlint.fix.edits import add_dict_entry, add_keyword
from ckptlint.versions import Source

FIX_MESSAGE = "Pass `use_reentrant=False` in `gradient_checkpointing_kwargs`"
KEEP_REENTRANT_MESSAGE = ("Pass `use_reentrant=True` in `gradient_checkpointing_kwargs` "
                          f"({KEEPS_REENTRANT_BECAUSE})")
# The names whose default was reentrant before transformers 5.0; the `activation_checkpointing`
# names came with 5.24, whose default is non-reentrant.
FIRST_NON_REENTRANT = (5,)  # transformers PR #43203
FIRST_WITH_KWARGS = (4, 35)  # `gradient_checkpointing_kwargs` exists from here: the fix needs it
REENTRANT_BEFORE_5 = ("gradient_checkpointing_enable", "gradient_checkpointing",
                      "prepare_model_for_kbit_training")
# trl's configurations (read in each release's source, docs/torch-facts.md): from 0.22 their
# `gradient_checkpointing` defaults to True; from 0.27 they (later their trainers)
# `setdefault("use_reentrant", False)` whenever transformers is before 5.0. Before 0.27
# transformers' own default applies.
TRL_ON_BY_DEFAULT = (0, 22)
TRL_FIRST_NON_REENTRANT = (0, 27)


class HfImplicitReentrant(SiteRule):
    """transformers gradient checkpointing without `use_reentrant`, before transformers 5.0."""

    code = "CKP104"
    message = ("{enabled_by:phrase}{library:phrase} without `use_reentrant`: "
               "{version_source:phrase} "
               "(no gradients with frozen embeddings or adapters); {advice:phrase}")
    phrases = {
        "advice": {
            "non-reentrant": "pass `gradient_checkpointing_kwargs={{\"use_reentrant\": False}}`",
            "reentrant": "pass `gradient_checkpointing_kwargs={{\"use_reentrant\": True}}` "
                         "to keep it: DeepSpeed ZeRO-3 with frozen parameters breaks "
                         "non-reentrant replays (CKP601)"},
        "library": {
            "transformers": "",
            "trl": " in trl's `{api:last}` (trl {trl_versions}: its releases before 0.27 keep "
                   "transformers' default)"},
        # Enabled by the model method, the training arguments' keyword, or peft's helper.
        "enabled_by": {
            "gradient_checkpointing_enable": "`gradient_checkpointing_enable()`",
            "gradient_checkpointing": "`gradient_checkpointing=True`",
            "prepare_model_for_kbit_training": "`prepare_model_for_kbit_training()`"},
        "version_source": {
            "config": "transformers {version} checkpoints in reentrant mode",
            "installed": "transformers {version} (installed here) checkpoints in reentrant mode",
            "declared": "the transformers versions the project declares ({versions}) include "
                        "releases before 5.0, which checkpoint in reentrant mode",
            "unknown": "releases of transformers before 5.0 checkpoint in reentrant mode, and "
                       "which one runs is unknown (declare it, or set `versions = "
                       "{{transformers = \"...\"}}` in `[tool.ckptlint]`)"}}

    def check_site(self, site: Site) -> Iterable[Finding]:
        request = site.hf
        if (request is None or request.enabled_by not in REENTRANT_BEFORE_5
                or site.mode_source != ModeSource.VERSION):
            return
        if request.switch_passed and request.switch is not True:
            return  # off, or a value the linter cannot read
        library = {"library": "transformers"}
        if request.call == HfCall.TRL:
            trl = self.context.versions("trl")
            if trl.source == Source.UNKNOWN:
                return  # trl's releases differ (from 0.27 non-reentrant): nothing to say
            # On (passed, or by default from 0.22) in a release that keeps transformers' default.
            low = () if request.switch_passed else TRL_ON_BY_DEFAULT
            if not trl.admits_between(low, TRL_FIRST_NON_REENTRANT):
                return
            library = {"library": "trl", "trl_versions": trl.text}
        versions = self.context.versions("transformers")
        if not versions.admits_before(FIRST_NON_REENTRANT):
            return
        version = versions.ranges[0].removeprefix("==") if versions.ranges else "unknown"
        keep_reentrant = requires_reentrant(self, site)
        fix = self.fix(site, keep_reentrant) if versions.all_from(FIRST_WITH_KWARGS) else None
        yield self.site_finding(site, {
            "advice": "reentrant" if keep_reentrant else "non-reentrant",
            "mode": Mode.REENTRANT.value, "versions": versions.text, "version": version,
            "version_source": versions.source, "enabled_by": request.enabled_by, **library},
            fix=fix)

    @staticmethod
    def fix(site: Site, keep_reentrant: bool) -> Fix | None:
        """Add the key to the dict literal passed, or the keyword when nothing is passed for
        it (by keyword or position): never a second value for one parameter. `use_reentrant`
        is True where the setup breaks non-reentrant checkpoints (CKP601)."""
        flag, message = ("True", KEEP_REENTRANT_MESSAGE) if keep_reentrant \
            else ("False", FIX_MESSAGE)
        request = site.hf
        assert request is not None and site.call is not None and site.arguments is not None
        if request.assigned_later:
            return None
        if request.keywords == Keywords.KNOWN:
            if request.dict_node is None:
                return None  # a dict built elsewhere
            return add_dict_entry(site.module, request.dict_node, f'"use_reentrant": {flag}',
                                  message)
        if request.kwargs_passed or site.arguments.star_positional:
            return None  # `None` passed for it
        return add_keyword(site.module, site.call,
                           f'{request.kwargs_keyword}={{"use_reentrant": {flag}}}', message)
