"""CKP206: the harm a context left before the backward does, shown with real torch on CPU, and
what the rule reports.

The functions are the fixture's own (tests/fixtures/ckp206_context_not_replayed.py), imported
and run: the reported ones fail or give wrong gradients, their look-alikes do not.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import CheckpointError

from tests.cli_helpers import REPO, run_cli

FIXTURE = Path(__file__).parent / "fixtures" / "ckp206_context_not_replayed.py"


@pytest.fixture(scope="module")
def fixture():
    spec = importlib.util.spec_from_file_location("ckp206_fixture", FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reported() -> dict[int, dict]:
    result = run_cli("--no-cache", "--select", "CKP206", "--format", "json", str(FIXTURE),
                     cwd=REPO)
    return {finding["location"]["row"]: finding["data"] for finding in json.loads(result.stdout)}


def row_of(text: str) -> int:
    lines = FIXTURE.read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def test_each_finding_names_the_context_and_the_backward():
    found = reported()
    sdpa = found[row_of("out = checkpoint(attention, q, use_reentrant=False)  # error")]
    assert sdpa["context"] == "torch.nn.attention.sdpa_kernel"
    assert sdpa["backward"]["row"] == row_of("    loss.backward()")
    assert sdpa["call"] == "checkpoint" and sdpa["mode"] == "non-reentrant"
    reaching = found[row_of("out = checkpointed_attention(q)")]
    assert reaching["call"] == "checkpointed_attention"
    returned = found[row_of("return checkpoint(attention, q, use_reentrant=False)  # error")]
    assert returned["backward"]["row"] == row_of("def train_step") + 2
    scaled = found[row_of("y = checkpoint(scaled, x, use_reentrant=reentrant)  # error")]
    assert scaled["context"].endswith(".scale_by") and scaled["state"] == "SCALE"
    assert found[row_of("y = checkpoint(with_bias")]["context"] == "torch.set_default_dtype"


def test_sdpa_kernel_left_before_the_backward_breaks_the_replay(fixture):
    q = torch.randn(2, 4, 8, 16, requires_grad=True)
    with pytest.raises(CheckpointError, match="different metadata"):
        fixture.sdpa_forward_backward_outside(q)
    q.grad = None
    fixture.backward_inside_the_block(q)
    with_checkpoint = q.grad.clone()
    q.grad = None
    with sdpa_kernel(SDPBackend.MATH):
        F.scaled_dot_product_attention(q, q, q).sum().backward()
    assert torch.allclose(with_checkpoint, q.grad)


def test_default_dtype_pair_breaks_the_replay(fixture):
    x = torch.randn(4, 5, requires_grad=True)
    with pytest.raises(CheckpointError, match="different metadata"):
        fixture.default_dtype_pair(x)
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_project_context_setting_a_global_gives_wrong_gradients(fixture, reentrant):
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    fixture.project_context_setting_a_global(x, reentrant)
    outside = x.grad.clone()
    x.grad = None
    fixture.global_backward_inside_the_block(x, reentrant)
    inside = x.grad.clone()
    x.grad = None
    with fixture.scale_by(2.0):
        fixture.scaled(x).sum().backward()
    assert torch.allclose(inside, x.grad)
    assert not torch.allclose(outside, x.grad)
