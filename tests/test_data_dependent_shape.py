"""CKP205: what the rule reports, the harm under real torch on CPU (the replay routes tokens
differently and torch raises a metadata CheckpointError), none when the values replay the
same, and `ckptlint dynamic` confirming or clearing the finding on a real run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.cli_helpers import REPO, run_cli

FIXTURE = Path(__file__).parent / "fixtures" / "ckp205_data_dependent_shape.py"


@pytest.fixture(scope="module")
def fixture():
    spec = importlib.util.spec_from_file_location("ckp205_fixture", FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_data_names_the_op_and_its_expression():
    result = run_cli("--no-cache", "--select", "CKP205", "--format", "json", str(FIXTURE),
                     cwd=REPO)
    found = {f["location"]["row"]: f["data"] for f in json.loads(result.stdout)}
    assert found[26] == {"expression": "torch.where(mask[expert[0]])", "op": "where"}
    assert found[35] == {"expression": "x[keep]", "op": "boolean-mask"}
    assert found[49]["op"] == "split-sizes" and found[45]["op"] == "bincount"


def routed(fixture, change_routing: bool):
    torch.manual_seed(0)
    moe = fixture.MoE(8, 4, 2)
    x = torch.randn(64, 8, requires_grad=True)
    out = torch.utils.checkpoint.checkpoint(moe, x, use_reentrant=False)
    if change_routing:  # state the router reads changes before backward (a bias update)
        with torch.no_grad():
            moe.gate.weight.mul_(-1)
    out.sum().backward()
    return x.grad


def test_routing_that_changes_before_the_replay_raises_a_metadata_error(fixture):
    with pytest.raises(torch.utils.checkpoint.CheckpointError, match="different metadata"):
        routed(fixture, change_routing=True)


def test_routing_that_replays_the_same_trains_as_without_checkpoint(fixture):
    torch.manual_seed(0)
    moe = fixture.MoE(8, 4, 2)
    x = torch.randn(64, 8, requires_grad=True)
    moe(x).sum().backward()
    assert torch.allclose(routed(fixture, change_routing=False), x.grad)


SCRIPT = """\
import sys
import torch
from torch.utils.checkpoint import checkpoint

THRESHOLD = [0.0]


def select(x):
    kept = x[x > THRESHOLD[0]]
    return kept.sin().sum() * x


x = torch.randn(64, requires_grad=True)
out = checkpoint(select, x, use_reentrant=False)
if sys.argv[1:] == ["change"]:
    THRESHOLD[0] = 0.5
try:
    out.sum().backward()
except torch.utils.checkpoint.CheckpointError:
    print("CheckpointError", file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.parametrize("change", [True, False])
def test_dynamic_mode_confirms_a_shape_change_and_clears_a_stable_one(tmp_path, change):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    result = subprocess.run(
        [sys.executable, "-m", "ckptlint", "dynamic", "--format", "json", str(script), "--",
         sys.executable, str(script), *(["change"] if change else [])],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    finding = next(f for f in json.loads(result.stdout) if f["code"] == "CKP205")
    assert finding["location"]["row"] == 9
    if change:
        assert "CheckpointError" in result.stderr.splitlines()
        assert finding["verdict"] == "confirmed", finding
        assert "the first difference came from line 9" in finding["evidence"], finding
    else:
        assert "CheckpointError" not in result.stderr.splitlines()
        assert finding["verdict"] == "cleared", (finding["evidence"], result.stderr[-2000:])
