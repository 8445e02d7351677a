"""`--format grouped`: findings grouped under their file name, as ruff's grouped output."""

from __future__ import annotations

from itertools import groupby

from ckptlint.findings import Finding
from ckptlint.output import OutputContext
from ckptlint.output.common import fix_marker
from ckptlint.output.text import site_suffix


def render(findings: list[Finding], context: OutputContext) -> str:
    out = []
    for filename, group in groupby(findings, key=lambda f: f.filename):
        in_file = list(group)
        width = max(len(f.place) - len(filename) - 1 for f in in_file)
        out.append(f"{filename}:\n")
        for f in in_file:
            where = f.place[len(filename) + 1:].ljust(width)
            out.append(f"  {where} {f.code} {fix_marker(f, context)}{f.message}"
                       f"{site_suffix(f)}\n")
        out.append("\n")
    return "".join(out)
