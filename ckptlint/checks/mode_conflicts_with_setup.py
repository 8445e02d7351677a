"""CKP601: a checkpoint mode known to break with the training setup it runs in.

Each pairing (`conflict`) is a mode and the setup facts it breaks with
(`ckptlint.analysis.setup`); the rule page (rules/CKP601-mode-conflicts-with-setup.md) gives
its references and the releases where it applies. Only known facts count: a setup
stated in ways that disagree, or through values the linter cannot read, is no finding.
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ckptlint.analysis.apis import Mode, SiteKind
from ckptlint.analysis.setup import TrainingSetup, is_true
from ckptlint.analysis.sites import HfCall, ModeSource, Site
from ckptlint.checks.base import SiteRule
from ckptlint.findings import Finding

ZERO3_FROZEN = "zero3-frozen-non-reentrant"
DDP_FIND_UNUSED = "ddp-find-unused-reentrant"

# trl's trainers force `use_reentrant=True` under peft + ZeRO-3 (and warn when `False` was
# asked) from these releases on, read in each release's trl/trainer/*_trainer.py (the issue
# is trl#2514): SFT from 0.28.0, DPO, GRPO, KTO, Reward and RLOO from 1.9.0.
TRL_FORCES_REENTRANT = {"SFTConfig": (0, 28), "DPOConfig": (1, 9), "GRPOConfig": (1, 9),
                        "KTOConfig": (1, 9), "RewardConfig": (1, 9), "RLOOConfig": (1, 9)}
# Why a fix keeps reentrant mode (CKP102, CKP104).
KEEPS_REENTRANT_BECAUSE = ("DeepSpeed ZeRO-3 with frozen parameters breaks non-reentrant "
                           "replays: CKP601")
# transformers' own default became non-reentrant in 5.0 (PR #43203).
TRANSFORMERS_NON_REENTRANT = (5,)


# The main reference of each pairing (`data.reference`; the rule page lists them all).
REFERENCES = {
    ZERO3_FROZEN: "https://github.com/huggingface/trl/issues/2514",
    DDP_FIND_UNUSED: "https://github.com/huggingface/peft/issues/313",
}


class ModeConflictsWithSetup(SiteRule):
    """A checkpoint mode known to break with the training setup it runs in."""

    code = "CKP601"
    message = "{pairing:phrase}"
    phrases = {"pairing": {
        ZERO3_FROZEN: "non-reentrant checkpointing under DeepSpeed ZeRO-3 ({zero_from}) with "
                      "frozen parameters ({frozen_from}): the replay meets weights already "
                      "partitioned to shape [0] and raises a CheckpointError; use "
                      "`use_reentrant=True` here",
        DDP_FIND_UNUSED: "reentrant checkpointing under DistributedDataParallel with "
                         "`find_unused_parameters=True` ({unused_from}): backward raises "
                         "\"Expected to mark a variable ready only once\"; use "
                         "`use_reentrant=False` (or DDP's `static_graph=True`)",
    }}

    def check_site(self, site: Site) -> Iterable[Finding]:
        if site.kind == SiteKind.HAND_ROLLED:  # CKP106 reports hand-written ones
            return
        mode = self.mode_in_force(site)
        if mode == Mode.UNKNOWN:
            return
        needs = TrainingSetup.REENTRANT_NEEDS if mode == Mode.NON_REENTRANT \
            else TrainingSetup.DDP_NEEDS
        setup = self.context.setup(site.module.path, needs)
        pairing = conflict(mode, setup)
        if pairing is None or (pairing == ZERO3_FROZEN and self.trl_forces_reentrant(site)):
            return
        facts = setup.as_data("zero_stage", "frozen_parameters") if pairing == ZERO3_FROZEN \
            else setup.as_data("find_unused_parameters", "static_graph")
        yield self.finding(site.module, deciding_node(site), {
            "api": site.api_name, "mode": mode.value, "pairing": pairing, "setup": facts,
            "reference": REFERENCES[pairing],
            "zero_from": facts.get("zero_stage_from", ""),
            "frozen_from": facts.get("frozen_parameters_from", ""),
            "unused_from": facts.get("find_unused_parameters_from", "")}, site=site)

    def mode_in_force(self, site: Site) -> Mode:
        """The site's mode; for transformers' calls without `use_reentrant`, the default of
        the releases in force when all of them agree (non-reentrant from 5.0)."""
        if site.mode_source in (ModeSource.EXPLICIT, ModeSource.API, ModeSource.IMPLICIT):
            return site.mode
        if site.mode_source == ModeSource.VERSION and \
                self.context.versions("transformers").all_from(TRANSFORMERS_NON_REENTRANT):
            return Mode.NON_REENTRANT
        return Mode.UNKNOWN

    def trl_forces_reentrant(self, site: Site) -> bool:
        """Does every trl release in force override the mode for this trainer configuration?"""
        if site.hf is None or site.hf.call != HfCall.TRL:
            return False
        first = TRL_FORCES_REENTRANT.get(site.library_api.rsplit(".", 1)[-1])
        return first is not None and self.context.versions("trl").all_from(first)


def conflict(mode: Mode, setup: TrainingSetup) -> str | None:
    """The pairing a mode breaks in this setup, if any."""
    if mode == Mode.NON_REENTRANT and setup.requires_reentrant():
        return ZERO3_FROZEN
    if mode == Mode.REENTRANT and is_true(setup.find_unused_parameters) \
            and (setup.static_graph is None or setup.static_graph.value is False):
        return DDP_FIND_UNUSED
    return None


def requires_reentrant(rule: SiteRule, site: Site) -> bool:
    """Does the setup a site runs in break non-reentrant checkpoints (CKP101, CKP102, CKP104
    ask, so that they never push a site into CKP601)?"""
    return rule.context.setup(site.module.path,
                              TrainingSetup.REENTRANT_NEEDS).requires_reentrant()


def deciding_node(site: Site) -> cst.CSTNode:
    """Where the mode is decided: the `use_reentrant` keyword of the call itself, the
    `"use_reentrant"` entry of the dict literal passed to a transformers call, else the site."""
    call = site.call
    if call is not None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "use_reentrant":
                return arg
    if site.hf is not None and site.hf.dict_node is not None:
        for element in site.hf.dict_node.elements:
            if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString) \
                    and element.key.evaluated_value == "use_reentrant":
                return element
    return site.node
