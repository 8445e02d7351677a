"""The signatures `ckptlint explain` knows: what a checkpoint error looks like, what most likely
caused it, the rules that find the cause statically, and what to do.

This table is the only place a signature is defined; `ckptlint explain --list` prints it.
A signature matches in exactly one of three ways:
- `tensor`: a test of one tensor line of torch's metadata error ("tensor at position N: saved
  metadata: {...} recomputed metadata: {...}"), given both metadata parsed field by field;
- `errors`: torch's other checkpoint error kinds (`ckptlint.explain.scan.ErrorKind`);
- `text`: a pattern searched in each log line, for errors that are not `CheckpointError`s but
  come from checkpointing (DDP's reducer, reentrant mode's warnings and refusals).

Order matters only for `tensor` tests: a tensor gets the first signature that matches. A
`tensor` signature marked `whole_error` explains the whole error when any of its tensors matches
it: the other tensors' coincidences (one of several reshaped tensors happening to be twice as
long) are then not offered as causes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ckptlint.explain.errors import ErrorKind, TensorMeta, TensorMismatch

REDUCED_FLOATS = frozenset({"bfloat16", "float16", "half", "float8_e4m3fn", "float8_e5m2",
                            "float8_e4m3fnuz", "float8_e5m2fnuz"})


@dataclass(frozen=True)
class Signature:
    id: str
    shows: str  # what the error looks like, in a few words
    cause: str
    fix: str
    rules: tuple[str, ...]  # the codes that find the cause statically (none: no rule does)
    reference: str
    tensor: Callable[[TensorMismatch], bool] | None = None
    errors: tuple[ErrorKind, ...] = ()
    text: re.Pattern[str] | None = None
    whole_error: bool = False


def one_dimension_changed(mismatch: TensorMismatch) -> tuple[int, int] | None:
    """(saved, recomputed) sizes of the one dimension that differs, dtype and rank unchanged."""
    saved, recomputed = mismatch.saved.shape, mismatch.recomputed.shape
    if saved is None or recomputed is None or len(saved) != len(recomputed):
        return None
    if mismatch.saved.dtype != mismatch.recomputed.dtype:
        return None
    changed = [(a, b) for a, b in zip(saved, recomputed) if a != b]
    return changed[0] if len(changed) == 1 else None


def is_partitioned(meta: TensorMeta) -> bool:
    return meta.shape == (0,)


def is_full(meta: TensorMeta) -> bool:
    return meta.shape is not None and meta.shape != (0,) and all(meta.shape)


def partitioned_parameter(mismatch: TensorMismatch) -> bool:
    saved, recomputed = mismatch.saved, mismatch.recomputed
    return ((is_partitioned(saved) and is_full(recomputed))
            or (is_full(saved) and is_partitioned(recomputed)))


def doubled_dimension(mismatch: TensorMismatch) -> bool:
    sizes = one_dimension_changed(mismatch)
    return sizes is not None and sizes[0] >= 2 and sizes[1] == 2 * sizes[0]


def one_token_more_or_less(mismatch: TensorMismatch) -> bool:
    sizes = one_dimension_changed(mismatch)
    return sizes is not None and min(sizes) >= 2 and abs(sizes[0] - sizes[1]) == 1


def rank_changed(mismatch: TensorMismatch) -> bool:
    """Both tensors hold elements (an empty one may be a shard) and their ranks differ."""
    saved, recomputed = mismatch.saved, mismatch.recomputed
    return (is_full(saved) and is_full(recomputed)
            and len(saved.shape or ()) != len(recomputed.shape or ()))


def precision_cast_not_replayed(mismatch: TensorMismatch) -> bool:
    saved, recomputed = mismatch.saved, mismatch.recomputed
    if saved.shape != recomputed.shape or saved.device != recomputed.device:
        return False
    dtypes = {saved.dtype, recomputed.dtype}
    return len(dtypes) == 2 and "float32" in dtypes and bool(dtypes & REDUCED_FLOATS)


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "partitioned-parameter",
        shows="a tensor saved with its full shape comes back as `[0]` (or the reverse)",
        cause="a parameter was partitioned or resharded between the forward and the replay "
              "(DeepSpeed ZeRO-3 or FSDP): the non-reentrant replay saw the empty local shard "
              "of a frozen weight instead of the gathered parameter, as with PEFT/LoRA on ZeRO-3",
        fix="use `use_reentrant=True` for this setup (trl forces it under PEFT + ZeRO-3), or "
            "keep frozen parameters gathered during backward",
        rules=("CKP601",),
        reference="https://github.com/huggingface/trl/issues/2514",
        tensor=partitioned_parameter),
    Signature(
        "doubled-dimension",
        shows="one dimension of a saved tensor is exactly twice as long in the replay "
              "(a sequence of 171 becomes 342)",
        cause="a cache was appended to inside the checkpointed segment (a key/value cache "
              "passed in with `use_cache=True`, or module state): the replay appended the "
              "same entries again",
        fix="train with `use_cache=False`, or update the cache outside the checkpointed code",
        rules=("CKP402", "CKP401"),
        reference="https://github.com/pytorch/pytorch/issues/155171",
        tensor=doubled_dimension),
    Signature(
        "token-count-changed",
        shows="one dimension of a saved tensor differs by exactly one ([99, 5120] vs "
              "[98, 5120])",
        cause="a data-dependent selection picked a different number of tokens in the replay: "
              "MoE routing or a mask changed because its inputs or state (a load-balancing "
              "bias, an expert counter) changed between the forward and the backward",
        fix="make the routing replay-stable: keep routing state unchanged until backward has "
            "run, or compute the routing outside the checkpointed segment and pass it in",
        rules=("CKP205",),
        reference="https://github.com/pytorch/torchtitan/issues/1117",
        tensor=one_token_more_or_less),
    Signature(
        "precision-cast-not-replayed",
        shows="same shape, but bf16/fp16 saved and fp32 recomputed (or the reverse)",
        cause="a precision cast in effect during the forward was not in effect during the "
              "replay: an autocast or precision context around the forward but not the "
              "backward, a precision switch changed in between, or FSDP mixed precision with "
              "non-reentrant checkpointing on older torch releases",
        fix="run the backward under the same precision settings as the forward (or cast "
            "explicitly inside the segment); under FSDP mixed precision upgrade torch or use "
            "reentrant checkpointing",
        rules=("CKP206",),
        reference="https://pytorch.org/docs/stable/checkpoint.html",
        tensor=precision_cast_not_replayed),
    Signature(
        "other-kernels-replayed",
        shows="saved tensors come back with a different number of dimensions ([8, 8, 16] vs "
              "[2, 4, 8, 16]): the replay ran other operations than the forward",
        cause="the replay chose other kernels than the forward: a kernel or precision context "
              "(`sdpa_kernel`, `torch.backends.*.flags`, `set_default_dtype`, `fp8_autocast`) "
              "was in effect during the forward but had been left before the backward, or the "
              "segment took another code path",
        fix="run the backward inside the same context, or enter the context inside the "
            "checkpointed function so that the replay enters it too",
        rules=("CKP206", "CKP204"),
        reference="https://pytorch.org/docs/stable/checkpoint.html",
        tensor=rank_changed,
        whole_error=True),
    Signature(
        "tensor-count-changed",
        shows="\"A different number of tensors was saved during the original forward and "
              "recomputation\", or (with `early_stop=False`) \"trying to save more tensors "
              "during recomputation than during the original forward pass\"",
        cause="the replay took a different path through the segment: a branch on state that "
              "changed between the forward and the backward (a flag, a counter, a cache), or "
              "on tensor values that changed",
        fix="make the branch condition replay-stable: keep the state it reads unchanged until "
            "backward has run, or decide the branch outside the segment and pass it in",
        rules=("CKP204", "CKP203"),
        reference="https://pytorch.org/docs/stable/checkpoint.html",
        errors=(ErrorKind.COUNT_MISMATCH, ErrorKind.MORE_SAVED)),
    Signature(
        "unpacked-twice",
        shows="\"Unpack is being triggered for a tensor that was already unpacked once\"",
        cause="a checkpointed tensor was unpacked twice: `ctx.saved_tensors` read more than "
              "once in a custom `backward`, or two overlapping backward passes through one "
              "checkpointed region",
        fix="read `ctx.saved_tensors` once per backward; do not backward twice through the "
            "same checkpointed region without recomputing it",
        rules=(),
        reference="https://pytorch.org/docs/stable/checkpoint.html",
        errors=(ErrorKind.UNPACKED_TWICE,)),
    Signature(
        "ddp-variable-ready-twice",
        shows="\"Expected to mark a variable ready only once\" (DistributedDataParallel)",
        cause="a reentrant checkpoint under `DistributedDataParallel(find_unused_parameters="
              "True)`: the reentrant replay runs a second backward through the same "
              "parameters, and DDP's reducer sees them ready twice",
        fix="use `use_reentrant=False`, or `find_unused_parameters=False` / "
            "`static_graph=True` when the graph is the same every step",
        rules=("CKP601",),
        reference="https://github.com/huggingface/peft/issues/313",
        text=re.compile(r"Expected to mark a variable ready only once")),
    Signature(
        "reentrant-frozen-inputs",
        shows="\"None of the inputs have requires_grad=True. Gradients will be None\"",
        cause="a reentrant checkpoint whose tensor inputs are all frozen (embeddings of a "
              "frozen base model, PEFT/LoRA): the segment's parameters get no gradient",
        fix="use `use_reentrant=False`, or make the input require grad "
            "(`model.enable_input_require_grads()` in transformers)",
        rules=("CKP101",),
        reference="https://github.com/huggingface/transformers/issues/21381",
        text=re.compile(r"None of the inputs have requires_grad=True\. Gradients will be None")),
    Signature(
        "reentrant-keyword-arguments",
        shows="\"ValueError: Unexpected keyword arguments: ...\" from a reentrant checkpoint",
        cause="keyword arguments passed through a reentrant checkpoint to the function, which "
              "reentrant mode does not support",
        fix="use `use_reentrant=False`, or bind the keywords with `functools.partial`",
        rules=("CKP103",),
        reference="https://github.com/huggingface/pytorch-image-models/pull/2389",
        text=re.compile(r"ValueError: Unexpected keyword arguments: ")),
    Signature(
        "reentrant-context-fn",
        shows="\"Passing `context_fn` or `debug` is only supported when use_reentrant=False\"",
        cause="`context_fn` or `debug` passed to a reentrant checkpoint",
        fix="use `use_reentrant=False`, or drop the argument",
        rules=("CKP103",),
        reference="https://pytorch.org/docs/stable/checkpoint.html",
        text=re.compile(r"Passing `context_fn` or `debug` is only supported when "
                        r"use_reentrant=False")),
    Signature(
        "reentrant-autograd-grad",
        shows="\"torch.utils.checkpoint is incompatible with .grad() or passing an `inputs` "
              "parameter to .backward()\"",
        cause="`torch.autograd.grad` or `backward(inputs=...)` through a reentrant checkpoint",
        fix="use `use_reentrant=False`",
        rules=("CKP103",),
        reference="https://pytorch.org/docs/stable/checkpoint.html",
        text=re.compile(r"torch\.utils\.checkpoint is incompatible with \.grad\(\)")),
)

TENSOR_SIGNATURES = tuple(signature for signature in SIGNATURES if signature.tensor)
TEXT_SIGNATURES = tuple(signature for signature in SIGNATURES if signature.text)


def signature_of_tensor(mismatch: TensorMismatch) -> Signature | None:
    return next((signature for signature in TENSOR_SIGNATURES
                 if signature.tensor and signature.tensor(mismatch)), None)


def signature_of_error(kind: ErrorKind) -> Signature | None:
    return next((signature for signature in SIGNATURES if kind in signature.errors), None)


def signature_in_text(line: str) -> Signature | None:
    return next((signature for signature in TEXT_SIGNATURES
                 if signature.text and signature.text.search(line)), None)
