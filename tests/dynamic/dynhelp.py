"""Helpers for dynamic-mode tests: findings from script markers, watched runs in parallel.

Scripts under scripts/ mark their checkpoint sites, targets and the findings the static rules
report there with trailing comments:

    def block(x):  # ckpt-target: A block          (target A: its def line and qualname)
        ...  # ckpt-finding: CKP201 A SCALE        (a finding on this line for site A, naming SCALE)
    out = checkpoint(block, x)  # ckpt-site: A     (the checkpoint call of site A)

Every scenario runs `python -m ckptlint dynamic --format json --findings F -- python SCRIPT`
as a real child process. A test names the scenarios it reads with
`@pytest.mark.scenarios(NAME, ...)`; those of the selected tests run three at a time from
the first test that reads one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from ckptlint.findings import Finding, Position, SiteRef, TargetRef
from tests import process_tree

SCRIPTS = Path(__file__).parent / "scripts"
ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable

_SITE = re.compile(r"#.*ckpt-site: (\w+)")
_TARGET = re.compile(r"# ckpt-target: (\w+) ([\w.]+)")
_FINDING = re.compile(r"ckpt-finding: (CKP\d{3}) (\w+)(?: ([\w.\[\]'\"]+))?")

# Hand-made findings carry the data the static rules attach; their message names nothing,
# so every verdict here comes from `data` (dynamic mode never reads the message).
MESSAGE = "a hazard (dynamic mode does not read this text)"
STATE_CODES = ("CKP201", "CKP204", "CKP401")


def finding_data(code: str, script: str, name: str | None, target: TargetRef | None,
                 site_row: int) -> dict[str, Any]:
    """What the rule of `code` puts in `data`, for a finding naming the state `name`."""
    if code in STATE_CODES:
        module = Path(script).stem
        owner, attribute = module, name or ""
        if name and name.startswith("self.") and target and "." in target.qualname:
            owner = f"{module}.{target.qualname.rsplit('.', 1)[0]}"
            attribute = name.split(".")[1]
        data: dict[str, Any] = {"state": name or "", "owner": owner, "attribute": attribute,
                                "changes": []}
        if code == "CKP204":
            data["condition"] = "state"
        if code == "CKP401":
            data.update(effect="write", write="augassign", target="attribute",
                        grad_guarded=False)
        return data
    return {
        "CKP101": {"api": "torch.utils.checkpoint.checkpoint", "mode": "reentrant",
                   "decided_by": "use_reentrant"},
        "CKP104": {"api": "transformers.PreTrainedModel.gradient_checkpointing_enable",
                   "mode": "reentrant", "versions": ">=4.35,<5.0.0", "version": "4.46.0",
                   "version_source": "config", "enabled_by": "gradient_checkpointing_enable",
                   "library": "transformers"},
        "CKP202": {"source": "os.getpid", "kind": "process-id"},
        "CKP203": {"expression": "h.sum() > 1.5", "branch": "if"},
        "CKP301": {"device": "DEVICE", "draws_random": False},
        "CKP302": {"rng": "self.drop", "draw": "module", "built": "nn.Dropout(0.5)",
                   "lost_by": "argument",
                   "checkpoint": {"filename": script, "row": site_row}},
        "CKP303": {"rng": "random.random", "draw": "python"},
    }[code]


def findings_for(script: str) -> list[Finding]:
    path = SCRIPTS / script
    lines = path.read_text().splitlines()
    sites: dict[str, tuple[int, int]] = {}
    targets: dict[str, TargetRef] = {}
    for row, line in enumerate(lines, 1):
        code = line.split("#")[0]
        if m := _SITE.search(line):
            col = len(code) - len(code.lstrip()) + 1
            call = re.search(r"(checkpoint\w*|ckpt|run|class)\b", code)
            sites[m.group(1)] = (row, call.start() + 1 if call else col)
        if m := _TARGET.search(line):
            targets[m.group(1)] = TargetRef(script, row, m.group(2))
    out = []
    for row, line in enumerate(lines, 1):
        m = _FINDING.search(line)
        if not m:
            continue
        code, label, name = m.group(1), m.group(2), m.group(3)
        site_row, site_col = sites[label]
        target = targets.get(label)
        site = SiteRef(script, site_row, site_col)
        if code.startswith("CKP1"):
            start, chain = Position(site_row, site_col), ()
        else:
            col = len(line) - len(line.lstrip()) + 1
            start, chain = Position(row, col), (target.qualname,) if target else ()
        out.append(Finding(code, MESSAGE, script, start, Position(start.row, start.column + 1),
                           site=site, chain=chain, target=target,
                           data=finding_data(code, script, name, target, site_row)))
    return out


@dataclass
class Result:
    rc: int
    findings: list[dict[str, Any]]
    stderr: str
    values: dict[str, Any] | None
    seconds: float = 0.0

    def by_code(self, code: str) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["code"] == code]

    def one(self, code: str) -> dict[str, Any]:
        found = self.by_code(code)
        assert len(found) == 1, (code, self.findings, self.stderr[-3000:])
        return found[0]


def env_with_root(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("CKPTLINT_DYNAMIC_OUT", None)
    env.update(extra or {})
    return env


def run_dynamic(script: str, args: tuple[str, ...] = (), options: tuple[str, ...] = (),
                findings: list[Finding] | None = None, env: dict[str, str] | None = None,
                timeout: float = 240, launcher: tuple[str, ...] = (),
                command: tuple[str, ...] | None = None, lint: bool = False) -> Result:
    """`ckptlint dynamic --findings F ... -- python [LAUNCHER...] SCRIPT ARGS...` in the
    scripts folder. F: `findings`, or those of SCRIPT's markers; with `lint`, no F: ckptlint
    lints SCRIPT itself. `command` replaces what follows `--`."""
    import time
    with tempfile.TemporaryDirectory(prefix="ckpt-test-") as tmp:
        out = os.path.join(tmp, "values.json")
        if lint:
            source = [str(SCRIPTS / script)]
        else:
            source = ["--findings", os.path.join(tmp, "findings.json")]
            found = findings_for(script) if findings is None else findings
            with open(source[1], "w") as handle:
                json.dump([f.to_json() for f in found], handle)
        cmd = [PY, "-m", "ckptlint", "dynamic", "--format", "json", *source, *options, "--",
               *(command or (PY, *launcher, script, *args))]
        start = time.monotonic()
        proc = process_tree.run(cmd, cwd=SCRIPTS,
                                env=env_with_root({"CKPT_TEST_OUT": out, **(env or {})}),
                                capture_output=True, text=True, timeout=timeout)
        seconds = time.monotonic() - start
        try:
            data = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError(f"no JSON on stdout (rc {proc.returncode}):\n{proc.stdout}\n"
                                 f"{proc.stderr[-4000:]}")
        values = None
        if os.path.exists(out):
            with open(out) as handle:
                values = json.load(handle)
        return Result(proc.returncode, data, proc.stderr, values, seconds)


# name -> (script, args, options)
SCENARIOS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "state_read_harmful": ("state_read.py", (), ()),
    "state_read_harmless": ("state_read.py", ("harmless",), ()),
    "state_read_reentrant": ("state_read.py", ("reentrant",), ()),
    "state_branch_harmful": ("state_branch.py", (), ()),
    "state_branch_harmless": ("state_branch.py", ("harmless",), ()),
    "data_branch_harmful": ("data_branch.py", (), ()),
    "data_branch_harmless": ("data_branch.py", ("harmless",), ()),
    "data_branch_hard_exit": ("data_branch.py", ("hard-exit",), ()),
    "data_branch_replay_now": ("data_branch.py", (), ("--replay-now",)),
    "rng_harmful": ("unpreserved_rng.py", (), ()),
    "rng_harmless": ("unpreserved_rng.py", ("harmless",), ()),
    "side_effect_harmful": ("side_effect.py", (), ()),
    "side_effect_harmless": ("side_effect.py", ("harmless",), ()),
    "side_effect_reentrant": ("side_effect.py", ("harmless", "reentrant"), ()),
    "reentrant_harmful": ("reentrant.py", (), ()),
    "reentrant_harmless": ("reentrant.py", ("harmless",), ()),
    "device": ("device_move.py", (), ()),
    "lifecycle_forward_only": ("lifecycle.py", ("no-grad",), ()),
    "lifecycle_replay_now": ("lifecycle.py", ("no-grad",), ("--replay-now",)),
    "lifecycle_crash": ("lifecycle.py", ("crash",), ()),
    "lifecycle_fail": ("lifecycle.py", ("fail",), ()),
    "wrappers": ("wrappers.py", (), ()),
    "wrappers_reentrant": ("wrappers.py", ("reentrant",), ()),
    "compiled": ("compiled.py", (), ()),
    "timeout": ("sleeper.py", (), ("--timeout", "60", "--progress-every", "2")),
    "forked_workers": ("forked_workers.py", (), ()),
    "late_divergence": ("many_calls.py", ("200", "150"), ()),
    "two_findings": ("two_findings.py", (), ()),
}


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def torch_has(module: str, name: str) -> bool:
    """Feature detection in a child (this process does not import torch for it); a `name`
    ending in `()` is called and must return true."""
    if name.endswith("()"):
        test = f"getattr(m, {name[:-2]!r}, lambda: False)()"
    else:
        test = f"hasattr(m, {name!r})"
    code = f"import {module} as m, sys; sys.exit(0 if {test} else 1)"
    return subprocess.run([PY, "-c", code], capture_output=True).returncode == 0


# Scenarios that need what this torch (or an optional package) may lack; the tests using
# them skip with the reason when it does.
OPTIONAL: dict[str, tuple[str, tuple[str, tuple[str, ...], tuple[str, ...]]]] = {
    "selective_harmless": ("torch.utils.checkpoint:create_selective_checkpoint_contexts",
                           ("selective.py", ("harmless",), ())),
    "selective_harmful": ("torch.utils.checkpoint:create_selective_checkpoint_contexts",
                          ("selective.py", (), ())),
    "fsdp_single_harmless": ("torch.distributed.fsdp:fully_shard",
                             ("fsdp_single.py", ("harmless",), ())),
    "fsdp_single_harmful": ("torch.distributed.fsdp:fully_shard", ("fsdp_single.py", (), ())),
    # transformers 5 disables its models on torch before 2.6
    "hf_enable": ("transformers.utils:is_torch_available()", ("hf_enable.py", (), ())),
}


def available(requirement: str) -> bool:
    if ":" in requirement:
        return torch_has(*requirement.split(":"))
    return has_module(requirement)


class Runs:
    """The named scenarios, started together (three at a time) when the pool is made."""

    def __init__(self, names):
        self.pool = ThreadPoolExecutor(max_workers=3)
        self.futures: dict[str, Future] = {}
        self.missing: dict[str, str] = {}
        checked: dict[str, bool] = {}
        for name in names:
            if name in OPTIONAL:
                requirement, spec = OPTIONAL[name]
                if requirement not in checked:
                    checked[requirement] = available(requirement)
                if not checked[requirement]:
                    needed = requirement.replace(":", ".")
                    self.missing[name] = (f"needs {needed} to be true here" if needed.endswith("()")
                                          else f"needs {needed}, which is missing here")
                    continue
            else:
                spec = SCENARIOS[name]
            self.futures[name] = self.pool.submit(run_dynamic, *spec)

    def __getitem__(self, name: str) -> Result:
        if name in self.missing:
            import pytest
            pytest.skip(self.missing[name])
        if name not in self.futures:
            raise KeyError(f"scenario {name!r} was not started: declare it on the test with "
                           f"@pytest.mark.scenarios({name!r})")
        return self.futures[name].result()


def plain_python(script: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a script unwatched and return what it reported."""
    with tempfile.TemporaryDirectory(prefix="ckpt-test-") as tmp:
        out = os.path.join(tmp, "values.json")
        proc = process_tree.run([PY, script, *args], cwd=SCRIPTS,
                                env=env_with_root({"CKPT_TEST_OUT": out, **(env or {})}),
                                capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(out) as handle:
            return json.load(handle)
