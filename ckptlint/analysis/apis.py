"""The checkpoint APIs ckptlint knows, by qualified name, and how each one checkpoints.

`SiteKind` says how a call is read, `Mode` which checkpoint mode an API has by default.
"""

from __future__ import annotations

from dataclasses import dataclass

from ckptlint.enums import TextEnum


class SiteKind(TextEnum):
    """What a checkpoint site is. A table API's kind (`CheckpointApi.kind`) is one of the
    first five: how its call is read."""

    FUNCTION = "function"  # fn(function, *args, **kw): checkpoints `function` (torch keywords)
    SEQUENTIAL = "sequential"  # fn(functions, segments, input, ...): the modules in `functions`
    WRAPPER = "wrapper"  # fn(module, ...): returns `module` checkpointed on every call
    APPLY = "apply"  # fn(model, checkpoint_wrapper_fn=..., check_fn=...): wraps submodules
    COMPOSABLE = "composable"  # fn(module): torch.distributed._composable.checkpoint
    # transformers, without a table API:
    HF_FUNC = "hf-func"  # self._gradient_checkpointing_func(layer.__call__, ...)
    HF_LAYER = "hf-layer"  # a `class` deriving from GradientCheckpointingLayer
    HF_ENABLE = "hf-enable"  # model.gradient_checkpointing_enable(...)
    HF_ARGS = "hf-args"  # TrainingArguments(gradient_checkpointing=True, ...)
    # A `class` deriving from `torch.autograd.Function` that reruns a function in backward
    # (analysis/hand_rolled.py): a checkpoint written by hand, reentrant by construction.
    HAND_ROLLED = "hand-rolled"


class Mode(TextEnum):
    """A checkpoint mode. A site's is REENTRANT, NON_REENTRANT or UNKNOWN; an API's default
    (`CheckpointApi.mode`, `checkpoint-functions`) is one of `API_MODES`."""

    TORCH = "torch"  # `use_reentrant` decides; missing means reentrant (torch warns)
    REENTRANT = "reentrant"  # for an API: always reentrant, whatever is passed
    NON_REENTRANT = "non-reentrant"  # for an API: unless `use_reentrant=True` is passed
    UNKNOWN = "unknown"


API_MODES = (Mode.TORCH, Mode.REENTRANT, Mode.NON_REENTRANT)
SITE_MODES = (Mode.REENTRANT, Mode.NON_REENTRANT, Mode.UNKNOWN)


@dataclass(frozen=True)
class CheckpointApi:
    qualname: str
    kind: SiteKind
    mode: Mode
    # Positional index of the checkpointed callable (or module) in a call.
    target_index: int = 0
    # Positional index of `use_reentrant`, where the signature allows passing it positionally.
    use_reentrant_index: int | None = None


def _api(qualname: str, kind: SiteKind, mode: Mode, **extra) -> CheckpointApi:
    return CheckpointApi(qualname, kind, mode, **extra)


_TORCH_CHECKPOINT = "torch.utils.checkpoint.checkpoint"
_TORCH_SEQUENTIAL = "torch.utils.checkpoint.checkpoint_sequential"
_WRAPPER_MODULE = "torch.distributed.algorithms._checkpoint.checkpoint_wrapper"

_FUNCTION, _SEQUENTIAL, _WRAPPER = SiteKind.FUNCTION, SiteKind.SEQUENTIAL, SiteKind.WRAPPER
BUILTIN_APIS: dict[str, CheckpointApi] = {
    api.qualname: api
    for api in (
        _api(_TORCH_CHECKPOINT, _FUNCTION, Mode.TORCH),
        _api(_TORCH_SEQUENTIAL, _SEQUENTIAL, Mode.TORCH, use_reentrant_index=3),
        _api(f"{_WRAPPER_MODULE}.checkpoint_wrapper", _WRAPPER, Mode.NON_REENTRANT),
        _api(f"{_WRAPPER_MODULE}.apply_activation_checkpointing", SiteKind.APPLY,
             Mode.NON_REENTRANT),
        _api("torch.distributed._composable.checkpoint", SiteKind.COMPOSABLE, Mode.NON_REENTRANT),
        _api("torch.distributed._composable.checkpoint_activation.checkpoint",
             SiteKind.COMPOSABLE, Mode.NON_REENTRANT),
        # Third-party wrappers.
        _api("deepspeed.checkpointing.checkpoint", _FUNCTION, Mode.REENTRANT),
        _api("deepspeed.runtime.activation_checkpointing.checkpointing.checkpoint", _FUNCTION,
             Mode.REENTRANT),
        _api("megatron.core.tensor_parallel.checkpoint", _FUNCTION, Mode.REENTRANT),
        _api("megatron.core.tensor_parallel.random.checkpoint", _FUNCTION, Mode.REENTRANT),
        _api("fairseq.modules.checkpoint_activations.checkpoint_wrapper", _WRAPPER,
             Mode.REENTRANT),
        _api("timm.models._manipulate.checkpoint", _FUNCTION, Mode.NON_REENTRANT),
        _api("timm.models._manipulate.checkpoint_seq", _SEQUENTIAL, Mode.NON_REENTRANT),
        _api("timm.models.checkpoint_seq", _SEQUENTIAL, Mode.NON_REENTRANT),
        _api("timm.models.helpers.checkpoint_seq", _SEQUENTIAL, Mode.NON_REENTRANT),
        _api("xformers.checkpoint", _FUNCTION, Mode.NON_REENTRANT),
        _api("xformers.checkpoint_fairinternal.checkpoint", _FUNCTION, Mode.NON_REENTRANT),
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

# A hand-written checkpoint (SiteKind.HAND_ROLLED) derives from `torch.autograd.Function`
# (the last word of both spellings) and turns gradients back on in `backward` with one of these.
AUTOGRAD_FUNCTION_WORD = "Function"
GRAD_ON_WORDS = ("enable_grad", "set_grad_enabled")

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
        table[qualname] = _api(qualname, SiteKind.FUNCTION, Mode(mode))
    return table


def trigger_names(table: dict[str, CheckpointApi], segment_bases: tuple[str, ...]) -> set[str]:
    """Identifiers one of which must appear in a file that can hold a checkpoint site."""
    names = {qualname.rsplit(".", 1)[-1] for qualname in table}
    names.update(base.rsplit(".", 1)[-1] for base in (*HF_LAYER_BASES, *segment_bases))
    names.update({HF_CHECKPOINT_METHOD, HF_ENABLE_METHOD, "gradient_checkpointing",
                  *GRAD_ON_WORDS})
    return names
