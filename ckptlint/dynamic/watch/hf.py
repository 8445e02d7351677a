"""Which `gradient_checkpointing_enable()` call turned checkpointing on for a model (child side).

A CKP104 finding is about one enable call. Its checkpoint calls are made later, from
transformers' layers, so the layers' calls are joined to the enable call that ran for their
model: once `transformers.modeling_utils` is imported, `PreTrainedModel`'s enable methods
(`gradient_checkpointing_enable`, and `activation_checkpointing_enable` where it exists) are
wrapped to note, after the original has run, the call site of the outermost enable call
and the modules it covered. Nothing else about the call changes.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from typing import Any, Callable

from ckptlint.dynamic.after_import import AfterImport

ENABLE_METHODS = ("gradient_checkpointing_enable", "activation_checkpointing_enable")
_MODULE = "transformers.modeling_utils"

_enabled_at: "weakref.WeakKeyDictionary[Any, list]" = weakref.WeakKeyDictionary()
_local = threading.local()
_emit: Callable[[dict[str, Any]], None] | None = None


def enabled_at(module) -> list | None:
    """The site [file, row, column] of the enable call that covered this module, if any."""
    try:
        return _enabled_at.get(module)
    except TypeError:
        return None


def install(emit: Callable[[dict[str, Any]], None]) -> None:
    """Wrap the enable methods now, or when transformers' modeling module is imported."""
    global _emit
    _emit = emit
    module = sys.modules.get(_MODULE)
    if module is not None:
        _patch(module)
    elif not any(isinstance(f, AfterImport) and f.name == _MODULE for f in sys.meta_path):
        sys.meta_path.insert(0, AfterImport(_MODULE, _patch))


def _patch(module) -> None:
    model_class = getattr(module, "PreTrainedModel", None)
    for name in ENABLE_METHODS:
        original = getattr(model_class, name, None)
        if callable(original) and not getattr(original, "_ckptlint", False):
            setattr(model_class, name, _wrapped(original, name))


def _wrapped(original, api: str):
    @functools.wraps(original)
    def enable(self, *args, **kwargs):
        depth = getattr(_local, "depth", 0)
        _local.depth = depth + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _local.depth = depth
            if depth == 0:
                _note(self, api, sys._getframe(1))

    enable._ckptlint = True
    return enable


def _note(model, api: str, caller) -> None:
    try:
        from ckptlint.dynamic.watch.torch_adapter import _call_site, is_library_file
        site = _call_site(caller)
        for sub in model.modules():
            _enabled_at[sub] = list(site) if site else None
        if _emit is not None:
            _emit({"ev": "enable", "api": api, "site": site,
                   "from_library": is_library_file(caller.f_code.co_filename),
                   "model": type(model).__name__})
    except Exception:
        pass
