"""The checkpoint APIs ckptlint knows, by qualified name, and how each one checkpoints.

`SiteKind` says how a call is read, `Mode` which checkpoint mode an API has by default.
"""

from __future__ import annotations

from collections.abc import Iterable
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
    # A library entry point that checkpoints the model's layers itself (`ENTRY_POINTS`).
    ENTRY = "entry"


class Mode(TextEnum):
    """A checkpoint mode. A site's is REENTRANT, NON_REENTRANT or UNKNOWN; an API's default
    (`CheckpointApi.mode`, `checkpoint-functions`) is one of `API_MODES`."""

    TORCH = "torch"  # `use_reentrant` decides; missing means reentrant (torch warns)
    REENTRANT = "reentrant"  # for an API: always reentrant, whatever is passed
    NON_REENTRANT = "non-reentrant"  # for an API: unless `use_reentrant=True` is passed
    # For an API: reentrant unless `use_reentrant=False` is passed (its own default, no
    # warning: TransformerEngine's `checkpoint`).
    REENTRANT_DEFAULT = "reentrant-default"
    UNKNOWN = "unknown"


API_MODES = (Mode.TORCH, Mode.REENTRANT, Mode.NON_REENTRANT, Mode.REENTRANT_DEFAULT)
SITE_MODES = (Mode.REENTRANT, Mode.NON_REENTRANT, Mode.UNKNOWN)


# In a lookup name, the instance of the class named before it: `CheckpointWithoutOutput.()` is
# what `CheckpointWithoutOutput()` returns, and `CheckpointWithoutOutput.().checkpoint` its
# method.
INSTANCE = "()"

# Keywords the torch checkpoint itself consumes (everything else goes to the function).
CHECKPOINT_KEYWORDS = frozenset({
    "use_reentrant", "preserve_rng_state", "context_fn", "determinism_check", "debug",
    "early_stop",
})


@dataclass(frozen=True)
class CheckpointApi:
    qualname: str  # how findings name it (`data.api`)
    kind: SiteKind
    mode: Mode
    # Positional index of the checkpointed callable (or module) in a call.
    target_index: int = 0
    # Positional index of `use_reentrant`, where the signature allows passing it positionally.
    use_reentrant_index: int | None = None
    # Positional index of `preserve_rng_state` (`CheckpointFunction.apply(fn, preserve, *args)`).
    preserve_rng_index: int | None = None
    # A method of an instance of the class named by `qualname` minus its last part.
    method: bool = False
    # The keywords the API consumes itself; the others go to the checkpointed function.
    own_keywords: frozenset[str] = CHECKPOINT_KEYWORDS
    # In reentrant mode it still passes keyword arguments on to the function and accepts
    # `context_fn`/`debug` (torch's reentrant checkpoint rejects them).
    passes_keywords: bool = False

    @property
    def key(self) -> str:
        """The name a call's callee must resolve to (`api_table`'s key)."""
        if not self.method:
            return self.qualname
        owner, name = self.qualname.rsplit(".", 1)
        return f"{owner}.{INSTANCE}.{name}"


def _api(qualname: str, kind: SiteKind, mode: Mode, **extra) -> CheckpointApi:
    return CheckpointApi(qualname, kind, mode, **extra)


_TORCH_CHECKPOINT = "torch.utils.checkpoint.checkpoint"
_TORCH_SEQUENTIAL = "torch.utils.checkpoint.checkpoint_sequential"
_WRAPPER_MODULE = "torch.distributed.algorithms._checkpoint.checkpoint_wrapper"

_FUNCTION, _SEQUENTIAL, _WRAPPER = SiteKind.FUNCTION, SiteKind.SEQUENTIAL, SiteKind.WRAPPER
_MEGATRON = "megatron.core.tensor_parallel"
_TRANSFORMER_ENGINE = "transformer_engine.pytorch"
# TransformerEngine's `checkpoint(function, *args, **kwargs)` pops these before calling
# `function(*args, **kwargs)` (docs/torch-facts.md, "Other libraries").
_TE_KEYWORDS = CHECKPOINT_KEYWORDS | {"distribute_saved_activations", "tp_group",
                                      "get_rng_state_tracker"}
_FAIRSCALE = "fairscale.nn.checkpoint"
BUILTIN_APIS: dict[str, CheckpointApi] = {
    api.key: api
    for api in (
        _api(_TORCH_CHECKPOINT, _FUNCTION, Mode.TORCH),
        _api(_TORCH_SEQUENTIAL, _SEQUENTIAL, Mode.TORCH, use_reentrant_index=3),
        # The reentrant implementation itself: `CheckpointFunction.apply(fn, preserve, *args)`.
        _api("torch.utils.checkpoint.CheckpointFunction.apply", _FUNCTION, Mode.REENTRANT,
             preserve_rng_index=1),
        _api(f"{_WRAPPER_MODULE}.checkpoint_wrapper", _WRAPPER, Mode.NON_REENTRANT),
        _api(f"{_WRAPPER_MODULE}.apply_activation_checkpointing", SiteKind.APPLY,
             Mode.NON_REENTRANT),
        _api("torch.distributed._composable.checkpoint", SiteKind.COMPOSABLE, Mode.NON_REENTRANT),
        _api("torch.distributed._composable.checkpoint_activation.checkpoint",
             SiteKind.COMPOSABLE, Mode.NON_REENTRANT),
        # Third-party wrappers (docs/torch-facts.md, "Other libraries").
        _api("deepspeed.checkpointing.checkpoint", _FUNCTION, Mode.REENTRANT),
        _api("deepspeed.runtime.activation_checkpointing.checkpointing.checkpoint", _FUNCTION,
             Mode.REENTRANT),
        _api("deepspeed.checkpointing.non_reentrant_checkpoint", _FUNCTION, Mode.NON_REENTRANT),
        _api("deepspeed.runtime.activation_checkpointing.checkpointing.non_reentrant_checkpoint",
             _FUNCTION, Mode.NON_REENTRANT),
        _api(f"{_MEGATRON}.checkpoint", _FUNCTION, Mode.REENTRANT),
        _api(f"{_MEGATRON}.random.checkpoint", _FUNCTION, Mode.REENTRANT),
        # `ckpt = CheckpointWithoutOutput(); ckpt.checkpoint(fn, *args)`: its own autograd
        # Function runs `fn` under `no_grad` and again in a backward hook.
        _api(f"{_MEGATRON}.CheckpointWithoutOutput.checkpoint", _FUNCTION, Mode.REENTRANT,
             method=True),
        _api(f"{_MEGATRON}.random.CheckpointWithoutOutput.checkpoint", _FUNCTION,
             Mode.REENTRANT, method=True),
        _api(f"{_TRANSFORMER_ENGINE}.checkpoint", _FUNCTION, Mode.REENTRANT_DEFAULT,
             own_keywords=_TE_KEYWORDS, passes_keywords=True),
        _api(f"{_TRANSFORMER_ENGINE}.distributed.checkpoint", _FUNCTION,
             Mode.REENTRANT_DEFAULT, own_keywords=_TE_KEYWORDS, passes_keywords=True),
        _api("fairseq.modules.checkpoint_activations.checkpoint_wrapper", _WRAPPER,
             Mode.REENTRANT),
        # fairscale's wrapper runs the module through its own reentrant autograd Function.
        _api(f"{_FAIRSCALE}.checkpoint_wrapper", _WRAPPER, Mode.REENTRANT),
        _api(f"{_FAIRSCALE}.checkpoint_activations.checkpoint_wrapper", _WRAPPER,
             Mode.REENTRANT),
        _api("fairscale.nn.checkpoint_wrapper", _WRAPPER, Mode.REENTRANT),
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
# transformers 5.24 added `activation_checkpointing_enable` (and deprecated the other name).
HF_ACTIVATION_ENABLE_METHOD = "activation_checkpointing_enable"
# Each enable method and its keyword for the checkpoint's own keywords (also its first
# positional parameter).
HF_ENABLE_METHODS = {
    HF_ENABLE_METHOD: "gradient_checkpointing_kwargs",
    HF_ACTIVATION_ENABLE_METHOD: "activation_checkpointing_kwargs",
}
# The training arguments' switches, each with its keywords' keyword.
HF_ARGUMENT_SWITCHES = {
    "gradient_checkpointing": "gradient_checkpointing_kwargs",
    "activation_checkpointing": "activation_checkpointing_kwargs",
}
# Top-level packages whose objects' enable methods are transformers' own.
HF_LIBRARIES = ("transformers", "peft", "trl")
# How findings name these (`data.api`): the model base class defines both.
HF_CHECKPOINT_API = f"transformers.PreTrainedModel.{HF_CHECKPOINT_METHOD}"
HF_ENABLE_API = f"transformers.PreTrainedModel.{HF_ENABLE_METHOD}"
HF_TRAINING_ARGUMENTS = (
    "transformers.TrainingArguments",
    "transformers.Seq2SeqTrainingArguments",
    "transformers.training_args.TrainingArguments",
    "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
)
# trl's trainer configurations: `gradient_checkpointing` defaults to True, and trl 1.x's
# trainers `setdefault("use_reentrant", False)` (docs/torch-facts.md, "Entry points").
TRL_CONFIGS = tuple(
    name
    for config, module in (("SFTConfig", "sft_config"), ("DPOConfig", "dpo_config"),
                           ("GRPOConfig", "grpo_config"), ("KTOConfig", "kto_config"),
                           ("RewardConfig", "reward_config"), ("RLOOConfig", "rloo_config"))
    for name in (f"trl.{config}", f"trl.trainer.{config}", f"trl.trainer.{module}.{config}")
)
TRAINING_ARGUMENT_CLASSES = (*HF_TRAINING_ARGUMENTS, *TRL_CONFIGS)
# Model base classes whose `_gradient_checkpointing_func` is set by the library.
HF_MODEL_BASES = ("transformers.PreTrainedModel", "transformers.modeling_utils.PreTrainedModel")
DIFFUSERS_MODEL_BASES = ("diffusers.ModelMixin", "diffusers.models.ModelMixin",
                         "diffusers.models.modeling_utils.ModelMixin")


class EntryMode(TextEnum):
    """How a library entry point (`EntryPoint`) decides the mode it checkpoints in."""

    # An optional checkpoint function argument decides; without it, non-reentrant (diffusers).
    CHECKPOINT_FUNCTION = "checkpoint-function"
    # It calls transformers' `gradient_checkpointing_enable` with the keywords it is given
    # (peft): CKP104's rules, by the transformers version in force.
    HF_KWARGS = "hf-kwargs"
    # It calls `apply_activation_checkpointing(model, **kwargs)`: a `checkpoint_wrapper_fn`
    # keyword decides; without it, non-reentrant (torchtune).
    WRAPPER_FN = "wrapper-fn"
    # A switch; the library always wraps with `CheckpointImpl.NO_REENTRANT` or
    # `checkpoint_wrapper`'s default (accelerate's FSDP plugin, Lightning's FSDP strategy).
    SETTING = "setting"


@dataclass(frozen=True)
class Parameter:
    name: str
    index: int | None = None  # positional index, when it may be passed positionally


@dataclass(frozen=True)
class EntryPoint:
    """A library function, class or method that checkpoints the model's layers itself.

    Read from each library's source: docs/torch-facts.md, "Entry points".
    """

    api: str  # how findings name it (`data.api`)
    mode: EntryMode
    names: tuple[str, ...] = ()  # qualified names of the function or class
    method: str = ""  # or: a method of the objects of `libraries`
    libraries: tuple[str, ...] = ()
    # The argument the mode is read from (a function, keywords, a wrapper function).
    argument: Parameter | None = None
    # The switches that turn it on, and whether it is on when none is passed.
    switches: tuple[Parameter, ...] = ()
    on_by_default: bool = True


_PEFT_PREPARE = "prepare_model_for_kbit_training"
_TORCHTUNE_SET = "set_activation_checkpointing"
_LIGHTNING_FSDP = tuple(f"{package}.strategies.{module}FSDPStrategy"
                        for package in ("lightning.pytorch", "lightning.fabric",
                                        "pytorch_lightning", "lightning_fabric")
                        for module in ("", "fsdp."))
ENTRY_POINTS = (
    EntryPoint("diffusers.ModelMixin.enable_gradient_checkpointing",
               EntryMode.CHECKPOINT_FUNCTION, method="enable_gradient_checkpointing",
               libraries=("diffusers",), argument=Parameter("gradient_checkpointing_func", 0)),
    EntryPoint(f"peft.{_PEFT_PREPARE}", EntryMode.HF_KWARGS,
               names=(f"peft.{_PEFT_PREPARE}", f"peft.utils.{_PEFT_PREPARE}",
                      f"peft.utils.other.{_PEFT_PREPARE}"),
               argument=Parameter("gradient_checkpointing_kwargs", 2),
               switches=(Parameter("use_gradient_checkpointing", 1),)),
    EntryPoint(f"torchtune.training.{_TORCHTUNE_SET}", EntryMode.WRAPPER_FN,
               names=(f"torchtune.training.{_TORCHTUNE_SET}",
                      f"torchtune.training.memory.{_TORCHTUNE_SET}",
                      f"torchtune.utils.{_TORCHTUNE_SET}"),
               argument=Parameter("checkpoint_wrapper_fn")),
    EntryPoint("accelerate.FullyShardedDataParallelPlugin", EntryMode.SETTING,
               names=("accelerate.FullyShardedDataParallelPlugin",
                      "accelerate.utils.FullyShardedDataParallelPlugin",
                      "accelerate.utils.dataclasses.FullyShardedDataParallelPlugin"),
               switches=(Parameter("activation_checkpointing"),), on_by_default=False),
    EntryPoint("lightning.pytorch.strategies.FSDPStrategy", EntryMode.SETTING,
               names=_LIGHTNING_FSDP,
               switches=(Parameter("activation_checkpointing_policy"),
                         Parameter("activation_checkpointing")), on_by_default=False),
)
ENTRY_BY_NAME = {name: entry for entry in ENTRY_POINTS for name in entry.names}
ENTRY_BY_METHOD = {entry.method: entry for entry in ENTRY_POINTS if entry.method}

# A hand-written checkpoint (SiteKind.HAND_ROLLED) derives from `torch.autograd.Function`
# (the last word of both spellings) and turns gradients back on in `backward` with one of these.
AUTOGRAD_FUNCTION_WORD = "Function"
GRAD_ON_WORDS = ("enable_grad", "set_grad_enabled")
# `HandRolled.apply(fn, *args)`: a reentrant checkpoint of `fn` (a SiteKind.FUNCTION site).
APPLY_METHOD = "apply"

# `checkpoint_wrapper(..., checkpoint_impl=CheckpointImpl.REENTRANT)`.
REENTRANT_IMPL = f"{_WRAPPER_MODULE}.CheckpointImpl.REENTRANT"

def api_table(configured: dict[str, str]) -> dict[str, CheckpointApi]:
    """Built-in APIs plus `[tool.ckptlint] checkpoint-functions` (user entries win)."""
    table = dict(BUILTIN_APIS)
    for qualname, mode in configured.items():
        table[qualname] = _api(qualname, SiteKind.FUNCTION, Mode(mode))
    return table


def trigger_names(api_names: Iterable[str], segment_bases: Iterable[str]) -> set[str]:
    """Identifiers one of which must appear in a file that can hold a checkpoint site
    (`api_names`: the keys of `api_table`)."""
    names = {key.rsplit(".", 1)[-1] for key in api_names}
    names.update(name.rsplit(".", 1)[-1] for name in (
        *HF_LAYER_BASES, *segment_bases, *TRAINING_ARGUMENT_CLASSES, *ENTRY_BY_NAME))
    names.update({HF_CHECKPOINT_METHOD, *HF_ENABLE_METHODS, *ENTRY_BY_METHOD,
                  *GRAD_ON_WORDS})
    return names


def called_names(api_names: Iterable[str], segment_bases: Iterable[str]) -> set[str]:
    """Qualified names whose calls (or, for classes, subclasses) are sites: what the
    screen (`ckptlint.screen.confirm`) looks for."""
    return {*api_names, *HF_LAYER_BASES, *segment_bases, *TRAINING_ARGUMENT_CLASSES,
            *ENTRY_BY_NAME}
