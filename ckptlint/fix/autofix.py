"""Applying fixes: `--fix`, `--unsafe-fixes`, `--diff`, and `--add-noqa`.

Rules build the edits (ckptlint/fix/edits.py); this module only applies them:

- a fix applies when it is safe, or unsafe and `--unsafe-fixes` is given;
- fixes whose edits overlap a fix already applied in this pass wait for the next pass;
  identical edits offered by several findings (one `partial(...)` used at several calls)
  are applied once, and every one of those findings counts as fixed;
- after each pass the fixed text is parsed again; a fix that would break the file is dropped
  and the file is left as it was (reported on stderr);
- the file is re-linted and fixed again until nothing changes (at most `MAX_PASSES`), so a
  second run finds nothing more to fix;
- files are written atomically (a temporary file in the same folder, then `os.replace`), in
  their own encoding (coding cookie, BOM) with their own line endings, mode and group; a
  symlink is written through to its target (once, when the link and the target are both
  linted); a file such a rename cannot replace faithfully is refused (`rewritable`).
"""

from __future__ import annotations

import codecs
import difflib
import io
import os
import re
import stat
import tokenize
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ckptlint.findings import Edit, Finding, Fix
from ckptlint.storage.atomic import write_atomic
from ckptlint.syntax.notebook import Notebook, is_notebook, read_notebook

MAX_PASSES = 10
LINE_BREAK = re.compile(r"\r\n|\r|\n")


class FixError(Exception):
    """Edits that cannot be applied to the text they were computed for."""


def applicable(fix: Fix | None, unsafe: bool) -> bool:
    return fix is not None and (fix.applicability == "safe" or unsafe)


def line_starts(text: str) -> list[int]:
    """Offsets where each physical line starts (Python's line breaks: \\r\\n, \\r, \\n)."""
    return [0, *(match.end() for match in LINE_BREAK.finditer(text))]


def physical_lines(text: str) -> list[str]:
    """The lines of `text` with their own line endings (no split on form feeds and such)."""
    starts = line_starts(text)
    lines = [text[start:end] for start, end in zip(starts, [*starts[1:], len(text)])]
    return lines if lines[-1] else lines[:-1]


def offset(starts: list[int], text: str, row: int, column: int) -> int:
    if not 1 <= row <= len(starts):
        raise FixError(f"row {row} is outside the file")
    line_end = starts[row] if row < len(starts) else len(text)
    position = starts[row - 1] + column - 1
    if column < 1 or position > line_end:
        raise FixError(f"column {column} is outside row {row}")
    return position


def newline_of(text: str) -> str:
    match = LINE_BREAK.search(text)
    return match.group() if match else "\n"


def apply_fixes(text: str, findings: Iterable[Finding], unsafe: bool
                ) -> tuple[str, list[Finding]]:
    """One pass: the text with non-overlapping applicable fixes applied, and the fixed findings."""
    candidates = [(f, f.fix) for f in findings
                  if f.fix is not None and applicable(f.fix, unsafe) and f.fix.edits]
    candidates.sort(key=lambda pair: (min(e.start for e in pair[1].edits), pair[0].code))
    starts = line_starts(text)
    newline = newline_of(text)
    taken: list[tuple[int, int]] = []  # applied (start, end) offsets
    applied: dict[tuple[Edit, ...], bool] = {}
    replacements: list[tuple[int, int, str]] = []
    fixed: list[Finding] = []
    for finding, fix in candidates:
        edits = tuple(sorted(set(fix.edits), key=lambda e: (e.start, e.end)))
        if edits in applied:
            fixed.append(finding)
            continue
        try:
            spans = [(offset(starts, text, e.start.row, e.start.column),
                      offset(starts, text, e.end.row, e.end.column), e.content) for e in edits]
        except FixError:
            continue
        if any(start > end for start, end, _ in spans) or overlaps(spans, taken):
            continue
        for start, end, content in spans:
            taken.append((start, end))
            replacements.append((start, end, content.replace("\n", newline)
                                 if newline != "\n" else content))
        applied[edits] = True
        fixed.append(finding)
    for start, end, content in sorted(replacements, key=lambda r: (r[0], r[1]), reverse=True):
        text = text[:start] + content + text[end:]
    return text, fixed


def overlaps(spans: list[tuple[int, int, str]], taken: list[tuple[int, int]]) -> bool:
    """Whether a span touches one taken already (two insertions at one point conflict too)."""
    for start, end, _ in spans:
        for other_start, other_end in taken:
            if start < other_end and other_start < end:
                return True
            if start == end and other_start <= start <= other_end:
                return True
            if other_start == other_end and start <= other_start <= end:
                return True
    return False


def reparses(text: str, filename: str) -> str | None:
    """None when the text parses, else the reason."""
    from ckptlint.syntax.source import SourceError, parse_text

    try:
        parse_text(text, filename)
    except SourceError as error:
        return str(error)
    return None


@dataclass
class FileFix:
    filename: str
    original: str
    text: str
    fixed: list[Finding] = field(default_factory=list)
    error: str | None = None

    @property
    def changed(self) -> bool:
        return self.text != self.original


Relint = Callable[[str, str], list[Finding]]


def fix_file(filename: str, text: str, findings: list[Finding], unsafe: bool,
             relint: Relint) -> tuple[FileFix, list[Finding]]:
    """Fix one file's text until nothing more applies; (the fix, the findings left)."""
    result = FileFix(filename, text, text)
    remaining = findings
    for _ in range(MAX_PASSES):
        new_text, fixed = apply_fixes(result.text, remaining, unsafe)
        if not fixed or new_text == result.text:
            break
        reason = reparses(new_text, filename)
        if reason is not None:
            result.error = f"fixes would break the file ({reason}); left unchanged"
            return FileFix(filename, text, text, error=result.error), findings
        result.text = new_text
        result.fixed.extend(fixed)
        remaining = relint(filename, new_text)
    return result, remaining


def fix_findings(findings: list[Finding], sources: Mapping[str, str], unsafe: bool,
                 relint: Relint) -> tuple[list[FileFix], list[Finding]]:
    """Fix every file that has an applicable fix; (per-file fixes, all findings left)."""
    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        by_file.setdefault(finding.filename, []).append(finding)
    fixes: list[FileFix] = []
    remaining: list[Finding] = []
    for filename, file_findings in by_file.items():
        text = sources.get(filename)
        if text is None or not any(applicable(f.fix, unsafe) for f in file_findings):
            remaining.extend(file_findings)
            continue
        file_fix, left = fix_file(filename, text, file_findings, unsafe, relint)
        fixes.append(file_fix)
        remaining.extend(left)
    remaining.sort(key=lambda f: f.sort_key)
    return fixes, remaining


# -- output and writing ------------------------------------------------------------------------
def unified_diff(file_fix: FileFix, notebook: Notebook | None = None) -> str:
    """The fix as a unified diff; for a notebook, one per changed cell (`nb.ipynb:cell 3`)."""
    name = file_fix.filename
    if notebook is None:
        return diff_text(file_fix.original, file_fix.text, name)
    before, after = notebook.split(file_fix.original), notebook.split(file_fix.text)
    return "".join(diff_text(before[cell.index], after[cell.index], f"{name}:cell {cell.number}")
                   for cell in notebook.cells if before[cell.index] != after[cell.index])


def diff_text(original: str, text: str, name: str) -> str:
    lines = difflib.unified_diff(physical_lines(original), physical_lines(text),
                                 fromfile=f"a/{name}", tofile=f"b/{name}")
    out = []
    for line in lines:
        ended = line.endswith(("\n", "\r"))
        out.append(line if ended else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def encode_like(original: bytes, text: str) -> bytes:
    """Encode `text` as the file's bytes were: its coding cookie or UTF-8, and its BOM."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(original).readline)
    bom = original.startswith(codecs.BOM_UTF8)
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    data = text.encode(encoding)
    return codecs.BOM_UTF8 + data if bom else data


class WriteError(Exception):
    """A fixed file that could not be written (exit 2)."""


class WriteRefused(WriteError):
    """A file left alone on purpose: replacing it by a new file (an atomic rename) would lose
    something the user has. Its findings stay (exit 1)."""


def write_fixes(file_fixes: list[FileFix]) -> list[tuple[FileFix, WriteError | None]]:
    """Write each fixed file, through symlinks to the file itself, and each file once: a second
    name of a file already written (a link and its target both linted) is left out of the
    answer. One (fix, None when written) per file."""
    done: set[Path] = set()
    outcomes: list[tuple[FileFix, WriteError | None]] = []
    for file_fix in file_fixes:
        try:
            target, info = rewritable(Path(file_fix.filename))
            if target in done:
                continue
            write_file(file_fix, target, info)
            done.add(target)
            outcomes.append((file_fix, None))
        except WriteError as error:
            outcomes.append((file_fix, error))
    return outcomes


def rewritable(path: Path) -> tuple[Path, os.stat_result]:
    """The file behind `path` (a symlink's final target) and its status; WriteRefused when a
    new file renamed over it could not keep what it is: the user cannot write it or create
    files in its folder, other hard links share it (they would keep the old text), or it
    belongs to another user or to a group the new file cannot be given."""
    try:
        target = path.resolve(strict=True)
        info = os.stat(target)
    except (OSError, RuntimeError) as error:
        raise WriteError(f"cannot write: {error}") from None
    shown = "it" if target == path.absolute() else f"its target {target}"
    if not stat.S_ISREG(info.st_mode):
        raise WriteRefused(f"{shown} is not a regular file")
    if not os.access(target, os.W_OK):
        raise WriteRefused(f"you cannot write {shown}")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise WriteRefused(f"you cannot create files in {target.parent} (a fix is written to "
                           "a new file there, then renamed over the old one)")
    if info.st_nlink > 1:
        raise WriteRefused(f"{shown} has other hard links ({info.st_nlink} names in all), "
                           "which would keep the old text")
    if info.st_uid != os.geteuid():
        raise WriteRefused(f"{shown} is owned by uid {info.st_uid}: a rewrite would make it "
                           "yours")
    if os.geteuid() != 0 and info.st_gid not in (os.getegid(), *os.getgroups()):
        raise WriteRefused(f"{shown} belongs to group {info.st_gid}, which a rewritten file "
                           "cannot be given")
    return target, info


def write_file(file_fix: FileFix, target: Path, info: os.stat_result) -> None:
    """Replace `target` by the fixed text, in the file's own encoding, mode and group."""
    from ckptlint.syntax.source import SourceError, decode_source

    try:
        original = target.read_bytes()
        if is_notebook(file_fix.filename):
            notebook = read_notebook(original)
            if notebook.code != file_fix.original:
                raise WriteError("the file changed while it was being fixed; left unchanged")
            new = notebook.with_code(file_fix.text).encode("utf-8")
        else:
            if decode_source(original) != file_fix.original:
                raise WriteError("the file changed while it was being fixed; left unchanged")
            new = encode_like(original, file_fix.text)
        write_atomic(target, new, mode=info.st_mode)
        if os.stat(target).st_gid != info.st_gid:
            os.chown(target, -1, info.st_gid)
            os.chmod(target, stat.S_IMODE(info.st_mode))  # chown may clear set-id bits
    except (OSError, SourceError, UnicodeEncodeError, SyntaxError) as error:
        raise WriteError(f"cannot write: {error}") from None


# -- --add-noqa ------------------------------------------------------------------------------
def add_noqa(text: str, findings: list[Finding]) -> tuple[str, int]:
    """Add `# noqa: CODE` for each finding to its statement's last line; (text, lines changed).

    An existing `# noqa: ...` on that line gains the new codes; a bare `# noqa` already
    covers everything and is left alone.
    """
    from ckptlint.engine.suppress import NOQA, parse_suppressions, statement_spans

    spans = statement_spans(text)
    suppressions = parse_suppressions(text)
    wanted: dict[int, list[str]] = {}
    for finding in findings:
        row = finding.start.row
        target = spans[row][-1] if row in spans else row
        directive = suppressions.directive_for(row, finding.code)
        if directive is not None:
            continue
        codes = wanted.setdefault(target, [])
        if finding.code not in codes:
            codes.append(finding.code)
    if not wanted:
        return text, 0
    starts = line_starts(text)
    lines = [text[start:end] for start, end in zip(starts, [*starts[1:], len(text)])]
    changed = 0
    for row, codes in wanted.items():
        if row > len(lines):
            continue
        line = lines[row - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body):]
        existing = suppressions.directives.get(row)
        if existing is not None and existing.codes is not None:
            start = existing.column - 1
            match = NOQA.match(body, start)
            if match is None:
                continue
            merged = [*existing.codes, *(c for c in codes if c not in existing.codes)]
            body = body[:match.start()] + f"# noqa: {', '.join(merged)}" + body[match.end():]
        elif existing is not None:
            continue
        else:
            body = f"{body.rstrip()}  # noqa: {', '.join(sorted(codes))}"
        lines[row - 1] = body + ending
        changed += 1
    return "".join(lines), changed
