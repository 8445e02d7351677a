"""CKP402: what the rule reports, the harm of the fixture's bad cases under real torch on CPU
(a KV cache extended twice, a list appended twice, an input tensor scaled twice), none for its
look-alikes, and `ckptlint dynamic` confirming or clearing the finding on a real run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import DynamicCache

from tests.cli_helpers import REPO, run_cli

FIXTURE = Path(__file__).parent / "fixtures" / "ckp402_argument_mutation.py"


@pytest.fixture(scope="module")
def fixture():
    spec = importlib.util.spec_from_file_location("ckp402_fixture", FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reported(path: Path = FIXTURE) -> dict[int, dict]:
    result = run_cli("--no-cache", "--select", "CKP402", "--format", "json", str(path), cwd=REPO)
    return {f["location"]["row"]: f["data"] for f in json.loads(result.stdout)}


def test_data_names_the_parameter_and_where_it_came_from():
    found = reported()
    cache = found[42]
    assert (cache["state"], cache["argument"], cache["forwarded"], cache["method"]) == \
        ("cache", "cache", True, "update")
    assert cache["owner"] == "attend" and cache["write"] == "method"
    assert cache["changes"][0]["phase"] == "segment"
    past = found[12]
    assert (past["state"], past["forwarded"], past["method"]) == ("past", False, "append")
    assert {found[24]["write"], found[26]["write"], found[18]["write"]} == \
        {"item", "del", "augassign"}
    assert 23 not in found  # `stats["norm"] = ...`: an overwrite


def checkpointed(function, *args, reentrant: bool = False):
    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=reentrant)


def test_a_cache_passed_in_is_extended_twice(fixture):
    x = torch.randn(1, 2, 171, 4, requires_grad=True)
    plain = DynamicCache()
    fixture.Block()(x, plain).sum().backward()
    assert plain.get_seq_length() == 171
    cache = DynamicCache()
    checkpointed(fixture.Block(), x, cache, reentrant=True).sum().backward()
    assert cache.get_seq_length() == 342
    # non-reentrant: the replay's keys are twice as long as the forward's saved ones
    with pytest.raises(torch.utils.checkpoint.CheckpointError, match="different metadata"):
        checkpointed(fixture.Block(), x, DynamicCache()).sum().backward()


def test_a_list_passed_in_gets_a_second_entry_and_a_copy_does_not(fixture):
    x = torch.randn(3, requires_grad=True)
    past: list = []
    checkpointed(fixture.append_past, x, past).sum().backward()
    assert len(past) == 2
    kept: list = []
    checkpointed(fixture.copied, x, kept).sum().backward()
    assert kept == []


def test_an_input_tensor_changed_in_place_gives_wrong_gradients_and_a_clone_does_not(fixture):
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    w0 = torch.randn(5, dtype=torch.float64)

    def grad(run) -> torch.Tensor:
        run().sum().backward()
        g = x.grad.clone()
        x.grad = None
        return g

    plain = grad(lambda: fixture.scale_input(x, w0.clone()))
    wrong = grad(lambda: checkpointed(fixture.scale_input, x, w0.clone(), reentrant=True))
    assert not torch.allclose(plain, wrong)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        grad(lambda: checkpointed(fixture.scale_input, x, w0.clone()))
    assert torch.allclose(grad(lambda: fixture.cloned(x)),
                          grad(lambda: checkpointed(fixture.cloned, x)))


SCRIPT = """\
import sys
import torch
from torch.utils.checkpoint import checkpoint


def block(x, past):
    past.append(x.detach())
    return (x * 2).sin()


def late(x, past):
    y = (x * 2).sin()
    past.append(y.detach())
    return y


past = []
x = torch.randn(8, requires_grad=True)
if sys.argv[1:] == ["late"]:
    out = checkpoint(late, x, past, use_reentrant=False)
else:
    out = checkpoint(block, x, past, use_reentrant=False)
out.sum().backward()
print(len(past), file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["early", "late"])
def test_dynamic_mode_confirms_a_second_mutation_and_clears_one_early_stop_skips(tmp_path,
                                                                                  variant):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    args = ["late"] if variant == "late" else []
    result = subprocess.run(
        [sys.executable, "-m", "ckptlint", "dynamic", "--format", "json", str(script), "--",
         sys.executable, str(script), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    findings = [f for f in json.loads(result.stdout) if f["code"] == "CKP402"]
    row = 7 if variant == "early" else 13
    finding = next(f for f in findings if f["location"]["row"] == row)
    if variant == "early":
        assert finding["verdict"] == "confirmed", finding
        assert "ran in the forward and again in the replay" in finding["evidence"]
        assert "the argument `past` was mutated in the forward and again" in finding["evidence"]
        assert result.returncode == 1
    else:  # the last tensor is saved before the append: early stop ends the replay there
        assert finding["verdict"] == "cleared", finding
        assert "never in the replay" in finding["evidence"]
    # ground truth printed by the script: how many entries the list ended with
    assert ("2" if variant == "early" else "1") in result.stderr.splitlines()
