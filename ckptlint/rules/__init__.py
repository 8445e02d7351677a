"""The rules. Each module holds one rule; the engine finds them through `RULE_CLASSES`.

Listed by import path so that nothing is imported until a file needs checking.
"""

RULE_CLASSES = (
    "ckptlint.rules.reentrant_checkpoint:ReentrantCheckpoint",
    "ckptlint.rules.implicit_use_reentrant:ImplicitUseReentrant",
    "ckptlint.rules.reentrant_incompatible_call:ReentrantIncompatibleCall",
    "ckptlint.rules.hf_implicit_reentrant:HfImplicitReentrant",
    "ckptlint.rules.determinism_check_disabled:DeterminismCheckDisabled",
    "ckptlint.rules.unresolved_target:UnresolvedTarget",
    "ckptlint.rules.mutable_state_read:MutableStateRead",
    "ckptlint.rules.external_state_read:ExternalStateRead",
    "ckptlint.rules.data_dependent_branch:DataDependentBranch",
    "ckptlint.rules.state_dependent_branch:StateDependentBranch",
    "ckptlint.rules.device_move_in_segment:DeviceMoveInSegment",
    "ckptlint.rules.unpreserved_rng:UnpreservedRng",
    "ckptlint.rules.foreign_rng:ForeignRng",
    "ckptlint.rules.side_effect_in_segment:SideEffectInSegment",
)
