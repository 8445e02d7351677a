"""Feature detection of the torch internals (in this process: it imports torch)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from dynhelp import PY, SCRIPTS, env_with_root

torch = pytest.importorskip("torch")


def test_detects_what_this_torch_provides():
    from ckptlint.dynamic.watch.torch_adapter import detect
    features, errors = detect()
    assert features["non-reentrant"] and features["reentrant"] and not errors
    assert features["limits"] == {}


class _NotAHook:
    def __init__(self, frame):
        self.frame = frame


# (name in torch.utils.checkpoint, replacement or None to delete, mode, phrase of the reason)
MISSING = [
    ("_CheckpointFrame", None, "non-reentrant", "`_CheckpointFrame`"),
    ("_checkpoint_hook", _NotAHook, "non-reentrant",
     "a `_checkpoint_hook` built on `saved_tensors_hooks`"),
    ("_recomputation_hook", None, "non-reentrant", "`_recomputation_hook`"),
    ("_StopRecomputationError", None, "non-reentrant", "`_StopRecomputationError`"),
    ("CheckpointFunction", None, "reentrant", "CheckpointFunction"),
]


@pytest.mark.parametrize("name,replacement,mode,phrase", MISSING, ids=[m[0] for m in MISSING])
def test_each_missing_internal_is_named_and_only_its_mode_is_off(monkeypatch, name, replacement,
                                                                  mode, phrase):
    import torch.utils.checkpoint as cp
    from ckptlint.dynamic.watch.torch_adapter import MODES, detect
    if replacement is None:
        monkeypatch.delattr(cp, name)
    else:
        monkeypatch.setattr(cp, name, replacement)
    features, errors = detect()
    assert not features[mode]
    assert errors[mode].startswith(f"torch {torch.__version__} lacks the {mode} checkpoint "
                                   "internals ckptlint hooks: ")
    assert phrase in errors[mode]
    other = next(m for m in MODES if m != mode)
    assert features[other] and other not in errors


def test_internals_are_found_through_the_helpers_checkpoint_calls():
    """Since torch 2.14 `checkpoint` hands its work to `_checkpoint_impl`; what the adapter
    hooks is what the code `checkpoint` runs looks up, however deep."""
    from ckptlint.dynamic.watch.torch_adapter import _frame_builders, _names_run_by_checkpoint
    names = _names_run_by_checkpoint()
    assert {"CheckpointFunction", "_CheckpointFrame", "_checkpoint_hook"} <= names
    builders = _frame_builders()
    assert builders and {name for name, _ in builders} <= names


def test_a_mode_whose_hook_fails_to_install_is_put_back(monkeypatch):
    """Half a mode is worse than none: a hook that fails leaves torch as it was."""
    import torch.utils.checkpoint as cp
    from ckptlint.dynamic.watch import torch_adapter

    def broken():
        raise RuntimeError("no")

    originals = {name: getattr(cp, name) for name in
                 ("_CheckpointFrame", "_checkpoint_hook", "_recomputation_hook")}
    hooks = tuple(torch_adapter.Hook(h.mode, h.needs, broken, h.limit)
                  if h.install is torch_adapter._hook_replay else h
                  for h in torch_adapter.HOOKS)
    monkeypatch.setattr(torch_adapter, "HOOKS", hooks)
    monkeypatch.setattr(torch_adapter, "FEATURES", {"non-reentrant": True, "limits": {}})
    monkeypatch.setattr(torch_adapter, "ERRORS", {})
    torch_adapter._install_mode("non-reentrant")
    assert {name: getattr(cp, name) for name in originals} == originals
    assert not torch_adapter.FEATURES["non-reentrant"]
    assert "failed at broken: RuntimeError('no')" in torch_adapter.ERRORS["non-reentrant"]


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
    assert record.ops[fill][1][0] == 6.0            # the digest's sum
    assert buf.untyped_storage().data_ptr() in record.uninit
    assert filled.untyped_storage().data_ptr() not in record.uninit


@pytest.mark.slow
def test_hooked_checkpoints_compute_what_torch_computes(tmp_path):
    out = tmp_path / "values.json"
    proc = subprocess.run([PY, "adapter_transparent.py"], cwd=SCRIPTS, capture_output=True,
                          text=True, timeout=240, env=env_with_root({"CKPT_TEST_OUT": str(out)}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    values = json.loads(out.read_text())
    assert values["installed"]["non-reentrant"] and values["installed"]["reentrant"]
    import torch.utils.checkpoint as cp
    expected = {"nested", "reentrant"} | (
        {"selective"} if hasattr(cp, "create_selective_checkpoint_contexts") else set())
    assert values["same"] == {name: True for name in expected}


# A site-wide customisation run before the watcher loads (a `sitecustomize` further along
# PYTHONPATH, which ckptlint's chains to): it swaps in a CheckpointFunction that torch runs as
# before but whose forward takes differently named parameters, so the reentrant hook's feature
# test fails the way a torch release that moved the internal would make it fail.
MOVED_INTERNAL = '''
import torch.utils.checkpoint as cp

Original = cp.CheckpointFunction


class CheckpointFunction(Original):
    @staticmethod
    def forward(ctx, fn, preserve, *args):
        return Original.forward(ctx, fn, preserve, *args)


cp.CheckpointFunction = CheckpointFunction
'''


@pytest.mark.slow
def test_a_moved_internal_gives_error_verdicts_never_cleared(tmp_path):
    """The reentrant run of state_read.py corrupts gradients (its CKP201 is confirmed when
    watched); with the reentrant internal unrecognised, the finding is `error` with the
    reason, and the run is not reported as clean."""
    from dynhelp import ROOT, run_dynamic
    (tmp_path / "sitecustomize.py").write_text(MOVED_INTERNAL)
    r = run_dynamic("state_read.py", ("reentrant",),
                    env={"PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])})
    assert r.values["plain"] != r.values["ckpt"], "ground truth: the gradients must be wrong"
    f = r.one("CKP201")
    assert f["verdict"] == "error", f
    assert (f"not watched: torch {torch.__version__} lacks the reentrant checkpoint internals ckptlint "
            "hooks: a CheckpointFunction(ctx, run_function, preserve_rng_state, *args)"
            in f["evidence"]), f
