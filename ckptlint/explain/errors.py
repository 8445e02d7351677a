"""Torch's checkpoint error texts, read field by field (torch/utils/checkpoint.py, torch 2.13).

A metadata error lists each differing saved tensor as three lines:

    tensor at position 3:
    saved metadata: {'shape': torch.Size([4, 6]), 'dtype': torch.float32, 'device': ...}
    recomputed metadata: {'shape': torch.Size([4, 12]), 'dtype': torch.float32, 'device': ...}

(the device as `device(type='cpu')` or `device(type='cuda', index=0)`).

The metadata is the repr of a dict; it is read with patterns per field, never evaluated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ckptlint.enums import TextEnum


class ErrorKind(TextEnum):
    METADATA_MISMATCH = "metadata-mismatch"
    COUNT_MISMATCH = "count-mismatch"
    MORE_SAVED = "more-saved-on-replay"
    UNPACKED_TWICE = "unpacked-twice"
    OTHER_CHECKPOINT_ERROR = "checkpoint-error"  # a CheckpointError of a kind not known here
    MESSAGE = "message"  # not a CheckpointError: a text a signature names (DDP, warnings)


# The start of each CheckpointError message torch raises, after "torch.utils.checkpoint: ".
KIND_TEXTS = (
    (ErrorKind.METADATA_MISMATCH,
     "Recomputed values for the following tensors have different metadata"),
    (ErrorKind.COUNT_MISMATCH, "A different number of tensors was saved during the original "
                               "forward and recomputation"),
    (ErrorKind.MORE_SAVED, "trying to save more tensors during recomputation than during the "
                           "original forward pass"),
    (ErrorKind.UNPACKED_TWICE, "Unpack is being triggered for a tensor that was already "
                               "unpacked once"),
)

# With `debug=True` torch raises a second CheckpointError, chained to the first, whose message
# starts on the next line with this text: the first error is the one to explain.
DEBUG_DUMP_TEXT = "An error happened while unpacking tensors; dumping logs"

_SHAPE = re.compile(r"'shape':\s*torch\.Size\(\[([^\]]*)\]\)")
_DTYPE = re.compile(r"'dtype':\s*torch\.(\w+)")
_DEVICE = re.compile(r"'device':\s*device\(type='([^']*)'(?:,\s*index=(\d+))?\)")


def kind_of(message: str) -> ErrorKind:
    return next((kind for kind, text in KIND_TEXTS if text in message),
                ErrorKind.OTHER_CHECKPOINT_ERROR)


@dataclass(frozen=True)
class TensorMeta:
    """One side of a tensor line; a field torch printed in a form not read here is None."""

    shape: tuple[int, ...] | None
    dtype: str | None
    device: str | None

    def to_json(self) -> dict:
        return {"shape": list(self.shape) if self.shape is not None else None,
                "dtype": self.dtype, "device": self.device}


def parse_metadata(text: str) -> TensorMeta:
    shape = _SHAPE.search(text)
    dtype = _DTYPE.search(text)
    device = _DEVICE.search(text)
    sizes = None
    if shape:
        parts = [part.strip() for part in shape.group(1).split(",") if part.strip()]
        sizes = tuple(int(part) for part in parts) if all(p.isdigit() for p in parts) else None
    place = None
    if device:
        place = device.group(1) + (f":{device.group(2)}" if device.group(2) else "")
    return TensorMeta(sizes, dtype.group(1) if dtype else None, place)


@dataclass(frozen=True)
class TensorMismatch:
    position: int
    saved: TensorMeta
    recomputed: TensorMeta

    def differs(self) -> list[str]:
        return [field for field in ("shape", "dtype", "device")
                if getattr(self.saved, field) != getattr(self.recomputed, field)]
