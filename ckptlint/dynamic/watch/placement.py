"""Where a checkpoint call ran: its rank, and the checkpointed module's name in its model
(`model.layers.3`) with its class (`LlamaDecoderLayer`), for evidence a person can act on."""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any

import torch

# module -> its dotted name under the outermost module seen calling it ("" for a root).
_names: "weakref.WeakKeyDictionary[torch.nn.Module, str]" = weakref.WeakKeyDictionary()


def rank() -> list[int] | None:
    """[rank, world size] under torch.distributed (or a launcher's RANK/WORLD_SIZE), else None."""
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return [dist.get_rank(), dist.get_world_size()]
    except Exception:
        pass
    try:
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            return [int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])]
    except ValueError:
        pass
    return None


def module_name(module: torch.nn.Module | None) -> str | None:
    """The module's dotted name in the outermost module on the calling stack (found once per
    module: every module of that root is named in the same walk)."""
    if module is None:
        return None
    try:
        name = _names.get(module)
        if name is None:
            root = _outermost_caller(module)
            for sub_name, sub in root.named_modules(remove_duplicate=False):
                _names.setdefault(sub, sub_name)
            name = _names.setdefault(module, "")
        return name or None
    except Exception:
        return None


def _outermost_caller(module: torch.nn.Module) -> torch.nn.Module:
    """The outermost module whose method is running on this thread's stack and which holds
    `module` (its model, or a DDP wrapper around it); `module` itself if none does."""
    root: Any = module
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_argcount and code.co_varnames[0] == "self":
            owner = frame.f_locals.get("self")
            if isinstance(owner, torch.nn.Module) and owner is not root \
                    and any(sub is root for sub in owner.modules()):
                root = owner
        frame = frame.f_back
    return root
