"""`--format sarif`: SARIF 2.1.0, one run, the reported rules described from their pages."""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePath
from urllib.parse import quote

from ckptlint import __version__
from ckptlint.findings import Finding
from ckptlint.output import OutputContext
from ckptlint.output.common import SARIF_LEVELS, in_cell, to_json
from ckptlint.output.text import site_suffix
from ckptlint.registry import rule_info

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://pypi.org/project/ckptlint/"


def first_paragraph(markdown: str | None) -> str | None:
    if not markdown:
        return None
    paragraph = markdown.strip().split("\n\n", 1)[0]
    return re.sub(r"\s+", " ", paragraph).strip()


def rule_descriptor(code: str) -> dict:
    from ckptlint.rule_pages import help_uri, page_text, section

    info = rule_info(code)
    page = page_text(code)
    descriptor: dict = {
        "id": code,
        "name": info.name,
        "shortDescription": {"text": info.summary},
        "helpUri": help_uri(code),
        "defaultConfiguration": {"level": SARIF_LEVELS[info.severity]},
        "properties": {"tags": ["checkpointing"], "severity": info.severity},
    }
    what = first_paragraph(section(page, "What it does")) if page else None
    if what:
        descriptor["fullDescription"] = {"text": what}
    if page:
        descriptor["help"] = {"text": page, "markdown": page}
    else:
        descriptor["help"] = {"text": info.summary}
    return descriptor


def uri(filename: str) -> str:
    """A relative URI for a relative path (SARIF consumers resolve it from the checkout),
    percent-encoding the name's bytes (a name that is not UTF-8 too)."""
    path = PurePath(filename)
    if path.is_absolute():
        return Path(filename).as_uri()
    return quote(os.fsencode(path.as_posix()), safe="/")


def result(finding: Finding, rule_index: dict[str, int]) -> dict:
    region = {"startLine": finding.start.row, "startColumn": finding.start.column,
              "endLine": max(finding.end.row, finding.start.row),
              "endColumn": finding.end.column}
    if (finding.end.row, finding.end.column) < (finding.start.row, finding.start.column):
        region["endLine"], region["endColumn"] = finding.start.row, finding.start.column
    data: dict = {
        "ruleId": finding.code,
        "ruleIndex": rule_index[finding.code],
        "level": SARIF_LEVELS[finding.severity],
        "message": {"text": f"{in_cell(finding)}{finding.message}{site_suffix(finding)}"},
        "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": uri(finding.filename)},
            "region": region,
        }}],
    }
    if finding.site is not None and finding.chain:
        data["relatedLocations"] = [{
            "id": 1,
            "message": {"text": f"checkpointed here (via {' → '.join(finding.chain)})"},
            "physicalLocation": {"artifactLocation": {"uri": uri(finding.site.filename)},
                                 "region": {"startLine": finding.site.row,
                                            "startColumn": finding.site.column}},
        }]
    data["properties"] = {"data": finding.data}
    if finding.cell is not None:
        data["properties"]["cell"] = finding.cell
    if finding.fix is not None:
        data["properties"]["fix"] = finding.fix.to_json()
    return data


def render(findings: list[Finding], context: OutputContext) -> str:
    codes = sorted({f.code for f in findings})
    rule_index = {code: i for i, code in enumerate(codes)}
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "ckptlint",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": [rule_descriptor(code) for code in codes],
            }},
            "results": [result(f, rule_index) for f in findings],
            "columnKind": "unicodeCodePoints",
        }],
    }
    return to_json(log, indent=2) + "\n"
