"""Feature detection of the torch internals (in this process: it imports torch)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_detects_what_this_torch_provides():
    from ckptlint.dynamic.watch.torch_adapter import detect
    features, errors = detect()
    assert features["non-reentrant"] and features["reentrant"] and not errors


def test_missing_internals_are_named(monkeypatch):
    import torch.utils.checkpoint as cp
    from ckptlint.dynamic.watch.torch_adapter import detect
    monkeypatch.delattr(cp, "_recomputation_hook")
    monkeypatch.setattr(cp, "CheckpointFunction", None)
    features, errors = detect()
    assert not features["non-reentrant"] and "_recomputation_hook" in errors["non-reentrant"]
    assert not features["reentrant"] and "CheckpointFunction" in errors["reentrant"]


def test_targets_of_wrappers_resolve_to_user_code():
    import functools
    from ckptlint.dynamic.watch.torch_adapter import targets_of

    class Block(torch.nn.Module):
        def forward(self, x):
            return x

    block = Block()
    expected = [(Block.forward.__code__.co_filename, Block.forward.__code__.co_firstlineno,
                 "test_targets_of_wrappers_resolve_to_user_code.<locals>.Block.forward")]
    import os
    expected = [(os.path.realpath(expected[0][0]),) + expected[0][1:]]
    assert targets_of(block) == expected
    assert targets_of(functools.partial(block.__call__)) == expected      # super().__call__ style
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    assert targets_of(checkpoint_wrapper(Block())) == expected


def test_uninitialised_empty_outputs_are_not_digested():
    from ckptlint.dynamic.watch.recorder import PassRecord, _OpMode

    record = PassRecord("forward")
    with _OpMode(record):
        buf = torch.empty(4)
        torch.tanh(buf)                 # reads garbage: its own output is digested anyway
        filled = torch.empty(3).fill_(2.0)
        torch.sin(filled)
    names = [op[0] for op in record.ops]
    assert names[:2] == ["empty", "tanh"] and record.ops[0][1] is None
    fill = names.index("fill_")
    assert record.ops[fill][1] == [6.0, 6.0]
    assert buf.untyped_storage().data_ptr() in record.uninit
    assert filled.untyped_storage().data_ptr() not in record.uninit
