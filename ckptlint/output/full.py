"""`--format full`: each finding with the source lines around it, a caret line and the fix.

Colour (ANSI) only when `context.color` is set: the CLI sets it on a terminal and never
when `NO_COLOR` is in the environment.
"""

from __future__ import annotations

from ckptlint.findings import Finding
from ckptlint.output import OutputContext
from ckptlint.output.common import fix_marker, is_fixable
from ckptlint.output.text import site_suffix

CONTEXT_LINES = 1
MAX_SHOWN_LINES = 8


class Paint:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *codes: str) -> str:
        if not self.enabled or not text:
            return text
        return f"\x1b[{';'.join(codes)}m{text}\x1b[0m"


def split_lines(text: str) -> list[str]:
    """Physical lines as Python counts them (\\r\\n, \\r, \\n), without their endings."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def snippet(finding: Finding, lines: list[str], paint: Paint) -> list[str]:
    first = max(1, finding.start.row - CONTEXT_LINES)
    end_row = min(max(finding.end.row, finding.start.row), finding.start.row + MAX_SHOWN_LINES)
    last = min(len(lines), end_row + CONTEXT_LINES)
    if finding.start.row > len(lines):
        return []
    width = len(str(last))
    gutter = " " * width + " |"
    out = [paint(gutter, "1", "34")]
    for row in range(first, last + 1):
        line = lines[row - 1].expandtabs(1)
        out.append(f"{paint(str(row).rjust(width) + ' |', '1', '34')} {line}".rstrip())
        if finding.start.row <= row <= end_row:
            # (Columns past the line's end come only from a crafted cache: clamped.)
            start = min(finding.start.column, len(line) + 1) if row == finding.start.row else (
                len(line) - len(line.lstrip()) + 1)
            stop = (min(finding.end.column, len(line) + 1)
                    if row == finding.end.row and finding.end.row >= row else len(line) + 1)
            length = max(1, stop - start)
            carets = " " * (start - 1) + "^" * length
            label = f" {finding.code}" if row == finding.start.row else ""
            out.append(f"{paint(gutter, '1', '34')} {paint(carets + label, '1', '31')}")
    out.append(paint(gutter, "1", "34"))
    return out


def render(findings: list[Finding], context: OutputContext) -> str:
    paint = Paint(context.color)
    cache: dict[str, list[str] | None] = {}
    out = []
    for f in findings:
        header = (f"{paint(f.filename, '1')}{f.place[len(f.filename):]}: "
                  f"{paint(f.code, '1', '31')} {fix_marker(f, context)}{f.message}"
                  f"{site_suffix(f)}")
        out.append(header)
        key = f.filename if f.cell is None else f"{f.filename}:cell {f.cell}"
        if key not in cache:
            text = (context.read_source(f.filename) if f.cell is None
                    else context.read_cell(f.filename, f.cell))
            cache[key] = split_lines(text) if text is not None else None
        lines = cache[key]
        if lines is not None:
            out.extend(snippet(f, lines, paint))
        if f.fix is not None:
            note = "" if is_fixable(f, context) else (
                " (unsafe fix: enable with `--unsafe-fixes`)" if f.fix.applicability == "unsafe"
                else "")
            out.append(f"  = {paint('help', '1', '36')}: {f.fix.message}{note}")
        out.append("")
    return "".join(line + "\n" for line in out)
