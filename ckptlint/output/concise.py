"""`--format concise`: `path:row:col: CODE [*] message`, `[*]` marking fixable findings."""

from __future__ import annotations

from ckptlint.findings import Finding
from ckptlint.output import OutputContext
from ckptlint.output.common import fix_marker


def render(findings: list[Finding], context: OutputContext) -> str:
    return "".join(
        f"{f.place}: {f.code} {fix_marker(f, context)}"
        f"{f.message}\n" for f in findings)
