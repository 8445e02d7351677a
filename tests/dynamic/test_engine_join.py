"""`ckptlint dynamic` with the real static engine (no --findings)."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from dynhelp import PY, env_with_root

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


@pytest.mark.slow
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


DRIVER = textwrap.dedent("""

    class Config:
        logit_scale = 1.0


    def schedule(step):
        return {"logit_scale": 1.0 + 0.5 * (step + 1)}


    torch.manual_seed(0)
    block = Block(Config())
    for step in range(2):
        train_step(block, torch.randn(4, 16, requires_grad=True), schedule, step)
    """)


@pytest.mark.slow
def test_rule_page_examples_under_dynamic_mode(tmp_path):
    """CKP501's page: the Example diverges (confirmed), the Use instead block does not."""
    from ckptlint.rule_pages import SOURCE_PAGES, code_blocks, section

    page = (SOURCE_PAGES / "CKP501-replay-divergence.md").read_text()
    results = {}
    for title in ("Example", "Use instead"):
        (tmp_path / "model.py").write_text(code_blocks(section(page, title))[0] + DRIVER)
        proc = subprocess.run([PY, "-m", "ckptlint", "dynamic", "--format", "json", "model.py",
                               "--", PY, "model.py"], cwd=tmp_path, env=env_with_root(),
                              capture_output=True, text=True, timeout=240)
        results[title] = (proc.returncode, json.loads(proc.stdout), proc.stderr)
    rc, found, err = results["Example"]
    assert rc == 1 and [f["code"] for f in found] == ["CKP501"], (found, err[-2000:])
    assert found[0]["verdict"] == "confirmed"
    assert "saved a different tanh output" in found[0]["evidence"]
    rc, found, err = results["Use instead"]
    assert rc == 0 and found == [], (found, err[-2000:])


@pytest.mark.slow
def test_reentrant_call_rejected_at_run_time_is_confirmed(tmp_path):
    (tmp_path / "kw.py").write_text(textwrap.dedent("""\
        import torch
        from torch.utils.checkpoint import checkpoint


        def block(x, scale=1.0):
            return torch.tanh(x) * scale


        x = torch.ones(3, requires_grad=True)
        checkpoint(block, x, use_reentrant=True, scale=2.0).sum().backward()
        """))
    proc = subprocess.run([PY, "-m", "ckptlint", "dynamic", "--format", "json", "kw.py", "--",
                           PY, "kw.py"], cwd=tmp_path, env=env_with_root(),
                          capture_output=True, text=True, timeout=240)
    found = {f["code"]: f for f in json.loads(proc.stdout)}
    assert found["CKP103"]["verdict"] == "confirmed", (found, proc.stderr[-2000:])
    assert "raised ValueError: Unexpected keyword arguments: scale" in found["CKP103"]["evidence"]
    assert found["CKP101"]["verdict"] == "unexercised"
    assert proc.returncode == 1
