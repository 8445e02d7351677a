"""CKP106: the harm each lack does, shown with real torch on CPU, and what the rule reports.

The classes are the fixture's own (tests/fixtures/ckp106_hand_rolled_checkpoint.py), imported
and run: what the linter reports of them statically is what goes wrong when they run.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.cli_helpers import REPO, run_cli

FIXTURE = Path(__file__).parent / "fixtures" / "ckp106_hand_rolled_checkpoint.py"


@pytest.fixture(scope="module")
def classes():
    spec = importlib.util.spec_from_file_location("ckp106_fixture", FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reported(path: Path = FIXTURE, select: str = "CKP106") -> dict[str, list[str]]:
    result = run_cli("--no-cache", "--select", select, "--format", "json", str(path), cwd=REPO)
    return {finding["data"]["class"]: finding["data"]["lacks"]
            for finding in json.loads(result.stdout)}


def test_the_fixture_classes_lack_what_the_findings_say():
    assert reported() == {
        "CheckpointFunction": ["rng", "autocast", "unpassed-inputs"],
        "AutocastCheckpointFunction": ["rng", "unpassed-inputs"],
        "TiledCompute": ["rng", "autocast"],
        "closure_checkpoint.Recompute": ["autocast"],
    }


def test_reentrant_rule_is_not_repeated_at_the_class():
    assert reported(select="CKP101") == {}


def test_an_apply_call_is_told_to_use_torch_checkpoint_not_a_keyword_it_lacks():
    """`Cls.apply(...)` has no `use_reentrant` to switch: CKP103 advises torch's own
    checkpoint instead of the class; a torch checkpoint call keeps the keyword advice."""
    apply_sites = Path(__file__).parent / "fixtures" / "ckp106_apply_sites.py"
    result = run_cli("--no-cache", "--select", "CKP103", "--format", "json", str(apply_sites),
                     str(Path(__file__).parent / "fixtures" / "ckp103_reentrant_incompatible.py"),
                     cwd=REPO)
    findings = json.loads(result.stdout)
    at_apply = [f for f in findings if f["filename"].endswith("ckp106_apply_sites.py")]
    at_torch = [f for f in findings if not f["filename"].endswith("ckp106_apply_sites.py")]
    assert at_apply and at_torch
    for finding in at_apply:
        assert finding["data"]["instead"] == "torch_checkpoint"
        assert "`torch.utils.checkpoint.checkpoint(..., use_reentrant=False)` instead of " \
               "the hand-written `SafeCheckpoint.apply`" in finding["message"]
        assert "use `use_reentrant=False`" not in finding["message"]
    assert {f["data"]["instead"] for f in at_torch} == {"use_reentrant"}
    assert all(f["message"].endswith("use `use_reentrant=False`") for f in at_torch)


def grads_of(run, *leaves: torch.Tensor) -> list[torch.Tensor]:
    torch.manual_seed(0)
    run().sum().backward()
    grads = [leaf.grad.clone() for leaf in leaves]
    for leaf in leaves:
        leaf.grad = None
    return grads


def test_without_rng_restore_dropout_gives_wrong_gradients(classes):
    x = torch.randn(64, 32, dtype=torch.float64, requires_grad=True)
    w = torch.randn(32, 32, dtype=torch.float64, requires_grad=True)

    def block(h, weight):
        return F.dropout(h @ weight, p=0.5, training=True)

    plain = grads_of(lambda: block(x, w), x, w)
    hand_rolled = grads_of(lambda: classes.CheckpointFunction.apply(block, 2, x, w), x, w)
    careful = grads_of(lambda: classes.CarefulCheckpoint.apply(block, x, w), x, w)
    assert not torch.allclose(plain[0], hand_rolled[0])
    assert all(torch.allclose(a, b) for a, b in zip(plain, careful))


def test_without_gradients_for_unpassed_inputs_a_used_parameter_gets_none(classes):
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8, requires_grad=True)
    classes.CheckpointFunction.apply(linear, 1, x).sum().backward()
    assert x.grad is not None and linear.weight.grad is None
    x.grad = None
    classes.CarefulCheckpoint.apply(linear, x).sum().backward()
    assert x.grad is not None and linear.weight.grad is not None


def test_without_autocast_capture_the_rerun_computes_at_another_precision(classes):
    torch.manual_seed(0)
    x = torch.randn(16, 64, requires_grad=True)
    w = torch.randn(64, 64, requires_grad=True)

    def mlp(weight, h):
        return torch.tanh(h @ weight) @ weight

    def under_autocast(run):
        def go():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return run()
        return go

    def block(h, weight):
        return mlp(weight, h)

    plain = grads_of(under_autocast(lambda: mlp(w, x)), x)
    tiled = grads_of(under_autocast(lambda: classes.TiledCompute.apply(mlp, w, x, 1)), x)
    careful = grads_of(under_autocast(lambda: classes.CarefulCheckpoint.apply(block, x, w)), x)
    decorated = grads_of(under_autocast(
        lambda: classes.DecoratedCheckpoint.apply(block, x, w)), x)
    assert torch.equal(plain[0], careful[0])
    assert torch.equal(plain[0], decorated[0])
    assert not torch.equal(plain[0], tiled[0])
