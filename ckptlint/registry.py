"""The rule registry: every code ckptlint can report, and everything known about it.

One entry per code: name, severity, summary, how dynamic mode judges it, whether it has a
fix, whether it is on by default, the class that implements it and the fields of its
findings' data. The engine's rule list (`ckptlint.checks.RULE_CLASSES`), dynamic mode's
verdict code sets, `ckptlint rule --all`, the check of findings read back
(`Finding.from_json`), the JSON Schema (scripts/findings_schema.py) and the README's rule table
(`python -m ckptlint.dev rule-table`) are all read from here; tests/test_registry.py checks
that the implementations, the pages in `rules/` and the README agree with it.

It imports nothing heavy: selection, output and `ckptlint rule` use it without loading the
analysis. `python -m ckptlint.dev new-rule` adds an entry (docs/architecture.md, "Adding a
rule").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ckptlint.finding_data import (
    BOOL,
    CALL,
    INT,
    PLACE,
    SEGMENT,
    STATE,
    STR,
    TORCH_DRAW,
    ListOf,
    Obj,
    OneOf,
)


class Dynamic(Enum):
    """How `ckptlint dynamic` judges a finding of the code (ckptlint/dynamic/verdicts.py)."""

    STATIC_ONLY = "static-only"  # no runtime check: the verdict is always "static-only"
    REENTRANT_PATH = "reentrant-path"  # confirmed by watching the call run reentrant
    STATE_CHANGE = "state-change"  # forward and replay compared; the named state read around each
    SIDE_EFFECT = "side-effect"  # confirmed when the line (or the state) runs again in the replay
    DEVICE = "device"  # forward and replay compared; the devices touched are the evidence
    REPLAY_COMPARE = "replay-compare"  # forward and replay compared, saved tensors by value
    # The context's state read at the start of the forward and of the replay: confirmed
    # when they differ, cleared when equal.
    CONTEXT_STATE = "context-state"


class FixKind(Enum):
    NONE = "none"
    SAFE = "safe"  # applied by `--fix`
    UNSAFE = "unsafe"  # applied by `--fix --unsafe-fixes`


# Shorter names for the table below.
STATIC_ONLY, REENTRANT_PATH, STATE_CHANGE = (Dynamic.STATIC_ONLY, Dynamic.REENTRANT_PATH,
                                             Dynamic.STATE_CHANGE)
SIDE_EFFECT, DEVICE, REPLAY_COMPARE = Dynamic.SIDE_EFFECT, Dynamic.DEVICE, Dynamic.REPLAY_COMPARE
NO_FIX, SAFE_FIX, UNSAFE_FIX = FixKind.NONE, FixKind.SAFE, FixKind.UNSAFE


@dataclass(frozen=True)
class RuleInfo:
    code: str
    name: str
    severity: str  # "error" | "warning" | "info"
    dynamic: Dynamic
    fix: FixKind
    # "module:Class" of the rule, or None for codes the engine, dynamic mode or profile
    # produce themselves (CKP501, CKP502, CKP902, CKP999).
    implementation: str | None
    summary: str  # what it flags, in one line (README table, `ckptlint rule --all`, SARIF)
    # The fields of its findings' `data` (`ckptlint.finding_data`): what `Finding.from_json`
    # checks, the JSON Schema (scripts/findings_schema.py) and the rule page document.
    data: Obj
    default_on: bool = True


RULES: dict[str, RuleInfo] = {
    info.code: info
    for info in (
        RuleInfo("CKP101", "reentrant-checkpoint", "warning", REENTRANT_PATH, NO_FIX,
                 "ckptlint.checks.reentrant_checkpoint:ReentrantCheckpoint",
                 "`use_reentrant=True` (also in transformers' checkpoint keywords), "
                 "`CheckpointImpl.REENTRANT`, a reentrant-only wrapper (DeepSpeed, Megatron, "
                 "fairseq, fairscale), or TransformerEngine's `checkpoint` without "
                 "`use_reentrant=False`",
                 CALL.with_fields({"decided_by": OneOf(("api", "api_default", "checkpoint_impl",
                                                        "use_reentrant",
                                                        "checkpoint_kwargs", "passed_api"))},
                                  optional={"kwargs_keyword": STR, "passed_api": STR})),
        RuleInfo("CKP102", "implicit-use-reentrant", "warning", REENTRANT_PATH, UNSAFE_FIX,
                 "ckptlint.checks.implicit_use_reentrant:ImplicitUseReentrant",
                 "`checkpoint`/`checkpoint_sequential` without `use_reentrant` (torch warns, "
                 "then runs reentrant)",
                 CALL),
        RuleInfo("CKP103", "reentrant-incompatible-call", "error", REENTRANT_PATH, NO_FIX,
                 "ckptlint.checks.reentrant_incompatible_call:ReentrantIncompatibleCall",
                 "reentrant calls that raise or lose gradients: keyword arguments, "
                 "`context_fn`/`debug`, tensors inside lists/dicts",
                 CALL.with_fields({"problems": ListOf(Obj(
                     {"kind": OneOf(("keywords", "apply_keywords", "option", "containers"))},
                     {"keywords": ListOf(STR), "option": STR})),
                     "instead": OneOf(("use_reentrant", "torch_checkpoint"))})),
        RuleInfo("CKP104", "hf-implicit-reentrant", "warning", REENTRANT_PATH, UNSAFE_FIX,
                 "ckptlint.checks.hf_implicit_reentrant:HfImplicitReentrant",
                 "transformers `gradient_checkpointing_enable()` / "
                 "`TrainingArguments(gradient_checkpointing=True)` without `use_reentrant`, "
                 "before transformers 5.0",
                 CALL.with_fields({
                     "versions": STR, "version": STR,
                     "version_source": OneOf(("config", "declared", "installed", "unknown")),
                     "enabled_by": OneOf(("gradient_checkpointing_enable",
                                          "gradient_checkpointing",
                                          "prepare_model_for_kbit_training")),
                     "library": OneOf(("transformers", "trl"))},
                     # The mode the message advises (reentrant where CKP601's setup needs it).
                     optional={"advice": OneOf(("non-reentrant", "reentrant")),
                               "trl_versions": STR})),
        RuleInfo("CKP105", "determinism-check-disabled", "info", STATIC_ONLY, NO_FIX,
                 "ckptlint.checks.determinism_check_disabled:DeterminismCheckDisabled",
                 "`determinism_check=\"none\"`",
                 CALL),
        RuleInfo("CKP106", "hand-rolled-checkpoint", "warning", STATIC_ONLY, NO_FIX,
                 "ckptlint.checks.hand_rolled_checkpoint:HandRolledCheckpoint",
                 "a hand-written `autograd.Function` checkpoint (reruns a function under "
                 "`enable_grad` in backward) without RNG restore, autocast capture or gradients "
                 "for unpassed inputs",
                 Obj({"class": STR,
                      "lacks": ListOf(OneOf(("rng", "autocast", "unpassed-inputs")))})),
        RuleInfo("CKP201", "mutable-state-read", "warning", STATE_CHANGE, NO_FIX,
                 "ckptlint.checks.mutable_state_read:MutableStateRead",
                 "a segment reads global or instance state that can change between its "
                 "forward and its replay",
                 STATE),
        RuleInfo("CKP202", "external-state-read", "info", REPLAY_COMPARE, NO_FIX,
                 "ckptlint.checks.external_state_read:ExternalStateRead",
                 "a segment reads time, environment or process state",
                 SEGMENT.with_fields({"source": STR, "kind": OneOf((
                     "wall-clock", "clock", "process-clock", "thread-clock", "environment",
                     "process-id", "working-directory", "entropy", "thread", "process",
                     "host-name", "clock-and-host"))})),
        RuleInfo("CKP203", "data-dependent-branch", "warning", REPLAY_COMPARE, NO_FIX,
                 "ckptlint.checks.data_dependent_branch:DataDependentBranch",
                 "a branch on tensor values inside a segment",
                 SEGMENT.with_fields({"expression": STR, "branch": OneOf((
                     "if", "while", "conditional", "assert", "boolean", "comprehension",
                     "other"))})),
        RuleInfo("CKP204", "state-dependent-branch", "warning", STATE_CHANGE, NO_FIX,
                 "ckptlint.checks.state_dependent_branch:StateDependentBranch",
                 "a branch on state that can change between forward and replay, or on "
                 "`torch.is_grad_enabled()` in a reentrant segment",
                 STATE.with_fields({"condition": OneOf(("state", "grad-mode"))},
                                   {"expression": STR})),
        RuleInfo("CKP205", "data-dependent-shape", "warning", REPLAY_COMPARE, NO_FIX,
                 "ckptlint.checks.data_dependent_shape:DataDependentShape",
                 "an op whose output shape depends on tensor values inside a segment "
                 "(`nonzero`, boolean masks, `unique`, one-argument `where`, splits by "
                 "`.tolist()` sizes, ...)",
                 SEGMENT.with_fields({"expression": STR, "op": OneOf((
                     "nonzero", "argwhere", "masked_select", "unique", "bincount",
                     "repeat_interleave", "where", "boolean-mask", "split-sizes"))})),
        RuleInfo("CKP206", "context-not-replayed", "warning", Dynamic.CONTEXT_STATE, NO_FIX,
                 "ckptlint.checks.context_not_replayed:ContextNotReplayed",
                 "a checkpoint (or a call reaching one) inside a kernel or precision context "
                 "(`sdpa_kernel`, `torch.backends.*.flags`, `fp8_autocast`, ...) whose "
                 "`.backward()` runs after the block",
                 CALL.with_fields({"context": STR, "backward": PLACE, "call": STR},
                                  {"state": STR})),
        RuleInfo("CKP301", "device-move-in-segment", "warning", DEVICE, NO_FIX,
                 "ckptlint.checks.device_move_in_segment:DeviceMoveInSegment",
                 "a move to a device whose RNG the checkpoint did not save",
                 SEGMENT.with_fields({"device": STR, "draws_random": BOOL},
                                     {"rng": STR, "draw": TORCH_DRAW, "built": STR,
                                      "rng_at": PLACE})),
        RuleInfo("CKP302", "unpreserved-rng", "error", REPLAY_COMPARE, NO_FIX,
                 "ckptlint.checks.unpreserved_rng:UnpreservedRng",
                 "randomness under `preserve_rng_state=False`",
                 SEGMENT.with_fields({"rng": STR, "draw": TORCH_DRAW, "checkpoint": PLACE,
                                      "lost_by": OneOf(("argument", "class"))},
                                     {"built": STR})),
        RuleInfo("CKP303", "foreign-rng", "warning", REPLAY_COMPARE, NO_FIX,
                 "ckptlint.checks.foreign_rng:ForeignRng",
                 "Python `random`, NumPy random or a user `torch.Generator` inside a segment",
                 SEGMENT.with_fields({"rng": STR, "draw": OneOf((
                     "python", "numpy", "factory", "generator"))})),
        RuleInfo("CKP401", "side-effect-in-segment", "warning", SIDE_EFFECT, NO_FIX,
                 "ckptlint.checks.side_effect_in_segment:SideEffectInSegment",
                 "accumulating writes to outer state, in-place buffer updates, logging, file "
                 "writes (they happen again on replay)",
                 STATE.with_fields(
                     {"effect": OneOf(("write", "running-stats", "output", "io")),
                      "grad_guarded": BOOL},
                     {"write": OneOf(("accumulate", "augassign", "item", "del", "method")),
                      "method": STR,
                      "target": OneOf(("attribute", "global", "nonlocal", "module-state")),
                      "enclosing": STR, "module_class": STR})),
        RuleInfo("CKP402", "argument-mutation", "warning", SIDE_EFFECT, NO_FIX,
                 "ckptlint.checks.argument_mutation:ArgumentMutation",
                 "a segment mutates an object passed into it (container methods, item "
                 "assignment, in-place ops on an input tensor, a cache's `update()`): the "
                 "replay does it again",
                 STATE.with_fields(
                     {"write": OneOf(("accumulate", "augassign", "item", "del", "method")),
                      "argument": STR, "forwarded": BOOL}, {"method": STR})),
        RuleInfo("CKP501", "replay-divergence", "warning", REPLAY_COMPARE, NO_FIX, None,
                 "(dynamic) a watched replay differed from its forward",
                 Obj({"function": STR})),
        RuleInfo("CKP502", "checkpoint-not-worth-it", "info", STATIC_ONLY, NO_FIX, None,
                 "(profile) little activation memory freed for the recompute",
                 Obj({})),
        RuleInfo("CKP601", "mode-conflicts-with-setup", "error", STATIC_ONLY, NO_FIX,
                 "ckptlint.checks.mode_conflicts_with_setup:ModeConflictsWithSetup",
                 "a checkpoint mode known to break with the training setup it runs in "
                 "(non-reentrant under ZeRO-3 with frozen parameters, reentrant under DDP "
                 "`find_unused_parameters=True`)",
                 CALL.with_fields({
                     "pairing": OneOf(("zero3-frozen-non-reentrant",
                                       "ddp-find-unused-reentrant")),
                     "setup": Obj({}, {"zero_stage": INT, "zero_stage_from": STR,
                                       "frozen_parameters": BOOL,
                                       "frozen_parameters_from": STR,
                                       "find_unused_parameters": BOOL,
                                       "find_unused_parameters_from": STR,
                                       "static_graph": BOOL, "static_graph_from": STR}),
                     "reference": STR, "zero_from": STR, "frozen_from": STR,
                     "unused_from": STR})),
        RuleInfo("CKP901", "unresolved-target", "info", STATIC_ONLY, NO_FIX,
                 "ckptlint.checks.unresolved_target:UnresolvedTarget",
                 "the checkpointed function could not be resolved",
                 CALL.with_fields({"reason": STR}), default_on=False),
        RuleInfo("CKP902", "unused-noqa", "info", STATIC_ONLY, NO_FIX, None,
                 "a `# noqa` that suppresses nothing",
                 Obj({"codes": ListOf(STR)}), default_on=False),
        RuleInfo("CKP999", "parse-error", "error", STATIC_ONLY, NO_FIX, None,
                 "a file could not be read or parsed",
                 Obj({"error": STR}, optional={"line": INT})),
    )
}


def rule_info(code: str) -> RuleInfo:
    return RULES[code]


def codes_matching(selector: str) -> list[str]:
    """Codes that a selector (a full code or a prefix such as `CKP2`) covers."""
    return [code for code in RULES if code.startswith(selector)]


def implementations() -> tuple[str, ...]:
    """The rule classes the engine runs, by import path, in code order."""
    return tuple(info.implementation for info in RULES.values() if info.implementation)


def codes_judged(*ways: Dynamic) -> frozenset[str]:
    """The codes dynamic mode judges in one of these ways."""
    return frozenset(code for code, info in RULES.items() if info.dynamic in ways)
