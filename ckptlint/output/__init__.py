"""Output formats: one module per format, each exposing `render(findings, context) -> str`.

Modules are imported only when their format is asked for. A file name that is not UTF-8
reaches them as Python keeps it (its undecodable bytes as lone surrogates); `encode_report`
writes those back as the name's own bytes, and the JSON formats, which must be valid UTF-8,
escape them first (`common.to_json`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
    # Reads a notebook cell's code (as linted) by filename and cell number.
    read_cell: Callable[[str, int], str | None] = lambda filename, cell: None
    color: bool = False
    extra: dict = field(default_factory=dict)


def render(format_name: str, findings: Sequence[Finding], context: OutputContext) -> str:
    module = importlib.import_module(FORMATS[format_name])
    return module.render(list(findings), context)


def encode_report(text: str) -> bytes:
    """A rendered report as the bytes to write (UTF-8, file names as the file system has
    them), whatever the locale would do with it."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that is no file name's byte
        return text.encode("utf-8", "backslashreplace")
