"""The rule catalogue: every code ckptlint can report, its name, severity and default state.

This table is the single source of truth for codes; it imports nothing heavy so that
selection, output and `ckptlint rule` work without loading the analysis.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuleInfo:
    code: str
    name: str
    severity: str  # "error" | "warning" | "info"
    summary: str
    default_on: bool = True


RULES: dict[str, RuleInfo] = {
    info.code: info
    for info in (
        RuleInfo("CKP101", "reentrant-checkpoint", "warning",
                 "checkpoint runs in reentrant mode"),
        RuleInfo("CKP102", "implicit-use-reentrant", "warning",
                 "checkpoint called without `use_reentrant`, so it runs reentrant"),
        RuleInfo("CKP103", "reentrant-incompatible-call", "error",
                 "reentrant checkpoint call that fails or loses gradients"),
        RuleInfo("CKP104", "hf-implicit-reentrant", "warning",
                 "transformers gradient checkpointing enabled without `use_reentrant`"),
        RuleInfo("CKP105", "determinism-check-disabled", "info",
                 "`determinism_check=\"none\"` turns off the replay metadata check"),
        RuleInfo("CKP201", "mutable-state-read", "warning",
                 "checkpointed code reads state that is changed elsewhere"),
        RuleInfo("CKP202", "external-state-read", "info",
                 "checkpointed code reads time, environment or process state"),
        RuleInfo("CKP203", "data-dependent-branch", "warning",
                 "checkpointed code branches on tensor values"),
        RuleInfo("CKP204", "state-dependent-branch", "warning",
                 "checkpointed code branches on mutable state"),
        RuleInfo("CKP301", "device-move-in-segment", "warning",
                 "checkpointed code moves tensors to a device whose RNG was not saved"),
        RuleInfo("CKP302", "unpreserved-rng", "error",
                 "randomness inside a checkpoint with `preserve_rng_state=False`"),
        RuleInfo("CKP303", "foreign-rng", "warning",
                 "Python, NumPy or user generator randomness inside a checkpoint"),
        RuleInfo("CKP401", "side-effect-in-segment", "warning",
                 "checkpointed code mutates outer state, which happens again on replay"),
        RuleInfo("CKP501", "replay-divergence", "warning",
                 "a watched replay differed from its forward"),
        RuleInfo("CKP502", "checkpoint-not-worth-it", "info",
                 "the checkpoint frees little activation memory for its recompute cost"),
        RuleInfo("CKP901", "unresolved-target", "info",
                 "the checkpointed function could not be resolved", default_on=False),
        RuleInfo("CKP902", "unused-noqa", "info",
                 "a `# noqa` directive that suppresses nothing", default_on=False),
        RuleInfo("CKP999", "parse-error", "error",
                 "the file could not be read or parsed"),
    )
}


def rule_info(code: str) -> RuleInfo:
    return RULES[code]


def codes_matching(selector: str) -> list[str]:
    """Codes that a selector (a full code or a prefix such as `CKP2`) covers."""
    return [code for code in RULES if code.startswith(selector)]
