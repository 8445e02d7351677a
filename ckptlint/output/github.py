"""`--format github`: GitHub Actions workflow commands, one annotation per finding.

`::error title=ckptlint (CODE),file=F,line=L,col=C,endLine=L2,endColumn=C2::message`, with
`::error`/`::warning`/`::notice` from the severity table.
"""

from __future__ import annotations

from ckptlint.findings import Finding
from ckptlint.output import OutputContext
from ckptlint.output.common import GITHUB_LEVELS, in_cell
from ckptlint.output.text import site_suffix


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(findings: list[Finding], context: OutputContext) -> str:
    lines = []
    for f in findings:
        level = GITHUB_LEVELS[f.severity]
        properties = ",".join([
            f"title={escape_property(f'ckptlint ({f.code})')}",
            f"file={escape_property(f.filename)}",
            f"line={f.start.row}", f"col={f.start.column}",
            f"endLine={f.end.row}", f"endColumn={f.end.column}",
        ])
        message = f"{f.code} {in_cell(f)}{f.message}{site_suffix(f)}"
        lines.append(f"::{level} {properties}::{escape_data(message)}\n")
    return "".join(lines)
