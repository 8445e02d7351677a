"""Output formats: one module per format, each exposing `render(findings, context) -> str`.

Modules are imported only when their format is asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ckptlint.findings import Finding

FORMATS: dict[str, str] = {
    "text": "ckptlint.output.text",
    "json": "ckptlint.output.json_format",
    "concise": "ckptlint.output.concise",
    "full": "ckptlint.output.full",
    "grouped": "ckptlint.output.grouped",
    "json-lines": "ckptlint.output.json_lines",
    "sarif": "ckptlint.output.sarif",
    "github": "ckptlint.output.github",
    "pylint": "ckptlint.output.pylint_format",
}


@dataclass
class OutputContext:
    """What a formatter may need beyond the findings themselves."""

    # Reads a linted file's text by its reported filename (for formats that show source).
    read_source: Callable[[str], str | None] = lambda filename: None
    color: bool = False
    show_fixes: bool = False
    extra: dict = field(default_factory=dict)


def render(format_name: str, findings: Sequence[Finding], context: OutputContext) -> str:
    module = importlib.import_module(FORMATS[format_name])
    return module.render(list(findings), context)
