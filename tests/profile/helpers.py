"""Shared by the profile tests: running `ckptlint profile` on the scripts in scripts/, and the
expected numbers computed independently (a plain run under `saved_tensors_hooks`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).parent / "scripts"
ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
MIB = 1024 * 1024


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for key in ("CKPTLINT_DYNAMIC_OUT", "CKPTLINT_DYNAMIC_OBSERVERS", "CKPTLINT_PROFILE_OUT"):
        env.pop(key, None)
    env.update(extra or {})
    return env


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str

    @property
    def records(self) -> list[dict[str, Any]]:
        try:
            return json.loads(self.stdout)
        except ValueError:
            raise AssertionError(f"no JSON (rc {self.rc}):\n{self.stdout}\n{self.stderr[-3000:]}")

    def site(self, marker: str, script: str = "encoder.py") -> dict[str, Any]:
        found = self.rows(marker, script)
        assert len(found) == 1, (marker, self.records, self.stderr[-3000:])
        return found[0]

    def rows(self, marker: str, script: str) -> list[dict[str, Any]]:
        at = row(marker, script)
        return [r for r in self.records if r["site"]["row"] == at
                and r["site"]["filename"] == script]


def row(marker: str, script: str = "encoder.py") -> int:
    for number, line in enumerate((SCRIPTS / script).read_text().splitlines(), 1):
        if f"# profile: {marker}" in line or f"# toy: {marker}" in line:
            return number
    raise KeyError(marker)


def profile(*args: str, command: tuple[str, ...] | None = None, timeout: float = 240,
            env: dict[str, str] | None = None) -> Run:
    cmd = [PY, "-m", "ckptlint", "profile", *args]
    if command is not None:
        cmd += ["--", *command]
    proc = subprocess.run(cmd, cwd=SCRIPTS, env=_env(env), capture_output=True, text=True,
                          timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def expected_bytes(fn, inputs, modules, *, kwargs=None) -> int:
    """Distinct storages a plain run saves for backward, minus inputs, params and buffers."""
    import torch
    storages: dict[int, tuple[int, Any]] = {}

    def pack(t):
        s = t.untyped_storage()
        storages[s.data_ptr()] = (s.nbytes(), t)     # keep t alive: no address reuse
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs, **(kwargs or {}))
    held = [*_tensors(inputs), *_tensors(kwargs or {}), *(p for m in modules for p in m.parameters()),
            *(b for m in modules for b in m.buffers())]
    excluded = {t.untyped_storage().data_ptr() for t in held}
    return sum(n for ptr, (n, _) in storages.items() if ptr not in excluded)


def _tensors(value):
    import torch
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def close_to(measured: int, expected: int) -> bool:
    return abs(measured - expected) <= 0.05 * expected
