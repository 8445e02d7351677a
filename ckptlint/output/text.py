"""flake8-style text: `path:row:col: CODE message`."""

from __future__ import annotations

from ckptlint.findings import Finding
from ckptlint.output import OutputContext


def site_suffix(finding: Finding) -> str:
    """` (checkpointed at FILE:ROW via A → B)` for findings inside a segment."""
    if finding.site is None or not finding.chain:
        return ""
    return f" (checkpointed at {finding.site.describe()} via {' → '.join(finding.chain)})"


def format_line(finding: Finding) -> str:
    verdict = f" [{finding.verdict}]" if finding.verdict else ""
    evidence = f": {finding.evidence}" if finding.evidence else ""
    return (
        f"{finding.place}: "
        f"{finding.code}{verdict} {finding.message}{site_suffix(finding)}{evidence}"
    )


def render(findings: list[Finding], context: OutputContext) -> str:
    return "".join(format_line(finding) + "\n" for finding in findings)
