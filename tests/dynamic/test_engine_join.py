"""`ckptlint dynamic` with the real static engine (no --findings)."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from conftest import PY, env_with_root

pytest.importorskip("torch")

SCRIPT = textwrap.dedent("""\
    import torch
    from torch.utils.checkpoint import checkpoint


    def block(x):
        return torch.tanh(x)


    x = torch.ones(3, requires_grad=True)
    checkpoint(block, x, use_reentrant=True).sum().backward()
    checkpoint(block, x, use_reentrant=False).sum().backward()
    """)


def test_real_engine_findings_get_verdicts(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = subprocess.run([PY, "-m", "ckptlint", "dynamic", "--format", "json", "train.py",
                           "--", PY, "train.py"], cwd=tmp_path, env=env_with_root(),
                          capture_output=True, text=True, timeout=240)
    findings = json.loads(proc.stdout)
    ckp101 = [f for f in findings if f["code"] == "CKP101"]
    assert ckp101 and ckp101[0]["verdict"] == "confirmed", (findings, proc.stderr[-2000:])
    assert ckp101[0]["location"]["row"] == 10
    assert "ran in reentrant mode" in ckp101[0]["evidence"]
    assert proc.returncode == 1
    from ckptlint.findings import Finding
    from ckptlint.output import OutputContext, render
    line = render("text", [Finding.from_json(ckp101[0])], OutputContext())
    assert "CKP101 [confirmed] " in line and line.rstrip().endswith(ckp101[0]["evidence"])
