"""Walking the tensors inside call arguments and outputs, and keying their storages;
shared by the profile observer and the per-operator cost recorder."""

from __future__ import annotations

import torch


def tensors_in(value, depth: int = 0):
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 4 and isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item, depth + 1)
    elif depth < 4 and isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item, depth + 1)


def storage_of(t: torch.Tensor):
    """((device, data_ptr), nbytes) of a tensor's untyped storage, or None."""
    try:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        nbytes = storage.nbytes()
    except Exception:
        return None
    if not nbytes:
        return None
    return (str(t.device), ptr), nbytes
