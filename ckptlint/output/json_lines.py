"""`--format json-lines`: one JSON object per line, each as in `--format json`."""

from __future__ import annotations

import json

from ckptlint.findings import Finding
from ckptlint.output import OutputContext


def render(findings: list[Finding], context: OutputContext) -> str:
    return "".join(json.dumps(f.to_json(), ensure_ascii=False) + "\n" for f in findings)
