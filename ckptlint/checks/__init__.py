"""The rules. Each module holds one rule; the engine finds them through `RULE_CLASSES`.

Listed by import path so that nothing is imported until a file needs checking.
"""

RULE_CLASSES = (
    "ckptlint.checks.reentrant_checkpoint:ReentrantCheckpoint",
    "ckptlint.checks.implicit_use_reentrant:ImplicitUseReentrant",
    "ckptlint.checks.reentrant_incompatible_call:ReentrantIncompatibleCall",
    "ckptlint.checks.hf_implicit_reentrant:HfImplicitReentrant",
    "ckptlint.checks.determinism_check_disabled:DeterminismCheckDisabled",
    "ckptlint.checks.unresolved_target:UnresolvedTarget",
    "ckptlint.checks.mutable_state_read:MutableStateRead",
    "ckptlint.checks.external_state_read:ExternalStateRead",
    "ckptlint.checks.data_dependent_branch:DataDependentBranch",
    "ckptlint.checks.state_dependent_branch:StateDependentBranch",
    "ckptlint.checks.device_move_in_segment:DeviceMoveInSegment",
    "ckptlint.checks.unpreserved_rng:UnpreservedRng",
    "ckptlint.checks.foreign_rng:ForeignRng",
    "ckptlint.checks.side_effect_in_segment:SideEffectInSegment",
)
