"""torch's own source as real-world input: its checkpoint calls are found and not mis-flagged."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ckptlint.config import Config
from ckptlint.engine.run import lint

spec = importlib.util.find_spec("torch")
pytestmark = pytest.mark.skipif(spec is None, reason="torch is not installed")
TORCH = Path(spec.origin).parent if spec else Path()


def test_kwargs_dict_calls_in_wrap_py_are_sites_but_not_flagged() -> None:
    # `kwargs["use_reentrant"] = False` ... `checkpoint(..., **kwargs)`: TorchFix flags both.
    path = TORCH / "_higher_order_ops" / "wrap.py"
    result = lint([str(path)], Config(select=("CKP1",)))
    assert len([s for s in result.sites if s.api == "torch.utils.checkpoint.checkpoint"]) == 2
    assert result.findings == []


def test_checkpoint_module_itself() -> None:
    # Inside torch/utils/checkpoint.py, `checkpoint(...)` is torch's own function: a site whose
    # `use_reentrant=use_reentrant` is unknown, so nothing is reported. Its reentrant
    # `CheckpointFunction` is recognised as a checkpoint written as an autograd.Function, and
    # not reported either: it restores the RNG state, captures autocast and accumulates
    # gradients with `torch.autograd.backward` (CKP106 finds nothing it lacks). Its
    # `CheckpointFunction.apply(function, preserve, *args)` call is a reentrant checkpoint site
    # of the function passed, with nothing to report (the function is a parameter).
    path = TORCH / "utils" / "checkpoint.py"
    result = lint([str(path)], Config(select=("CKP1",)))
    assert sorted((s.api, s.mode) for s in result.sites) == [
        ("CheckpointFunction.apply", "reentrant"), ("hand-rolled", "reentrant"),
        ("torch.utils.checkpoint.checkpoint", "unknown")]
    assert result.findings == []
