"""The README's rule table ("What it finds"), generated from the registry.

The table sits between two marker comments in README.md; everything between them is
replaced. `--check` changes nothing and fails when the table is not what the registry gives.
"""

from __future__ import annotations

from pathlib import Path

from ckptlint.dev import DevError
from ckptlint.registry import FixKind, RuleInfo
from ckptlint.rule_pages import page_name

BEGIN = ("<!-- rule-table: generated from ckptlint/registry.py by "
         "`python -m ckptlint.dev rule-table`; edit the registry, not this table -->")
END = "<!-- /rule-table -->"
FIX_TEXT = {FixKind.NONE.value: "", FixKind.SAFE.value: "safe", FixKind.UNSAFE.value: "unsafe"}


def render(rules: dict[str, RuleInfo]) -> str:
    lines = ["| code | name | flags | severity | fix |", "|---|---|---|---|---|"]
    for info in rules.values():
        flags = info.summary if info.default_on else f"{info.summary} (off unless selected)"
        lines.append(f"| [{info.code}](rules/{page_name(info)}) | {info.name} | {flags} | "
                     f"{info.severity} | {FIX_TEXT[info.fix.value]} |")
    return "\n".join(lines) + "\n"


def with_table(readme: str, rules: dict[str, RuleInfo]) -> str:
    """README text with the table between the markers replaced."""
    start = readme.find(BEGIN)
    end = readme.find(END, start)
    if start < 0 or end < 0:
        raise DevError(f"README.md lacks the rule table markers `{BEGIN}` and `{END}`")
    return readme[: start + len(BEGIN)] + "\n\n" + render(rules) + "\n" + readme[end:]


def update(root: Path, rules: dict[str, RuleInfo], *, check: bool) -> bool:
    """Write the table into root/README.md (or, `check`, only compare); True when it was
    already current."""
    path = root / "README.md"
    text = path.read_text(encoding="utf-8")
    wanted = with_table(text, rules)
    if wanted == text:
        return True
    if not check:
        path.write_text(wanted, encoding="utf-8")
    return False
