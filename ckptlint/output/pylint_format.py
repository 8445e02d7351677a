"""`--format pylint`: `path:row: [CODE(name)] message`, as pylint's parseable output."""

from __future__ import annotations

from ckptlint.findings import Finding
from ckptlint.output import OutputContext


def render(findings: list[Finding], context: OutputContext) -> str:
    return "".join(f"{f.place.rsplit(':', 1)[0]}: [{f.code}({f.name})] {f.message}\n"
                   for f in findings)
