"""`# noqa` directives with flake8's semantics, and the file-level `# ckptlint: noqa`."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass, field

# After a `#`: `noqa`, `noqa: CKP101`, `noqa:CKP1,CKP2`, `NOQA : CKP` (flake8 accepts these).
NOQA = re.compile(
    r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]*(?:[,\s]+[A-Z]+[0-9]*)*))?", re.IGNORECASE)
NOQA_CODE_SEPARATOR = re.compile(r"[,\s]+")
NOQA_WITH_OUR_CODE = re.compile(r"noqa\s*:[^\n]*CKP", re.IGNORECASE)
FILE_NOQA = re.compile(r"#\s*ckptlint\s*:\s*noqa\b(?!\s*:)", re.IGNORECASE)
UNUSED_NOQA_MESSAGE = "unused `noqa` directive (unused: {codes:join})"


@dataclass
class Directive:
    row: int
    codes: tuple[str, ...] | None  # None: a bare noqa comment suppresses everything
    column: int  # 1-based column of the `#`
    used_codes: set[str] = field(default_factory=set)

    def covers(self, code: str) -> bool:
        return self.codes is None or any(code.startswith(c) for c in self.codes)


@dataclass
class Suppressions:
    directives: dict[int, Directive]
    # For each physical row, all rows of the logical line (statement) holding it.
    statement_rows: dict[int, range]
    file_noqa: bool

    def directive_for(self, row: int, code: str) -> Directive | None:
        rows = self.statement_rows.get(row, range(row, row + 1))
        for candidate in (row, *rows):
            directive = self.directives.get(candidate)
            if directive is not None and directive.covers(code):
                return directive
        return None


def comments_and_spans(text: str) -> tuple[list[tuple[int, int, str]], dict[int, range]]:
    """(row, column, text) of every comment token, and for each row of a statement spanning
    several rows, all its rows: one pass of the tokenizer (the costly part of a warm run)."""
    found: list[tuple[int, int, str]] = []
    spans: dict[int, range] = {}
    start = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            kind = token.type
            if kind == tokenize.COMMENT:
                found.append((token.start[0], token.start[1] + 1, token.string))
            if kind in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                        tokenize.ENCODING):
                if start is None:
                    continue
            if start is None:
                start = token.start[0]
            if kind in (tokenize.NEWLINE, tokenize.ENDMARKER):
                rows = range(start, token.end[0] + 1)
                if len(rows) > 1:
                    for row in rows:
                        spans[row] = rows
                start = None
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return found, spans


def statement_spans(text: str) -> dict[int, range]:
    return comments_and_spans(text)[1]


def parse_suppressions(text: str) -> Suppressions:
    directives: dict[int, Directive] = {}
    file_noqa = False
    found, spans = comments_and_spans(text)
    for row, column, comment in found:
        if FILE_NOQA.search(comment):
            file_noqa = True
            continue
        match = NOQA.search(comment)
        if match is None:
            continue
        codes = match.group("codes")
        parsed = tuple(c.upper() for c in NOQA_CODE_SEPARATOR.split(codes) if c) if codes else None
        directives[row] = Directive(row, parsed, column + match.start())
    return Suppressions(directives, spans if directives else {}, file_noqa)


def may_have_noqa(text: str) -> bool:
    lowered = text.lower()
    return "noqa" in lowered


def apply_suppressions(findings: list, sources: Mapping[str, str], ignore_noqa: bool,
                       report_unused: bool) -> list:
    """Drop findings that `# noqa` covers; with `report_unused`, add CKP902 for unused ones."""
    from ckptlint.findings import Finding, Position
    from ckptlint.messages import render

    wanted = {f.filename for f in findings}
    if report_unused:
        wanted |= {name for name, text in sources.items() if NOQA_WITH_OUR_CODE.search(text)}
    parsed = {name: parse_suppressions(sources[name]) for name in wanted
              if name in sources and may_have_noqa(sources[name])}
    kept = []
    for finding in findings:
        suppressions = parsed.get(finding.filename)
        if finding.code == "CKP999" or suppressions is None or ignore_noqa:
            kept.append(finding)
            continue
        if suppressions.file_noqa:
            continue
        directive = suppressions.directive_for(finding.start.row, finding.code)
        if directive is None:
            kept.append(finding)
        else:
            directive.used_codes.add(finding.code)
    if report_unused and not ignore_noqa:
        for name, suppressions in parsed.items():
            for directive in suppressions.directives.values():
                if directive.codes is None:
                    continue  # a bare noqa may serve other linters
                ours = [c for c in directive.codes if c.startswith("CKP")]
                unused = [c for c in ours if not any(u.startswith(c) for u in directive.used_codes)]
                if unused:
                    position = Position(directive.row, directive.column)
                    data = {"codes": unused}
                    kept.append(Finding("CKP902", render(UNUSED_NOQA_MESSAGE, data), name,
                                        position, position, data=data))
    return kept
