"""The checkpoint APIs ckptlint knows, by qualified name, and how each one checkpoints.

`kind` says how a call is read:
- function:   fn(function, *args, **kw)            -> checkpoints `function` (torch keyword semantics)
- sequential: fn(functions, segments, input, ...)  -> checkpoints the modules in `functions`
- wrapper:    fn(module, ...)                      -> returns `module` checkpointed on every call
- apply:      fn(model, checkpoint_wrapper_fn=..., check_fn=...) -> wraps matching submodules
- composable: fn(module)                           -> torch.distributed._composable.checkpoint

`mode` is the default checkpoint mode:
- torch:         `use_reentrant` missing means reentrant (torch warns), True/False as given
- reentrant:     always reentrant, whatever is passed
- non-reentrant: non-reentrant unless `use_reentrant=True` is passed
"""

from __future__ import annotations

from dataclasses import dataclass

FUNCTION, SEQUENTIAL, WRAPPER, APPLY, COMPOSABLE = (
    "function", "sequential", "wrapper", "apply", "composable")
TORCH, REENTRANT, NON_REENTRANT = "torch", "reentrant", "non-reentrant"
MODES = (TORCH, REENTRANT, NON_REENTRANT)


@dataclass(frozen=True)
class CheckpointApi:
    qualname: str
    kind: str
    mode: str
    # Positional index of the checkpointed callable (or module) in a call.
    target_index: int = 0
    # Positional index of `use_reentrant`, where the signature allows passing it positionally.
    use_reentrant_index: int | None = None


def _api(qualname: str, kind: str, mode: str, **extra) -> CheckpointApi:
    return CheckpointApi(qualname, kind, mode, **extra)


_TORCH_CHECKPOINT = "torch.utils.checkpoint.checkpoint"
_TORCH_SEQUENTIAL = "torch.utils.checkpoint.checkpoint_sequential"
_WRAPPER_MODULE = "torch.distributed.algorithms._checkpoint.checkpoint_wrapper"

BUILTIN_APIS: dict[str, CheckpointApi] = {
    api.qualname: api
    for api in (
        _api(_TORCH_CHECKPOINT, FUNCTION, TORCH),
        _api(_TORCH_SEQUENTIAL, SEQUENTIAL, TORCH, use_reentrant_index=3),
        _api(f"{_WRAPPER_MODULE}.checkpoint_wrapper", WRAPPER, NON_REENTRANT),
        _api(f"{_WRAPPER_MODULE}.apply_activation_checkpointing", APPLY, NON_REENTRANT),
        _api("torch.distributed._composable.checkpoint", COMPOSABLE, NON_REENTRANT),
        _api("torch.distributed._composable.checkpoint_activation.checkpoint", COMPOSABLE,
             NON_REENTRANT),
        # Third-party wrappers.
        _api("deepspeed.checkpointing.checkpoint", FUNCTION, REENTRANT),
        _api("deepspeed.runtime.activation_checkpointing.checkpointing.checkpoint", FUNCTION,
             REENTRANT),
        _api("megatron.core.tensor_parallel.checkpoint", FUNCTION, REENTRANT),
        _api("megatron.core.tensor_parallel.random.checkpoint", FUNCTION, REENTRANT),
        _api("fairseq.modules.checkpoint_activations.checkpoint_wrapper", WRAPPER, REENTRANT),
        _api("timm.models._manipulate.checkpoint", FUNCTION, NON_REENTRANT),
        _api("timm.models._manipulate.checkpoint_seq", SEQUENTIAL, NON_REENTRANT),
        _api("timm.models.checkpoint_seq", SEQUENTIAL, NON_REENTRANT),
        _api("timm.models.helpers.checkpoint_seq", SEQUENTIAL, NON_REENTRANT),
        _api("xformers.checkpoint", FUNCTION, NON_REENTRANT),
        _api("xformers.checkpoint_fairinternal.checkpoint", FUNCTION, NON_REENTRANT),
    )
}

# transformers: the base class whose subclasses' forward is checkpointed.
HF_LAYER_BASES = (
    "transformers.modeling_layers.GradientCheckpointingLayer",
    "transformers.GradientCheckpointingLayer",
)
HF_CHECKPOINT_METHOD = "_gradient_checkpointing_func"
HF_ENABLE_METHOD = "gradient_checkpointing_enable"
# How findings name these (`data.api`): the model base class defines both.
HF_CHECKPOINT_API = f"transformers.PreTrainedModel.{HF_CHECKPOINT_METHOD}"
HF_ENABLE_API = f"transformers.PreTrainedModel.{HF_ENABLE_METHOD}"
HF_TRAINING_ARGUMENTS = (
    "transformers.TrainingArguments",
    "transformers.Seq2SeqTrainingArguments",
    "transformers.training_args.TrainingArguments",
    "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
    "trl.SFTConfig",
    "trl.DPOConfig",
    "trl.GRPOConfig",
)

# `checkpoint_wrapper(..., checkpoint_impl=CheckpointImpl.REENTRANT)`.
REENTRANT_IMPL = f"{_WRAPPER_MODULE}.CheckpointImpl.REENTRANT"

# Keywords the torch checkpoint itself consumes (everything else goes to the function).
CHECKPOINT_KEYWORDS = frozenset({
    "use_reentrant", "preserve_rng_state", "context_fn", "determinism_check", "debug",
    "early_stop",
})


def api_table(configured: dict[str, str]) -> dict[str, CheckpointApi]:
    """Built-in APIs plus `[tool.ckptlint] checkpoint-functions` (user entries win)."""
    table = dict(BUILTIN_APIS)
    for qualname, mode in configured.items():
        table[qualname] = _api(qualname, FUNCTION, mode)
    return table


def trigger_names(table: dict[str, CheckpointApi], segment_bases: tuple[str, ...]) -> set[str]:
    """Identifiers one of which must appear in a file that can hold a checkpoint site."""
    names = {qualname.rsplit(".", 1)[-1] for qualname in table}
    names.update(base.rsplit(".", 1)[-1] for base in (*HF_LAYER_BASES, *segment_bases))
    names.update({HF_CHECKPOINT_METHOD, HF_ENABLE_METHOD, "gradient_checkpointing"})
    return names
