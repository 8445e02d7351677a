"""`--format json`: one JSON array of findings (the contract in DESIGN.md)."""

from __future__ import annotations

import json

from ckptlint.findings import Finding
from ckptlint.output import OutputContext


def render(findings: list[Finding], context: OutputContext) -> str:
    return json.dumps([finding.to_json() for finding in findings], indent=2,
                      ensure_ascii=False) + "\n"
