"""Helpers shared by several output formats (severity names, fixability, summaries)."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from ckptlint.findings import Finding
from ckptlint.output import OutputContext
from ckptlint.registry import rule_info

SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note"}
GITHUB_LEVELS = {"error": "error", "warning": "warning", "info": "notice"}
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def to_json(value, **options) -> str:
    """`json.dumps` keeping text as it is, except lone surrogates (the bytes of a file name
    that is not UTF-8), written as `\\udcXX` escapes: the report stays valid UTF-8, and
    `json.loads` then `os.fsencode` give the name's bytes back."""
    text = json.dumps(value, ensure_ascii=False, **options)
    return LONE_SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def in_cell(finding: Finding) -> str:
    """`cell 3: ` before the message of a notebook finding, for formats that can only point
    at the file (SARIF, GitHub); its rows count in that cell."""
    return f"cell {finding.cell}: " if finding.cell is not None else ""


def is_fixable(finding: Finding, context: OutputContext) -> bool:
    """Whether `--fix` would apply this finding's fix under the current settings.

    Safe fixes always count; unsafe ones only when `--unsafe-fixes` is given
    (`context.extra["unsafe_fixes"]`), as in ruff.
    """
    fix = finding.fix
    if fix is None:
        return False
    return fix.applicability == "safe" or bool(context.extra.get("unsafe_fixes"))


def fix_marker(finding: Finding, context: OutputContext) -> str:
    return "[*] " if is_fixable(finding, context) else ""


def statistics(findings: list[Finding], context: OutputContext) -> list[dict[str, Any]]:
    """One row per code: count, name, fixable count; most frequent first."""
    counts = Counter(f.code for f in findings)
    fixable = Counter(f.code for f in findings if is_fixable(f, context))
    rows: list[dict[str, Any]] = [{"code": code, "name": rule_info(code).name, "count": count,
             "fixable": fixable[code]}
            for code, count in counts.items()]
    rows.sort(key=lambda row: (-row["count"], row["code"]))
    return rows
