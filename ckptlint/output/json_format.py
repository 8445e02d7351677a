"""`--format json`: one JSON array of findings (README.md, "JSON output and finding data")."""

from __future__ import annotations

from ckptlint.findings import Finding
from ckptlint.output import OutputContext
from ckptlint.output.common import to_json


def render(findings: list[Finding], context: OutputContext) -> str:
    return to_json([finding.to_json() for finding in findings], indent=2) + "\n"
