"""The one tensor digest of dynamic mode and profile, taken out of sight of every dispatch mode.

A digest is `[sum, check]`:

- `sum`: the sum of the values (accumulated in float32, float64 for 8-byte types), for
  evidence a reader can follow ("sum 41.2 vs 37.9");
- `check`: an integer over the values' bit patterns, read as 32-bit words (16- and 8-bit
  types one value a word) in the tensor's logical order: each word times a fixed odd
  pseudo-random weight of its position (wrapping in 32 bits), summed exactly.

Two digests are the same value when their checks are equal (`compare.same_digest`). The check
changes with any single changed bit (a sign flip or a last-bit difference, which a float sum can
miss or show as equal), with values that trade places (a permutation, e.g. from `randperm`,
keeps every sum), and does not depend on memory layout (a strided view and its contiguous copy
agree, where float sums can differ in the last bit).

Dynamic mode digests every value of every op output and saved tensor. Profile passes `limit`:
a tensor of more values is read at a prime stride (at most `limit` values, so the cost per
saved tensor stays bounded; a change that touches only unread values goes unseen there).
Used by the recorder (op outputs, saved tensors), the state watcher (tensor state a finding
names) and the profile observer (saved activations).
"""

from __future__ import annotations

import contextlib
import struct
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

WEIGHTS = 1 << 16       # words weighted by one vector; longer reads are folded in rows
_BLOCK_ROWS = 16        # rows folded at a time (1M words: bounded temporary memory)


def _tensor_ok(t) -> bool:
    return (type(t) is torch.Tensor or isinstance(t, torch.nn.Parameter)) and \
        t.layout == torch.strided and t.device.type != "meta" and not t.is_quantized


_weights: dict[tuple[torch.device, int], torch.Tensor] = {}


def _weights_for(device: torch.device, level: int) -> torch.Tensor:
    """WEIGHTS odd numbers, the same in every process (own generator: the program's random
    streams are not touched): int32 for the words, int64 for each folding level above."""
    key = (device, level)
    found = _weights.get(key)
    if found is None:
        g = torch.Generator().manual_seed(0x636B70 + level)
        found = torch.randint(-(1 << 62), 1 << 62, (WEIGHTS,), generator=g,
                              dtype=torch.int64, device="cpu") | 1
        if level == 0:
            found = found.to(torch.int32)
        found = _weights[key] = found.to(device)
    return found


def _check(words: torch.Tensor, level: int = 0) -> torch.Tensor:
    """The check of int32 words (level 0) or of int64 row results (levels above), as a 0-dim
    int64 tensor. A word times its odd weight wraps in 32 bits (a one-to-one map of the word,
    so any changed word changes its term) and the terms are summed exactly in 64 bits; int32
    products keep it as fast as a plain sum. Beyond WEIGHTS words the words are folded in rows
    of WEIGHTS and the row results checked again with the next level's weights (so that no two
    positions share a weight)."""
    weights = _weights_for(words.device, level)
    n = words.numel()
    if n <= WEIGHTS:
        return (words * weights[:n]).sum(dtype=torch.int64)
    rows = n // WEIGHTS
    grid = words[:rows * WEIGHTS].view(rows, WEIGHTS)
    folded = [(grid[r:r + _BLOCK_ROWS] * weights).sum(1, dtype=torch.int64)
              for r in range(0, rows, _BLOCK_ROWS)]
    tail = words[rows * WEIGHTS:]
    if tail.numel():
        folded.append(_check(tail, level).reshape(1))
    return _check(torch.cat(folded), level + 1)


_strides: dict[tuple[int, int], int] = {}


def _stride(n: int, limit: int) -> int:
    """The smallest prime p with n / p <= limit (a prime, so that the values read do not keep
    hitting the same columns of a matrix whose width is a multiple of the stride)."""
    key = (n, limit)
    found = _strides.get(key)
    if found is None:
        p = max(1, -(-n // limit))
        while p > 1 and any(p % k == 0 for k in range(2, int(p ** 0.5) + 1)):
            p += 1
        if len(_strides) > 4096:
            _strides.clear()
        found = _strides[key] = p
    return found


def _values(t: torch.Tensor, limit: int | None) -> torch.Tensor:
    """The values to digest, flat and contiguous, in logical order."""
    d = t.detach()
    if d.is_complex():
        d = torch.view_as_real(d)
    if d.dtype == torch.bool:
        d = d.view(torch.uint8)
    n = d.numel()
    if limit is None or n <= limit:
        return d.reshape(-1).contiguous()
    step = _stride(n, limit)
    if d.is_contiguous():
        return d.view(-1)[::step].contiguous()
    index = torch.arange(0, n, step, device=d.device)
    return torch.take(d, index)


def _digest_parts(t: torch.Tensor, limit: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum, check) as 0-dim tensors on the tensor's device."""
    values = _values(t, limit)
    size = values.element_size()
    if values.is_floating_point():
        total = values.sum(dtype=torch.float64 if size == 8 else torch.float32)
    else:
        total = values.sum()
    if size >= 4:
        words = values.view(torch.int32)
    else:
        words = values.view(torch.int16 if size == 2 else torch.uint8).to(torch.int32)
    return total, _check(words)


def short(value: list[Any]) -> str:
    """How a digest reads in evidence: its sum, and its check in 8 hex digits (sums of tensors
    that differ can agree to every printed digit)."""
    return f"sum {value[0]:.6g} #{value[1] & 0xFFFFFFFF:08x}"


def resolve(pending) -> list[Any] | None:
    """The digest a `digest(..., lazy=True)` call returned, as [sum, check] (waits for it)."""
    if pending is None or isinstance(pending, list):
        return pending
    try:
        bits, check = pending.tolist()
    except Exception:
        return None
    return [struct.unpack("<d", struct.pack("<q", bits))[0], check]


_param_cache: dict[tuple, tuple[Any, list[Any]]] = {}


def _param_key(t, limit):
    """A cache key for parameters and views of them (weights are saved by every call).

    Keyed by the leaf object itself (held weakly and checked), its version counter (every
    in-place update bumps it) and the view's geometry. Writes through `.data` do not bump the
    version; such a change is missed here."""
    base = t._base if t._base is not None else t
    if not (base.is_leaf and base.requires_grad):
        return None, None
    return base, (id(base), base._version, t.storage_offset(), tuple(t.shape), tuple(t.stride()),
                  t.dtype, limit)


def digest(t, limit: int | None = None, lazy: bool = False):
    """[sum, check] of a tensor's values (see the module docstring), computed without being
    seen by any dispatch mode (nor autograd: it reads a detached tensor); None for what cannot
    be read (not a plain strided tensor).
    `limit`: read at most that many values. `lazy`: return a device tensor for `resolve`
    instead of waiting for the device (profile on CUDA)."""
    if not isinstance(t, torch.Tensor) or not _tensor_ok(t):
        return None
    busy.on = True
    try:
        base, key = _param_key(t, limit)
        if key is not None:
            hit = _param_cache.get(key)
            if hit is not None and hit[0]() is base:
                return hit[1]
        modes = _disable_current_modes() if torch._C._len_torch_dispatch_stack() else _NULL
        with modes:
            total, check = _digest_parts(t, limit)
            if lazy and key is None:   # one tensor, read in one transfer when it is needed
                return torch.stack([total.to(torch.float64).view(torch.int64), check])
            value = [float(total), int(check)]
        if key is not None:
            if len(_param_cache) > 4096:
                _param_cache.clear()
            _param_cache[key] = (weakref.ref(base), value)
        return value
    except Exception:
        return None
    finally:
        busy.on = False
