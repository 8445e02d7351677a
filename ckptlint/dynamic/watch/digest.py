"""The value checksum of a tensor, taken out of sight of every dispatch mode.

Shared by the recorder (op outputs, saved tensors) and the state watcher (tensor state a
finding names).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any

import torch

try:
    from torch.utils._python_dispatch import _disable_current_modes
except ImportError:  # pragma: no cover - older torch
    _disable_current_modes = contextlib.nullcontext

busy = threading.local()  # `.on` while a digest runs: the dispatch modes ignore its ops
_NULL = contextlib.nullcontext()


def _tensor_ok(t) -> bool:
    return (type(t) is torch.Tensor or isinstance(t, torch.nn.Parameter)) and \
        t.layout == torch.strided and t.device.type != "meta" and not t.is_quantized


_param_cache: dict[tuple, tuple[Any, list[float]]] = {}


def _param_key(t):
    """A cache key for parameters and views of them (weights are saved by every call).

    Keyed by the leaf object itself (held weakly and checked), its version counter (every
    in-place update bumps it) and the view's geometry. Writes through `.data` do not bump the
    version; such a change is missed here."""
    base = t._base if t._base is not None else t
    if not (base.is_leaf and base.requires_grad):
        return None, None
    return base, (id(base), base._version, t.storage_offset(), tuple(t.shape), tuple(t.stride()),
                  t.dtype)


def digest(t) -> list[float] | None:
    """[sum, abs_sum] in float64, computed without being seen by any dispatch mode."""
    if not isinstance(t, torch.Tensor) or not _tensor_ok(t):
        return None
    busy.on = True
    try:
        base, key = _param_key(t)
        if key is not None:
            hit = _param_cache.get(key)
            if hit is not None and hit[0]() is base:
                return hit[1]
        modes = _disable_current_modes() if torch._C._len_torch_dispatch_stack() else _NULL
        with modes, torch.no_grad():
            d = t.detach()
            if d.is_complex():
                d = torch.view_as_real(d)
            if d.dtype == torch.bool:
                d = d.to(torch.uint8)
            value = torch.stack([d.sum(dtype=torch.float64),
                                 d.abs().sum(dtype=torch.float64)]).tolist()
        if key is not None:
            if len(_param_cache) > 4096:
                _param_cache.clear()
            _param_cache[key] = (weakref.ref(base), value)
        return value
    except Exception:
        return None
    finally:
        busy.on = False
