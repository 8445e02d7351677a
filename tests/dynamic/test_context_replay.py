"""CKP206 in dynamic mode, end to end: the real static pass of a script, then the script
watched. The context's state is read at the start of the forward and of the replay."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

import pytest

from dynhelp import PY, SCRIPTS, env_with_root

pytest.importorskip("torch")

SCRIPT = "context_kernel.py"


def watched(*args: str) -> tuple[dict, dict]:
    """(the CKP206 finding with its verdict, what the script reported)."""
    with tempfile.TemporaryDirectory(prefix="ckpt-test-") as tmp:
        out = os.path.join(tmp, "values.json")
        proc = subprocess.run(
            [PY, "-m", "ckptlint", "dynamic", "--format", "json", SCRIPT,
             "--", PY, SCRIPT, *args],
            cwd=SCRIPTS, env=env_with_root({"CKPT_TEST_OUT": out}), capture_output=True,
            text=True, timeout=240)
        findings = json.loads(proc.stdout)
        with open(out) as handle:
            values = json.load(handle)
    [finding] = [f for f in findings if f["code"] == "CKP206"]
    return finding, values


def test_sdpa_kernel_left_before_the_backward_is_confirmed():
    finding, values = watched()
    assert values["error"] and "different metadata" in values["error"]
    assert finding["verdict"] == "confirmed", finding
    assert ("`torch.nn.attention.sdpa_kernel` changed between forward and backward "
            "(sdpa flash=False") in finding["evidence"]
    assert "math=True" in finding["evidence"]


@pytest.mark.slow
def test_backward_inside_the_block_is_cleared():
    finding, values = watched("harmless")
    assert values["error"] is None
    assert finding["verdict"] == "cleared", finding
    assert "`torch.nn.attention.sdpa_kernel` did not change between forward and replay" in \
        finding["evidence"]
