"""Where an op of a watched pass comes from, read off the Python stack (child side).

Two questions, both answered by walking frames from the op up to the pass's boundary (the
frames of `torch/utils/checkpoint.py` that run the forward or the replay):

- `source_lines`: the frames of the checkpointed code that issued it (the user's lines, and
  library lines outside torch such as a transformers layer), innermost first. Taken once per
  replay, at its first difference from the forward, so that a verdict can say which line the
  replay diverged at.
- `in_framework_hook`: whether torch.distributed issued it from a hook on a module call rather
  than from a forward (FSDP2 unshards parameters before a forward and keeps books after it;
  in the replay it does neither): such ops are the framework's, not the segment's.
"""

from __future__ import annotations

import os
import types

import torch
import torch.distributed
import torch.nn.modules.module as _module
import torch.utils.checkpoint as _cp

from ckptlint.dynamic.watch.torch_adapter import _OWN_DIR, _TORCH_DIR, realpath

MAX_FRAMES = 12
# Code objects carry their module's `__file__` as `co_filename`: compared without realpath.
_CHECKPOINT_FILE = _cp.__file__
_MODULE_FILE = _module.__file__
_MODULE_CALLS = {"_call_impl", "inner", "_wrapped_call_impl"}
_DISTRIBUTED_DIR = os.path.dirname(torch.distributed.__file__) + os.sep


def _is_boundary(code: types.CodeType) -> bool:
    return code.co_filename == _CHECKPOINT_FILE


def source_lines(frame: types.FrameType | None) -> list[list]:
    """[[file, row], ...] of the frames outside torch and ckptlint between `frame` and the
    pass's boundary, innermost first (at most MAX_FRAMES)."""
    out: list[list] = []
    while frame is not None and len(out) < MAX_FRAMES:
        code = frame.f_code
        if _is_boundary(code):
            break
        path = realpath(code.co_filename)
        if not path.startswith((_TORCH_DIR, _OWN_DIR)) and not code.co_filename.startswith("<"):
            out.append([path, frame.f_lineno])
        frame = frame.f_back
    return out


def traceback_lines(error: BaseException | None) -> list[list]:
    """`source_lines` of where an exception raised in a pass came from (its traceback)."""
    tb = getattr(error, "__traceback__", None)
    frames: list[tuple[types.CodeType, int]] = []
    while tb is not None:
        if _is_boundary(tb.tb_frame.f_code):
            frames = []                       # only what ran inside the pass
        else:
            frames.append((tb.tb_frame.f_code, tb.tb_lineno))
        tb = tb.tb_next
    out = []
    for code, row in reversed(frames):
        path = realpath(code.co_filename)
        if not path.startswith((_TORCH_DIR, _OWN_DIR)) and not code.co_filename.startswith("<"):
            out.append([path, row])
    return out[:MAX_FRAMES]


def framework_hooks_possible() -> bool:
    """Framework hooks only matter where torch.distributed runs (FSDP2 needs a process group,
    world size 1 included); elsewhere the per-op check is skipped."""
    try:
        return torch.distributed.is_available() and torch.distributed.is_initialized()
    except Exception:
        return False


def in_framework_hook(frame: types.FrameType | None) -> bool:
    """Whether the innermost module call on the stack ran a torch.distributed hook (not a
    `forward`, and through torch.distributed code) when it issued this op."""
    through_distributed = False
    while frame is not None:
        code = frame.f_code
        if _is_boundary(code):
            return False
        if code.co_filename.startswith(_DISTRIBUTED_DIR):
            through_distributed = True
        parent = frame.f_back
        if parent is not None and parent.f_code.co_filename == _MODULE_FILE \
                and parent.f_code.co_name in _MODULE_CALLS and code.co_filename != _MODULE_FILE:
            # `frame` is what a module call ran: the module's forward, or one of its hooks.
            return through_distributed and code.co_name != "forward"
        frame = parent
    return False
