"""`--format json-lines`: one JSON object per line, each as in `--format json`."""

from __future__ import annotations

from ckptlint.findings import Finding
from ckptlint.output import OutputContext
from ckptlint.output.common import to_json


def render(findings: list[Finding], context: OutputContext) -> str:
    return "".join(to_json(f.to_json()) + "\n" for f in findings)
